//! The caching allocator, shared by every device.
//!
//! The design follows PyTorch's CUDA caching allocator
//! (`c10/cuda/CUDACachingAllocator.cpp`):
//!
//! * requests round up to a multiple of 512 bytes ([`MIN_BLOCK`]);
//! * requests up to 1 MiB are *small* and are carved from 2 MiB segments; larger
//!   ones are *large*: 20 MiB segments below 10 MiB, otherwise the request
//!   rounded up to 2 MiB;
//! * each pool is an ordered set keyed by (stream, size, address), so a best
//!   fit is the first key at or above the request ([`FreeSet`]: exact size
//!   classes and a bitmap up to 2 MiB, a `BTreeSet` above);
//! * a block bigger than the request is split when the remainder is at least
//!   512 B (small pool) or over 1 MiB (large pool); freeing a block merges it
//!   with free neighbours of the same segment;
//! * a request that cannot be served (system refusal or the limit) first
//!   releases every whole cached segment and retries; then it is an
//!   [`Error::OutOfMemory`].
//!
//! The segments themselves come from a [`SegmentSource`]: the operating
//! system for the CPU, the driver for CUDA.

use super::free_set::FreeSet;
use super::history::{Action, Event, History, TraceEntry};
use super::snapshot::{BlockSnapshot, BlockState, SegmentSnapshot};
use super::{MemoryStats, Pool};
use crate::device::Device;
use crate::error::{Error, Result};
use std::sync::Mutex;

/// Every request is rounded up to a multiple of this.
pub const MIN_BLOCK: usize = 512;
/// Requests up to this size use the small pool.
pub const SMALL_SIZE: usize = 1 << 20;
/// Segment size of the small pool.
pub const SMALL_BUFFER: usize = 2 << 20;
/// Requests below this (and above `SMALL_SIZE`) get a `LARGE_BUFFER` segment.
pub const MIN_LARGE_ALLOC: usize = 10 << 20;
/// Segment size for mid-sized large requests.
pub const LARGE_BUFFER: usize = 20 << 20;
/// Large segments round up to a multiple of this.
pub const ROUND_LARGE: usize = 2 << 20;
/// Larger requests fail at once with `OutOfMemory` (no system could serve
/// them, and rounding them up would overflow).
const MAX_REQUEST: usize = (isize::MAX as usize) - ROUND_LARGE;

/// Where segments come from.
pub(crate) trait SegmentSource: Send + Sync {
    /// The device this source allocates on.
    fn device(&self) -> Device;
    /// A new segment of exactly `bytes` bytes, or `None` if the system refuses.
    fn alloc_segment(&self, bytes: usize) -> Option<usize>;
    /// Gives a segment back.
    ///
    /// # Safety
    /// `addr` and `bytes` must come from one earlier `alloc_segment` call, and
    /// nothing may use the memory afterwards.
    unsafe fn free_segment(&self, addr: usize, bytes: usize);
    /// `(free, total)` bytes of the device, where the system reports them.
    fn mem_info(&self) -> Option<(usize, usize)>;
    /// The id of the stream that is current on this device for the calling
    /// thread: free blocks are pooled per stream. A device without streams
    /// keeps the default, 0.
    #[inline]
    fn current_stream(&self) -> u64 {
        0
    }
}

/// A block handed out by the allocator. It must be given back with
/// [`CachingAllocator::free`] exactly once.
#[derive(Debug)]
pub struct Block {
    /// Address of the first byte (host address or device pointer).
    pub addr: usize,
    /// Rounded size in bytes.
    pub size: usize,
    pub(crate) id: u32,
}

const NONE: u32 = u32::MAX;

#[derive(Clone, Debug)]
struct BlockInfo {
    addr: usize,
    size: usize,
    requested: usize,
    stream: u64,
    prev: u32,
    next: u32,
    allocated: bool,
    pool: Pool,
    live: bool,
}

pub(crate) type Key = (u64, usize, usize, u32);

