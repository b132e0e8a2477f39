//! The pinned (page-locked) host memory caching allocator.
//!
//! Host↔device copies are staged through pinned buffers: the DMA engine can
//! only read and write page-locked memory, and a copy from a pinned buffer
//! returns to the host before it completes. As in PyTorch's
//! `CachingHostAllocator`:
//! * sizes round up to a power of two (at least 4 KiB), one free list per
//!   size, blocks are never split;
//! * a block is freed together with an event recorded on the stream that
//!   last used it, and is handed out again only once that event completed;
//! * memory comes from `cuMemHostAlloc(CU_MEMHOSTALLOC_PORTABLE)` (usable by
//!   every device's context; not write-combined, so host reads are fast) and
//!   goes back only through [`empty_pinned_cache`].

use crate::device::Device;
use crate::error::{Error, Result};
use cudarc::driver::{result, sys, CudaContext, CudaEvent, DriverError};
use std::sync::{Arc, Mutex, MutexGuard};

/// Smallest pinned block.
const MIN_PINNED: usize = 4096;
const CLASSES: usize = 64;

/// Caps the page-locked host memory the staging allocator may hold
/// (`None`: no cap, the default). Cached blocks above a new cap are released
/// at the next allocation that would pass it. Copies between the host and a
/// device that cannot get a staging buffer under the cap still work: with one
/// buffer they stage chunk by chunk, with none they copy from (or into) the
/// caller's pageable memory and wait for the copy, as PyTorch does for
/// pageable memory.
pub fn set_pinned_memory_limit(limit: Option<usize>) {
    with_inner(|i| i.limit = limit);
}

/// Statistics of the pinned-host allocator (shared by every device).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PinnedMemoryStats {
    /// Bytes in blocks handed out and not yet freed (rounded sizes).
    pub allocated_bytes: usize,
    /// Bytes held from the driver (handed out plus cached).
    pub reserved_bytes: usize,
    /// Peak of `reserved_bytes`.
    pub peak_reserved_bytes: usize,
    /// `cuMemHostAlloc` calls.
    pub num_host_alloc: u64,
    /// `cuMemFreeHost` calls.
    pub num_host_free: u64,
}

struct Cached {
    addr: usize,
    size: usize,
    event: Option<CudaEvent>,
}

struct Inner {
    free: Vec<Vec<Cached>>,
    stats: PinnedMemoryStats,
    /// A context to make current for host allocations and frees.
    ctx: Option<Arc<CudaContext>>,
    /// Cap on `stats.reserved_bytes` ([`set_pinned_memory_limit`]).
    limit: Option<usize>,
    /// Events after the asynchronous copies from or into pinned *tensors*
    /// ([`record_tensor_use`]), by block address: the block goes back to
    /// the cache guarded by them.
    uses: std::collections::HashMap<usize, Vec<CudaEvent>>,
}

static POOL: Mutex<Option<Inner>> = Mutex::new(None);

fn pool() -> MutexGuard<'static, Option<Inner>> {
    POOL.lock().unwrap_or_else(|e| e.into_inner())
}

fn with_inner<R>(f: impl FnOnce(&mut Inner) -> R) -> R {
    let mut g = pool();
    let inner = g.get_or_insert_with(|| Inner {
        free: (0..CLASSES).map(|_| Vec::new()).collect(),
        stats: PinnedMemoryStats::default(),
        ctx: None,
        limit: None,
        uses: std::collections::HashMap::new(),
    });
    f(inner)
}

/// A pinned host block; give it back with [`free`].
pub(crate) struct PinnedBlock {
    pub(crate) addr: usize,
    pub(crate) size: usize,
}

impl PinnedBlock {
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.addr as *mut u8
    }
}

/// The size class of a request: the power of two it rounds up to.
pub(crate) fn size_class(bytes: usize) -> (usize, usize) {
    let size = bytes.max(MIN_PINNED).next_power_of_two();
    (size, size.trailing_zeros() as usize)
}

