//! Matrix multiplication with `torch.matmul`'s semantics.
//!
//! | operands | result |
//! |---|---|
//! | `[k] x [k]` | rank 0 (dot product) |
//! | `[m, k] x [k, n]` | `[m, n]` |
//! | `[k] x [.., k, n]` | `[.., n]` (a 1 is prepended to the first, then removed) |
//! | `[.., m, k] x [k]` | `[.., m]` (a 1 is appended to the second, then removed) |
//! | `[.., m, k] x [.., k, n]` | `[broadcast(..), m, n]` (batch dims broadcast) |
//!
//! Both operands must have one dtype (matmul does not promote, as in PyTorch)
//! and live on one device. Any strides are read in place: a transposed or
//! expanded operand is not copied first.

use crate::backend::{self, Operand};
use crate::dtype::DType;
use crate::error::{bail, Error, Result};
use crate::layout::{broadcast_shapes, Layout};
use crate::tensor::Tensor;

/// What `a @ b` computes: the result's shape, and rank >= 2 layouts of the
/// operands broadcast to `batch + [m, k]` and `batch + [k, n]`.
struct Plan {
    out_shape: Vec<usize>,
    a: Layout,
    b: Layout,
    /// Whether a dim was prepended to `a` / appended to `b`.
    a_vec: bool,
    b_vec: bool,
    batch_rank: usize,
}

impl Plan {
    fn new(a: &Tensor, b: &Tensor) -> Result<Plan> {
        let op = "matmul";
        if a.rank() == 0 || b.rank() == 0 {
            bail!(Error::shape(
                op,
                a.shape(),
                b.shape(),
                "both arguments to matmul need at least 1 dimension"
            ));
        }
        a.same_device(op, b)?;
        if a.dtype() != b.dtype() {
            bail!(Error::dtype(
                op,
                format!(
                    "{} like the first operand (matmul does not promote dtypes)",
                    a.dtype()
                ),
                b.dtype()
            ));
        }
        if a.dtype() == DType::Bool {
            bail!(Error::dtype(op, "a numeric dtype", DType::Bool));
        }
        let (a_vec, b_vec) = (a.rank() == 1, b.rank() == 1);
        let la = if a_vec {
            a.layout().unsqueeze(0)?
        } else {
            a.layout().clone()
        };
        let lb = if b_vec {
            b.layout().unsqueeze(1)?
        } else {
            b.layout().clone()
        };
        let (ra, rb) = (la.rank(), lb.rank());
        let (m, ka) = (la.shape()[ra - 2], la.shape()[ra - 1]);
        let (kb, n) = (lb.shape()[rb - 2], lb.shape()[rb - 1]);
        if ka != kb {
            bail!(Error::shape(
                op,
                a.shape(),
                b.shape(),
                format!("inner dimensions differ: {ka} (last of the first) vs {kb} (first of the last two of the second)")
            ));
        }
        let batch = broadcast_shapes(op, &la.shape()[..ra - 2], &lb.shape()[..rb - 2])?;
        let mut full_a = batch.to_vec();
        full_a.extend([m, ka]);
        let mut full_b = batch.to_vec();
        full_b.extend([kb, n]);
        let mut out_shape = batch.to_vec();
        if !a_vec {
            out_shape.push(m);
        }
        if !b_vec {
            out_shape.push(n);
        }
        Ok(Plan {
            out_shape,
            a: la.broadcast_to(&full_a)?,
            b: lb.broadcast_to(&full_b)?,
            a_vec,
            b_vec,
            batch_rank: batch.len(),
        })
    }

    /// Runs the product into `out` (of shape `out_shape`).
    fn run(self, a: &Tensor, b: &Tensor, out: &Tensor) -> Result<()> {
        let mut lo = out.layout().clone();
        if self.b_vec {
            lo = lo.unsqueeze(lo.rank() as isize)?;
        }
        if self.a_vec {
            lo = lo.unsqueeze(self.batch_rank as isize)?;
        }
        backend::matmul(
            &Operand::with(a, self.a),
            &Operand::with(b, self.b),
            &Operand::with(out, lo),
        )
    }
}

