//! Scaled dot-product attention composed from device ops, one block of
//! [`BLOCK`] keys at a time (FlashAttention's online softmax, written with
//! matmul, max, exp and sums instead of one kernel): the path CUDA takes,
//! and [`SdpaKernel::Blocked`](super::attention::SdpaKernel::Blocked) on any device.
//!
//! The algorithm is the CPU kernel's (`backend/cpu/attention.rs`, whose
//! module docs give the formulas); the memory it needs beyond its inputs
//! and outputs is a few `[N, L, BLOCK]` and `[N, L, Ev]` temporaries in the
//! compute dtype (f32, f64 for f64 inputs), each freed when its block ends:
//! O(L) per head, never the `[N, L, S]` score tensor.
//!
//! Dropout draws a `[N, L, BLOCK]` uniform block from a generator seeded by
//! the call's seed and the block's first key, so the backward regenerates
//! the forward's mask.

use super::attention::Mask;
use crate::autograd::no_grad;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::Result;
use crate::random::Generator;
use crate::tensor::Tensor;

/// Keys per block.
pub(super) const BLOCK: usize = 256;

/// What one call computes (`[N, L, E]`, `[N / G, S, E]`, `[N / G, S, Ev]`
/// with `G` query heads per key/value head; the mask a `[batch.., L, S]`
/// view over the `N` query heads).
pub(super) struct Blocked<'a> {
    pub q: &'a Tensor,
    pub k: &'a Tensor,
    pub v: &'a Tensor,
    pub mask: Option<&'a Mask>,
    /// Row `i` attends keys `j <= i + offset` only.
    pub causal: Option<isize>,
    pub scale: f64,
    pub dropout: Option<(f64, u64)>,
}

/// f64 for f64 inputs, f32 otherwise.
pub(super) fn compute_dtype(dt: DType) -> DType {
    if dt == DType::F64 {
        DType::F64
    } else {
        DType::F32
    }
}

