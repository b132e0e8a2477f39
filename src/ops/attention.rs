//! Scaled dot-product attention (PyTorch's
//! `torch.nn.functional.scaled_dot_product_attention`), blocked so that its
//! memory is O(sequence) per head.
//!
//! Three kernels compute it, chosen by [`SdpaKernel`]:
//!
//! * **Fused** (the CPU's default): one kernel forward and one backward
//!   (`backend/cpu/attention.rs`), FlashAttention's blocked online softmax.
//!   Tensor memory: the output, and one f32 (f64 for f64 inputs) per query
//!   row, its logsumexp, when a gradient will be needed; the backward
//!   allocates the three gradients. Its scratch is per worker thread, on
//!   the system heap, and does not grow with the key length.
//! * **Blocked** (CUDA's default, any device): the same algorithm composed
//!   from device ops one block of 256 keys at a time (`attention_blocked`):
//!   temporaries of `[N, L, 256]`, freed block by block.
//! * **Math**: the composition of PyTorch's math backend (`softmax(q k^T
//!   scale + mask) v`) with its `[.., L, S]` scores; the only kernel that
//!   gives an additive mask a gradient, so it is the default when the mask
//!   requires grad.
//!
//! A query row whose every key is masked gives 0 (and 0 gradients), as
//! PyTorch's safe softmax does since 2.5. Dropout masks come from the
//! global generator; they are not PyTorch's, and they differ between the
//! kernels (GUIDE 10).

use super::attention_blocked::{compute_dtype, Blocked};
use crate::autograd::{attach, is_grad_enabled, needs_grad, no_grad, Saved};
use crate::backend::attention::{self as fused, MaskKind, SdpaArgs, SdpaGrads};
use crate::backend::Operand;
use crate::dtype::DType;
use crate::error::{bail, Error, Result};
use crate::layout::broadcast_shapes;
use crate::random::with_global;
use crate::tensor::Tensor;

const OP: &str = "scaled_dot_product_attention";

/// Which kernel computes [`scaled_dot_product_attention_with`] (PyTorch's
/// `torch.nn.attention.sdpa_kernel` choice).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SdpaKernel {
    /// Fused on the CPU, Blocked elsewhere; Math when an additive mask
    /// requires grad.
    #[default]
    Auto,
    /// The fused CPU kernel (an error on CUDA, and with a mask that
    /// requires grad).
    Fused,
    /// The blocked composition of device ops (an error with a mask that
    /// requires grad).
    Blocked,
    /// The unblocked composition, O(L S) memory.
    Math,
}

/// The options of [`scaled_dot_product_attention_with`]; the default is
/// PyTorch's (no mask, no dropout, not causal, scale `1 / sqrt(E)`).
#[derive(Clone, Copy, Debug, Default)]
pub struct SdpaOptions<'a> {
    /// A mask broadcastable to `[.., L, S]`: bool (`true`: the query may
    /// attend the key), or float (f32 or the queries' dtype), added to the
    /// scaled scores.
    pub attn_mask: Option<&'a Tensor>,
    /// The probability of dropping an attention weight, in `[0, 1]`.
    /// Applied whenever it is above 0 (a module passes 0 in eval mode).
    pub dropout_p: f64,
    /// Causal attention, aligned as [`causal_variant`](Self::causal_variant)
    /// says (PyTorch's `is_causal` is the default, upper-left). Not
    /// together with `attn_mask`.
    pub is_causal: bool,
    /// Which lower triangle `is_causal` keeps (PyTorch's
    /// `torch.nn.attention.bias.CausalVariant`).
    pub causal_variant: CausalVariant,
    /// Grouped-query attention (PyTorch's `enable_gqa`): a key and value of
    /// `Hkv` heads (dim -3) serve a query of `Hq` heads, `Hq / Hkv` query
    /// heads per key/value head (head `h` reads `h / (Hq / Hkv)`, as
    /// PyTorch's `repeat_interleave`), read in place: the key and value are
    /// not repeated.
    pub enable_gqa: bool,
    /// The scores' factor; `None`: `1 / sqrt(E)`.
    pub scale: Option<f64>,
    /// The kernel.
    pub kernel: SdpaKernel,
}

