//! Indexing: copies that pick elements by index (`index_select`, `gather`,
//! `masked_select`, fancy indexing with [`index`](Tensor::index)) and
//! in-place writes by index (`scatter_`, `scatter_add_`, `index_fill_`,
//! `index_copy_`, `index_add_`) or by slice (`slice_assign_`, `slice_fill_`).
//!
//! **Index tensors** hold `i64` (PyTorch's index type) or `i32`; any other
//! dtype is a [`Error::DTypeMismatch`]. `gather`, `scatter_*`,
//! `index_select`, `index_copy_` and `index_add_` accept indices in
//! `0..size`, as PyTorch does; `index_fill_` and [`index`](Tensor::index)
//! also accept `-size..0`, counting from the end. An index out of range is an
//! [`Error::IndexOutOfRange`] naming the op, the index, the dimension and its
//! size.
//!
//! **Copies**: every selecting op returns a tensor with its own storage (the
//! seed's table: "Boolean/fancy indexing: Copy").
//!
//! **In place**: everything (dtypes, devices, shapes, every index) is checked
//! before the first element is written, so a failed call leaves `self`
//! unchanged. A source or index that shares `self`'s storage is copied first.
//! With repeated indices, `scatter_`/`index_copy_` keep the last write (in
//! row-major order of the index) and `scatter_add_`/`index_add_` accumulate.
//! A boolean-mask assignment (`x[x > 15] = -1` in PyTorch) is
//! [`masked_fill_`](Tensor::masked_fill_).
//!
//! **Autograd**: every selecting op ([`index`](Tensor::index),
//! `index_select`, `gather`, `masked_select`) and every out-of-place write
//! (`scatter`, `scatter_value`, `scatter_add`, `index_fill`, `index_copy`,
//! `index_add`, `masked_scatter`) records its gradient, with PyTorch's
//! semantics (a written position gets no gradient from `self`; a source gets
//! the gradient at the positions it was written to). The in-place forms are
//! not recorded: they return an [`Error::Autograd`] in grad mode when `self`
//! requires grad (as every in-place op does) or when the source requires
//! grad (its gradient would be lost; `slice_assign_` too); under `no_grad`
//! they run. `index_select_out` is refused likewise for an input that
//! requires grad.

use crate::autograd::formulas_index::{self as grad, Family, Write};
use crate::backend::{self, IndexedDim, Operand, ScatterMode, ScatterSrc};
use crate::dtype::DType;
use crate::error::{bail, Error, Result};
use crate::layout::{broadcast_shapes, check_broadcasts_to, normalize_dim, Dims, Layout};
use crate::tensor::Tensor;

/// Fails unless `index` holds i64 or i32.
fn check_index_dtype(op: &'static str, index: &Tensor) -> Result<()> {
    match index.dtype() {
        DType::I64 | DType::I32 => Ok(()),
        d => bail!(Error::dtype(op, "int64 or int32 (an index tensor)", d)),
    }
}

/// Refuses an in-place write whose source requires grad (in grad mode): the
/// write is not recorded, so the source's gradient would be silently lost.
/// The out-of-place forms record it.
fn check_src_grad(op: &'static str, src: Option<&Tensor>) -> Result<()> {
    match src {
        Some(src) => crate::autograd::check_unrecorded_inputs(op, &[src]),
        None => Ok(()),
    }
}

/// Fails unless `index` is a vector (rank 1) or a scalar.
fn check_index_vector(op: &'static str, index: &Tensor) -> Result<()> {
    if index.rank() > 1 {
        bail!(Error::arg(
            op,
            format!(
                "the index must be a vector (rank 0 or 1), got shape {:?}",
                index.shape()
            )
        ));
    }
    Ok(())
}

/// `layout` with `shape` and the stride of `dim` set to 0: where a walk over
/// `shape` starts before the index moves it along `dim`.
fn walk(layout: &Layout, shape: &[usize], dim: usize) -> Layout {
    let mut strides: Dims = layout.strides().into();
    strides[dim] = 0;
    Layout::from_parts(shape.into(), strides, layout.offset())
}

/// A 1-D (or 0-D) index seen with `shape`: it moves along `dim` only.
fn vector_walk(index: &Tensor, shape: &[usize], dim: usize) -> Layout {
    let mut strides: Dims = smallvec::smallvec![0; shape.len()];
    if index.rank() == 1 {
        strides[dim] = index.strides()[0];
    }
    Layout::from_parts(shape.into(), strides, index.storage_offset())
}

