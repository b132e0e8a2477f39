//! PyTorch-style memory statistics, per device (`torch.cuda.memory_*`).
//!
//! Every device has one caching allocator (see `src/alloc/`), owned by its
//! backend; the functions here find it through the backend and take the
//! device:
//!
//! ```
//! use tensorscope::{memory, Device, Tensor};
//! let before = memory::memory_allocated(Device::Cpu);
//! let t = Tensor::zeros(&[1024], tensorscope::DType::F32, Device::Cpu)?;
//! assert!(memory::memory_allocated(Device::Cpu) >= before + 4096);
//! drop(t);
//! # Ok::<(), tensorscope::Error>(())
//! ```
//!
//! The numbers are exact: allocated bytes are the rounded block sizes of live
//! storages, so once every tensor is dropped `memory_allocated` is back where it
//! started. (Other threads allocate too: measure in one thread at a time.)

pub use crate::alloc::{
    round_size, segment_size, MemoryStats, Pool, Stat, StatTriple, MIN_BLOCK, SMALL_SIZE,
};
pub use crate::alloc::{Action, BlockSnapshot, BlockState, SegmentSnapshot, TraceEntry};
pub use crate::bytes::fmt_bytes;
pub use measure::{measure, Measurement};
pub use snapshot::{record_history, record_history_with, snapshot, Snapshot};

mod html;
mod measure;
mod snapshot;

/// A label for the memory history: every event the calling thread causes
/// while the returned guard lives is recorded with it (the innermost label
/// wins), as [`TraceEntry::scope`]; `save_pickle` shows it in each event's
/// frame. Costs a string copy; labels nothing while it is dropped.
///
/// ```
/// use tensorscope::{memory, DType, Device, Tensor};
/// memory::record_history(Device::Cpu, true, 1000)?;
/// {
///     let _eval = memory::scope("eval");
///     let _x = Tensor::ones(&[64], DType::F32, Device::Cpu)?;
/// }
/// let snap = memory::snapshot(Device::Cpu)?;
/// assert!(snap.trace.iter().any(|e| e.scope.as_deref() == Some("eval")));
/// memory::record_history(Device::Cpu, false, 0)?;
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub fn scope(label: &str) -> crate::alloc::ContextGuard {
    crate::alloc::history::scope_context(label)
}

use crate::alloc::DeviceAllocator;
use crate::backend::allocator;
use crate::device::Device;
use crate::error::{Error, Result};

fn with_alloc<R: Default>(device: Device, f: impl FnOnce(&'static dyn DeviceAllocator) -> R) -> R {
    allocator(device).map(f).unwrap_or_default()
}

/// Bytes held by live tensors on `device` (rounded block sizes). 0 for an unusable device.
pub fn memory_allocated(device: Device) -> usize {
    with_alloc(device, |a| a.stats().allocated_bytes.all.current as usize)
}

/// Bytes of the CPU tensors that live over file mappings now: the
/// zero-copy tensors of a [`Checkpoint`](crate::nn::Checkpoint), which the
/// caching allocator does not hold and [`memory_allocated`] does not count.
/// The pages are read from the file as they are touched, and are the page
/// cache's until a tensor writes them.
pub fn mapped_memory() -> usize {
    crate::backend::cpu::mapped::live_bytes()
}

/// Peak of [`memory_allocated`] since start or the last [`reset_peak_memory_stats`].
pub fn max_memory_allocated(device: Device) -> usize {
    with_alloc(device, |a| a.stats().allocated_bytes.all.peak as usize)
}

/// Bytes the caching allocator holds from the system on `device` (live plus cached).
pub fn memory_reserved(device: Device) -> usize {
    with_alloc(device, |a| a.stats().reserved_bytes.all.current as usize)
}

/// Peak of [`memory_reserved`].
pub fn max_memory_reserved(device: Device) -> usize {
    with_alloc(device, |a| a.stats().reserved_bytes.all.peak as usize)
}

/// Sets every peak to its current value.
pub fn reset_peak_memory_stats(device: Device) {
    with_alloc(device, |a| a.reset_peak())
}

/// Zeroes the running totals (`allocated`/`freed` of each stat, retries, OOMs,
/// system allocations), as `torch.cuda.reset_accumulated_memory_stats`.
pub fn reset_accumulated_memory_stats(device: Device) {
    with_alloc(device, |a| a.reset_accumulated())
}

/// Every statistic of `device`'s allocator.
pub fn memory_stats(device: Device) -> MemoryStats {
    with_alloc(device, |a| a.stats())
}

/// Returns every cached segment that holds no live block to the system.
pub fn empty_cache(device: Device) {
    with_alloc(device, |a| a.empty_cache())
}

/// A cap on a device's reserved memory.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum MemoryLimit {
    /// No cap.
    Unlimited,
    /// At most this many bytes.
    Bytes(usize),
    /// At most this fraction (0, 1] of the device's total memory.
    Fraction(f64),
}

/// Caps the bytes `device`'s allocator may reserve. An allocation that would go
/// past the cap first releases cached segments and retries, then returns
/// [`Error::OutOfMemory`]. Cached memory above a new,
/// lower cap is released at once.
pub fn set_memory_limit(device: Device, limit: MemoryLimit) -> Result<()> {
    let a = allocator(device)?;
    let bytes = match limit {
        MemoryLimit::Unlimited => None,
        MemoryLimit::Bytes(b) => Some(b),
        MemoryLimit::Fraction(f) => {
            if !(f > 0.0 && f <= 1.0) {
                return Err(Error::arg(
                    "set_memory_limit",
                    format!("fraction must be in (0, 1], got {f}"),
                ));
            }
            let total = a.mem_info().map(|m| m.1).ok_or_else(|| {
                Error::arg(
                    "set_memory_limit",
                    format!("the total memory of {device} is unknown"),
                )
            })?;
            Some((total as f64 * f) as usize)
        }
    };
    a.set_limit(bytes);
    Ok(())
}

/// PyTorch's name for a fractional [`set_memory_limit`].
pub fn set_per_process_memory_fraction(device: Device, fraction: f64) -> Result<()> {
    set_memory_limit(device, MemoryLimit::Fraction(fraction))
}

/// A boxed table in the style of `torch.cuda.memory_summary()`.
pub fn memory_summary(device: Device) -> String {
    crate::alloc::summary(device, &memory_stats(device))
}

/// Allocates `bytes` on `device` and frees them at once through the caching
/// allocator alone (no storage, no tensor): the "raw allocator path" that
/// `benches/cpu.rs` times. Not part of the API.
#[doc(hidden)]
pub fn bench_alloc_free(device: Device, bytes: usize) -> Result<()> {
    let a = allocator(device)?;
    let b = a.allocate_current(bytes)?;
    a.free(b);
    Ok(())
}