/// The alignment of causal attention's lower triangle when the queries
/// and keys differ in length (`L` queries, `S` keys).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CausalVariant {
    /// Query `i` attends keys `j <= i` (PyTorch's `is_causal=True`).
    #[default]
    UpperLeft,
    /// Query `i` attends keys `j <= i + S - L`: the last query sees every
    /// key, as when decoding `L` new tokens after `S - L` cached ones
    /// (PyTorch's `causal_lower_right(L, S)`). A query with no key to
    /// attend (`L > S`) gives 0.
    LowerRight,
}

/// A mask as the kernels read it: a `[batch.., L, S]` view (expanded, not
/// copied), whose batch elements are the `N` heads in row-major order.
pub(super) enum Mask {
    /// bool, `true`: may attend.
    Keep(Tensor),
    /// Added to the scaled scores (the queries' dtype).
    Add(Tensor),
}

impl Mask {
    fn tensor(&self) -> &Tensor {
        match self {
            Mask::Keep(t) | Mask::Add(t) => t,
        }
    }
}

/// `softmax(q k^T / sqrt(E)) v` over the last two dimensions; see
/// [`scaled_dot_product_attention_with`].
///
/// ```
/// use tensorscope::nn::scaled_dot_product_attention;
/// use tensorscope::{DType, Device, Tensor};
/// let q = Tensor::randn(&[2, 4, 8, 16], DType::F32, Device::Cpu)?; // [B, H, L, E]
/// let k = Tensor::randn(&[2, 4, 10, 16], DType::F32, Device::Cpu)?;
/// let v = Tensor::randn(&[2, 4, 10, 32], DType::F32, Device::Cpu)?;
/// assert_eq!(scaled_dot_product_attention(&q, &k, &v)?.shape(), &[2, 4, 8, 32]);
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub fn scaled_dot_product_attention(q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Tensor> {
    scaled_dot_product_attention_with(q, k, v, &SdpaOptions::default())
}

/// Scaled dot-product attention: `q [.., L, E]`, `k [.., S, E]`,
/// `v [.., S, Ev]` of one float dtype and device, whose leading dimensions
/// broadcast, give `[.., L, Ev]`:
/// `dropout(softmax(q k^T * scale + mask)) v`.
///
/// Forward and backward; see the [module docs](self) for the kernels and
/// their memory.
///
/// ```
/// use tensorscope::nn::{scaled_dot_product_attention_with, SdpaOptions};
/// use tensorscope::{DType, Device, Tensor};
/// let q = Tensor::randn(&[1, 2, 5, 4], DType::F32, Device::Cpu)?;
/// let causal = SdpaOptions { is_causal: true, ..Default::default() };
/// let y = scaled_dot_product_attention_with(&q, &q, &q, &causal)?;
/// // The first query sees only the first key: its output is that value.
/// let first = y.narrow(2, 0, 1)?.to_vec::<f32>()?;
/// let v0 = q.narrow(2, 0, 1)?.to_vec::<f32>()?;
/// assert!(first.iter().zip(&v0).all(|(a, b)| (a - b).abs() < 1e-6));
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub fn scaled_dot_product_attention_with(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    o: &SdpaOptions<'_>,
) -> Result<Tensor> {
    if let Some(c) = crate::autocast::cast(
        &crate::autocast::SDPA,
        &[Some(q), Some(k), Some(v), o.attn_mask],
    )? {
        let o = SdpaOptions {
            attn_mask: c.opt(3),
            ..*o
        };
        return scaled_dot_product_attention_with(c.get(0), c.get(1), c.get(2), &o);
    }
    let _op = crate::alloc::history::op_context_with(OP, || {
        vec![q.shape().to_vec(), k.shape().to_vec(), v.shape().to_vec()]
    });
    let g = check(q, k, v, o)?;
    let causal = o.is_causal.then(|| match o.causal_variant {
        CausalVariant::UpperLeft => 0,
        CausalVariant::LowerRight => g.s as isize - g.l as isize,
    });
    let scale = o.scale.unwrap_or(1.0 / (g.e as f64).sqrt());
    let dropout = (o.dropout_p > 0.0).then(|| (o.dropout_p, with_global(|r| r.next_u64())));
    let mask_grad = o
        .attn_mask
        .is_some_and(|m| m.dtype().is_float() && is_grad_enabled() && m.requires_grad());
    let kernel = match o.kernel {
        SdpaKernel::Auto if mask_grad => SdpaKernel::Math,
        SdpaKernel::Auto if q.device().is_cpu() => SdpaKernel::Fused,
        SdpaKernel::Auto => SdpaKernel::Blocked,
        SdpaKernel::Fused | SdpaKernel::Blocked if mask_grad => bail!(Error::arg(
            OP,
            "an attn_mask that requires grad gets its gradient from the Math kernel only (SdpaKernel::Math or Auto)"
        )),
        SdpaKernel::Fused if !q.device().is_cpu() => bail!(Error::DeviceUnavailable {
            op: OP,
            device: q.device(),
            reason: "the fused attention is a CPU kernel; SdpaKernel::Blocked runs on every device".into(),
        }),
        other => other,
    };
    if kernel == SdpaKernel::Math {
        return math(
            &g,
            q,
            k,
            v,
            o.attn_mask,
            causal,
            scale,
            dropout.map(|d| d.0),
        );
    }
    // [.., L, E] -> [N, L, E] over the broadcast batch, with dense rows
    // within each head (a copy only when the view has none: a key/value
    // cache's prefix, or one head broadcast over the batch, is read in place).
    let flat = |t: &Tensor, batch: &[usize], rows: usize, cols: usize| -> Result<Tensor> {
        let mut shape: Vec<isize> = batch.iter().map(|&d| d as isize).collect();
        shape.extend([rows as isize, cols as isize]);
        let n = crate::layout::numel(batch) as isize;
        let t = t
            .expand(&shape)?
            .reshape(&[n, rows as isize, cols as isize])?;
        let st = t.strides();
        if (cols <= 1 || st[2] == 1) && (rows <= 1 || st[1] == cols) {
            Ok(t)
        } else {
            t.contiguous()
        }
    };
    let (qc, kc, vc) = (
        flat(q, &g.batch, g.l, g.e)?,
        flat(k, &g.kv_batch, g.s, g.e)?,
        flat(v, &g.kv_batch, g.s, g.ev)?,
    );
    let mask = match o.attn_mask {
        None => None,
        Some(m) => {
            let m = if m.dtype() == DType::Bool || m.dtype() == q.dtype() {
                m.alias()
            } else {
                m.to_dtype(q.dtype())?
            };
            let mut shape: Vec<isize> = g.batch.iter().map(|&d| d as isize).collect();
            shape.extend([g.l as isize, g.s as isize]);
            // A broadcast view (a padding mask `[B, 1, 1, S]` stays that
            // size); the kernels read it with its strides.
            let m = m.expand(&shape)?;
            Some(if m.dtype() == DType::Bool {
                Mask::Keep(m)
            } else {
                Mask::Add(m)
            })
        }
    };
    let call = Call {
        q: &qc,
        k: &kc,
        v: &vc,
        mask: mask.as_ref(),
        causal,
        group: g.group,
        scale,
        dropout,
        fused: kernel == SdpaKernel::Fused,
    };
    let out = call.forward_recorded()?;
    let mut shape: Vec<isize> = g.batch.iter().map(|&d| d as isize).collect();
    shape.extend([g.l as isize, g.ev as isize]);
    out.reshape(&shape)
}

/// The checked sizes of a call.
struct Geometry {
    /// The queries' (broadcast) batch dimensions, and the keys' and
    /// values': the same, but for `Hkv` heads in dim -3 under GQA.
    batch: Vec<usize>,
    kv_batch: Vec<usize>,
    /// Query heads per key/value head (1 without GQA).
    group: usize,
    l: usize,
    s: usize,
    e: usize,
    ev: usize,
}

fn check(q: &Tensor, k: &Tensor, v: &Tensor, o: &SdpaOptions<'_>) -> Result<Geometry> {
    for t in [k, v] {
        if t.device() != q.device() {
            bail!(Error::DeviceMismatch {
                op: OP,
                lhs: q.device(),
                rhs: t.device(),
            });
        }
    }
    if !q.dtype().is_float() || k.dtype() != q.dtype() || v.dtype() != q.dtype() {
        bail!(Error::arg(
            OP,
            format!(
                "expected query, key and value of one float dtype, got query {}, key {}, value {}",
                q.dtype(),
                k.dtype(),
                v.dtype()
            )
        ));
    }
    for (name, t) in [("query", q), ("key", k), ("value", v)] {
        if t.rank() < 2 {
            bail!(Error::arg(
                OP,
                format!(
                    "{name} must have at least 2 dimensions [.., L, E], got shape {:?}",
                    t.shape()
                )
            ));
        }
    }
    let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
    let (l, e) = (qs[qs.len() - 2], qs[qs.len() - 1]);
    let (s, ke) = (ks[ks.len() - 2], ks[ks.len() - 1]);
    let (vsn, ev) = (vs[vs.len() - 2], vs[vs.len() - 1]);
    if ke != e {
        bail!(Error::shape(
            OP,
            qs,
            ks,
            "query and key need the same last dimension E"
        ));
    }
    if vsn != s {
        bail!(Error::shape(
            OP,
            ks,
            vs,
            "key and value need the same sequence length S (dim -2)"
        ));
    }
    let (qb, kb, vb) = (
        &qs[..qs.len() - 2],
        &ks[..ks.len() - 2],
        &vs[..vs.len() - 2],
    );
    let heads = |b: &[usize]| b.last().copied();
    let (hq, hk, hv) = (heads(qb), heads(kb), heads(vb));
    // `(Hq, Hkv)` when the call is grouped-query.
    let gqa = match (o.enable_gqa, hq, hk) {
        (true, Some(q), Some(k)) if q != k => Some((q, k)),
        _ => None,
    };
    if let Some((q, k)) = gqa
        && (k == 0 || !q.is_multiple_of(k) || hv != Some(k))
    {
        bail!(Error::shape(
            OP,
            qs,
            ks,
            format!(
                "grouped-query attention needs the key's and value's heads (dim -3) to be equal and to divide the query's: query {q}, key {k}, value {}",
                hv.map_or("none".to_string(), |h| h.to_string())
            )
        ));
    }
    // `b` with `h` heads (its last dim).
    let with_heads = |b: &[usize], h: usize| -> Vec<usize> {
        let mut b = b.to_vec();
        if let Some(last) = b.last_mut() {
            *last = h;
        }
        b
    };
    // Under GQA the key's heads broadcast as if repeated to the query's.
    let (kq, vq) = match gqa {
        Some((q, _)) => (with_heads(kb, q), with_heads(vb, q)),
        None => (kb.to_vec(), vb.to_vec()),
    };
    let joined = broadcast_shapes(OP, qb, &kq)
        .and_then(|b| broadcast_shapes(OP, &b, &vq).map(|b| b.to_vec()));
    let batch = match (joined, hq, hk) {
        (Ok(b), ..) => b,
        (Err(_), Some(q), Some(k)) if !o.enable_gqa && k > 0 && q.is_multiple_of(k) => {
            bail!(Error::shape(
                OP,
                qs,
                ks,
                format!(
                    "the query has {q} heads (dim -3) and the key {k}: set enable_gqa for grouped-query attention"
                )
            ))
        }
        (Err(e), ..) => return Err(e),
    };
    let (group, kv_batch) = match gqa {
        Some((q, k)) => (q / k, with_heads(&batch, k)),
        None => (1, batch.clone()),
    };
    if !(0.0..=1.0).contains(&o.dropout_p) {
        bail!(Error::arg(
            OP,
            format!(
                "dropout_p has to be between 0 and 1, but got {}",
                o.dropout_p
            )
        ));
    }
    if let Some(m) = o.attn_mask {
        if o.is_causal {
            bail!(Error::arg(
                OP,
                "an explicit attn_mask should not be set when is_causal is true"
            ));
        }
        if m.device() != q.device() {
            bail!(Error::DeviceMismatch {
                op: OP,
                lhs: q.device(),
                rhs: m.device(),
            });
        }
        if !(m.dtype() == DType::Bool || m.dtype() == DType::F32 || m.dtype() == q.dtype()) {
            bail!(Error::arg(
                OP,
                format!(
                    "expected an attn_mask of dtype bool, float32 or the query's dtype, got {} (query {})",
                    m.dtype(),
                    q.dtype()
                )
            ));
        }
        let mut full = batch.clone();
        full.extend([l, s]);
        let got = broadcast_shapes(OP, m.shape(), &full)?;
        if got.as_ref() != full.as_slice() {
            bail!(Error::shape(
                OP,
                m.shape(),
                &full,
                "attn_mask must broadcast to the scores' shape [.., L, S]"
            ));
        }
    }
    Ok(Geometry {
        batch,
        kv_batch,
        group,
        l,
        s,
        e,
        ev,
    })
}

/// PyTorch's math backend: the scores materialised.
#[allow(clippy::too_many_arguments)]
fn math(
    g: &Geometry,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    causal: Option<isize>,
    scale: f64,
    dropout: Option<f64>,
) -> Result<Tensor> {
    // GQA: a group's query heads in a dimension of their own, against the
    // key/value head broadcast over it (`[.., Hkv, G, L, E]` by
    // `[.., Hkv, 1, S, E]`).
    let grouped = |t: &Tensor, batch: &[usize], per: usize, (rows, cols)| -> Result<Tensor> {
        if g.group == 1 {
            return Ok(t.alias());
        }
        let mut shape: Vec<isize> = batch.iter().map(|&d| d as isize).collect();
        shape.extend([rows as isize, cols as isize]);
        let t = t.expand(&shape)?;
        let h = shape.len() - 3;
        let mut split = shape.clone();
        split[h] /= per as isize;
        split.insert(h + 1, per as isize);
        t.reshape(&split)
    };
    let qg = grouped(q, &g.batch, g.group, (g.l, g.e))?;
    let (kg, vg) = (
        grouped(k, &g.kv_batch, 1, (g.s, g.e))?,
        grouped(v, &g.kv_batch, 1, (g.s, g.ev))?,
    );
    let mut s = qg.matmul(&kg.transpose(-2, -1)?)?.mul_scalar(scale)?;
    let (l, sl) = (g.l, g.s);
    let dev = q.device();
    if let Some(off) = causal {
        let r = Tensor::arange(off as f64, (l as isize + off) as f64, 1.0, DType::I64, dev)?
            .view(&[l as isize, 1])?;
        let c = Tensor::arange(0.0, sl as f64, 1.0, DType::I64, dev)?.view(&[1, sl as isize])?;
        s = s.masked_fill(&c.gt(&r)?, f64::NEG_INFINITY)?;
    }
    let mask = mask
        .map(|m| grouped(m, &g.batch, g.group, (g.l, g.s)))
        .transpose()?;
    match mask {
        Some(m) if m.dtype() == DType::Bool => {
            s = s.masked_fill(&m.logical_not()?, f64::NEG_INFINITY)?;
        }
        Some(m) => s = s.add(&m.to_dtype(s.dtype())?)?,
        None => {}
    }
    // The safe softmax: a row of -inf gives 0, not NaN.
    let empty = no_grad(|| s.max(&[-1], true)?.eq_scalar(f64::NEG_INFINITY))?;
    let mut p = s.softmax(-1)?.masked_fill(&empty, 0.0)?;
    if let Some(pr) = dropout {
        let inv = if pr < 1.0 { 1.0 / (1.0 - pr) } else { 0.0 };
        let keep = Tensor::rand(p.shape(), p.dtype(), dev)?.ge_scalar(pr)?;
        p = p.mul(&keep.to_dtype(p.dtype())?.mul_scalar(inv)?)?;
    }
    let out = p.matmul(&vg)?;
    if g.group == 1 {
        return Ok(out);
    }
    let mut shape: Vec<isize> = g.batch.iter().map(|&d| d as isize).collect();
    shape.extend([g.l as isize, g.ev as isize]);
    out.reshape(&shape)
}

/// A Fused or Blocked call on the flattened operands.
struct Call<'a> {
    q: &'a Tensor,
    k: &'a Tensor,
    v: &'a Tensor,
    mask: Option<&'a Mask>,
    causal: Option<isize>,
    group: usize,
    scale: f64,
    dropout: Option<(f64, u64)>,
    fused: bool,
}

