//! Unknown field names in RON text. Serde ignores fields it does not know, so a typo such as
//! `nodez: 64` silently keeps the default. [`unknown_field`] compares the names written in the
//! text with the names the parsed value serialises to (every field, defaults included), at
//! every level of nesting, without a `deny_unknown_fields` on each type.

use ron::Value;

/// A field written in the text that the type does not have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownField {
    /// Dotted path of the enclosing struct ("" at the top level).
    pub at: String,
    /// The name as written.
    pub name: String,
    /// The closest known field at that level, if one is close.
    pub nearest: Option<String>,
    /// 1-based line and column of the name in the text, where it can be found.
    pub position: Option<(usize, usize)>,
}

impl std::fmt::Display for UnknownField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = crate::validate::fields::escape(&self.name);
        match self.at.as_str() {
            "" => write!(f, "unknown field `{name}`")?,
            at => write!(f, "unknown field `{name}` in {at}")?,
        }
        match &self.nearest {
            Some(n) => write!(f, " (did you mean `{n}`?)"),
            None => Ok(()),
        }
    }
}

/// The first field of `text` that `parsed` (the value serde made of the same text) does not
/// have, or `None`.
pub fn unknown_field<T: serde::Serialize>(text: &str, parsed: &T) -> Option<UnknownField> {
    let written: Value = ron::from_str(text).ok()?;
    let known: Value = ron::from_str(&ron::to_string(parsed).ok()?).ok()?;
    let mut found = walk("", &written, &known)?;
    found.position = locate(text, &found.name);
    Some(found)
}

fn walk(at: &str, written: &Value, known: &Value) -> Option<UnknownField> {
    match (written, known) {
        (Value::Map(w), Value::Map(k)) => {
            let names: Vec<&str> = k
                .iter()
                .filter_map(|(key, _)| match key {
                    Value::String(s) => Some(s.as_str()),
                    _ => None,
                })
                .collect();
            for (key, wv) in w.iter() {
                let Value::String(name) = key else { continue };
                match k.get(key) {
                    Some(kv) => {
                        let sub = if at.is_empty() {
                            name.clone()
                        } else {
                            format!("{at}.{name}")
                        };
                        if let Some(f) = walk(&sub, wv, kv) {
                            return Some(f);
                        }
                    }
                    // Only struct-like maps (all keys are names) report unknown keys; a map
                    // with other keys is data.
                    None if names.len() == k.len() && !names.is_empty() => {
                        return Some(UnknownField {
                            at: at.to_owned(),
                            name: name.clone(),
                            nearest: nearest(name, &names),
                            position: None,
                        });
                    }
                    None => {}
                }
            }
            None
        }
        (Value::Seq(w), Value::Seq(k)) => w
            .iter()
            .zip(k)
            .enumerate()
            .find_map(|(i, (wv, kv))| walk(&format!("{at}[{i}]"), wv, kv)),
        (Value::Option(Some(w)), Value::Option(Some(k))) => walk(at, w, k),
        (Value::Option(Some(w)), k) => walk(at, w, k),
        (w, Value::Option(Some(k))) => walk(at, w, k),
        _ => None,
    }
}

/// The known name closest to `name` (edit distance at most a third of its length, and 2).
fn nearest(name: &str, known: &[&str]) -> Option<String> {
    let limit = (name.chars().count() / 3).max(2);
    known
        .iter()
        .map(|k| (edit_distance(name, k), *k))
        .filter(|(d, _)| *d <= limit)
        .min()
        .map(|(_, k)| k.to_owned())
}

