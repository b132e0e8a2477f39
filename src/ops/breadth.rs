//! Ops a PyTorch user reaches for first (issue 17, item 5), written with
//! the ops below them so they run on every device and autograd
//! differentiates them: `isnan`, `isinf`, `isfinite`, `nan_to_num`, the
//! `logical_*` ops, `lerp`, `outer`, `dot`, `mm`, `bmm`, `addmm`, `clamp`
//! with tensor bounds, `tril`, `triu`, `flip` and `roll`.

use crate::alloc::history::op_context;
use crate::autograd::formulas::sum_to;
use crate::autograd::{attach, needs_grad, no_grad, BackwardFn, Saved};
use crate::dtype::DType;
use crate::error::{bail, Error, Result};
use crate::layout::normalize_dim;
use crate::tensor::Tensor;

fn rank_is(op: &'static str, t: &Tensor, rank: usize, what: &str) -> Result<()> {
    if t.rank() != rank {
        bail!(Error::arg(
            op,
            format!("{what} must have rank {rank}, got shape {:?}", t.shape())
        ));
    }
    Ok(())
}

impl Tensor {
    /// `true` where the element is NaN (never for integers and bool).
    pub fn isnan(&self) -> Result<Tensor> {
        let _op = op_context("isnan");
        if self.dtype().is_float() {
            self.ne(self)
        } else {
            Tensor::zeros(self.shape(), DType::Bool, self.device())
        }
    }

    /// `true` where the element is +inf or -inf (never for integers).
    pub fn isinf(&self) -> Result<Tensor> {
        let _op = op_context("isinf");
        if self.dtype().is_float() {
            self.abs()?.eq_scalar(f64::INFINITY)
        } else {
            Tensor::zeros(self.shape(), DType::Bool, self.device())
        }
    }

    /// `true` where the element is neither infinite nor NaN (always for
    /// integers).
    pub fn isfinite(&self) -> Result<Tensor> {
        let _op = op_context("isfinite");
        if self.dtype().is_float() {
            self.abs()?.lt_scalar(f64::INFINITY)
        } else {
            Tensor::ones(self.shape(), DType::Bool, self.device())
        }
    }

    /// NaN, +inf and -inf replaced by `nan`, `posinf` and `neginf`
    /// (`torch.nan_to_num`; `None` for the infinities is the dtype's
    /// largest and lowest finite value). Integers are returned unchanged
    /// (a new handle).
    pub fn nan_to_num(&self, nan: f64, posinf: Option<f64>, neginf: Option<f64>) -> Result<Tensor> {
        let _op = op_context("nan_to_num");
        let dt = self.dtype();
        if !dt.is_float() {
            return self.deep_clone(); // a copy, as PyTorch's
        }
        let (lo, hi) = match dt {
            DType::F64 => (f64::MIN, f64::MAX),
            DType::F16 => (-65504.0, 65504.0),
            DType::BF16 => (
                f64::from(crate::bf16::MIN.to_f32()),
                f64::from(crate::bf16::MAX.to_f32()),
            ),
            _ => (f64::from(f32::MIN), f64::from(f32::MAX)),
        };
        let fill = |v: f64| Tensor::full(&[], v, dt, self.device());
        let x = Tensor::where_cond(&self.isnan()?, &fill(nan)?, self)?;
        let x = Tensor::where_cond(
            &x.eq_scalar(f64::INFINITY)?,
            &fill(posinf.unwrap_or(hi))?,
            &x,
        )?;
        Tensor::where_cond(
            &x.eq_scalar(f64::NEG_INFINITY)?,
            &fill(neginf.unwrap_or(lo))?,
            &x,
        )
    }

    /// `true` where the element is zero (false), as bool.
    pub fn logical_not(&self) -> Result<Tensor> {
        let _op = op_context("logical_not");
        self.eq_scalar(0.0)
    }

    /// Elementwise `self != 0 and other != 0`, broadcast, as bool.
    pub fn logical_and(&self, other: &Tensor) -> Result<Tensor> {
        let _op = op_context("logical_and");
        self.ne_scalar(0.0)?
            .mul(&other.ne_scalar(0.0)?)
            .map_err(|e| e.reported_as("logical_and"))
    }

    /// Elementwise `self != 0 or other != 0`, broadcast, as bool.
    pub fn logical_or(&self, other: &Tensor) -> Result<Tensor> {
        let _op = op_context("logical_or");
        self.ne_scalar(0.0)?
            .maximum(&other.ne_scalar(0.0)?)
            .map_err(|e| e.reported_as("logical_or"))
    }

