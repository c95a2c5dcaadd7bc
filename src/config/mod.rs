//! The user's configuration: key bindings and the theme, read from
//! `$XDG_CONFIG_HOME/copus/config.ron` (else `~/.config/copus/config.ron`) or the file given
//! with `--config FILE`. `copus config --print` writes the defaults in the same format.
//!
//! ```ron
//! (
//!     theme: light,
//!     keys: {
//!         quit: ["Q", "ctrl+c"],
//!         help: ["f1"],
//!     },
//! )
//! ```
//!
//! An action named in `keys` gets exactly the keys listed (its defaults are dropped); every
//! other action keeps its default keys. A key that would mean two actions where both apply is
//! an error naming the line.

pub mod keys;

use keys::{Action, Chord, Keymap, KeymapError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A built-in theme, by name (`theme: light` in the configuration file).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ThemeName {
    /// For dark 256-colour terminals (the default).
    #[default]
    Dark,
    /// The 16 ANSI colours only (follows the terminal's palette; light backgrounds, projectors).
    Light,
    /// The dark theme with a colour-blind-safe heatmap (blue → yellow).
    Colorblind,
}

/// The configuration file as written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// The theme.
    #[serde(default)]
    pub theme: ThemeName,
    /// Actions rebound: action → its keys (`"q"`, `"ctrl+c"`, `"shift+left"`, `"f1"`).
    #[serde(default, deserialize_with = "actions_once")]
    pub keys: BTreeMap<Action, Vec<String>>,
}

/// The `keys` map, refusing an action listed twice (a map keeps the last: the first list of
/// keys was dropped and the file called valid).
fn actions_once<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<Action, Vec<String>>, D::Error> {
    struct Once;
    impl<'de> serde::de::Visitor<'de> for Once {
        type Value = BTreeMap<Action, Vec<String>>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a map of actions to their keys")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut a: A,
        ) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some((action, keys)) = a.next_entry::<Action, Vec<String>>()? {
                if out.insert(action, keys).is_some() {
                    return Err(serde::de::Error::custom(format!(
                        "action '{}' is listed twice in keys: which keys are meant cannot be \
                         known (list its keys once)",
                        action.name()
                    )));
                }
            }
            Ok(out)
        }
    }
    d.deserialize_map(Once)
}

/// The configuration in force.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Config {
    /// The theme.
    pub theme: ThemeName,
    /// The key table with the user's bindings.
    pub keymap: Keymap,
    /// The file it came from, if any.
    pub source: Option<PathBuf>,
}

/// Why the configuration could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a valid configuration; `line` is 1-based.
    #[error("{path}:{line}: {msg}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Where.
        line: usize,
        /// What is wrong.
        msg: String,
    },
}

/// Largest configuration file read (a key table is a few kilobytes).
const MAX_BYTES: u64 = 1 << 20;

/// The default location: `$XDG_CONFIG_HOME/copus/config.ron`, else
/// `$HOME/.config/copus/config.ron`; `None` without either variable.
pub fn default_path() -> Option<PathBuf> {
    let base = match std::env::var_os("XDG_CONFIG_HOME") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from(std::env::var_os("HOME").filter(|h| !h.is_empty())?).join(".config"),
    };
    Some(base.join("copus").join("config.ron"))
}

/// The configuration from `explicit` (an error if it cannot be read), else from the default
/// location when a file is there, else the defaults.
pub fn load(explicit: Option<&Path>) -> Result<Config, ConfigError> {
    let path = match explicit {
        Some(p) => p.to_path_buf(),
        None => match default_path() {
            Some(p) if p.exists() => p,
            _ => return Ok(Config::default()),
        },
    };
    let text = crate::fsutil::read_capped(&path, MAX_BYTES).map_err(|source| ConfigError::Io {
        path: path.clone(),
        source,
    })?;
    let mut config = parse(&text).map_err(|(line, msg)| ConfigError::Invalid {
        path: path.clone(),
        line,
        msg,
    })?;
    config.source = Some(path);
    Ok(config)
}

/// Parse a configuration file's text; on error the 1-based line and what is wrong.
pub fn parse(text: &str) -> Result<Config, (usize, String)> {
    let file: ConfigFile =
        ron::from_str(text).map_err(|e| (e.span.start.line, e.code.to_string()))?;
    let mut keymap = Keymap::default();
    for (action, spelled) in &file.keys {
        let at = line_of_action(text, *action);
        let chords = spelled
            .iter()
            .map(|s| Chord::parse(s))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|msg| (at, msg))?;
        keymap
            .rebind(*action, chords)
            .map_err(|e| (at, e.to_string()))?;
    }
    if let Some(conflict) = keymap.conflict() {
        let at = match &conflict {
            KeymapError::Conflict { first, second, .. } => [first, second]
                .iter()
                .filter_map(|name| {
                    let action: Action = ron::from_str(name).ok()?;
                    file.keys
                        .contains_key(&action)
                        .then(|| line_of_action(text, action))
                })
                .max()
                .unwrap_or(1),
            _ => 1,
        };
        return Err((at, conflict.to_string()));
    }
    Ok(Config {
        theme: file.theme,
        keymap,
        source: None,
    })
}

