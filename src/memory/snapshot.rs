//! Memory history and snapshots in PyTorch's format:
//! [`record_history`] (`torch.cuda.memory._record_memory_history`),
//! [`snapshot`] (`torch.cuda.memory._snapshot()`), and
//! [`Snapshot::save_pickle`], whose file PyTorch's own tools open:
//! `python -m torch.cuda._memory_viz stats|segments|trace_plot FILE`, and
//! the drag-and-drop viewer at pytorch.org/memory_viz.
//!
//! ```
//! use tensorscope::{memory, DType, Device, Tensor};
//! memory::record_history(Device::Cpu, true, 10_000)?;
//! let x = Tensor::zeros(&[256, 256], DType::F32, Device::Cpu)?;
//! let snap = memory::snapshot(Device::Cpu)?;
//! assert!(snap.trace.iter().any(|e| e.op == Some("zeros") && e.size == 256 * 1024));
//! memory::record_history(Device::Cpu, false, 0)?;
//! # drop(x);
//! # Ok::<(), tensorscope::Error>(())
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use serde_pickle::value::{HashableValue, Value};

use crate::alloc::{Action, BlockState, Pool, SegmentSnapshot, TraceEntry};
use crate::backend::allocator;
use crate::device::Device;
use crate::error::{Error, Result};

/// Starts (`enabled`) or stops recording `device`'s memory history: every
/// allocation, free, segment taken from or given back to the system, and
/// out-of-memory error, with a time stamp, the stream, the public op that
/// asked, the module path inside `Sequential`s and the innermost
/// [`scope`](super::scope) label. The history is a ring of the last
/// `max_entries` events (so it can stay on in a service); starting again
/// begins a new one. Recording changes nothing the allocator does. An
/// `Err` for a device that cannot be used, or `max_entries` 0 when
/// enabling.
pub fn record_history(device: Device, enabled: bool, max_entries: usize) -> Result<()> {
    record_history_with(device, enabled, max_entries, false)
}

/// [`record_history`], with a Rust backtrace captured for every event when
/// `backtraces` is true (expensive: tens of microseconds per event; off in
/// [`record_history`]).
pub fn record_history_with(
    device: Device,
    enabled: bool,
    max_entries: usize,
    backtraces: bool,
) -> Result<()> {
    const OP: &str = "memory::record_history";
    let a = allocator(device).map_err(|e| e.reported_as(OP))?;
    if enabled && max_entries == 0 {
        return Err(Error::InvalidArgument {
            op: OP,
            msg: "a history of 0 entries".into(),
        });
    }
    a.set_history(enabled.then_some(max_entries), backtraces);
    Ok(())
}

/// A device's memory at one moment: its segments with their blocks, and
/// the recorded history (empty unless [`record_history`] is on).
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// The device.
    pub device: Device,
    /// Every segment, in address order.
    pub segments: Vec<SegmentSnapshot>,
    /// The recorded events, oldest first.
    pub trace: Vec<TraceEntry>,
}

/// The segments and history of `device` now. An `Err` for a device that
/// cannot be used; a usable device that has allocated nothing gives an
/// empty snapshot (as PyTorch's does).
pub fn snapshot(device: Device) -> Result<Snapshot> {
    let a = allocator(device).map_err(|e| e.reported_as("memory::snapshot"))?;
    let (segments, trace) = a.snapshot();
    Ok(Snapshot {
        device,
        segments,
        trace,
    })
}

impl Snapshot {
    /// Bytes in blocks held by live storages (`memory_allocated`).
    pub fn allocated_bytes(&self) -> usize {
        self.segments
            .iter()
            .map(|s| s.bytes_in(BlockState::ActiveAllocated))
            .sum()
    }

    /// Bytes of all segments (`memory_reserved`).
    pub fn reserved_bytes(&self) -> usize {
        self.segments.iter().map(|s| s.total_size).sum()
    }

    /// The snapshot as the Python value `torch.cuda.memory._snapshot()`
    /// returns: `{"segments": [...], "device_traces": [[...]]}` with
    /// PyTorch's keys. The op, module path and scope of an event become its
    /// frames (`name`: the op; `filename`: the module path and the scope),
    /// followed by the backtrace's frames when one was captured.
    pub fn to_pickle_value(&self) -> Value {
        let device = match self.device {
            Device::Cpu => 0,
            Device::Cuda(i) => i as i64,
        };
        let segments = self
            .segments
            .iter()
            .map(|s| segment_value(s, device))
            .collect();
        let trace = self.trace.iter().map(entry_value).collect();
        let traces = match self.device {
            Device::Cpu => vec![Value::List(trace)],
            Device::Cuda(i) => {
                let mut v = vec![Value::List(Vec::new()); i + 1];
                v[i] = Value::List(trace);
                v
            }
        };
        dict(vec![
            ("segments", Value::List(segments)),
            ("device_traces", Value::List(traces)),
            ("allocator_settings", dict(vec![])),
        ])
    }