impl Blocked<'_> {
    fn dims(&self) -> (usize, usize, usize) {
        (self.q.shape()[0], self.q.shape()[1], self.k.shape()[1])
    }

    /// A query-side `[N, rows, c]` as `[N / G, G rows, c]`, the rows of a
    /// group's heads stacked, so that one batched product against the
    /// shared key/value head serves them all (a view when `t` is dense).
    fn fold(&self, t: &Tensor) -> Result<Tensor> {
        let nkv = self.k.shape()[0] as isize;
        let (sh, c) = (t.shape(), t.shape()[2] as isize);
        if sh[0] as isize == nkv {
            return Ok(t.alias());
        }
        t.reshape(&[nkv, -1, c])
    }

    /// [`fold`](Self::fold)'s inverse, to `[N, rows, c]`.
    fn unfold(&self, t: &Tensor) -> Result<Tensor> {
        let n = self.q.shape()[0] as isize;
        let c = t.shape()[2] as isize;
        t.reshape(&[n, -1, c])
    }

    /// The scores `qs k_blk^T` of rows `i0..i0 + rows` against keys
    /// `j0..j0 + bk`, masked (`qs`: the scaled queries of those rows).
    fn scores(
        &self,
        qs: &Tensor,
        kb: &Tensor,
        (i0, rows): (usize, usize),
        (j0, bk): (usize, usize),
    ) -> Result<Tensor> {
        let dev = qs.device();
        let mut s = self.unfold(&self.fold(qs)?.matmul(&kb.transpose(1, 2)?)?)?;
        if let Some(off) = self
            .causal
            .filter(|&off| (j0 + bk) as isize > i0 as isize + off + 1)
        {
            let (a, b) = (i0 as f64 + off as f64, (i0 + rows) as f64 + off as f64);
            let r = Tensor::arange(a, b, 1.0, DType::I64, dev)?.view(&[rows as isize, 1])?;
            let c = Tensor::arange(j0 as f64, (j0 + bk) as f64, 1.0, DType::I64, dev)?
                .view(&[1, bk as isize])?;
            s.masked_fill_(&c.gt(&r)?, f64::NEG_INFINITY)?;
        }
        // The mask's block `[N, rows, bk]` (a copy of the block at most).
        let block = |m: &Tensor| -> Result<Tensor> {
            let n = self.q.shape()[0] as isize;
            m.narrow(-2, i0, rows)?
                .narrow(-1, j0, bk)?
                .reshape(&[n, rows as isize, bk as isize])
        };
        match self.mask {
            Some(Mask::Keep(m)) => {
                s.masked_fill_(&block(m)?.logical_not()?, f64::NEG_INFINITY)?;
            }
            Some(Mask::Add(m)) => {
                s.add_(&block(m)?.to_dtype(s.dtype())?)?;
            }
            None => {}
        }
        Ok(s)
    }

    /// The scaled keep mask (`0` or `1 / (1 - p)`) of the rows `i0..i0 +
    /// rows` and the block of keys from `j0`, in `dt`.
    fn keep(
        &self,
        (i0, rows): (usize, usize),
        (j0, bk): (usize, usize),
        dt: DType,
        dev: Device,
    ) -> Result<Option<Tensor>> {
        let Some((p, seed)) = self.dropout else {
            return Ok(None);
        };
        let (n, l, _) = self.dims();
        // Always a full [N, L, BLOCK] draw, narrowed: the forward's last
        // causal block can be narrower than the backward's, and the value
        // at (i, j) must not depend on the width.
        let mut g = Generator::new(seed ^ (j0 as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let u = Tensor::rand_with(&[n, l, BLOCK], DType::F32, dev, &mut g)?
            .narrow(1, i0, rows)?
            .narrow(2, 0, bk)?;
        let inv = if p < 1.0 { 1.0 / (1.0 - p) } else { 0.0 };
        Ok(Some(u.ge_scalar(p)?.to_dtype(dt)?.mul_scalar(inv)?))
    }

    /// The end of the keys any row sees.
    fn key_end(&self) -> usize {
        let (_, l, s) = self.dims();
        match self.causal {
            Some(off) => (l as isize + off).clamp(0, s as isize) as usize,
            None => s,
        }
    }

    /// The first row that sees key `j0`.
    fn first_row(&self, j0: usize) -> usize {
        let (_, l, _) = self.dims();
        match self.causal {
            Some(off) => (j0 as isize - off).clamp(0, l as isize) as usize,
            None => 0,
        }
    }

    /// The output `[N, L, Ev]` (in the inputs' dtype) and the rows'
    /// logsumexp `[N, L]` (compute dtype; `+inf` for a row with every key
    /// masked, whose output is 0).
    pub(super) fn forward(&self) -> Result<(Tensor, Tensor)> {
        no_grad(|| {
            let (n, l, _) = self.dims();
            let (dt, dev) = (self.q.dtype(), self.q.device());
            let c = compute_dtype(dt);
            let ev = self.v.shape()[2];
            let qs = self.q.to_dtype(c)?.mul_scalar(self.scale)?;
            let (kc, vc) = (self.k.to_dtype(c)?, self.v.to_dtype(c)?);
            let mut m = Tensor::full(&[n, l, 1], f64::NEG_INFINITY, c, dev)?;
            let mut sum = Tensor::zeros(&[n, l, 1], c, dev)?;
            let mut acc = Tensor::zeros(&[n, l, ev], c, dev)?;
            let kend = self.key_end();
            let mut j0 = 0;
            while j0 < kend {
                let bk = BLOCK.min(kend - j0);
                let (kb, vb) = (kc.narrow(1, j0, bk)?, vc.narrow(1, j0, bk)?);
                let mut p = self.scores(&qs, &kb, (0, l), (j0, bk))?;
                let m_new = m.maximum(&p.max(&[-1], true)?)?;
                // A row with every key so far masked shifts by 0: its exps are 0.
                let shift = m_new.masked_fill(&m_new.eq_scalar(f64::NEG_INFINITY)?, 0.0)?;
                p.sub_(&shift)?;
                p.exp_()?;
                let alpha = m.sub(&shift)?.exp()?;
                sum.mul_(&alpha)?;
                sum.add_(&p.sum(&[-1], true)?)?;
                if let Some(keep) = self.keep((0, l), (j0, bk), c, dev)? {
                    p.mul_(&keep)?;
                }
                acc.mul_(&alpha)?;
                acc.add_(&self.unfold(&self.fold(&p)?.matmul(&vb)?)?)?;
                m = m_new;
                j0 += bk;
            }
            let empty = sum.eq_scalar(0.0)?;
            let out = acc.div(&sum)?.masked_fill(&empty, 0.0)?.to_dtype(dt)?;
            let lse = m
                .add(&sum.log()?)?
                .masked_fill(&empty, f64::INFINITY)?
                .reshape(&[n as isize, l as isize])?;
            Ok((out, lse))
        })
    }

    /// `(dq, dk, dv)` in the inputs' dtype, from the forward's `out` and
    /// `lse` and the output's gradient `dout` (dense `[N, L, Ev]`).
    pub(super) fn backward(
        &self,
        out: &Tensor,
        lse: &Tensor,
        dout: &Tensor,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        no_grad(|| {
            let (n, l, s) = self.dims();
            let (dt, dev) = (self.q.dtype(), self.q.device());
            let c = compute_dtype(dt);
            let (e, ev) = (self.q.shape()[2], self.v.shape()[2]);
            let qs = self.q.to_dtype(c)?.mul_scalar(self.scale)?;
            let (kc, vc) = (self.k.to_dtype(c)?, self.v.to_dtype(c)?);
            let doc = dout.to_dtype(c)?;
            let dd = doc.mul(&out.to_dtype(c)?)?.sum(&[-1], true)?; // [N, L, 1]
            let lse3 = lse.unsqueeze(-1)?;
            let dq = Tensor::zeros(&[n, l, e], c, dev)?;
            let nkv = self.k.shape()[0];
            let dk = Tensor::zeros(&[nkv, s, e], c, dev)?;
            let dv = Tensor::zeros(&[nkv, s, ev], c, dev)?;
            let mut j0 = 0;
            while j0 < s {
                let bk = BLOCK.min(s - j0);
                // Causal: rows before the first that sees j0 see none of these keys.
                let i0 = self.first_row(j0);
                let rows = l - i0;
                if rows == 0 {
                    break;
                }
                let (kb, vb) = (kc.narrow(1, j0, bk)?, vc.narrow(1, j0, bk)?);
                let qr = qs.narrow(1, i0, rows)?;
                let dor = doc.narrow(1, i0, rows)?;
                let mut p = self.scores(&qr, &kb, (i0, rows), (j0, bk))?;
                p.sub_(&lse3.narrow(1, i0, rows)?)?;
                p.exp_()?;
                let keep = self.keep((i0, rows), (j0, bk), c, dev)?;
                let pd = match &keep {
                    Some(z) => p.mul(z)?,
                    None => p.alias(),
                };
                // A group's rows folded together: the products over them sum
                // the group's contributions to its key/value head.
                let (dorf, qrf) = (self.fold(&dor)?, self.fold(&qr)?);
                dv.narrow(1, j0, bk)?
                    .copy_(&self.fold(&pd)?.transpose(1, 2)?.matmul(&dorf)?)?;
                let mut dp = self.unfold(&dorf.matmul(&vb.transpose(1, 2)?)?)?;
                if let Some(z) = &keep {
                    dp.mul_(z)?;
                }
                dp.sub_(&dd.narrow(1, i0, rows)?)?;
                dp.mul_(&p)?;
                drop(p);
                let ds = dp;
                let dsf = self.fold(&ds)?;
                dq.narrow(1, i0, rows)?
                    .add_(&self.unfold(&dsf.matmul(&kb)?)?.mul_scalar(self.scale)?)?;
                dk.narrow(1, j0, bk)?
                    .copy_(&dsf.transpose(1, 2)?.matmul(&qrf)?)?;
                j0 += bk;
            }
            Ok((dq.to_dtype(dt)?, dk.to_dtype(dt)?, dv.to_dtype(dt)?))
        })
    }
}
