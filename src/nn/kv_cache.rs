//! A key/value cache for autoregressive decoding: two buffers
//! `[B, Hkv, max_len, D]` allocated once, into which each step writes the
//! new positions' keys and values in place, so that a generated token
//! allocates nothing for the cache. Attention over it reads views of the
//! filled prefix ([`scaled_dot_product_attention`](super::scaled_dot_product_attention)
//! takes them in place), with grouped-query heads and the lower-right
//! causal alignment a cached step needs.

use crate::autograd::is_grad_enabled;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{bail, Error, Result};
use crate::ops::attention::{scaled_dot_product_attention_with, CausalVariant, SdpaOptions};
use crate::tensor::Tensor;

const OP: &str = "KvCache";

/// The keys and values of the positions seen so far, in preallocated
/// buffers (see the [module docs](self)). With RoPE, rotate the new keys
/// at offset [`len`](Self::len) before appending them.
///
/// ```
/// use tensorscope::autograd::no_grad;
/// use tensorscope::nn::{KvCache, RotaryEmbedding};
/// use tensorscope::{DType, Device, Tensor};
/// let dev = Device::Cpu;
/// // 8 query heads over 2 key/value heads of 16, up to 32 positions.
/// let mut cache = KvCache::new(1, 2, 32, 16, DType::F32, dev)?;
/// let rope = RotaryEmbedding::new(16, 10_000.0, None, dev)?;
/// no_grad(|| {
///     for t in [5, 1, 1] {
///         // a 5-token prompt, then one token at a time
///         let q = rope.apply(&Tensor::randn(&[1, 8, t, 16], DType::F32, dev)?, cache.len())?;
///         let k = rope.apply(&Tensor::randn(&[1, 2, t, 16], DType::F32, dev)?, cache.len())?;
///         let v = Tensor::randn(&[1, 2, t, 16], DType::F32, dev)?;
///         let y = cache.attend(&q, &k, &v)?;
///         assert_eq!(y.shape(), &[1, 8, t, 16]);
///     }
///     assert_eq!(cache.len(), 7);
///     Ok::<(), tensorscope::Error>(())
/// })?;
/// # Ok::<(), tensorscope::Error>(())
/// ```
#[derive(Debug)]
pub struct KvCache {
    k: Tensor,
    v: Tensor,
    len: usize,
}

impl KvCache {
    /// A cache of `batch` sequences of up to `max_len` positions, `heads`
    /// key/value heads of `head_dim`, in `dtype` on `device`: its two
    /// buffers are allocated here, once.
    pub fn new(
        batch: usize,
        heads: usize,
        max_len: usize,
        head_dim: usize,
        dtype: DType,
        device: Device,
    ) -> Result<KvCache> {
        if !dtype.is_float() {
            bail!(Error::dtype(OP, "a float dtype", dtype));
        }
        let shape = [batch, heads, max_len, head_dim];
        Ok(KvCache {
            // Only the filled prefix is ever read: no need to zero them.
            k: Tensor::empty(&shape, dtype, device)?,
            v: Tensor::empty(&shape, dtype, device)?,
            len: 0,
        })
    }

    /// The positions cached.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no position is cached.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The most positions it holds.
    pub fn capacity(&self) -> usize {
        self.k.shape()[2]
    }

    /// `(batch, key/value heads, head_dim)`.
    pub fn dims(&self) -> (usize, usize, usize) {
        let s = self.k.shape();
        (s[0], s[1], s[3])
    }

    /// The buffers' dtype.
    pub fn dtype(&self) -> DType {
        self.k.dtype()
    }

    /// The buffers' device.
    pub fn device(&self) -> Device {
        self.k.device()
    }

