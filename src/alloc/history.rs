//! Memory history (PyTorch's `torch.cuda.memory._record_memory_history`):
//! a bounded ring of the allocator's events, each with a time stamp and
//! the context of the thread that caused it: the public op that asked, the
//! module path inside a `Sequential`, the user's scope label, and
//! optionally a Rust backtrace.
//!
//! The context is per thread and set by the layers above through guards
//! ([`op_context`], [`module_context`], [`scope_context`]); this layer only
//! reads it. While no allocator records, the guards do nothing but read
//! one atomic counter, so ops pay nothing measurable.

use std::backtrace::Backtrace;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// What happened (the `action` of PyTorch's trace entries).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// A block was handed out.
    Alloc,
    /// A block's owner let it go (it may still be in use by another stream).
    FreeRequested,
    /// The block is back in the cache, reusable.
    FreeCompleted,
    /// A segment was taken from the system (the driver or the OS).
    SegmentAlloc,
    /// A segment was given back to the system.
    SegmentFree,
    /// A request could not be served.
    Oom,
}

impl Action {
    /// The name PyTorch's snapshot uses.
    pub fn name(self) -> &'static str {
        match self {
            Action::Alloc => "alloc",
            Action::FreeRequested => "free_requested",
            Action::FreeCompleted => "free_completed",
            Action::SegmentAlloc => "segment_alloc",
            Action::SegmentFree => "segment_free",
            Action::Oom => "oom",
        }
    }
}

/// One recorded event.
#[derive(Clone, Debug)]
pub struct TraceEntry {
    /// What happened.
    pub action: Action,
    /// The block's or segment's address (0 for an OOM).
    pub addr: usize,
    /// The bytes asked for (as PyTorch records them): a tensor's bytes for
    /// an allocation or a free, a segment's size, an OOM's request.
    pub size: usize,
    /// The bytes it occupies: the block's rounded size (what
    /// `memory_allocated` counts), a segment's size.
    pub block_size: usize,
    /// The stream (0 on the CPU and for the default stream).
    pub stream: u64,
    /// Microseconds since the process's first recorded event or context.
    pub time_us: u64,
    /// The public op that was running (`"matmul"`, `"zeros"`, ...), if any.
    pub op: Option<&'static str>,
    /// The module path inside `Sequential`s (`"2.0"`: layer 0 of the
    /// `Sequential` at index 2), if any.
    pub module: Option<String>,
    /// The innermost user scope label ([`scope_context`]), if any.
    pub scope: Option<String>,
    /// A Rust backtrace, when asked for: captured with the event, its
    /// symbols looked up only when it is printed (not under the
    /// allocator's lock).
    pub backtrace: Option<Arc<Backtrace>>,
    /// For an OOM: the device's free bytes, where known.
    pub device_free: Option<usize>,
}

/// The ring an allocator records into.
#[derive(Debug)]
pub(crate) struct History {
    pub(crate) entries: VecDeque<TraceEntry>,
    pub(crate) max: usize,
    pub(crate) backtraces: bool,
    /// Entries dropped from the front since recording began.
    pub(crate) dropped: u64,
}

impl History {
    pub(crate) fn new(max: usize, backtraces: bool) -> History {
        History {
            entries: VecDeque::with_capacity(max.min(1 << 16)),
            max,
            backtraces,
            dropped: 0,
        }
    }

    /// Appends an event with the calling thread's context. Never panics
    /// (it runs under the allocator's lock, in the middle of its books).
    pub(crate) fn record(&mut self, e: Event) {
        // A thread being torn down (a tensor dropped by a thread-local's
        // destructor) has no context left, and a context being changed
        // right now is skipped: record the event without one.
        let (op, module, scope) = CONTEXT
            .try_with(|c| match c.try_borrow() {
                Ok(c) => (
                    c.op,
                    (!c.modules.is_empty()).then(|| c.modules.join(".")),
                    c.scopes.last().cloned(),
                ),
                Err(_) => (None, None, None),
            })
            .unwrap_or_default();
        let backtrace = self
            .backtraces
            .then(|| Arc::new(Backtrace::force_capture()));
        if self.entries.len() == self.max {
            self.entries.pop_front();
            self.dropped += 1;
        }
        self.entries.push_back(TraceEntry {
            action: e.action,
            addr: e.addr,
            size: e.size,
            block_size: e.block_size,
            stream: e.stream,
            time_us: now_us(),
            op,
            module,
            scope,
            backtrace,
            device_free: e.device_free,
        });
    }
}

/// What the allocator reports of an event (the context is added by
/// [`History::record`]).
pub(crate) struct Event {
    pub(crate) action: Action,
    pub(crate) addr: usize,
    pub(crate) size: usize,
    pub(crate) block_size: usize,
    pub(crate) stream: u64,
    pub(crate) device_free: Option<usize>,
}

