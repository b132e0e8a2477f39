//! Dispatch of the counter-based (Philox 4x32-10) random kernels, which
//! generate on the device: uniform and normal fills. Only CUDA has them; the
//! CPU draws on the host from the generator's own stream (`src/creation.rs`).
//!
//! Every operand must be dense (contiguous); the callers allocate or check
//! that. Each fill is a function of `(seed, offset)` and the element index,
//! and returns the Philox counters it used, by which the caller's generator
//! advances its offset.

use super::{cuda, lock, Operand};
use crate::error::{Error, Result};
use crate::Device;

/// A distribution a device fill draws from.
#[derive(Copy, Clone, Debug)]
pub(crate) enum Dist {
    /// Uniform in `[low, high)`.
    Uniform { low: f64, high: f64 },
    /// Normal with `mean` and `std`.
    Normal { mean: f64, std: f64 },
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
        (Device::Cuda(_), Dist::Uniform { low, high }) => {
            cuda::rand_uniform(dst, low, high, seed, offset)
        }
        (Device::Cuda(_), Dist::Normal { mean, std }) => {
            cuda::rand_normal(dst, mean, std, seed, offset)
        }
    }
}
