//! `MultiheadAttention` (PyTorch's `nn.MultiheadAttention`) over
//! [`scaled_dot_product_attention`](super::scaled_dot_product_attention),
//! with grouped-query heads as an option and a preallocated key/value
//! cache for generation ([`KvCache`]).

use super::kv_cache::KvCache;
use super::{init, Linear, Module};
use crate::autograd::is_grad_enabled;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{bail, Error, Result};
use crate::ops::attention::{scaled_dot_product_attention_with, SdpaOptions};
use crate::tensor::Tensor;

const OP: &str = "MultiheadAttention";

/// The construction options of [`MultiheadAttention`] (PyTorch's keyword
/// arguments; the default is PyTorch's: no dropout, biases, inputs
/// `[L, B, E]` (`batch_first: false`), f32 on the CPU, as many key/value
/// heads as query heads).
#[derive(Clone, Copy, Debug)]
pub struct MhaOptions {
    /// Dropout on the attention weights in training mode.
    pub dropout: f64,
    /// Biases on the input and output projections.
    pub bias: bool,
    /// Inputs and outputs `[B, L, E]` instead of `[L, B, E]`.
    pub batch_first: bool,
    /// The parameters' dtype (a float).
    pub dtype: DType,
    /// The parameters' device.
    pub device: Device,
    /// Grouped-query attention: `Hkv` key/value heads, a divisor of the
    /// query heads `H` (`None`: `H`, PyTorch's layer). With fewer, the
    /// key and value projections are `[Hkv hd, E]` each, so
    /// `in_proj_weight` is `[E + 2 Hkv hd, E]`, and attention reads each
    /// key/value head for its `H / Hkv` query heads in place.
    pub num_kv_heads: Option<usize>,
}

impl Default for MhaOptions {
    fn default() -> Self {
        MhaOptions {
            dropout: 0.0,
            bias: true,
            batch_first: false,
            dtype: DType::F32,
            device: Device::Cpu,
            num_kv_heads: None,
        }
    }
}

/// The per-call arguments of [`MultiheadAttention::attend`] (PyTorch's
/// `forward` keywords). **`need_weights` is `false` by default** (PyTorch:
/// `True`, which makes every call materialise the `[B, H, L, S]` weights;
/// GUIDE 10, deviation 20).
#[derive(Clone, Copy, Debug)]
pub struct MhaForward<'a> {
    /// `[B, S]` (or `[S]` unbatched): bool, `true` where a key is padding
    /// and ignored; or float, added to the scores.
    pub key_padding_mask: Option<&'a Tensor>,
    /// `[L, S]` or `[B * H, L, S]`: bool, `true` where attention is **not**
    /// allowed (PyTorch's convention for this module, the opposite of
    /// `scaled_dot_product_attention`'s); or float, added to the scores.
    pub attn_mask: Option<&'a Tensor>,
    /// Causal attention: query `i` sees keys `j <= i` (combined with the
    /// masks above when they are given).
    pub is_causal: bool,
    /// Also return the attention weights (after dropout, as PyTorch does).
    pub need_weights: bool,
    /// Average the returned weights over the heads (`[B, L, S]`) instead
    /// of `[B, H, L, S]`.
    pub average_attn_weights: bool,
}

impl Default for MhaForward<'_> {
    fn default() -> Self {
        MhaForward {
            key_padding_mask: None,
            attn_mask: None,
            is_causal: false,
            need_weights: false,
            average_attn_weights: true,
        }
    }
}

/// Multi-head attention: `out_proj(concat_h(attention(q W_q^h, k W_k^h,
/// v W_v^h)))`, PyTorch's parameters and names (`in_proj_weight [3E, E]`,
/// `in_proj_bias [3E]`, `out_proj.weight [E, E]`, `out_proj.bias [E]`) and
/// initialisation (xavier-uniform input projection, zero biases).
///
/// [`Module::forward`] is self-attention without masks; [`attend`](Self::attend)
/// takes query, key, value and masks; [`forward_cached`](Self::forward_cached)
/// appends to a [`KvCache`] for generation.
///
/// ```
/// use tensorscope::nn::{MhaOptions, Module, MultiheadAttention};
/// use tensorscope::{DType, Device, Tensor};
/// let mha = MultiheadAttention::with_options(16, 4, MhaOptions { batch_first: true, ..Default::default() })?;
/// let x = Tensor::randn(&[2, 5, 16], DType::F32, Device::Cpu)?;
/// assert_eq!(mha.forward(&x)?.shape(), &[2, 5, 16]);
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub struct MultiheadAttention {
    /// `[3E, E]` (`[E + 2 Hkv hd, E]` with grouped-query heads): the
    /// query, key and value projections stacked.
    pub in_proj_weight: Tensor,
    /// `[3E]` (`[E + 2 Hkv hd]`), if the layer has biases.
    pub in_proj_bias: Option<Tensor>,
    /// The output projection `[E, E]`.
    pub out_proj: Linear,
    num_heads: usize,
    num_kv_heads: usize,
    dropout: f64,
    batch_first: bool,
    training: bool,
}

