//! Sampling: `randint`, `randperm`, `bernoulli` with a tensor of
//! probabilities and `multinomial` (PyTorch's functions of the same
//! names), on every device, each built from one uniform fill of the
//! generator and ops that already run on both devices:
//!
//! * `randint(low, high)`: `low + floor(u (high - low))` from f64 uniforms,
//!   the sum in int64 (ranges up to 2^53, larger ones are an `Err`);
//! * `randperm(n)`: the stable argsort of `n` f64 uniforms;
//! * `bernoulli()`: `u < p`, in the probabilities' dtype;
//! * `multinomial(k, replacement)`: with replacement the inverse of each
//!   row's cumulative distribution (`#{j : cdf_j <= u total}`); without, the
//!   `k` largest `p_j / e_j` with `e_j = -ln u_j` exponential (PyTorch's
//!   algorithm: the exponential race, so each draw is proportional to the
//!   remaining weights).
//!
//! The numbers follow this library's generators, not PyTorch's (deviation
//! 9): the tests check the distributions, the ranges and the errors.

use crate::device::Device;
use crate::dtype::DType;
use crate::error::{bail, Error, Result};
use crate::random::{with_global, Generator};
use crate::tensor::Tensor;

/// Largest `high - low` whose values f64 uniforms reach evenly.
const RANDINT_SPAN: u64 = 1 << 53;

impl Tensor {
    /// Integers uniform in `[low, high)` (`torch.randint(low, high,
    /// shape)`), of an integer or float `dtype`, from the global generator.
    /// An `Err` naming `randint` if `high <= low` (on a non-empty shape),
    /// if the range is wider than 2^53, or if `dtype` cannot hold it.
    ///
    /// ```
    /// use tensorscope::{DType, Device, Tensor};
    /// let t = Tensor::randint(-3, 4, &[1000], DType::I64, Device::Cpu)?;
    /// let v = t.to_vec::<i64>()?;
    /// assert!(v.iter().all(|x| (-3..4).contains(x)));
    /// assert!((-3..4).all(|x| v.contains(&x)));
    /// assert!(Tensor::randint(2, 2, &[3], DType::I64, Device::Cpu).is_err());
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn randint(
        low: i64,
        high: i64,
        shape: &[usize],
        dtype: DType,
        device: Device,
    ) -> Result<Tensor> {
        with_global(|g| Tensor::randint_with(low, high, shape, dtype, device, g))
    }

    /// [`randint`](Tensor::randint) from an explicit generator.
    pub fn randint_with(
        low: i64,
        high: i64,
        shape: &[usize],
        dtype: DType,
        device: Device,
        gen: &mut Generator,
    ) -> Result<Tensor> {
        const OP: &str = "randint";
        let n: usize = shape.iter().product();
        if n > 0 && high <= low {
            bail!(Error::arg(
                OP,
                format!("high ({high}) must be greater than low ({low})")
            ));
        }
        let span = (high as i128 - low as i128).max(0) as u128;
        if span > RANDINT_SPAN as u128 {
            bail!(Error::arg(
                OP,
                format!("the range [{low}, {high}) is wider than 2^53, which f64 uniforms cannot cover evenly")
            ));
        }
        if dtype == DType::Bool {
            bail!(Error::dtype(OP, "an integer or float dtype", dtype));
        }
        if n > 0 {
            // Both ends must be values of the dtype (PyTorch: "from is out
            // of bounds" / "to - 1 is out of bounds").
            for v in [low, high - 1] {
                if !holds_integer(dtype, v) {
                    bail!(Error::arg(
                        OP,
                        format!("{v} (of the range [{low}, {high})) is out of bounds for {dtype}")
                    ));
                }
            }
        }
        let u = Tensor::rand_with(shape, DType::F64, device, gen).map_err(|e| e.reported_as(OP))?;
        // The offset in f64 (exact below 2^53), `low` added in int64 (an
        // f64 `low` near i64's ends would round).
        let low_t = Tensor::from_slice(&[low], &[], device).map_err(|e| e.reported_as(OP))?;
        u.mul_scalar(span as f64)
            .and_then(|t| t.floor())
            .and_then(|t| t.to_dtype(DType::I64))
            .and_then(|t| t.add(&low_t))
            .and_then(|t| t.to_dtype(dtype))
            .map_err(|e| e.reported_as(OP))
    }

