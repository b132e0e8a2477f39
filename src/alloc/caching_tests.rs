//! Unit tests of the caching allocator and its free sets, over a fake
//! address space.

use super::*;
use crate::alloc::free_set::{FreeSet, CLASS_MAX, NCLASS};
use std::collections::BTreeSet;
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

/// The history of a deferred free (a block another stream still uses):
/// `free_requested` when its allocation ends, the block `active_pending_free`
/// in a snapshot, then `free_completed` when it is freed; sizes are the
/// bytes asked for, with the rounded block size beside them; a failure a
/// caller will retry is not recorded as an OOM.
#[test]
fn history_of_a_deferred_free_and_an_unrecorded_failure() {
    use crate::alloc::history::Action;
    use crate::alloc::snapshot::BlockState;
    let a = fake(8 << 20);
    a.set_history(Some(100), false);
    let b = a.allocate(1000, 0).unwrap();
    a.end_allocation(&b);
    let (segs, trace) = a.snapshot();
    let actions: Vec<_> = trace.iter().map(|e| e.action).collect();
    assert_eq!(
        actions,
        [Action::SegmentAlloc, Action::Alloc, Action::FreeRequested]
    );
    assert_eq!((trace[1].size, trace[1].block_size), (1000, 1024));
    assert_eq!((trace[2].size, trace[2].block_size), (1000, 1024));
    assert_eq!(segs.len(), 1);
    assert_eq!(segs[0].blocks[0].state, BlockState::ActivePendingFree);
    assert_eq!(segs[0].blocks[0].requested_size, 1000);
    let addr = b.addr;
    a.free(b);
    let (segs, trace) = a.snapshot();
    let last = trace.last().unwrap();
    assert_eq!(
        (last.action, last.addr, last.size),
        (Action::FreeCompleted, addr, 1000)
    );
    assert_eq!(trace.len(), 4, "no second free_requested");
    assert!(segs[0]
        .blocks
        .iter()
        .all(|b| b.state == BlockState::Inactive));
    // Too big for the fake space: not recorded when the caller retries,
    // recorded otherwise.
    assert!(a.allocate_with(64 << 20, 0, false).is_err());
    assert!(a.snapshot().1.iter().all(|e| e.action != Action::Oom));
    assert!(a.allocate(64 << 20, 0).is_err());
    let (_, trace) = a.snapshot();
    let oom = trace.last().unwrap();
    assert_eq!((oom.action, oom.size), (Action::Oom, 64 << 20));
    // Released segments are recorded and leave the snapshot.
    a.empty_cache();
    let (segs, trace) = a.snapshot();
    assert!(segs.is_empty());
    assert_eq!(
        trace
            .iter()
            .filter(|e| e.action == Action::SegmentFree)
            .count(),
        1
    );
    a.set_history(None, false);
}