impl MultiheadAttention {
    /// `embed_dim` split over `num_heads` heads, PyTorch's defaults.
    pub fn new(embed_dim: usize, num_heads: usize) -> Result<MultiheadAttention> {
        MultiheadAttention::with_options(embed_dim, num_heads, MhaOptions::default())
    }

    /// With options.
    pub fn with_options(
        embed_dim: usize,
        num_heads: usize,
        o: MhaOptions,
    ) -> Result<MultiheadAttention> {
        let kv = check_heads(embed_dim, num_heads, o.num_kv_heads)?;
        let rows = embed_dim + 2 * kv * (embed_dim / num_heads);
        if !(0.0..=1.0).contains(&o.dropout) {
            bail!(Error::arg(
                OP,
                format!(
                    "dropout probability has to be between 0 and 1, but got {}",
                    o.dropout
                )
            ));
        }
        (|| {
            let mut w = Tensor::empty(&[rows, embed_dim], o.dtype, o.device)?;
            init::xavier_uniform_(&mut w, 1.0)?;
            let bias = if o.bias {
                Some(Tensor::zeros(&[rows], o.dtype, o.device)?.requires_grad_(true)?)
            } else {
                None
            };
            let mut out_proj =
                Linear::with_options(embed_dim, embed_dim, o.bias, o.dtype, o.device)?;
            if let Some(b) = out_proj.bias.as_mut() {
                init::zeros_(b)?;
            }
            Ok(MultiheadAttention {
                in_proj_weight: w.requires_grad_(true)?,
                in_proj_bias: bias,
                out_proj,
                num_heads,
                num_kv_heads: kv,
                dropout: o.dropout,
                batch_first: o.batch_first,
                training: true,
            })
        })()
        .map_err(|e: Error| e.reported_as(OP))
    }

    /// A layer over the tensors given: `in_proj_weight [3E, E]`,
    /// `in_proj_bias [3E]` (`E + 2 Hkv hd` rows with
    /// [`num_kv_heads`](MhaOptions::num_kv_heads)), `out_proj` `[E, E]`;
    /// used as they are.
    pub fn from_parts(
        in_proj_weight: Tensor,
        in_proj_bias: Option<Tensor>,
        out_proj: Linear,
        num_heads: usize,
        o: MhaOptions,
    ) -> Result<MultiheadAttention> {
        let e = out_proj.out_features();
        let kv = check_heads(e, num_heads, o.num_kv_heads)?;
        let rows = e + 2 * kv * (e / num_heads);
        if in_proj_weight.shape() != [rows, e] || out_proj.in_features() != e {
            bail!(Error::shape(
                OP,
                in_proj_weight.shape(),
                out_proj.weight.shape(),
                format!(
                    "in_proj_weight must be [E + 2 Hkv hd, E] = [{rows}, {e}] and out_proj [E, E]"
                )
            ));
        }
        if in_proj_bias.as_ref().is_some_and(|b| b.shape() != [rows]) {
            bail!(Error::arg(OP, format!("in_proj_bias must be [{rows}]")));
        }
        Ok(MultiheadAttention {
            in_proj_weight,
            in_proj_bias,
            out_proj,
            num_heads,
            num_kv_heads: kv,
            dropout: o.dropout,
            batch_first: o.batch_first,
            training: true,
        })
    }

    /// `E`.
    pub fn embed_dim(&self) -> usize {
        self.out_proj.out_features()
    }

    /// `H`.
    pub fn num_heads(&self) -> usize {
        self.num_heads
    }

    /// `Hkv`: the key/value heads (`H` unless grouped-query).
    pub fn num_kv_heads(&self) -> usize {
        self.num_kv_heads
    }

    fn head_dim(&self) -> usize {
        self.embed_dim() / self.num_heads
    }

