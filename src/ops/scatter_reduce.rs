//! `scatter_reduce_` and `scatter_reduce`: scatter with a reduction
//! (PyTorch's `Tensor.scatter_reduce_(dim, index, src, reduce, *,
//! include_self=True)`).
//!
//! For `dim == 1`, every `src[i][j][k]` is combined into
//! `self[i][index[i][j][k]][k]` with the reduction; positions that no index
//! names keep `self`'s value. With `include_self = false` the values `self`
//! holds at the named positions take no part (the reduction starts from its
//! identity there), as in PyTorch. The shapes, dtypes and devices are those
//! of [`scatter_`](Tensor::scatter_).
//!
//! Semantics measured against torch 2.15 (CPU) and held by the differential
//! suite:
//! * `Mean` divides by the number of values combined (`self`'s own counted
//!   when included; a position with none keeps `self`). Integers divide with
//!   floor rounding (`-7 / 2` gives `-4`); the count is kept in `self`'s
//!   dtype, as PyTorch keeps it. `Mean` of bool is an error, as in PyTorch.
//! * `Amax` and `Amin` propagate NaN.
//! * On bool, `Sum` and `Amax` are `or`, `Prod` and `Amin` are `and`.
//! * Integer sums and products wrap.
//!
//! On CUDA the values combine through atomics in no fixed order, so a float
//! `Sum`, `Prod` or `Mean` may differ from the CPU's in the last bits, and
//! from run to run, as PyTorch's does on CUDA.
//! In place on CUDA, `include_self = false` and `Mean` (two or three
//! launches) run on a temporary copy of `self` that is copied back at the
//! end: a launch can still fail after the checks (a kernel to load, a
//! buffer to allocate), and a failure must leave `self` as it was.
//!
//! **Autograd** (float dtypes, the out-of-place form): PyTorch's
//! `scatter_reduce_backward`. `Sum`: `self` gets the gradient, `src` the
//! gradient gathered at `index`. `Mean`: both divided by the count. `Prod`:
//! the gradient times the product of the *other* factors, computed without
//! dividing by zero when one factor is 0. `Amax`/`Amin`: the gradient of each
//! position is shared evenly between the values equal to the result (`self`'s
//! included). With `include_self = false`, `self` gets no gradient at the
//! positions `index` names. The in-place form is not recorded (see
//! [`crate::ops`]'s index module: it is refused in grad mode when `self` or
//! `src` requires grad).

use crate::autograd::formulas_index as grad;
use crate::autograd::no_grad;
use crate::backend::ScatterMode;
use crate::dtype::DType;
use crate::error::{bail, Error, Result};
use crate::layout::normalize_dim;
use crate::tensor::Tensor;

/// The reduction of [`Tensor::scatter_reduce`] (PyTorch's `reduce=` string;
/// `"sum".parse()` gives [`ScatterReduce::Sum`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScatterReduce {
    /// `"sum"`: the values are added.
    Sum,
    /// `"prod"`: the values are multiplied.
    Prod,
    /// `"mean"`: the sum divided by the number of values.
    Mean,
    /// `"amax"`: the largest value (NaN if any is NaN).
    Amax,
    /// `"amin"`: the smallest value (NaN if any is NaN).
    Amin,
}

impl ScatterReduce {
    /// PyTorch's name for it.
    pub fn name(self) -> &'static str {
        match self {
            ScatterReduce::Sum => "sum",
            ScatterReduce::Prod => "prod",
            ScatterReduce::Mean => "mean",
            ScatterReduce::Amax => "amax",
            ScatterReduce::Amin => "amin",
        }
    }

    /// The backend's combination for dtype `dt` (bool has no add: `or`).
    fn mode(self, dt: DType) -> ScatterMode {
        match self {
            ScatterReduce::Sum | ScatterReduce::Mean if dt == DType::Bool => ScatterMode::Max,
            ScatterReduce::Sum | ScatterReduce::Mean => ScatterMode::Add,
            ScatterReduce::Prod => ScatterMode::Mul,
            ScatterReduce::Amax => ScatterMode::Max,
            ScatterReduce::Amin => ScatterMode::Min,
        }
    }

    /// The value the reduction starts from where `self` is left out: the
    /// identity of the combination in dtype `dt`. (i64's extremes are no
    /// f64 fill value: [`Tensor::fill_identity`] writes those exactly.)
    fn identity(self, dt: DType) -> f64 {
        let (lowest, highest) = match dt {
            DType::Bool => (0.0, 1.0),
            DType::U8 => (0.0, 255.0),
            DType::I32 => (i32::MIN as f64, i32::MAX as f64),
            // Not reached (fill_identity writes i64 exactly); 2^63 would be
            // refused as a fill value rather than written wrong.
            DType::I64 => (i64::MIN as f64, i64::MAX as f64),
            _ => (f64::NEG_INFINITY, f64::INFINITY),
        };
        match self {
            ScatterReduce::Sum | ScatterReduce::Mean => 0.0,
            ScatterReduce::Prod => 1.0,
            ScatterReduce::Amax => lowest,
            ScatterReduce::Amin => highest,
        }
    }
}

