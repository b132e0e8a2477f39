//! The GPT of `examples/gpt.rs` (issue 17 item 8), shared with
//! `benches/e2e.rs`'s `gpt_train_step` row so that the benchmark times the
//! example's own model: token and position embeddings, pre-norm blocks of
//! RMSNorm, causal `MultiheadAttention` and a GELU MLP, a final RMSNorm and
//! the output layer tied to the token embedding.

use tensorscope::nn::{
    Embedding, KvCache, Linear, MhaForward, MhaOptions, Module, MultiheadAttention, RMSNorm,
};
use tensorscope::{DType, Device, Generator, Result, Tensor};

/// The model width.
pub const D: usize = 128;
/// Attention heads per block.
pub const HEADS: usize = 4;
/// Blocks.
pub const LAYERS: usize = 2;
/// The context: the sequence length of training and the longest sample.
pub const SEQ: usize = 128;

/// Prefixes every name of `m`'s parameters with `prefix.`.
fn named<'a>(prefix: &str, m: &'a dyn Module) -> Vec<(String, &'a Tensor)> {
    m.named_parameters()
        .into_iter()
        .map(|(n, t)| (format!("{prefix}.{n}"), t))
        .collect()
}

fn named_mut<'a>(prefix: &str, m: &'a mut dyn Module) -> Vec<(String, &'a mut Tensor)> {
    m.named_parameters_mut()
        .into_iter()
        .map(|(n, t)| (format!("{prefix}.{n}"), t))
        .collect()
}

/// One pre-norm block: attention, then the MLP, each added to its input.
pub struct Block {
    ln1: RMSNorm,
    /// The causal self-attention (its `new_kv_cache` makes a block's cache).
    pub attn: MultiheadAttention,
    ln2: RMSNorm,
    fc: Linear,
    proj: Linear,
}

impl Block {
    pub fn new(dev: Device) -> Result<Block> {
        let o = MhaOptions {
            batch_first: true,
            device: dev,
            ..Default::default()
        };
        let lin = |i, o| Linear::with_options(i, o, true, DType::F32, dev);
        Ok(Block {
            ln1: RMSNorm::with_options(&[D], None, true, DType::F32, dev)?,
            attn: MultiheadAttention::with_options(D, HEADS, o)?,
            ln2: RMSNorm::with_options(&[D], None, true, DType::F32, dev)?,
            fc: lin(D, 4 * D)?,
            proj: lin(4 * D, D)?,
        })
    }

    /// `x [B, T, D]`: causal self-attention over the sequence, or over the
    /// cache and the new positions.
    pub fn forward(&self, x: &Tensor, cache: Option<&mut KvCache>) -> Result<Tensor> {
        let h = self.ln1.forward(x)?;
        let a = match cache {
            Some(c) => self.attn.forward_cached(&h, c)?,
            None => {
                let causal = MhaForward {
                    is_causal: true,
                    ..Default::default()
                };
                self.attn.attend(&h, &h, &h, &causal)?.0
            }
        };
        let x = x.add(&a)?;
        let m = self
            .proj
            .forward(&self.fc.forward(&self.ln2.forward(&x)?)?.gelu()?)?;
        x.add(&m)
    }
}

/// The whole model.
pub struct Gpt {
    tok: Embedding,
    pos: Embedding,
    /// The blocks, in order.
    pub blocks: Vec<Block>,
    ln_f: RMSNorm,
}

impl Gpt {
    pub fn new(vocab: usize, dev: Device) -> Result<Gpt> {
        let mut g = Gpt {
            tok: Embedding::new(vocab, D)?,
            pos: Embedding::new(SEQ, D)?,
            blocks: (0..LAYERS)
                .map(|_| Block::new(dev))
                .collect::<Result<_>>()?,
            ln_f: RMSNorm::with_options(&[D], None, true, DType::F32, dev)?,
        };
        // GPT-2's initialisation of the embeddings: normal, std 0.02.
        for e in [&mut g.tok, &mut g.pos] {
            e.weight = Tensor::randn(e.weight.shape(), DType::F32, dev)?
                .mul_scalar(0.02)?
                .requires_grad_(true)?;
        }
        Ok(g)
    }

