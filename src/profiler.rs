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
//! let (y, prof) = profiler::profile(ProfileOptions { record_shapes: true, profile_memory: true }, || {
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
//! time is the host side (launches and synchronous copies); timing the
//! device with events is still to come.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;

use crate::alloc::fmt_bytes;
use crate::alloc::ops_trace::{self, RawOp, RawSample};
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
}

/// Runs `f` with the profiler on for the calling thread and returns its
/// result with what was collected. An `Err` if this thread is already
/// profiling (profiles do not nest).
pub fn profile<R>(options: ProfileOptions, f: impl FnOnce() -> R) -> Result<(R, Profile)> {
    if !ops_trace::start(options.record_shapes, options.profile_memory) {
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
    let (ops, samples) = ops_trace::stop();
    Ok((r, Profile::from_raw(ops, samples)))
}

impl Profile {
    fn from_raw(ops: Vec<RawOp>, samples: Vec<RawSample>) -> Profile {
        Profile {
            events: ops
                .into_iter()
                .map(|o| OpEvent {
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
                });
                rows.len() - 1
            });
            let r = &mut rows[k];
            r.calls += 1;
            r.self_us += e.self_duration_us;
            r.self_memory += e.self_memory;
            if !nested_in_itself {
                r.total_us += e.duration_us;
                r.total_memory += e.total_memory;
            }
        }
        rows
    }

    /// [`key_averages`](Self::key_averages) as a table in the layout of
    /// PyTorch's `key_averages().table(sort_by=.., row_limit=..)`.
    pub fn table(&self, sort_by: SortBy, row_limit: usize) -> String {
        let mut rows = self.key_averages();
        let key = |r: &OpAverage| -> i128 {
            match sort_by {
                SortBy::SelfTime => r.self_us as i128,
                SortBy::TotalTime => r.total_us as i128,
                SortBy::SelfMemory => r.self_memory as i128,
                SortBy::TotalMemory => r.total_memory as i128,
                SortBy::Calls => r.calls as i128,
            }
        };
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
        let header = [
            "Name",
            "Self CPU %",
            "Self CPU",
            "CPU total %",
            "CPU total",
            "CPU time avg",
            "CPU Mem",
            "Self CPU Mem",
            "# of Calls",
        ];
        let body: Vec<[String; 9]> = rows
            .iter()
            .take(row_limit)
            .map(|r| {
                [
                    r.name.to_string(),
                    format!("{:.2}%", 100.0 * r.self_us as f64 / self_total as f64),
                    us(r.self_us),
                    format!("{:.2}%", 100.0 * r.total_us as f64 / self_total as f64),
                    us(r.total_us),
                    us(r.total_us / r.calls.max(1)),
                    mem(r.total_memory),
                    mem(r.self_memory),
                    r.calls.to_string(),
                ]
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
        line(&header.map(String::from), &mut out);
        let _ = writeln!(out, "{rule}");
        for row in &body {
            line(row, &mut out);
        }
        let _ = writeln!(out, "{rule}");
        let _ = writeln!(out, "Self CPU time total: {}", us(self_total));
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
