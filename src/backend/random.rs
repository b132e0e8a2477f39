//! Dispatch of the counter-based (Philox 4x32-10) random kernels, which
//! generate on the device: uniform, normal and Bernoulli fills, and dropout with its
//! saved mask. Only CUDA has them; the CPU draws on the host from the
//! generator's own stream (`src/creation.rs`, `src/nn/dropout.rs`).
//!
//! Every operand must be dense (contiguous); the callers allocate or check
//! that. Each fill is a function of `(seed, offset)` and the element index,
//! and returns the Philox counters it used, by which the caller's generator
//! advances its offset.

use super::{cuda, device_of, lock, Operand};
use crate::device::Device;
use crate::error::{Error, Result};

/// A distribution a device fill draws from.
#[derive(Copy, Clone, Debug)]
pub(crate) enum Dist {
    /// Uniform in `[low, high)`.
    Uniform { low: f64, high: f64 },
    /// Normal with `mean` and `std`.
    Normal { mean: f64, std: f64 },
    /// 1 with probability `p`, else 0 (any dtype).
    Bernoulli { p: f64 },
}

/// Writes `next()` into every element of the CPU tensor `dst`, in
/// row-major order of its shape whatever its strides (so the host
/// generator's stream gives the same values to any layout), converted to
/// its dtype as a stored number. In place: allocates nothing.
pub(crate) fn host_fill(op: &'static str, dst: &Operand, next: impl FnMut() -> f64) -> Result<()> {
    let _l = lock(&[], &[dst.storage]);
    match dst.storage.device() {
        Device::Cpu => {
            super::cpu::elementwise::fill_seq(dst, next);
            Ok(())
        }
        Device::Cuda(_) => Err(Error::arg(op, "host fills are for CPU tensors")),
    }
}

fn cpu_has_none(op: &'static str) -> Error {
    Error::arg(
        op,
        "the Philox kernels run on CUDA; the CPU draws on the host",
    )
}

/// Fills dense `dst` from `dist` at Philox `(seed, offset)`; returns the
/// counters used.
pub(crate) fn philox_fill(dst: &Operand, dist: Dist, seed: u64, offset: u64) -> Result<u64> {
    let _l = lock(&[], &[dst.storage]);
    match (dst.storage.device(), dist) {
        (Device::Cpu, Dist::Uniform { .. }) => Err(cpu_has_none("uniform_")),
        (Device::Cpu, Dist::Normal { .. }) => Err(cpu_has_none("normal_")),
        (Device::Cpu, Dist::Bernoulli { .. }) => Err(cpu_has_none("bernoulli_")),
        (Device::Cuda(_), Dist::Bernoulli { p }) => cuda::rand_bernoulli(dst, p, seed, offset),
        (Device::Cuda(_), Dist::Uniform { low, high }) => {
            cuda::rand_uniform(dst, low, high, seed, offset)
        }
        (Device::Cuda(_), Dist::Normal { mean, std }) => {
            cuda::rand_normal(dst, mean, std, seed, offset)
        }
    }
}

/// Dropout of dense `x` into `y` with drop probability `p` (kept elements
/// scaled by `1 / (1 - p)`), writing the keep mask (bool) into `mask`;
/// returns the counters used.
pub(crate) fn philox_dropout(
    x: &Operand,
    y: &Operand,
    mask: &Operand,
    p: f64,
    seed: u64,
    offset: u64,
) -> Result<u64> {
    let d = device_of("dropout", &[x, y, mask])?;
    let _l = lock(&[x.storage], &[y.storage, mask.storage]);
    match d {
        Device::Cpu => Err(cpu_has_none("dropout")),
        Device::Cuda(_) => cuda::dropout(x, y, mask, p, seed, offset),
    }
}

/// The backward pass of [`philox_dropout`]: `dx = mask ? dy / (1 - p) : 0`.
pub(crate) fn dropout_backward(dy: &Operand, mask: &Operand, dx: &Operand, p: f64) -> Result<()> {
    let d = device_of("dropout_backward", &[dy, mask, dx])?;
    let _l = lock(&[dy.storage, mask.storage], &[dx.storage]);
    match d {
        Device::Cpu => Err(cpu_has_none("dropout_backward")),
        Device::Cuda(_) => cuda::dropout_backward(dy, mask, dx, p),
    }
}
