//! The training text of the built-in trainer: public-domain English shipped in the repo
//! (`assets/data/corpus.txt`, described in `assets/data/README.md`), as character ids.

use super::TrainerError;

/// The bundled text, embedded at build time (about 33 KB).
pub const BUILTIN_TEXT: &str = include_str!("../../assets/data/corpus.txt");

/// A character-level corpus: the normalised text as ids into a sorted vocabulary.
#[derive(Debug, Clone)]
pub struct Corpus {
    vocab: Vec<char>,
    ids: Vec<u8>,
}

impl Corpus {
    /// The bundled public-domain text.
    pub fn builtin() -> Result<Self, TrainerError> {
        Self::from_text(BUILTIN_TEXT)
    }

    /// Normalise `text` (lower case, every run of whitespace becomes one space) and map it
    /// to ids. Fails on fewer than 2 distinct or more than 256 distinct characters, or on a
    /// text too short to train on (under 64 characters).
    pub fn from_text(text: &str) -> Result<Self, TrainerError> {
        let mut chars = Vec::with_capacity(text.len());
        let mut last_space = true;
        for c in text.chars().flat_map(char::to_lowercase) {
            if c.is_whitespace() {
                if !last_space {
                    chars.push(' ');
                }
                last_space = true;
            } else {
                chars.push(c);
                last_space = false;
            }
        }
        let mut vocab = chars.clone();
        vocab.sort_unstable();
        vocab.dedup();
        if chars.len() < 64 || vocab.len() < 2 || vocab.len() > 256 {
            return Err(TrainerError::Config(format!(
                "the training text needs at least 64 characters and 2 to 256 distinct ones \
                 (got {} characters, {} distinct)",
                chars.len(),
                vocab.len()
            )));
        }
        let ids = chars
            .iter()
            .map(|c| vocab.binary_search(c).map_or(0, |i| i as u8))
            .collect();
        Ok(Self { vocab, ids })
    }

    /// Number of distinct characters (the model's output classes).
    pub fn vocab_size(&self) -> usize {
        self.vocab.len()
    }

    /// The text as character ids.
    pub fn ids(&self) -> &[u8] {
        &self.ids
    }

    /// The vocabulary, sorted.
    pub fn vocab(&self) -> &[char] {
        &self.vocab
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_text_is_normalised_and_round_trips() {
        let c = Corpus::builtin().expect("bundled text");
        assert!(c.ids().len() > 30_000);
        assert!((30..=60).contains(&c.vocab_size()), "{}", c.vocab_size());
        let text: String = c.ids()[..11]
            .iter()
            .map(|&i| c.vocab()[i as usize])
            .collect();
        assert_eq!(text, "the declara");
        assert!(!c.vocab().contains(&'\n') && !c.vocab().contains(&'T'));
    }
}