impl Call<'_> {
    fn blocked(&self) -> Blocked<'_> {
        Blocked {
            q: self.q,
            k: self.k,
            v: self.v,
            mask: self.mask,
            causal: self.causal,
            scale: self.scale,
            dropout: self.dropout,
        }
    }

    /// The fused kernel's arguments over operands of these tensors.
    fn with_args<R>(&self, f: impl FnOnce(&SdpaArgs) -> R) -> R {
        let (oq, ok, ov) = (
            Operand::of(self.q),
            Operand::of(self.k),
            Operand::of(self.v),
        );
        let om = self.mask.map(|m| Operand::of(m.tensor()));
        let kind = match self.mask {
            Some(Mask::Keep(_)) => MaskKind::Keep,
            _ => MaskKind::Add,
        };
        f(&SdpaArgs {
            q: &oq,
            k: &ok,
            v: &ov,
            mask: om.as_ref().map(|m| (m, kind)),
            causal: self.causal,
            group: self.group,
            scale: self.scale,
            dropout: self.dropout,
        })
    }

    /// The output `[N, L, Ev]`, with its autograd node when one is needed.
    fn forward_recorded(&self) -> Result<Tensor> {
        let (n, l) = (self.q.shape()[0], self.q.shape()[1]);
        let (dt, dev) = (self.q.dtype(), self.q.device());
        let grad = needs_grad(&[self.q, self.k, self.v]);
        let (out, lse) = if self.fused {
            let out = Tensor::alloc(&[n, l, self.v.shape()[2]], dt, dev)?;
            let lse = grad
                .then(|| Tensor::alloc(&[n, l], compute_dtype(dt), dev))
                .transpose()?;
            let ol = lse.as_ref().map(Operand::of);
            self.with_args(|a| fused::sdpa_forward(a, &Operand::of(&out), ol.as_ref()))?;
            (out, lse)
        } else {
            let (out, lse) = self.blocked().forward()?;
            (out, grad.then_some(lse))
        };
        let Some(lse) = lse else {
            return Ok(out);
        };
        const NAME: &str = "ScaledDotProductAttentionBackward";
        let save = |t: &Tensor| Saved::new(t, NAME);
        let (sq, sk, sv, so, sl) = (
            save(self.q)?,
            save(self.k)?,
            save(self.v)?,
            save(&out)?,
            save(&lse)?,
        );
        let sm = self
            .mask
            .map(|m| {
                Ok::<_, Error>(match m {
                    Mask::Keep(t) => Mask::Keep(t.detach()),
                    Mask::Add(t) => Mask::Add(t.detach()),
                })
            })
            .transpose()?;
        let (causal, group, scale, dropout, fused) = (
            self.causal,
            self.group,
            self.scale,
            self.dropout,
            self.fused,
        );
        Ok(attach(
            out,
            NAME,
            &[self.q, self.k, self.v],
            Box::new(move |g: &Tensor| {
                let (q, k, v, out, lse) = (sq.get()?, sk.get()?, sv.get()?, so.get()?, sl.get()?);
                let call = Call {
                    q,
                    k,
                    v,
                    mask: sm.as_ref(),
                    causal,
                    group,
                    scale,
                    dropout,
                    fused,
                };
                no_grad(|| {
                    let g = g.to_dtype(dt)?.contiguous()?;
                    let (dq, dk, dv) = if fused {
                        let alloc = |t: &Tensor| Tensor::alloc(t.shape(), dt, dev);
                        let (dq, dk, dv) = (alloc(q)?, alloc(k)?, alloc(v)?);
                        let (oo, ol, og) = (Operand::of(out), Operand::of(lse), Operand::of(&g));
                        let (odq, odk, odv) =
                            (Operand::of(&dq), Operand::of(&dk), Operand::of(&dv));
                        call.with_args(|a| {
                            fused::sdpa_backward(
                                a,
                                &SdpaGrads {
                                    out: &oo,
                                    lse: &ol,
                                    dout: &og,
                                    dq: &odq,
                                    dk: &odk,
                                    dv: &odv,
                                },
                            )
                        })?;
                        (dq, dk, dv)
                    } else {
                        call.blocked().backward(out, lse, &g)?
                    };
                    Ok(vec![Some(dq), Some(dk), Some(dv)])
                })
            }),
        ))
    }
}