    /// Elementwise `(self != 0) != (other != 0)`, broadcast, as bool.
    pub fn logical_xor(&self, other: &Tensor) -> Result<Tensor> {
        let _op = op_context("logical_xor");
        self.ne_scalar(0.0)?
            .ne(&other.ne_scalar(0.0)?)
            .map_err(|e| e.reported_as("logical_xor"))
    }

    /// `self + weight (end - self)` (`torch.lerp` with a scalar weight;
    /// for `|weight| >= 0.5`, `end - (end - self)(1 - weight)`, as PyTorch
    /// computes it, so that weight 1 gives `end` exactly). Both tensors
    /// must be of one float dtype; they broadcast.
    pub fn lerp(&self, end: &Tensor, weight: f64) -> Result<Tensor> {
        let op = "lerp";
        let _op = op_context(op);
        if !self.dtype().is_float() || self.dtype() != end.dtype() {
            bail!(Error::arg(
                op,
                format!(
                    "needs two tensors of one float dtype, got {} and {}",
                    self.dtype(),
                    end.dtype()
                )
            ));
        }
        let diff = end.sub(self).map_err(|e| e.reported_as(op))?;
        if weight.abs() < 0.5 {
            self.add(&diff.mul_scalar(weight)?)
        } else {
            end.sub(&diff.mul_scalar(1.0 - weight)?)
        }
        .map_err(|e| e.reported_as(op))
    }

    /// The outer product of two vectors: `[n] x [m] -> [n, m]`.
    pub fn outer(&self, other: &Tensor) -> Result<Tensor> {
        let _op = op_context("outer");
        rank_is("outer", self, 1, "the first vector")?;
        rank_is("outer", other, 1, "the second vector")?;
        self.unsqueeze(1)?.mul(&other.unsqueeze(0)?)
    }

    /// The dot product of two vectors of one length and dtype (a rank-0
    /// tensor).
    pub fn dot(&self, other: &Tensor) -> Result<Tensor> {
        let op = "dot";
        let _op = op_context(op);
        rank_is(op, self, 1, "the first vector")?;
        rank_is(op, other, 1, "the second vector")?;
        if self.shape() != other.shape()
            || self.dtype() != other.dtype()
            || self.dtype() == DType::Bool
        {
            bail!(Error::shape(
                op,
                self.shape(),
                other.shape(),
                format!(
                    "needs two vectors of one length and dtype ({} and {})",
                    self.dtype(),
                    other.dtype()
                )
            ));
        }
        // One product-sum (as PyTorch's): no rounding of each product, an
        // integer dot keeps its dtype, and half types sum in f32 (the f16
        // matmul path can overflow on a product: [300, 300] . [300, -300]).
        let dt = self.dtype();
        if matches!(dt, DType::F16 | DType::BF16) {
            return self
                .to_dtype(DType::F32)?
                .matmul(&other.to_dtype(DType::F32)?)?
                .to_dtype(dt);
        }
        self.matmul(other).map_err(|e| e.reported_as(op))
    }

    /// Matrix product of two matrices (rank 2 each, no broadcasting).
    pub fn mm(&self, other: &Tensor) -> Result<Tensor> {
        let _op = op_context("mm");
        rank_is("mm", self, 2, "the first matrix")?;
        rank_is("mm", other, 2, "the second matrix")?;
        self.matmul(other).map_err(|e| e.reported_as("mm"))
    }

    /// Batched matrix product of `[b, n, k]` and `[b, k, m]` (no
    /// broadcasting).
    pub fn bmm(&self, other: &Tensor) -> Result<Tensor> {
        let _op = op_context("bmm");
        rank_is("bmm", self, 3, "the first batch")?;
        rank_is("bmm", other, 3, "the second batch")?;
        if self.shape()[0] != other.shape()[0] {
            bail!(Error::shape(
                "bmm",
                self.shape(),
                other.shape(),
                "the batch sizes must be equal"
            ));
        }
        self.matmul(other).map_err(|e| e.reported_as("bmm"))
    }

