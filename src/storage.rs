//! Storage: bytes on one device, refcounted, returned to the device's
//! allocator when the last reference goes.
//!
//! A [`Storage`] is shared by every tensor that views it (views differ only in
//! [`Layout`](crate::Layout)). Access is synchronised by a per-storage
//! reader-writer lock: kernels read under a shared lock and write under an
//! exclusive one, so aliases held by different threads can never race, and
//! `Tensor` can be `Sync`. Locks are taken in address order, once per storage,
//! so two ops can never deadlock on each other.
//!
//! The storage also carries the version counter that autograd checks: it is
//! shared by all views and bumped by every in-place write.

use crate::alloc::{allocator, Block};
use crate::error::Result;
use crate::Device;
use smallvec::SmallVec;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

pub(crate) struct StorageInner {
    device: Device,
    /// First byte; for an empty storage, a dangling aligned address.
    addr: usize,
    /// Bytes requested.
    nbytes: usize,
    /// Rounded bytes held from the allocator (0 for an empty storage).
    block_bytes: usize,
    block: Option<BlockId>,
    lock: RwLock<()>,
    version: AtomicU64,
}

struct BlockId(Block);

/// Live storages and their bytes, per device kind (index 0: CPU, 1: CUDA).
pub(crate) static LIVE_STORAGES: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];

fn dev_index(d: Device) -> usize {
    usize::from(d.is_cuda())
}

/// A refcounted handle to one storage. Cloning it is internal only: the public
/// handle is [`Tensor`](crate::Tensor), which is never implicitly duplicated.
#[derive(Clone)]
pub(crate) struct Storage(Arc<StorageInner>);

impl Storage {
    /// Allocates `nbytes` uninitialised bytes on `device`.
    pub(crate) fn new(device: Device, nbytes: usize) -> Result<Storage> {
        let (addr, block, block_bytes) = if nbytes == 0 {
            (64usize, None, 0)
        } else {
            let b =
                allocator(device)?.allocate(nbytes, crate::backend::current_stream_id(device))?;
            (
                b.addr,
                Some(BlockId(Block {
                    addr: b.addr,
                    size: b.size,
                    id: b.id,
                })),
                b.size,
            )
        };
        LIVE_STORAGES[dev_index(device)].fetch_add(1, Ordering::Relaxed);
        Ok(Storage(Arc::new(StorageInner {
            device,
            addr,
            nbytes,
            block_bytes,
            block,
            lock: RwLock::new(()),
            version: AtomicU64::new(0),
        })))
    }

    pub(crate) fn device(&self) -> Device {
        self.0.device
    }
    /// Address of the first byte.
    pub(crate) fn addr(&self) -> usize {
        self.0.addr
    }
    pub(crate) fn nbytes(&self) -> usize {
        self.0.nbytes
    }
    /// Bytes charged to the allocator for this storage.
    pub(crate) fn block_bytes(&self) -> usize {
        self.0.block_bytes
    }
    pub(crate) fn same(&self, other: &Storage) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
    /// Number of handles (tensors and internal references) to this storage.
    pub(crate) fn ref_count(&self) -> usize {
        Arc::strong_count(&self.0)
    }
    pub(crate) fn version(&self) -> u64 {
        self.0.version.load(Ordering::Acquire)
    }
    pub(crate) fn bump_version(&self) {
        self.0.version.fetch_add(1, Ordering::AcqRel);
    }
    /// Identity for hashing / ordering (the inner allocation's address).
    pub(crate) fn id(&self) -> usize {
        Arc::as_ptr(&self.0) as usize
    }
}

impl Drop for StorageInner {
    fn drop(&mut self) {
        LIVE_STORAGES[dev_index(self.device)].fetch_sub(1, Ordering::Relaxed);
        if let Some(BlockId(b)) = self.block.take() {
            // The device's allocator existed when the block was allocated.
            if let Ok(a) = allocator(self.device) {
                a.free(b);
            }
        }
    }
}

enum Guard<'a> {
    Read(#[allow(dead_code)] RwLockReadGuard<'a, ()>),
    Write(#[allow(dead_code)] RwLockWriteGuard<'a, ()>),
}

/// Locks held for one kernel call: shared for read operands, exclusive for
/// written ones. Dropping it releases them.
pub(crate) struct Locks<'a> {
    _guards: SmallVec<[Guard<'a>; 4]>,
}

/// Locks every distinct storage once, in address order; a storage that is
/// both read and written is locked exclusively. Poisoning is ignored: a kernel
/// panic cannot leave a storage in a state worse than partly written.
pub(crate) fn lock<'a>(reads: &[&'a Storage], writes: &[&'a Storage]) -> Locks<'a> {
    // (id, write, storage), writes first, then a stable insertion sort by id
    // (there are rarely more than four): among equal ids a write comes first.
    let mut all: SmallVec<[(usize, bool, &'a Storage); 6]> = SmallVec::new();
    all.extend(writes.iter().map(|s| (s.id(), true, *s)));
    all.extend(reads.iter().map(|s| (s.id(), false, *s)));
    for i in 1..all.len() {
        let mut j = i;
        while j > 0 && all[j - 1].0 > all[j].0 {
            all.swap(j - 1, j);
            j -= 1;
        }
    }
    let mut guards = SmallVec::new();
    let mut last = 0usize;
    for (id, w, s) in all {
        if id == last {
            continue; // already locked (writes sort first, so exclusively if needed)
        }
        last = id;
        guards.push(if w {
            Guard::Write(s.0.lock.write().unwrap_or_else(|e| e.into_inner()))
        } else {
            Guard::Read(s.0.lock.read().unwrap_or_else(|e| e.into_inner()))
        });
    }
    Locks { _guards: guards }
}