#[derive(Default)]
struct Inner {
    blocks: Vec<BlockInfo>,
    free_ids: Vec<u32>,
    small: FreeSet,
    large: FreeSet,
    stats: MemoryStats,
    limit: Option<usize>,
    /// Blocks whose allocation has ended ([`CachingAllocator::end_allocation`])
    /// but which are still in use by another stream: no longer allocated,
    /// still active, not reusable until [`CachingAllocator::free`].
    deferred: std::collections::HashSet<u32>,
    /// `false` until the first [`CachingAllocator::end_allocation`]: until
    /// then every block is active exactly while it is allocated, so the
    /// `active*` statistics are the `allocation*` ones (the same adds and
    /// subtractions in the same order) and are not kept twice.
    active_kept: bool,
    /// The memory history, while it is recorded.
    history: Option<History>,
    /// The open measuring windows ([`CachingAllocator::open_window`]).
    windows: Vec<Window>,
    next_window: u64,
}

/// A measuring window: the peak of allocated bytes and the allocations
/// made since it opened.
#[derive(Clone, Copy)]
struct Window {
    id: u64,
    peak: i64,
    allocs: u64,
}

impl Inner {
    /// Records an event if the history is on: `size` the bytes asked for,
    /// `block_size` the bytes occupied.
    #[inline]
    fn record(&mut self, action: Action, addr: usize, size: usize, block_size: usize, stream: u64) {
        if let Some(h) = &mut self.history {
            h.record(Event {
                action,
                addr,
                size,
                block_size,
                stream,
                device_free: None,
            });
        }
    }
}

/// A caching allocator over a [`SegmentSource`].
pub(crate) struct CachingAllocator<S: SegmentSource> {
    source: S,
    inner: Mutex<Inner>,
}

/// Rounds a request to the allocator's block size.
pub fn round_size(bytes: usize) -> usize {
    if bytes < MIN_BLOCK {
        MIN_BLOCK
    } else {
        bytes.div_ceil(MIN_BLOCK) * MIN_BLOCK
    }
}

/// The segment size used for a (rounded) request.
pub fn segment_size(size: usize) -> usize {
    if size <= SMALL_SIZE {
        SMALL_BUFFER
    } else if size < MIN_LARGE_ALLOC {
        LARGE_BUFFER
    } else {
        size.div_ceil(ROUND_LARGE) * ROUND_LARGE
    }
}

impl Inner {
    fn record_oom(&mut self, bytes: usize, stream: u64, device_free: Option<usize>) {
        if let Some(h) = &mut self.history {
            h.record(Event {
                action: Action::Oom,
                addr: 0,
                size: bytes,
                block_size: round_size(bytes.min(MAX_REQUEST)),
                stream,
                device_free,
            });
        }
    }

    #[inline]
    fn pool_set(&mut self, pool: Pool) -> &mut FreeSet {
        match pool {
            Pool::Small => &mut self.small,
            Pool::Large => &mut self.large,
        }
    }

    #[inline]
    fn is_split(&self, id: u32) -> bool {
        let b = &self.blocks[id as usize];
        b.prev != NONE || b.next != NONE
    }

    /// The pool key of a block, its pool, and whether its segment is split.
    #[inline]
    fn entry(&self, id: u32) -> (Key, Pool, bool) {
        let b = &self.blocks[id as usize];
        (
            (b.stream, b.size, b.addr, id),
            b.pool,
            b.prev != NONE || b.next != NONE,
        )
    }

    /// Puts a free block in its pool, keeping the inactive-split statistics.
    #[inline]
    fn pool_insert(&mut self, id: u32) {
        let (key, pool, split) = self.entry(id);
        if split {
            self.stats.inactive_split.add(pool, 1);
            self.stats.inactive_split_bytes.add(pool, key.1 as i64);
        }
        self.pool_set(pool).insert(key);
    }

    #[inline]
    fn pool_remove(&mut self, id: u32) {
        let (key, pool, split) = self.entry(id);
        if split {
            self.stats.inactive_split.sub(pool, 1);
            self.stats.inactive_split_bytes.sub(pool, key.1 as i64);
        }
        let removed = self.pool_set(pool).remove(&key);
        debug_assert!(removed);
    }

