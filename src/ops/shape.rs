//! Shape ops that copy: [`cat`](Tensor::cat), [`stack`](Tensor::stack) and
//! [`repeat`](Tensor::repeat). Each result has its own storage (the seed's
//! table: "`repeat()`: Copy, always copies data"); none of them does
//! per-element index arithmetic: they copy whole inputs into views of the
//! output through the backend's strided copy.

use crate::backend::{self, Operand};
use crate::dtype::DType;
use crate::error::{bail, Error, Result};
use crate::layout::{normalize_dim, normalize_dim_inclusive, Dims, Layout};
use crate::tensor::Tensor;

impl Tensor {
    /// Concatenates tensors along `dim` into a new tensor (PyTorch's
    /// `torch.cat`).
    ///
    /// * Shapes must match except in `dim`; ranks must match. As in PyTorch,
    ///   a 1-D tensor of shape `[0]` is skipped when the others have another
    ///   rank.
    /// * Dtypes promote ([`DType::promote`]): `cat` of i32 and f32 is f32.
    /// * All tensors must be on one device; an empty list or rank-0 tensors
    ///   are errors.
    ///
    /// ```
    /// # use tensorscope::{Tensor, DType, Device};
    /// let a = Tensor::ones(&[2, 2], DType::F32, Device::Cpu)?;
    /// let b = Tensor::zeros(&[1, 2], DType::I32, Device::Cpu)?;
    /// let c = Tensor::cat(&[&a, &b], 0)?;
    /// assert_eq!(c.shape(), &[3, 2]);
    /// assert_eq!(c.dtype(), DType::F32);
    /// assert_eq!(c.to_vec::<f32>()?, vec![1., 1., 1., 1., 0., 0.]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn cat(tensors: &[&Tensor], dim: isize) -> Result<Tensor> {
        let ts: Vec<Option<&Tensor>> = tensors.iter().map(|&t| Some(t)).collect();
        if let Some(c) = crate::autocast::cast(&crate::autocast::CAT, &ts)? {
            return Tensor::cat(&c.all(), dim);
        }
        let _op = crate::alloc::history::op_context("cat");
        cat_impl("cat", tensors, dim)
    }

    /// Stacks tensors of one shape along a new dimension `dim` (which may be
    /// `rank`, or negative counting from `rank + 1`), into a new tensor
    /// (PyTorch's `torch.stack`). Dtypes promote as in [`cat`](Tensor::cat).
    ///
    /// ```
    /// # use tensorscope::{Tensor, DType, Device};
    /// let a = Tensor::from_slice(&[1.0f32, 2.], &[2], Device::Cpu)?;
    /// let b = Tensor::from_slice(&[3.0f32, 4.], &[2], Device::Cpu)?;
    /// let s = Tensor::stack(&[&a, &b], 1)?;
    /// assert_eq!(s.shape(), &[2, 2]);
    /// assert_eq!(s.to_vec::<f32>()?, vec![1., 3., 2., 4.]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn stack(tensors: &[&Tensor], dim: isize) -> Result<Tensor> {
        let ts: Vec<Option<&Tensor>> = tensors.iter().map(|&t| Some(t)).collect();
        if let Some(c) = crate::autocast::cast(&crate::autocast::STACK, &ts)? {
            return Tensor::stack(&c.all(), dim);
        }
        let _op = crate::alloc::history::op_context("stack");
        let op = "stack";
        let Some(first) = tensors.first() else {
            bail!(Error::arg(op, "expected a non-empty list of tensors"));
        };
        let d = normalize_dim_inclusive(op, dim, first.rank())?;
        for (i, t) in tensors.iter().enumerate().skip(1) {
            if t.shape() != first.shape() {
                bail!(Error::shape(
                    op,
                    first.shape(),
                    t.shape(),
                    format!(
                        "every tensor must have the same shape; tensor {i} differs from tensor 0"
                    )
                ));
            }
        }
        let views = tensors
            .iter()
            .map(|t| t.unsqueeze(d as isize))
            .collect::<Result<Vec<_>>>()?;
        let refs: Vec<&Tensor> = views.iter().collect();
        cat_impl(op, &refs, d as isize)
    }

    /// The tensor tiled `reps[i]` times along each dimension, into a new
    /// tensor (PyTorch's `repeat`). `reps` may be longer than the rank: the
    /// shape is then padded with leading 1s (`[2]` repeated by `[3, 2]` has
    /// shape `[3, 4]`). Fewer reps than dimensions is an error.
    ///
    /// ```
    /// # use tensorscope::{Tensor, Device};
    /// let x = Tensor::from_slice(&[1i64, 2], &[2], Device::Cpu)?;
    /// let r = x.repeat(&[2, 2])?;
    /// assert_eq!(r.shape(), &[2, 4]);
    /// assert_eq!(r.to_vec::<i64>()?, vec![1, 2, 1, 2, 1, 2, 1, 2]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn repeat(&self, reps: &[usize]) -> Result<Tensor> {
        let op = "repeat";
        let r = self.rank();
        if reps.len() < r {
            bail!(Error::arg(
                op,
                format!(
                    "{} repeat counts given for a tensor of rank {r} (shape {:?}); give at least one per dimension",
                    reps.len(),
                    self.shape()
                )
            ));
        }
        let lead = reps.len() - r;
        let mut in_shape: Dims = smallvec::smallvec![1; lead];
        in_shape.extend_from_slice(self.shape());
        let mut in_strides: Dims = smallvec::smallvec![0; lead];
        in_strides.extend_from_slice(self.strides());
        let mut out_shape = Dims::new();
        for (i, (&s, &n)) in in_shape.iter().zip(reps).enumerate() {
            out_shape.push(s.checked_mul(n).ok_or_else(|| {
                Error::arg(
                    op,
                    format!("dimension {i}: size {s} repeated {n} times overflows"),
                )
            })?);
        }
        let out =
            Tensor::alloc(&out_shape, self.dtype(), self.device()).map_err(|e| e.in_op(op))?;
        if out.numel() == 0 {
            return crate::autograd::formulas_copy::repeat(self, reps, out);
        }
        // Output dimension i, of size n * s, seen as [n, s]; the input is
        // expanded over the n (stride 0).
        let out_strides = out.strides().to_vec();
        let (mut shape2, mut src2, mut dst2) = (Dims::new(), Dims::new(), Dims::new());
        for i in 0..reps.len() {
            shape2.extend_from_slice(&[reps[i], in_shape[i]]);
            src2.extend_from_slice(&[0, in_strides[i]]);
            dst2.extend_from_slice(&[in_shape[i] * out_strides[i], out_strides[i]]);
        }
        backend::copy(
            &Operand::with(
                self,
                Layout::from_parts(shape2.clone(), src2, self.storage_offset()),
            ),
            &Operand::with(&out, Layout::from_parts(shape2, dst2, 0)),
        )?;
        crate::autograd::formulas_copy::repeat(self, reps, out)
    }
}

