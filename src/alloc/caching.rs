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
//! The segments themselves come from a [`SegmentSource`]: the system allocator
//! for the CPU, the driver for CUDA.

use super::{MemoryStats, Pool};
use crate::error::{Error, Result};
use crate::Device;
use std::collections::BTreeSet;
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

type Key = (u64, usize, usize, u32);

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

/// Free blocks up to this size sit in exact size classes (the small pool's
/// segment size: every small-pool block, and the rare small large-pool one).
const CLASS_MAX: usize = SMALL_BUFFER;
/// Number of size classes: one per multiple of [`MIN_BLOCK`] up to [`CLASS_MAX`].
const NCLASS: usize = CLASS_MAX / MIN_BLOCK;
/// A class list switches from a sorted `Vec` to a `BTreeSet` at this length,
/// so many free blocks of one size never make an insert linear.
const CLASS_VEC_MAX: usize = 64;

/// The free blocks of one pool, ordered by [`Key`] `(stream, size, addr, id)`
/// exactly as a `BTreeSet<Key>` (PyTorch's `std::set`) would be: a best fit is
/// the first key at or above `(stream, size)`.
///
/// Blocks up to [`CLASS_MAX`] bytes live in exact size classes per stream: a
/// two-level bitmap finds the smallest non-empty class at or above a request
/// in a few instructions, and each class keeps its blocks by address. In the
/// steady state of a loop that makes and drops tensors, every operation is a
/// few bit operations and a push or pop on a short list, with no allocation.
/// Larger blocks (and any size that is not a multiple of [`MIN_BLOCK`]) live
/// in a `BTreeSet`; every class size is below every size kept there, so the
/// classes are searched first.
#[derive(Default)]
struct FreeSet {
    classes: Vec<(u64, SizeClasses)>,
    big: BTreeSet<Key>,
}

/// The size classes of one stream.
struct SizeClasses {
    /// Bit `w` is set when `words[w]` is not 0.
    summary: u64,
    /// Bit `b` of `words[w]` is set when class `64 w + b` is not empty.
    words: [u64; NCLASS / 64],
    /// Class `c` holds blocks of `(c + 1) * MIN_BLOCK` bytes.
    lists: Vec<ClassList>,
}

/// The `(addr, id)` of the free blocks of one size.
enum ClassList {
    /// Sorted in descending order: the best (lowest address) is last.
    Vec(Vec<(usize, u32)>),
    /// Ascending.
    Tree(BTreeSet<(usize, u32)>),
}

impl ClassList {
    #[cfg(test)]
    fn best(&self) -> Option<(usize, u32)> {
        match self {
            ClassList::Vec(v) => v.last().copied(),
            ClassList::Tree(t) => t.first().copied(),
        }
    }
    /// Removes and returns the best entry.
    #[inline]
    fn pop_best(&mut self) -> Option<(usize, u32)> {
        match self {
            ClassList::Vec(v) => v.pop(),
            ClassList::Tree(t) => {
                let e = t.pop_first();
                if t.is_empty() {
                    *self = ClassList::Vec(Vec::new());
                }
                e
            }
        }
    }
    #[inline]
    fn insert(&mut self, e: (usize, u32)) {
        match self {
            // Fast path: below every entry (or the first one), so it goes last.
            ClassList::Vec(v) if v.last().is_none_or(|&l| e < l) && v.len() < CLASS_VEC_MAX => {
                v.push(e)
            }
            ClassList::Vec(v) if v.len() < CLASS_VEC_MAX => {
                let pos = v.partition_point(|&x| x > e);
                if v.get(pos) != Some(&e) {
                    v.insert(pos, e);
                }
            }
            ClassList::Vec(v) => {
                let mut t: BTreeSet<(usize, u32)> = v.drain(..).collect();
                t.insert(e);
                *self = ClassList::Tree(t);
            }
            ClassList::Tree(t) => {
                t.insert(e);
            }
        }
    }
    #[inline]
    fn remove(&mut self, e: (usize, u32)) -> bool {
        match self {
            ClassList::Vec(v) if v.last() == Some(&e) => {
                v.pop();
                true
            }
            ClassList::Vec(v) => {
                let pos = v.partition_point(|&x| x > e);
                let found = v.get(pos) == Some(&e);
                if found {
                    v.remove(pos);
                }
                found
            }
            ClassList::Tree(t) => {
                let found = t.remove(&e);
                if t.is_empty() {
                    *self = ClassList::Vec(Vec::new());
                }
                found
            }
        }
    }
    #[inline]
    fn is_empty(&self) -> bool {
        match self {
            ClassList::Vec(v) => v.is_empty(),
            ClassList::Tree(t) => t.is_empty(),
        }
    }
    fn iter(&self) -> Box<dyn Iterator<Item = (usize, u32)> + '_> {
        match self {
            ClassList::Vec(v) => Box::new(v.iter().copied()),
            ClassList::Tree(t) => Box::new(t.iter().copied()),
        }
    }
}

