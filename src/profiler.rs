//! The profiler (`torch.profiler.profile` with `record_shapes` and
//! `profile_memory`): which public ops a closure ran, how long each took
//! (self and total, nested ops apart), their input shapes, and the memory
//! each allocated and freed; as PyTorch's `key_averages().table(..)` and
//! as a Chrome trace that Perfetto and `chrome://tracing` open, with the
//! allocated bytes as counter tracks.
//!
//! ```
//! use tensorscope::profiler::{self, ProfileOptions, SortBy};
//! use tensorscope::{DType, Device, Tensor};
//! let opts = ProfileOptions { record_shapes: true, profile_memory: true, device_time: None };
//! let (y, prof) = profiler::profile(opts, || {
//!     let x = Tensor::ones(&[64, 32], DType::F32, Device::Cpu)?;
//!     x.matmul(&x.t()?)?.relu()
//! })?;
//! let y = y?;
//! println!("{}", prof.table(SortBy::SelfMemory, 10));
//! let relu = prof.key_averages().into_iter().find(|r| r.name == "relu").unwrap();
//! assert_eq!((relu.calls, relu.self_memory), (1, 64 * 64 * 4));
//! # drop(y);
//! # Ok::<(), tensorscope::Error>(())
//! ```
//!
//! What is timed is the calling thread's host time inside each op (the CPU
//! pool's threads work inside the op that forked them, so their time is
//! the op's). Other threads (loader workers) are not profiled. On CUDA the
//! host time is the launches (and synchronous copies); with
//! [`ProfileOptions::device_time`] each op is also timed on the GPU, as
//! PyTorch's event-based profiler (`use_cuda=True`) did: a timing event
//! is recorded on the device's current stream as the op starts and as it
//! ends, and the span between them is the op's device time
//! ([`OpEvent::device_us`]). While the stream has work queued, that span
//! is the op's kernels alone; on an idle stream it also holds the gap in
//! which the GPU waited for the host to launch them (PyTorch's CUPTI-based
//! profiler times kernels only: GUIDE 10, deviation 16).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;

use crate::alloc::history::{self, now_us, ContextGuard};
use crate::alloc::ops_trace::{self, DeviceClock, RawOp};
use crate::backend::cuda;
use crate::bytes::fmt_bytes;
use crate::device::Device;
use crate::error::{Error, Result};

/// What to collect beside the ops' times.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProfileOptions {
    /// Each op's input shapes (PyTorch's `record_shapes`).
    pub record_shapes: bool,
    /// The memory each op allocates and frees, and the allocated bytes
    /// over time (PyTorch's `profile_memory`).
    pub profile_memory: bool,
    /// `Some(Device::Cuda(i))`: also time each op on that GPU, with CUDA
    /// events on its current stream (PyTorch's `ProfilerActivity.CUDA`);
    /// [`profile`] then waits for the GPU before it returns. `Some(Cpu)`
    /// is an `Err`: CPU ops are timed on the host already.
    pub device_time: Option<Device>,
}

/// One op call.
#[derive(Clone, Debug)]
pub struct OpEvent {
    /// Its number: calls are numbered in the order they started, from 0
    /// (its index in [`Profile::events`]).
    pub id: u64,
    /// The op that called it ([`id`](Self::id)), `None` at depth 0.
    pub parent: Option<u64>,
    /// The public op (`"matmul"`, `"linear"`, `"backward"`, ...).
    pub name: &'static str,
    /// Microseconds since the process's first recorded event.
    pub start_us: u64,
    /// Its whole time, nested ops included.
    pub duration_us: u64,
    /// Its time outside the ops it called.
    pub self_duration_us: u64,
    /// 0 for an op the closure called, 1 for one that op called, ...
    pub depth: u32,
    /// Its input shapes (with `record_shapes`; where the op gives them).
    pub shapes: Vec<Vec<usize>>,
    /// Bytes allocated minus freed by the op itself (with `profile_memory`).
    pub self_memory: i64,
    /// Bytes allocated minus freed by the op and the ops it called.
    pub total_memory: i64,
    /// Allocations made by the op itself.
    pub allocations: u64,
    /// With [`ProfileOptions::device_time`]: microseconds of the device's
    /// stream between the op's start and end (module docs), nested ops
    /// included. `None` without it, or if an event could not be read.
    pub device_us: Option<f64>,
    /// Its device time outside the ops it called.
    pub self_device_us: Option<f64>,
    /// When the op's device time began, in the microseconds of
    /// [`start_us`](Self::start_us) (the device clock starts with
    /// profiling, after the stream's earlier work: to within the launch
    /// of one event).
    pub device_start_us: Option<f64>,
}

