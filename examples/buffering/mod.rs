//! The shared body of `examples/double_buffering.rs` and
//! `examples/triple_buffering.rs`: one training-like loop fed by a
//! `DataLoader` whose ring has `buffers` slots, against the same loop with
//! the loading done inline (no overlap), printing the overlap achieved,
//! the allocations per batch and the ring's bytes.
//!
//! Loading is simulated as I/O: each sample sleeps `LOAD_US` (a file read
//! or a decode on another core), so the loading thread's waiting does not
//! compete with the compute for this machine's cores; every fourth batch
//! is `SPIKE` times slower (a cold file), which is what a third buffer
//! absorbs. One loading thread, as in the seed's loaders, so the ideal is
//! `max(loading, compute)`. The "model step" is a real matmul chain.

use indicatif::{ProgressBar, ProgressStyle};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tensorscope::data::{DataLoader, Dataset, Field, Slot};
use tensorscope::{memory, DType, Device, Tensor};

const SAMPLES: usize = 1024;
const BATCH: usize = 64;
const FEATURES: usize = 512;
/// Per sample (plus the sleep's own overhead).
const LOAD_US: u64 = 40;
/// Every fourth batch reads this many times slower.
const SPIKE: u64 = 4;

/// The simulated read of sample `index`.
fn read_delay(index: usize) -> Duration {
    let spike = if (index / BATCH) % 4 == 3 { SPIKE } else { 1 };
    Duration::from_micros(LOAD_US * spike)
}

/// Samples whose reading takes time: x[i] = a row of i's, label i % 10.
struct SlowFiles {
    fields: Vec<Field>,
    /// Nanoseconds spent in `get` (the loading worker's busy time).
    load_ns: AtomicU64,
}

impl Dataset for SlowFiles {
    fn len(&self) -> usize {
        SAMPLES
    }
    fn fields(&self) -> &[Field] {
        &self.fields
    }
    fn get(&self, index: usize, slot: &mut Slot<'_>) -> tensorscope::Result<()> {
        let t = Instant::now();
        std::thread::sleep(read_delay(index));
        slot.write(0, &[index as f32 / SAMPLES as f32; FEATURES])?;
        slot.write(1, &[(index % 10) as i64])?;
        self.load_ns
            .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        Ok(())
    }
}

/// One step of "training": a few matmuls over the batch.
fn step(x: &Tensor, w: &Tensor) -> tensorscope::Result<f32> {
    let mut h = x.matmul(w)?.relu()?;
    for _ in 0..6 {
        h = h.matmul(w)?.tanh()?;
    }
    h.mean_all()?.item::<f32>()
}

