//! Autoregressive generation over any model that runs a step with a cache
//! ([`CausalLm`]): a prompt's prefill, then one token at a time, chosen by
//! a [`Sampler`] (greedy, temperature, top-k, top-p, repetition penalty,
//! seeded); Hugging Face `config.json` reading ([`ModelConfig`]); and,
//! with the `tokenizers` feature, Hugging Face's own tokenizer over a
//! `tokenizer.json` ([`Tokenizer`]).
//!
//! The model owns nothing per request: [`generate`] asks it for a cache
//! sized to the prompt plus `max_new_tokens` once, so decoding writes into
//! preallocated buffers ([`KvCache`](crate::nn::KvCache)) and frees them
//! all when it returns.

mod config;
mod sampling;
#[cfg(feature = "tokenizers")]
mod tokenizer;

pub use config::ModelConfig;
pub use sampling::{Sampler, SamplingOptions};
#[cfg(feature = "tokenizers")]
pub use tokenizer::Tokenizer;

use crate::autograd::no_grad;
use crate::device::Device;
use crate::error::{bail, Error, Result};
use crate::tensor::Tensor;
use std::time::{Duration, Instant};

const OP: &str = "generate";

/// `path` itself, or `path/name` when `path` is a folder (a model folder
/// holds config.json and tokenizer.json).
fn file_in(path: &std::path::Path, name: &str) -> std::path::PathBuf {
    if path.is_dir() {
        path.join(name)
    } else {
        path.to_path_buf()
    }
}

/// A decoder-only language model as [`generate`] drives it.
pub trait CausalLm {
    /// What the model keeps between steps (its layers' key/value caches).
    type Cache;

    /// A cache for `batch` sequences of up to `max_len` positions.
    fn new_cache(&self, batch: usize, max_len: usize) -> Result<Self::Cache>;

    /// The logits `[B, T, V]` (or `[B, 1, V]`, the last position's only)
    /// of the ids `[B, T]` (i64, on the model's device) that follow the
    /// positions the cache holds; the step's keys and values go into it.
    fn forward(&self, ids: &Tensor, cache: &mut Self::Cache) -> Result<Tensor>;

    /// The device the ids go to.
    fn device(&self) -> Device;
}

/// The options of [`generate`] (transformers' `GenerationConfig` names).
#[derive(Clone, Debug, Default)]
pub struct GenerateOptions {
    /// Tokens to generate at most, per sequence.
    pub max_new_tokens: usize,
    /// How each token is chosen (default: greedy).
    pub sampling: SamplingOptions,
    /// A sequence stops after producing one of these.
    pub eos_token_ids: Vec<u32>,
}

/// What [`generate`] produced.
#[derive(Clone, Debug)]
pub struct Generated {
    /// The new tokens of each sequence (an end token included, if one came).
    pub tokens: Vec<Vec<u32>>,
    /// The prompt's forward (and the first token's choice).
    pub prefill: Duration,
    /// The steps after it.
    pub decode: Duration,
    /// Forward steps after the prefill.
    pub steps: usize,
}

impl Generated {
    /// Tokens per second of the decode steps (after the prefill), over the
    /// whole batch.
    pub fn decode_tokens_per_second(&self) -> f64 {
        let n = self.steps * self.tokens.len();
        if self.decode.is_zero() {
            0.0
        } else {
            n as f64 / self.decode.as_secs_f64()
        }
    }
}