impl Tensor {
    /// `t` ready to be read while `self` is written: a copy if it shares
    /// `self`'s storage at all (a scatter writes in index order, so even an
    /// identical layout could be read after it was overwritten).
    pub(super) fn unshared(&self, t: &Tensor) -> Result<Tensor> {
        if self.shares_storage(t) {
            t.deep_clone()
        } else {
            Ok(t.alias())
        }
    }

    fn indexed_dim(&self, op: &'static str, dim: usize, negative: bool) -> IndexedDim {
        IndexedDim {
            op,
            dim,
            size: self.shape()[dim],
            stride: self.strides()[dim],
            negative,
        }
    }

    /// The elements at positions `index` (a vector of i64 or i32) along
    /// `dim`, as a new tensor whose `dim` has `index.numel()` entries
    /// (PyTorch's `index_select`). Always a copy.
    ///
    /// ```
    /// # use tensorscope::{Tensor, DType, Device};
    /// let x = Tensor::arange(0.0, 6.0, 1.0, DType::F32, Device::Cpu)?.view(&[2, 3])?;
    /// let i = Tensor::from_slice(&[2i64, 0], &[2], Device::Cpu)?;
    /// let y = x.index_select(1, &i)?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![2., 0., 5., 3.]);
    /// assert!(!y.shares_storage(&x));
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn index_select(&self, dim: isize, index: &Tensor) -> Result<Tensor> {
        let _op = crate::alloc::history::op_context("index_select");
        let op = "index_select";
        if self.rank() == 0 {
            // PyTorch: a 0-d input takes dim 0 or -1 and a one-value index
            // (0-d or [1]) and gives a 0-d result.
            normalize_dim(op, dim, 1)?;
            if index.numel() != 1 || index.rank() > 1 {
                bail!(Error::arg(
                    op,
                    format!(
                        "the index into a 0-d tensor must hold one value, got shape {:?}",
                        index.shape()
                    )
                ));
            }
            return self
                .unsqueeze(0)?
                .index_select(0, &index.reshape(&[1])?)?
                .reshape(&[]);
        }
        let (d, shape) = self.index_select_check(op, dim, index)?;
        let out = Tensor::alloc(&shape, self.dtype(), self.device())?;
        self.index_select_into(op, d, index, &out)?;
        crate::autograd::formulas_copy::index_select(self, dim, index, out)
    }

    /// [`index_select`](Tensor::index_select) written into `out`, which must
    /// have the result's shape and `self`'s dtype, be on `self`'s device and
    /// share storage with neither input. Allocates nothing.
    pub fn index_select_out(&self, dim: isize, index: &Tensor, out: &mut Tensor) -> Result<()> {
        let op = "index_select_out";
        let (d, shape) = self.index_select_check(op, dim, index)?;
        crate::autograd::check_unrecorded_inputs(op, &[self])?;
        self.same_device(op, out)?;
        if out.shape() != shape.as_slice() {
            bail!(Error::shape(
                op,
                &shape,
                out.shape(),
                "the output must have the result's shape"
            ));
        }
        if out.dtype() != self.dtype() {
            bail!(Error::dtype(
                op,
                format!("{} (the input's dtype) for the output", self.dtype()),
                out.dtype()
            ));
        }
        out.check_writable(op)?;
        if out.shares_storage(self) || out.shares_storage(index) {
            bail!(Error::InvalidInPlace {
                op,
                msg: "the output shares memory with an input; write into a separate tensor".into(),
            });
        }
        self.index_select_into(op, d, index, out)?;
        out.storage().bump_version();
        Ok(())
    }

    /// Validates an `index_select` and returns the dim and the result's shape.
    fn index_select_check(
        &self,
        op: &'static str,
        dim: isize,
        index: &Tensor,
    ) -> Result<(usize, Dims)> {
        check_index_dtype(op, index)?;
        self.same_device(op, index)?;
        let d = normalize_dim(op, dim, self.rank())?;
        check_index_vector(op, index)?;
        let mut shape: Dims = self.shape().into();
        shape[d] = index.numel();
        Ok((d, shape))
    }

    fn index_select_into(
        &self,
        op: &'static str,
        d: usize,
        index: &Tensor,
        out: &Tensor,
    ) -> Result<()> {
        let shape = out.shape();
        backend::gather(
            &Operand::with(self, walk(self.layout(), shape, d)),
            &Operand::of(index),
            &vector_walk(index, shape, d),
            &self.indexed_dim(op, d, false),
            &Operand::of(out),
        )
    }