    /// Forgets the cached positions (the buffers stay allocated).
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Keeps the first `len` positions only (a rejected speculative draft,
    /// a beam rolled back); `len` above [`len`](Self::len) is an error.
    pub fn truncate(&mut self, len: usize) -> Result<()> {
        if len > self.len {
            bail!(Error::arg(
                "KvCache::truncate",
                format!("cannot truncate {} cached positions to {len}", self.len)
            ));
        }
        self.len = len;
        Ok(())
    }

    /// The cached keys `[B, Hkv, len, D]` (a view of the buffer).
    pub fn keys(&self) -> Result<Tensor> {
        self.k.narrow(2, 0, self.len)
    }

    /// The cached values `[B, Hkv, len, D]` (a view of the buffer).
    pub fn values(&self) -> Result<Tensor> {
        self.v.narrow(2, 0, self.len)
    }

    /// Writes the keys and values of `T` new positions (`[B, Hkv, T, D]`
    /// each, the cache's dtype and device) after the cached ones, and
    /// returns views of all `len + T` (keys, values). Allocates nothing;
    /// on an error the cache is as it was.
    pub fn append(&mut self, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        const OPA: &str = "KvCache::append";
        let t = self.check_new(OPA, k, v)?;
        let r = self.write(k, v, t)?;
        self.len += t;
        Ok(r)
    }

    /// One attention step over the cache: appends the new keys and values
    /// (as [`append`](Self::append)), then the queries `[B, Hq, T, D]`
    /// (`Hq` a multiple of `Hkv`: grouped-query attention) attend every
    /// cached position and the new ones up to their own (the lower-right
    /// causal triangle). Returns `[B, Hq, T, D]`. On an error the cache is
    /// as it was.
    pub fn attend(&mut self, q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Tensor> {
        const OPT: &str = "KvCache::attend";
        let t = self.check_new(OPT, k, v)?;
        let (b, hkv, d) = self.dims();
        let qs = q.shape();
        if q.rank() != 4
            || qs[0] != b
            || qs[2] != t
            || qs[3] != d
            || hkv == 0
            || !qs[1].is_multiple_of(hkv)
        {
            bail!(Error::shape(
                OPT,
                qs,
                k.shape(),
                format!(
                    "expected queries [{b}, a multiple of {hkv} heads, {t}, {d}] for these keys"
                )
            ));
        }
        let (keys, values) = self.write(k, v, t)?;
        let o = SdpaOptions {
            is_causal: true,
            causal_variant: CausalVariant::LowerRight,
            enable_gqa: true,
            ..Default::default()
        };
        let y = scaled_dot_product_attention_with(q, &keys, &values, &o)
            .map_err(|e| e.reported_as(OPT))?;
        // Counted once the step has succeeded (a failed one is overwritten).
        self.len += t;
        Ok(y)
    }

    /// The number of new positions, after checking `k` and `v`.
    fn check_new(&self, op: &'static str, k: &Tensor, v: &Tensor) -> Result<usize> {
        let (b, h, d) = self.dims();
        for (name, x) in [("keys", k), ("values", v)] {
            let s = x.shape();
            if x.rank() != 4 || s[0] != b || s[1] != h || s[3] != d || s[2] != k.shape()[2] {
                bail!(Error::shape(
                    op,
                    s,
                    self.k.shape(),
                    format!("new {name} must be [{b}, {h}, T, {d}] (one T for keys and values) for this cache")
                ));
            }
            if x.dtype() != self.dtype() {
                bail!(Error::dtype(
                    op,
                    format!("{name} of the cache's dtype {}", self.dtype()),
                    x.dtype()
                ));
            }
            if x.device() != self.device() {
                bail!(Error::DeviceMismatch {
                    op,
                    lhs: self.device(),
                    rhs: x.device(),
                });
            }
            if is_grad_enabled() && x.requires_grad() {
                bail!(Error::Autograd {
                    op,
                    msg: format!("the cache is for inference: {name} that require grad would leave the graph; run under no_grad"),
                });
            }
        }
        let t = k.shape()[2];
        if self.len + t > self.capacity() {
            bail!(Error::arg(
                op,
                format!(
                    "cache overflow: {t} new positions after {} exceed the capacity of {}",
                    self.len,
                    self.capacity()
                )
            ));
        }
        Ok(t)
    }

    /// Writes `t` checked positions after the cached ones; views of all.
    fn write(&mut self, k: &Tensor, v: &Tensor, t: usize) -> Result<(Tensor, Tensor)> {
        let past = self.len;
        self.k.narrow(2, past, t)?.copy_(k)?;
        self.v.narrow(2, past, t)?.copy_(v)?;
        Ok((
            self.k.narrow(2, 0, past + t)?,
            self.v.narrow(2, 0, past + t)?,
        ))
    }
}
