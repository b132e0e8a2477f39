//! Per-device caching allocators and PyTorch-style memory statistics.
//!
//! Every device has one caching allocator ([`caching`]); the CPU's gets its
//! segments from the system allocator, a CUDA device's from the driver. The
//! public functions here mirror `torch.cuda.memory_*` and take the device:
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

pub(crate) mod caching;
mod cpu;
mod stats;

pub use caching::{round_size, segment_size, Block, MIN_BLOCK, SMALL_SIZE};
pub use stats::{MemoryStats, Pool, Stat, StatTriple};

use crate::error::Result;
use crate::Device;

/// A device's allocator, as the rest of the crate sees it.
pub(crate) trait DeviceAllocator: Send + Sync {
    fn allocate(&self, bytes: usize, stream: u64) -> Result<Block>;
    fn free(&self, block: Block);
    fn stats(&self) -> MemoryStats;
    fn empty_cache(&self);
    fn reset_peak(&self);
    fn reset_accumulated(&self);
    fn set_limit(&self, limit: Option<usize>);
    /// `(free, total)` bytes of the device, where known.
    fn mem_info(&self) -> Option<(usize, usize)>;
}

impl<S: caching::SegmentSource> DeviceAllocator for caching::CachingAllocator<S> {
    fn allocate(&self, bytes: usize, stream: u64) -> Result<Block> {
        caching::CachingAllocator::allocate(self, bytes, stream)
    }
    fn free(&self, block: Block) {
        caching::CachingAllocator::free(self, block)
    }
    fn stats(&self) -> MemoryStats {
        caching::CachingAllocator::stats(self)
    }
    fn empty_cache(&self) {
        caching::CachingAllocator::empty_cache(self)
    }
    fn reset_peak(&self) {
        caching::CachingAllocator::reset_peak(self)
    }
    fn reset_accumulated(&self) {
        caching::CachingAllocator::reset_accumulated(self)
    }
    fn set_limit(&self, limit: Option<usize>) {
        caching::CachingAllocator::set_limit(self, limit)
    }
    fn mem_info(&self) -> Option<(usize, usize)> {
        caching::CachingAllocator::mem_info(self)
    }
}

/// The allocator of `device`, or an error if the device is not usable.
pub(crate) fn allocator(device: Device) -> Result<&'static dyn DeviceAllocator> {
    match device {
        Device::Cpu => Ok(cpu::allocator()),
        Device::Cuda(i) => crate::backend::cuda::allocator(i),
    }
}

fn with_alloc<R: Default>(device: Device, f: impl FnOnce(&'static dyn DeviceAllocator) -> R) -> R {
    allocator(device).map(f).unwrap_or_default()
}

/// Bytes held by live tensors on `device` (rounded block sizes). 0 for an unusable device.
pub fn memory_allocated(device: Device) -> usize {
    with_alloc(device, |a| a.stats().allocated_bytes.all.current as usize)
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
/// [`Error::OutOfMemory`](crate::Error::OutOfMemory). Cached memory above a new,
/// lower cap is released at once.
pub fn set_memory_limit(device: Device, limit: MemoryLimit) -> Result<()> {
    let a = allocator(device)?;
    let bytes = match limit {
        MemoryLimit::Unlimited => None,
        MemoryLimit::Bytes(b) => Some(b),
        MemoryLimit::Fraction(f) => {
            if !(f > 0.0 && f <= 1.0) {
                return Err(crate::Error::arg(
                    "set_memory_limit",
                    format!("fraction must be in (0, 1], got {f}"),
                ));
            }
            let total = a.mem_info().map(|m| m.1).ok_or_else(|| {
                crate::Error::arg(
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
    stats::summary(device, &memory_stats(device))
}

/// Allocates `bytes` on `device` and frees them at once through the caching
/// allocator alone (no storage, no tensor): the "raw allocator path" that
/// `benches/cpu.rs` times. Not part of the API.
#[doc(hidden)]
pub fn bench_alloc_free(device: Device, bytes: usize) -> Result<()> {
    let a = allocator(device)?;
    let b = a.allocate(bytes, crate::backend::current_stream_id(device))?;
    a.free(b);
    Ok(())
}

/// Formats a byte count the way PyTorch's summary does (`B`, `KiB`, `MiB`, `GiB`).
pub fn fmt_bytes(b: usize) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < units.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.2} {}", units[u])
    }
}
