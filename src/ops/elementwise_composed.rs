//! Elementwise ops written with the ops below them, so they run on every
//! device and autograd differentiates them: `isnan`, `isinf`, `isfinite`,
//! `nan_to_num`, the `logical_*` ops, `lerp`, `clamp` with tensor
//! bounds and `round` to decimals.

use crate::alloc::history::op_context;
use crate::autograd::formulas::sum_to;
use crate::autograd::{attach, needs_grad, no_grad, BackwardFn, Saved};
use crate::dtype::DType;
use crate::error::{bail, Error, Result};
use crate::tensor::Tensor;

impl Tensor {
    /// `torch.round(x, decimals=d)`: halves to even at `d` decimals, as
    /// PyTorch computes it: `round(x * 10^d) / 10^d`, or for `d < 0`
    /// `round(x / 10^-d) * 10^-d`, in the tensor's dtype. Float tensors
    /// only; its gradient is 0, as `round`'s.
    ///
    /// ```
    /// use tensorscope::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1.2345f64, -2.5, 1234.5], &[3], Device::Cpu)?;
    /// assert_eq!(x.round_decimals(2)?.to_vec::<f64>()?, [1.23, -2.5, 1234.5]);
    /// assert_eq!(x.round_decimals(-2)?.to_vec::<f64>()?, [0.0, -0.0, 1200.0]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn round_decimals(&self, decimals: i32) -> Result<Tensor> {
        let _op = op_context("round");
        if !self.dtype().is_float() {
            bail!(Error::dtype(
                "round",
                "a float tensor when decimals are given",
                self.dtype()
            ));
        }
        if decimals == 0 {
            return self.round();
        }
        let p = 10f64.powi(decimals.abs());
        if decimals > 0 {
            self.mul_scalar(p)?.round()?.div_scalar(p)
        } else {
            self.div_scalar(p)?.round()?.mul_scalar(p)
        }
    }

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
}
