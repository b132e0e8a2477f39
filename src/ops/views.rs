//! View operations: new layouts over the same storage. Nothing here copies
//! data, except `reshape`/`flatten` when the strides cannot express the new
//! shape (exactly PyTorch's rule) and `contiguous` on a non-contiguous tensor.

use crate::autograd::formulas::{pick, sum_to, view as grad_view};
use crate::error::{bail, Error, Result};
use crate::layout::{normalize_dim, resolve_shape};
use crate::tensor::Tensor;

/// `shape` as the signed dims `reshape` takes.
fn signed(shape: &[usize]) -> Vec<isize> {
    shape.iter().map(|&d| d as isize).collect()
}

/// The most empty pieces [`Tensor::chunk`] makes of an empty dimension
/// (a deviation from PyTorch, which makes any number it can allocate).
pub(crate) const MAX_EMPTY_CHUNKS: usize = 1 << 16;

impl Tensor {
    /// A view with a new shape (one dimension may be `-1`). An error if the
    /// strides cannot express it: use [`reshape`](Tensor::reshape) then.
    ///
    /// ```
    /// # use tensorscope::{Tensor, DType, Device};
    /// let x = Tensor::arange(0.0, 6.0, 1.0, DType::F32, Device::Cpu)?;
    /// let v = x.view(&[2, -1])?;
    /// assert_eq!(v.shape(), &[2, 3]);
    /// assert!(v.shares_storage(&x));
    /// assert!(x.view(&[2, 3])?.t()?.view(&[6]).is_err());
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn view(&self, shape: &[isize]) -> Result<Tensor> {
        let to = resolve_shape("view", self.shape(), shape)?;
        match self.layout().view(&to) {
            Some(l) => {
                let back = signed(self.shape());
                Ok(grad_view(
                    self,
                    self.with_layout(l),
                    "ViewBackward",
                    move |g| g.reshape(&back),
                ))
            }
            None => bail!(Error::NotViewable {
                op: "view",
                shape: shape.to_vec(),
                from: self.shape().to_vec(),
                strides: self.strides().to_vec(),
            }),
        }
    }

    /// A view with a new shape when the strides allow one, otherwise a
    /// contiguous copy with that shape (PyTorch's `reshape`).
    pub fn reshape(&self, shape: &[isize]) -> Result<Tensor> {
        let _op = crate::alloc::history::op_context("reshape");
        let to = resolve_shape("reshape", self.shape(), shape)?;
        let out = match self.layout().view(&to) {
            Some(l) => self.with_layout(l),
            None => {
                let c = crate::autograd::no_grad(|| self.deep_clone())?;
                c.with_layout(crate::layout::Layout::contiguous(&to))
            }
        };
        let back = signed(self.shape());
        Ok(grad_view(self, out, "ReshapeBackward", move |g| {
            g.reshape(&back)
        }))
    }

    /// Merges dimensions `start..=end` into one (a view when possible, as `reshape`).
    pub fn flatten(&self, start: isize, end: isize) -> Result<Tensor> {
        if self.rank() == 0 {
            return self.reshape(&[1]);
        }
        let s = normalize_dim("flatten", start, self.rank())?;
        let e = normalize_dim("flatten", end, self.rank())?;
        if s > e {
            bail!(Error::arg(
                "flatten",
                format!("start dim {start} comes after end dim {end}")
            ));
        }
        let shape = self.shape();
        let mut to: Vec<isize> = shape[..s].iter().map(|&d| d as isize).collect();
        to.push(crate::layout::numel(&shape[s..=e]) as isize);
        to.extend(shape[e + 1..].iter().map(|&d| d as isize));
        self.reshape(&to)
    }

    /// Swaps two dimensions (a view).
    pub fn transpose(&self, d0: isize, d1: isize) -> Result<Tensor> {
        let out = self.with_layout(self.layout().transpose(d0, d1)?);
        Ok(grad_view(self, out, "TransposeBackward", move |g| {
            g.transpose(d0, d1)
        }))
    }

    /// Transpose of a tensor of rank at most 2 (a view); rank 0 and 1 are returned as they are.
    pub fn t(&self) -> Result<Tensor> {
        match self.rank() {
            0 | 1 => Ok(grad_view(
                self,
                self.with_layout(self.layout().clone()),
                "TBackward",
                |g| Ok(g.alias()),
            )),
            2 => self.transpose(0, 1),
            r => bail!(Error::arg(
                "t",
                format!(
                    "expects a tensor of rank <= 2, got rank {r} (shape {:?}); use transpose",
                    self.shape()
                )
            )),
        }
    }

    /// Reorders dimensions (a view).
    pub fn permute(&self, dims: &[isize]) -> Result<Tensor> {
        let out = self.with_layout(self.layout().permute(dims)?);
        // The inverse permutation sends each output dim back where it came from.
        let mut inv = vec![0isize; dims.len()];
        for (i, &d) in dims.iter().enumerate() {
            let d = normalize_dim("permute", d, dims.len())?;
            inv[d] = i as isize;
        }
        Ok(grad_view(self, out, "PermuteBackward", move |g| {
            g.permute(&inv)
        }))
    }

