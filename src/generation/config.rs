//! A Hugging Face `config.json` as typed lookups: a missing required field
//! or one of the wrong type is an `Err` naming the field and the file; a
//! field the model code does not know is a warning, not a failure
//! (configs carry many fields a given model ignores).

use crate::error::{Error, Result};
use crate::nn::RopeScaling;
use serde_json::{Map, Value};
use std::path::Path;

const OP: &str = "ModelConfig";

/// A model's `config.json` (see the [module docs](self)).
///
/// ```
/// use tensorscope::generation::ModelConfig;
/// let c = ModelConfig::from_json(r#"{"hidden_size": 64, "rms_norm_eps": 1e-6, "torch_dtype": "float32"}"#)?;
/// assert_eq!(c.usize("hidden_size")?, 64);
/// assert_eq!(c.usize_or("num_key_value_heads", 4)?, 4);
/// assert!(c.usize("vocab_size").unwrap_err().to_string().contains("vocab_size"));
/// assert_eq!(c.unknown_keys(&["hidden_size", "rms_norm_eps"]), vec!["torch_dtype"]);
/// # Ok::<(), tensorscope::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct ModelConfig {
    map: Map<String, Value>,
    source: String,
}

impl ModelConfig {
    /// Reads `path`, a `config.json` or a folder holding one.
    pub fn from_file(path: impl AsRef<Path>) -> Result<ModelConfig> {
        let file = super::file_in(path.as_ref(), "config.json");
        let text = std::fs::read_to_string(&file).map_err(|e| Error::file(OP, &file, e))?;
        let mut c = ModelConfig::from_json(&text).map_err(|e| match e {
            Error::InvalidArgument { op, msg } => Error::InvalidArgument {
                op,
                msg: format!("{}: {msg}", file.display()),
            },
            e => e,
        })?;
        c.source = file.display().to_string();
        Ok(c)
    }

    /// Parses a JSON object.
    pub fn from_json(text: &str) -> Result<ModelConfig> {
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(map)) => Ok(ModelConfig {
                map,
                source: "config".into(),
            }),
            Ok(_) => Err(Error::arg(OP, "expected a JSON object")),
            Err(e) => Err(Error::arg(OP, format!("not valid JSON: {e}"))),
        }
    }

    fn bad(&self, key: &str, what: &str) -> Error {
        Error::arg(OP, format!("{}: field {key:?} {what}", self.source))
    }

    fn get(&self, key: &str) -> Option<&Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    /// Whether the field is present (and not `null`).
    pub fn has(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// A required non-negative integer.
    pub fn usize(&self, key: &str) -> Result<usize> {
        match self.get(key) {
            None => Err(self.bad(key, "is missing")),
            Some(v) => v
                .as_u64()
                .map(|x| x as usize)
                .ok_or_else(|| self.bad(key, &format!("must be a non-negative integer, got {v}"))),
        }
    }

    /// An optional non-negative integer, `default` when absent.
    pub fn usize_or(&self, key: &str, default: usize) -> Result<usize> {
        if self.has(key) {
            self.usize(key)
        } else {
            Ok(default)
        }
    }

    /// A required number.
    pub fn f64(&self, key: &str) -> Result<f64> {
        match self.get(key) {
            None => Err(self.bad(key, "is missing")),
            Some(v) => v
                .as_f64()
                .ok_or_else(|| self.bad(key, &format!("must be a number, got {v}"))),
        }
    }

    /// An optional number, `default` when absent.
    pub fn f64_or(&self, key: &str, default: f64) -> Result<f64> {
        if self.has(key) {
            self.f64(key)
        } else {
            Ok(default)
        }
    }

    /// An optional bool, `default` when absent.
    pub fn bool_or(&self, key: &str, default: bool) -> Result<bool> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v
                .as_bool()
                .ok_or_else(|| self.bad(key, &format!("must be true or false, got {v}"))),
        }
    }

    /// An optional string, `default` when absent.
    pub fn str_or(&self, key: &str, default: &str) -> Result<String> {
        match self.get(key) {
            None => Ok(default.to_string()),
            Some(v) => v
                .as_str()
                .map(str::to_string)
                .ok_or_else(|| self.bad(key, &format!("must be a string, got {v}"))),
        }
    }

    /// Token ids given as one integer or a list (`eos_token_id`); empty
    /// when absent.
    pub fn ids(&self, key: &str) -> Result<Vec<u32>> {
        let one = |v: &Value| {
            v.as_u64()
                .filter(|&x| x <= u32::MAX as u64)
                .map(|x| x as u32)
                .ok_or_else(|| self.bad(key, &format!("must be token ids, got {v}")))
        };
        match self.get(key) {
            None => Ok(Vec::new()),
            Some(Value::Array(a)) => a.iter().map(one).collect(),
            Some(v) => Ok(vec![one(v)?]),
        }
    }

    /// The fields not in `known`, sorted.
    pub fn unknown_keys(&self, known: &[&str]) -> Vec<String> {
        self.map
            .keys()
            .filter(|k| !known.contains(&k.as_str()))
            .cloned()
            .collect()
    }

    /// [`unknown_keys`](Self::unknown_keys), each printed to stderr as a
    /// warning (the config still loads).
    pub fn warn_unknown(&self, known: &[&str]) -> Vec<String> {
        let unknown = self.unknown_keys(known);
        for k in &unknown {
            eprintln!("warning: {}: unknown field {k:?} ignored", self.source);
        }
        unknown
    }

    /// RoPE's base and scaling from `rope_theta` and `rope_scaling`
    /// (transformers 4) or `rope_parameters` (transformers 5): `(theta,
    /// scaling)`, theta 10000 when absent. A `rope_type` other than
    /// default, linear and llama3 is an error naming it.
    pub fn rope(&self) -> Result<(f64, Option<RopeScaling>)> {
        let nested = self
            .get("rope_parameters")
            .or_else(|| self.get("rope_scaling"))
            .cloned();
        let params = match nested {
            None => None,
            Some(Value::Object(m)) => Some(ModelConfig {
                map: m,
                source: format!("{} (rope parameters)", self.source),
            }),
            Some(v) => {
                return Err(self.bad("rope_parameters", &format!("must be an object, got {v}")))
            }
        };
        let theta = match &params {
            Some(p) if p.has("rope_theta") => p.f64("rope_theta")?,
            _ => self.f64_or("rope_theta", 10_000.0)?,
        };
        let Some(p) = params else {
            return Ok((theta, None));
        };
        let kind = match p.str_or("rope_type", "")?.as_str() {
            "" => p.str_or("type", "default")?,
            k => k.to_string(),
        };
        let scaling = match kind.as_str() {
            "default" => None,
            "linear" => Some(RopeScaling::Linear {
                factor: p.f64("factor")?,
            }),
            "llama3" => Some(RopeScaling::Llama3 {
                factor: p.f64("factor")?,
                low_freq_factor: p.f64("low_freq_factor")?,
                high_freq_factor: p.f64("high_freq_factor")?,
                original_max_position_embeddings: p.usize("original_max_position_embeddings")?,
            }),
            other => {
                return Err(p.bad(
                    "rope_type",
                    &format!("{other:?} is not supported (default, linear and llama3 are)"),
                ))
            }
        };
        Ok((theta, scaling))
    }
}