    /// The rows of the query, key or value projection (0, 1, 2) in
    /// `in_proj_weight`: `(first, count)`.
    fn rows(&self, which: usize) -> (usize, usize) {
        let (e, kvd) = (self.embed_dim(), self.num_kv_heads * self.head_dim());
        match which {
            0 => (0, e),
            1 => (e, kvd),
            _ => (e + kvd, kvd),
        }
    }

    /// The heads of projection `which`: `H` for the query, `Hkv` else.
    fn heads_of(&self, which: usize) -> usize {
        if which == 0 {
            self.num_heads
        } else {
            self.num_kv_heads
        }
    }

    /// `[B, L, E]` from the layer's input layout (`[L, E]` unbatched gives `[1, L, E]`).
    fn batch_major(&self, x: &Tensor, name: &str) -> Result<Tensor> {
        let e = self.embed_dim();
        match x.rank() {
            2 if x.shape()[1] == e => x.unsqueeze(0),
            3 if x.shape()[2] == e => {
                if self.batch_first {
                    Ok(x.alias())
                } else {
                    x.transpose(0, 1)
                }
            }
            _ => bail!(Error::shape(
                OP,
                x.shape(),
                &[e],
                format!(
                    "{name} must be [{}, E] or [L, E] with E = {e}",
                    if self.batch_first { "B, L" } else { "L, B" }
                )
            )),
        }
    }

    /// The projection `which` (0: query, 1: key, 2: value) of `x [B, L, E]`,
    /// split into heads `[B, H or Hkv, L, hd]`.
    fn project(&self, x: &Tensor, which: usize) -> Result<Tensor> {
        let (first, n) = self.rows(which);
        let w = self.in_proj_weight.narrow(0, first, n)?;
        let b = self
            .in_proj_bias
            .as_ref()
            .map(|b| b.narrow(0, first, n))
            .transpose()?;
        self.heads(&x.linear(&w, b.as_ref())?, self.heads_of(which))
    }

    /// The query, key and value heads of `x [B, L, E]` from one product
    /// with the stacked projection (self-attention, a cached step).
    fn project_all(&self, x: &Tensor) -> Result<[Tensor; 3]> {
        let qkv = x.linear(&self.in_proj_weight, self.in_proj_bias.as_ref())?;
        let part = |which: usize| {
            let (first, n) = self.rows(which);
            self.heads(&qkv.narrow(2, first, n)?, self.heads_of(which))
        };
        Ok([part(0)?, part(1)?, part(2)?])
    }

    /// `[B, L, heads hd]` -> `[B, heads, L, hd]`.
    fn heads(&self, x: &Tensor, heads: usize) -> Result<Tensor> {
        let (b, l) = (x.shape()[0] as isize, x.shape()[1] as isize);
        x.reshape(&[b, l, heads as isize, self.head_dim() as isize])?
            .transpose(1, 2)
    }

    /// `[B, H, L, hd]` -> the output projection, in the layer's layout.
    fn merge(&self, y: &Tensor, unbatched: bool) -> Result<Tensor> {
        let (b, l) = (y.shape()[0] as isize, y.shape()[2] as isize);
        let y = y
            .transpose(1, 2)?
            .reshape(&[b, l, self.embed_dim() as isize])?;
        let y = self.out_proj.forward(&y)?;
        if unbatched {
            y.squeeze_dim(0)
        } else if self.batch_first {
            Ok(y)
        } else {
            y.transpose(0, 1)
        }
    }

    /// The dropout probability this call applies (0 in eval mode).
    fn dropout_now(&self) -> f64 {
        if self.training {
            self.dropout
        } else {
            0.0
        }
    }

