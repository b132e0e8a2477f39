//! `index_put_` and `index_put`: PyTorch's `x[i0, i1, ...] = v` (and `+= v`
//! with `accumulate`) for a tuple of index tensors over the leading
//! dimensions.
//!
//! The indices (int64 or int32, or bool masks, which stand for their
//! `nonzero` coordinates and consume as many dimensions as they have)
//! broadcast together to a shape `B`; each is checked against its
//! dimension (negative ones count from the end); together they become one
//! linear index into the leading dimensions flattened, and the values,
//! broadcast to `B` followed by the remaining dimensions, go there through
//! `index_copy_` / `index_add_` (both devices). So repeated indices
//! accumulate with `accumulate`, and without it the last write is not
//! specified (as in PyTorch).

use crate::alloc::history::op_context;
use crate::autograd::no_grad;
use crate::dtype::DType;
use crate::error::{bail, Error, Result};
use crate::layout::broadcast_shapes;
use crate::tensor::Tensor;

/// The linear index (int64, 1-D) into `shape`'s first `k` dimensions
/// flattened, from the checked indices, and `B`, their broadcast shape.
struct Target {
    linear: Tensor,
    k: usize,
    batch: Vec<usize>,
}

impl Tensor {
    /// The indices as int64 tensors, one per indexed dimension (a bool
    /// mask expanded to its coordinates), broadcast together, checked and
    /// folded into one linear index.
    fn index_put_target(&self, op: &'static str, indices: &[&Tensor]) -> Result<Target> {
        if indices.is_empty() {
            bail!(Error::arg(
                op,
                "no index tensors (PyTorch refuses an empty tuple too)"
            ));
        }
        let mut parts: Vec<Tensor> = Vec::new();
        let mut nothing = false;
        for t in indices {
            self.same_device(op, t)?;
            match t.dtype() {
                DType::Bool if t.rank() == 0 => {
                    // `x[True] = v` writes everything, `x[False] = v` nothing.
                    nothing |= !t.item::<bool>()?;
                }
                DType::Bool => {
                    let at = parts.len();
                    let covers = self.shape().get(at..at + t.rank());
                    if covers != Some(t.shape()) {
                        bail!(Error::shape(
                            op,
                            self.shape(),
                            t.shape(),
                            format!("a bool mask must have the shape of the dimensions it indexes, from dimension {at}")
                        ));
                    }
                    let nz = t.nonzero()?;
                    for j in 0..t.rank() {
                        parts.push(nz.narrow(1, j, 1)?.reshape(&[-1])?);
                    }
                }
                DType::I64 => parts.push(t.alias()),
                DType::I32 => parts.push(t.to_dtype(DType::I64)?),
                other => bail!(Error::dtype(op, "int64, int32 or bool indices", other)),
            }
        }
        let k = parts.len();
        if k > self.rank() {
            bail!(Error::arg(
                op,
                format!(
                    "too many indices ({k}) for a tensor of shape {:?}",
                    self.shape()
                )
            ));
        }
        let mut batch: Vec<usize> = Vec::new();
        for p in &parts {
            batch = broadcast_shapes(op, &batch, p.shape())?.to_vec();
        }
        let b: Vec<isize> = batch.iter().map(|&s| s as isize).collect();
        let dev = self.device();
        let mut linear = Tensor::zeros(&batch, DType::I64, dev)?;
        for (d, p) in parts.iter().enumerate() {
            let size = self.shape()[d];
            let bad = p
                .lt_scalar(-(size as f64))?
                .logical_or(&p.ge_scalar(size as f64)?)?;
            let wrong = p.masked_select(&bad)?;
            if wrong.numel() > 0 {
                let v = wrong.narrow(0, 0, 1)?.item::<i64>()?;
                bail!(Error::arg(
                    op,
                    format!(
                        "index {v} is out of bounds for dimension {d} with size {size} (shape {:?})",
                        self.shape()
                    )
                ));
            }
            let wrapped = p.add(
                &p.lt_scalar(0.0)?
                    .to_dtype(DType::I64)?
                    .mul_scalar(size as f64)?,
            )?;
            linear = linear.mul_scalar(size as f64)?.add(&wrapped.expand(&b)?)?;
        }
        let linear = linear.reshape(&[-1])?;
        Ok(Target {
            linear: if nothing {
                linear.narrow(0, 0, 0)?
            } else {
                linear
            },
            k,
            batch: if nothing { vec![0] } else { batch },
        })
    }

    /// `values` broadcast to `B` followed by `self`'s dimensions after the
    /// `k` indexed ones, as `[numel(B), rest...]`.
    fn index_put_values(&self, op: &'static str, t: &Target, values: &Tensor) -> Result<Tensor> {
        self.same_device(op, values)?;
        if values.dtype() != self.dtype() {
            bail!(Error::dtype(
                op,
                format!("{} (self's dtype) for the values", self.dtype()),
                values.dtype()
            ));
        }
        let rest = &self.shape()[t.k..];
        let mut full: Vec<usize> = t.batch.clone();
        full.extend_from_slice(rest);
        let want = broadcast_shapes(op, &full, values.shape())?;
        if want.as_slice() != full.as_slice() {
            bail!(Error::shape(
                op,
                &full,
                values.shape(),
                "the values must broadcast to the indexed shape"
            ));
        }
        let full_i: Vec<isize> = full.iter().map(|&s| s as isize).collect();
        let mut flat = vec![crate::layout::numel(&t.batch) as isize];
        flat.extend(rest.iter().map(|&s| s as isize));
        values.expand(&full_i)?.reshape(&flat)
    }

