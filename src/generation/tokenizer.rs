//! Hugging Face's tokenizer (the `tokenizers` crate, the library behind
//! `transformers`' fast tokenizers) over a `tokenizer.json`, behind the
//! `tokenizers` feature: text to ids and back, errors as this crate's.

use crate::error::{Error, Result};
use std::path::Path;

const OP: &str = "Tokenizer";

/// A `tokenizer.json` loaded (see the [module docs](self)).
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
}

impl Tokenizer {
    /// Reads `path`, a `tokenizer.json` or a folder holding one.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Tokenizer> {
        let file = super::file_in(path.as_ref(), "tokenizer.json");
        let inner =
            tokenizers::Tokenizer::from_file(&file).map_err(|e| Error::file(OP, &file, e))?;
        Ok(Tokenizer { inner })
    }

    /// The ids of `text`, with the special tokens the tokenizer adds
    /// (a BOS for Llama) when `add_special_tokens`.
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>> {
        self.inner
            .encode(text, add_special_tokens)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| Error::arg(OP, format!("cannot encode {text:?}: {e}")))
    }

    /// The text of `ids`, special tokens left out when `skip_special_tokens`.
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String> {
        self.inner
            .decode(ids, skip_special_tokens)
            .map_err(|e| Error::arg(OP, format!("cannot decode {} ids: {e}", ids.len())))
    }

    /// The id of a token string (`"</s>"`), if the vocabulary has it.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }
}