    #[inline]
    fn new_block(&mut self, info: BlockInfo) -> u32 {
        if let Some(id) = self.free_ids.pop() {
            self.blocks[id as usize] = info;
            id
        } else {
            self.blocks.push(info);
            (self.blocks.len() - 1) as u32
        }
    }

    #[inline]
    fn retire_block(&mut self, id: u32) {
        self.blocks[id as usize].live = false;
        self.free_ids.push(id);
    }

    /// Starts keeping the `active*` statistics apart from the `allocation*`
    /// ones (which they equal until now).
    fn keep_active(&mut self) {
        if !self.active_kept {
            self.active_kept = true;
            self.stats.active = self.stats.allocation;
            self.stats.active_bytes = self.stats.allocated_bytes;
        }
    }

    /// Takes the best fit from the pool, on the same stream, out of the pool.
    #[inline]
    fn take_free(&mut self, pool: Pool, stream: u64, size: usize) -> Option<u32> {
        let key = self.pool_set(pool).take_first_fit(stream, size)?;
        if self.is_split(key.3) {
            self.stats.inactive_split.sub(pool, 1);
            self.stats.inactive_split_bytes.sub(pool, key.1 as i64);
        }
        Some(key.3)
    }

    /// Releases every cached segment that is whole (not split). Returns the
    /// `(addr, size)` pairs to hand back to the source, after updating stats.
    fn release_cached(&mut self) -> Vec<(usize, usize)> {
        let mut victims = Vec::new();
        for pool in [Pool::Small, Pool::Large] {
            let all: Vec<u32> = self.pool_set(pool).keys().iter().map(|k| k.3).collect();
            let ids: Vec<u32> = all.into_iter().filter(|&id| !self.is_split(id)).collect();
            for id in ids {
                self.pool_remove(id);
                let b = &self.blocks[id as usize];
                let (addr, size) = (b.addr, b.size);
                self.stats.segment.sub(pool, 1);
                self.stats.reserved_bytes.sub(pool, size as i64);
                self.stats.num_sys_free += 1;
                let stream = self.blocks[id as usize].stream;
                self.record(Action::SegmentFree, addr, size, size, stream);
                self.retire_block(id);
                victims.push((addr, size));
            }
        }
        victims
    }
}

