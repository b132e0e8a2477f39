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

use crate::alloc::{Block, BlockSink, DeviceAllocator};
use crate::device::Device;
use crate::error::Result;
use smallvec::SmallVec;
use std::cell::RefCell;
use std::mem::MaybeUninit;
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

pub(crate) struct StorageInner {
    /// Handles ([`Storage`]s) to this storage.
    refs: AtomicUsize,
    device: Device,
    /// First byte; for an empty storage, a dangling aligned address.
    addr: usize,
    /// Bytes requested.
    nbytes: usize,
    /// Rounded bytes held from the allocator (0 for an empty storage).
    block_bytes: usize,
    /// The block and where it goes back to when the storage dies.
    block: Option<(BlockId, &'static dyn BlockSink)>,
    lock: RwLock<()>,
    version: AtomicU64,
}

struct BlockId(Block);

/// A refcounted handle to one storage. Cloning it is internal only: the public
/// handle is [`Tensor`](crate::Tensor), which is never implicitly duplicated.
///
/// An `Arc` without weak references, by hand: dropping the last handle of a
/// storage that was never shared (every op result until it is viewed)
/// touches no atomic read-modify-write, where an `Arc` takes two (strong and
/// weak counts).
pub(crate) struct Storage(NonNull<StorageInner>);

// SAFETY: a `Storage` is a shared reference to a `StorageInner`, which is
// `Send + Sync` (plain data, atomics and a lock): it is `Send` and `Sync`
// exactly as `Arc<StorageInner>` would be.
unsafe impl Send for Storage {}
// SAFETY: see `Send`.
unsafe impl Sync for Storage {}

const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<StorageInner>();
};

impl Clone for Storage {
    #[inline]
    fn clone(&self) -> Storage {
        // Relaxed, as in `Arc::clone`: a new handle is made from an existing
        // one, which keeps the storage alive meanwhile.
        let old = self.inner().refs.fetch_add(1, Ordering::Relaxed);
        if old > isize::MAX as usize {
            std::process::abort(); // as `Arc`: a count this high is a leak loop
        }
        Storage(self.0)
    }
}

impl Drop for Storage {
    #[inline]
    fn drop(&mut self) {
        let refs = &self.inner().refs;
        // The last handle needs no decrement: no other handle exists and none
        // can appear (making one takes a handle). The acquire load orders
        // every earlier use through handles dropped since (their release
        // decrement) before the free below.
        if refs.load(Ordering::Acquire) != 1 {
            if refs.fetch_sub(1, Ordering::Release) != 1 {
                return;
            }
            fence(Ordering::Acquire);
        }
        // SAFETY: this was the last handle: the contents are dropped once
        // (returning the block to the allocator) and nothing reads them again.
        unsafe { std::ptr::drop_in_place(self.0.as_ptr()) };
        spare_put(self.0.cast());
    }
}

/// Most storages live for one op: their `StorageInner` allocations are kept
/// per thread for the next storage (a push and a pop, instead of `malloc`
/// and `free`). At most this many per thread.
const SPARE_MAX: usize = 32;

thread_local! {
    /// Freed, uninitialised `StorageInner` allocations (from `Box`).
    static SPARE: RefCell<Vec<Spare>> = const { RefCell::new(Vec::new()) };
}

/// An allocation for a `StorageInner`, from `Box::new_uninit`.
struct Spare(NonNull<MaybeUninit<StorageInner>>);

impl Drop for Spare {
    fn drop(&mut self) {
        // SAFETY: the allocation came from `Box::new_uninit` and holds no
        // value; this frees the memory only.
        drop(unsafe { Box::from_raw(self.0.as_ptr()) });
    }
}

/// An allocation for a `StorageInner`: a spare one, or a new one.
#[inline]
fn spare_take() -> NonNull<MaybeUninit<StorageInner>> {
    let spare = SPARE
        .try_with(|s| s.try_borrow_mut().ok().and_then(|mut v| v.pop()))
        .ok()
        .flatten();
    match spare {
        Some(s) => {
            let p = s.0;
            std::mem::forget(s);
            p
        }
        None => NonNull::from(Box::leak(Box::<StorageInner>::new_uninit())),
    }
}

/// Keeps (or frees) the allocation of a dropped `StorageInner`.
#[inline]
fn spare_put(p: NonNull<MaybeUninit<StorageInner>>) {
    let s = Spare(p);
    // During thread exit (no thread-local any more) or when full, `s` is
    // dropped here: the memory is freed.
    let _ = SPARE.try_with(move |v| {
        if let Ok(mut v) = v.try_borrow_mut()
            && v.len() < SPARE_MAX
        {
            v.push(s);
        }
    });
}

impl Storage {
    /// `nbytes` uninitialised bytes from `alloc`, on the current stream (a
    /// storage of 0 bytes holds no block). The block goes back to `alloc`
    /// when the last handle goes.
    #[inline]
    pub(crate) fn new_in(alloc: &'static dyn DeviceAllocator, nbytes: usize) -> Result<Storage> {
        if nbytes == 0 {
            return Ok(Storage::empty(alloc.device()));
        }
        let b = alloc.allocate_current(nbytes)?;
        let sink: &'static dyn BlockSink = alloc;
        Ok(Storage::from_block(
            alloc.device(),
            b.addr,
            nbytes,
            b.size,
            Some((BlockId(b), sink)),
        ))
    }

    /// A storage of 0 bytes on `device`: no block behind it.
    pub(crate) fn empty(device: Device) -> Storage {
        // A dangling, 64-byte aligned address: nothing is ever read from it.
        Storage::from_block(device, 64, 0, 0, None)
    }

