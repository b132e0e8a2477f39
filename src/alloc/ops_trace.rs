//! What the profiler collects (`tensorscope::profiler` is its public
//! face): per thread, each public op entered through
//! [`op_context`](super::history::op_context) with its start, duration,
//! nesting, input shapes, and the memory allocated and freed while it ran
//! (reported here by the allocator), plus the allocated bytes over time.
//!
//! Nothing is collected while no thread profiles: the hooks read one
//! atomic counter first.
//!
//! A device's own time is read through a [`DeviceClock`] that the profiler
//! hands in (CUDA events, from the backend): this layer knows no backend.

use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::history::now_us;
use crate::device::Device;

/// Marks points in a device's queued work, so that the device's time
/// between two marks can be read once that work has run (CUDA events on
/// the current stream). Marks are numbered from 0 in the order made.
pub(crate) trait DeviceClock {
    /// Marks the work queued now: the mark's number, or `None` if the mark
    /// could not be made (the op is then left without a device time).
    fn mark(&mut self) -> Option<u32>;
    /// Waits for the marked work and gives each mark's time, in
    /// microseconds after the clock's own start (the moment
    /// [`start`] was called), `None` for a mark it could not read.
    fn resolve(&mut self) -> Vec<Option<f64>>;
}

/// One op call, as collected.
#[derive(Clone, Debug)]
pub(crate) struct RawOp {
    /// Its number in the session (calls in start order).
    pub(crate) id: u64,
    /// The op that called it, if any.
    pub(crate) parent: Option<u64>,
    pub(crate) name: &'static str,
    pub(crate) start_us: u64,
    pub(crate) dur_us: u64,
    pub(crate) child_us: u64,
    pub(crate) depth: u32,
    pub(crate) shapes: Vec<Vec<usize>>,
    pub(crate) self_bytes: i64,
    pub(crate) total_bytes: i64,
    pub(crate) allocs: u64,
    /// The device clock's marks at its start and end, when one was given.
    pub(crate) device_marks: (Option<u32>, Option<u32>),
}

/// The allocated bytes of a device after an allocation or a free.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RawSample {
    pub(crate) ts_us: u64,
    pub(crate) device: Device,
    pub(crate) allocated: i64,
}

struct Session {
    record_shapes: bool,
    profile_memory: bool,
    /// The ops running now, outermost first.
    open: Vec<RawOp>,
    done: Vec<RawOp>,
    samples: Vec<RawSample>,
    next_id: u64,
    clock: Option<Box<dyn DeviceClock>>,
}

/// What [`stop`] hands back.
pub(crate) struct Collected {
    /// The finished ops in the order they started.
    pub(crate) ops: Vec<RawOp>,
    pub(crate) samples: Vec<RawSample>,
    /// The device clock given to [`start`], to resolve the ops' marks.
    pub(crate) clock: Option<Box<dyn DeviceClock>>,
}

thread_local! {
    static SESSION: RefCell<Option<Session>> = const { RefCell::new(None) };
}

/// Threads profiling now.
static PROFILING: AtomicUsize = AtomicUsize::new(0);

#[inline]
pub(crate) fn active() -> bool {
    PROFILING.load(Ordering::Relaxed) != 0
}

/// Starts collecting on this thread, marking each op's start and end on
/// `clock` if one is given; `false` if this thread already collects.
pub(crate) fn start(
    record_shapes: bool,
    profile_memory: bool,
    clock: Option<Box<dyn DeviceClock>>,
) -> bool {
    SESSION.with(|s| {
        let mut s = s.borrow_mut();
        if s.is_some() {
            return false;
        }
        *s = Some(Session {
            record_shapes,
            profile_memory,
            open: Vec::new(),
            done: Vec::new(),
            samples: Vec::new(),
            next_id: 0,
            clock,
        });
        PROFILING.fetch_add(1, Ordering::Relaxed);
        true
    })
}

/// Stops collecting on this thread: the finished ops, the memory samples
/// and the device clock. Ops still open are closed now.
pub(crate) fn stop() -> Collected {
    let s = SESSION.with(|s| s.borrow_mut().take());
    let Some(mut s) = s else {
        return Collected {
            ops: Vec::new(),
            samples: Vec::new(),
            clock: None,
        };
    };
    PROFILING.fetch_sub(1, Ordering::Relaxed);
    while let Some(mut op) = s.open.pop() {
        op.dur_us = now_us().saturating_sub(op.start_us);
        op.device_marks.1 = s.clock.as_mut().and_then(|c| c.mark());
        s.done.push(op);
    }
    s.done.sort_by_key(|o| o.id);
    Collected {
        ops: s.done,
        samples: s.samples,
        clock: s.clock,
    }
}

/// An op starts on this thread; `true` if it is being collected (then
/// [`exit`] must follow).
pub(crate) fn enter(name: &'static str, shapes: impl FnOnce() -> Vec<Vec<usize>>) -> bool {
    SESSION.with(|s| {
        let Ok(mut s) = s.try_borrow_mut() else {
            return false;
        };
        let Some(s) = s.as_mut() else {
            return false;
        };
        let shapes = if s.record_shapes {
            shapes()
        } else {
            Vec::new()
        };
        let depth = s.open.len() as u32;
        let parent = s.open.last().map(|p| p.id);
        let id = s.next_id;
        s.next_id += 1;
        let start_mark = s.clock.as_mut().and_then(|c| c.mark());
        s.open.push(RawOp {
            id,
            parent,
            name,
            start_us: now_us(),
            dur_us: 0,
            child_us: 0,
            depth,
            shapes,
            self_bytes: 0,
            total_bytes: 0,
            allocs: 0,
            device_marks: (start_mark, None),
        });
        true
    })
}

/// The innermost op of this thread ends.
pub(crate) fn exit() {
    let _ = SESSION.try_with(|s| {
        let Ok(mut s) = s.try_borrow_mut() else {
            return;
        };
        let Some(s) = s.as_mut() else {
            return;
        };
        if let Some(mut op) = s.open.pop() {
            op.dur_us = now_us().saturating_sub(op.start_us);
            op.device_marks.1 = s.clock.as_mut().and_then(|c| c.mark());
            if let Some(parent) = s.open.last_mut() {
                parent.child_us += op.dur_us;
            }
            s.done.push(op);
        }
    });
}

/// The allocator of `device` allocated (`delta > 0`) or freed bytes for
/// this thread; `allocated` is its total now. Called under the
/// allocator's lock: never panics, allocates only host memory.
pub(crate) fn note_memory(device: Device, delta: i64, allocated: i64) {
    let _ = SESSION.try_with(|s| {
        let Ok(mut s) = s.try_borrow_mut() else {
            return;
        };
        let Some(s) = s.as_mut() else {
            return;
        };
        if !s.profile_memory {
            return;
        }
        let n = s.open.len();
        for (k, op) in s.open.iter_mut().enumerate() {
            op.total_bytes += delta;
            if k + 1 == n {
                op.self_bytes += delta;
                if delta > 0 {
                    op.allocs += 1;
                }
            }
        }
        s.samples.push(RawSample {
            ts_us: now_us(),
            device,
            allocated,
        });
    });
}