/// A device's allocated bytes after an allocation or a free.
#[derive(Clone, Copy, Debug)]
pub struct MemorySample {
    /// When (microseconds, as [`OpEvent::start_us`]).
    pub ts_us: u64,
    /// The device.
    pub device: Device,
    /// Its allocated bytes then.
    pub allocated: i64,
}

/// What [`profile`] collected.
#[derive(Clone, Debug, Default)]
pub struct Profile {
    /// Every op call, in the order they started.
    pub events: Vec<OpEvent>,
    /// The allocated bytes over time (with `profile_memory`).
    pub memory: Vec<MemorySample>,
}

/// One row of [`Profile::key_averages`]: every call of one op (and, when
/// grouped by shapes, one list of input shapes).
#[derive(Clone, Debug)]
pub struct OpAverage {
    /// The op.
    pub name: &'static str,
    /// The input shapes, when grouped by them.
    pub shapes: Option<Vec<Vec<usize>>>,
    /// Calls.
    pub calls: u64,
    /// Self time, all calls (microseconds).
    pub self_us: u64,
    /// Total time, all calls (microseconds); an op nested in itself counts
    /// once.
    pub total_us: u64,
    /// Self memory, all calls.
    pub self_memory: i64,
    /// Total memory, all calls.
    pub total_memory: i64,
    /// Self device time, all calls (microseconds; 0 without device times).
    pub self_device_us: f64,
    /// Total device time, all calls; an op nested in itself counts once.
    pub total_device_us: f64,
}

/// A row of [`Profile::key_averages`]: the op, and its shapes when grouped
/// by them.
type GroupKey<'a> = (&'a str, Option<&'a Vec<Vec<usize>>>);

/// The column [`Profile::table`] sorts by (largest first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortBy {
    /// Self time (`self_cpu_time_total`).
    SelfTime,
    /// Total time (`cpu_time_total`).
    TotalTime,
    /// Self memory (`self_cpu_memory_usage`).
    SelfMemory,
    /// Total memory (`cpu_memory_usage`).
    TotalMemory,
    /// Number of calls (`count`).
    Calls,
    /// Self device time (`self_cuda_time_total`).
    SelfDeviceTime,
    /// Total device time (`cuda_time_total`).
    DeviceTime,
}

/// A named range of the profile, as PyTorch's `record_function`: while
/// the guard lives, the ops the thread runs are its children, and it is an
/// [`OpEvent`] named `name` with its own times (and device time). Nothing
/// happens when the thread is not profiling. The guard stays on its thread.
///
/// ```
/// use tensorscope::profiler::{self, ProfileOptions};
/// use tensorscope::{DType, Device, Tensor};
/// let ((), prof) = profiler::profile(ProfileOptions::default(), || {
///     let _step = profiler::record_function("step");
///     let x = Tensor::ones(&[8], DType::F32, Device::Cpu).unwrap();
///     drop(x.exp().unwrap());
/// })?;
/// let step = prof.events.iter().find(|e| e.name == "step").unwrap();
/// assert!(prof.events.iter().any(|e| e.name == "exp" && e.parent == Some(step.id)));
/// # Ok::<(), tensorscope::Error>(())
/// ```
#[must_use = "the range ends when the guard drops"]
pub struct RecordFunction {
    _range: ContextGuard,
}