    /// A storage over `block`, which came from outside the device's caching
    /// allocator (a pinned host block, a file mapping) and goes back to `sink`.
    pub(crate) fn from_external(
        device: Device,
        nbytes: usize,
        block: Block,
        sink: &'static dyn BlockSink,
    ) -> Storage {
        Storage::from_block(
            device,
            block.addr,
            nbytes,
            block.size,
            Some((BlockId(block), sink)),
        )
    }

    /// A storage of one handle over `nbytes` bytes at `addr`, holding
    /// `block` (if any) of `block_bytes`.
    #[inline]
    fn from_block(
        device: Device,
        addr: usize,
        nbytes: usize,
        block_bytes: usize,
        block: Option<(BlockId, &'static dyn BlockSink)>,
    ) -> Storage {
        let p = spare_take();
        // SAFETY: `p` is an allocation for a `StorageInner` that holds none.
        unsafe {
            p.as_ptr().write(MaybeUninit::new(StorageInner {
                refs: AtomicUsize::new(1),
                device,
                addr,
                nbytes,
                block_bytes,
                block,
                lock: RwLock::new(()),
                version: AtomicU64::new(0),
            }))
        };
        Storage(p.cast())
    }

    /// The address of the block behind this storage if it goes back to
    /// `sink` (so a pinned tensor is recognised by its sink).
    pub(crate) fn block_from(&self, sink: &'static dyn BlockSink) -> Option<usize> {
        match &self.inner().block {
            Some((BlockId(b), s)) if std::ptr::addr_eq(*s, sink) => Some(b.addr),
            _ => None,
        }
    }

    #[inline]
    fn inner(&self) -> &StorageInner {
        // SAFETY: the pointee lives while any handle does.
        unsafe { self.0.as_ref() }
    }

    pub(crate) fn device(&self) -> Device {
        self.inner().device
    }
    /// Address of the first byte.
    pub(crate) fn addr(&self) -> usize {
        self.inner().addr
    }
    pub(crate) fn nbytes(&self) -> usize {
        self.inner().nbytes
    }
    /// Bytes charged to the allocator for this storage.
    pub(crate) fn block_bytes(&self) -> usize {
        self.inner().block_bytes
    }
    pub(crate) fn same(&self, other: &Storage) -> bool {
        self.0 == other.0
    }
    /// Number of handles (tensors and internal references) to this storage.
    pub(crate) fn ref_count(&self) -> usize {
        self.inner().refs.load(Ordering::Acquire)
    }
    pub(crate) fn version(&self) -> u64 {
        self.inner().version.load(Ordering::Acquire)
    }
    pub(crate) fn bump_version(&self) {
        self.inner().version.fetch_add(1, Ordering::AcqRel);
    }
    /// Identity for hashing / ordering (the inner allocation's address).
    pub(crate) fn id(&self) -> usize {
        self.0.as_ptr() as usize
    }
}

impl Drop for StorageInner {
    fn drop(&mut self) {
        if let Some((BlockId(b), sink)) = self.block.take() {
            sink.free(b);
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
#[inline]
pub(crate) fn lock<'a>(reads: &[&'a Storage], writes: &[&'a Storage]) -> Locks<'a> {
    let mut guards = SmallVec::new();
    // The usual cases of ops whose output needs no lock (a fresh result).
    match (reads, writes) {
        ([], []) => {}
        ([r], []) => guards.push(Guard::Read(read_lock(r))),
        ([a, b], []) => {
            let (a, b) = if a.id() <= b.id() { (a, b) } else { (b, a) };
            guards.push(Guard::Read(read_lock(a)));
            if !a.same(b) {
                guards.push(Guard::Read(read_lock(b)));
            }
        }
        _ => return lock_sorted(reads, writes),
    }
    Locks { _guards: guards }
}

#[inline]
fn read_lock(s: &Storage) -> RwLockReadGuard<'_, ()> {
    s.inner().lock.read().unwrap_or_else(|e| e.into_inner())
}

fn lock_sorted<'a>(reads: &[&'a Storage], writes: &[&'a Storage]) -> Locks<'a> {
    // (id, read, storage), writes first, then a stable insertion sort by id
    // (there are rarely more than four): among equal ids a write comes first.
    // On the stack up to 8 operands.
    let n = reads.len() + writes.len();
    let mut buf: [(usize, bool, Option<&'a Storage>); 8] = [(0, false, None); 8];
    let mut heap = Vec::new();
    let all: &mut [(usize, bool, Option<&'a Storage>)] = if n <= buf.len() {
        &mut buf[..n]
    } else {
        heap.resize(n, (0, false, None));
        &mut heap
    };
    for (slot, (s, read)) in all.iter_mut().zip(
        writes
            .iter()
            .map(|s| (*s, false))
            .chain(reads.iter().map(|s| (*s, true))),
    ) {
        *slot = (s.id(), read, Some(s));
    }
    for i in 1..all.len() {
        let mut j = i;
        while j > 0 && all[j - 1].0 > all[j].0 {
            all.swap(j - 1, j);
            j -= 1;
        }
    }
    let mut guards = SmallVec::new();
    let mut last = 0usize;
    for &(id, read, s) in all.iter() {
        if id == last {
            continue; // already locked (writes sort first, so exclusively if needed)
        }
        last = id;
        let lock = &s.expect("filled above").inner().lock;
        guards.push(if read {
            Guard::Read(read_lock(s.expect("filled above")))
        } else {
            Guard::Write(lock.write().unwrap_or_else(|e| e.into_inner()))
        });
    }
    Locks { _guards: guards }
}
