//! The CUDA caching allocator: the crate's generic caching allocator
//! (`src/alloc/caching.rs`) over segments from the driver, plus PyTorch's
//! cross-stream rule.
//!
//! * Segments come from `cuMemAlloc` and go back with `cuMemFree` (after a
//!   device synchronisation), only when the cache is emptied or a request
//!   cannot otherwise be served. `mem_info` is `cuMemGetInfo`.
//! * Pools are keyed by the id of the stream that was current when the block
//!   was allocated, so a freed block is reused only by later work on the same
//!   stream, which the stream runs after everything queued before the free.
//! * [`record_stream`] marks a block as used on another stream. When such a
//!   block is freed, an event is recorded on each of those streams; the block
//!   stops counting as allocated at once (as in PyTorch) but returns to its
//!   pool only when all those events have completed. Pending blocks are
//!   polled at the start of every allocation, and waited for before the cache
//!   is emptied or an out-of-memory error is returned.

use super::device::gpu_of;
use super::stream::Stream;
use crate::alloc::caching::{CachingAllocator, SegmentSource};
use crate::alloc::history::TraceEntry;
use crate::alloc::SegmentSnapshot;
use crate::alloc::{Block, BlockSink, DeviceAllocator, MemoryStats};
use crate::device::Device;
use crate::error::{Error, Result};
use cudarc::driver::{result, CudaContext, CudaEvent};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Segments from the CUDA driver.
pub(crate) struct DriverSource {
    ordinal: usize,
    ctx: Arc<CudaContext>,
}

impl SegmentSource for DriverSource {
    fn device(&self) -> Device {
        Device::Cuda(self.ordinal)
    }
    fn alloc_segment(&self, bytes: usize) -> Option<usize> {
        self.ctx.bind_to_thread().ok()?;
        // SAFETY: a plain device allocation; the caller owns the pointer.
        unsafe { result::malloc_sync(bytes) }
            .ok()
            .map(|p| p as usize)
    }
    unsafe fn free_segment(&self, addr: usize, _bytes: usize) {
        if self.ctx.bind_to_thread().is_err() {
            return;
        }
        // No block of the segment is allocated, but work queued before the
        // last free may still be reading it: wait for the device first
        // (cuMemFree would too, implicitly).
        let _ = result::ctx::synchronize();
        // SAFETY: the caller guarantees the segment came from alloc_segment
        // and is no longer used.
        let _ = unsafe { result::free_sync(addr as u64) };
    }
    fn mem_info(&self) -> Option<(usize, usize)> {
        self.ctx.mem_get_info().ok()
    }
    fn current_stream(&self) -> u64 {
        super::stream::current_stream_id(self.ordinal)
    }
}

/// Something that completes: an event recorded on a stream.
pub(crate) trait Fence: Send + Sync {
    /// `true` once the work it follows has finished (or on a driver error:
    /// the block is then released rather than leaked).
    fn is_done(&self) -> bool;
    /// Blocks until [`is_done`](Fence::is_done).
    fn wait(&self);
}

/// A stream a block was used on, which can record a [`Fence`].
pub(crate) trait StreamUse: Send + Sync {
    fn id(&self) -> u64;
    fn record(&self) -> Box<dyn Fence>;
}

struct EventFence {
    event: Option<CudaEvent>,
}

impl Fence for EventFence {
    fn is_done(&self) -> bool {
        // The query runs with the event's context current (cudarc's does not
        // bind it, and an allocation may come from a thread where another
        // device's context, or none, is current). If it still fails, the
        // event is waited for (`synchronize` binds the context itself)
        // before the block is released: an error must never hand out memory
        // a stream may still use. A broken context returns at once and runs
        // nothing more, so the block is then released rather than leaked.
        self.event.as_ref().is_none_or(|e| {
            let _ = e.context().bind_to_thread();
            e.try_is_complete().unwrap_or_else(|_| {
                let _ = e.synchronize();
                true
            })
        })
    }
    fn wait(&self) {
        if let Some(e) = &self.event {
            let _ = e.synchronize();
        }
    }
}

impl StreamUse for Stream {
    fn id(&self) -> u64 {
        Stream::id(self)
    }
    fn record(&self) -> Box<dyn Fence> {
        let cu = self.cu();
        let event = cu.record_event(None).ok();
        if event.is_none() {
            // Cannot record: fall back to waiting for the stream now.
            let _ = cu.synchronize();
        }
        Box::new(EventFence { event })
    }
}

struct Pending {
    block: Block,
    fences: Vec<Box<dyn Fence>>,
}

/// A caching allocator with PyTorch's record_stream semantics, over any
/// segment source (the driver in production, a fake in the unit tests).
pub(crate) struct StreamAwareAllocator<S: SegmentSource> {
    caching: CachingAllocator<S>,
    /// Other streams each live block was used on, by block address.
    uses: Mutex<HashMap<usize, Vec<Box<dyn StreamUse>>>>,
    n_uses: AtomicUsize,
    /// Freed blocks waiting for their fences.
    pending: Mutex<Vec<Pending>>,
    n_pending: AtomicUsize,
}

/// The allocator of one CUDA device.
pub(crate) type CudaAllocator = StreamAwareAllocator<DriverSource>;