    /// Logits `[B, T, vocab]` of tokens `idx [B, T]` at positions
    /// `past..past + T`; with caches, each block attends its cache too.
    pub fn logits(
        &self,
        idx: &Tensor,
        past: usize,
        caches: Option<&mut [KvCache]>,
    ) -> Result<Tensor> {
        let t = idx.shape()[1];
        let positions = Tensor::arange(
            past as f64,
            (past + t) as f64,
            1.0,
            DType::I64,
            idx.device(),
        )?;
        let mut x = self.tok.forward(idx)?.add(&self.pos.forward(&positions)?)?;
        match caches {
            Some(cs) => {
                for (b, c) in self.blocks.iter().zip(cs.iter_mut()) {
                    x = b.forward(&x, Some(c))?;
                }
            }
            None => {
                for b in &self.blocks {
                    x = b.forward(&x, None)?;
                }
            }
        }
        // The output layer is the token embedding, transposed (tied).
        self.ln_f.forward(&x)?.matmul(&self.tok.weight.t()?)
    }
}

impl Module for Gpt {
    fn forward(&self, idx: &Tensor) -> Result<Tensor> {
        self.logits(idx, 0, None)
    }

    fn named_parameters(&self) -> Vec<(String, &Tensor)> {
        let mut v = named("tok", &self.tok);
        v.extend(named("pos", &self.pos));
        for (i, b) in self.blocks.iter().enumerate() {
            let p = |n: &str| format!("blocks.{i}.{n}");
            v.extend(named(&p("ln1"), &b.ln1));
            v.extend(named(&p("attn"), &b.attn));
            v.extend(named(&p("ln2"), &b.ln2));
            v.extend(named(&p("fc"), &b.fc));
            v.extend(named(&p("proj"), &b.proj));
        }
        v.extend(named("ln_f", &self.ln_f));
        v
    }

    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
        let mut v = named_mut("tok", &mut self.tok);
        v.extend(named_mut("pos", &mut self.pos));
        for (i, b) in self.blocks.iter_mut().enumerate() {
            let p = |n: &str| format!("blocks.{i}.{n}");
            v.extend(named_mut(&p("ln1"), &mut b.ln1));
            v.extend(named_mut(&p("attn"), &mut b.attn));
            v.extend(named_mut(&p("ln2"), &mut b.ln2));
            v.extend(named_mut(&p("fc"), &mut b.fc));
            v.extend(named_mut(&p("proj"), &mut b.proj));
        }
        v.extend(named_mut("ln_f", &mut self.ln_f));
        v
    }
}

/// The text as token ids, and the alphabet.
pub fn corpus() -> (Vec<i64>, Vec<char>) {
    let text = include_str!("../../data/guide.txt");
    let mut chars: Vec<char> = text.chars().collect();
    chars.sort_unstable();
    chars.dedup();
    let ids = text
        .chars()
        .map(|c| chars.binary_search(&c).unwrap_or(0) as i64)
        .collect();
    (ids, chars)
}

/// `batch` windows of `SEQ + 1` tokens from `data` at random offsets:
/// inputs `[batch, SEQ]` and next-token targets `[batch * SEQ]`.
pub fn windows(
    data: &[i64],
    batch: usize,
    g: &mut Generator,
    dev: Device,
) -> Result<(Tensor, Tensor)> {
    let mut x = Vec::with_capacity(batch * SEQ);
    let mut y = Vec::with_capacity(batch * SEQ);
    for _ in 0..batch {
        let at = (g.next_u64() % (data.len() - SEQ - 1) as u64) as usize;
        x.extend_from_slice(&data[at..at + SEQ]);
        y.extend_from_slice(&data[at + 1..at + SEQ + 1]);
    }
    Ok((
        Tensor::from_vec(x, &[batch, SEQ], dev)?,
        Tensor::from_vec(y, &[batch * SEQ], dev)?,
    ))
}