    /// `beta self + alpha (m1 @ m2)` (`torch.addmm`): `self` of the
    /// product's dtype, broadcasting to its shape `[n, m]`; with `beta` 0
    /// `self` is not read (its NaNs do not propagate), as in PyTorch.
    pub fn addmm(&self, m1: &Tensor, m2: &Tensor, beta: f64, alpha: f64) -> Result<Tensor> {
        let op = "addmm";
        let _op = op_context(op);
        let prod = m1.mm(m2).map_err(|e| e.reported_as(op))?;
        if self.dtype() != prod.dtype() {
            bail!(Error::arg(
                op,
                format!(
                    "self is {} but the matrices are {}",
                    self.dtype(),
                    prod.dtype()
                )
            ));
        }
        let fits = crate::layout::broadcast_shapes(op, self.shape(), prod.shape())
            .is_ok_and(|s| s.as_slice() == prod.shape());
        if !fits {
            bail!(Error::shape(
                op,
                self.shape(),
                prod.shape(),
                "self must broadcast to the product's shape"
            ));
        }
        let scaled = prod.mul_scalar(alpha)?;
        if beta == 0.0 {
            return Ok(scaled);
        }
        self.mul_scalar(beta)?
            .add(&scaled)
            .map_err(|e| e.reported_as(op))
    }

