//! The other spellings of a matrix product, written with `matmul` and the
//! elementwise ops: `outer`, `dot`, `mm`, `bmm` and `addmm`.

use crate::alloc::history::op_context;
use crate::dtype::DType;
use crate::error::{bail, Error, Result};
use crate::tensor::Tensor;

fn rank_is(op: &'static str, t: &Tensor, rank: usize, what: &str) -> Result<()> {
    if t.rank() != rank {
        bail!(Error::arg(
            op,
            format!("{what} must have rank {rank}, got shape {:?}", t.shape())
        ));
    }
    Ok(())
}

impl Tensor {
    /// The outer product of two vectors: `[n] x [m] -> [n, m]`.
    pub fn outer(&self, other: &Tensor) -> Result<Tensor> {
        let _op = op_context("outer");
        rank_is("outer", self, 1, "the first vector")?;
        rank_is("outer", other, 1, "the second vector")?;
        self.unsqueeze(1)?.mul(&other.unsqueeze(0)?)
    }

    /// The dot product of two vectors of one length and dtype (a rank-0
    /// tensor).
    pub fn dot(&self, other: &Tensor) -> Result<Tensor> {
        if let Some(c) = crate::autocast::cast(&crate::autocast::DOT, &[Some(self), Some(other)])? {
            return c.get(0).dot(c.get(1));
        }
        let op = "dot";
        let _op = op_context(op);
        rank_is(op, self, 1, "the first vector")?;
        rank_is(op, other, 1, "the second vector")?;
        if self.shape() != other.shape()
            || self.dtype() != other.dtype()
            || self.dtype() == DType::Bool
        {
            bail!(Error::shape(
                op,
                self.shape(),
                other.shape(),
                format!(
                    "needs two vectors of one length and dtype ({} and {})",
                    self.dtype(),
                    other.dtype()
                )
            ));
        }
        // One product-sum (as PyTorch's): no rounding of each product, an
        // integer dot keeps its dtype, and half types sum in f32 (the f16
        // matmul path can overflow on a product: [300, 300] . [300, -300]).
        let dt = self.dtype();
        if matches!(dt, DType::F16 | DType::BF16) {
            return self
                .to_dtype(DType::F32)?
                .matmul(&other.to_dtype(DType::F32)?)?
                .to_dtype(dt);
        }
        self.matmul(other).map_err(|e| e.reported_as(op))
    }

    /// Matrix product of two matrices (rank 2 each, no broadcasting).
    pub fn mm(&self, other: &Tensor) -> Result<Tensor> {
        if let Some(c) = crate::autocast::cast(&crate::autocast::MM, &[Some(self), Some(other)])? {
            return c.get(0).mm(c.get(1));
        }
        let _op = op_context("mm");
        rank_is("mm", self, 2, "the first matrix")?;
        rank_is("mm", other, 2, "the second matrix")?;
        self.matmul(other).map_err(|e| e.reported_as("mm"))
    }

    /// Batched matrix product of `[b, n, k]` and `[b, k, m]` (no
    /// broadcasting).
    pub fn bmm(&self, other: &Tensor) -> Result<Tensor> {
        if let Some(c) = crate::autocast::cast(&crate::autocast::BMM, &[Some(self), Some(other)])? {
            return c.get(0).bmm(c.get(1));
        }
        let _op = op_context("bmm");
        rank_is("bmm", self, 3, "the first batch")?;
        rank_is("bmm", other, 3, "the second batch")?;
        if self.shape()[0] != other.shape()[0] {
            bail!(Error::shape(
                "bmm",
                self.shape(),
                other.shape(),
                "the batch sizes must be equal"
            ));
        }
        self.matmul(other).map_err(|e| e.reported_as("bmm"))
    }

    /// `beta self + alpha (m1 @ m2)` (`torch.addmm`): `self` of the
    /// product's dtype, broadcasting to its shape `[n, m]`; with `beta` 0
    /// `self` is not read (its NaNs do not propagate), as in PyTorch.
    pub fn addmm(&self, m1: &Tensor, m2: &Tensor, beta: f64, alpha: f64) -> Result<Tensor> {
        if let Some(c) =
            crate::autocast::cast(&crate::autocast::ADDMM, &[Some(self), Some(m1), Some(m2)])?
        {
            return c.get(0).addmm(c.get(1), c.get(2), beta, alpha);
        }
        let op = "addmm";
        let _op = op_context(op);
        let prod = m1.mm(m2).map_err(|e| e.reported_as(op))?;
        if self.dtype() != prod.dtype() {
            bail!(Error::arg(
                op,
                format!(
                    "self is {} but the matrices are {}",
                    self.dtype(),
                    prod.dtype()
                )
            ));
        }
        let fits = crate::layout::broadcast_shapes(op, self.shape(), prod.shape())
            .is_ok_and(|s| s.as_slice() == prod.shape());
        if !fits {
            bail!(Error::shape(
                op,
                self.shape(),
                prod.shape(),
                "self must broadcast to the product's shape"
            ));
        }
        let scaled = prod.mul_scalar(alpha)?;
        if beta == 0.0 {
            return Ok(scaled);
        }
        self.mul_scalar(beta)?
            .add(&scaled)
            .map_err(|e| e.reported_as(op))
    }
}