    /// Writes [`to_pickle_value`](Self::to_pickle_value) to `path` in
    /// Python's pickle format (`pickle.load` reads it; so does
    /// `python -m torch.cuda._memory_viz`). An `Err` naming the path if it
    /// cannot be written.
    pub fn save_pickle(&self, path: impl AsRef<Path>) -> Result<()> {
        const OP: &str = "Snapshot::save_pickle";
        let path = path.as_ref();
        let bytes = serde_pickle::value_to_vec(&self.to_pickle_value(), Default::default())
            .map_err(|e| Error::Backend {
                op: OP,
                msg: e.to_string(),
            })?;
        std::fs::write(path, bytes).map_err(|e| Error::InvalidArgument {
            op: OP,
            msg: format!("{}: {e}", path.display()),
        })
    }
}

fn s(v: &str) -> Value {
    Value::String(v.to_string())
}

fn int(v: usize) -> Value {
    Value::I64(v as i64)
}

fn dict(items: Vec<(&str, Value)>) -> Value {
    Value::Dict(
        items
            .into_iter()
            .map(|(k, v)| (HashableValue::String(k.to_string()), v))
            .collect::<BTreeMap<_, _>>(),
    )
}

fn segment_value(seg: &SegmentSnapshot, device: i64) -> Value {
    let blocks = seg
        .blocks
        .iter()
        .map(|b| {
            dict(vec![
                ("address", int(b.address)),
                ("size", int(b.size)),
                ("requested_size", int(b.requested_size)),
                ("state", s(b.state.name())),
                ("frames", Value::List(Vec::new())),
            ])
        })
        .collect();
    let allocated = seg.bytes_in(BlockState::ActiveAllocated);
    let active = allocated + seg.bytes_in(BlockState::ActivePendingFree);
    let requested: usize = seg.blocks.iter().map(|b| b.requested_size).sum();
    dict(vec![
        ("device", Value::I64(device)),
        ("address", int(seg.address)),
        ("total_size", int(seg.total_size)),
        ("allocated_size", int(allocated)),
        ("active_size", int(active)),
        ("requested_size", int(requested)),
        ("stream", Value::I64(seg.stream as i64)),
        (
            "segment_type",
            s(match seg.pool {
                Pool::Small => "small",
                Pool::Large => "large",
            }),
        ),
        (
            "segment_pool_id",
            Value::Tuple(vec![Value::I64(0), Value::I64(0)]),
        ),
        ("is_expandable", Value::Bool(false)),
        ("frames", Value::List(Vec::new())),
        ("blocks", Value::List(blocks)),
    ])
}

/// A frame: `{"name": .., "filename": .., "line": ..}`.
fn frame(name: &str, filename: &str, line: i64) -> Value {
    dict(vec![
        ("name", s(name)),
        ("filename", s(filename)),
        ("line", Value::I64(line)),
    ])
}

fn entry_value(e: &TraceEntry) -> Value {
    let mut frames = Vec::new();
    if e.op.is_some() || e.module.is_some() || e.scope.is_some() {
        let place = match (&e.module, &e.scope) {
            (Some(m), Some(sc)) => format!("{m} [{sc}]"),
            (Some(m), None) => m.clone(),
            (None, Some(sc)) => format!("[{sc}]"),
            (None, None) => String::new(),
        };
        frames.push(frame(e.op.unwrap_or("<no op>"), &place, 0));
    }
    if let Some(bt) = &e.backtrace {
        frames.extend(backtrace_frames(&bt.to_string()));
    }
    let mut items = vec![
        ("action", s(e.action.name())),
        ("addr", int(e.addr)),
        ("size", int(e.size)),
        ("stream", Value::I64(e.stream as i64)),
        ("time_us", Value::I64(e.time_us as i64)),
        ("frames", Value::List(frames)),
    ];
    if e.action == Action::Oom {
        items.push(("device_free", int(e.device_free.unwrap_or(0))));
    }
    dict(items)
}

/// The frames of a `std::backtrace::Backtrace`'s text: `N: name` lines,
/// each optionally followed by `at file:line:col`.
fn backtrace_frames(bt: &str) -> Vec<Value> {
    let mut out: Vec<(String, String, i64)> = Vec::new();
    for line in bt.lines() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("at ") {
            if let Some(last) = out.last_mut() {
                let mut parts = rest.rsplitn(3, ':');
                let _col = parts.next();
                let ln = parts.next().and_then(|l| l.parse().ok()).unwrap_or(0);
                last.1 = parts.next().unwrap_or(rest).to_string();
                last.2 = ln;
            }
        } else if let Some((n, name)) = t.split_once(": ")
            && n.chars().all(|c| c.is_ascii_digit())
        {
            out.push((name.to_string(), String::new(), 0));
        }
    }
    out.iter().map(|(n, f, l)| frame(n, f, *l)).collect()
}
