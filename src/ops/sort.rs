//! Sorting: `sort`, `argsort`, `topk`, `median` and
//! `quantile`.
//! One kernel computes the stable sorting permutation of the rows of a
//! contiguous tensor (`backend::sort`, on both devices); the values are
//! gathered with `gather`, so autograd differentiates them (the gradient
//! goes back to the positions they came from).
//!
//! The order is `torch.sort`'s with `stable=True`: ascending puts NaN after
//! every number, descending before; equal elements keep their order.

use crate::alloc::history::op_context;
use crate::autograd::no_grad;
use crate::backend::{sort, Operand};
use crate::dtype::DType;
use crate::error::{bail, Error, Result};
use crate::layout::normalize_dim;
use crate::tensor::Tensor;

/// How [`Tensor::quantiles`] picks a value between the two sorted elements
/// around a quantile's position `q * (n - 1)` (`torch.quantile`'s
/// `interpolation`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Interpolation {
    /// `lo + (hi - lo) * frac` (PyTorch's default).
    #[default]
    Linear,
    /// The lower element.
    Lower,
    /// The higher element.
    Higher,
    /// The mean of the two.
    Midpoint,
    /// The element at the position rounded half to even.
    Nearest,
}

/// `q` as PyTorch uses it to place a quantile: rounded to the input's
/// dtype (its `q` tensor has that dtype), then widened, so that the
/// position `q (n - 1)` is computed in f64. Measured with torch 2.15 on 6
/// values: f32 `q = 0.1` gives position 0.50000000745 (the 'nearest'
/// element is index 1, not 0 as f64's exact 0.5 rounds), `q = 0.2`
/// 1.0000000149 ('higher' is index 2, which an f32 product, 1.0 exactly,
/// would miss). The differential suite holds such cases.
fn quantile_q(q: f64, dt: DType) -> f64 {
    if dt == DType::F32 {
        q as f32 as f64
    } else {
        q
    }
}