pub fn run(buffers: usize, name: &str) -> tensorscope::Result<()> {
    // The model runs on a GPU when one is present: the loader then copies
    // each batch from its pinned host ring on its own stream.
    let dev = Device::cuda_if_available();
    // The loading worker needs a core of its own: on the CPU, the model's
    // kernels get the others (on a 2-core machine, one). Without this the
    // worker's wake-ups queue behind the kernels' threads and part of the
    // overlap is lost (61-67% of the ideal instead of 90-94% on the 2-core
    // development VM).
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    if dev.is_cpu() {
        tensorscope::set_num_threads(cores.saturating_sub(1).max(1))?;
    }
    let ds = Arc::new(SlowFiles {
        fields: vec![
            Field::new("x", &[FEATURES], DType::F32),
            Field::new("label", &[1], DType::I64),
        ],
        load_ns: AtomicU64::new(0),
    });
    let w = Tensor::randn(&[FEATURES, FEATURES], DType::F32, dev)?.mul_scalar(0.05)?;
    let batches = SAMPLES / BATCH;

    // Inline: load then compute, one after the other (what a loop without
    // a loader does). Its load and compute times give the ideal.
    let (mut load, mut compute) = (Duration::ZERO, Duration::ZERO);
    let mut x = Tensor::zeros(&[BATCH, FEATURES], DType::F32, dev)?;
    let mut buf = vec![0f32; BATCH * FEATURES];
    step(&x, &w)?; // first use (kernels compiled, cuBLAS set up) outside the timing
    for b in 0..batches {
        let t = Instant::now();
        for (r, row) in buf.chunks_mut(FEATURES).enumerate() {
            std::thread::sleep(read_delay(b * BATCH + r));
            row.fill((b * BATCH + r) as f32 / SAMPLES as f32);
        }
        x.copy_(&Tensor::from_slice(&buf, &[BATCH, FEATURES], Device::Cpu)?)?;
        load += t.elapsed();
        let t = Instant::now();
        step(&x, &w)?;
        compute += t.elapsed();
    }
    let serial = load + compute;

    // Through the loader: one worker fills the ring while the loop computes.
    let mut loader = DataLoader::builder(ds.clone())
        .batch_size(BATCH)
        .num_workers(1)
        .buffers(buffers)
        .pin_memory(true)
        .device(dev)
        .build()?;
    let bar = ProgressBar::new(batches as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} batches {msg}")
            .expect("a valid template"),
    );
    let stats0 = memory::memory_stats(dev);
    let t = Instant::now();
    let mut busy = Duration::ZERO;
    let mut epoch = loader.epoch();
    while let Some(batch) = epoch.next() {
        let batch = batch?;
        let s = Instant::now();
        let loss = step(&*batch.field(0)?, &w)?;
        busy += s.elapsed();
        bar.set_message(format!("{loss:.4}"));
        bar.inc(1);
    }
    drop(epoch);
    let overlapped = t.elapsed();
    let loading = Duration::from_nanos(ds.load_ns.load(Ordering::Relaxed));
    bar.finish();
    // The loader alone: an epoch that only reads each batch.
    let stats1 = memory::memory_stats(dev);
    let mut epoch = loader.epoch();
    let mut rows = 0;
    while let Some(batch) = epoch.next() {
        rows += batch?.len();
    }
    drop(epoch);
    let stats2 = memory::memory_stats(dev);
    assert_eq!(rows, SAMPLES);

    // The overlap, from what the loader's run itself measured: the
    // worker's loading time and the loop's compute time. Perfect overlap
    // takes the longer of the two; no overlap their sum.
    let ideal = loading.max(busy);
    let hidden = (loading + busy).saturating_sub(overlapped).as_secs_f64();
    let hideable = loading.min(busy).as_secs_f64();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "{name}: {buffers} ring buffers, 1 loading worker, {batches} batches of {BATCH}, on {dev} ({} compute threads of {cores} cores)",
        tensorscope::num_threads()
    );
    println!(
        "  inline loop (no loader): loading {:.1} ms + compute {:.1} ms = {:.1} ms",
        ms(load),
        ms(compute),
        ms(serial)
    );
    println!(
        "  with the loader: {:.1} ms; its worker loaded for {:.1} ms, the loop computed for {:.1} ms (ideal, full overlap: {:.1} ms)",
        ms(overlapped),
        ms(loading),
        ms(busy),
        ms(ideal)
    );
    println!(
        "  overlap achieved: {:.0}% of the ideal (time saved over the shorter of loading and compute)",
        100.0 * (hidden / hideable).clamp(0.0, 1.0)
    );
    // When one side is far shorter (the model on a GPU: a few launches per
    // batch against milliseconds of loading), the line above divides by
    // that short time; the wall time against the ideal says the same for
    // any balance.
    println!(
        "  wall time: {:.1}% of the ideal's ({:.1} ms against {:.1} ms)",
        100.0 * ideal.as_secs_f64() / overlapped.as_secs_f64(),
        ms(overlapped),
        ms(ideal)
    );
    let with_model = stats1.allocation.all.allocated - stats0.allocation.all.allocated;
    let loader_only = stats2.allocation.all.allocated - stats1.allocation.all.allocated;
    println!(
        "  tensor allocations per batch by the loader: {:.2} ({loader_only} in an epoch that only reads the batches)",
        loader_only as f64 / batches as f64
    );
    println!(
        "  (the model step allocates its own activations: {:.1} per batch)",
        with_model as f64 / batches as f64
    );
    println!(
        "  ring: {} bytes ({buffers} x {} per batch), allocated once by build()",
        loader.ring_bytes(),
        loader.ring_bytes() / buffers
    );
    Ok(())
}