/// The line naming `action` in a configuration file (1 when it cannot be found).
fn line_of_action(text: &str, action: Action) -> usize {
    let name = action.name();
    text.lines()
        .position(|l| {
            let t = l.trim_start();
            t.strip_prefix(name.as_str())
                .is_some_and(|rest| rest.trim_start().starts_with(':'))
        })
        .map_or(1, |i| i + 1)
}

/// The defaults as a configuration file (what `copus config --print` writes): the theme and
/// every action with its keys, each line of the key table as a comment above its actions.
pub fn defaults_text() -> String {
    let mut out = String::from(
        "// copus configuration: save as $XDG_CONFIG_HOME/copus/config.ron (or pass --config FILE).\n\
         // An action listed here gets exactly these keys; leave out what you keep as it is.\n\
         // Keys: a character (q, Q, ?), ctrl+/alt+/shift+ with left right up down home end pgup\n\
         // pgdn tab enter esc backspace space plus minus f1-f12.\n\
         (\n    // dark, light (the 16 ANSI colours, follows the terminal) or colorblind\n    theme: dark,\n    keys: {\n",
    );
    for binding in Keymap::default().bindings {
        if binding.actions.is_empty() {
            continue;
        }
        out.push_str(&format!("        // {}: {}\n", binding.label, binding.what));
        for (action, chords) in &binding.actions {
            let keys: Vec<String> = chords
                .iter()
                .map(|c| format!("{:?}", c.to_string()))
                .collect();
            out.push_str(&format!(
                "        {}: [{}],\n",
                action.name(),
                keys.join(", ")
            ));
        }
    }
    out.push_str("    },\n)\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use keys::{Key, Scope};

    #[test]
    fn the_printed_defaults_read_back_as_the_defaults() {
        let config = parse(&defaults_text()).expect("defaults parse");
        assert_eq!(config.keymap, Keymap::default());
        assert_eq!(config.theme, ThemeName::Dark);
    }

    #[test]
    fn a_rebound_quit_quits_and_the_old_key_does_not() {
        let (line, msg) = parse("(\n  keys: {\n    quit: [\"Q\"],\n    quit: [\"x\"],\n  },\n)")
            .expect_err("twice");
        assert!(
            msg.contains("'quit' is listed twice") && line >= 3,
            "{line}: {msg}"
        );
        let config = parse("(theme: light, keys: { quit: [\"Q\"] })").expect("parse");
        assert_eq!(config.theme, ThemeName::Light);
        let g = [Scope::Global];
        assert_eq!(
            config.keymap.action(Chord::char('Q'), &g),
            Some(Action::Quit)
        );
        assert_eq!(config.keymap.action(Chord::char('q'), &g), None);
        assert_eq!(
            config.keymap.action(Chord::ctrl(Key::Char('c')), &g),
            None,
            "the listed keys replace the defaults"
        );
    }

    #[test]
    fn errors_name_the_line() {
        let text = "(\n    keys: {\n        help: [\"f1\"],\n        quit: [\"x\"],\n    },\n)\n";
        let (line, msg) = parse(text).expect_err("x is explain's");
        assert_eq!(line, 4, "{msg}");
        assert!(
            msg.contains("`x`") && msg.contains("explain") && msg.contains("quit"),
            "{msg}"
        );
        let (line, msg) =
            parse("(\n  keys: {\n    quit: [\"hyper+q\"],\n  },\n)").expect_err("bad key");
        assert_eq!(line, 3, "{msg}");
        let (line, msg) = parse("(\n  theme: sepia,\n)").expect_err("bad theme");
        assert_eq!(line, 2, "{msg}");
        let (line, msg) =
            parse("(\n  keys: {\n    fly: [\"f\"],\n  },\n)").expect_err("bad action");
        assert_eq!(line, 3, "{msg}");
    }

    #[test]
    fn an_explicit_missing_file_is_an_error_naming_it() {
        let err = load(Some(Path::new("/nonexistent/copus.ron"))).expect_err("missing");
        assert!(err.to_string().contains("/nonexistent/copus.ron"), "{err}");
    }
}
