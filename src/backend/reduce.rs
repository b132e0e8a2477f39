//! Dispatch of the reduction and matmul kernels.
//!
//! Each function locks the storages it touches (shared for inputs, exclusive
//! for outputs), then runs the device's kernel: `backend::cpu` or
//! `backend::cuda` (which answers [`Error::DeviceUnavailable`](crate::Error::DeviceUnavailable)
//! when built without the `cuda` feature or when the device is missing).

use super::{cpu, cuda, device_of, Operand};
use crate::device::Device;
use crate::error::Result;
use crate::storage::lock;

/// A reduction over a set of dimensions that yields one value per output element.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Reduction {
    /// Sum (floats in their own dtype, accumulated in f64; integers and bool into i64).
    Sum,
    /// Arithmetic mean (floats only).
    Mean,
    /// Product (floats in their own dtype; integers and bool into i64).
    Prod,
    /// Largest value (NaN propagates).
    Max,
    /// Smallest value (NaN propagates).
    Min,
    /// Variance with `correction` subtracted from the divisor (floats only).
    Var(usize),
    /// Standard deviation, the square root of [`Reduction::Var`].
    Std(usize),
    /// `log(sum(exp(x)))`, computed stably (floats only).
    LogSumExp,
}

impl Reduction {
    /// The op's name in error messages.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Reduction::Sum => "sum",
            Reduction::Mean => "mean",
            Reduction::Prod => "prod",
            Reduction::Max => "max",
            Reduction::Min => "min",
            Reduction::Var(_) => "var",
            Reduction::Std(_) => "std",
            Reduction::LogSumExp => "logsumexp",
        }
    }
}

/// Reduces `src` over `dims` (sorted, distinct, in range) into the contiguous
/// `dst`, whose elements are the kept dimensions in row-major order.
pub(crate) fn reduce(op: Reduction, src: &Operand, dims: &[usize], dst: &Operand) -> Result<()> {
    let d = device_of(op.name(), &[src, dst])?;
    let _l = lock(&[src.storage], &[dst.storage]);
    match d {
        Device::Cpu => {
            cpu::reduce::reduce(op, src, dims, dst);
            Ok(())
        }
        Device::Cuda(_) => cuda::reduce(op, src, dims, dst),
    }
}

/// Index (and optionally value) of the largest (`max`) or smallest element of
/// `src` along `dim`, into the contiguous `indices` (i64) and `values`.
pub(crate) fn arg_reduce(
    op: &'static str,
    max: bool,
    src: &Operand,
    dim: usize,
    values: Option<&Operand>,
    indices: &Operand,
) -> Result<()> {
    let d = match values {
        Some(v) => device_of(op, &[src, v, indices])?,
        None => device_of(op, &[src, indices])?,
    };
    let _l = match values {
        Some(v) => lock(&[src.storage], &[v.storage, indices.storage]),
        None => lock(&[src.storage], &[indices.storage]),
    };
    match d {
        Device::Cpu => {
            cpu::reduce::arg_reduce(max, src, dim, values, indices);
            Ok(())
        }
        Device::Cuda(_) => cuda::arg_reduce(op, max, src, dim, values, indices),
    }
}

/// Batched `dst = a @ b`: layouts of rank >= 2 with one batch shape
/// (`[.., m, k]`, `[.., k, n]`, `[.., m, n]`), one dtype.
pub(crate) fn matmul(a: &Operand, b: &Operand, dst: &Operand) -> Result<()> {
    let d = device_of("matmul", &[a, b, dst])?;
    let _l = lock(&[a.storage, b.storage], &[dst.storage]);
    match d {
        Device::Cpu => {
            cpu::matmul::matmul(a, b, dst);
            Ok(())
        }
        Device::Cuda(_) => cuda::matmul(a, b, dst),
    }
}