impl SizeClasses {
    fn new() -> Self {
        SizeClasses {
            summary: 0,
            words: [0; NCLASS / 64],
            lists: (0..NCLASS).map(|_| ClassList::Vec(Vec::new())).collect(),
        }
    }

    /// The smallest non-empty class at or above `c`.
    #[inline]
    fn first_class_from(&self, c: usize) -> Option<usize> {
        let (w, b) = (c / 64, c % 64);
        let m = self.words[w] & (u64::MAX << b);
        if m != 0 {
            return Some(w * 64 + m.trailing_zeros() as usize);
        }
        let above = if w + 1 >= 64 {
            0
        } else {
            self.summary & (u64::MAX << (w + 1))
        };
        if above == 0 {
            return None;
        }
        let w = above.trailing_zeros() as usize;
        Some(w * 64 + self.words[w].trailing_zeros() as usize)
    }

    #[inline]
    fn mark(&mut self, c: usize, nonempty: bool) {
        let (w, b) = (c / 64, c % 64);
        if nonempty {
            self.words[w] |= 1 << b;
            self.summary |= 1 << w;
        } else {
            self.words[w] &= !(1 << b);
            if self.words[w] == 0 {
                self.summary &= !(1 << w);
            }
        }
    }
}

/// The class of a size kept in classes, if it is one.
#[inline]
fn class_of(size: usize) -> Option<usize> {
    (size != 0 && size <= CLASS_MAX && size.is_multiple_of(MIN_BLOCK)).then(|| size / MIN_BLOCK - 1)
}

impl FreeSet {
    #[cfg(test)]
    fn stream(&self, stream: u64) -> Option<&SizeClasses> {
        self.classes
            .iter()
            .find(|(s, _)| *s == stream)
            .map(|(_, c)| c)
    }

    #[inline]
    fn stream_mut(&mut self, stream: u64) -> &mut SizeClasses {
        match self.classes.iter().position(|(s, _)| *s == stream) {
            Some(i) => &mut self.classes[i].1,
            None => self.add_stream(stream),
        }
    }

    #[cold]
    fn add_stream(&mut self, stream: u64) -> &mut SizeClasses {
        self.classes.push((stream, SizeClasses::new()));
        &mut self.classes.last_mut().expect("just pushed").1
    }

    /// The first key at or above `(stream, size)` on `stream`.
    #[cfg(test)]
    fn first_fit(&self, stream: u64, size: usize) -> Option<Key> {
        if size <= CLASS_MAX {
            if let Some(sc) = self.stream(stream) {
                let c0 = size.max(1).div_ceil(MIN_BLOCK) - 1;
                if let Some(c) = sc.first_class_from(c0) {
                    let (addr, id) = sc.lists[c].best().expect("marked classes are not empty");
                    return Some((stream, (c + 1) * MIN_BLOCK, addr, id));
                }
            }
        }
        let key = self.big.range((stream, size, 0, 0)..).next().copied()?;
        (key.0 == stream).then_some(key)
    }