/// Where `text` writes a field name close to `missing` (a required field RON reports as missing
/// because it was misspelled): the name written and its line and column (1-based). `at` is
/// where RON reported it (line, column: the end of the struct that lacks it); the keys of that
/// struct are searched first (`cluster: (hardware: …, nodez: 8)` names `nodez`, not a key of
/// another struct at a similar distance), then every key of the file.
pub fn misspelled(text: &str, missing: &str, at: (usize, usize)) -> Option<(String, usize, usize)> {
    let keys = keys_of(text);
    // Only the keys of the struct the field is missing from, where it can be told: a field of
    // another struct is no misspelling (a session without `model` was told "'nodes' is not a
    // field here: did you mean 'model'?", pointing into `cluster`).
    match enclosing_struct(text, at) {
        Some((open, close, depth)) => closest(
            keys.iter()
                .filter(|k| k.offset > open && k.offset < close && k.depth == depth),
            missing,
        ),
        None => closest(keys.iter(), missing),
    }
}

/// A `name:` written in RON text: the name, where it starts (byte offset, 1-based line and
/// column) and its depth in parentheses.
struct Key {
    name: String,
    offset: usize,
    line: usize,
    col: usize,
    depth: usize,
}

/// Every `identifier:` outside strings and comments, in order.
fn keys_of(text: &str) -> Vec<Key> {
    let mut keys = Vec::new();
    let (mut depth, mut line, mut line_start) = (0usize, 1usize, 0usize);
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if let Some(next) = past_literal(bytes, i, bytes.len()) {
            i = next;
            continue;
        }
        match bytes[i] {
            b'\n' => {
                line += 1;
                line_start = i + 1;
            }
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let start = i;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                let rest = text[i..].trim_start_matches([' ', '\t']);
                if rest.starts_with(':') && !rest.starts_with("::") {
                    keys.push(Key {
                        name: text[start..i].to_string(),
                        offset: start,
                        line,
                        col: text[line_start..start].chars().count() + 1,
                        depth,
                    });
                }
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    keys
}

/// Where scanning resumes when byte `i` starts a comment (`//`: at its newline) or a string
/// (just past its closing quote), never past `end`; `None` at any other byte.
fn past_literal(bytes: &[u8], i: usize, end: usize) -> Option<usize> {
    match bytes[i] {
        b'/' if bytes.get(i + 1) == Some(&b'/') => {
            let newline = bytes[i..end].iter().position(|b| *b == b'\n');
            Some(newline.map_or(end, |n| i + n))
        }
        b'"' => {
            let mut j = i + 1;
            while j < end && bytes[j] != b'"' {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            Some((j + 1).min(end))
        }
        _ => None,
    }
}

/// The struct that ends at (or just before) `at` (1-based line and column, where RON reports
/// a missing field): the byte offsets of its opening and closing parenthesis and the depth of
/// its own keys, when they can be found. One pass over the text.
fn enclosing_struct(text: &str, (line, col): (usize, usize)) -> Option<(usize, usize, usize)> {
    let line_start: usize = text
        .split_inclusive('\n')
        .take(line.checked_sub(1)?)
        .map(str::len)
        .sum();
    let line_text = text.get(line_start..)?.split('\n').next()?;
    let col_bytes: usize = line_text
        .chars()
        .take(col.saturating_sub(1))
        .map(char::len_utf8)
        .sum();
    let at = (line_start + col_bytes + 1).min(text.len());
    // RON points at the closing parenthesis, or just past the struct: step back to it.
    let close = text.get(..at)?.rfind(')')?;
    let bytes = text.as_bytes();
    let (mut open, mut i) = (Vec::new(), 0usize);
    while i < close {
        if let Some(next) = past_literal(bytes, i, close) {
            i = next;
            continue;
        }
        match bytes[i] {
            b'(' | b'[' | b'{' => open.push(i),
            b')' | b']' | b'}' => {
                open.pop();
            }
            _ => {}
        }
        i += 1;
    }
    let depth = open.len();
    open.pop().map(|o| (o, close, depth))
}

/// The key among `keys` closest to `missing` (edit distance at most a third of its length,
/// and 2), as (name, line, column).
fn closest<'a>(
    keys: impl Iterator<Item = &'a Key>,
    missing: &str,
) -> Option<(String, usize, usize)> {
    let limit = (missing.chars().count() / 3).max(2);
    keys.filter(|k| k.name != missing)
        .map(|k| (edit_distance(&k.name, missing), k))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| (k.name.clone(), k.line, k.col))
}

