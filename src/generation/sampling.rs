//! Choosing the next token from a model's logits, as transformers'
//! `generate` does: the repetition penalty (a logits processor, applied in
//! greedy decoding too), then, when sampling, temperature, top-k and top-p
//! (its warpers, in that order), then a draw from the softmax; or the
//! argmax. The scores are processed in f32 with transformers' formulas and
//! tie rules, so the tokens kept are the same; the draw is from
//! tensorscope's own seeded generator, so a seed gives the same tokens on
//! every run but not PyTorch's (GUIDE 10).

use crate::dtype::DType;
use crate::error::{bail, Error, Result};
use crate::random::Generator;
use crate::tensor::Tensor;

const OP: &str = "Sampler";

/// How [`Sampler`] chooses (transformers' `GenerationConfig` names). The
/// default is greedy decoding.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SamplingOptions {
    /// Draw from the processed distribution (`false`: the argmax).
    pub do_sample: bool,
    /// Divides the scores before the draw (> 0; 1 leaves them).
    pub temperature: f64,
    /// Keep the `k` highest scores (ties with the `k`-th kept).
    pub top_k: Option<usize>,
    /// Keep the smallest set of highest scores whose probability reaches
    /// `p` (in `(0, 1]`; at least one token).
    pub top_p: Option<f64>,
    /// Scores of tokens already in the sequence (prompt included) are
    /// divided by it when positive and multiplied when negative (CTRL's
    /// penalty; 1: none).
    pub repetition_penalty: f64,
    /// The generator's seed.
    pub seed: u64,
}

impl Default for SamplingOptions {
    fn default() -> Self {
        SamplingOptions {
            do_sample: false,
            temperature: 1.0,
            top_k: None,
            top_p: None,
            repetition_penalty: 1.0,
            seed: 0,
        }
    }
}

/// Picks next tokens with [`SamplingOptions`], drawing from its own
/// generator (seeded from the options).
///
/// ```
/// use tensorscope::generation::{Sampler, SamplingOptions};
/// let mut greedy = Sampler::new(SamplingOptions::default())?;
/// assert_eq!(greedy.pick(&[0.1, 2.0, -1.0], &[])?, 1);
/// let o = SamplingOptions { do_sample: true, top_k: Some(1), seed: 7, ..Default::default() };
/// // top-k 1 leaves only the argmax to draw.
/// assert_eq!(Sampler::new(o)?.pick(&[0.1, 2.0, -1.0], &[])?, 1);
/// # Ok::<(), tensorscope::Error>(())
/// ```
#[derive(Debug)]
pub struct Sampler {
    o: SamplingOptions,
    rng: Generator,
}

impl Sampler {
    /// A sampler; options out of their domain are an `Err` naming them.
    pub fn new(o: SamplingOptions) -> Result<Sampler> {
        let bad = |what: String| -> Result<Sampler> { Err(Error::arg(OP, what)) };
        if !(o.repetition_penalty > 0.0 && o.repetition_penalty.is_finite()) {
            return bad(format!(
                "repetition_penalty must be a finite number > 0, got {}",
                o.repetition_penalty
            ));
        }
        if o.do_sample {
            if !(o.temperature > 0.0 && o.temperature.is_finite()) {
                return bad(format!(
                    "temperature must be a finite number > 0 when sampling, got {}",
                    o.temperature
                ));
            }
            if o.top_k == Some(0) {
                return bad("top_k must be at least 1".into());
            }
            if let Some(p) = o.top_p
                && !(p > 0.0 && p <= 1.0)
            {
                return bad(format!("top_p must be in (0, 1], got {p}"));
            }
        }
        Ok(Sampler {
            o,
            rng: Generator::new(o.seed),
        })
    }

    /// The options.
    pub fn options(&self) -> SamplingOptions {
        self.o
    }

