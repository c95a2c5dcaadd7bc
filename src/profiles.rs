//! Built-in hardware and model profiles (the RON files under `assets/`, embedded so that the
//! binary finds them from any directory), and loading of profiles from user files.

use crate::perf::{HardwareProfile, ModelProfile};
use serde::de::DeserializeOwned;
use std::path::{Path, PathBuf};

/// Embedded hardware profiles: (name, RON text).
pub const BUILTIN_HARDWARE: &[(&str, &str)] = &[
    ("a100-80g", include_str!("../assets/hardware/a100-80g.ron")),
    (
        "h100-pcie",
        include_str!("../assets/hardware/h100-pcie.ron"),
    ),
    ("h100-sxm", include_str!("../assets/hardware/h100-sxm.ron")),
    (
        "h100-sxm-96g-500w",
        include_str!("../assets/hardware/h100-sxm-96g-500w.ron"),
    ),
    ("h200", include_str!("../assets/hardware/h200.ron")),
    ("h800", include_str!("../assets/hardware/h800.ron")),
    ("mi210", include_str!("../assets/hardware/mi210.ron")),
];

/// Embedded model profiles: (name, RON text).
pub const BUILTIN_MODELS: &[(&str, &str)] = &[
    (
        "deepseek-moe-16b",
        include_str!("../assets/models/deepseek-moe-16b.ron"),
    ),
    ("gpt-1.7b", include_str!("../assets/models/gpt-1.7b.ron")),
    ("gpt-119b", include_str!("../assets/models/gpt-119b.ron")),
    ("gpt-16b", include_str!("../assets/models/gpt-16b.ron")),
    ("gpt-177b", include_str!("../assets/models/gpt-177b.ron")),
    ("gpt-314b", include_str!("../assets/models/gpt-314b.ron")),
    ("gpt-32b", include_str!("../assets/models/gpt-32b.ron")),
    ("gpt-462b", include_str!("../assets/models/gpt-462b.ron")),
    ("gpt-7.1b", include_str!("../assets/models/gpt-7.1b.ron")),
    ("gpt-70b", include_str!("../assets/models/gpt-70b.ron")),
    ("llama-32b", include_str!("../assets/models/llama-32b.ron")),
    ("llama-3b", include_str!("../assets/models/llama-3b.ron")),
    ("llama-7b", include_str!("../assets/models/llama-7b.ron")),
    (
        "llama3-405b",
        include_str!("../assets/models/llama3-405b.ron"),
    ),
    (
        "llama3-70b",
        include_str!("../assets/models/llama3-70b.ron"),
    ),
    ("llama3-8b", include_str!("../assets/models/llama3-8b.ron")),
    (
        "mixtral-8x7b",
        include_str!("../assets/models/mixtral-8x7b.ron"),
    ),
];

/// Whether `name` is a built-in hardware profile's name (not a file path).
pub fn is_builtin_hardware(name: &str) -> bool {
    BUILTIN_HARDWARE.iter().any(|(n, _)| *n == name)
}

/// Whether `name` is a built-in model profile's name (not a file path).
pub fn is_builtin_model(name: &str) -> bool {
    BUILTIN_MODELS.iter().any(|(n, _)| *n == name)
}

/// Why a profile could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// Neither a built-in name nor an existing file.
    #[error("unknown {kind} profile '{name}'{hint} (built-in: {known}; or give a .ron file)")]
    Unknown {
        /// "hardware" or "model".
        kind: &'static str,
        /// What was asked for.
        name: String,
        /// ": did you mean 'NAME'?" where a built-in name is close, else empty.
        hint: String,
        /// Comma-separated built-in names.
        known: String,
    },
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A session file given where a profile was expected (`--model session.ron`).
    #[error(
        "{path}: a session file, not a {kind} profile; a session is the command's SESSION \
         argument (or `watch --session`), a {kind} a built-in name or a {kind} profile .ron"
    )]
    SessionNotProfile {
        /// "hardware" or "model".
        kind: &'static str,
        /// The file.
        path: PathBuf,
    },
    /// The RON text does not describe a profile.
    #[error("{origin}:{line}:{col}: {msg}")]
    Parse {
        /// File path or "built-in NAME".
        origin: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        col: usize,
        /// What is wrong.
        msg: String,
    },
}

/// Parse RON text, naming `origin` and the position on error.
/// A field the profile type does not have is an error naming the nearest known field.
pub fn parse_ron<T: DeserializeOwned + serde::Serialize>(
    text: &str,
    origin: &str,
) -> Result<T, ProfileError> {
    // Every message with the line it is about and a caret, as a session's.
    let excerpt = |line: usize, col: usize| crate::validate::fields::excerpt(text, line, col);
    let value: T = ron::from_str(text).map_err(|e| {
        let (mut line, mut col) = (e.span.start.line, e.span.start.col);
        let mut msg = e.code.to_string();
        // A required field misspelled reads as missing ("missing field named `top_k` in
        // `MoeSpec`", the caret at the struct's end): the name written is named, as a
        // session's.
        if let ron::Error::MissingStructField { field, .. } = &e.code {
            msg = format!("missing field '{field}'");
            if let Some((written, l, c)) =
                crate::validate::fields::misspelled(text, field, (line, col))
            {
                msg = format!("'{written}' is not a field here: did you mean '{field}'? ({msg})");
                (line, col) = (l, c);
            }
        }
        ProfileError::Parse {
            origin: origin.to_string(),
            line,
            col,
            msg: format!("{msg}{}", excerpt(line, col)),
        }
    })?;
    if let Some(u) = crate::validate::fields::unknown_field(text, &value) {
        let (line, col) = u.position.unwrap_or((1, 1));
        return Err(ProfileError::Parse {
            origin: origin.to_string(),
            line,
            col,
            msg: format!(
                "{u}{}",
                u.position.map(|(l, c)| excerpt(l, c)).unwrap_or_default()
            ),
        });
    }
    Ok(value)
}

