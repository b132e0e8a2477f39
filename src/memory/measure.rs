//! [`measure`]: what a closure did to a device's memory.

use crate::backend::allocator;
use crate::device::Device;
use crate::error::Result;

/// What [`measure`] saw while its closure ran.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Measurement {
    /// The most bytes allocated at once during the closure (absolute, as
    /// `max_memory_allocated`, but over the closure only: the device's own
    /// peak statistic is left alone).
    pub peak: usize,
    /// The peak above the allocated bytes at the start: what the closure
    /// needed on top of what was already there.
    pub peak_delta: usize,
    /// Allocated bytes at the end minus at the start (what the closure
    /// left allocated; negative if it freed more than it kept).
    pub allocated_delta: i64,
    /// Reserved (cached) bytes at the end minus at the start.
    pub reserved_delta: i64,
    /// Allocations made (counted whether or not they were freed again).
    pub allocations: u64,
}

/// Runs `f` and reports what it did to `device`'s memory: its peak, the
/// allocated and reserved bytes it left, and how many allocations it
/// made. Measures nest, and several threads may measure at once; the
/// device's peak statistic (`max_memory_allocated`) is not reset.
/// Allocations by other threads during `f` count too (the allocator is the
/// device's): measure where nothing else allocates for exact figures. An `Err` for a
/// device that cannot be used; `f`'s own result is returned beside the
/// measurement.
///
/// ```
/// use tensorscope::{memory, DType, Device, Tensor};
/// let (y, m) = memory::measure(Device::Cpu, || {
///     let a = Tensor::ones(&[1024], DType::F32, Device::Cpu)?;   // 4 KiB
///     a.mul_scalar(2.0)                                         // 4 KiB more, kept
/// })?;
/// let y = y?;
/// assert_eq!((m.peak_delta, m.allocated_delta, m.allocations), (8192, 4096, 2));
/// # drop(y);
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub fn measure<R>(device: Device, f: impl FnOnce() -> R) -> Result<(R, Measurement)> {
    let a = allocator(device).map_err(|e| e.reported_as("memory::measure"))?;
    let before = a.stats();
    let id = a.open_window();
    // The window closes even if `f` panics.
    let guard = scopeguard::guard((), |()| {
        a.close_window(id);
    });
    let r = f();
    scopeguard::ScopeGuard::into_inner(guard);
    let (peak, allocations) = a.close_window(id);
    let after = a.stats();
    let start = before.allocated_bytes.all.current;
    Ok((
        r,
        Measurement {
            peak: peak.max(0) as usize,
            peak_delta: (peak - start).max(0) as usize,
            allocated_delta: after.allocated_bytes.all.current - start,
            reserved_delta: after.reserved_bytes.all.current - before.reserved_bytes.all.current,
            allocations,
        },
    ))
}
