//! Reductions (`sum`, `mean`, `prod`, `max`, `min`, `max_dim`, `argmax`,
//! `var`, `std`, `logsumexp`, ...) and the softmax family.
//!
//! **Dims**: a list of dimensions (negative counts from the end); the empty
//! list means every dimension. A repeated dimension is an error. As in
//! PyTorch, a rank-0 tensor accepts dim `0` or `-1`.
//!
//! **Dtypes** (PyTorch's rules): `sum` and `prod` of bool and integer tensors
//! give i64; `mean`, `var`, `std`, `logsumexp`, `softmax` and `log_softmax`
//! need a float tensor; `max`/`min` keep the dtype; indices are i64. f16 and
//! bf16 accumulate in higher precision and return their own dtype.
//!
//! **Empty reductions**: the sum of nothing is 0, the product 1, the mean NaN,
//! logsumexp -inf; `max`/`min`/`argmax`/`argmin` over an empty dimension are
//! errors. NaN propagates through `max`/`min`, and `argmax`/`argmin` return
//! the index of the first NaN.

use crate::backend::{self, Operand, Reduction};
use crate::dtype::DType;
use crate::error::{bail, Error, Result};
use crate::layout::normalize_dim;
use crate::tensor::Tensor;

/// Normalizes a list of dims for `op` on a tensor of rank `rank`: sorted,
/// distinct; empty means all.
fn reduce_dims(op: &'static str, dims: &[isize], rank: usize) -> Result<Vec<usize>> {
    if dims.is_empty() {
        return Ok((0..rank).collect());
    }
    let mut out = Vec::with_capacity(dims.len());
    for &d in dims {
        // A scalar reduces over "dim 0" (or -1), which is no dim at all.
        let n = normalize_dim(op, d, rank.max(1))?;
        if rank == 0 {
            continue;
        }
        if out.contains(&n) {
            bail!(Error::arg(
                op,
                format!("dim {n} appears multiple times in the list of dims {dims:?}")
            ));
        }
        out.push(n);
    }
    out.sort_unstable();
    Ok(out)
}

