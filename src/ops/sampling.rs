//! Sampling: `randint`, `randperm`, `bernoulli` with a tensor of
//! probabilities and `multinomial` (PyTorch's functions of the same
//! names), on every device, each built from one uniform fill of the
//! generator and ops that already run on both devices:
//!
//! * `randint(low, high)`: `low + floor(u (high - low))` from f64 uniforms,
//!   the sum in int64 (ranges up to 2^53, larger ones are an `Err`);
//! * `randperm(n)`: the stable argsort of `n` f64 uniforms;
//! * `bernoulli()`: `u < p`, compared in f32 (f64 for f64 probabilities:
//!   half-precision uniforms would put every `p` on a 2^-8 or 2^-11 grid),
//!   the result in the probabilities' dtype;
//! * `multinomial(k, replacement)`: with replacement the inverse of each
//!   row's cumulative distribution (`#{j : cdf_j <= u total}`, the weights
//!   first divided by the row's largest so the sum cannot overflow, capped
//!   at the row's last positive weight); this compares every draw with every
//!   category, `O(rows k n)` work, in chunks of draws so that the workspace
//!   stays under about 16 M comparisons. Without replacement: the `k`
//!   largest `p_j / e_j` with `e_j = -ln(1 - u_j)` exponential (PyTorch's
//!   algorithm, the exponential race, so each draw is proportional to the
//!   remaining weights; a zero weight's key is `-inf`, never drawn), an
//!   `argmax` when `k = 1`.
//!
//! The global generator is held only while the uniforms are drawn; the
//! checks and the arithmetic run after it is released.
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
        let span = randint_check(low, high, shape, dtype)?;
        let u = with_global(|g| Tensor::rand_with(shape, DType::F64, device, g))
            .map_err(|e| e.reported_as("randint"))?;
        randint_from(u, low, span, dtype)
    }

    /// [`randint`](Tensor::randint) from an explicit generator.
    pub fn randint_with(
        low: i64,
        high: i64,
        shape: &[usize],
        dtype: DType,
        device: Device,
        generator: &mut Generator,
    ) -> Result<Tensor> {
        let span = randint_check(low, high, shape, dtype)?;
        let u = Tensor::rand_with(shape, DType::F64, device, generator)
            .map_err(|e| e.reported_as("randint"))?;
        randint_from(u, low, span, dtype)
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
        with_global(|g| Tensor::rand_with(&[n], DType::F64, device, g))
            .and_then(|u| u.argsort(0, false))
            .map_err(|e| e.reported_as("randperm"))
    }

    /// [`randperm`](Tensor::randperm) from an explicit generator.
    pub fn randperm_with(n: usize, device: Device, generator: &mut Generator) -> Result<Tensor> {
        const OP: &str = "randperm";
        Tensor::rand_with(&[n], DType::F64, device, generator)
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
        let cmp = bernoulli_check(self)?;
        let u = with_global(|g| Tensor::rand_with(self.shape(), cmp, self.device(), g))
            .map_err(|e| e.reported_as("bernoulli"))?;
        self.bernoulli_from(u)
    }

    /// [`bernoulli`](Tensor::bernoulli) from an explicit generator.
    pub fn bernoulli_with_gen(&self, generator: &mut Generator) -> Result<Tensor> {
        let cmp = bernoulli_check(self)?;
        let u = Tensor::rand_with(self.shape(), cmp, self.device(), generator)
            .map_err(|e| e.reported_as("bernoulli"))?;
        self.bernoulli_from(u)
    }

    /// `u < self` in `u`'s dtype, as `self`'s dtype.
    fn bernoulli_from(&self, u: Tensor) -> Result<Tensor> {
        crate::autograd::no_grad(|| u.lt(&self.to_dtype(u.dtype())?)?.to_dtype(self.dtype()))
            .map_err(|e| e.reported_as("bernoulli"))
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
        let (p, rows, cats) = self.multinomial_check(num_samples, replacement)?;
        let u = with_global(|g| {
            Tensor::rand_with(
                &uniforms(rows, cats, num_samples, replacement),
                DType::F64,
                p.device(),
                g,
            )
        })
        .map_err(|e| e.reported_as("multinomial"))?;
        self.multinomial_from(p, u, num_samples, replacement)
    }

    /// [`multinomial`](Tensor::multinomial) from an explicit generator.
    pub fn multinomial_with(
        &self,
        num_samples: usize,
        replacement: bool,
        generator: &mut Generator,
    ) -> Result<Tensor> {
        let (p, rows, cats) = self.multinomial_check(num_samples, replacement)?;
        let u = Tensor::rand_with(
            &uniforms(rows, cats, num_samples, replacement),
            DType::F64,
            p.device(),
            generator,
        )
        .map_err(|e| e.reported_as("multinomial"))?;
        self.multinomial_from(p, u, num_samples, replacement)
    }

    /// Checks the weights and the count; the weights as f64 `[rows, cats]`,
    /// each row divided by its largest (so sums cannot overflow).
    fn multinomial_check(
        &self,
        num_samples: usize,
        replacement: bool,
    ) -> Result<(Tensor, usize, usize)> {
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
        crate::autograd::no_grad(|| -> Result<(Tensor, usize, usize)> {
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
            let top = p.max(&[-1], true)?;
            if any_true(&top.le_scalar(0.0)?)? {
                bail!(Error::arg(OP, "every row of weights must have a positive sum"));
            }
            if !replacement {
                let positive = p.gt_scalar(0.0)?.to_dtype(DType::I64)?.sum(&[-1], false)?;
                if any_true(&positive.lt_scalar(num_samples as f64)?)? {
                    bail!(Error::arg(
                        OP,
                        format!("a row has fewer than {num_samples} categories with a positive weight, so they cannot be drawn without replacement")
                    ));
                }
            }
            Ok((p.div(&top)?, rows, cats))
        })
        .map_err(|e| e.reported_as(OP))
    }

    /// The draws from the checked weights `p` `[rows, cats]` and the
    /// uniforms `u` ([`uniforms`]).
    fn multinomial_from(
        &self,
        p: Tensor,
        u: Tensor,
        k: usize,
        replacement: bool,
    ) -> Result<Tensor> {
        let cats = p.shape()[1];
        crate::autograd::no_grad(|| -> Result<Tensor> {
            let out = if replacement {
                let cdf = p.cumsum(-1)?; // [rows, cats]
                let total = cdf.narrow(1, cats - 1, 1)?; // [rows, 1]
                                                         // The last category with a positive weight: a draw that
                                                         // rounds onto the total is capped there, so a zero weight
                                                         // is never returned (its cdf equals its predecessor's).
                let last = Tensor::arange(0.0, cats as f64, 1.0, DType::F64, p.device())?
                    .mul(&p.gt_scalar(0.0)?.to_dtype(DType::F64)?)?
                    .max(&[-1], true)?
                    .to_dtype(DType::I64)?;
                let v = u.mul(&total)?.unsqueeze(2)?; // [rows, k, 1]
                let chunk = (DRAW_CHUNK / cats).clamp(1, k);
                let mut parts = Vec::with_capacity(k.div_ceil(chunk));
                let cdf3 = cdf.unsqueeze(1)?; // [rows, 1, cats]
                for at in (0..k).step_by(chunk) {
                    let vs = v.narrow(1, at, chunk.min(k - at))?;
                    let n = cdf3.le(&vs)?.to_dtype(DType::I64)?.sum(&[-1], false)?;
                    parts.push(n);
                }
                let refs: Vec<&Tensor> = parts.iter().collect();
                Tensor::cat(&refs, 1)?.minimum(&last)?
            } else {
                // The exponential race: the k largest p / e, e ~ Exp(1);
                // e = 0 (u = 0) makes a positive weight's key inf, which
                // wins, as it should; a zero weight's key is -inf.
                let e = u.neg()?.log1p()?.neg()?; // -ln(1 - u) in [0, inf)
                let neg_inf = Tensor::full(&[], f64::NEG_INFINITY, DType::F64, p.device())?;
                let keys = Tensor::where_cond(&p.gt_scalar(0.0)?, &p.div(&e)?, &neg_inf)?;
                if k == 1 {
                    keys.argmax(-1, true)?
                } else {
                    keys.topk(k, -1, true)?.1
                }
            };
            if self.rank() == 1 {
                out.squeeze_dim(0)
            } else {
                Ok(out)
            }
        })
        .map_err(|e| e.reported_as("multinomial"))
    }
}

