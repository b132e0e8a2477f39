//! What a memory snapshot holds: the allocator's segments, each split into
//! its blocks (PyTorch's `torch.cuda.memory._snapshot()["segments"]`).

use super::Pool;

/// The state of one block of a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlockState {
    /// Held by a live storage.
    ActiveAllocated,
    /// Let go by its storage but still in use by another stream
    /// (`record_stream`): not yet reusable.
    ActivePendingFree,
    /// Free, cached for reuse.
    Inactive,
}

impl BlockState {
    /// The name PyTorch's snapshot uses.
    pub fn name(self) -> &'static str {
        match self {
            BlockState::ActiveAllocated => "active_allocated",
            BlockState::ActivePendingFree => "active_pending_free",
            BlockState::Inactive => "inactive",
        }
    }
}

/// One block of a segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockSnapshot {
    /// Its first byte.
    pub address: usize,
    /// Its size (a multiple of 512).
    pub size: usize,
    /// The bytes asked for (0 unless allocated).
    pub requested_size: usize,
    /// Allocated, pending or free.
    pub state: BlockState,
}

/// One segment taken from the system, and its blocks in address order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentSnapshot {
    /// Its first byte.
    pub address: usize,
    /// Its size.
    pub total_size: usize,
    /// The stream its blocks serve.
    pub stream: u64,
    /// Small (2 MiB segments, requests up to 1 MiB) or large.
    pub pool: Pool,
    /// Its blocks, covering it exactly.
    pub blocks: Vec<BlockSnapshot>,
}

impl SegmentSnapshot {
    /// Bytes of its blocks in `state`.
    pub fn bytes_in(&self, state: BlockState) -> usize {
        self.blocks
            .iter()
            .filter(|b| b.state == state)
            .map(|b| b.size)
            .sum()
    }
}
