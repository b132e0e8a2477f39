//! [`Snapshot::save_html`]: a picture of a snapshot in one self-contained
//! HTML file (inline SVG and a few lines of script, nothing fetched): the
//! allocated memory over the recorded history stacked by op, the segment
//! map, and the largest tensors alive at the peak.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;

use super::snapshot::Snapshot;
use crate::alloc::{Action, BlockState, TraceEntry};
use crate::bytes::fmt_bytes;
use crate::error::{Error, Result};

/// Points drawn at most on the timeline (the history is sampled in
/// buckets, each drawn at its highest point, so no peak is lost).
const MAX_POINTS: usize = 1500;
/// Categories drawn apart; the rest are "other".
const TOP: usize = 8;
const PALETTE: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac",
];
const BEFORE: &str = "(allocated before the history)";

/// A live block while the history is replayed.
#[derive(Clone)]
struct Live {
    size: usize,
    category: usize,
    entry: Option<usize>,
}

/// The history replayed in occupied (rounded) bytes, as
/// `memory_allocated` counts them: the allocated bytes per category after
/// each event, the peak and what was alive then.
struct Replay {
    categories: Vec<String>,
    /// (time_us, bytes per category) after sampled events.
    points: Vec<(u64, Vec<usize>)>,
    peak: usize,
    peak_time: u64,
    /// The blocks alive at the peak: (size, trace index of their alloc).
    at_peak: Vec<(usize, Option<usize>)>,
}

fn category(e: &TraceEntry) -> String {
    e.op.unwrap_or("(no op)").to_string()
}