impl std::fmt::Debug for RecordFunction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RecordFunction")
    }
}

/// Opens a [`RecordFunction`] range named `name`.
pub fn record_function(name: &'static str) -> RecordFunction {
    RecordFunction {
        _range: history::profiler_range(name),
    }
}

/// Runs `f` with the profiler on for the calling thread and returns its
/// result with what was collected. An `Err` if this thread is already
/// profiling (profiles do not nest), or if
/// [`device_time`](ProfileOptions::device_time) names the CPU or a GPU
/// that cannot be timed.
pub fn profile<R>(options: ProfileOptions, f: impl FnOnce() -> R) -> Result<(R, Profile)> {
    let clock: Option<Box<dyn DeviceClock>> = match options.device_time {
        None => None,
        Some(Device::Cpu) => {
            return Err(Error::InvalidArgument {
                op: "profiler::profile",
                msg: "device_time times a CUDA device's stream, and cpu was given \
                      (CPU ops are timed on the host already: use device_time: None)"
                    .into(),
            })
        }
        Some(d @ Device::Cuda(_)) => Some(cuda::event_clock(d)?),
    };
    let device_base_us = now_us();
    if !ops_trace::start(options.record_shapes, options.profile_memory, clock) {
        return Err(Error::InvalidArgument {
            op: "profiler::profile",
            msg: "this thread is already profiling".into(),
        });
    }
    // Stopped even if `f` panics.
    let guard = scopeguard::guard((), |()| {
        ops_trace::stop();
    });
    let r = f();
    scopeguard::ScopeGuard::into_inner(guard);
    let collected = ops_trace::stop();
    Ok((r, Profile::from_raw(collected, device_base_us)))
}

impl Profile {
    fn from_raw(c: ops_trace::Collected, device_base_us: u64) -> Profile {
        let ops_trace::Collected {
            ops,
            samples,
            mut clock,
        } = c;
        let marks = clock.as_mut().map(|c| c.resolve()).unwrap_or_default();
        let at = |m: Option<u32>| m.and_then(|m| marks.get(m as usize).copied().flatten());
        // Each op's device span, then its children's sum by parent id (ops
        // are in id order: an op's index is its id).
        let spans: Vec<Option<(f64, f64)>> = ops
            .iter()
            .map(|o: &RawOp| {
                let (a, b) = (at(o.device_marks.0)?, at(o.device_marks.1)?);
                Some((a, (b - a).max(0.0)))
            })
            .collect();
        // A child without a span leaves its parent's own time unknown.
        let mut child_device: Vec<Option<f64>> = vec![Some(0.0); ops.len()];
        for (o, span) in ops.iter().zip(&spans) {
            if let Some(c) = o.parent.and_then(|p| child_device.get_mut(p as usize)) {
                *c = match (*c, span) {
                    (Some(sum), Some((_, d))) => Some(sum + d),
                    _ => None,
                };
            }
        }
        Profile {
            events: ops
                .into_iter()
                .zip(spans)
                .zip(child_device)
                .map(|((o, span), child_dev)| OpEvent {
                    id: o.id,
                    parent: o.parent,
                    name: o.name,
                    start_us: o.start_us,
                    duration_us: o.dur_us,
                    self_duration_us: o.dur_us.saturating_sub(o.child_us),
                    depth: o.depth,
                    shapes: o.shapes,
                    self_memory: o.self_bytes,
                    total_memory: o.total_bytes,
                    allocations: o.allocs,
                    device_us: span.map(|(_, d)| d),
                    self_device_us: span.and_then(|(_, d)| Some((d - child_dev?).max(0.0))),
                    device_start_us: span.map(|(a, _)| device_base_us as f64 + a),
                })
                .collect(),
            memory: samples
                .into_iter()
                .map(|s| MemorySample {
                    ts_us: s.ts_us,
                    device: s.device,
                    allocated: s.allocated,
                })
                .collect(),
        }
    }