impl CudaAllocator {
    pub(crate) fn new(ordinal: usize, ctx: Arc<CudaContext>) -> Self {
        StreamAwareAllocator::with_source(DriverSource { ordinal, ctx })
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<S: SegmentSource> StreamAwareAllocator<S> {
    pub(crate) fn with_source(source: S) -> Self {
        StreamAwareAllocator {
            caching: CachingAllocator::new(source),
            uses: Mutex::new(HashMap::new()),
            n_uses: AtomicUsize::new(0),
            pending: Mutex::new(Vec::new()),
            n_pending: AtomicUsize::new(0),
        }
    }

    /// Marks the live block at `addr` as used on `stream`.
    pub(crate) fn record_use(&self, addr: usize, stream: Box<dyn StreamUse>) {
        let mut uses = lock(&self.uses);
        let list = uses.entry(addr).or_insert_with(|| {
            self.n_uses.fetch_add(1, Ordering::Relaxed);
            Vec::new()
        });
        if list.iter().all(|s| s.id() != stream.id()) {
            list.push(stream);
        }
    }

    /// Returns the pending blocks whose fences completed (all of them,
    /// after waiting, if `wait`) to the pool.
    fn process_pending(&self, wait: bool) {
        let ready: Vec<Block> = {
            let mut p = lock(&self.pending);
            let mut ready = Vec::new();
            let mut i = 0;
            while i < p.len() {
                if wait {
                    p[i].fences.iter().for_each(|f| f.wait());
                }
                if p[i].fences.iter().all(|f| f.is_done()) {
                    ready.push(p.swap_remove(i).block);
                } else {
                    i += 1;
                }
            }
            self.n_pending.store(p.len(), Ordering::Relaxed);
            ready
        };
        for b in ready {
            self.caching.free(b);
        }
    }
}

impl<S: SegmentSource> BlockSink for StreamAwareAllocator<S> {
    fn free(&self, block: Block) {
        let uses = if self.n_uses.load(Ordering::Relaxed) > 0 {
            let u = lock(&self.uses).remove(&block.addr);
            if u.is_some() {
                self.n_uses.fetch_sub(1, Ordering::Relaxed);
            }
            u
        } else {
            None
        };
        // Work on the block's own stream is ordered before its reuse anyway
        // (PyTorch ignores record_stream on the allocation stream too).
        let uses = uses.map(|mut u| {
            let own = self.caching.stream_of(&block);
            u.retain(|s| s.id() != own);
            u
        });
        match uses {
            Some(streams) if !streams.is_empty() => {
                let fences = streams.iter().map(|s| s.record()).collect();
                self.caching.end_allocation(&block);
                let mut p = lock(&self.pending);
                p.push(Pending { block, fences });
                self.n_pending.store(p.len(), Ordering::Relaxed);
            }
            _ => self.caching.free(block),
        }
    }
}

impl<S: SegmentSource> DeviceAllocator for StreamAwareAllocator<S> {
    fn device(&self) -> Device {
        self.caching.source().device()
    }

    fn current_stream(&self) -> u64 {
        self.caching.source().current_stream()
    }

    fn allocate(&self, bytes: usize, stream: u64) -> Result<Block> {
        if self.n_pending.load(Ordering::Relaxed) > 0 {
            self.process_pending(false);
        }
        // With blocks still waiting for other streams, a failure is not yet
        // an OOM for the history: those blocks may be what is missing.
        let pending = self.n_pending.load(Ordering::Relaxed) > 0;
        match self.caching.allocate_with(bytes, stream, !pending) {
            // Wait for them and try once more (the failed attempt stays
            // counted in `num_ooms`).
            Err(Error::OutOfMemory { .. }) if pending => {
                self.process_pending(true);
                self.caching.allocate(bytes, stream)
            }
            r => r,
        }
    }

    fn stats(&self) -> MemoryStats {
        self.caching.stats()
    }

    fn empty_cache(&self) {
        self.process_pending(true);
        self.caching.empty_cache()
    }

    fn reset_peak(&self) {
        self.caching.reset_peak()
    }

    fn reset_accumulated(&self) {
        self.caching.reset_accumulated()
    }

    fn set_limit(&self, limit: Option<usize>) {
        self.caching.set_limit(limit)
    }

    fn mem_info(&self) -> Option<(usize, usize)> {
        self.caching.mem_info()
    }

    fn set_history(&self, max_entries: Option<usize>, backtraces: bool) {
        self.caching.set_history(max_entries, backtraces)
    }

    fn snapshot(&self) -> (Vec<SegmentSnapshot>, Vec<TraceEntry>) {
        self.caching.snapshot()
    }

    fn open_window(&self) -> u64 {
        self.caching.open_window()
    }

    fn close_window(&self, id: u64) -> (i64, u64) {
        self.caching.close_window(id)
    }
}

/// Marks the block at `ptr` (a storage of `nbytes` on `d`) as used by work
/// queued on `stream`: the backend half of `Tensor::record_stream`
/// (`src/ops/record_stream.rs`, which says what it is for).
pub(crate) fn record_stream(d: Device, ptr: usize, nbytes: usize, stream: &Stream) -> Result<()> {
    if d != stream.device() {
        return Err(Error::DeviceMismatch {
            op: "record_stream",
            lhs: d,
            rhs: stream.device(),
        });
    }
    let g = gpu_of("record_stream", d)?;
    if nbytes == 0 {
        return Ok(()); // no block behind an empty storage
    }
    g.bind("record_stream")?;
    g.alloc.record_use(ptr, Box::new(stream.clone()));
    Ok(())
}