    /// Elements `start .. start + len` of `dim` (a view).
    pub fn narrow(&self, dim: isize, start: usize, len: usize) -> Result<Tensor> {
        let out = self.with_layout(self.layout().narrow(dim, start, len)?);
        Ok(pick(self, out, "NarrowBackward", move |z| {
            z.narrow(dim, start, len)
        }))
    }

    /// Python's `t[start:end:step]` along `dim` (a view). `end` is clamped to
    /// the dimension's size; `step` must be positive.
    pub fn slice(&self, dim: isize, start: usize, end: usize, step: usize) -> Result<Tensor> {
        let out = self.with_layout(self.layout().slice("slice", dim, start, end, step)?);
        Ok(pick(self, out, "SliceBackward", move |z| {
            z.slice(dim, start, end, step)
        }))
    }

    /// Removes `dim` by fixing it at `index` (negative counts from the end); a view.
    pub fn select(&self, dim: isize, index: isize) -> Result<Tensor> {
        let out = self.with_layout(self.layout().select(dim, index)?);
        Ok(pick(self, out, "SelectBackward", move |z| {
            z.select(dim, index)
        }))
    }

    /// Removes every dimension of size 1 (a view).
    pub fn squeeze(&self) -> Tensor {
        let back = signed(self.shape());
        let out = self.with_layout(self.layout().squeeze_all());
        grad_view(self, out, "SqueezeBackward", move |g| g.reshape(&back))
    }

    /// Removes `dim` if it has size 1 (a view).
    pub fn squeeze_dim(&self, dim: isize) -> Result<Tensor> {
        let back = signed(self.shape());
        let out = self.with_layout(self.layout().squeeze_dim(dim)?);
        Ok(grad_view(self, out, "SqueezeBackward", move |g| {
            g.reshape(&back)
        }))
    }

    /// Inserts a dimension of size 1 at `dim` (a view).
    pub fn unsqueeze(&self, dim: isize) -> Result<Tensor> {
        let back = signed(self.shape());
        let out = self.with_layout(self.layout().unsqueeze(dim)?);
        Ok(grad_view(self, out, "UnsqueezeBackward", move |g| {
            g.reshape(&back)
        }))
    }

    /// Broadcasts size-1 dimensions to `shape` with stride 0 (a view; no
    /// memory is used). `-1` keeps a dimension's size.
    pub fn expand(&self, shape: &[isize]) -> Result<Tensor> {
        let (back, dt) = (self.shape().to_vec(), self.dtype());
        let out = self.with_layout(self.layout().expand(shape)?);
        Ok(grad_view(self, out, "ExpandBackward", move |g| {
            sum_to(g, &back, dt)
        }))
    }

    /// [`expand`](Tensor::expand) to another tensor's shape.
    pub fn expand_as(&self, other: &Tensor) -> Result<Tensor> {
        let (back, dt) = (self.shape().to_vec(), self.dtype());
        let out = self.with_layout(self.layout().broadcast_to(other.shape())?);
        Ok(grad_view(self, out, "ExpandBackward", move |g| {
            sum_to(g, &back, dt)
        }))
    }

    /// Views of every index along `dim`, each without that dimension.
    pub fn unbind(&self, dim: isize) -> Result<Vec<Tensor>> {
        let d = normalize_dim("unbind", dim, self.rank())?;
        (0..self.shape()[d])
            .map(|i| self.select(d as isize, i as isize))
            .collect()
    }

    /// Splits `dim` into pieces of `size` (the last may be smaller); views.
    pub fn split(&self, size: usize, dim: isize) -> Result<Vec<Tensor>> {
        let d = normalize_dim("split", dim, self.rank())?;
        if size == 0 {
            bail!(Error::arg("split", "split size must be positive"));
        }
        let n = self.shape()[d];
        let mut out = Vec::with_capacity(n.div_ceil(size).max(1));
        let mut start = 0;
        loop {
            let len = size.min(n - start);
            out.push(self.narrow(d as isize, start, len)?);
            start += len;
            if start >= n {
                break;
            }
        }
        Ok(out)
    }

    /// Splits `dim` into pieces of the given sizes, which must add up to its size; views.
    pub fn split_sizes(&self, sizes: &[usize], dim: isize) -> Result<Vec<Tensor>> {
        let d = normalize_dim("split", dim, self.rank())?;
        let total = sizes.iter().try_fold(0usize, |a, &s| a.checked_add(s));
        if total != Some(self.shape()[d]) {
            let total = sizes.iter().fold(0usize, |a, &s| a.saturating_add(s));
            bail!(Error::arg(
                "split",
                format!(
                    "sizes {sizes:?} add up to {total}, but dimension {d} has size {} (shape {:?})",
                    self.shape()[d],
                    self.shape()
                )
            ));
        }
        let mut start = 0;
        sizes
            .iter()
            .map(|&s| {
                let t = self.narrow(d as isize, start, s);
                start += s;
                t
            })
            .collect()
    }

