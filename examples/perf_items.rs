//! Timing harness for issue 14, items 4 and 5 (strided plan, linear layout,
//! batched matmul, row gathers, one thread pool). Its PyTorch twin is
//! `examples/perf_items.py`; `examples/perf_items.sh` runs both, interleaved,
//! in one shell command and prints the ratios.
//!
//! ```text
//! cargo run --release --example perf_items -- [FILTER]   # one JSON line per workload
//! cargo run --release --example perf_items -- threads    # threads during matmul + elementwise
//! ```
//!
//! Every workload: 3 warm-up calls, then 15 samples of a batch of calls sized
//! so one sample takes about 20 ms; the figure is the median sample divided by
//! the batch.

use std::hint::black_box;
use std::time::{Duration, Instant};
use tensorscope::nn::{Embedding, Module};
use tensorscope::{DType, Device, Result, Tensor};

const CPU: Device = Device::Cpu;

fn time(name: &str, mut f: impl FnMut() -> Result<()>) -> Result<()> {
    for _ in 0..3 {
        f()?;
    }
    let t = Instant::now();
    f()?;
    let one = t.elapsed().as_secs_f64().max(1e-7);
    let batch = ((0.02 / one) as usize).clamp(1, 10_000);
    let mut samples = Vec::new();
    for _ in 0..15 {
        let t = Instant::now();
        for _ in 0..batch {
            f()?;
        }
        samples.push(t.elapsed().as_secs_f64() / batch as f64);
    }
    samples.sort_by(f64::total_cmp);
    println!(
        "{{\"lib\": \"tensorscope\", \"name\": \"{name}\", \"us\": {:.3}}}",
        samples[samples.len() / 2] * 1e6
    );
    Ok(())
}

fn workloads(filter: Option<&str>) -> Result<()> {
    let want = |n: &str| filter.is_none_or(|f| n.contains(f));
    let f32t = |s: &[usize]| Tensor::randn(s, DType::F32, CPU);

    // 4a: reductions and broadcasts that meet a stride-0 column.
    if want("sum_dim1") || want("bcast") || want("center") {
        let x = f32t(&[512, 1024])?;
        let col = f32t(&[512, 1])?;
        let row = f32t(&[1, 1024])?;
        if want("sum_dim1") {
            time("sum_dim1", || {
                black_box(x.sum(&[1], false)?);
                Ok(())
            })?;
        }
        if want("bcast_col") {
            time("bcast_col", || {
                black_box(x.add(&col)?);
                Ok(())
            })?;
        }
        if want("bcast_row") {
            time("bcast_row", || {
                black_box(x.add(&row)?);
                Ok(())
            })?;
        }
        if want("bcast_col_expand") {
            // The backward of a sum over dim 1: the [512, 1] gradient
            // broadcast to the input's shape.
            time("bcast_col_expand", || {
                black_box(col.expand(&[512, 1024])?.contiguous()?);
                Ok(())
            })?;
        }
        if want("center") {
            time("center", || {
                black_box(x.sub(&x.mean(&[1], true)?)?);
                Ok(())
            })?;
        }
    }
    // 4b: linear at skinny and square shapes.
    for (name, m, n, k) in [
        ("linear_512x1024_w16", 512, 16, 1024),
        ("linear_64x1024_w1024", 64, 1024, 1024),
        ("linear_1024_sq", 1024, 1024, 1024),
        ("linear_1x784_w1024", 1, 1024, 784),
    ] {
        if want(name) {
            let x = f32t(&[m, k])?;
            let w = f32t(&[n, k])?;
            time(name, || {
                black_box(x.linear(&w, None)?);
                Ok(())
            })?;
            let b = f32t(&[n])?;
            let nb = format!("{name}_bias");
            time(&nb, || {
                black_box(x.linear(&w, Some(&b))?);
                Ok(())
            })?;
        }
    }
    if want("matmul_1024") {
        let a = f32t(&[1024, 1024])?;
        let b = f32t(&[1024, 1024])?;
        time("matmul_1024", || {
            black_box(a.matmul(&b)?);
            Ok(())
        })?;
    }
    // 4c: batched matmul.
    for (name, bt, m, k, n) in [
        ("bmm_64x128x64x128", 64, 128, 64, 128),
        ("bmm_256x32x32x32", 256, 32, 32, 32),
        ("bmm_8x512x512x512", 8, 512, 512, 512),
    ] {
        if want(name) {
            let a = f32t(&[bt, m, k])?;
            let b = f32t(&[bt, k, n])?;
            time(name, || {
                black_box(a.matmul(&b)?);
                Ok(())
            })?;
        }
    }
    // 4d: row gathers and their backward.
    if want("index_select") || want("embedding") || want("index_add") {
        let table = f32t(&[50000, 256])?;
        let idx = Tensor::randint_like_rows(512, 50000)?;
        if want("index_select") {
            time("index_select_rows", || {
                black_box(table.index_select(0, &idx)?);
                Ok(())
            })?;
        }
        if want("index_add") {
            let mut acc = Tensor::zeros(&[50000, 256], DType::F32, CPU)?;
            let src = f32t(&[512, 256])?;
            time("index_add_rows", || {
                acc.index_add_(0, &idx, &src)?;
                Ok(())
            })?;
        }
        if want("embedding") {
            let emb = Embedding::new(50000, 256)?;
            time("embedding_fwd", || {
                black_box(emb.forward(&idx)?);
                Ok(())
            })?;
            time("embedding_fwd_bwd", || {
                emb.forward(&idx)?.sum_all()?.backward()?;
                emb.weight.zero_grad();
                Ok(())
            })?;
        }
    }
    Ok(())
}