/// Microseconds since the first call in this process.
pub(crate) fn now_us() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_micros() as u64
}

/// How many allocators record now: the context guards act only while it is
/// not 0.
static RECORDING: AtomicUsize = AtomicUsize::new(0);

pub(crate) fn recording_started() {
    RECORDING.fetch_add(1, Ordering::Relaxed);
}

pub(crate) fn recording_stopped() {
    RECORDING.fetch_sub(1, Ordering::Relaxed);
}

#[inline]
fn recording() -> bool {
    RECORDING.load(Ordering::Relaxed) != 0
}

#[derive(Default)]
struct Context {
    op: Option<&'static str>,
    modules: Vec<String>,
    scopes: Vec<String>,
}

thread_local! {
    static CONTEXT: RefCell<Context> = RefCell::new(Context::default());
}

/// Restores the context it changed when dropped. It stays on the thread
/// whose context it changed (not `Send`); guards dropped out of order
/// still restore each level they added.
#[must_use = "the context lasts while the guard lives"]
pub struct ContextGuard {
    undo: Undo,
    /// An op the profiler collects: ended when the guard drops.
    profiled: bool,
    _thread: PhantomData<*const ()>,
}

enum Undo {
    Nothing,
    Op(Option<&'static str>),
    /// The module path's length before the push.
    Module(usize),
    /// The scope stack's length before the push.
    Scope(usize),
}

impl ContextGuard {
    fn new(undo: Undo) -> ContextGuard {
        ContextGuard {
            undo,
            profiled: false,
            _thread: PhantomData,
        }
    }
}

impl Drop for ContextGuard {
    fn drop(&mut self) {
        if self.profiled {
            super::ops_trace::exit();
        }
        let undo = std::mem::replace(&mut self.undo, Undo::Nothing);
        if matches!(undo, Undo::Nothing) {
            return;
        }
        // A thread being torn down has no context left to restore.
        let _ = CONTEXT.try_with(|c| {
            let mut c = c.borrow_mut();
            match undo {
                Undo::Nothing => {}
                Undo::Op(prev) => c.op = prev,
                Undo::Module(len) => c.modules.truncate(len),
                Undo::Scope(len) => c.scopes.truncate(len),
            }
        });
    }
}

/// Marks the calling thread as running public op `name` until the guard
/// drops. The outermost op wins: an op that calls another (`linear` calls
/// `matmul`) is recorded as the one the user called.
///
/// The profiler (when this thread profiles) collects every op, nested ones
/// included; [`op_context_with`] gives it the input shapes.
#[inline]
pub(crate) fn op_context(name: &'static str) -> ContextGuard {
    op_context_with(name, Vec::new)
}

/// [`op_context`], with the op's input shapes for the profiler's
/// `record_shapes` (`shapes` runs only then).
#[inline]
pub(crate) fn op_context_with(
    name: &'static str,
    shapes: impl FnOnce() -> Vec<Vec<usize>>,
) -> ContextGuard {
    let profiled = super::ops_trace::active() && super::ops_trace::enter(name, shapes);
    let mut g = if !recording() {
        ContextGuard::new(Undo::Nothing)
    } else {
        CONTEXT.with(|c| {
            let mut c = c.borrow_mut();
            if c.op.is_some() {
                return ContextGuard::new(Undo::Nothing);
            }
            c.op = Some(name);
            ContextGuard::new(Undo::Op(None))
        })
    };
    g.profiled = profiled;
    g
}

/// A range that the profiler (when this thread profiles) collects as an op
/// named `name` until the guard drops; the memory history's op context is
/// left alone (`profiler::record_function`).
pub(crate) fn profiler_range(name: &'static str) -> ContextGuard {
    let mut g = ContextGuard::new(Undo::Nothing);
    g.profiled = super::ops_trace::active() && super::ops_trace::enter(name, Vec::new);
    g
}

/// Appends `name` to the calling thread's module path until the guard drops.
#[inline]
pub(crate) fn module_context(name: impl FnOnce() -> String) -> ContextGuard {
    if !recording() {
        return ContextGuard::new(Undo::Nothing);
    }
    let name = name(); // before the borrow: `name` may do anything
    CONTEXT.with(|c| {
        let mut c = c.borrow_mut();
        let len = c.modules.len();
        c.modules.push(name);
        ContextGuard::new(Undo::Module(len))
    })
}

/// Labels the calling thread's events `label` until the guard drops
/// (always kept, so that recording started inside the scope sees it).
pub(crate) fn scope_context(label: &str) -> ContextGuard {
    let label = label.to_string();
    CONTEXT.with(|c| {
        let mut c = c.borrow_mut();
        let len = c.scopes.len();
        c.scopes.push(label);
        ContextGuard::new(Undo::Scope(len))
    })
}
