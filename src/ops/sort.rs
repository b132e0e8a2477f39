//! Sorting (issue 17, item 5): `sort`, `argsort`, `topk` and `median`.
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
    /// any element is NaN.
    pub fn median_all(&self) -> Result<Tensor> {
        let _op = op_context("median");
        Ok(self.reshape(&[-1])?.median(0, false)?.0)
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

/// `shape` with dimension `d` of size 1.
fn keep_shape(shape: &[usize], d: usize) -> Vec<usize> {
    let mut s = shape.to_vec();
    s[d] = 1;
    s
}