    /// A random permutation of `0..n` (`torch.randperm(n)`), int64, from the
    /// global generator.
    ///
    /// ```
    /// use tensorscope::{Device, Tensor};
    /// let mut p = Tensor::randperm(10, Device::Cpu)?.to_vec::<i64>()?;
    /// p.sort();
    /// assert_eq!(p, (0..10).collect::<Vec<i64>>());
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn randperm(n: usize, device: Device) -> Result<Tensor> {
        with_global(|g| Tensor::randperm_with(n, device, g))
    }

    /// [`randperm`](Tensor::randperm) from an explicit generator.
    pub fn randperm_with(n: usize, device: Device, gen: &mut Generator) -> Result<Tensor> {
        const OP: &str = "randperm";
        Tensor::rand_with(&[n], DType::F64, device, gen)
            .and_then(|u| u.argsort(0, false))
            .map_err(|e| e.reported_as(OP))
    }

    /// Draws each element independently: 1 with probability `self` (which
    /// must lie in `[0, 1]`), else 0, in `self`'s float dtype
    /// (`torch.bernoulli(p)`), from the global generator. No gradient
    /// flows (PyTorch's is zero too).
    ///
    /// ```
    /// use tensorscope::{DType, Device, Tensor};
    /// let p = Tensor::from_slice(&[0.0f32, 1.0, 0.5], &[3], Device::Cpu)?;
    /// let b = p.bernoulli()?.to_vec::<f32>()?;
    /// assert_eq!((b[0], b[1]), (0.0, 1.0));
    /// assert!(Tensor::full(&[2], 1.5, DType::F32, Device::Cpu)?.bernoulli().is_err());
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn bernoulli(&self) -> Result<Tensor> {
        with_global(|g| self.bernoulli_with_gen(g))
    }

    /// [`bernoulli`](Tensor::bernoulli) from an explicit generator.
    pub fn bernoulli_with_gen(&self, gen: &mut Generator) -> Result<Tensor> {
        const OP: &str = "bernoulli";
        if !self.dtype().is_float() {
            bail!(Error::dtype(OP, "float probabilities", self.dtype()));
        }
        crate::autograd::no_grad(|| -> Result<Tensor> {
            check_probabilities(OP, self)?;
            let u = Tensor::rand_with(self.shape(), self.dtype(), self.device(), gen)?;
            u.lt(self)?.to_dtype(self.dtype())
        })
        .map_err(|e| e.reported_as(OP))
    }

    /// `num_samples` category indices per row of the non-negative weights
    /// `self` (`[n]` or `[rows, n]`, not necessarily normalised), int64
    /// `[num_samples]` or `[rows, num_samples]` (`torch.multinomial`), from
    /// the global generator. Without replacement no index repeats within a
    /// row, and `num_samples` may not exceed the categories with a
    /// positive weight. An `Err` naming `multinomial` for a negative,
    /// infinite or NaN weight, a row summing to zero, or a bad count.
    ///
    /// ```
    /// use tensorscope::{Device, Tensor};
    /// let w = Tensor::from_slice(&[0.0f32, 3.0, 1.0, 0.0], &[4], Device::Cpu)?;
    /// let mut s = w.multinomial(2, false)?.to_vec::<i64>()?;
    /// s.sort();
    /// assert_eq!(s, [1, 2]); // the only two categories with weight
    /// assert!(w.multinomial(3, false).is_err());
    /// assert!(w.multinomial(100, true)?.to_vec::<i64>()?.iter().all(|&i| i == 1 || i == 2));
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn multinomial(&self, num_samples: usize, replacement: bool) -> Result<Tensor> {
        with_global(|g| self.multinomial_with(num_samples, replacement, g))
    }