    /// Attention of `query` over `key` and `value` (each `[L, B, E]`,
    /// `[B, L, E]` with `batch_first`, or `[L, E]` unbatched): the output
    /// in the query's layout and, with `need_weights`, the weights
    /// `[B, L, S]` (averaged over heads) or `[B, H, L, S]`.
    pub fn attend(
        &self,
        query: &Tensor,
        key: &Tensor,
        value: &Tensor,
        f: &MhaForward<'_>,
    ) -> Result<(Tensor, Option<Tensor>)> {
        let _op = crate::alloc::history::op_context(OP);
        let unbatched = query.rank() == 2;
        let (xq, xk, xv) = (
            self.batch_major(query, "query")?,
            self.batch_major(key, "key")?,
            self.batch_major(value, "value")?,
        );
        let (bq, bk) = (xq.shape()[0], xk.shape()[0]);
        if bq != bk || xv.shape()[0] != bk || xk.shape()[1] != xv.shape()[1] {
            bail!(Error::shape(
                OP,
                key.shape(),
                value.shape(),
                format!(
                    "query {:?}: key and value need the query's batch and one length S",
                    query.shape()
                )
            ));
        }
        let self_attention = query.shares_storage(key)
            && key.shares_storage(value)
            && query.layout() == key.layout()
            && key.layout() == value.layout();
        let (q, k, v) = if self_attention {
            let [q, k, v] = self.project_all(&xq)?;
            (q, k, v)
        } else {
            (
                self.project(&xq, 0)?,
                self.project(&xk, 1)?,
                self.project(&xv, 2)?,
            )
        };
        let (l, s) = (xq.shape()[1], xk.shape()[1]);
        let mask = self.merged_mask(f, bq, l, s, unbatched, q.dtype(), q.device())?;
        let causal_only = f.is_causal && mask.is_none();
        let mask = match (f.is_causal, mask) {
            (true, Some(m)) => Some(add_causal(&m, l, s)?),
            (_, m) => m,
        };
        let p = self.dropout_now();
        if f.need_weights {
            let (y, w) = weights_path(&q, &k, &v, mask.as_ref(), causal_only, p)?;
            let w = if f.average_attn_weights {
                w.mean(&[1], false)?
            } else {
                w
            };
            let w = if unbatched { w.squeeze_dim(0)? } else { w };
            return Ok((self.merge(&y, unbatched)?, Some(w)));
        }
        let o = SdpaOptions {
            attn_mask: mask.as_ref(),
            dropout_p: p,
            is_causal: causal_only,
            enable_gqa: self.num_kv_heads != self.num_heads,
            ..Default::default()
        };
        let y = scaled_dot_product_attention_with(&q, &k, &v, &o)?;
        Ok((self.merge(&y, unbatched)?, None))
    }

    /// The key-padding and attention masks as one mask for the scores
    /// `[B, H, L, S]` (broadcastable): bool `true` = may attend when both
    /// are bool, else additive in `dt`.
    #[allow(clippy::too_many_arguments)]
    fn merged_mask(
        &self,
        f: &MhaForward<'_>,
        b: usize,
        l: usize,
        s: usize,
        unbatched: bool,
        dt: DType,
        dev: Device,
    ) -> Result<Option<Tensor>> {
        let h = self.num_heads;
        let mut parts = Vec::new();
        if let Some(m) = f.key_padding_mask {
            let want: &[usize] = if unbatched { &[s] } else { &[b, s] };
            if m.shape() != want {
                bail!(Error::shape(
                    OP,
                    m.shape(),
                    want,
                    "key_padding_mask must be [B, S] ([S] unbatched)"
                ));
            }
            parts.push(m.reshape(&[b as isize, 1, 1, s as isize])?);
        }
        if let Some(m) = f.attn_mask {
            let v = if m.shape() == [l, s] {
                m.reshape(&[1, 1, l as isize, s as isize])?
            } else if m.shape() == [b * h, l, s] {
                m.reshape(&[b as isize, h as isize, l as isize, s as isize])?
            } else {
                bail!(Error::shape(
                    OP,
                    m.shape(),
                    &[l, s],
                    format!(
                        "attn_mask must be [L, S] or [B * H, L, S] = [{}, {l}, {s}]",
                        b * h
                    )
                ));
            };
            parts.push(v);
        }
        for m in &parts {
            if m.device() != dev {
                bail!(Error::DeviceMismatch {
                    op: OP,
                    lhs: dev,
                    rhs: m.device()
                });
            }
            if m.dtype() != DType::Bool && !m.dtype().is_float() {
                bail!(Error::dtype(OP, "a bool or float mask", m.dtype()));
            }
        }
        match parts.len() {
            0 => Ok(None),
            _ if parts.iter().all(|m| m.dtype() == DType::Bool) => {
                // true = masked in this module: SDPA's keep mask is the negation.
                let mut keep = parts[0].logical_not()?;
                for m in &parts[1..] {
                    keep = keep.logical_and(&m.logical_not()?)?;
                }
                Ok(Some(keep))
            }
            _ => {
                let mut add: Option<Tensor> = None;
                for m in &parts {
                    let a = if m.dtype() == DType::Bool {
                        Tensor::zeros(m.shape(), dt, dev)?.masked_fill(m, f64::NEG_INFINITY)?
                    } else {
                        m.to_dtype(dt)?
                    };
                    add = Some(match add {
                        None => a,
                        Some(x) => x.add(&a)?,
                    });
                }
                Ok(add)
            }
        }
    }

