//! Dispatch of the softmax family, forward and backward: `backend::cpu::softmax`
//! and `backend::cuda::softmax` (`kernels/softmax.cu`). Each function locks
//! the storages it touches (shared for inputs, exclusive for outputs).

use super::{cpu, cuda, device_of, Operand};
use crate::device::Device;
use crate::error::Result;
use crate::storage::lock;

/// `dst = softmax(src)` (or `log_softmax` when `log`) along `dim`; same shape and dtype.
pub(crate) fn softmax(src: &Operand, dim: usize, dst: &Operand, log: bool) -> Result<()> {
    let op = if log { "log_softmax" } else { "softmax" };
    let d = device_of(op, &[src, dst])?;
    let _l = lock(&[src.storage], &[dst.storage]);
    match d {
        Device::Cpu => {
            cpu::softmax::softmax(src, dim, dst, log);
            Ok(())
        }
        Device::Cuda(_) => cuda::softmax(src, dim, dst, log),
    }
}

/// The backward of softmax (log_softmax when `log`) along `dim`: `dx` from
/// the forward's output `y` and the gradient `g` (one dtype and shape).
pub(crate) fn softmax_backward(
    g: &Operand,
    y: &Operand,
    dim: usize,
    dx: &Operand,
    log: bool,
) -> Result<()> {
    let op = if log {
        "log_softmax_backward"
    } else {
        "softmax_backward"
    };
    let d = device_of(op, &[g, y, dx])?;
    let _l = lock(&[g.storage, y.storage], &[dx.storage]);
    match d {
        Device::Cpu => {
            cpu::softmax::softmax_backward(g, y, dim, dx, log);
            Ok(())
        }
        Device::Cuda(_) => cuda::softmax_backward(g, y, dim, dx, log),
    }
}