    /// Splits `dim` into `chunks` nearly equal pieces (PyTorch's `chunk`:
    /// pieces of `ceil(size / chunks)`, so there may be fewer); views.
    pub fn chunk(&self, chunks: usize, dim: isize) -> Result<Vec<Tensor>> {
        if chunks == 0 {
            bail!(Error::arg("chunk", "number of chunks must be positive"));
        }
        let d = normalize_dim("chunk", dim, self.rank())?;
        if self.shape()[d] == 0 {
            // PyTorch: `chunks` empty pieces. Bounded: a count that could
            // never be meant (PyTorch fails to allocate its vector at 2^62;
            // this refused to stop at usize::MAX) is an Err.
            if chunks > MAX_EMPTY_CHUNKS {
                bail!(Error::arg(
                    "chunk",
                    format!(
                        "{chunks} chunks of an empty dimension: at most {MAX_EMPTY_CHUNKS} empty pieces are made"
                    )
                ));
            }
            return (0..chunks).map(|_| self.narrow(d as isize, 0, 0)).collect();
        }
        let size = self.shape()[d].div_ceil(chunks);
        self.split(size, d as isize)
    }

    /// A view with explicit shape, strides and offset (in elements) over this
    /// tensor's storage. An error if any element would fall outside the storage.
    pub fn as_strided(&self, shape: &[usize], strides: &[usize], offset: usize) -> Result<Tensor> {
        if shape.len() != strides.len() {
            bail!(Error::arg(
                "as_strided",
                format!("shape {shape:?} and strides {strides:?} differ in length")
            ));
        }
        let cap = self.storage_nbytes() / self.dtype().size_in_bytes();
        crate::layout::checked_numel("as_strided", shape)?;
        // The last element reached, computed without overflow (None: past any storage).
        let last = if shape.contains(&0) {
            Some(0)
        } else {
            shape
                .iter()
                .zip(strides)
                .try_fold(offset, |acc, (&d, &st)| {
                    (d - 1).checked_mul(st).and_then(|x| acc.checked_add(x))
                })
        };
        let empty = shape.contains(&0);
        match last {
            Some(l) if empty || l < cap => {}
            _ => bail!(Error::arg(
                "as_strided",
                format!(
                    "shape {shape:?}, strides {strides:?} and offset {offset} reach element {} of a storage of {cap} elements",
                    last.map_or_else(|| "beyond usize::MAX".to_string(), |l| l.to_string())
                )
            )),
        }
        if crate::autograd::needs_grad(&[self]) {
            bail!(Error::Autograd {
                op: "as_strided",
                msg: "as_strided does not record gradients; use view ops, or call it on a detached tensor".into(),
            });
        }
        let l = crate::layout::Layout::from_parts(shape.into(), strides.into(), offset);
        Ok(self.with_layout(l))
    }

    /// This tensor if it is already contiguous (a new handle to the same
    /// storage: no copy), otherwise a contiguous copy.
    pub fn contiguous(&self) -> Result<Tensor> {
        let _op = crate::alloc::history::op_context("contiguous");
        if self.is_contiguous() {
            // PyTorch returns `self`: the same tensor, autograd identity included.
            Ok(self.alias())
        } else {
            self.deep_clone()
        }
    }

    /// An independent, contiguous copy with its own storage (PyTorch's
    /// `clone()`; named so because `Tensor` deliberately does not implement
    /// [`Clone`]: a copy of the data is never made implicitly).
    pub fn deep_clone(&self) -> Result<Tensor> {
        let _op = crate::alloc::history::op_context("deep_clone");
        let out = Tensor::alloc(self.shape(), self.dtype(), self.device())?;
        crate::backend::copy(
            &crate::backend::Operand::of(self),
            &crate::backend::Operand::of(&out),
        )?;
        crate::autograd::formulas::cast(self, out, "CloneBackward")
    }

    /// A copy converted to `dtype`. As in PyTorch's `to(dtype)` (and the seed's
    /// table: "new storage unless same dtype"), when the dtype already matches
    /// this returns a new handle to the same storage and copies nothing.
    pub fn to_dtype(&self, dtype: crate::dtype::DType) -> Result<Tensor> {
        let _op = crate::alloc::history::op_context("to_dtype");
        if dtype == self.dtype() {
            return Ok(self.alias());
        }
        let out = Tensor::alloc(self.shape(), dtype, self.device())?;
        crate::backend::copy(
            &crate::backend::Operand::of(self),
            &crate::backend::Operand::of(&out),
        )?;
        crate::autograd::formulas::cast(self, out, "ToCopyBackward")
    }

    /// A copy on `device`. When the tensor is already there this returns a new
    /// handle to the same storage, as PyTorch's `to(device)` does.
    pub fn to_device(&self, device: crate::device::Device) -> Result<Tensor> {
        let _op = crate::alloc::history::op_context("to_device");
        if device == self.device() {
            return Ok(self.alias());
        }
        let out =
            Tensor::alloc(self.shape(), self.dtype(), device).map_err(|e| e.in_op("to_device"))?;
        crate::backend::copy(
            &crate::backend::Operand::of(self),
            &crate::backend::Operand::of(&out),
        )?;
        crate::autograd::formulas::cast(self, out, "ToCopyBackward")
    }
}