    /// `self`'s first `k` dimensions merged into one (`[P, rest...]`), as a
    /// view when its strides allow it (size-1 dimensions have no stride
    /// that matters), else `None`.
    fn leading_merged(&self, k: usize) -> Result<Option<Tensor>> {
        let (shape, strides) = (self.shape(), self.strides());
        let p = crate::layout::numel(&shape[..k]);
        // Walk the non-trivial leading dimensions from the inside out: each
        // must step over exactly the block of the ones inside it.
        let mut lead: Option<usize> = None;
        let mut block = 1usize;
        for d in (0..k).rev() {
            if shape[d] == 1 {
                continue;
            }
            match lead {
                None => lead = Some(strides[d]),
                Some(l) if strides[d] != l * block => return Ok(None),
                Some(_) => {}
            }
            block *= shape[d];
        }
        if p == 0 {
            lead = Some(0);
        }
        let lead = lead.unwrap_or(0);
        let mut s = vec![p];
        s.extend_from_slice(&shape[k..]);
        let mut st = vec![lead];
        st.extend_from_slice(&strides[k..]);
        Ok(Some(self.as_strided(&s, &st, self.storage_offset())?))
    }

    /// PyTorch's `x.index_put_(indices, values, accumulate)`:
    /// `x[indices] = values` (or `+=`, where repeated indices add up). See
    /// the module docs for the indices. `values` has `self`'s dtype and
    /// broadcasts to the indexed shape. Nothing is written unless every
    /// index is in range.
    ///
    /// ```
    /// # use tensorscope::{Tensor, DType, Device};
    /// let mut x = Tensor::zeros(&[3, 4], DType::F32, Device::Cpu)?;
    /// let rows = Tensor::from_slice(&[0i64, 2, -1], &[3], Device::Cpu)?;
    /// let cols = Tensor::from_slice(&[1i64, 3, 3], &[3], Device::Cpu)?;
    /// let five = Tensor::full(&[], 5.0, DType::F32, Device::Cpu)?;
    /// x.index_put_(&[&rows, &cols], &five, true)?; // (2, 3) twice: 10
    /// assert_eq!(x.to_vec::<f32>()?, vec![0., 5., 0., 0., 0., 0., 0., 0., 0., 0., 0., 10.]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn index_put_(
        &mut self,
        indices: &[&Tensor],
        values: &Tensor,
        accumulate: bool,
    ) -> Result<&mut Tensor> {
        const OP: &str = "index_put_";
        let _op = op_context(OP);
        self.check_writable(OP)?;
        let t = no_grad(|| self.index_put_target(OP, indices)).map_err(|e| e.reported_as(OP))?;
        let vals = self.index_put_values(OP, &t, values)?;
        if t.linear.numel() == 0 {
            return Ok(self);
        }
        let write = |dst: &mut Tensor| -> Result<()> {
            if accumulate {
                dst.index_add_(0, &t.linear, &vals)?;
            } else {
                dst.index_copy_(0, &t.linear, &vals)?;
            }
            Ok(())
        };
        match self.leading_merged(t.k)? {
            Some(mut view) => write(&mut view),
            None => {
                let c = self.deep_clone()?;
                let Some(mut view) = c.leading_merged(t.k)? else {
                    bail!(Error::arg(
                        OP,
                        "internal: a fresh copy's dimensions do not merge"
                    ));
                };
                write(&mut view)?;
                drop(view);
                self.copy_(&c)?;
                Ok(())
            }
        }
        .map_err(|e| e.reported_as(OP))?;
        Ok(self)
    }

    /// Out-of-place [`index_put_`](Tensor::index_put_): a copy of `self`
    /// with the values written (or added). Differentiable in `self` (no
    /// gradient where overwritten) and in `values`.
    pub fn index_put(
        &self,
        indices: &[&Tensor],
        values: &Tensor,
        accumulate: bool,
    ) -> Result<Tensor> {
        const OP: &str = "index_put";
        if let Some(c) =
            crate::autocast::cast(&crate::autocast::INDEX_PUT, &[Some(self), Some(values)])?
        {
            return c.get(0).index_put(indices, c.get(1), accumulate);
        }
        let _op = op_context(OP);
        let t = no_grad(|| self.index_put_target(OP, indices)).map_err(|e| e.reported_as(OP))?;
        let run = || -> Result<Tensor> {
            let vals = self.index_put_values(OP, &t, values)?;
            let shape: Vec<isize> = self.shape().iter().map(|&s| s as isize).collect();
            let p = crate::layout::numel(&self.shape()[..t.k]);
            let mut flat = vec![p as isize];
            flat.extend(shape[t.k..].iter().copied());
            let x = self.reshape(&flat)?;
            let y = if accumulate {
                x.index_add(0, &t.linear, &vals)?
            } else {
                x.index_copy(0, &t.linear, &vals)?
            };
            y.reshape(&shape)
        };
        run().map_err(|e| e.reported_as(OP))
    }
}