impl Tensor {
    /// Matrix product with `torch.matmul`'s rules (see the table in the
    /// module docs): dot products, matrix-vector, matrix-matrix and batched
    /// products with broadcast batch dimensions. Both operands must share a
    /// dtype (no promotion) and a device.
    ///
    /// f32, f64 and f16 run on the `gemm` crate and read transposed or
    /// strided operands in place; bf16 computes in f32; integers wrap.
    ///
    /// ```
    /// # use tensorscope::{Tensor, DType, Device};
    /// let a = Tensor::arange(0.0, 6.0, 1.0, DType::F32, Device::Cpu)?.view(&[2, 3])?;
    /// let c = a.matmul(&a.t()?)?;                 // [2, 3] x [3, 2]
    /// assert_eq!(c.to_vec::<f32>()?, vec![5.0, 14.0, 14.0, 50.0]);
    /// let v = Tensor::ones(&[3], DType::F32, Device::Cpu)?;
    /// assert_eq!(a.matmul(&v)?.to_vec::<f32>()?, vec![3.0, 12.0]); // [2, 3] x [3] -> [2]
    /// assert!(a.matmul(&a).is_err());              // inner dimensions 3 vs 2
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn matmul(&self, other: &Tensor) -> Result<Tensor> {
        if let Some(c) =
            crate::autocast::cast(&crate::autocast::MATMUL, &[Some(self), Some(other)])?
        {
            return c.get(0).matmul(c.get(1));
        }
        let _op = crate::alloc::history::op_context_with("matmul", || {
            vec![self.shape().to_vec(), other.shape().to_vec()]
        });
        let plan = Plan::new(self, other)?;
        let out = Tensor::alloc(&plan.out_shape, self.dtype(), self.device())?;
        plan.run(self, other, &out)?;
        crate::autograd::formulas_matmul::matmul(self, other, out)
    }

