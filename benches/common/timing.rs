//! The timing harness shared by `benches/cpu.rs` and candle's side of the
//! same benchmark (`bench/peers`, which includes this file by path): the
//! same warm-up, sampling, median and JSON format on both sides.
#![allow(dead_code)] // each includer uses a different part

use std::time::Instant;

/// The benches' result type.
pub type R<T> = Result<T, Box<dyn std::error::Error>>;

/// The median of `v` (the mean of the two middle values for an even count).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// One workload's samples, in seconds per operation.
pub struct Measured {
    pub name: &'static str,
    pub what: &'static str,
    pub samples: Vec<f64>,
    /// The growth of the resident set during one call, where measured.
    pub peak_bytes: Option<u64>,
}

impl Measured {
    pub fn median(&self) -> f64 {
        median(self.samples.clone())
    }
    pub fn min(&self) -> f64 {
        self.samples.iter().copied().fold(f64::INFINITY, f64::min)
    }
    pub fn max(&self) -> f64 {
        self.samples.iter().copied().fold(0.0, f64::max)
    }
}

/// Runs `op` `warmup` times, then takes `reps` samples of `batch` calls each.
pub fn measure(
    name: &'static str,
    what: &'static str,
    warmup: usize,
    reps: usize,
    batch: usize,
    mut op: impl FnMut() -> R<()>,
) -> R<Measured> {
    for _ in 0..warmup {
        op()?;
    }
    let mut samples = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        for _ in 0..batch {
            op()?;
        }
        samples.push(t.elapsed().as_secs_f64() / batch as f64);
    }
    Ok(Measured {
        name,
        what,
        samples,
        peak_bytes: None,
    })
}

/// Sample-count rule of the op matrix (`benches/ops.rs`, `bench/torch_ops.py`
/// does the same): one cold call, one timed call as the estimate `t`, then
/// `batch = ceil(1 ms / t)` calls per sample (so tiny ops are not timed at the
/// clock's resolution), `batch - 1` more warm-up calls (none for an op of a
/// millisecond or more: the two calls warmed it), and as many samples as fit
/// in `budget_s`, at least `min_reps` and at most 50.
pub fn measure_budget(
    name: &'static str,
    what: &'static str,
    budget_s: f64,
    min_reps: usize,
    mut op: impl FnMut() -> R<()>,
) -> R<Measured> {
    op()?;
    let t = Instant::now();
    op()?;
    let est = t.elapsed().as_secs_f64().max(1e-9);
    let batch = ((1e-3 / est).ceil() as usize).clamp(1, 10_000);
    let reps = ((budget_s / (est * batch as f64)) as usize).clamp(min_reps, 50);
    measure(name, what, batch - 1, reps, batch, &mut op)
}

/// The command-line value after `flag` (`--json PATH`, `--filter NAME`).
pub fn arg_after(flag: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1).cloned())
}

fn json_escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// The names of `--filter A,B,..` (empty: every row).
pub fn filter_arg() -> Vec<String> {
    arg_after("--filter")
        .map(|f| f.split(',').map(str::to_owned).collect())
        .unwrap_or_default()
}

/// Writes tensorscope's results as the JSON that `bench/report.py`
/// merges, when `--json PATH` gave a path.
pub fn write_json(path: Option<String>, threads: usize, results: &[Measured]) -> R<()> {
    let Some(path) = path else {
        return Ok(());
    };
    let (library, version) = ("tensorscope", env!("CARGO_PKG_VERSION"));
    let rows: Vec<String> = results
        .iter()
        .map(|m| {
            format!(
                "    \"{}\": {{\"median_s\": {:e}, \"min_s\": {:e}, \"max_s\": {:e}, \"samples\": {}, \"what\": \"{}\"{}}}",
                m.name,
                m.median(),
                m.min(),
                m.max(),
                m.samples.len(),
                json_escape(m.what),
                m.peak_bytes
                    .map_or(String::new(), |b| format!(", \"peak_bytes\": {b}"))
            )
        })
        .collect();
    let s = format!(
        "{{\n  \"library\": \"{library}\",\n  \"version\": \"{version}\",\n  \"threads\": {threads},\n  \"workloads\": {{\n{}\n  }}\n}}\n",
        rows.join(",\n")
    );
    std::fs::write(path, s)?;
    Ok(())
}

/// A duration in seconds as ms, us or ns, for the tables.
pub fn fmt_s(s: f64) -> String {
    if s >= 1e-3 {
        format!("{:.3} ms", s * 1e3)
    } else if s >= 1e-6 {
        format!("{:.3} us", s * 1e6)
    } else {
        format!("{:.1} ns", s * 1e9)
    }
}