    /// `torch.clamp(x, min, max)` with tensor bounds (either may be
    /// `None`, not both), broadcast with PyTorch's type promotion:
    /// `minimum(maximum(x, min), max)`, so NaN in `x` or in a bound gives
    /// NaN and `min > max` gives `max`. The gradient is PyTorch 2.15's: to
    /// `x` strictly inside, to `min` below and `max` above, split evenly
    /// between `x` and the bound it ties; all to `max` where `min > max`,
    /// all to `x` where `x == min == max` (with one bound, `maximum`'s or
    /// `minimum`'s).
    ///
    /// ```
    /// # use tensorscope::{Tensor, Device};
    /// let x = Tensor::from_slice(&[-2.0f32, 0.5, 3.0], &[3], Device::Cpu)?;
    /// let lo = Tensor::from_slice(&[-1.0f32, 1.0, 0.0], &[3], Device::Cpu)?;
    /// let hi = Tensor::from_slice(&[2.0f32], &[1], Device::Cpu)?;
    /// assert_eq!(x.clamp_tensor(Some(&lo), Some(&hi))?.to_vec::<f32>()?, [-1.0, 1.0, 2.0]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn clamp_tensor(&self, min: Option<&Tensor>, max: Option<&Tensor>) -> Result<Tensor> {
        const OP: &str = "clamp";
        const NODE: &str = "ClampBackward";
        let _op = op_context(OP);
        let (lo, hi) = match (min, max) {
            (None, None) => bail!(Error::arg(OP, "at least one of min and max must be given")),
            (Some(lo), None) => return self.maximum(lo).map_err(|e| e.reported_as(OP)),
            (None, Some(hi)) => return self.minimum(hi).map_err(|e| e.reported_as(OP)),
            (Some(lo), Some(hi)) => (lo, hi),
        };
        let out = no_grad(|| self.maximum(lo)?.minimum(hi)).map_err(|e| e.reported_as(OP))?;
        let inputs = [self, lo, hi];
        if !needs_grad(&inputs) {
            return Ok(out);
        }
        let (kx, klo, khi) = (
            Saved::new(self, NODE)?,
            Saved::new(lo, NODE)?,
            Saved::new(hi, NODE)?,
        );
        let meta = inputs.map(|t| (t.shape().to_vec(), t.dtype(), t.requires_grad()));
        let f: BackwardFn = Box::new(move |g| {
            let (x, lo, hi) = (kx.get()?, klo.get()?, khi.get()?);
            let m = |b: Tensor| b.to_dtype(g.dtype());
            let split = lo.lt(hi)?;
            let crossed = lo.gt(hi)?;
            let open = m(crossed.logical_not()?)?;
            let x_lo = x.eq(lo)?;
            let half_lo = m(x_lo.logical_and(&split)?)?.mul_scalar(0.5)?;
            let half_hi = m(x.eq(hi)?.logical_and(&split)?)?.mul_scalar(0.5)?;
            let inside = m(x.gt(lo)?.logical_and(&x.lt(hi)?)?)?;
            let all_tie = m(x_lo.logical_and(&lo.eq(hi)?)?)?;
            let coef = [
                inside
                    .add(&half_lo)?
                    .add(&half_hi)?
                    .add(&all_tie)?
                    .mul(&open)?,
                m(x.lt(lo)?)?.add(&half_lo)?.mul(&open)?,
                m(x.gt(hi)?)?.add(&half_hi)?.mul(&open)?.add(&m(crossed)?)?,
            ];
            coef.iter()
                .zip(&meta)
                .map(|(c, (s, d, r))| r.then(|| sum_to(&g.mul(c)?, s, *d)).transpose())
                .collect()
        });
        Ok(attach(out, NODE, &inputs, f))
    }

    /// The elements on and below diagonal `k` of the last two dimensions
    /// (`torch.tril`), zeros elsewhere.
    pub fn tril(&self, k: i64) -> Result<Tensor> {
        let _op = op_context("tril");
        self.triangle("tril", k, true)
    }

    /// The elements on and above diagonal `k` of the last two dimensions
    /// (`torch.triu`), zeros elsewhere.
    pub fn triu(&self, k: i64) -> Result<Tensor> {
        let _op = op_context("triu");
        self.triangle("triu", k, false)
    }

    fn triangle(&self, op: &'static str, k: i64, lower: bool) -> Result<Tensor> {
        if self.rank() < 2 {
            bail!(Error::arg(
                op,
                format!("needs at least 2 dimensions, got shape {:?}", self.shape())
            ));
        }
        let (r, c) = (self.shape()[self.rank() - 2], self.shape()[self.rank() - 1]);
        let dev = self.device();
        let rows = Tensor::arange(0.0, r as f64, 1.0, DType::I64, dev)?.unsqueeze(1)?;
        let cols = Tensor::arange(0.0, c as f64, 1.0, DType::I64, dev)?.unsqueeze(0)?;
        // j - i against k.
        let d = cols.sub(&rows)?;
        let keep = if lower {
            d.le_scalar(k as f64)?
        } else {
            d.ge_scalar(k as f64)?
        };
        let zero = Tensor::zeros(&[], self.dtype(), dev)?;
        Tensor::where_cond(&keep, self, &zero)
    }

    /// The elements in reverse order along each of `dims` (`torch.flip`; a
    /// copy).
    pub fn flip(&self, dims: &[isize]) -> Result<Tensor> {
        let op = "flip";
        let _op = op_context(op);
        let mut out = self.alias();
        let mut seen = vec![false; self.rank()];
        for &d in dims {
            let d = normalize_dim(op, d, self.rank())?;
            if std::mem::replace(&mut seen[d], true) {
                bail!(Error::arg(op, format!("dim {d} appears twice in {dims:?}")));
            }
            let n = self.shape()[d];
            let idx = Tensor::arange(n as f64 - 1.0, -1.0, -1.0, DType::I64, self.device())?;
            out = out.index_select(d as isize, &idx)?;
        }
        if dims.is_empty() {
            out = out.deep_clone()?;
        }
        Ok(out)
    }

    /// The elements shifted by `shifts[i]` along `dims[i]`, wrapping round
    /// (`torch.roll`; a copy). With no dims, the flattened tensor rolls by
    /// `shifts[0]` and keeps its shape.
    pub fn roll(&self, shifts: &[i64], dims: &[isize]) -> Result<Tensor> {
        let op = "roll";
        let _op = op_context(op);
        if dims.is_empty() {
            let [s] = shifts else {
                bail!(Error::arg(
                    op,
                    format!("without dims it takes one shift, got {shifts:?}")
                ));
            };
            let flat = self.reshape(&[-1])?.roll(&[*s], &[0])?;
            let shape: Vec<isize> = self.shape().iter().map(|&v| v as isize).collect();
            return flat.reshape(&shape);
        }
        if shifts.len() != dims.len() {
            bail!(Error::arg(
                op,
                format!("{} shifts for {} dims", shifts.len(), dims.len())
            ));
        }
        let mut out = self.alias();
        for (&s, &d) in shifts.iter().zip(dims) {
            let d = normalize_dim(op, d, self.rank())?;
            let n = self.shape()[d];
            if n == 0 {
                continue;
            }
            let s = s.rem_euclid(n as i64) as usize;
            if s == 0 {
                continue;
            }
            let tail = out.narrow(d as isize, n - s, s)?;
            let head = out.narrow(d as isize, 0, n - s)?;
            out = Tensor::cat(&[&tail, &head], d as isize)?;
        }
        if out.shares_storage(self) {
            out = out.deep_clone()?;
        }
        Ok(out)
    }
}