/// The output shape of a reduction over `dims` (sorted).
fn reduced_shape(shape: &[usize], dims: &[usize], keepdim: bool) -> Vec<usize> {
    shape
        .iter()
        .enumerate()
        .filter_map(|(i, &d)| match (dims.contains(&i), keepdim) {
            (false, _) => Some(d),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect()
}

pub(super) fn need_float(op: &'static str, t: &Tensor) -> Result<()> {
    if !t.dtype().is_float() {
        bail!(Error::dtype(
            op,
            "a float dtype (could not infer the output dtype: cast the input with to_dtype first)",
            t.dtype()
        ));
    }
    Ok(())
}

fn no_empty(op: &'static str, t: &Tensor, dims: &[usize]) -> Result<()> {
    if let Some(&d) = dims.iter().find(|&&d| t.shape()[d] == 0) {
        bail!(Error::arg(
            op,
            format!(
                "cannot reduce over dimension {d} of size 0 (shape {:?}): the operation has no identity",
                t.shape()
            )
        ));
    }
    Ok(())
}

impl Tensor {
    fn reduction(&self, op: Reduction, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        let name = op.name();
        let requested = dims;
        let dims = reduce_dims(name, dims, self.rank())?;
        let out_dt = match op {
            Reduction::Sum | Reduction::Prod if !self.dtype().is_float() => DType::I64,
            Reduction::Sum | Reduction::Prod | Reduction::Max | Reduction::Min => self.dtype(),
            _ => {
                need_float(name, self)?;
                self.dtype()
            }
        };
        if matches!(op, Reduction::Max | Reduction::Min) {
            no_empty(name, self, &dims)?;
        }
        let out = Tensor::alloc(
            &reduced_shape(self.shape(), &dims, keepdim),
            out_dt,
            self.device(),
        )?;
        backend::reduce(op, &Operand::of(self), &dims, &Operand::of(&out))?;
        crate::autograd::formulas_reduce::reduce(op, self, requested, keepdim, out)
    }

    fn arg_reduction(
        &self,
        op: &'static str,
        max: bool,
        dim: isize,
        keepdim: bool,
        with_values: bool,
    ) -> Result<(Option<Tensor>, Tensor)> {
        let d = normalize_dim(op, dim, self.rank().max(1))?;
        if self.rank() == 0 {
            // PyTorch: a scalar's argmax is 0 and its max is itself.
            let idx = Tensor::zeros(&[], DType::I64, self.device())?;
            let vals = if with_values {
                Some(self.deep_clone()?)
            } else {
                None
            };
            return Ok((vals, idx));
        }
        no_empty(op, self, &[d])?;
        let shape = reduced_shape(self.shape(), &[d], keepdim);
        let idx = Tensor::alloc(&shape, DType::I64, self.device())?;
        let vals = if with_values {
            Some(Tensor::alloc(&shape, self.dtype(), self.device())?)
        } else {
            None
        };
        backend::arg_reduce(
            op,
            max,
            &Operand::of(self),
            d,
            vals.as_ref().map(Operand::of).as_ref(),
            &Operand::of(&idx),
        )?;
        Ok((vals, idx))
    }

    /// Sum over `dims` (empty: all). Bool and integer tensors sum into i64.
    ///
    /// ```
    /// # use tensorscope::{Tensor, DType, Device};
    /// let x = Tensor::arange(0.0, 6.0, 1.0, DType::F32, Device::Cpu)?.view(&[2, 3])?;
    /// assert_eq!(x.sum(&[1], false)?.to_vec::<f32>()?, vec![3.0, 12.0]);
    /// assert_eq!(x.sum(&[0], true)?.shape(), &[1, 3]);
    /// assert_eq!(x.sum_all()?.item::<f32>()?, 15.0);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn sum(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        if let Some(c) = crate::autocast::cast(&crate::autocast::SUM, &[Some(self)])? {
            return c.get(0).sum(dims, keepdim);
        }
        let _op = crate::alloc::history::op_context_with("sum", || vec![self.shape().to_vec()]);
        self.reduction(Reduction::Sum, dims, keepdim)
    }

    /// Mean over `dims` (empty: all); float tensors only. The mean of nothing is NaN.
    pub fn mean(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        let _op = crate::alloc::history::op_context("mean");
        self.reduction(Reduction::Mean, dims, keepdim)
    }

    /// Product over `dims` (empty: all). Bool and integer tensors multiply into i64.
    pub fn prod(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        if let Some(c) = crate::autocast::cast(&crate::autocast::PROD, &[Some(self)])? {
            return c.get(0).prod(dims, keepdim);
        }
        let _op = crate::alloc::history::op_context("prod");
        self.reduction(Reduction::Prod, dims, keepdim)
    }

    /// Largest value over `dims` (empty: all), like `torch.amax`. NaN
    /// propagates; an empty reduction is an error.
    pub fn max(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        let _op = crate::alloc::history::op_context("max");
        self.reduction(Reduction::Max, dims, keepdim)
    }

    /// Smallest value over `dims` (empty: all), like `torch.amin`. NaN
    /// propagates; an empty reduction is an error.
    pub fn min(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        let _op = crate::alloc::history::op_context("min");
        self.reduction(Reduction::Min, dims, keepdim)
    }

    /// Largest values along `dim` and their indices (i64), like `torch.max(x, dim)`.
    /// Ties give the first index; NaN wins.
    ///
    /// ```
    /// # use tensorscope::{Tensor, Device};
    /// let x = Tensor::from_slice(&[1.0f32, 5.0, 2.0, 7.0, 0.0, 7.0], &[2, 3], Device::Cpu)?;
    /// let (v, i) = x.max_dim(-1, false)?;
    /// assert_eq!(v.to_vec::<f32>()?, vec![5.0, 7.0]);
    /// assert_eq!(i.to_vec::<i64>()?, vec![1, 0]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn max_dim(&self, dim: isize, keepdim: bool) -> Result<(Tensor, Tensor)> {
        let _op = crate::alloc::history::op_context("max_dim");
        let (v, i) = self.arg_reduction("max_dim", true, dim, keepdim, true)?;
        let v = crate::autograd::formulas_reduce::select_dim(
            self,
            dim,
            keepdim,
            v.expect("values requested"),
            &i,
        )?;
        Ok((v, i))
    }

    /// Smallest values along `dim` and their indices (i64), like `torch.min(x, dim)`.
    pub fn min_dim(&self, dim: isize, keepdim: bool) -> Result<(Tensor, Tensor)> {
        let (v, i) = self.arg_reduction("min_dim", false, dim, keepdim, true)?;
        let v = crate::autograd::formulas_reduce::select_dim(
            self,
            dim,
            keepdim,
            v.expect("values requested"),
            &i,
        )?;
        Ok((v, i))
    }

    /// Index (i64) of the largest value along `dim`; the first one on ties,
    /// the first NaN if any.
    pub fn argmax(&self, dim: isize, keepdim: bool) -> Result<Tensor> {
        let _op = crate::alloc::history::op_context("argmax");
        Ok(self.arg_reduction("argmax", true, dim, keepdim, false)?.1)
    }

    /// Index (i64) of the smallest value along `dim`; the first one on ties,
    /// the first NaN if any.
    pub fn argmin(&self, dim: isize, keepdim: bool) -> Result<Tensor> {
        Ok(self.arg_reduction("argmin", false, dim, keepdim, false)?.1)
    }

    /// Variance over `dims` (empty: all), dividing by `N - correction`
    /// (`correction = 1`: unbiased, PyTorch's default; `0`: population).
    /// Float tensors only; computed in f64 with Welford's algorithm.
    ///
    /// ```
    /// # use tensorscope::{Tensor, Device};
    /// let x = Tensor::from_slice(&[1.0f64, 2.0, 3.0, 4.0], &[4], Device::Cpu)?;
    /// assert_eq!(x.var(&[], 1, false)?.item::<f64>()?, 5.0 / 3.0);
    /// assert_eq!(x.var(&[], 0, false)?.item::<f64>()?, 1.25);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn var(&self, dims: &[isize], correction: usize, keepdim: bool) -> Result<Tensor> {
        self.reduction(Reduction::Var(correction), dims, keepdim)
    }

    /// Standard deviation: the square root of [`var`](Tensor::var).
    pub fn std(&self, dims: &[isize], correction: usize, keepdim: bool) -> Result<Tensor> {
        self.reduction(Reduction::Std(correction), dims, keepdim)
    }

    /// `log(sum(exp(x)))` over `dims` (empty: all), without overflow for
    /// large inputs. Float tensors only.
    ///
    /// ```
    /// # use tensorscope::{Tensor, Device};
    /// let x = Tensor::from_slice(&[1000.0f32, 1000.0], &[2], Device::Cpu)?;
    /// let v = x.logsumexp(&[0], false)?.item::<f32>()?;
    /// assert!((v - (1000.0 + 2f32.ln())).abs() < 1e-3);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    ///
    /// Integer and bool inputs compute in f32, as PyTorch's.
    pub fn logsumexp(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        if let Some(c) = crate::autocast::cast(&crate::autocast::LOGSUMEXP, &[Some(self)])? {
            return c.get(0).logsumexp(dims, keepdim);
        }
        if !self.dtype().is_float() {
            return self.to_dtype(crate::dtype::DType::F32)?.reduction(
                Reduction::LogSumExp,
                dims,
                keepdim,
            );
        }
        self.reduction(Reduction::LogSumExp, dims, keepdim)
    }

    /// Sum of every element, as a rank-0 tensor.
    pub fn sum_all(&self) -> Result<Tensor> {
        let _op = crate::alloc::history::op_context("sum_all");
        self.sum(&[], false)
    }

    /// Mean of every element, as a rank-0 tensor (float tensors only).
    pub fn mean_all(&self) -> Result<Tensor> {
        let _op = crate::alloc::history::op_context("mean_all");
        self.mean(&[], false)
    }

    /// Largest element, as a rank-0 tensor (an error when empty).
    pub fn max_all(&self) -> Result<Tensor> {
        self.max(&[], false)
    }

    /// Smallest element, as a rank-0 tensor (an error when empty).
    pub fn min_all(&self) -> Result<Tensor> {
        self.min(&[], false)
    }
}