    /// Values gathered along `dim`: `out[i][j][k] = self[i][index[i][j][k]][k]`
    /// for `dim == 1` (PyTorch's `gather`). `index` has `self`'s rank, and in
    /// every dimension but `dim` at most `self`'s size; the result has
    /// `index`'s shape. Always a copy.
    ///
    /// ```
    /// # use tensorscope::{Tensor, Device};
    /// let x = Tensor::from_slice(&[1.0f32, 2., 3., 4.], &[2, 2], Device::Cpu)?;
    /// let i = Tensor::from_slice(&[0i64, 0, 1, 0], &[2, 2], Device::Cpu)?;
    /// assert_eq!(x.gather(1, &i)?.to_vec::<f32>()?, vec![1., 1., 4., 3.]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn gather(&self, dim: isize, index: &Tensor) -> Result<Tensor> {
        let _op = crate::alloc::history::op_context("gather");
        let op = "gather";
        check_index_dtype(op, index)?;
        self.same_device(op, index)?;
        let d = normalize_dim(op, dim, self.rank())?;
        if index.rank() != self.rank() {
            bail!(Error::shape(
                op,
                self.shape(),
                index.shape(),
                format!(
                    "the index must have the input's rank {} (got rank {})",
                    self.rank(),
                    index.rank()
                )
            ));
        }
        for k in 0..self.rank() {
            if k != d && index.shape()[k] > self.shape()[k] {
                bail!(Error::shape(op, self.shape(), index.shape(), format!("the index's size {} in dimension {k} exceeds the input's size {} (only dimension {d} may be larger)", index.shape()[k], self.shape()[k])));
            }
        }
        let out = Tensor::alloc(index.shape(), self.dtype(), self.device())?;
        backend::gather(
            &Operand::with(self, walk(self.layout(), index.shape(), d)),
            &Operand::of(index),
            index.layout(),
            &self.indexed_dim(op, d, false),
            &Operand::of(&out),
        )?;
        crate::autograd::formulas_copy::gather(self, dim, index, out)
    }

    /// The elements where the bool `mask` is true, in row-major order, as a
    /// new 1-D tensor (PyTorch's `masked_select`, i.e. `x[mask]` for a mask of
    /// `x`'s shape). `self` and `mask` broadcast together. Always a copy.
    ///
    /// ```
    /// # use tensorscope::{Tensor, Device};
    /// let x = Tensor::from_slice(&[1.0f32, 20., 3., 40.], &[2, 2], Device::Cpu)?;
    /// let big = x.masked_select(&x.gt_scalar(10.0)?)?;
    /// assert_eq!(big.to_vec::<f32>()?, vec![20., 40.]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn masked_select(&self, mask: &Tensor) -> Result<Tensor> {
        let op = "masked_select";
        if mask.dtype() != DType::Bool {
            bail!(Error::dtype(op, "bool (the mask)", mask.dtype()));
        }
        self.same_device(op, mask)?;
        let shape = broadcast_shapes(op, self.shape(), mask.shape())?;
        let src = Operand::with(self, self.layout().broadcast_to(&shape)?);
        let m = Operand::with(mask, mask.layout().broadcast_to(&shape)?);
        let count = backend::masked_count(&m)?;
        let out = Tensor::alloc(&[count.total], self.dtype(), self.device())?;
        backend::masked_select(&src, &m, &count, &Operand::of(&out))?;
        crate::autograd::formulas_copy::masked_select(self, mask, out)
    }

    /// Fancy indexing along dimension 0, PyTorch's `x[index]`; always a copy.
    ///
    /// * An integer (i64 or i32) `index` of any shape picks rows: the result
    ///   has shape `index.shape() ++ self.shape()[1..]`. Negative indices
    ///   count from the end.
    /// * A bool `index` of shape `self.shape()[..k]` picks the positions where
    ///   it is true: the result has shape `[count] ++ self.shape()[k..]`.
    ///
    /// Differentiable: the gradient is summed back into the picked rows
    /// (repeated indices accumulate).
    ///
    /// ```
    /// # use tensorscope::{Tensor, DType, Device};
    /// let x = Tensor::arange(0.0, 6.0, 1.0, DType::F32, Device::Cpu)?.view(&[3, 2])?;
    /// let rows = x.index(&Tensor::from_slice(&[-1i64, 0], &[2], Device::Cpu)?)?;
    /// assert_eq!(rows.to_vec::<f32>()?, vec![4., 5., 0., 1.]);
    /// let mask = Tensor::from_slice(&[true, false, true], &[3], Device::Cpu)?;
    /// assert_eq!(x.index(&mask)?.shape(), &[2, 2]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn index(&self, index: &Tensor) -> Result<Tensor> {
        let op = "index";
        self.same_device(op, index)?;
        match index.dtype() {
            DType::Bool => self.index_mask(index),
            DType::I64 | DType::I32 => {
                let d = normalize_dim(op, 0, self.rank())?;
                let mut shape: Dims = index.shape().into();
                shape.extend_from_slice(&self.shape()[1..]);
                let ir = index.rank();
                // The input walk: index dims move nothing (the index moves dim 0).
                let mut strides: Dims = smallvec::smallvec![0; ir];
                strides.extend_from_slice(&self.strides()[1..]);
                let src_walk = Layout::from_parts(shape.clone(), strides, self.storage_offset());
                let mut istrides: Dims = index.strides().into();
                istrides.extend(std::iter::repeat_n(0, self.rank() - 1));
                let index_walk =
                    Layout::from_parts(shape.clone(), istrides, index.storage_offset());
                let out = Tensor::alloc(&shape, self.dtype(), self.device())?;
                backend::gather(
                    &Operand::with(self, src_walk),
                    &Operand::of(index),
                    &index_walk,
                    &self.indexed_dim(op, d, true),
                    &Operand::of(&out),
                )?;
                crate::autograd::formulas_index::index_rows(self, index, out)
            }
            d => bail!(Error::dtype(op, "int64, int32 or bool (an index)", d)),
        }
    }

    /// `x[mask]` for a bool mask over the leading dimensions.
    fn index_mask(&self, mask: &Tensor) -> Result<Tensor> {
        let op = "index";
        let k = mask.rank();
        if k > self.rank() || mask.shape() != &self.shape()[..k] {
            bail!(Error::shape(
                op,
                self.shape(),
                mask.shape(),
                "a bool index must have the shape of the tensor's leading dimensions"
            ));
        }
        let flags = mask.to_vec::<bool>()?;
        let picks: Vec<i64> = (0..flags.len() as i64)
            .filter(|&i| flags[i as usize])
            .collect();
        let picks = Tensor::from_slice(&picks, &[picks.len()], crate::device::Device::Cpu)?
            .to_device(self.device())?;
        let flat = if k == 0 {
            self.unsqueeze(0)?
        } else {
            self.flatten(0, k as isize - 1)?
        };
        flat.index_select(0, &picks)
    }

    /// Validation shared by the scatter family; returns the normalized dim.
    pub(super) fn scatter_check(
        &self,
        op: &'static str,
        dim: isize,
        index: &Tensor,
        src: Option<&Tensor>,
    ) -> Result<usize> {
        self.check_writable(op)?;
        check_src_grad(op, src)?;
        check_index_dtype(op, index)?;
        self.same_device(op, index)?;
        let d = normalize_dim(op, dim, self.rank())?;
        if index.rank() != self.rank() {
            bail!(Error::shape(
                op,
                self.shape(),
                index.shape(),
                format!(
                    "the index must have self's rank {} (got rank {})",
                    self.rank(),
                    index.rank()
                )
            ));
        }
        for k in 0..self.rank() {
            if k != d && index.shape()[k] > self.shape()[k] {
                bail!(Error::shape(op, self.shape(), index.shape(), format!("the index's size {} in dimension {k} exceeds self's size {} (only dimension {d} may be larger)", index.shape()[k], self.shape()[k])));
            }
        }
        if let Some(src) = src {
            self.same_device(op, src)?;
            if src.dtype() != self.dtype() {
                bail!(Error::dtype(
                    op,
                    format!("{} (self's dtype) for the source", self.dtype()),
                    src.dtype()
                ));
            }
            if src.rank() != self.rank() {
                bail!(Error::shape(
                    op,
                    src.shape(),
                    index.shape(),
                    format!(
                        "the source must have self's rank {} (got rank {})",
                        self.rank(),
                        src.rank()
                    )
                ));
            }
            for k in 0..self.rank() {
                if index.shape()[k] > src.shape()[k] {
                    bail!(Error::shape(
                        op,
                        src.shape(),
                        index.shape(),
                        format!(
                            "the index's size {} in dimension {k} exceeds the source's size {}",
                            index.shape()[k],
                            src.shape()[k]
                        )
                    ));
                }
            }
        }
        Ok(d)
    }

    pub(super) fn scatter_impl(
        &mut self,
        op: &'static str,
        dim: isize,
        index: &Tensor,
        src: Option<&Tensor>,
        value: f64,
        mode: ScatterMode,
    ) -> Result<&mut Tensor> {
        let d = self.scatter_check(op, dim, index, src)?;
        if src.is_none() {
            super::check_fill_value(op, self.dtype(), value)?;
        }
        if mode == ScatterMode::Add && self.dtype() == DType::Bool {
            bail!(Error::dtype(op, "a numeric dtype", DType::Bool));
        }
        let index = self.unshared(index)?;
        let dst = Operand::with(self, walk(self.layout(), index.shape(), d));
        let dim_info = self.indexed_dim(op, d, false);
        match src {
            Some(src) => {
                let src = self.unshared(src)?;
                let s = Operand::with(
                    &src,
                    Layout::from_parts(
                        index.shape().into(),
                        src.strides().into(),
                        src.storage_offset(),
                    ),
                );
                backend::scatter(
                    &dst,
                    &Operand::of(&index),
                    index.layout(),
                    &dim_info,
                    ScatterSrc::Tensor(&s),
                    mode,
                )?;
            }
            None => backend::scatter(
                &dst,
                &Operand::of(&index),
                index.layout(),
                &dim_info,
                ScatterSrc::Value(value),
                mode,
            )?,
        }
        self.storage().bump_version();
        Ok(self)
    }

    /// Writes `src` into `self` at the positions `index` gives along `dim`:
    /// `self[i][index[i][j][k]][k] = src[i][j][k]` for `dim == 1` (PyTorch's
    /// `scatter_`). `index` and `src` have `self`'s rank; `index` is no larger
    /// than `src` in any dimension and no larger than `self` in any dimension
    /// but `dim`; `src` has `self`'s dtype. Only the elements `index` covers
    /// are read from `src`.
    ///
    /// ```
    /// # use tensorscope::{Tensor, DType, Device};
    /// let mut x = Tensor::zeros(&[5], DType::F32, Device::Cpu)?;
    /// let i = Tensor::from_slice(&[0i64, 2, 4], &[3], Device::Cpu)?;
    /// let v = Tensor::from_slice(&[1.0f32, 2., 3.], &[3], Device::Cpu)?;
    /// x.scatter_(0, &i, &v)?;
    /// assert_eq!(x.to_vec::<f32>()?, vec![1., 0., 2., 0., 3.]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn scatter_(&mut self, dim: isize, index: &Tensor, src: &Tensor) -> Result<&mut Tensor> {
        self.scatter_impl("scatter_", dim, index, Some(src), 0.0, ScatterMode::Assign)
    }

    /// [`scatter_`](Tensor::scatter_) of one value (converted to `self`'s dtype).
    pub fn scatter_value_(
        &mut self,
        dim: isize,
        index: &Tensor,
        value: f64,
    ) -> Result<&mut Tensor> {
        self.scatter_impl(
            "scatter_value_",
            dim,
            index,
            None,
            value,
            ScatterMode::Assign,
        )
    }

    /// Like [`scatter_`](Tensor::scatter_) but adds: repeated indices
    /// accumulate (PyTorch's `scatter_add_`). Not defined on bool.
    pub fn scatter_add_(
        &mut self,
        dim: isize,
        index: &Tensor,
        src: &Tensor,
    ) -> Result<&mut Tensor> {
        self.scatter_impl("scatter_add_", dim, index, Some(src), 0.0, ScatterMode::Add)
    }

    /// A copy of `self` with the writes of `family`'s in-place form, and
    /// its autograd node (the copy and the write themselves are not
    /// recorded).
    #[allow(clippy::too_many_arguments)]
    fn write_copy(
        &self,
        family: Family,
        op: &'static str,
        dim: isize,
        index: &Tensor,
        src: Option<&Tensor>,
        value: f64,
        kind: Write,
    ) -> Result<Tensor> {
        let mode = if kind == Write::Add {
            ScatterMode::Add
        } else {
            ScatterMode::Assign
        };
        let out = crate::autograd::no_grad(|| -> Result<Tensor> {
            let mut out = self.deep_clone()?;
            match family {
                Family::Scatter => out.scatter_impl(op, dim, index, src, value, mode)?,
                Family::IndexVector => out.index_vector_impl(op, dim, index, src, value, mode)?,
            };
            Ok(out)
        })?;
        let d = normalize_dim(op, dim, self.rank())?;
        grad::write(family, kind, self, d, index, src, out)
    }

    /// Out-of-place [`scatter_`](Tensor::scatter_): a copy of `self` with the
    /// writes. Differentiable in `self` (zero gradient at the written
    /// positions) and `src` (the gradient gathered at `index`), as PyTorch's
    /// `scatter`.
    ///
    /// ```
    /// # use tensorscope::{Tensor, DType, Device};
    /// let x = Tensor::ones(&[4], DType::F64, Device::Cpu)?.requires_grad_(true)?;
    /// let v = Tensor::from_slice(&[5.0f64, 6.], &[2], Device::Cpu)?.requires_grad_(true)?;
    /// let i = Tensor::from_slice(&[3i64, 0], &[2], Device::Cpu)?;
    /// let y = x.scatter(0, &i, &v)?;
    /// assert_eq!(y.to_vec::<f64>()?, vec![6., 1., 1., 5.]);
    /// y.mul_scalar(2.0)?.sum_all()?.backward()?;
    /// assert_eq!(x.grad().unwrap().to_vec::<f64>()?, vec![0., 2., 2., 0.]);
    /// assert_eq!(v.grad().unwrap().to_vec::<f64>()?, vec![2., 2.]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn scatter(&self, dim: isize, index: &Tensor, src: &Tensor) -> Result<Tensor> {
        self.write_copy(
            Family::Scatter,
            "scatter",
            dim,
            index,
            Some(src),
            0.0,
            Write::Assign,
        )
    }

    /// Out-of-place [`scatter_value_`](Tensor::scatter_value_); differentiable
    /// in `self` (zero gradient at the written positions).
    pub fn scatter_value(&self, dim: isize, index: &Tensor, value: f64) -> Result<Tensor> {
        self.write_copy(
            Family::Scatter,
            "scatter_value",
            dim,
            index,
            None,
            value,
            Write::Value,
        )
    }

    /// Out-of-place [`scatter_add_`](Tensor::scatter_add_). Differentiable:
    /// `self` gets the gradient as it is, `src` the gradient gathered at
    /// `index`.
    pub fn scatter_add(&self, dim: isize, index: &Tensor, src: &Tensor) -> Result<Tensor> {
        if let Some(c) =
            crate::autocast::cast(&crate::autocast::SCATTER_ADD, &[Some(self), Some(src)])?
        {
            return c.get(0).scatter_add(dim, index, c.get(1));
        }
        self.write_copy(
            Family::Scatter,
            "scatter_add",
            dim,
            index,
            Some(src),
            0.0,
            Write::Add,
        )
    }

    /// Validation of the vector-index family (`index_fill_`, `index_copy_`,
    /// `index_add_`); returns the dim.
    fn index_vector_check(
        &self,
        op: &'static str,
        dim: isize,
        index: &Tensor,
        src: Option<&Tensor>,
    ) -> Result<usize> {
        self.check_writable(op)?;
        check_src_grad(op, src)?;
        check_index_dtype(op, index)?;
        self.same_device(op, index)?;
        let d = normalize_dim(op, dim, self.rank())?;
        check_index_vector(op, index)?;
        if let Some(src) = src {
            self.same_device(op, src)?;
            if src.dtype() != self.dtype() {
                bail!(Error::dtype(
                    op,
                    format!("{} (self's dtype) for the source", self.dtype()),
                    src.dtype()
                ));
            }
            let mut want: Dims = self.shape().into();
            want[d] = index.numel();
            if src.shape() != want.as_slice() {
                bail!(Error::shape(op, &want, src.shape(), format!("the source must have self's shape with dimension {d} of the index's length {}", index.numel())));
            }
        }
        Ok(d)
    }

    fn index_vector_impl(
        &mut self,
        op: &'static str,
        dim: isize,
        index: &Tensor,
        src: Option<&Tensor>,
        value: f64,
        mode: ScatterMode,
    ) -> Result<&mut Tensor> {
        let d = self.index_vector_check(op, dim, index, src)?;
        if src.is_none() {
            super::check_fill_value(op, self.dtype(), value)?;
        }
        if mode == ScatterMode::Add && self.dtype() == DType::Bool {
            bail!(Error::dtype(op, "a numeric dtype", DType::Bool));
        }
        let index = self.unshared(index)?;
        let mut shape: Dims = self.shape().into();
        shape[d] = index.numel();
        let dst = Operand::with(self, walk(self.layout(), &shape, d));
        let iw = vector_walk(&index, &shape, d);
        let dim_info = self.indexed_dim(op, d, src.is_none());
        match src {
            Some(src) => {
                let src = self.unshared(src)?;
                backend::scatter(
                    &dst,
                    &Operand::of(&index),
                    &iw,
                    &dim_info,
                    ScatterSrc::Tensor(&Operand::of(&src)),
                    mode,
                )?;
            }
            None => backend::scatter(
                &dst,
                &Operand::of(&index),
                &iw,
                &dim_info,
                ScatterSrc::Value(value),
                mode,
            )?,
        }
        self.storage().bump_version();
        Ok(self)
    }

    /// Fills the slices at positions `index` (a vector) along `dim` with
    /// `value`, converted to `self`'s dtype (PyTorch's `index_fill_`).
    /// Negative indices count from the end.
    ///
    /// ```
    /// # use tensorscope::{Tensor, DType, Device};
    /// let mut x = Tensor::zeros(&[2, 3], DType::I64, Device::Cpu)?;
    /// x.index_fill_(1, &Tensor::from_slice(&[0i64, -1], &[2], Device::Cpu)?, 7.0)?;
    /// assert_eq!(x.to_vec::<i64>()?, vec![7, 0, 7, 7, 0, 7]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn index_fill_(&mut self, dim: isize, index: &Tensor, value: f64) -> Result<&mut Tensor> {
        self.index_vector_impl("index_fill_", dim, index, None, value, ScatterMode::Assign)
    }

    /// Copies slice `j` of `src` along `dim` to position `index[j]` of `self`
    /// (PyTorch's `index_copy_`). `src` has `self`'s dtype and shape, except
    /// that its `dim` has `index.numel()` entries.
    pub fn index_copy_(&mut self, dim: isize, index: &Tensor, src: &Tensor) -> Result<&mut Tensor> {
        self.index_vector_impl(
            "index_copy_",
            dim,
            index,
            Some(src),
            0.0,
            ScatterMode::Assign,
        )
    }

    /// Adds slice `j` of `src` along `dim` to position `index[j]` of `self`;
    /// repeated indices accumulate (PyTorch's `index_add_` with `alpha = 1`).
    pub fn index_add_(&mut self, dim: isize, index: &Tensor, src: &Tensor) -> Result<&mut Tensor> {
        self.index_vector_impl("index_add_", dim, index, Some(src), 0.0, ScatterMode::Add)
    }

    /// Out-of-place [`index_fill_`](Tensor::index_fill_). Differentiable in
    /// `self`: the filled slices get a zero gradient.
    ///
    /// ```
    /// # use tensorscope::{Tensor, DType, Device};
    /// let x = Tensor::ones(&[2, 3], DType::F64, Device::Cpu)?.requires_grad_(true)?;
    /// let i = Tensor::from_slice(&[-1i64], &[1], Device::Cpu)?;
    /// let y = x.index_fill(1, &i, 9.0)?;
    /// assert_eq!(y.to_vec::<f64>()?, vec![1., 1., 9., 1., 1., 9.]);
    /// y.sum_all()?.backward()?;
    /// assert_eq!(x.grad().unwrap().to_vec::<f64>()?, vec![1., 1., 0., 1., 1., 0.]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn index_fill(&self, dim: isize, index: &Tensor, value: f64) -> Result<Tensor> {
        self.write_copy(
            Family::IndexVector,
            "index_fill",
            dim,
            index,
            None,
            value,
            Write::Value,
        )
    }

    /// Out-of-place [`index_copy_`](Tensor::index_copy_). Differentiable:
    /// `self`'s gradient is zero in the overwritten slices, `src` gets the
    /// gradient's slices at `index`.
    pub fn index_copy(&self, dim: isize, index: &Tensor, src: &Tensor) -> Result<Tensor> {
        if let Some(c) =
            crate::autocast::cast(&crate::autocast::INDEX_COPY, &[Some(self), Some(src)])?
        {
            return c.get(0).index_copy(dim, index, c.get(1));
        }
        self.write_copy(
            Family::IndexVector,
            "index_copy",
            dim,
            index,
            Some(src),
            0.0,
            Write::Assign,
        )
    }

    /// Out-of-place [`index_add_`](Tensor::index_add_). Differentiable:
    /// `self` gets the gradient as it is, `src` the gradient's slices at
    /// `index`.
    pub fn index_add(&self, dim: isize, index: &Tensor, src: &Tensor) -> Result<Tensor> {
        self.write_copy(
            Family::IndexVector,
            "index_add",
            dim,
            index,
            Some(src),
            0.0,
            Write::Add,
        )
    }

    /// A copy of `self` whose positions where `mask` is true take the first
    /// elements of `src`, in row-major order (PyTorch's `masked_scatter`).
    /// `mask` is bool and broadcasts to `self`'s shape; `src` has `self`'s
    /// dtype and at least as many elements as `mask` has true positions (its
    /// shape does not matter). Differentiable in `self` (no gradient at the
    /// masked positions) and `src` (the gradient at the positions each of
    /// its elements went to, zero for the unused tail).
    ///
    /// ```
    /// # use tensorscope::{Tensor, DType, Device};
    /// let x = Tensor::zeros(&[2, 3], DType::F32, Device::Cpu)?;
    /// let m = Tensor::from_slice(&[true, false, true], &[3], Device::Cpu)?; // broadcast over rows
    /// let v = Tensor::from_slice(&[1.0f32, 2., 3., 4., 5.], &[5], Device::Cpu)?;
    /// assert_eq!(x.masked_scatter(&m, &v)?.to_vec::<f32>()?, vec![1., 0., 2., 3., 0., 4.]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn masked_scatter(&self, mask: &Tensor, src: &Tensor) -> Result<Tensor> {
        self.masked_scatter_impl("masked_scatter", mask, src)
    }

    /// In-place [`masked_scatter`](Tensor::masked_scatter). Refused in grad
    /// mode when `self` or `src` requires grad (see the module docs).
    pub fn masked_scatter_(&mut self, mask: &Tensor, src: &Tensor) -> Result<&mut Tensor> {
        let op = "masked_scatter_";
        self.check_writable(op)?;
        check_src_grad(op, Some(src))?;
        let r = crate::autograd::no_grad(|| self.masked_scatter_impl(op, mask, src))?;
        self.copy_(&r)
    }

    fn masked_scatter_impl(&self, op: &'static str, mask: &Tensor, src: &Tensor) -> Result<Tensor> {
        if mask.dtype() != DType::Bool {
            bail!(Error::dtype(op, "bool (the mask)", mask.dtype()));
        }
        self.same_device(op, mask)?;
        self.same_device(op, src)?;
        if src.dtype() != self.dtype() {
            bail!(Error::dtype(
                op,
                format!("{} (self's dtype) for the source", self.dtype()),
                src.dtype()
            ));
        }
        check_broadcasts_to(
            op,
            self.shape(),
            mask.shape(),
            "the mask must broadcast to self's shape",
        )?;
        let numel = self.numel();
        let dims: Vec<isize> = self.shape().iter().map(|&d| d as isize).collect();
        // Flat positions of the true elements, in row-major order.
        let pos = crate::autograd::no_grad(|| {
            Tensor::arange(0.0, numel as f64, 1.0, DType::I64, self.device())?
                .reshape(&dims)?
                .masked_select(mask)
        })?;
        let n = pos.numel();
        if src.numel() < n {
            bail!(Error::shape(
                op,
                &[n],
                src.shape(),
                format!(
                    "the source has {} elements but the mask selects {n}",
                    src.numel()
                )
            ));
        }
        let flat_src = src.reshape(&[-1])?.narrow(0, 0, n)?;
        self.reshape(&[-1])?
            .index_copy(0, &pos, &flat_src)?
            .reshape(&dims)
    }

    /// Slice assignment, PyTorch's `x[start:end:step] = src` along `dim`:
    /// `src` broadcasts to the slice and may have another dtype (converted)
    /// or device. The write goes through a view of `self`, so it lands in the
    /// storage `self` shares with every other view of it. `end` is clamped to
    /// the dimension's size, as in Python.
    ///
    /// ```
    /// # use tensorscope::{Tensor, DType, Device};
    /// let base = Tensor::zeros(&[5], DType::F32, Device::Cpu)?;
    /// let mut x = base.alias();
    /// x.slice_assign_(0, 1, 4, 1, &Tensor::from_slice(&[10.0f32, 20., 30.], &[3], Device::Cpu)?)?;
    /// assert_eq!(base.to_vec::<f32>()?, vec![0., 10., 20., 30., 0.]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn slice_assign_(
        &mut self,
        dim: isize,
        start: usize,
        end: usize,
        step: usize,
        src: &Tensor,
    ) -> Result<&mut Tensor> {
        let op = "slice_assign_";
        self.check_writable(op)?;
        check_src_grad(op, Some(src))?;
        let l = self.layout().slice(op, dim, start, end, step)?;
        check_broadcasts_to(
            op,
            l.shape(),
            src.shape(),
            "the source must broadcast to the slice's shape",
        )?;
        let mut view = self.with_layout(l);
        view.copy_(src)?;
        Ok(self)
    }

    /// Fills a slice, PyTorch's `x[start:end:step] = value` along `dim`,
    /// through a view of `self` (so the base storage changes).
    pub fn slice_fill_(
        &mut self,
        dim: isize,
        start: usize,
        end: usize,
        step: usize,
        value: f64,
    ) -> Result<&mut Tensor> {
        let op = "slice_fill_";
        self.check_writable(op)?;
        let l = self.layout().slice(op, dim, start, end, step)?;
        let mut view = self.with_layout(l);
        view.fill_(value)?;
        Ok(self)
    }
}