/// Comparisons per chunk of draws in `multinomial` with replacement.
const DRAW_CHUNK: usize = 1 << 24;

/// The uniforms `multinomial` needs: one per draw with replacement, one
/// per category without.
fn uniforms(rows: usize, cats: usize, k: usize, replacement: bool) -> [usize; 2] {
    if replacement {
        [rows, k]
    } else {
        [rows, cats]
    }
}

/// `randint`'s checks; the span `high - low`.
fn randint_check(low: i64, high: i64, shape: &[usize], dtype: DType) -> Result<u64> {
    const OP: &str = "randint";
    let n = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| Error::arg(OP, format!("the shape {shape:?} has too many elements")))?;
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
        // Both ends must be values of the dtype (PyTorch: "from is out of
        // bounds" / "to - 1 is out of bounds").
        for v in [low, high - 1] {
            if !holds_integer(dtype, v) {
                bail!(Error::arg(
                    OP,
                    format!("{v} (of the range [{low}, {high})) is out of bounds for {dtype}")
                ));
            }
        }
    }
    Ok(span as u64)
}

/// `low + floor(u span)` as `dtype`: the offset in f64 (exact below 2^53),
/// `low` added in int64 (an f64 `low` near i64's ends would round).
fn randint_from(u: Tensor, low: i64, span: u64, dtype: DType) -> Result<Tensor> {
    let low_t = Tensor::from_slice(&[low], &[], u.device())?;
    u.mul_scalar(span as f64)
        .and_then(|t| t.floor())
        .and_then(|t| t.to_dtype(DType::I64))
        .and_then(|t| t.add(&low_t))
        .and_then(|t| t.to_dtype(dtype))
        .map_err(|e| e.reported_as("randint"))
}

/// `bernoulli`'s checks; the dtype the uniforms are drawn and compared in.
fn bernoulli_check(p: &Tensor) -> Result<DType> {
    const OP: &str = "bernoulli";
    if !p.dtype().is_float() {
        bail!(Error::dtype(OP, "float probabilities", p.dtype()));
    }
    crate::autograd::no_grad(|| check_probabilities(OP, p)).map_err(|e| e.reported_as(OP))?;
    Ok(if p.dtype() == DType::F64 {
        DType::F64
    } else {
        DType::F32
    })
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