    /// The calls grouped by op (PyTorch's `key_averages()`), in the order
    /// each op first ran.
    pub fn key_averages(&self) -> Vec<OpAverage> {
        self.group(false)
    }

    /// The calls grouped by op and input shapes
    /// (`key_averages(group_by_input_shape=True)`).
    pub fn key_averages_by_shapes(&self) -> Vec<OpAverage> {
        self.group(true)
    }

    fn group(&self, by_shapes: bool) -> Vec<OpAverage> {
        let mut rows: Vec<OpAverage> = Vec::new();
        let mut index: HashMap<GroupKey<'_>, usize> = HashMap::new();
        // An op nested in an op of the same name is timed by the outer one.
        let mut open: Vec<(&str, u64)> = Vec::new();
        for e in &self.events {
            while open.last().is_some_and(|&(_, end)| end <= e.start_us) {
                open.pop();
            }
            let nested_in_itself = open.iter().any(|&(n, _)| n == e.name);
            open.push((e.name, e.start_us + e.duration_us));
            let key = (e.name, by_shapes.then_some(&e.shapes));
            let k = *index.entry(key).or_insert_with(|| {
                rows.push(OpAverage {
                    name: e.name,
                    shapes: by_shapes.then(|| e.shapes.clone()),
                    calls: 0,
                    self_us: 0,
                    total_us: 0,
                    self_memory: 0,
                    total_memory: 0,
                    self_device_us: 0.0,
                    total_device_us: 0.0,
                });
                rows.len() - 1
            });
            let r = &mut rows[k];
            r.calls += 1;
            r.self_us += e.self_duration_us;
            r.self_memory += e.self_memory;
            r.self_device_us += e.self_device_us.unwrap_or(0.0);
            if !nested_in_itself {
                r.total_us += e.duration_us;
                r.total_memory += e.total_memory;
                r.total_device_us += e.device_us.unwrap_or(0.0);
            }
        }
        rows
    }