    /// Removes and returns the first key at or above `(stream, size)` on `stream`.
    #[inline]
    fn take_first_fit(&mut self, stream: u64, size: usize) -> Option<Key> {
        if size <= CLASS_MAX {
            if let Some((_, sc)) = self.classes.iter_mut().find(|(s, _)| *s == stream) {
                let c0 = size.max(1).div_ceil(MIN_BLOCK) - 1;
                if let Some(c) = sc.first_class_from(c0) {
                    let list = &mut sc.lists[c];
                    let (addr, id) = list.pop_best().expect("marked classes are not empty");
                    if list.is_empty() {
                        sc.mark(c, false);
                    }
                    return Some((stream, (c + 1) * MIN_BLOCK, addr, id));
                }
            }
        }
        let key = self.big.range((stream, size, 0, 0)..).next().copied()?;
        if key.0 != stream {
            return None;
        }
        self.big.remove(&key);
        Some(key)
    }

    #[inline]
    fn insert(&mut self, key: Key) {
        match class_of(key.1) {
            Some(c) => {
                let sc = self.stream_mut(key.0);
                sc.lists[c].insert((key.2, key.3));
                sc.mark(c, true);
            }
            None => {
                self.big.insert(key);
            }
        }
    }

    #[inline]
    fn remove(&mut self, key: &Key) -> bool {
        match class_of(key.1) {
            Some(c) => {
                let Some(i) = self.classes.iter().position(|(s, _)| *s == key.0) else {
                    return false;
                };
                let sc = &mut self.classes[i].1;
                let found = sc.lists[c].remove((key.2, key.3));
                if sc.lists[c].is_empty() {
                    sc.mark(c, false);
                }
                found
            }
            None => self.big.remove(key),
        }
    }

    /// Every key, in ascending order.
    fn keys(&self) -> Vec<Key> {
        let mut all: Vec<Key> = self.big.iter().copied().collect();
        for (stream, sc) in &self.classes {
            for (c, list) in sc.lists.iter().enumerate() {
                all.extend(
                    list.iter()
                        .map(|(a, id)| (*stream, (c + 1) * MIN_BLOCK, a, id)),
                );
            }
        }
        all.sort_unstable();
        all
    }
}

impl Inner {
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