/// A pinned block of at least `bytes`, from the cache when a block of its
/// size class is free and its event has completed.
pub(crate) fn alloc(ctx: &Arc<CudaContext>, bytes: usize) -> Result<PinnedBlock> {
    let (size, class) = size_class(bytes);
    let hit = with_inner(|p| {
        if p.ctx.is_none() {
            p.ctx = Some(ctx.clone());
        }
        let list = &mut p.free[class];
        let i = first_reusable(list.iter().map(|c| event_done(c.event.as_ref())))?;
        let c = list.swap_remove(i);
        p.stats.allocated_bytes += size;
        Some(c.addr)
    });
    let op = "pinned alloc";
    // The event checks may have made another device's context current; the
    // caller goes on with raw driver calls on `ctx`'s device.
    if let Err(e) = ctx.bind_to_thread() {
        if let Some(addr) = hit {
            free(PinnedBlock { addr, size }, None); // its last use has finished
        }
        return Err(super::device::drv(op)(e));
    }
    if let Some(addr) = hit {
        return Ok(PinnedBlock { addr, size });
    }
    let mut tried_release = false;
    loop {
        let over = with_inner(|i| i.limit.is_some_and(|l| i.stats.reserved_bytes + size > l));
        let got = if over {
            Err(DriverError(sys::cudaError_enum::CUDA_ERROR_OUT_OF_MEMORY))
        } else {
            // SAFETY: a plain page-locked host allocation of `size` bytes.
            unsafe { result::malloc_host(size, sys::CU_MEMHOSTALLOC_PORTABLE) }
        };
        match got {
            Ok(p) => {
                return Ok(with_inner(|i| {
                    i.stats.allocated_bytes += size;
                    i.stats.reserved_bytes += size;
                    i.stats.peak_reserved_bytes =
                        i.stats.peak_reserved_bytes.max(i.stats.reserved_bytes);
                    i.stats.num_host_alloc += 1;
                    PinnedBlock {
                        addr: p as usize,
                        size,
                    }
                }))
            }
            Err(_) if !tried_release => {
                tried_release = true;
                empty_pinned_cache();
                ctx.bind_to_thread().map_err(super::device::drv(op))?;
            }
            Err(_) => {
                // Page-locked memory is host memory the OS refused to lock.
                let s = pinned_memory_stats();
                return Err(Error::OutOfMemory {
                    device: Device::Cpu,
                    requested: bytes,
                    allocated: s.allocated_bytes,
                    reserved: s.reserved_bytes,
                    limit: None,
                    device_free: None,
                    device_total: None,
                });
            }
        }
    }
}

/// Whether a cached block's last use has finished: `Ok(true)` with no
/// event, else the event's state, queried with its context current (the
/// driver may refuse an event of a context that is not).
fn event_done(e: Option<&CudaEvent>) -> std::result::Result<bool, DriverError> {
    match e {
        None => Ok(true),
        Some(e) => {
            e.context().bind_to_thread()?;
            e.try_is_complete()
        }
    }
}

/// The first block whose last use has certainly finished. A block whose
/// event could not be queried is *not* reused: a DMA may still be reading or
/// writing it (it stays cached; [`empty_pinned_cache`] waits for it before
/// freeing it).
pub(crate) fn first_reusable(
    states: impl Iterator<Item = std::result::Result<bool, DriverError>>,
) -> Option<usize> {
    states.into_iter().position(|s| matches!(s, Ok(true)))
}

/// Returns a block to the cache; `event` (recorded after the last use on a
/// stream) guards its reuse. `None` means no pending use.
pub(crate) fn free(block: PinnedBlock, event: Option<CudaEvent>) {
    let (_, class) = size_class(block.size);
    with_inner(|p| {
        p.stats.allocated_bytes -= block.size;
        p.free[class].push(Cached {
            addr: block.addr,
            size: block.size,
            event,
        });
    });
}

/// Notes an asynchronous copy from or into the pinned tensor block at
/// `addr`, ended by `event`: the block is not handed out again before the
/// event completes. Events already complete are dropped.
pub(crate) fn record_tensor_use(addr: usize, event: CudaEvent) {
    let stale = with_inner(|p| {
        let list = p.uses.entry(addr).or_default();
        let old = std::mem::take(list);
        list.push(event);
        old
    });
    // Completed events are dropped; pending ones go back to the list.
    let pending: Vec<CudaEvent> = stale
        .into_iter()
        .filter(|e| !matches!(event_done(Some(e)), Ok(true)))
        .collect();
    if !pending.is_empty() {
        with_inner(|p| p.uses.entry(addr).or_default().extend(pending));
    }
}

/// Gives a pinned tensor's block back to the cache, guarded by the newest
/// event of its pending copies (older pending ones, from other copies of
/// the same tensor still in flight, are waited for here: one event guards a
/// cached block).
pub(crate) fn release_tensor_block(block: PinnedBlock) {
    let mut events = with_inner(|p| p.uses.remove(&block.addr)).unwrap_or_default();
    let last = events.pop();
    for e in events {
        if e.context().bind_to_thread().is_ok() {
            let _ = e.synchronize();
        }
    }
    free(block, last);
}

/// The pinned-host allocator's statistics.
pub fn pinned_memory_stats() -> PinnedMemoryStats {
    with_inner(|p| p.stats)
}

/// Waits for the cached pinned blocks' last uses, then gives them back to the
/// driver. Blocks in use are kept.
pub fn empty_pinned_cache() {
    let (victims, ctx) = with_inner(|p| {
        let mut v = Vec::new();
        for list in p.free.iter_mut() {
            v.append(list);
        }
        (v, p.ctx.clone())
    });
    if victims.is_empty() {
        return;
    }
    let Some(ctx) = ctx else { return };
    let _ = ctx.bind_to_thread();
    let mut freed = 0usize;
    let mut calls = 0u64;
    for c in victims {
        if let Some(e) = &c.event {
            let _ = e.synchronize();
        }
        // SAFETY: the block came from malloc_host and nothing uses it (its
        // last use, if any, completed above).
        let _ = unsafe { result::free_host(c.addr as *mut std::ffi::c_void) };
        freed += c.size;
        calls += 1;
    }
    with_inner(|p| {
        p.stats.reserved_bytes -= freed;
        p.stats.num_host_free += calls;
    });
}
