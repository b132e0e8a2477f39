//! The record_stream allocator over a fake address space with fake fences
//! (no GPU).

use super::*;

// The record_stream allocator over a fake address space with fake fences.

struct FakeSource {
    next: AtomicUsize,
    live: AtomicUsize,
    cap: usize,
}
impl SegmentSource for FakeSource {
    fn device(&self) -> Device {
        Device::Cuda(7)
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

struct FakeFence(Arc<AtomicBool>);
impl Fence for FakeFence {
    fn is_done(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
    fn wait(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A stream whose fences all share one "completed" flag.
struct FakeStream {
    id: u64,
    done: Arc<AtomicBool>,
    recorded: Arc<AtomicUsize>,
}
impl StreamUse for FakeStream {
    fn id(&self) -> u64 {
        self.id
    }
    fn record(&self) -> Box<dyn Fence> {
        self.recorded.fetch_add(1, Ordering::SeqCst);
        Box::new(FakeFence(self.done.clone()))
    }
}

fn fake_alloc(cap: usize) -> StreamAwareAllocator<FakeSource> {
    StreamAwareAllocator::with_source(FakeSource {
        next: AtomicUsize::new(1 << 20),
        live: AtomicUsize::new(0),
        cap,
    })
}

#[test]
fn record_stream_defers_reuse_until_the_event_completes() {
    let a = fake_alloc(usize::MAX);
    let done = Arc::new(AtomicBool::new(false));
    let recorded = Arc::new(AtomicUsize::new(0));
    let b = a.allocate(1000, 1).unwrap();
    let addr = b.addr;
    // Used on stream 2 (twice: recorded once).
    for _ in 0..2 {
        a.record_use(
            addr,
            Box::new(FakeStream {
                id: 2,
                done: done.clone(),
                recorded: recorded.clone(),
            }),
        );
    }
    a.free(b);
    assert_eq!(
        recorded.load(Ordering::SeqCst),
        1,
        "one event per using stream"
    );
    let s = a.stats();
    assert_eq!(
        s.allocated_bytes.all.current, 0,
        "freed bytes stop counting as allocated at once"
    );
    assert_eq!(
        s.active_bytes.all.current, 1024,
        "but stay active until the event completes"
    );
    // Not reusable yet, even on its own stream.
    let c = a.allocate(1000, 1).unwrap();
    assert_ne!(c.addr, addr);
    a.free(c);
    // The event completes: the next allocation polls it and reuses the block.
    done.store(true, Ordering::SeqCst);
    let d = a.allocate(1000, 1).unwrap();
    assert_eq!(d.addr, addr, "reused after the event");
    a.free(d);
    let s = a.stats();
    assert_eq!(s.allocated_bytes.all.current, 0);
    assert_eq!(s.active_bytes.all.current, 0);
    assert_eq!(s.allocation.all.allocated, 3);
    assert_eq!(s.allocation.all.freed, 3);
}

#[test]
fn record_stream_on_the_allocation_stream_changes_nothing() {
    let a = fake_alloc(usize::MAX);
    let done = Arc::new(AtomicBool::new(false));
    let recorded = Arc::new(AtomicUsize::new(0));
    let b = a.allocate(1000, 3).unwrap();
    let addr = b.addr;
    a.record_use(
        addr,
        Box::new(FakeStream {
            id: 3,
            done: done.clone(),
            recorded: recorded.clone(),
        }),
    );
    a.free(b);
    assert_eq!(recorded.load(Ordering::SeqCst), 0, "no event recorded");
    assert_eq!(a.stats().active_bytes.all.current, 0, "back in the pool");
    let c = a.allocate(1000, 3).unwrap();
    assert_eq!(c.addr, addr, "reused at once, the fence never completed");
    a.free(c);
}

#[test]
fn record_stream_pending_blocks_are_waited_for_before_empty_cache_and_oom() {
    let a = fake_alloc(2 << 20); // room for exactly one small segment
    let done = Arc::new(AtomicBool::new(false));
    let recorded = Arc::new(AtomicUsize::new(0));
    let b = a.allocate(SMALL, 0).unwrap();
    a.record_use(
        b.addr,
        Box::new(FakeStream {
            id: 9,
            done: done.clone(),
            recorded: recorded.clone(),
        }),
    );
    a.free(b);
    // The only segment is pending: a request on another stream needs it
    // released, which waits for the fence (the failed first try counts as
    // one OOM and one retry).
    let c = a.allocate(SMALL, 5).unwrap();
    assert!(
        done.load(Ordering::SeqCst),
        "the pending fence was waited for"
    );
    a.free(c);
    // empty_cache also waits for pending blocks before releasing.
    let done2 = Arc::new(AtomicBool::new(false));
    let d = a.allocate(100, 0).unwrap();
    a.record_use(
        d.addr,
        Box::new(FakeStream {
            id: 9,
            done: done2.clone(),
            recorded,
        }),
    );
    a.free(d);
    a.empty_cache();
    assert!(done2.load(Ordering::SeqCst));
    assert_eq!(a.stats().reserved_bytes.all.current, 0);
}

const SMALL: usize = 1 << 20;