    /// [`multinomial`](Tensor::multinomial) from an explicit generator.
    pub fn multinomial_with(
        &self,
        num_samples: usize,
        replacement: bool,
        gen: &mut Generator,
    ) -> Result<Tensor> {
        const OP: &str = "multinomial";
        if !self.dtype().is_float() {
            bail!(Error::dtype(OP, "float weights", self.dtype()));
        }
        if !matches!(self.rank(), 1 | 2) {
            bail!(Error::arg(
                OP,
                format!(
                    "the weights must be [n] or [rows, n], got shape {:?}",
                    self.shape()
                )
            ));
        }
        let cats = self.shape()[self.rank() - 1];
        if cats == 0 {
            bail!(Error::arg(OP, "the weights have no category"));
        }
        if num_samples == 0 {
            bail!(Error::arg(OP, "num_samples must be at least 1"));
        }
        if !replacement && num_samples > cats {
            bail!(Error::arg(
                OP,
                format!(
                    "cannot draw {num_samples} samples without replacement from {cats} categories"
                )
            ));
        }
        crate::autograd::no_grad(|| -> Result<Tensor> {
            let p = if self.rank() == 1 {
                self.unsqueeze(0)?
            } else {
                self.alias()
            }
            .to_dtype(DType::F64)?;
            let rows = p.shape()[0];
            if any_true(&p.isfinite()?.logical_not()?)? || any_true(&p.lt_scalar(0.0)?)? {
                bail!(Error::arg(
                    OP,
                    "the weights must be finite and non-negative"
                ));
            }
            let total = p.sum(&[-1], true)?; // [rows, 1]
            if any_true(&total.le_scalar(0.0)?)? {
                bail!(Error::arg(OP, "every row of weights must have a positive sum"));
            }
            let out = if replacement {
                // Inverse CDF: the number of categories whose cumulative
                // weight is at most u * total. The last category absorbs
                // rounding (a count of `cats` is clamped to `cats - 1`),
                // and a zero-weight category is never returned: its cdf
                // equals the previous one's.
                let cdf = p.cumsum(-1)?; // [rows, cats]
                let u = Tensor::rand_with(&[rows, num_samples], DType::F64, p.device(), gen)?
                    .mul(&total)?; // [rows, k]
                let below = cdf.unsqueeze(1)?.le(&u.unsqueeze(2)?)?; // [rows, k, cats]
                let idx = below.to_dtype(DType::I64)?.sum(&[-1], false)?;
                idx.clamp(None, Some((cats - 1) as f64))?
            } else {
                let positive = p.gt_scalar(0.0)?.to_dtype(DType::I64)?.sum(&[-1], false)?;
                if any_true(&positive.lt_scalar(num_samples as f64)?)? {
                    bail!(Error::arg(
                        OP,
                        format!("a row has fewer than {num_samples} categories with a positive weight, so they cannot be drawn without replacement")
                    ));
                }
                // The exponential race: the k largest p / e, e ~ Exp(1).
                let u = Tensor::rand_with(&[rows, cats], DType::F64, p.device(), gen)?;
                let e = u.neg()?.log1p()?.neg()?; // -ln(1 - u) in (0, inf)
                p.div(&e)?.topk(num_samples, -1, true)?.1
            };
            if self.rank() == 1 {
                out.squeeze_dim(0)
            } else {
                Ok(out)
            }
        })
        .map_err(|e| e.reported_as(OP))
    }
}

/// Probabilities in `[0, 1]` (NaN refused), as PyTorch's `bernoulli`
/// checks them.
fn check_probabilities(op: &'static str, p: &Tensor) -> Result<()> {
    let inside = p.ge_scalar(0.0)?.logical_and(&p.le_scalar(1.0)?)?;
    if any_true(&inside.logical_not()?)? {
        bail!(Error::arg(op, "every probability must be in [0, 1]"));
    }
    Ok(())
}

/// Whether any element of a bool tensor is true.
fn any_true(t: &Tensor) -> Result<bool> {
    Ok(t.to_dtype(DType::I64)?.sum_all()?.item::<i64>()? > 0)
}

/// Whether `v` is a value of `dtype` (for a float dtype: an integer it
/// holds exactly together with its neighbours, `|v| <= 2^digits`, as
/// PyTorch's `randint` checks).
fn holds_integer(dtype: DType, v: i64) -> bool {
    let (lo, hi): (i128, i128) = match dtype {
        DType::U8 => (0, 255),
        DType::I32 => (i32::MIN as i128, i32::MAX as i128),
        DType::I64 => (i64::MIN as i128, i64::MAX as i128),
        DType::F16 => (-(1 << 11), 1 << 11),
        DType::BF16 => (-(1 << 8), 1 << 8),
        DType::F32 => (-(1 << 24), 1 << 24),
        DType::F64 => (-(1 << 53), 1 << 53),
        DType::Bool => (0, 1),
    };
    (lo..=hi).contains(&(v as i128))
}