impl std::str::FromStr for ScatterReduce {
    type Err = Error;

    /// PyTorch's names: `"sum"`, `"prod"`, `"mean"`, `"amax"`, `"amin"`.
    fn from_str(s: &str) -> Result<ScatterReduce> {
        Ok(match s {
            "sum" => ScatterReduce::Sum,
            "prod" => ScatterReduce::Prod,
            "mean" => ScatterReduce::Mean,
            "amax" => ScatterReduce::Amax,
            "amin" => ScatterReduce::Amin,
            other => bail!(Error::arg(
                "scatter_reduce",
                format!("reduce must be one of sum, prod, mean, amax, amin (got {other:?})")
            )),
        })
    }
}

impl Tensor {
    /// Combines `src` into `self` at the positions `index` gives along
    /// `dim` with `reduce` (PyTorch's `scatter_reduce_`; the module docs
    /// give the semantics). `index` and `src` follow
    /// [`scatter_`](Tensor::scatter_)'s rules. Everything is checked before
    /// anything is written.
    ///
    /// ```
    /// # use tensorscope::{Tensor, Device, ScatterReduce};
    /// let mut x = Tensor::from_slice(&[5i64, 7, -3, 2], &[4], Device::Cpu)?;
    /// let i = Tensor::from_slice(&[0i64, 0, 1, 1, 3], &[5], Device::Cpu)?;
    /// let s = Tensor::from_slice(&[1i64, 2, 4, -7, 3], &[5], Device::Cpu)?;
    /// x.scatter_reduce_(0, &i, &s, ScatterReduce::Amax, false)?;
    /// assert_eq!(x.to_vec::<i64>()?, vec![2, 4, -3, 3]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn scatter_reduce_(
        &mut self,
        dim: isize,
        index: &Tensor,
        src: &Tensor,
        reduce: ScatterReduce,
        include_self: bool,
    ) -> Result<&mut Tensor> {
        self.scatter_reduce_impl(
            "scatter_reduce_",
            dim,
            index,
            src,
            reduce,
            include_self,
            false,
        )
    }

    /// `scratch`: `self` is a fresh copy nobody else sees (the out-of-place
    /// form), so a failure part-way through needs no care.
    #[allow(clippy::too_many_arguments)]
    fn scatter_reduce_impl(
        &mut self,
        op: &'static str,
        dim: isize,
        index: &Tensor,
        src: &Tensor,
        reduce: ScatterReduce,
        include_self: bool,
        scratch: bool,
    ) -> Result<&mut Tensor> {
        let d = self.scatter_check(op, dim, index, Some(src))?;
        let dt = self.dtype();
        if reduce == ScatterReduce::Mean && dt == DType::Bool {
            bail!(Error::dtype(op, "a numeric dtype for reduce = mean", dt));
        }
        let writes = !include_self || reduce == ScatterReduce::Mean;
        if writes && !scratch && self.device().is_cuda() {
            // More than one write, and on CUDA each launch may still fail
            // (a kernel to load, a buffer to allocate) after the first:
            // work on a copy, so that a failure leaves `self` as it was.
            // (On the CPU nothing fails once the checks have passed.)
            let mut tmp = self.deep_clone()?;
            tmp.scatter_reduce_impl(op, dim, index, src, reduce, include_self, true)?;
            self.copy_(&tmp)?;
            return Ok(self);
        }
        // `self` is written more than once: the index and the source must
        // not see the first write.
        let index = self.unshared(index)?;
        let src = self.unshared(src)?;
        // The counts first, so that a bad index or a failed allocation
        // comes before anything is written.
        let counts = if reduce == ScatterReduce::Mean {
            Some(mean_counts(op, self, d, &index, include_self)?)
        } else {
            None
        };
        if !include_self {
            self.fill_identity(op, d, &index, reduce)?;
        }
        self.scatter_impl(op, dim, &index, Some(&src), 0.0, reduce.mode(dt))?;
        if let Some(n) = counts {
            if dt.is_float() {
                self.div_(&n)?;
            } else {
                self.floor_divide_(&n)?;
            }
        }
        Ok(self)
    }

    /// Writes the identity of `reduce` at the positions `index` names along
    /// `d` (already checked).
    fn fill_identity(
        &mut self,
        op: &'static str,
        d: usize,
        index: &Tensor,
        reduce: ScatterReduce,
    ) -> Result<()> {
        let dt = self.dtype();
        if dt == DType::I64 {
            let v = match reduce {
                ScatterReduce::Sum | ScatterReduce::Mean => 0,
                ScatterReduce::Prod => 1,
                ScatterReduce::Amax => i64::MIN,
                ScatterReduce::Amin => i64::MAX,
            };
            let v = Tensor::from_slice(&[v], &[], self.device())?.expand_as(index)?;
            return self
                .scatter_impl(op, d as isize, index, Some(&v), 0.0, ScatterMode::Assign)
                .map(|_| ());
        }
        let v = reduce.identity(dt);
        self.scatter_impl(op, d as isize, index, None, v, ScatterMode::Assign)
            .map(|_| ())
    }

    /// Out-of-place [`scatter_reduce_`](Tensor::scatter_reduce_): a copy of
    /// `self` with the reductions, differentiable in `self` and `src` (float
    /// dtypes; see the module docs).
    ///
    /// ```
    /// # use tensorscope::{Tensor, Device, ScatterReduce};
    /// let x = Tensor::from_slice(&[1.0f64, 2., 3.], &[3], Device::Cpu)?.requires_grad_(true)?;
    /// let i = Tensor::from_slice(&[0i64, 0, 2], &[3], Device::Cpu)?;
    /// let s = Tensor::from_slice(&[4.0f64, 5., 6.], &[3], Device::Cpu)?.requires_grad_(true)?;
    /// let y = x.scatter_reduce(0, &i, &s, ScatterReduce::Mean, true)?;
    /// assert_eq!(y.to_vec::<f64>()?, vec![10. / 3., 2., 4.5]);
    /// y.sum_all()?.backward()?;
    /// assert_eq!(s.grad().unwrap().to_vec::<f64>()?, vec![1. / 3., 1. / 3., 0.5]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn scatter_reduce(
        &self,
        dim: isize,
        index: &Tensor,
        src: &Tensor,
        reduce: ScatterReduce,
        include_self: bool,
    ) -> Result<Tensor> {
        const OP: &str = "scatter_reduce";
        let out = no_grad(|| -> Result<Tensor> {
            let mut out = self.deep_clone()?;
            out.scatter_reduce_impl(OP, dim, index, src, reduce, include_self, true)?;
            Ok(out)
        })?;
        let d = normalize_dim(OP, dim, self.rank())?;
        grad::scatter_reduce(self, d, index, src, reduce, include_self, out)
    }
}

/// How many values `scatter_reduce`'s mean divides by at each position of
/// `like` (its shape, dtype and device): the index's count along `d`, plus
/// one for `like`'s own value when `include_self`, and 1 where nothing is
/// named (the value stays). Kept in `like`'s dtype, as PyTorch keeps it.
/// Errors name `op`.
pub(crate) fn mean_counts(
    op: &'static str,
    like: &Tensor,
    d: usize,
    index: &Tensor,
    include_self: bool,
) -> Result<Tensor> {
    let (dt, dev) = (like.dtype(), like.device());
    let mut n = if include_self {
        Tensor::ones(like.shape(), dt, dev)?
    } else {
        Tensor::zeros(like.shape(), dt, dev)?
    };
    let ones = Tensor::ones(index.shape(), dt, dev)?;
    n.scatter_impl(op, d as isize, index, Some(&ones), 0.0, ScatterMode::Add)?;
    let none = n.eq_scalar(0.0)?;
    n.masked_fill_(&none, 1.0)?;
    Ok(n)
}
