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
/// because it was misspelled): the name written and its line and column (1-based).
pub fn misspelled(text: &str, missing: &str) -> Option<(String, usize, usize)> {
    let limit = (missing.chars().count() / 3).max(2);
    let mut best: Option<(usize, String, usize, usize)> = None;
    for (i, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        let Some((left, _)) = code.split_once(':') else {
            continue;
        };
        let name = left.trim().trim_start_matches(['(', ',']).trim();
        if name.is_empty()
            || name == missing
            || !name.chars().all(|c| c.is_alphanumeric() || c == '_')
        {
            continue;
        }
        let d = edit_distance(name, missing);
        if d <= limit && best.as_ref().is_none_or(|b| d < b.0) {
            let col = line.find(name).map_or(1, |c| line[..c].chars().count() + 1);
            best = Some((d, name.to_string(), i + 1, col));
        }
    }
    best.map(|(_, name, line, col)| (name, line, col))
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