impl Tensor {
    /// `torch.sort(x, dim, descending, stable=True)`: the values along
    /// `dim` in order and their indices (int64). Every dtype; NaN last
    /// ascending, first descending; equal elements in their original
    /// order. The values are differentiable.
    ///
    /// ```
    /// # use tensorscope::{Tensor, Device};
    /// let x = Tensor::from_slice(&[3.0f32, f32::NAN, 1.0, 3.0], &[4], Device::Cpu)?;
    /// let (v, i) = x.sort(0, false)?;
    /// assert_eq!(i.to_vec::<i64>()?, [2, 0, 3, 1]);
    /// assert!(v.to_vec::<f32>()?[3].is_nan());
    /// let (_, i) = x.sort(0, true)?;
    /// assert_eq!(i.to_vec::<i64>()?, [1, 0, 3, 2]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn sort(&self, dim: isize, descending: bool) -> Result<(Tensor, Tensor)> {
        let _op = op_context("sort");
        let idx = self.sort_indices("sort", dim, descending)?;
        let values = self.gather_along("sort", dim, &idx)?;
        Ok((values, idx))
    }

    /// `torch.argsort(x, dim, descending, stable=True)`: the indices of
    /// [`sort`](Tensor::sort).
    pub fn argsort(&self, dim: isize, descending: bool) -> Result<Tensor> {
        let _op = op_context("argsort");
        self.sort_indices("argsort", dim, descending)
    }

    /// `torch.topk(x, k, dim, largest, sorted=True)`: the `k` largest (or
    /// smallest) values along `dim`, in order, and their indices. NaN
    /// counts as the largest value. An `Err` when `k` exceeds the
    /// dimension's size.
    ///
    /// ```
    /// # use tensorscope::{Tensor, Device};
    /// let x = Tensor::from_slice(&[1.0f32, 5.0, 2.0, 4.0], &[4], Device::Cpu)?;
    /// let (v, i) = x.topk(2, -1, true)?;
    /// assert_eq!((v.to_vec::<f32>()?, i.to_vec::<i64>()?), (vec![5.0, 4.0], vec![1, 3]));
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn topk(&self, k: usize, dim: isize, largest: bool) -> Result<(Tensor, Tensor)> {
        const OP: &str = "topk";
        let _op = op_context(OP);
        let d = normalize_dim(OP, dim, self.rank().max(1))?;
        let size = if self.rank() == 0 { 1 } else { self.shape()[d] };
        if k > size {
            bail!(Error::arg(
                OP,
                format!(
                    "k ({k}) is larger than dimension {d} of shape {:?}",
                    self.shape()
                )
            ));
        }
        let idx = self.sort_indices(OP, dim, largest)?;
        let idx = if self.rank() == 0 {
            idx
        } else {
            idx.narrow(d as isize, 0, k)?.contiguous()?
        };
        let values = self.gather_along(OP, dim, &idx)?;
        Ok((values, idx))
    }

    /// `torch.median(x, dim, keepdim)`: the lower median along `dim` (the
    /// element at position `(n - 1) / 2` of the sorted values) and its
    /// index; where the slice holds NaN, the first NaN and its index (as
    /// PyTorch). Differentiable (the gradient goes to the chosen element).
    /// An `Err` for an empty dimension.
    ///
    /// ```
    /// # use tensorscope::{Tensor, Device};
    /// let x = Tensor::from_slice(&[4.0f32, 1.0, 3.0, 2.0], &[2, 2], Device::Cpu)?;
    /// let (m, i) = x.median(1, false)?;
    /// assert_eq!((m.to_vec::<f32>()?, i.to_vec::<i64>()?), (vec![1.0, 2.0], vec![1, 1]));
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn median(&self, dim: isize, keepdim: bool) -> Result<(Tensor, Tensor)> {
        const OP: &str = "median";
        let _op = op_context(OP);
        let d = normalize_dim(OP, dim, self.rank().max(1))?;
        if self.rank() == 0 {
            let i = Tensor::zeros(&[], DType::I64, self.device())?;
            return Ok((self.alias(), i));
        }
        let n = self.shape()[d];
        if n == 0 {
            bail!(Error::arg(
                OP,
                format!(
                    "cannot take the median of an empty dimension {d} of shape {:?}",
                    self.shape()
                )
            ));
        }
        let order = self.sort_indices(OP, dim, false)?;
        let di = d as isize;
        let pos = no_grad(|| -> Result<Tensor> {
            let mid = (n - 1) / 2;
            if !self.dtype().is_float() {
                return Tensor::full(
                    &keep_shape(self.shape(), d),
                    mid as f64,
                    DType::I64,
                    self.device(),
                );
            }
            // Ascending order puts NaN last, in their original order: the
            // first NaN is at the count of numbers.
            let nan = self.isnan()?;
            let numbers = nan.logical_not()?.sum(&[di], true)?;
            let has_nan = nan.any(&[di], true)?;
            let mid = Tensor::full(&[], mid as f64, DType::I64, self.device())?;
            Tensor::where_cond(&has_nan, &numbers, &mid)
        })?;
        let idx = order.gather(di, &pos)?;
        let values = self.gather_along(OP, dim, &idx)?;
        if keepdim {
            Ok((values, idx))
        } else {
            Ok((values.squeeze_dim(di)?, idx.squeeze_dim(di)?))
        }
    }

    /// `torch.median(x)` over every element: the lower median, or NaN if
    /// any element is NaN; NaN for an empty float tensor (as PyTorch), an
    /// `Err` for an empty integer one.
    pub fn median_all(&self) -> Result<Tensor> {
        let _op = op_context("median");
        if self.numel() == 0 && self.dtype().is_float() {
            return Tensor::full(&[], f64::NAN, self.dtype(), self.device());
        }
        Ok(self.reshape(&[-1])?.median(0, false)?.0)
    }

    /// `torch.quantile(x, q, dim, keepdim)` with linear interpolation:
    /// the `q`-quantile along `dim` (`None`: of every element). See
    /// [`quantiles`](Tensor::quantiles).
    ///
    /// ```
    /// # use tensorscope::{Tensor, Device};
    /// let x = Tensor::from_slice(&[1.0f32, 4.0, 2.0, 3.0], &[4], Device::Cpu)?;
    /// assert!((x.quantile(0.4, None, false)?.item::<f32>()? - 2.2).abs() < 1e-6);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn quantile(&self, q: f64, dim: Option<isize>, keepdim: bool) -> Result<Tensor> {
        if let Some(c) = crate::autocast::cast(&crate::autocast::QUANTILE, &[Some(self)])? {
            return c.get(0).quantile(q, dim, keepdim);
        }
        let _op = op_context("quantile");
        self.quantile_impl(&[q], dim, keepdim, Interpolation::Linear, false)
    }

    /// `torch.quantile(x, q_tensor, dim, keepdim, interpolation)`: one
    /// quantile per entry of `q` (each in `[0, 1]`), stacked along a new
    /// first dimension. Float tensors only; a slice holding NaN gives NaN
    /// (as PyTorch's `quantile`; it has `nanquantile` to skip them).
    /// Differentiable through the sorted values.
    pub fn quantiles(
        &self,
        q: &[f64],
        dim: Option<isize>,
        keepdim: bool,
        interpolation: Interpolation,
    ) -> Result<Tensor> {
        if let Some(c) = crate::autocast::cast(&crate::autocast::QUANTILE, &[Some(self)])? {
            return c.get(0).quantiles(q, dim, keepdim, interpolation);
        }
        let _op = op_context("quantile");
        self.quantile_impl(q, dim, keepdim, interpolation, true)
    }

    /// `torch.nanquantile(x, q, dim, keepdim)`: [`quantile`](Tensor::quantile)
    /// over the elements that are not NaN (NaN only for a slice that is all
    /// NaN). Linear interpolation; see
    /// [`nanquantiles`](Tensor::nanquantiles) for the others.
    ///
    /// ```
    /// # use tensorscope::{Tensor, Device};
    /// let x = Tensor::from_slice(&[1.0f64, f64::NAN, 3.0, 2.0], &[4], Device::Cpu)?;
    /// assert_eq!(x.nanquantile(0.5, None, false)?.item::<f64>()?, 2.0);
    /// assert!(x.quantile(0.5, None, false)?.item::<f64>()?.is_nan());
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn nanquantile(&self, q: f64, dim: Option<isize>, keepdim: bool) -> Result<Tensor> {
        if let Some(c) = crate::autocast::cast(&crate::autocast::NANQUANTILE, &[Some(self)])? {
            return c.get(0).nanquantile(q, dim, keepdim);
        }
        let _op = op_context("nanquantile");
        self.nanquantile_impl(&[q], dim, keepdim, Interpolation::Linear, false)
    }

    /// `torch.nanquantile(x, q_tensor, dim, keepdim, interpolation)`: as
    /// [`quantiles`](Tensor::quantiles), skipping NaN. The position of
    /// quantile `q` in a slice with `c` numbers is `q (c - 1)`, computed per
    /// slice in f64 from `q` rounded to the input's dtype, as PyTorch does.
    pub fn nanquantiles(
        &self,
        q: &[f64],
        dim: Option<isize>,
        keepdim: bool,
        interpolation: Interpolation,
    ) -> Result<Tensor> {
        if let Some(c) = crate::autocast::cast(&crate::autocast::NANQUANTILE, &[Some(self)])? {
            return c.get(0).nanquantiles(q, dim, keepdim, interpolation);
        }
        let _op = op_context("nanquantile");
        self.nanquantile_impl(q, dim, keepdim, interpolation, true)
    }

    fn nanquantile_impl(
        &self,
        qs: &[f64],
        dim: Option<isize>,
        keepdim: bool,
        how: Interpolation,
        stacked: bool,
    ) -> Result<Tensor> {
        const OP: &str = "nanquantile";
        let (x, d, out_shape) = self.quantile_slices(OP, qs, dim, keepdim)?;
        let di = d as isize;
        let (sorted, _) = x.sort(di, false).map_err(|e| e.reported_as(OP))?;
        let dt = x.dtype();
        // Per slice: how many numbers (NaN sort last), in f64 (positions
        // are f64: see `quantile_q`).
        let count = no_grad(|| {
            x.isnan()?
                .logical_not()?
                .to_dtype(DType::I64)?
                .sum(&[di], true)?
                .to_dtype(DType::F64)
        })?;
        let mut out = Vec::with_capacity(qs.len());
        for &q in qs {
            let q = quantile_q(q, dt);
            let pick = |pos: &Tensor| -> Result<Tensor> {
                let i = no_grad(|| pos.to_dtype(DType::I64))?;
                sorted.gather(di, &i)
            };
            // A slice of only NaN has position 0 (PyTorch clamps the
            // negative `q (0 - 1)`): its first sorted element, a NaN, is
            // the value and takes the gradient, as in PyTorch.
            let (pos, lo, hi) = no_grad(|| -> Result<_> {
                let pos = count
                    .sub_scalar(1.0)?
                    .mul_scalar(q)?
                    .clamp(Some(0.0), None)?;
                let lo = pos.floor()?;
                let hi = pos.ceil()?;
                Ok((pos, lo, hi))
            })?;
            let v = match how {
                Interpolation::Lower => pick(&lo)?,
                Interpolation::Higher => pick(&hi)?,
                Interpolation::Nearest => pick(&no_grad(|| pos.round())?)?,
                Interpolation::Midpoint => {
                    let a = pick(&lo)?;
                    a.add(&pick(&hi)?.sub(&a)?.mul_scalar(0.5)?)?
                }
                Interpolation::Linear => {
                    let a = pick(&lo)?;
                    let w = no_grad(|| pos.sub(&lo)?.to_dtype(dt))?;
                    a.add(&pick(&hi)?.sub(&a)?.mul(&w)?)?
                }
            };
            out.push(v.reshape(&out_shape)?);
        }
        Self::quantile_result(out, qs, &out_shape, &x, stacked)
    }

    /// The checks and slicing shared by `quantile` and `nanquantile`:
    /// the tensor whose dimension `d` holds the slices (`self`, or all its
    /// elements as one) and each quantile's output shape.
    fn quantile_slices(
        &self,
        op: &'static str,
        qs: &[f64],
        dim: Option<isize>,
        keepdim: bool,
    ) -> Result<(Tensor, usize, Vec<isize>)> {
        if !matches!(self.dtype(), DType::F32 | DType::F64) {
            bail!(Error::dtype(
                op,
                "a float32 or float64 tensor (PyTorch: quantile() input tensor must be either float or double dtype)",
                self.dtype()
            ));
        }
        if self.numel() == 0 {
            bail!(Error::arg(
                op,
                format!(
                    "cannot take a quantile of an empty tensor of shape {:?}",
                    self.shape()
                )
            ));
        }
        if let Some(&q) = qs.iter().find(|q| !(0.0..=1.0).contains(*q)) {
            bail!(Error::arg(op, format!("q must be in [0, 1], got {q}")));
        }
        // The slices: along `dim`, or of every element (one slice).
        let (x, d) = match dim {
            Some(d) if self.rank() > 0 => (self.alias(), normalize_dim(op, d, self.rank())?),
            Some(d) => {
                normalize_dim(op, d, 1)?;
                (self.reshape(&[1])?, 0)
            }
            None => (self.reshape(&[-1])?, 0),
        };
        if x.shape()[d] == 0 {
            bail!(Error::arg(
                op,
                format!(
                    "cannot take a quantile of an empty slice of shape {:?}",
                    self.shape()
                )
            ));
        }
        // Each quantile's shape: the input's, with `dim` kept as 1 or
        // dropped (all dimensions for `dim = None`); a 0-d input gives 0-d.
        let out_shape: Vec<isize> = match (dim, keepdim) {
            _ if self.rank() == 0 => vec![],
            (Some(_), true) => keep_dims(self.shape(), d),
            (Some(_), false) => drop_dim(self.shape(), d),
            (None, true) => vec![1; self.rank()],
            (None, false) => vec![],
        };
        Ok((x, d, out_shape))
    }

    /// The quantiles stacked along a new first dimension (an empty one
    /// for no `q`), or the one quantile.
    fn quantile_result(
        mut out: Vec<Tensor>,
        qs: &[f64],
        out_shape: &[isize],
        x: &Tensor,
        stacked: bool,
    ) -> Result<Tensor> {
        if qs.is_empty() {
            let mut shape = vec![0usize];
            shape.extend(out_shape.iter().map(|&d| d as usize));
            return Tensor::zeros(&shape, x.dtype(), x.device());
        }
        if stacked {
            let refs: Vec<&Tensor> = out.iter().collect();
            Tensor::stack(&refs, 0)
        } else {
            Ok(out.pop().expect("one quantile"))
        }
    }

    fn quantile_impl(
        &self,
        qs: &[f64],
        dim: Option<isize>,
        keepdim: bool,
        how: Interpolation,
        stacked: bool,
    ) -> Result<Tensor> {
        const OP: &str = "quantile";
        let (x, d, out_shape) = self.quantile_slices(OP, qs, dim, keepdim)?;
        let n = x.shape()[d];
        let di = d as isize;
        let (sorted, _) = x.sort(di, false).map_err(|e| e.reported_as(OP))?;
        let has_nan = no_grad(|| x.isnan()?.any(&[di], true))?;
        let nan = Tensor::full(&[], f64::NAN, x.dtype(), x.device())?;
        let mut out = Vec::with_capacity(qs.len());
        for &q in qs {
            let pos = quantile_q(q, x.dtype()) * (n - 1) as f64;
            let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
            let at = |i: usize| sorted.narrow(di, i, 1);
            let v = match how {
                Interpolation::Lower => at(lo)?,
                Interpolation::Higher => at(hi)?,
                // Round half to even, as torch.round.
                Interpolation::Nearest => at(pos.round_ties_even() as usize)?,
                // lerp, as PyTorch: no overflow of lo + hi.
                Interpolation::Midpoint => at(lo)?.lerp(&at(hi)?, 0.5)?,
                Interpolation::Linear => at(lo)?.lerp(&at(hi)?, pos - lo as f64)?,
            };
            let v = Tensor::where_cond(&has_nan, &nan, &v)?;
            out.push(v.reshape(&out_shape)?);
        }
        Self::quantile_result(out, qs, &out_shape, &x, stacked)
    }

    /// The stable sorting permutation along `dim`, int64, contiguous.
    fn sort_indices(&self, op: &'static str, dim: isize, descending: bool) -> Result<Tensor> {
        let d = normalize_dim(op, dim, self.rank().max(1))?;
        let dev = self.device();
        if self.rank() == 0 || self.numel() == 0 {
            return Tensor::zeros(self.shape(), DType::I64, dev);
        }
        let last = self.rank() - 1;
        // The sorted dimension last and dense: rows of `n`.
        let rows_view = no_grad(|| self.transpose(d as isize, last as isize)?.contiguous())?;
        let n = self.shape()[d];
        let rows = self.numel() / n;
        let idx = Tensor::alloc(rows_view.shape(), DType::I64, dev)?;
        sort::argsort(
            op,
            &Operand::of(&rows_view),
            &Operand::of(&idx),
            rows,
            n,
            descending,
        )?;
        drop(rows_view);
        idx.transpose(d as isize, last as isize)?.contiguous()
    }

    /// `self.gather(dim, idx)`, its errors reported as `op`'s.
    fn gather_along(&self, op: &'static str, dim: isize, idx: &Tensor) -> Result<Tensor> {
        if self.rank() == 0 {
            return Ok(self.alias());
        }
        self.gather(dim, idx).map_err(|e| e.reported_as(op))
    }
}

/// `shape` with dimension `d` of size 1, as `reshape` takes it.
fn keep_dims(shape: &[usize], d: usize) -> Vec<isize> {
    keep_shape(shape, d).iter().map(|&s| s as isize).collect()
}

/// `shape` without dimension `d`, as `reshape` takes it.
fn drop_dim(shape: &[usize], d: usize) -> Vec<isize> {
    let mut s: Vec<isize> = shape.iter().map(|&s| s as isize).collect();
    s.remove(d);
    s
}

/// `shape` with dimension `d` of size 1.
fn keep_shape(shape: &[usize], d: usize) -> Vec<usize> {
    let mut s = shape.to_vec();
    s[d] = 1;
    s
}