/// Generates up to `o.max_new_tokens` tokens after each prompt (all of one
/// length; a batch of different lengths needs padding and a mask, which
/// this loop does not do), calling `on_token(sequence, token)` as each
/// is chosen. Runs under `no_grad`. The cache is made once, for the prompt
/// and the new tokens, and dropped on return.
///
/// ```
/// use tensorscope::generation::{generate, CausalLm, GenerateOptions};
/// use tensorscope::{Device, Result, Tensor};
/// /// A "model" whose logits favour the token after the last one.
/// struct Next;
/// impl CausalLm for Next {
///     type Cache = ();
///     fn new_cache(&self, _: usize, _: usize) -> Result<()> { Ok(()) }
///     fn forward(&self, ids: &Tensor, _: &mut ()) -> Result<Tensor> {
///         let t = ids.shape()[1];
///         let last = ids.narrow(1, t - 1, 1)?.contiguous()?.to_vec::<i64>()?;
///         let next: Vec<i64> = last.iter().map(|x| (x + 1) % 10).collect();
///         let next = Tensor::from_vec(next, &[last.len(), 1], Device::Cpu)?;
///         next.one_hot(Some(10))?.to_dtype(tensorscope::DType::F32)
///     }
///     fn device(&self) -> Device { Device::Cpu }
/// }
/// let o = GenerateOptions { max_new_tokens: 4, eos_token_ids: vec![9], ..Default::default() };
/// let out = generate(&Next, &[vec![5, 6]], &o, |_, _| {})?;
/// assert_eq!(out.tokens, vec![vec![7, 8, 9]]); // stopped at the end token
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub fn generate<M: CausalLm>(
    model: &M,
    prompts: &[Vec<u32>],
    o: &GenerateOptions,
    mut on_token: impl FnMut(usize, u32),
) -> Result<Generated> {
    let b = prompts.len();
    let l = prompts.first().map_or(0, Vec::len);
    if b == 0 || l == 0 || prompts.iter().any(|p| p.len() != l) {
        bail!(Error::arg(
            OP,
            format!(
                "expected at least one prompt, all of one length > 0; got lengths {:?}",
                prompts.iter().map(Vec::len).collect::<Vec<_>>()
            )
        ));
    }
    let mut sampler = Sampler::new(o.sampling)?;
    let dev = model.device();
    let mut histories: Vec<Vec<u32>> = prompts.to_vec();
    let mut tokens = vec![Vec::new(); b];
    let mut done = vec![false; b];
    let ids_tensor = |rows: &[Vec<u32>], t: usize| -> Result<Tensor> {
        let flat: Vec<i64> = rows
            .iter()
            .flat_map(|r| r[r.len() - t..].iter().map(|&x| x as i64))
            .collect();
        Tensor::from_vec(flat, &[b, t], Device::Cpu)?.to_device(dev)
    };
    let start = Instant::now();
    no_grad(|| {
        let mut cache = model.new_cache(b, l + o.max_new_tokens)?;
        let (mut prefill, mut steps) = (Duration::ZERO, 0);
        let mut step_input = ids_tensor(&histories, l)?;
        for i in 0..o.max_new_tokens {
            let logits = model.forward(&step_input, &mut cache)?;
            let last = last_position(&logits, b)?;
            let next = sampler.pick_batch(&last, &histories)?;
            for (s, &t) in next.iter().enumerate() {
                if done[s] {
                    continue;
                }
                tokens[s].push(t);
                on_token(s, t);
                done[s] = o.eos_token_ids.contains(&t);
            }
            for (h, &t) in histories.iter_mut().zip(&next) {
                h.push(t);
            }
            if i == 0 {
                prefill = start.elapsed();
            } else {
                steps += 1;
            }
            if done.iter().all(|&d| d) || i + 1 == o.max_new_tokens {
                break;
            }
            step_input = ids_tensor(&histories, 1)?;
        }
        let total = start.elapsed();
        Ok(Generated {
            tokens,
            prefill,
            decode: total.saturating_sub(prefill),
            steps,
        })
    })
}

/// The last position's logits `[B, V]` of a step's `[B, T, V]`.
fn last_position(logits: &Tensor, b: usize) -> Result<Tensor> {
    let s = logits.shape();
    if logits.rank() != 3 || s[0] != b || s[1] == 0 || !logits.dtype().is_float() {
        bail!(Error::arg(
            OP,
            format!(
                "the model's forward must give float logits [B, T, V] with B = {b} and T > 0, got {:?} {}",
                logits.shape(),
                logits.dtype()
            )
        ));
    }
    // A view: the sampler reads it on the device (argmax) or widens it once.
    logits.narrow(1, s[1] - 1, 1)?.squeeze_dim(1)
}
