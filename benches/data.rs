//! Issue 15, item 7: the loader's throughput and overlap on synthetic
//! workloads; `bench/torch_data.py` runs the same workloads through
//! PyTorch's `DataLoader`, and `bench/run_data.sh` runs both in one run and
//! writes `bench/results/data.md`.
//!
//! A dataset of 4096 samples, each x `[3, 32, 32]` f32 (every element
//! i / 4096) and a label y i64 (i % 10), written by `get` straight into
//! the loader's slot. Each workload gives a per-sample cost (a sleep: I/O;
//! a spin: decoding on the CPU) and a per-batch model step (a spin on the
//! loop's thread, as in the twin, so both sides' steps cost the same):
//!
//! * `io`: 60 us sleep per sample, 3 ms step, 2 workers, batch 64;
//! * `cpu`: 20 us spin per sample, 2 ms step, 1 worker, batch 64;
//! * `fast`: no cost, no step, 2 workers, batch 64 (the loader's overhead).
//!
//! The ring has `2 x workers + 1` buffers: as many batches in flight as
//! PyTorch's default (2 per worker) plus the one the loop holds. Shuffled.
//! The first epoch is not timed (the twin's starts its workers there); the
//! figure is the median of the timed epochs. Printed per workload: epoch
//! time, samples/s, tensor allocations per batch (the CPU allocator's
//! count), and the overlap achieved as a share of the ideal: the time
//! saved against loading and stepping one after the other, over the most
//! overlapping can save (the shorter of the two),
//! `(load / workers + steps - epoch) / min(load / workers, steps)`, with
//! `load` the time measured inside `get` (a sleep overshoots its request).
//! `fast` measures each loader's own cost per sample and per batch: here a
//! write into the slot; in PyTorch the sample's tensors, the collate and
//! the transfer from the worker process.
//!
//! `cargo bench --bench data -- --json PATH [--epochs N]`

#[path = "common/timing.rs"]
mod timing;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tensorscope::data::{DataLoader, Dataset, Field, Slot};
use tensorscope::{memory, DType, Device};

const N: usize = 4096;
const BATCH: usize = 64;

#[derive(Clone, Copy)]
enum Cost {
    None,
    Sleep(u64),
    Spin(u64),
}

/// name, per-sample cost, step (us), workers
const WORKLOADS: [(&str, Cost, u64, usize); 3] = [
    ("io", Cost::Sleep(60), 3000, 2),
    ("cpu", Cost::Spin(20), 2000, 1),
    ("fast", Cost::None, 0, 2),
];

fn spin(us: u64) {
    let end = Instant::now() + Duration::from_micros(us);
    while Instant::now() < end {
        std::hint::spin_loop();
    }
}

struct Synthetic {
    fields: Vec<Field>,
    cost: Cost,
    /// Nanoseconds spent inside `get`, all workers together.
    load_ns: AtomicU64,
}

impl Dataset for Synthetic {
    fn len(&self) -> usize {
        N
    }
    fn fields(&self) -> &[Field] {
        &self.fields
    }
    fn get(&self, index: usize, slot: &mut Slot<'_>) -> tensorscope::Result<()> {
        let t = Instant::now();
        match self.cost {
            Cost::None => {}
            Cost::Sleep(us) => std::thread::sleep(Duration::from_micros(us)),
            Cost::Spin(us) => spin(us),
        }
        slot.write(0, &[index as f32 / N as f32; 3 * 32 * 32])?;
        slot.write(1, &[(index % 10) as i64])?;
        self.load_ns
            .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        Ok(())
    }
}

struct Row {
    name: &'static str,
    workers: usize,
    epochs: Vec<f64>,
    allocations_per_batch: f64,
    overlap: Option<f64>,
}

fn run(
    name: &'static str,
    cost: Cost,
    step_us: u64,
    workers: usize,
    epochs: usize,
) -> tensorscope::Result<Row> {
    let ds = Arc::new(Synthetic {
        fields: vec![
            Field::new("x", &[3, 32, 32], DType::F32),
            Field::new("y", &[], DType::I64),
        ],
        cost,
        load_ns: AtomicU64::new(0),
    });
    let mut loader = DataLoader::builder(ds.clone())
        .batch_size(BATCH)
        .shuffle(5)
        .num_workers(workers)
        .buffers(2 * workers + 1)
        .build()?;
    let mut times = Vec::new();
    let mut overlaps = Vec::new();
    let allocs0 = memory::memory_stats(Device::Cpu).allocation.all.allocated;
    for e in 0..=epochs {
        if e == 1 {
            // The timed epochs start here (the twin's first epoch starts
            // its worker processes).
            let a = memory::memory_stats(Device::Cpu).allocation.all.allocated;
            assert_eq!(a, allocs0, "an epoch allocated");
        }
        ds.load_ns.store(0, Ordering::Relaxed);
        let t = Instant::now();
        let mut rows = 0;
        let mut epoch = loader.epoch();
        while let Some(b) = epoch.next() {
            let b = b?;
            rows += b.len();
            if step_us > 0 {
                spin(step_us);
            }
        }
        drop(epoch);
        let dt = t.elapsed().as_secs_f64();
        assert_eq!(rows, N);
        if e > 0 {
            times.push(dt);
            let load = ds.load_ns.load(Ordering::Relaxed) as f64 / 1e9 / workers as f64;
            let steps = (loader.len() as u64 * step_us) as f64 / 1e6;
            if step_us > 0 {
                overlaps.push(((load + steps - dt) / load.min(steps)).clamp(0.0, 1.0));
            }
        }
    }
    let allocs = memory::memory_stats(Device::Cpu).allocation.all.allocated - allocs0;
    Ok(Row {
        name,
        workers,
        epochs: times,
        allocations_per_batch: allocs as f64 / (epochs * loader.len()) as f64,
        overlap: (!overlaps.is_empty()).then(|| timing::median(overlaps)),
    })
}

fn main() -> tensorscope::Result<()> {
    let json = timing::arg_after("--json");
    let epochs: usize = timing::arg_after("--epochs")
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let mut rows = Vec::new();
    for (name, cost, step, workers) in WORKLOADS {
        let r = run(name, cost, step, workers, epochs)?;
        let med = timing::median(r.epochs.clone());
        println!(
            "tensorscope {name}: {:.1} ms per epoch ({:.0} samples/s), {:.2} allocations per batch{}",
            med * 1e3,
            N as f64 / med,
            r.allocations_per_batch,
            r.overlap
                .map(|o| format!(", overlap {:.0}% of the ideal", 100.0 * o))
                .unwrap_or_default()
        );
        rows.push(r);
    }
    if let Some(path) = json {
        let body: Vec<String> = rows
            .iter()
            .map(|r| {
                let med = timing::median(r.epochs.clone());
                format!(
                    "  \"{}\": {{\"epoch_s\": {:?}, \"median_s\": {med}, \"samples_per_s\": {}, \"workers\": {}, \"allocations_per_batch\": {}, \"overlap\": {}}}",
                    r.name,
                    r.epochs,
                    N as f64 / med,
                    r.workers,
                    r.allocations_per_batch,
                    r.overlap.map(|o| o.to_string()).unwrap_or("null".into())
                )
            })
            .collect();
        let text = format!(
            "{{\"lib\": \"tensorscope\", \"rows\": {{\n{}\n}}}}\n",
            body.join(",\n")
        );
        std::fs::write(&path, text).expect("writing the JSON");
    }
    Ok(())
}