    /// [`key_averages`](Self::key_averages) as a table in the layout of
    /// PyTorch's `key_averages().table(sort_by=.., row_limit=..)`; with
    /// device times, PyTorch's CUDA columns too.
    pub fn table(&self, sort_by: SortBy, row_limit: usize) -> String {
        let mut rows = self.key_averages();
        let key = |r: &OpAverage| -> i128 {
            match sort_by {
                SortBy::SelfTime => r.self_us as i128,
                SortBy::TotalTime => r.total_us as i128,
                SortBy::SelfMemory => r.self_memory as i128,
                SortBy::TotalMemory => r.total_memory as i128,
                SortBy::Calls => r.calls as i128,
                SortBy::SelfDeviceTime => (r.self_device_us * 1e3) as i128,
                SortBy::DeviceTime => (r.total_device_us * 1e3) as i128,
            }
        };
        let device = self.events.iter().any(|e| e.device_us.is_some());
        let device_total: f64 = rows.iter().map(|r| r.self_device_us).sum::<f64>();
        rows.sort_by_key(|r| std::cmp::Reverse(key(r)));
        let self_total: u64 = rows.iter().map(|r| r.self_us).sum::<u64>().max(1);
        let us = |v: u64| {
            if v >= 1000 {
                format!("{:.3}ms", v as f64 / 1e3)
            } else {
                format!("{v}us")
            }
        };
        let mem = |v: i64| {
            let s = fmt_bytes(v.unsigned_abs() as usize);
            if v < 0 {
                format!("-{s}")
            } else {
                s
            }
        };
        let dev_us = |v: f64| {
            if v >= 1000.0 {
                format!("{:.3}ms", v / 1e3)
            } else {
                format!("{v:.3}us")
            }
        };
        let mut header = vec![
            "Name",
            "Self CPU %",
            "Self CPU",
            "CPU total %",
            "CPU total",
            "CPU time avg",
        ];
        if device {
            header.extend(["Self CUDA", "Self CUDA %", "CUDA total", "CUDA time avg"]);
        }
        header.extend(["CPU Mem", "Self CPU Mem", "# of Calls"]);
        let body: Vec<Vec<String>> = rows
            .iter()
            .take(row_limit)
            .map(|r| {
                let mut row = vec![
                    r.name.to_string(),
                    format!("{:.2}%", 100.0 * r.self_us as f64 / self_total as f64),
                    us(r.self_us),
                    format!("{:.2}%", 100.0 * r.total_us as f64 / self_total as f64),
                    us(r.total_us),
                    us(r.total_us / r.calls.max(1)),
                ];
                if device {
                    row.extend([
                        dev_us(r.self_device_us),
                        format!(
                            "{:.2}%",
                            100.0 * r.self_device_us / device_total.max(f64::MIN_POSITIVE)
                        ),
                        dev_us(r.total_device_us),
                        dev_us(r.total_device_us / r.calls.max(1) as f64),
                    ]);
                }
                row.extend([mem(r.total_memory), mem(r.self_memory), r.calls.to_string()]);
                row
            })
            .collect();
        let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
        for row in &body {
            for (w, c) in widths.iter_mut().zip(row) {
                *w = (*w).max(c.len());
            }
        }
        let rule: String = widths
            .iter()
            .map(|w| "-".repeat(*w))
            .collect::<Vec<_>>()
            .join("  ");
        let mut out = String::new();
        let line = |cells: &[String], out: &mut String| {
            let l: Vec<String> = cells
                .iter()
                .zip(&widths)
                .enumerate()
                .map(|(i, (c, w))| {
                    if i == 0 {
                        format!("{c:<w$}")
                    } else {
                        format!("{c:>w$}")
                    }
                })
                .collect();
            out.push_str(&l.join("  "));
            out.push('\n');
        };
        let _ = writeln!(out, "{rule}");
        line(
            &header.iter().map(|h| h.to_string()).collect::<Vec<_>>(),
            &mut out,
        );
        let _ = writeln!(out, "{rule}");
        for row in &body {
            line(row, &mut out);
        }
        let _ = writeln!(out, "{rule}");
        let _ = writeln!(out, "Self CPU time total: {}", us(self_total));
        if device {
            let _ = writeln!(out, "Self CUDA time total: {}", dev_us(device_total));
        }
        out
    }