    /// Applies the processors to one row of `scores` in place (what the
    /// draw or argmax then reads): the repetition penalty over the tokens
    /// of `history`, and when sampling temperature, top-k and top-p (the
    /// removed get `-inf`). Tokens of `history` outside the row are an error
    /// that leaves `scores` unchanged.
    pub fn process(&self, scores: &mut [f32], history: &[u32]) -> Result<()> {
        let o = &self.o;
        if o.repetition_penalty != 1.0 {
            let p = o.repetition_penalty as f32;
            // Each token once, however often it came (the history is short
            // beside the vocabulary: sorted, not a vocabulary-sized mask).
            let mut tokens = history.to_vec();
            tokens.sort_unstable();
            tokens.dedup();
            // Checked before any score changes (the largest comes last).
            if let Some(&t) = tokens.last()
                && t as usize >= scores.len()
            {
                bail!(Error::arg(
                    OP,
                    format!(
                        "token {t} of the history is outside the vocabulary of {}",
                        scores.len()
                    )
                ));
            }
            for t in tokens {
                let s = &mut scores[t as usize];
                *s = if *s < 0.0 { *s * p } else { *s / p };
            }
        }
        if !o.do_sample {
            return Ok(());
        }
        if o.temperature != 1.0 {
            let t = o.temperature as f32;
            scores.iter_mut().for_each(|s| *s /= t);
        }
        if let Some(k) = o.top_k {
            let k = k.min(scores.len());
            if k > 0 && k < scores.len() {
                let mut sorted = scores.to_vec();
                sorted.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a));
                let kth = sorted[k - 1];
                // transformers: remove what is strictly below the k-th score.
                scores
                    .iter_mut()
                    .filter(|s| **s < kth)
                    .for_each(|s| *s = f32::NEG_INFINITY);
            }
        }
        if let Some(p) = o.top_p {
            top_p(scores, p as f32);
        }
        Ok(())
    }

    /// The next token after `history` from one row of logits.
    pub fn pick(&mut self, logits: &[f32], history: &[u32]) -> Result<u32> {
        if logits.is_empty() {
            bail!(Error::arg(OP, "empty logits: a vocabulary of 0 tokens"));
        }
        let mut s = logits.to_vec();
        self.process(&mut s, history)?;
        if !self.o.do_sample {
            return Ok(argmax(&s));
        }
        let m = s.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        if m == f32::NEG_INFINITY || m.is_nan() {
            bail!(Error::arg(
                OP,
                "no token left to draw: every processed score is -inf or NaN"
            ));
        }
        let w: Vec<f64> = s.iter().map(|&x| ((x - m) as f64).exp()).collect();
        let total: f64 = w.iter().sum();
        let u = self.rng.next_f64() * total;
        let mut acc = 0.0;
        for (i, &wi) in w.iter().enumerate() {
            acc += wi;
            if u < acc && wi > 0.0 {
                return Ok(i as u32);
            }
        }
        // Rounding left u at the very top: the last token with weight.
        Ok(w.iter().rposition(|&x| x > 0.0).unwrap_or(0) as u32)
    }

    /// The next token of each sequence from logits `[B, V]` (any float
    /// dtype, any device), `histories[b]` being sequence `b`'s tokens so
    /// far. Greedy decoding without a penalty takes the argmax on the
    /// logits' device and copies `B` ids, not `B * V` scores.
    pub fn pick_batch(&mut self, logits: &Tensor, histories: &[Vec<u32>]) -> Result<Vec<u32>> {
        if logits.rank() != 2 || logits.shape()[0] != histories.len() || !logits.dtype().is_float()
        {
            bail!(Error::arg(
                OP,
                format!(
                    "expected float logits [B, V] for {} sequences, got {:?} {}",
                    histories.len(),
                    logits.shape(),
                    logits.dtype()
                )
            ));
        }
        if !self.o.do_sample && self.o.repetition_penalty == 1.0 {
            let ids = logits.argmax(-1, false)?.to_vec::<i64>()?;
            return Ok(ids.into_iter().map(|i| i as u32).collect());
        }
        let v = logits.shape()[1];
        let host = logits.to_dtype(DType::F32)?.to_vec::<f32>()?;
        histories
            .iter()
            .enumerate()
            .map(|(b, h)| self.pick(&host[b * v..(b + 1) * v], h))
            .collect()
    }
}

/// The first index of the largest score (torch.argmax's tie rule); NaN
/// counts as the largest, as in PyTorch.
fn argmax(s: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in s.iter().enumerate() {
        if x.is_nan() {
            return i as u32;
        }
        if x > s[best] {
            best = i;
        }
    }
    best as u32
}

/// transformers' `TopPLogitsWarper`: sorted ascending, the tokens whose
/// cumulative probability is `<= 1 - p` are removed, the highest kept.
fn top_p(scores: &mut [f32], p: f32) {
    let n = scores.len();
    let mut order: Vec<usize> = (0..n).collect();
    // A stable ascending sort, as torch.sort(descending=False) on CPU.
    order.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]));
    let m = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if m == f32::NEG_INFINITY {
        return;
    }
    let e: Vec<f32> = order.iter().map(|&i| (scores[i] - m).exp()).collect();
    let z: f32 = e.iter().sum();
    let mut cum = 0.0f32;
    let cut = 1.0 - p;
    for (r, &i) in order.iter().enumerate() {
        cum += e[r] / z;
        if cum <= cut && r + 1 < n {
            scores[i] = f32::NEG_INFINITY;
        }
    }
}