fn replay(snap: &Snapshot) -> Replay {
    let trace = &snap.trace;
    // What was allocated before the first recorded event: the snapshot's
    // allocated bytes minus the history's net change.
    let mut net: i64 = 0;
    for e in trace {
        match e.action {
            Action::Alloc => net += e.block_size as i64,
            Action::FreeRequested => net -= e.block_size as i64,
            _ => {}
        }
    }
    let baseline = (snap.allocated_bytes() as i64 - net).max(0) as usize;
    let mut names: Vec<String> = vec![BEFORE.to_string()];
    let mut index: HashMap<String, usize> = HashMap::new();
    index.insert(BEFORE.to_string(), 0);
    let cat_of = |e: &TraceEntry, names: &mut Vec<String>, index: &mut HashMap<String, usize>| {
        let c = category(e);
        *index.entry(c.clone()).or_insert_with(|| {
            names.push(c);
            names.len() - 1
        })
    };
    // Pass 1: the totals, to find the peak.
    let mut total = baseline;
    let (mut peak, mut peak_at) = (baseline, None);
    for (i, e) in trace.iter().enumerate() {
        match e.action {
            Action::Alloc => total += e.block_size,
            Action::FreeRequested => total = total.saturating_sub(e.block_size),
            _ => continue,
        }
        if total > peak {
            (peak, peak_at) = (total, Some(i));
        }
    }
    // Pass 2: per category, sampled; the live set at the peak.
    let n = trace.len().max(1);
    let bucket = n.div_ceil(MAX_POINTS).max(1);
    let mut live: HashMap<usize, Live> = HashMap::new();
    let mut per: Vec<usize> = vec![baseline];
    let mut points = vec![(trace.first().map_or(0, |e| e.time_us), per.clone())];
    let mut best: Option<(usize, u64, Vec<usize>)> = None;
    let mut at_peak = Vec::new();
    for (i, e) in trace.iter().enumerate() {
        match e.action {
            Action::Alloc => {
                let c = cat_of(e, &mut names, &mut index);
                if per.len() < names.len() {
                    per.resize(names.len(), 0);
                }
                per[c] += e.block_size;
                live.insert(
                    e.addr,
                    Live {
                        size: e.block_size,
                        category: c,
                        entry: Some(i),
                    },
                );
            }
            Action::FreeRequested => match live.remove(&e.addr) {
                Some(l) => per[l.category] = per[l.category].saturating_sub(l.size),
                None => per[0] = per[0].saturating_sub(e.block_size),
            },
            _ => {}
        }
        let sum: usize = per.iter().sum();
        if best.as_ref().is_none_or(|b| sum > b.0) {
            best = Some((sum, e.time_us, per.clone()));
        }
        if Some(i) == peak_at {
            at_peak = live.values().map(|l| (l.size, l.entry)).collect();
        }
        if ((i + 1) % bucket == 0 || i + 1 == trace.len())
            && let Some((_, t, p)) = best.take()
        {
            points.push((t, p));
        }
    }
    if peak_at.is_none() {
        // The peak is the start: everything then predates the history.
        at_peak = snap
            .segments
            .iter()
            .flat_map(|s| &s.blocks)
            .filter(|b| b.state == BlockState::ActiveAllocated)
            .map(|b| (b.size, None))
            .collect();
    }
    let peak_time = peak_at.map_or(points[0].0, |i| trace[i].time_us);
    Replay {
        categories: names,
        points,
        peak,
        peak_time,
        at_peak,
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The stacked timeline as SVG.
fn timeline(r: &Replay, out: &mut String) {
    let (w, h, left, bottom) = (960.0, 320.0, 80.0, 30.0);
    // Categories by their largest amount, the top ones drawn apart.
    let mut order: Vec<usize> = (0..r.categories.len()).collect();
    let top_of = |c: usize| {
        r.points
            .iter()
            .map(|p| p.1.get(c).copied().unwrap_or(0))
            .max()
            .unwrap_or(0)
    };
    order.sort_by_key(|&c| std::cmp::Reverse(top_of(c)));
    let shown: Vec<usize> = order
        .iter()
        .copied()
        .filter(|&c| top_of(c) > 0)
        .take(TOP)
        .collect();
    let t0 = r.points.first().map_or(0, |p| p.0);
    let t1 = r.points.last().map_or(1, |p| p.0).max(t0 + 1);
    let ymax = r.peak.max(1) as f64;
    let x = |t: u64| left + (t - t0) as f64 / (t1 - t0) as f64 * (w - left - 10.0);
    let y = |b: f64| h - bottom - b / ymax * (h - bottom - 20.0);
    let _ = write!(
        out,
        r#"<svg id="timeline" width="{w}" height="{h}" data-peak-bytes="{}" xmlns="http://www.w3.org/2000/svg">"#,
        r.peak
    );
    // Stacked bands, bottom up: the shown categories, then "other".
    let mut base = vec![0f64; r.points.len()];
    let mut bands: Vec<(String, &str, Vec<f64>)> = Vec::new();
    for (k, &c) in shown.iter().enumerate() {
        let v: Vec<f64> = r
            .points
            .iter()
            .map(|p| p.1.get(c).copied().unwrap_or(0) as f64)
            .collect();
        bands.push((r.categories[c].clone(), PALETTE[k % PALETTE.len()], v));
    }
    let other: Vec<f64> = r
        .points
        .iter()
        .map(|p| {
            p.1.iter()
                .enumerate()
                .filter(|(c, _)| !shown.contains(c))
                .map(|(_, &b)| b as f64)
                .sum()
        })
        .collect();
    if other.iter().any(|&v| v > 0.0) {
        bands.push(("other".into(), PALETTE[9], other));
    }
    for (name, color, v) in &bands {
        let mut pts = String::new();
        for (i, p) in r.points.iter().enumerate() {
            let _ = write!(pts, "{:.1},{:.1} ", x(p.0), y(base[i] + v[i]));
        }
        for i in (0..r.points.len()).rev() {
            let _ = write!(pts, "{:.1},{:.1} ", x(r.points[i].0), y(base[i]));
            base[i] += v[i];
        }
        let _ = write!(
            out,
            r#"<polygon class="band" points="{pts}" fill="{color}" fill-opacity="0.85"><title>{}</title></polygon>"#,
            esc(name)
        );
    }
    // Axes, the peak line and its label.
    let _ = write!(
        out,
        r##"<line x1="{left}" y1="{}" x2="{}" y2="{}" stroke="#333"/><line x1="{left}" y1="20" x2="{left}" y2="{}" stroke="#333"/>"##,
        h - bottom,
        w - 10.0,
        h - bottom,
        h - bottom
    );
    for k in 0..=4 {
        let b = ymax * k as f64 / 4.0;
        let _ = write!(
            out,
            r##"<text x="{}" y="{:.1}" font-size="11" text-anchor="end">{}</text>"##,
            left - 4.0,
            y(b) + 4.0,
            fmt_bytes(b as usize)
        );
    }
    let _ = write!(
        out,
        r##"<text x="{left}" y="{}" font-size="11">0 ms</text><text x="{}" y="{}" font-size="11" text-anchor="end">{:.1} ms</text>"##,
        h - 8.0,
        w - 10.0,
        h - 8.0,
        (t1 - t0) as f64 / 1e3
    );
    let px = x(r.peak_time.clamp(t0, t1));
    let _ = write!(
        out,
        r##"<line x1="{px:.1}" y1="20" x2="{px:.1}" y2="{}" stroke="#c00" stroke-dasharray="4 3"/><text id="peak" x="{:.1}" y="14" font-size="12" fill="#c00">peak {}</text></svg>"##,
        h - bottom,
        (px - 40.0).max(left),
        fmt_bytes(r.peak)
    );
    out.push_str("<div class=\"legend\">");
    for (name, color, _) in &bands {
        let _ = write!(
            out,
            r#"<span><i style="background:{color}"></i>{}</span>"#,
            esc(name)
        );
    }
    out.push_str("</div>");
}

/// One bar per segment, its blocks coloured by state.
fn segment_map(snap: &Snapshot, out: &mut String) {
    let w = 960.0;
    let rows = snap.segments.len().max(1);
    let _ = write!(
        out,
        r#"<svg id="segments" width="{w}" height="{}" xmlns="http://www.w3.org/2000/svg">"#,
        rows * 22 + 4
    );
    for (k, s) in snap.segments.iter().enumerate() {
        let y0 = 2 + k * 22;
        let mut x0 = 250.0;
        for b in &s.blocks {
            let bw = b.size as f64 / s.total_size.max(1) as f64 * (w - 260.0);
            let color = match b.state {
                BlockState::ActiveAllocated => "#4e79a7",
                BlockState::ActivePendingFree => "#f28e2b",
                BlockState::Inactive => "#ddd",
            };
            let _ = write!(
                out,
                r#"<rect x="{x0:.1}" y="{y0}" width="{:.2}" height="18" fill="{color}" stroke="white" stroke-width="0.3"><title>{} at {:#x}: {}</title></rect>"#,
                bw.max(0.5),
                b.state.name(),
                b.address,
                fmt_bytes(b.size)
            );
            x0 += bw;
        }
        let _ = write!(
            out,
            r#"<text x="0" y="{}" font-size="11">{:#x} {} (stream {})</text>"#,
            y0 + 13,
            s.address,
            fmt_bytes(s.total_size),
            s.stream
        );
    }
    out.push_str("</svg>");
}

impl Snapshot {
    /// Writes a picture of this snapshot to `path`: one self-contained HTML
    /// file (no network, no external script) with the allocated memory
    /// over the recorded history stacked by op, the peak marked, the
    /// segment map (blocks allocated, pending or free), and the largest
    /// tensors alive at the peak with the op, module path and scope that
    /// made them. Without a recorded history the timeline is one point.
    /// An `Err` naming the path if it cannot be written.
    pub fn save_html(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let r = replay(self);
        let mut out = String::with_capacity(64 * 1024);
        let _ = write!(
            out,
            r#"<!DOCTYPE html><html><head><meta charset="utf-8"><title>tensorscope memory: {}</title><style>
body{{font-family:sans-serif;margin:20px;color:#222}} h2{{font-size:16px;margin-top:28px}}
.legend span{{margin-right:14px;font-size:12px}} .legend i{{display:inline-block;width:10px;height:10px;margin-right:4px}}
table{{border-collapse:collapse;font-size:12px}} td,th{{border-bottom:1px solid #eee;padding:2px 10px;text-align:left}}
</style></head><body data-rendered="no"><h1 style="font-size:20px">Memory of {}</h1>"#,
            self.device, self.device
        );
        let _ = write!(
            out,
            "<p>{} events recorded; now {} allocated, {} reserved in {} segments; peak over the history <b id=\"peak-bytes\">{}</b> bytes ({}).</p>",
            self.trace.len(),
            fmt_bytes(self.allocated_bytes()),
            fmt_bytes(self.reserved_bytes()),
            self.segments.len(),
            r.peak,
            fmt_bytes(r.peak)
        );
        out.push_str("<h2>Allocated memory over the history, by op</h2>");
        timeline(&r, &mut out);
        out.push_str("<h2>Segments now</h2>");
        segment_map(self, &mut out);
        out.push_str("<h2>Largest tensors alive at the peak</h2><table><tr><th>size</th><th>op</th><th>module</th><th>scope</th><th>allocated at (from the first event)</th></tr>");
        let t0 = self.trace.first().map_or(0, |e| e.time_us);
        let mut at_peak = r.at_peak.clone();
        at_peak.sort_by_key(|&(s, _)| std::cmp::Reverse(s));
        for (size, entry) in at_peak.iter().take(20) {
            let e = entry.map(|i| &self.trace[i]);
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                fmt_bytes(*size),
                esc(e
                    .and_then(|e| e.op)
                    .unwrap_or(if e.is_some() { "(no op)" } else { BEFORE })),
                esc(e.and_then(|e| e.module.as_deref()).unwrap_or("")),
                esc(e.and_then(|e| e.scope.as_deref()).unwrap_or("")),
                e.map(|e| format!("{:.3} ms", (e.time_us - t0) as f64 / 1e3))
                    .unwrap_or_default()
            );
        }
        let _ = write!(
            out,
            "</table><p>{} tensors alive at the peak.</p><script>document.body.dataset.rendered = document.querySelectorAll('#timeline polygon').length + ' bands';</script></body></html>",
            at_peak.len()
        );
        std::fs::write(path, out).map_err(|e| Error::InvalidArgument {
            op: "Snapshot::save_html",
            msg: format!("{}: {e}", path.display()),
        })
    }
}
