//! The caching allocator, generic over where its segments come from, and the
//! statistics it keeps.
//!
//! This layer knows no backend. A backend implements [`caching::SegmentSource`]
//! ("get a segment, give a segment back, which stream is current") and owns
//! one [`caching::CachingAllocator`] per device over it; the rest of the crate
//! sees a device's allocator as a [`DeviceAllocator`], found through
//! `backend::allocator(device)`. The public statistics functions live in
//! [`crate::memory`], above the backends.

pub(crate) mod caching;
mod free_set;
pub(crate) mod history;
pub(crate) mod ops_trace;
mod snapshot;
mod stats;

pub use caching::{round_size, segment_size, Block, MIN_BLOCK, SMALL_SIZE};
pub use history::{Action, ContextGuard, TraceEntry};
pub use snapshot::{BlockSnapshot, BlockState, SegmentSnapshot};
pub(crate) use stats::summary;
pub use stats::{MemoryStats, Pool, Stat, StatTriple};

use crate::device::Device;
use crate::error::Result;

/// Where a block goes back to when the storage holding it dies: the
/// allocator that handed it out. A storage keeps its block's sink, so
/// freeing looks nothing up.
pub(crate) trait BlockSink: Send + Sync {
    /// Takes `block` back. Called exactly once per block.
    fn free(&self, block: Block);
}

/// A device's allocator, as the rest of the crate sees it.
pub(crate) trait DeviceAllocator: BlockSink {
    /// The device whose memory this allocator hands out.
    fn device(&self) -> Device;
    /// The stream a new allocation is associated with now (0 on the CPU).
    fn current_stream(&self) -> u64;
    /// `bytes` (at least 1) for work on `stream`.
    fn allocate(&self, bytes: usize, stream: u64) -> Result<Block>;
    /// `bytes` (at least 1) for work on the current stream.
    #[inline]
    fn allocate_current(&self, bytes: usize) -> Result<Block> {
        self.allocate(bytes, self.current_stream())
    }
    fn stats(&self) -> MemoryStats;
    fn empty_cache(&self);
    fn reset_peak(&self);
    fn reset_accumulated(&self);
    fn set_limit(&self, limit: Option<usize>);
    /// `(free, total)` bytes of the device, where known.
    fn mem_info(&self) -> Option<(usize, usize)>;
    /// Starts (`Some(max_entries)`) or stops (`None`) the memory history.
    fn set_history(&self, max_entries: Option<usize>, backtraces: bool);
    /// The segments and the recorded history.
    fn snapshot(&self) -> (Vec<SegmentSnapshot>, Vec<TraceEntry>);
    /// Opens a window whose peak of allocated bytes and allocation count
    /// are kept; its id.
    fn open_window(&self) -> u64;
    /// Closes window `id`: its peak and allocation count.
    fn close_window(&self, id: u64) -> (i64, u64);
}

impl<S: caching::SegmentSource> BlockSink for caching::CachingAllocator<S> {
    fn free(&self, block: Block) {
        caching::CachingAllocator::free(self, block)
    }
}

impl<S: caching::SegmentSource> DeviceAllocator for caching::CachingAllocator<S> {
    fn device(&self) -> Device {
        self.source().device()
    }
    #[inline]
    fn current_stream(&self) -> u64 {
        self.source().current_stream()
    }
    fn allocate(&self, bytes: usize, stream: u64) -> Result<Block> {
        caching::CachingAllocator::allocate(self, bytes, stream)
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
    fn set_history(&self, max_entries: Option<usize>, backtraces: bool) {
        caching::CachingAllocator::set_history(self, max_entries, backtraces)
    }
    fn snapshot(&self) -> (Vec<SegmentSnapshot>, Vec<TraceEntry>) {
        caching::CachingAllocator::snapshot(self)
    }
    fn open_window(&self) -> u64 {
        caching::CachingAllocator::open_window(self)
    }
    fn close_window(&self, id: u64) -> (i64, u64) {
        caching::CachingAllocator::close_window(self, id)
    }
}