    #[inline]
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while the lock is held cannot leave the books half-written
        // (no user code runs under it), so poisoning is ignored.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Allocates `bytes` (at least 1) on `stream` (0 for the CPU).
    pub(crate) fn allocate(&self, bytes: usize, stream: u64) -> Result<Block> {
        if bytes > MAX_REQUEST {
            // No system can serve it, and rounding it would overflow.
            let mut inner = self.lock();
            inner.stats.num_ooms += 1;
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
            None => self.new_segment(&mut inner, bytes, size, pool, stream)?,
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
        let st = &mut inner.stats;
        if !deferred {
            st.allocation.sub(pool, 1);
            st.allocated_bytes.sub(pool, size as i64);
            st.requested_bytes.sub(pool, requested as i64);
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
}

impl<S: SegmentSource> Drop for CachingAllocator<S> {
    fn drop(&mut self) {
        self.empty_cache();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A fake address space: hands out increasing addresses, counts calls.
    struct Fake {
        next: AtomicUsize,
        live: AtomicUsize,
        cap: usize,
    }
    impl SegmentSource for Fake {
        fn device(&self) -> Device {
            Device::Cpu
        }
        fn alloc_segment(&self, bytes: usize) -> Option<usize> {
            if self.live.load(Ordering::SeqCst) + bytes > self.cap {
                return None;
            }
            self.live.fetch_add(bytes, Ordering::SeqCst);
            Some(self.next.fetch_add(bytes + 4096, Ordering::SeqCst))
        }
        unsafe fn free_segment(&self, _addr: usize, bytes: usize) {
            self.live.fetch_sub(bytes, Ordering::SeqCst);
        }
        fn mem_info(&self) -> Option<(usize, usize)> {
            None
        }
    }
    fn fake(cap: usize) -> CachingAllocator<Fake> {
        CachingAllocator::new(Fake {
            next: AtomicUsize::new(1 << 20),
            live: AtomicUsize::new(0),
            cap,
        })
    }

    /// `FreeSet` against a plain `BTreeSet<Key>` (the ordering it must
    /// reproduce) under random inserts, removes and best-fit queries, with
    /// sizes on both sides of `CLASS_MAX`, two streams, and enough blocks of
    /// one size to push a class list past `CLASS_VEC_MAX`.
    #[test]
    fn free_set_orders_like_a_btreeset() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = move |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        let mut fs = FreeSet::default();
        let mut bt: BTreeSet<Key> = BTreeSet::new();
        let mut id = 0u32;
        for step in 0..20_000 {
            let stream = rnd(2);
            let size = match rnd(4) {
                0 => MIN_BLOCK * (1 + rnd(3) as usize),
                1 => MIN_BLOCK * (1 + rnd(NCLASS as u64) as usize),
                2 => CLASS_MAX + MIN_BLOCK * rnd(5) as usize,
                _ => MIN_BLOCK * (1 + rnd(2 * NCLASS as u64) as usize),
            };
            match rnd(3) {
                0 | 1 if step < 15_000 => {
                    id += 1;
                    let key = (stream, size, rnd(1 << 30) as usize * MIN_BLOCK, id);
                    fs.insert(key);
                    bt.insert(key);
                }
                _ => {
                    // Remove an existing key (or a missing one).
                    let key = if !bt.is_empty() && rnd(8) != 0 {
                        *bt.iter().nth(rnd(bt.len() as u64) as usize).unwrap()
                    } else {
                        (stream, size, 12345 * MIN_BLOCK, u32::MAX)
                    };
                    assert_eq!(fs.remove(&key), bt.remove(&key), "remove {key:?}");
                }
            }
            let want = bt
                .range((stream, size, 0, 0)..)
                .next()
                .copied()
                .filter(|k| k.0 == stream);
            assert_eq!(
                fs.first_fit(stream, size),
                want,
                "first fit {stream} {size}"
            );
            if rnd(4) == 0 {
                // Take it out, as `allocate` does.
                assert_eq!(
                    fs.take_first_fit(stream, size),
                    want,
                    "take {stream} {size}"
                );
                if let Some(k) = want {
                    bt.remove(&k);
                }
            }
            if step % 1000 == 0 {
                assert_eq!(fs.keys(), bt.iter().copied().collect::<Vec<_>>());
            }
        }
        // Many blocks of one size: the class list becomes a tree and back.
        let mut fs = FreeSet::default();
        let keys: Vec<Key> = (0..200u32)
            .map(|i| (0, 1024, (1000 - i as usize) * 4096, i))
            .collect();
        for &k in &keys {
            fs.insert(k);
        }
        assert_eq!(
            fs.first_fit(0, 600),
            Some(keys[199]),
            "lowest address first"
        );
        assert_eq!(fs.take_first_fit(0, 600), Some(keys[199]));
        assert_eq!(fs.take_first_fit(0, 600), Some(keys[198]));
        for &k in &keys[..198] {
            assert!(fs.remove(&k));
        }
        assert!(!fs.remove(&keys[199]), "already taken");
        assert_eq!(fs.first_fit(0, 512), None);
        assert!(fs.keys().is_empty());
    }

    #[test]
    fn rounding_and_segments() {
        assert_eq!(round_size(1), 512);
        assert_eq!(round_size(513), 1024);
        assert_eq!(segment_size(512), SMALL_BUFFER);
        assert_eq!(segment_size(SMALL_SIZE + 512), LARGE_BUFFER);
        assert_eq!(segment_size(11 << 20), 12 << 20);
    }

    #[test]
    fn split_merge_reuse() {
        let a = fake(usize::MAX);
        let b1 = a.allocate(1000, 0).unwrap();
        let b2 = a.allocate(1000, 0).unwrap();
        assert_eq!(b1.size, 1024);
        assert_eq!(b2.addr, b1.addr + 1024, "carved from the same segment");
        let s = a.stats();
        assert_eq!(s.segment.all.current, 1);
        assert_eq!(s.allocated_bytes.all.current, 2048);
        assert_eq!(s.reserved_bytes.all.current, SMALL_BUFFER as i64);
        assert_eq!(s.inactive_split.all.current, 1);
        let addr1 = b1.addr;
        a.free(b1);
        a.free(b2);
        let s = a.stats();
        assert_eq!(s.allocated_bytes.all.current, 0);
        assert_eq!(
            s.inactive_split.all.current, 0,
            "everything merged back into one block"
        );
        let b3 = a.allocate(2048, 0).unwrap();
        assert_eq!(b3.addr, addr1, "merged block reused");
        a.free(b3);
        assert_eq!(a.stats().num_sys_alloc, 1);
        a.empty_cache();
        let s = a.stats();
        assert_eq!(s.reserved_bytes.all.current, 0);
        assert_eq!(s.num_sys_free, 1);
    }

    #[test]
    fn large_pool_split_threshold() {
        let a = fake(usize::MAX);
        // 2 MiB request: a 20 MiB segment, remainder 18 MiB > 1 MiB, so split.
        let b = a.allocate(2 << 20, 0).unwrap();
        assert_eq!(a.stats().reserved_bytes.large.current, LARGE_BUFFER as i64);
        assert_eq!(
            a.stats().inactive_split_bytes.large.current,
            (18 << 20) as i64
        );
        a.free(b);
        // 12 MiB request: exact 12 MiB segment, nothing to split.
        let c = a.allocate(12 << 20, 0).unwrap();
        let d = a.allocate(12 << 20, 0).unwrap();
        assert_eq!(c.size, 12 << 20);
        a.free(c);
        a.free(d);
    }

    #[test]
    fn streams_do_not_share_blocks() {
        let a = fake(usize::MAX);
        let b = a.allocate(4096, 1).unwrap();
        a.free(b);
        let c = a.allocate(4096, 2).unwrap();
        assert_eq!(a.stats().segment.all.current, 2);
        a.free(c);
    }

    #[test]
    fn limit_releases_cache_then_ooms() {
        let a = fake(usize::MAX);
        a.set_limit(Some(4 << 20));
        let b = a.allocate(100, 0).unwrap(); // small: 2 MiB segment
        a.free(b);
        // A large request needs 20 MiB: over the limit even after the cache goes.
        let err = a.allocate(2 << 20, 0).unwrap_err();
        assert!(matches!(err, Error::OutOfMemory { limit: Some(l), .. } if l == 4 << 20));
        let s = a.stats();
        assert_eq!(s.num_alloc_retries, 1);
        assert_eq!(s.num_ooms, 1);
        assert_eq!(
            s.reserved_bytes.all.current, 0,
            "the retry released the cached segment"
        );
        // Still works afterwards.
        let b = a.allocate(100, 0).unwrap();
        a.free(b);
    }

    #[test]
    fn end_allocation_defers_reuse() {
        let a = fake(usize::MAX);
        let b = a.allocate(1000, 7).unwrap();
        let addr = b.addr;
        a.end_allocation(&b);
        let s = a.stats();
        assert_eq!(s.allocated_bytes.all.current, 0, "no longer allocated");
        assert_eq!(s.requested_bytes.all.current, 0);
        assert_eq!(s.allocation.all.current, 0);
        assert_eq!(s.active_bytes.all.current, 1024, "still active");
        assert_eq!(s.active.all.current, 1);
        let c = a.allocate(1000, 7).unwrap();
        assert_ne!(c.addr, addr, "a pending block is not reused");
        a.free(b);
        let s = a.stats();
        assert_eq!(s.allocated_bytes.all.current, 1024, "only c is allocated");
        assert_eq!(s.active_bytes.all.current, 1024);
        assert_eq!(s.allocated_bytes.all.freed, 1024, "counted once");
        a.free(c);
        let d = a.allocate(1000, 7).unwrap();
        assert_eq!(d.addr, addr, "reusable once freed");
        a.free(d);
        let s = a.stats();
        assert_eq!(s.allocated_bytes.all.current, 0);
        assert_eq!(s.active_bytes.all.current, 0);
    }

    #[test]
    fn system_refusal_then_recovery() {
        let a = fake(3 << 20);
        let b = a.allocate(100, 0).unwrap();
        let err = a.allocate(SMALL_SIZE, 0);
        // Same segment has room: the 1 MiB request fits in the 2 MiB segment's rest.
        let c = err.unwrap();
        let e = a.allocate(SMALL_SIZE, 0).unwrap_err();
        assert!(matches!(e, Error::OutOfMemory { .. }));
        a.free(b);
        a.free(c);
        let d = a.allocate(SMALL_SIZE, 0).unwrap();
        a.free(d);
    }
}