fn load<T: DeserializeOwned + serde::Serialize>(
    kind: &'static str,
    table: &[(&str, &str)],
    name_or_path: &str,
    base: &Path,
) -> Result<T, ProfileError> {
    if let Some((name, text)) = table.iter().find(|(n, _)| *n == name_or_path) {
        return parse_ron(text, &format!("built-in {kind} {name}"));
    }
    // Relative to `base`, which for the command line is the working directory: "." adds
    // nothing to the path a user gave (errors then name it as given, not "././x.ron").
    let path = if base == Path::new(".") {
        Path::new(name_or_path).to_path_buf()
    } else {
        base.join(name_or_path)
    };
    if path.extension().is_some_and(|e| e == "ron") || path.exists() {
        let text = crate::fsutil::read_capped(&path, MAX_PROFILE_BYTES).map_err(|source| {
            ProfileError::Io {
                path: path.clone(),
                source,
            }
        })?;
        return parse_ron(&text, &path.display().to_string()).map_err(|e| {
            let t = text.as_str();
            if t.contains("cluster:") && t.contains("source:") {
                ProfileError::SessionNotProfile { kind, path }
            } else {
                e
            }
        });
    }
    let names: Vec<&str> = table.iter().map(|(n, _)| *n).collect();
    Err(ProfileError::Unknown {
        kind,
        name: name_or_path.to_string(),
        hint: did_you_mean(name_or_path, &names)
            .map(|s| format!(": did you mean {s}?"))
            .unwrap_or_default(),
        known: names.join(", "),
    })
}

/// The built-in names `asked` most likely meant, quoted ("'llama3-8b'", "'h100-sxm' or
/// 'h100-pcie'"): the same name in another case, else the names it begins (up to three), else
/// the one within a small edit distance.
fn did_you_mean(asked: &str, names: &[&str]) -> Option<String> {
    let lower = asked.to_lowercase();
    let quote = |n: &[&str]| {
        n.iter()
            .map(|n| format!("'{n}'"))
            .collect::<Vec<_>>()
            .join(" or ")
    };
    if let Some(same) = names.iter().find(|n| n.to_lowercase() == lower) {
        return Some(quote(&[same]));
    }
    let mut starting: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| !lower.is_empty() && n.starts_with(lower.as_str()))
        .collect();
    if (1..=3).contains(&starting.len()) {
        starting.sort_by_key(|n| n.len());
        return Some(quote(&starting));
    }
    let limit = (lower.chars().count() / 3).clamp(1, 2);
    names
        .iter()
        .map(|n| (crate::validate::fields::edit_distance(n, &lower), *n))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, n)| quote(&[n]))
}

/// Largest profile file read, bytes (the built-in ones are under 2 KB).
pub const MAX_PROFILE_BYTES: u64 = 1 << 20;

/// A hardware profile by built-in name or by path (relative to `base`).
pub fn hardware(name_or_path: &str, base: &Path) -> Result<HardwareProfile, ProfileError> {
    load("hardware", BUILTIN_HARDWARE, name_or_path, base)
}

/// A model profile by built-in name or by path (relative to `base`).
pub fn model(name_or_path: &str, base: &Path) -> Result<ModelProfile, ProfileError> {
    load("model", BUILTIN_MODELS, name_or_path, base)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_profile_parses_and_is_named_like_its_file() {
        for (name, _) in BUILTIN_HARDWARE {
            let hw = hardware(name, Path::new(".")).expect("built-in hardware parses");
            assert_eq!(&hw.name, name);
            assert!(hw.peak_flops > 1e14 && hw.hbm_bytes > 1e10);
        }
        for (name, _) in BUILTIN_MODELS {
            let m = model(name, Path::new(".")).expect("built-in model parses");
            assert_eq!(&m.name, name);
            assert_eq!(m.hidden % m.heads, 0);
            assert_eq!(m.heads % m.kv_heads, 0);
        }
    }

    #[test]
    fn unknown_names_list_the_builtins() {
        let err = hardware("tpu-v9", Path::new(".")).expect_err("unknown");
        let msg = err.to_string();
        assert!(msg.contains("tpu-v9") && msg.contains("h100-sxm"), "{msg}");
    }

    #[test]
    fn parse_errors_name_the_position() {
        let err = parse_ron::<HardwareProfile>("(name: \"x\",\n peak_flops: oops)", "f.ron")
            .expect_err("bad");
        let msg = err.to_string();
        assert!(msg.starts_with("f.ron:2:"), "{msg}");
    }

    /// A required field misspelled is named where it is written, with the field meant (it
    /// read "Unexpected missing field named `top_k` in `MoeSpec`", the caret at the end).
    #[test]
    fn a_misspelled_required_field_is_named() {
        let text = BUILTIN_MODELS
            .iter()
            .find(|(n, _)| *n == "mixtral-8x7b")
            .map(|(_, t)| t.replace("top_k:", "topk:"))
            .expect("mixtral");
        let msg = parse_ron::<ModelProfile>(&text, "m.ron")
            .expect_err("misspelled")
            .to_string();
        assert!(
            msg.contains("'topk' is not a field here: did you mean 'top_k'?"),
            "{msg}"
        );
        assert!(!msg.contains("MoeSpec"), "{msg}");
    }
}