/// Line `line` (1-based) of `text` with a caret under column `col`, indented, for an error
/// that names a place in a file; empty when the line does not exist.
pub fn excerpt(text: &str, line: usize, col: usize) -> String {
    let Some(src) = line.checked_sub(1).and_then(|i| text.lines().nth(i)) else {
        return String::new();
    };
    let src = escape(src);
    let pad = " ".repeat(col.saturating_sub(1).min(src.chars().count()));
    format!("\n  {line:>4} | {src}\n       | {pad}^")
}

/// Levenshtein distance over chars.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Line and column (1-based) of `name` written as a field (`name` followed by `:`).
fn locate(text: &str, name: &str) -> Option<(usize, usize)> {
    for (i, line) in text.lines().enumerate() {
        let mut from = 0;
        while let Some(at) = line[from..].find(name) {
            let start = from + at;
            let end = start + name.len();
            let before_ok = line[..start]
                .chars()
                .next_back()
                .is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
            if before_ok && line[end..].trim_start().starts_with(':') {
                return Some((i + 1, line[..start].chars().count() + 1));
            }
            from = end;
        }
    }
    None
}

/// `s` with control characters (terminal escapes, newlines) written as `\u{..}` escapes, for
/// names from files that are printed to a terminal.
pub fn escape(s: &str) -> String {
    if !s.chars().any(char::is_control) {
        return s.to_owned();
    }
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_misspelt_key_is_found_in_the_struct_that_lacks_it() {
        // RON reports the missing field at the end of the struct (here line 3, column 45).
        let text =
            "(\n    model: Named(\"x\"),\n    cluster: (hardware: Named(\"h\"), nodez: 8),\n)";
        assert_eq!(
            misspelled(text, "nodes", (3, 45)),
            Some(("nodez".to_string(), 3, 37))
        );
        // Not `model` (as close to `nodes`), the first key of another line.
        let wrong =
            "(\n    model: Named(\"x\"),\n    cluster: (hardwar: Named(\"h\"), nodes: 8),\n)";
        assert_eq!(
            misspelled(wrong, "hardware", (3, 44)),
            Some(("hardwar".to_string(), 3, 15))
        );
        // A field of another struct is no misspelling: a session without `model` was told
        // "did you mean 'model'?" of `cluster`'s `nodes` (RON reports the missing field at the
        // closing parenthesis).
        let no_model = "(\n    name: \"x\",\n    cluster: (hardware: Named(\"h\"), nodes: 8),\n)";
        assert_eq!(misspelled(no_model, "model", (4, 1)), None);
        // A key in a string or a comment is no key.
        let quoted = "(\n  // nodez: 1\n  name: \"nodez: 2\",\n  cluster: (gpus: 8),\n)";
        assert_eq!(misspelled(quoted, "nodes", (4, 20)), None);
    }

    #[test]
    fn distance_and_nearest() {
        assert_eq!(edit_distance("nodez", "nodes"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(
            nearest("gpus_per_nod", &["nodes", "gpus_per_node"]),
            Some("gpus_per_node".into())
        );
        assert_eq!(nearest("zzzzzzzz", &["nodes"]), None);
    }

    #[test]
    fn escape_hides_terminal_sequences() {
        assert_eq!(escape("a\u{1b}[2Jb"), "a\\u{1b}[2Jb");
        assert_eq!(escape("plain"), "plain");
    }

    #[test]
    fn locate_finds_the_field_not_a_value() {
        let t = "(name: \"nodez\",\n  nodez: 3)";
        assert_eq!(locate(t, "nodez"), Some((2, 3)));
    }
}