/// `cat` under the name of the calling op.
fn cat_impl(op: &'static str, tensors: &[&Tensor], dim: isize) -> Result<Tensor> {
    if tensors.is_empty() {
        bail!(Error::arg(op, "expected a non-empty list of tensors"));
    }
    // PyTorch's legacy rule: 1-D empty tensors are skipped next to others.
    let legacy_empty = |t: &Tensor| t.shape() == [0];
    let reference = tensors.iter().position(|t| !legacy_empty(t)).unwrap_or(0);
    let first = tensors[reference];
    if first.rank() == 0 {
        bail!(Error::arg(
            op,
            format!("zero-dimensional tensor (at position {reference}) cannot be concatenated")
        ));
    }
    let d = normalize_dim(op, dim, first.rank())?;
    let mut dtype: DType = first.dtype();
    let mut size = 0usize;
    let mut parts: Vec<&Tensor> = Vec::with_capacity(tensors.len());
    for (i, &t) in tensors.iter().enumerate() {
        first.same_device(op, t)?;
        if first.rank() != 1 && legacy_empty(t) {
            continue;
        }
        if t.rank() != first.rank() {
            bail!(Error::shape(
                op,
                first.shape(),
                t.shape(),
                format!(
                    "tensor {i} has rank {} but tensor {reference} has rank {}",
                    t.rank(),
                    first.rank()
                )
            ));
        }
        for k in 0..first.rank() {
            if k != d && t.shape()[k] != first.shape()[k] {
                bail!(Error::shape(
                    op,
                    first.shape(),
                    t.shape(),
                    format!("sizes must match except in dimension {d}; tensor {i} differs in dimension {k}")
                ));
            }
        }
        dtype = dtype.promote(t.dtype());
        size += t.shape()[d];
        parts.push(t);
    }
    let mut shape: Dims = first.shape().into();
    shape[d] = size;
    let out = Tensor::alloc(&shape, dtype, first.device())?;
    let mut start = 0;
    for &t in &parts {
        let len = t.shape()[d];
        if len > 0 && t.numel() > 0 {
            let l = out.layout().narrow(d as isize, start, len)?;
            backend::copy(&Operand::of(t), &Operand::with(&out, l))?;
        }
        start += len;
    }
    crate::autograd::formulas_copy::cat(&parts, d, out)
}