impl<S: SegmentSource> CachingAllocator<S> {
    pub(crate) fn new(source: S) -> Self {
        CachingAllocator {
            source,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Where the segments come from.
    #[inline]
    pub(crate) fn source(&self) -> &S {
        &self.source
    }

    #[inline]
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while the lock is held cannot leave the books half-written
        // (no user code runs under it), so poisoning is ignored.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Allocates `bytes` (at least 1) on `stream` (0 for the CPU).
    pub(crate) fn allocate(&self, bytes: usize, stream: u64) -> Result<Block> {
        self.allocate_with(bytes, stream, true)
    }

    /// [`allocate`](Self::allocate), with a failure left out of the
    /// history (`record_oom` false): for a caller that retries after
    /// freeing what it holds, and records an OOM only if that fails too.
    pub(crate) fn allocate_with(
        &self,
        bytes: usize,
        stream: u64,
        record_oom: bool,
    ) -> Result<Block> {
        if bytes > MAX_REQUEST {
            // No system can serve it, and rounding it would overflow.
            let mut inner = self.lock();
            inner.stats.num_ooms += 1;
            if record_oom {
                inner.record_oom(bytes, stream, None);
            }
            return Err(Error::OutOfMemory {
                device: self.source.device(),
                requested: bytes,
                allocated: inner.stats.allocated_bytes.all.current as usize,
                reserved: inner.stats.reserved_bytes.all.current as usize,
                limit: inner.limit,
                device_free: None,
                device_total: None,
            });
        }
        let size = round_size(bytes);
        let pool = if size <= SMALL_SIZE {
            Pool::Small
        } else {
            Pool::Large
        };
        let mut inner = self.lock();
        let id = match inner.take_free(pool, stream, size) {
            Some(id) => id,
            None => self.new_segment(&mut inner, bytes, size, pool, stream, record_oom)?,
        };
        // Split off the remainder if it is worth keeping.
        let remaining = inner.blocks[id as usize].size - size;
        let split = match pool {
            Pool::Small => remaining >= MIN_BLOCK,
            Pool::Large => remaining > SMALL_SIZE,
        };
        if split {
            let b = inner.blocks[id as usize].clone();
            let rest = inner.new_block(BlockInfo {
                addr: b.addr + size,
                size: remaining,
                requested: 0,
                stream,
                prev: id,
                next: b.next,
                allocated: false,
                pool,
                live: true,
            });
            if b.next != NONE {
                inner.blocks[b.next as usize].prev = rest;
            }
            let blk = &mut inner.blocks[id as usize];
            blk.size = size;
            blk.next = rest;
            inner.pool_insert(rest);
        }
        let (addr, size) = {
            let blk = &mut inner.blocks[id as usize];
            blk.allocated = true;
            blk.requested = bytes;
            (blk.addr, blk.size)
        };
        let st = &mut inner.stats;
        st.allocation.add(pool, 1);
        st.allocated_bytes.add(pool, size as i64);
        st.requested_bytes.add(pool, bytes as i64);
        if inner.active_kept {
            let st = &mut inner.stats;
            st.active.add(pool, 1);
            st.active_bytes.add(pool, size as i64);
        }
        if !inner.windows.is_empty() {
            let now = inner.stats.allocated_bytes.all.current;
            for w in inner.windows.iter_mut() {
                w.peak = w.peak.max(now);
                w.allocs += 1;
            }
        }
        inner.record(Action::Alloc, addr, bytes, size, stream);
        if super::ops_trace::active() {
            let now = inner.stats.allocated_bytes.all.current;
            super::ops_trace::note_memory(self.source.device(), size as i64, now);
        }
        Ok(Block { addr, size, id })
    }

    /// Gets a fresh segment, releasing the cache and retrying once if the
    /// limit or the system refuses. On success the whole segment is one block.
    fn new_segment(
        &self,
        inner: &mut Inner,
        bytes: usize,
        size: usize,
        pool: Pool,
        stream: u64,
        record_oom: bool,
    ) -> Result<u32> {
        let seg = segment_size(size);
        let mut retried = false;
        loop {
            let within_limit = inner
                .limit
                .is_none_or(|l| inner.stats.reserved_bytes.all.current as usize + seg <= l);
            let addr = if within_limit {
                self.source.alloc_segment(seg)
            } else {
                None
            };
            if let Some(addr) = addr {
                let st = &mut inner.stats;
                st.segment.add(pool, 1);
                st.reserved_bytes.add(pool, seg as i64);
                st.num_sys_alloc += 1;
                inner.record(Action::SegmentAlloc, addr, seg, seg, stream);
                return Ok(inner.new_block(BlockInfo {
                    addr,
                    size: seg,
                    requested: 0,
                    stream,
                    prev: NONE,
                    next: NONE,
                    allocated: false,
                    pool,
                    live: true,
                }));
            }
            if retried {
                inner.stats.num_ooms += 1;
                let info = self.source.mem_info();
                if record_oom {
                    inner.record_oom(bytes, stream, info.map(|i| i.0));
                }
                return Err(Error::OutOfMemory {
                    device: self.source.device(),
                    requested: bytes,
                    allocated: inner.stats.allocated_bytes.all.current as usize,
                    reserved: inner.stats.reserved_bytes.all.current as usize,
                    limit: inner.limit,
                    device_free: info.map(|i| i.0),
                    device_total: info.map(|i| i.1),
                });
            }
            retried = true;
            inner.stats.num_alloc_retries += 1;
            for (a, s) in inner.release_cached() {
                // SAFETY: the segment came from this source and no block of it is in use.
                unsafe { self.source.free_segment(a, s) };
            }
        }
    }

    /// Returns a block to the cache, merging it with free neighbours.
    pub(crate) fn free(&self, block: Block) {
        let mut inner = self.lock();
        let id = block.id;
        let (pool, size, requested) = {
            let b = &mut inner.blocks[id as usize];
            debug_assert!(b.live && b.allocated && b.addr == block.addr);
            b.allocated = false;
            (b.pool, b.size, b.requested)
        };
        let deferred = !inner.deferred.is_empty() && inner.deferred.remove(&id);
        let stream = inner.blocks[id as usize].stream;
        let st = &mut inner.stats;
        if !deferred {
            st.allocation.sub(pool, 1);
            st.allocated_bytes.sub(pool, size as i64);
            st.requested_bytes.sub(pool, requested as i64);
            if super::ops_trace::active() {
                let now = st.allocated_bytes.all.current;
                super::ops_trace::note_memory(self.source.device(), -(size as i64), now);
            }
        }
        if inner.active_kept {
            let st = &mut inner.stats;
            st.active.sub(pool, 1);
            st.active_bytes.sub(pool, size as i64);
        }
        // Merge with the previous block, then the next, if free.
        let mut id = id;
        let prev = inner.blocks[id as usize].prev;
        if prev != NONE && !inner.blocks[prev as usize].allocated {
            inner.pool_remove(prev);
            let b = inner.blocks[id as usize].clone();
            let p = &mut inner.blocks[prev as usize];
            p.size += b.size;
            p.next = b.next;
            if b.next != NONE {
                inner.blocks[b.next as usize].prev = prev;
            }
            inner.retire_block(id);
            id = prev;
        }
        let next = inner.blocks[id as usize].next;
        if next != NONE && !inner.blocks[next as usize].allocated {
            inner.pool_remove(next);
            let n = inner.blocks[next as usize].clone();
            let b = &mut inner.blocks[id as usize];
            b.size += n.size;
            b.next = n.next;
            if n.next != NONE {
                inner.blocks[n.next as usize].prev = id;
            }
            inner.retire_block(next);
        }
        inner.pool_insert(id);
        // Recorded once the books are whole again.
        if !deferred {
            inner.record(Action::FreeRequested, block.addr, requested, size, stream);
        }
        inner.record(Action::FreeCompleted, block.addr, requested, size, stream);
    }

    /// Ends `block`'s allocation without making it reusable: PyTorch's free
    /// of a block that another stream may still be using (`record_stream`).
    /// The allocation statistics (`allocation`, `allocated_bytes`,
    /// `requested_bytes`) drop now; the block stays active, out of the pool,
    /// until [`free`](Self::free) is called once the other streams are done.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))] // only CUDA has other streams
    pub(crate) fn end_allocation(&self, block: &Block) {
        let mut inner = self.lock();
        let b = &inner.blocks[block.id as usize];
        debug_assert!(b.live && b.allocated && b.addr == block.addr);
        let (pool, size, requested) = (b.pool, b.size, b.requested);
        inner.keep_active();
        if inner.deferred.insert(block.id) {
            let st = &mut inner.stats;
            st.allocation.sub(pool, 1);
            st.allocated_bytes.sub(pool, size as i64);
            st.requested_bytes.sub(pool, requested as i64);
            if super::ops_trace::active() {
                let now = st.allocated_bytes.all.current;
                super::ops_trace::note_memory(self.source.device(), -(size as i64), now);
            }
            let stream = inner.blocks[block.id as usize].stream;
            inner.record(Action::FreeRequested, block.addr, requested, size, stream);
        }
    }

    /// The stream `block` was allocated on (whose pool it returns to).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))] // only CUDA has other streams
    pub(crate) fn stream_of(&self, block: &Block) -> u64 {
        self.lock().blocks[block.id as usize].stream
    }

    /// Returns every whole cached segment to the system.
    pub(crate) fn empty_cache(&self) {
        let victims = self.lock().release_cached();
        for (a, s) in victims {
            // SAFETY: each segment came from this source and is entirely free.
            unsafe { self.source.free_segment(a, s) };
        }
    }

    pub(crate) fn stats(&self) -> MemoryStats {
        // One lock, so the snapshot is consistent.
        let inner = self.lock();
        let mut s = inner.stats.clone();
        if !inner.active_kept {
            s.active = s.allocation;
            s.active_bytes = s.allocated_bytes;
        }
        s.limit = inner.limit;
        s
    }

    pub(crate) fn reset_peak(&self) {
        self.lock().stats.reset_peak();
    }

    pub(crate) fn reset_accumulated(&self) {
        self.lock().stats.reset_accumulated();
    }

    /// Sets (or clears) the cap on reserved bytes. Cached segments above the
    /// new limit are released at once.
    pub(crate) fn set_limit(&self, limit: Option<usize>) {
        let over = {
            let mut inner = self.lock();
            inner.limit = limit;
            limit.is_some_and(|l| inner.stats.reserved_bytes.all.current as usize > l)
        };
        if over {
            self.empty_cache();
        }
    }

    pub(crate) fn mem_info(&self) -> Option<(usize, usize)> {
        self.source.mem_info()
    }

    /// Starts (`Some(max_entries)`) or stops (`None`) recording the history;
    /// starting again keeps nothing of an earlier recording. Recording
    /// changes nothing the allocator does.
    pub(crate) fn set_history(&self, max_entries: Option<usize>, backtraces: bool) {
        let mut inner = self.lock();
        let was = inner.history.is_some();
        inner.history = max_entries.map(|m| History::new(m, backtraces));
        match (was, inner.history.is_some()) {
            (false, true) => super::history::recording_started(),
            (true, false) => super::history::recording_stopped(),
            _ => {}
        }
    }

    /// The segments with their blocks, in address order, and the recorded
    /// history (empty when it is off), read under one lock.
    pub(crate) fn snapshot(&self) -> (Vec<SegmentSnapshot>, Vec<TraceEntry>) {
        let inner = self.lock();
        let mut segments = Vec::new();
        for (id, b) in inner.blocks.iter().enumerate() {
            if !b.live || b.prev != NONE {
                continue;
            }
            let mut blocks = Vec::new();
            let mut cur = id as u32;
            while cur != NONE {
                let c = &inner.blocks[cur as usize];
                let state = if c.allocated && inner.deferred.contains(&cur) {
                    BlockState::ActivePendingFree
                } else if c.allocated {
                    BlockState::ActiveAllocated
                } else {
                    BlockState::Inactive
                };
                blocks.push(BlockSnapshot {
                    address: c.addr,
                    size: c.size,
                    requested_size: if c.allocated { c.requested } else { 0 },
                    state,
                });
                cur = c.next;
            }
            segments.push(SegmentSnapshot {
                address: b.addr,
                total_size: blocks.iter().map(|b| b.size).sum(),
                stream: b.stream,
                pool: b.pool,
                blocks,
            });
        }
        segments.sort_by_key(|s| s.address);
        let trace = inner
            .history
            .as_ref()
            .map(|h| h.entries.iter().cloned().collect())
            .unwrap_or_default();
        (segments, trace)
    }

    /// Opens a measuring window: from now on its peak follows the allocated
    /// bytes and it counts the allocations. Returns its id, for
    /// [`close_window`](Self::close_window). Windows of several threads
    /// may be open at once, and close in any order.
    pub(crate) fn open_window(&self) -> u64 {
        let mut inner = self.lock();
        let peak = inner.stats.allocated_bytes.all.current;
        let id = inner.next_window;
        inner.next_window += 1;
        inner.windows.push(Window {
            id,
            peak,
            allocs: 0,
        });
        id
    }

    /// Closes window `id`: its peak of allocated bytes and the allocations
    /// made while it was open (`(0, 0)` for an unknown id).
    pub(crate) fn close_window(&self, id: u64) -> (i64, u64) {
        let mut inner = self.lock();
        match inner.windows.iter().position(|w| w.id == id) {
            Some(k) => {
                let w = inner.windows.swap_remove(k);
                (w.peak, w.allocs)
            }
            None => (0, 0),
        }
    }
}

impl<S: SegmentSource> Drop for CachingAllocator<S> {
    fn drop(&mut self) {
        self.empty_cache();
    }
}

#[cfg(test)]
#[path = "caching_tests.rs"]
mod tests;