    /// A cache for [`forward_cached`](Self::forward_cached) of `batch`
    /// sequences up to `max_len` positions: two `[batch, Hkv, max_len, hd]`
    /// buffers of the layer's dtype and device, allocated here once.
    pub fn new_kv_cache(&self, batch: usize, max_len: usize) -> Result<KvCache> {
        let (dt, dev) = (self.in_proj_weight.dtype(), self.in_proj_weight.device());
        KvCache::new(batch, self.num_kv_heads, max_len, self.head_dim(), dt, dev)
            .map_err(|e| e.reported_as(OP))
    }

    /// Causal self-attention of the next tokens `x` (`[T, B, E]`, or
    /// `[B, T, E]` with `batch_first`) after the `cache.len()` positions
    /// the cache holds: their keys and values are written into the cache
    /// (no allocation for it), and each new token attends every cached
    /// position and the new ones up to itself ([`KvCache::attend`]). For
    /// inference: an input that requires grad in grad mode is an error.
    ///
    /// ```
    /// use tensorscope::autograd::no_grad;
    /// use tensorscope::nn::{MhaOptions, Module, MultiheadAttention};
    /// use tensorscope::{DType, Device, Tensor};
    /// let mha = MultiheadAttention::with_options(8, 2, MhaOptions { batch_first: true, ..Default::default() })?;
    /// let x = Tensor::randn(&[1, 6, 8], DType::F32, Device::Cpu)?;
    /// no_grad(|| {
    ///     let mut cache = mha.new_kv_cache(1, 16)?;
    ///     let first = mha.forward_cached(&x.narrow(1, 0, 5)?, &mut cache)?; // the prompt
    ///     let next = mha.forward_cached(&x.narrow(1, 5, 1)?, &mut cache)?; // one token
    ///     assert_eq!((cache.len(), next.shape()), (6, &[1, 1, 8][..]));
    ///     Ok::<(), tensorscope::Error>(())
    /// })?;
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn forward_cached(&self, x: &Tensor, cache: &mut KvCache) -> Result<Tensor> {
        const OPC: &str = "MultiheadAttention::forward_cached";
        let _op = crate::alloc::history::op_context(OPC);
        if is_grad_enabled() && (x.requires_grad() || self.in_proj_weight.requires_grad()) {
            bail!(Error::Autograd {
                op: OPC,
                msg:
                    "the key/value cache is for inference: run it under no_grad (or inference_mode)"
                        .into(),
            });
        }
        let xb = self.batch_major(x, "x")?;
        if x.rank() == 2 {
            bail!(Error::shape(
                OPC,
                x.shape(),
                &[],
                "a cached forward takes a batch: [T, B, E] or [B, T, E]"
            ));
        }
        let b = xb.shape()[0];
        let (dt, dev) = (self.in_proj_weight.dtype(), self.in_proj_weight.device());
        if cache.dims() != (b, self.num_kv_heads, self.head_dim())
            || cache.dtype() != dt
            || cache.device() != dev
        {
            let (cb, ch, cd) = cache.dims();
            bail!(Error::shape(
                OPC,
                x.shape(),
                &[cb, ch, cache.capacity(), cd],
                "the cache was made for another batch or layer"
            ));
        }
        let [q, k, v] = self.project_all(&xb)?;
        let y = cache.attend(&q, &k, &v).map_err(|e| e.reported_as(OPC))?;
        self.merge(&y, false)
    }
}

/// The key/value heads: `num_kv_heads` (default `num_heads`), which must
/// divide `num_heads`, which must divide `embed_dim`.
fn check_heads(embed_dim: usize, num_heads: usize, kv: Option<usize>) -> Result<usize> {
    if num_heads == 0 || !embed_dim.is_multiple_of(num_heads) {
        bail!(Error::arg(
            OP,
            format!("embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})")
        ));
    }
    let kv = kv.unwrap_or(num_heads);
    if kv == 0 || !num_heads.is_multiple_of(kv) {
        bail!(Error::arg(
            OP,
            format!("num_heads ({num_heads}) must be divisible by num_kv_heads ({kv})")
        ));
    }
    Ok(kv)
}