    /// Writes the profile as a Chrome trace (`{"traceEvents": [...]}`,
    /// which Perfetto and `chrome://tracing` open): a complete event per op
    /// call (its shapes and memory in `args`), and a counter track of each
    /// device's allocated bytes. An `Err` naming the path if it cannot be
    /// written.
    pub fn export_chrome_trace(&self, path: impl AsRef<Path>) -> Result<()> {
        use serde_json::json;
        let path = path.as_ref();
        let mut events = Vec::with_capacity(self.events.len() + self.memory.len());
        for e in &self.events {
            events.push(json!({
                "name": e.name,
                "cat": "cpu_op",
                "ph": "X",
                "ts": e.start_us,
                "dur": e.duration_us,
                "pid": 1,
                "tid": 1,
                "args": {
                    "Input Dims": e.shapes,
                    "Self Memory": e.self_memory,
                    "Total Memory": e.total_memory,
                    "Allocations": e.allocations,
                },
            }));
        }
        for e in &self.events {
            let (Some(ts), Some(dur)) = (e.device_start_us, e.device_us) else {
                continue;
            };
            events.push(json!({
                "name": e.name,
                "cat": "device_op",
                "ph": "X",
                "ts": ts,
                "dur": dur,
                "pid": 2,
                "tid": 1,
                "args": { "Self Device Time (us)": e.self_device_us },
            }));
        }
        for m in &self.memory {
            events.push(json!({
                "name": format!("Allocated memory ({})", m.device),
                "ph": "C",
                "ts": m.ts_us,
                "pid": 1,
                "args": { "bytes": m.allocated },
            }));
        }
        let doc = json!({ "traceEvents": events, "displayTimeUnit": "ms" });
        let text = serde_json::to_string(&doc).map_err(|e| Error::Backend {
            op: "Profile::export_chrome_trace",
            msg: e.to_string(),
        })?;
        std::fs::write(path, text).map_err(|e| Error::InvalidArgument {
            op: "Profile::export_chrome_trace",
            msg: format!("{}: {e}", path.display()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A clock whose marks read fixed times (`None`: an unreadable mark).
    struct Fixed(Vec<Option<f64>>);
    impl DeviceClock for Fixed {
        fn mark(&mut self) -> Option<u32> {
            None
        }
        fn resolve(&mut self) -> Vec<Option<f64>> {
            self.0.clone()
        }
    }

    fn op(id: u64, parent: Option<u64>, name: &'static str, marks: (u32, u32)) -> RawOp {
        RawOp {
            id,
            parent,
            name,
            start_us: 100 + id,
            dur_us: 10,
            child_us: 0,
            depth: u32::from(parent.is_some()),
            shapes: Vec::new(),
            self_bytes: 0,
            total_bytes: 0,
            allocs: 0,
            device_marks: (Some(marks.0), Some(marks.1)),
        }
    }

    #[test]
    fn device_spans_nest_and_fill_the_table() {
        // outer [10, 25] holds inner [12, 20]; lost's end mark is unreadable.
        let clock = Fixed(vec![Some(10.0), Some(12.0), Some(20.0), Some(25.0), None]);
        let prof = Profile::from_raw(
            ops_trace::Collected {
                ops: vec![
                    op(0, None, "outer", (0, 3)),
                    op(1, Some(0), "inner", (1, 2)),
                    op(2, None, "lost", (3, 4)),
                    op(3, None, "parent", (0, 3)),
                    op(4, Some(3), "child", (3, 4)),
                ],
                samples: Vec::new(),
                clock: Some(Box::new(clock)),
            },
            1000,
        );
        let e = &prof.events;
        assert_eq!(e[0].device_us, Some(15.0));
        assert_eq!(e[0].self_device_us, Some(7.0));
        assert_eq!(e[0].device_start_us, Some(1010.0));
        assert_eq!(
            (e[1].device_us, e[1].self_device_us),
            (Some(8.0), Some(8.0))
        );
        assert_eq!((e[2].device_us, e[2].self_device_us), (None, None));
        // A child without a span: the parent's span stands, its own time
        // is unknown.
        assert_eq!((e[3].device_us, e[3].self_device_us), (Some(15.0), None));
        let rows = prof.key_averages();
        assert_eq!(
            (rows[0].total_device_us, rows[0].self_device_us),
            (15.0, 7.0)
        );
        let table = prof.table(SortBy::SelfDeviceTime, 10);
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[1].contains("Self CUDA %") && lines[1].contains("CUDA time avg"));
        // inner (8 us of its own) sorts above outer (7).
        assert!(
            lines[3].starts_with("inner") && lines[4].starts_with("outer"),
            "{table}"
        );
        assert!(table.contains("Self CUDA time total: 15.000us"), "{table}");
        // Without a clock: no CUDA columns.
        let plain = Profile::from_raw(
            ops_trace::Collected {
                ops: vec![op(0, None, "outer", (0, 1))],
                samples: Vec::new(),
                clock: None,
            },
            0,
        );
        assert_eq!(plain.events[0].device_us, None);
        assert!(!plain.table(SortBy::SelfTime, 10).contains("CUDA"));
    }
}
