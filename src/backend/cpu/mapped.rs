//! CPU storages over a memory-mapped file: the zero-copy tensors of a
//! checkpoint ([`crate::nn::Checkpoint`]).
//!
//! Each storage maps its own bytes of the file, privately and writable
//! (copy on write, `MAP_PRIVATE`): a tensor over it is an ordinary CPU
//! tensor, in-place ops included, and what they write goes to this
//! storage's own pages, never to the file nor to another tensor read from
//! the same bytes. The mapping is kept in a registry under the storage's
//! block id and unmapped when the storage dies. The bytes
//! are not the caching allocator's: they are not counted in its statistics,
//! as PyTorch's do not count a `torch.load(mmap=True)` storage either.

use std::collections::BTreeMap;
use std::fs::File;
use std::sync::Mutex;

use memmap2::{MmapMut, MmapOptions};

use crate::alloc::{Block, BlockSink};
use crate::device::Device;
use crate::storage::Storage;

/// The mappings of the storages alive, by block id.
static LIVE: Mutex<BTreeMap<u32, MmapMut>> = Mutex::new(BTreeMap::new());

/// Where a mapped storage's block goes back to: its mapping is unmapped.
/// (Not zero-sized, so its address is its own.)
struct MappedSink(#[allow(dead_code)] u8);

static MAPPED: MappedSink = MappedSink(0);

impl BlockSink for MappedSink {
    fn free(&self, b: Block) {
        let gone = LIVE.lock().unwrap_or_else(|e| e.into_inner()).remove(&b.id);
        // Unmapped outside the lock.
        drop(gone);
    }
}

/// A CPU storage over bytes `[offset, offset + nbytes)` of `file`, mapped
/// privately for this storage alone: its writes are its own, as a copy's
/// would be, and the pages it never writes stay the page cache's.
///
/// # Safety
///
/// The range must lie inside the file, and the file must not be truncated
/// while the storage lives: a page read past the new end raises `SIGBUS`
/// (memmap2's reason for `unsafe`). The caller checked the range against the
/// file's length and documents the rest.
pub(crate) unsafe fn mapped_storage(
    file: &File,
    offset: u64,
    nbytes: usize,
) -> std::io::Result<Storage> {
    if nbytes == 0 {
        return Ok(Storage::empty(Device::Cpu));
    }
    // SAFETY: the caller upholds the contract above; memmap2 aligns the
    // offset down to a page and points past the difference.
    let mut map = unsafe { MmapOptions::new().offset(offset).len(nbytes).map_copy(file) }?;
    let addr = map.as_mut_ptr() as usize;
    let mut live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    // An id no live mapped storage holds (2^32 alive at once is beyond any
    // process).
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let id = loop {
        let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if !live.contains_key(&id) {
            break id;
        }
    };
    live.insert(id, map);
    let block = Block {
        addr,
        size: nbytes,
        id,
    };
    Ok(Storage::from_external(Device::Cpu, nbytes, block, &MAPPED))
}

/// The bytes of the CPU storages over file mappings alive now.
pub(crate) fn live_bytes() -> usize {
    let live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    live.values().map(|m| m.len()).sum()
}