/// A mask for the scores with causal masking added (bool keep masks are
/// and-ed with `j <= i`; additive ones get `-inf` above the diagonal).
fn add_causal(m: &Tensor, l: usize, s: usize) -> Result<Tensor> {
    let dev = m.device();
    let r = Tensor::arange(0.0, l as f64, 1.0, DType::I64, dev)?.view(&[l as isize, 1])?;
    let c = Tensor::arange(0.0, s as f64, 1.0, DType::I64, dev)?.view(&[1, s as isize])?;
    if m.dtype() == DType::Bool {
        m.logical_and(&c.le(&r)?)
    } else {
        // Added, so that a padding mask [B, 1, 1, S] broadcasts to [B, 1, L, S].
        let causal =
            Tensor::zeros(&[l, s], m.dtype(), dev)?.masked_fill(&c.gt(&r)?, f64::NEG_INFINITY)?;
        m.add(&causal)
    }
}

/// The attention with its weights materialised (`need_weights`): `(y
/// [B, H, L, hd], weights [B, H, L, S])`, the weights after dropout.
fn weights_path(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    causal: bool,
    p: f64,
) -> Result<(Tensor, Tensor)> {
    let scale = 1.0 / (q.shape()[3] as f64).sqrt();
    // Grouped-query heads: [B, Hkv, G, L, hd] against [B, Hkv, 1, S, hd],
    // broadcast, so the key and value are not repeated.
    let (b, h, l, hd) = (q.shape()[0], q.shape()[1], q.shape()[2], q.shape()[3]);
    let hkv = k.shape()[1];
    let grouped = |t: &Tensor| -> Result<Tensor> {
        if hkv == h {
            return Ok(t.alias());
        }
        let s = t.shape();
        t.reshape(&[b as isize, hkv as isize, -1, s[2] as isize, s[3] as isize])
    };
    let per_kv = |t: &Tensor| {
        if hkv == h {
            Ok(t.alias())
        } else {
            t.unsqueeze(2)
        }
    };
    let (k, v) = (per_kv(k)?, per_kv(v)?);
    let sl = k.shape()[k.rank() - 2];
    let mut s = grouped(q)?
        .matmul(&k.transpose(-2, -1)?)?
        .mul_scalar(scale)?
        .reshape(&[b as isize, h as isize, l as isize, sl as isize])?;
    let m = match (mask, causal) {
        (Some(m), _) => Some(m.alias()),
        (None, true) => {
            let ones = Tensor::ones(&[s.shape()[2], s.shape()[3]], DType::Bool, s.device())?;
            Some(ones.tril(0)?)
        }
        (None, false) => None,
    };
    match m {
        Some(m) if m.dtype() == DType::Bool => {
            s = s.masked_fill(&m.logical_not()?, f64::NEG_INFINITY)?
        }
        Some(m) => s = s.add(&m)?,
        None => {}
    }
    let empty = crate::autograd::no_grad(|| s.max(&[-1], true)?.eq_scalar(f64::NEG_INFINITY))?;
    let mut w = s.softmax(-1)?.masked_fill(&empty, 0.0)?;
    if p > 0.0 {
        let inv = if p < 1.0 { 1.0 / (1.0 - p) } else { 0.0 };
        let keep = Tensor::rand(w.shape(), w.dtype(), w.device())?.ge_scalar(p)?;
        w = w.mul(&keep.to_dtype(w.dtype())?.mul_scalar(inv)?)?;
    }
    let y = grouped(&w)?
        .matmul(&v)?
        .reshape(&[b as isize, h as isize, l as isize, hd as isize])?;
    Ok((y, w))
}

impl Module for MultiheadAttention {
    /// Self-attention of `x` without masks (the output only).
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(self.attend(x, x, x, &MhaForward::default())?.0)
    }

    fn named_parameters(&self) -> Vec<(String, &Tensor)> {
        let mut v = vec![("in_proj_weight".to_string(), &self.in_proj_weight)];
        if let Some(b) = &self.in_proj_bias {
            v.push(("in_proj_bias".into(), b));
        }
        v.extend(
            self.out_proj
                .named_parameters()
                .into_iter()
                .map(|(n, t)| (format!("out_proj.{n}"), t)),
        );
        v
    }

    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
        let mut v = vec![("in_proj_weight".to_string(), &mut self.in_proj_weight)];
        if let Some(b) = &mut self.in_proj_bias {
            v.push(("in_proj_bias".into(), b));
        }
        v.extend(
            self.out_proj
                .named_parameters_mut()
                .into_iter()
                .map(|(n, t)| (format!("out_proj.{n}"), t)),
        );
        v
    }

    fn train(&mut self, on: bool) {
        self.training = on;
    }

    fn is_training(&self) -> bool {
        self.training
    }
}