/// 512 i64 indices in `0..rows`, from a fixed LCG (the same in the twin).
trait RandRows {
    fn randint_like_rows(n: usize, rows: usize) -> Result<Tensor>;
}
impl RandRows for Tensor {
    fn randint_like_rows(n: usize, rows: usize) -> Result<Tensor> {
        let mut s: u64 = 12345;
        let v: Vec<i64> = (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 33) % rows as u64) as i64
            })
            .collect();
        Tensor::from_slice(&v, &[n], CPU)
    }
}

/// (tid, name, state, utime + stime in ticks) of every thread of this process.
fn tasks() -> Vec<(u32, String, char, u64)> {
    let mut v = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return v;
    };
    for e in dir.flatten() {
        let tid: u32 = e.file_name().to_string_lossy().parse().unwrap_or(0);
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let (Some(l), Some(r)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let name = stat[l + 1..r].to_string();
        let rest: Vec<&str> = stat[r + 2..].split(' ').collect();
        // Fields after the name: state is field 3, utime 14, stime 15 (1-based).
        let state = rest[0].chars().next().unwrap_or('?');
        let t = rest[11].parse::<u64>().unwrap_or(0) + rest[12].parse::<u64>().unwrap_or(0);
        v.push((tid, name, state, t));
    }
    v
}

/// Runs matmuls and elementwise ops for 3 s while a sampler thread records
/// how many threads exist and how many are running at once.
fn threads() -> Result<()> {
    let me = std::process::id();
    let before: Vec<_> = tasks();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let st = stop.clone();
    let sampler = std::thread::spawn(move || {
        let self_tid = std::fs::read_link("/proc/thread-self")
            .ok()
            .and_then(|p| p.file_name()?.to_str()?.parse::<u32>().ok())
            .unwrap_or(0);
        let (mut samples, mut hist) = (0usize, [0usize; 16]);
        while !st.load(std::sync::atomic::Ordering::Relaxed) {
            let running = tasks()
                .iter()
                .filter(|t| t.0 != self_tid && t.2 == 'R')
                .count();
            hist[running.min(15)] += 1;
            samples += 1;
            std::thread::sleep(Duration::from_millis(2));
        }
        (samples, hist, self_tid)
    });
    let x = Tensor::randn(&[512, 1024], DType::F32, CPU)?;
    let w = Tensor::randn(&[1024, 1024], DType::F32, CPU)?;
    let t0 = Instant::now();
    let mut iters = 0;
    while t0.elapsed() < Duration::from_secs(3) {
        let y = x.matmul(&w)?;
        let z = y.add(&x)?.relu()?.mul_scalar(0.5)?;
        black_box(z.sum(&[1], false)?);
        iters += 1;
    }
    let wall = t0.elapsed().as_secs_f64();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (samples, hist, sampler_tid) = sampler.join().expect("sampler");
    let after = tasks();
    let tick = 100.0; // USER_HZ
    println!(
        "threads: pid {me}, {iters} iterations in {wall:.2} s, threads before {} after {} (sampler included)",
        before.len(),
        after.len()
    );
    for (tid, name, _, t) in &after {
        if *tid == sampler_tid {
            continue;
        }
        let t0 = before.iter().find(|b| b.0 == *tid).map_or(0, |b| b.3);
        println!(
            "  thread {tid:>7} {name:<24} cpu {:>6.2} s ({:>3.0}% of wall)",
            (t - t0) as f64 / tick,
            100.0 * (t - t0) as f64 / tick / wall
        );
    }
    let busy: Vec<String> = hist
        .iter()
        .enumerate()
        .filter(|&(_, &c)| c > 0)
        .map(|(k, &c)| format!("{k}: {:.1}%", 100.0 * c as f64 / samples as f64))
        .collect();
    println!(
        "  running threads at once ({samples} samples every 2 ms): {}",
        busy.join(", ")
    );
    Ok(())
}

fn main() -> Result<()> {
    let arg = std::env::args().nth(1);
    if arg.as_deref() == Some("threads") {
        return threads();
    }
    workloads(arg.as_deref())
}