    /// `self @ weight^T + bias`, PyTorch's `torch.nn.functional.linear`:
    /// `self: [.., in]`, `weight: [out, in]`, `bias: [out]`, result
    /// `[.., out]`. One dtype (no promotion) and one device for all.
    ///
    /// On the CPU, f32/f64 products are computed in the layout gemm runs
    /// fastest for a row-major `[out, in]` weight and written out by one pass
    /// that also adds the bias; other dtypes get the bias broadcast into the
    /// output and the product accumulated onto it by the same gemm call.
    /// Either way there is no separate bias pass, and autograd records one
    /// node whose weight gradient comes out dense in the weight's layout.
    ///
    /// ```
    /// # use tensorscope::{Tensor, DType, Device};
    /// let x = Tensor::ones(&[2, 3], DType::F32, Device::Cpu)?;
    /// let w = Tensor::arange(0.0, 6.0, 1.0, DType::F32, Device::Cpu)?.view(&[2, 3])?;
    /// let b = Tensor::from_slice(&[10.0f32, 20.0], &[2], Device::Cpu)?;
    /// let y = x.linear(&w, Some(&b))?; // [2, 3] x [3, 2] + [2]
    /// assert_eq!(y.to_vec::<f32>()?, vec![13.0, 32.0, 13.0, 32.0]);
    /// assert!(x.linear(&w.t()?, None).is_err()); // in_features 3 vs 2
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn linear(&self, weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        if let Some(c) =
            crate::autocast::cast(&crate::autocast::LINEAR, &[Some(self), Some(weight), bias])?
        {
            return c.get(0).linear(c.get(1), c.opt(2));
        }
        let op = "linear";
        let r = self.rank();
        if weight.rank() != 2 || r == 0 || self.shape()[r - 1] != weight.shape()[1] {
            bail!(Error::shape(
                op,
                self.shape(),
                weight.shape(),
                "weight must be [out_features, in_features] with in_features the input's last dimension"
            ));
        }
        let (n, k) = (weight.shape()[0], weight.shape()[1]);
        let same_dtype = |t: &Tensor, what: &str| -> Result<()> {
            if t.dtype() != self.dtype() {
                bail!(Error::dtype(
                    op,
                    format!(
                        "{} for the {what}, like the input (linear does not promote dtypes)",
                        self.dtype()
                    ),
                    t.dtype()
                ));
            }
            Ok(())
        };
        self.same_device(op, weight)?;
        same_dtype(weight, "weight")?;
        if let Some(b) = bias {
            if b.shape() != [n] {
                bail!(Error::shape(
                    op,
                    b.shape(),
                    weight.shape(),
                    format!("the bias must have shape [{n}] (out_features of the weight)")
                ));
            }
            self.same_device(op, b)?;
            same_dtype(b, "bias")?;
        }
        if self.dtype() == DType::Bool {
            bail!(Error::dtype(op, "a numeric dtype", DType::Bool));
        }
        if r != 2 {
            // [.., k] -> [m, k] and back (a view when the input allows it).
            let lead = &self.shape()[..r - 1];
            let m = crate::layout::numel(lead);
            let y = self
                .reshape(&[m as isize, k as isize])?
                .linear(weight, bias)?;
            let mut shape: Vec<isize> = lead.iter().map(|&d| d as isize).collect();
            shape.push(n as isize);
            return y.reshape(&shape);
        }
        let m = self.shape()[0];
        let out = Tensor::alloc(&[m, n], self.dtype(), self.device())?;
        let wt = Operand::with(weight, weight.layout().transpose(0, 1)?);
        let bb = match bias {
            Some(b) => Some(Operand::with(b, b.layout().broadcast_to(&[m, n])?)),
            None => None,
        };
        backend::linear(&Operand::of(self), &wt, bb.as_ref(), &Operand::of(&out))?;
        crate::autograd::formulas_matmul::linear(self, weight, bias, out)
    }

    /// [`matmul`](Tensor::matmul) written into `out`, which must have exactly
    /// the result's shape and dtype, live on the operands' device, not be an
    /// expanded view, and not share storage with either operand. Allocates no
    /// tensor memory; `out` may be non-contiguous (e.g. a transposed view).
    ///
    /// ```
    /// # use tensorscope::{Tensor, DType, Device};
    /// let a = Tensor::ones(&[4, 8], DType::F32, Device::Cpu)?;
    /// let b = Tensor::ones(&[8, 2], DType::F32, Device::Cpu)?;
    /// let mut out = Tensor::zeros(&[4, 2], DType::F32, Device::Cpu)?;
    /// a.matmul_out(&b, &mut out)?;
    /// assert_eq!(out.to_vec::<f32>()?, vec![8.0; 8]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn matmul_out(&self, other: &Tensor, out: &mut Tensor) -> Result<()> {
        let op = "matmul";
        let plan = Plan::new(self, other)?;
        self.same_device(op, out)?;
        if out.shape() != plan.out_shape.as_slice() {
            bail!(Error::shape(
                op,
                out.shape(),
                &plan.out_shape,
                format!(
                    "the output must have the result's shape (operands {:?} and {:?})",
                    self.shape(),
                    other.shape()
                )
            ));
        }
        if out.dtype() != self.dtype() {
            bail!(Error::dtype(
                op,
                format!("{} for the output, like the operands", self.dtype()),
                out.dtype()
            ));
        }
        out.check_writable(op)?;
        crate::autograd::check_unrecorded_inputs(op, &[self, other])?;
        if out.shares_storage(self) || out.shares_storage(other) {
            bail!(Error::InvalidInPlace {
                op,
                msg: format!(
                    "the output (shape {:?}) shares storage with an operand; matmul cannot write over its own input",
                    out.shape()
                ),
            });
        }
        plan.run(self, other, out)?;
        out.storage().bump_version();
        Ok(())
    }
}
