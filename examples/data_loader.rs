//! Feeding a model from a file, lazily: the digits (data/digits.csv) and 15
//! noisy copies of each are written as one safetensors file, which a
//! `SafetensorsDataset` memory-maps and reads per sample; a `DataLoader`
//! with two worker threads, a shuffled order and a ring of three batch
//! buffers feeds an MLP (pinned buffers and a copy stream when a GPU is
//! present). Prints the accuracy, the throughput, the share of the loop
//! spent waiting for data, and the loader's allocations per batch.
//!
//! `cargo run --release --example data_loader`

#[allow(dead_code)] // the tour's digits task: only its data and model are used here
#[path = "digits.rs"]
mod digits;

use indicatif::{ProgressBar, ProgressStyle};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tensorscope::data::{DataLoader, Dataset, SafetensorsDataset, Subset};
use tensorscope::nn::{cross_entropy, save_tensors, Module};
use tensorscope::optim::{Adam, AdamConfig, Optimizer};
use tensorscope::{autograd, memory, Device, Generator, Tensor};

const COPIES: usize = 16;
const BATCH: usize = 64;
const EPOCHS: u64 = 4;

/// A seeded permutation of `0..n`.
fn permutation(n: usize, seed: u64) -> Vec<usize> {
    let mut v: Vec<usize> = (0..n).collect();
    let mut g = Generator::new(seed);
    for i in (1..n).rev() {
        v.swap(i, (g.next_u64() % (i as u64 + 1)) as usize);
    }
    v
}

/// Writes the digits and their noisy copies (sample `c * n + i` is copy `c`
/// of digit `i`; copy 0 is the original); returns the file and `n`.
fn write_file() -> tensorscope::Result<(std::path::PathBuf, usize)> {
    let (xs, ys) = digits::load();
    let n = ys.len();
    let mut g = Generator::new(3);
    let mut x = Vec::with_capacity(COPIES * xs.len());
    for c in 0..COPIES {
        x.extend(xs.iter().map(|&p| {
            let noise = if c == 0 {
                0.0
            } else {
                (g.next_u64() % 1000) as f32 / 1000.0 * 0.3 - 0.15
            };
            (p + noise).clamp(0.0, 1.0)
        }));
    }
    let y: Vec<i64> = (0..COPIES).flat_map(|_| ys.iter().copied()).collect();
    let x = Tensor::from_vec(x, &[COPIES * n, 64], Device::Cpu)?;
    let y = Tensor::from_vec(y, &[COPIES * n], Device::Cpu)?;
    let path = std::env::temp_dir().join("tensorscope-digits-lazy.safetensors");
    save_tensors(&[("x", &x), ("y", &y)], &path)?;
    Ok((path, n))
}

fn main() -> tensorscope::Result<()> {
    tensorscope::manual_seed(7);
    let dev = Device::cuda_if_available();
    let (path, n) = write_file()?;
    let file_bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    let ds = Arc::new(SafetensorsDataset::open(&path, &["x", "y"])?);
    // Hold out 20% of the digits: every copy of a training digit trains,
    // the originals of the others test.
    let order = permutation(n, 42);
    let (train_digits, test_digits) = order.split_at(n * 4 / 5);
    let train_ids: Vec<usize> = (0..COPIES)
        .flat_map(|c| train_digits.iter().map(move |&i| c * n + i))
        .collect();
    let train = Arc::new(Subset::new(ds.clone(), train_ids)?);
    let test = Arc::new(Subset::new(ds.clone(), test_digits.to_vec())?);
    println!(
        "{}: {} samples of [64] f32 + label ({:.1} MB), memory-mapped, read per sample",
        path.display(),
        COPIES * n,
        file_bytes as f64 / 1e6
    );

    let mut loader = DataLoader::builder(train.clone())
        .batch_size(BATCH)
        .shuffle(11)
        .num_workers(2)
        .buffers(3)
        .pin_memory(true)
        .device(dev)
        .build()?;
    println!(
        "loader on {dev}: {} batches of {BATCH} per epoch, 2 workers, 3 ring buffers ({} bytes{})",
        loader.len(),
        loader.ring_bytes(),
        if loader.is_pinned() {
            ", host half pinned"
        } else {
            ""
        }
    );
    let mut net = digits::model()?;
    let mut opt = Adam::new(AdamConfig {
        lr: 2e-3,
        ..Default::default()
    })?;
    let bar = ProgressBar::new(EPOCHS * loader.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} epoch {prefix} {msg}")
            .expect("a valid template"),
    );
    let (mut waiting, mut samples) = (Duration::ZERO, 0usize);
    let t0 = Instant::now();
    for e in 0..EPOCHS {
        bar.set_prefix(format!("{}", e + 1));
        let mut epoch = loader.epoch();
        loop {
            let t = Instant::now();
            let Some(batch) = epoch.next() else { break };
            waiting += t.elapsed();
            let batch = batch?;
            let (x, y) = (batch.field(0)?, batch.field(1)?);
            opt.zero_grad(&net);
            let loss = cross_entropy(&net.forward(&x)?, &y)?;
            loss.backward()?;
            opt.step(&mut net)?;
            samples += batch.len();
            bar.set_message(format!("loss {:.4}", loss.item::<f32>()?));
            bar.inc(1);
        }
    }
    let total = t0.elapsed();
    bar.finish();

    // The loader alone, for its own allocations: an epoch that only reads.
    let (cpu0, dev0) = (memory::memory_stats(Device::Cpu), memory::memory_stats(dev));
    let mut epoch = loader.epoch();
    while let Some(b) = epoch.next() {
        b?;
    }
    drop(epoch);
    let (cpu1, dev1) = (memory::memory_stats(Device::Cpu), memory::memory_stats(dev));
    let allocs = (cpu1.allocation.all.allocated - cpu0.allocation.all.allocated)
        + if dev.is_cuda() {
            dev1.allocation.all.allocated - dev0.allocation.all.allocated
        } else {
            0
        };

    // Test on the held-out originals, through a loader too.
    let mut test_loader = DataLoader::builder(test.clone())
        .batch_size(256)
        .device(dev)
        .build()?;
    let mut correct = 0i64;
    let mut epoch = test_loader.epoch();
    while let Some(b) = epoch.next() {
        let b = b?;
        correct += autograd::no_grad(|| {
            net.forward(&*b.field(0)?)?
                .argmax(1, false)?
                .eq(&*b.field(1)?)?
                .sum_all()?
                .item::<i64>()
        })?;
    }
    drop(epoch);

    println!(
        "trained {EPOCHS} epochs ({samples} samples) in {:.2} s: {:.0} samples/s",
        total.as_secs_f64(),
        samples as f64 / total.as_secs_f64()
    );
    println!(
        "time the loop waited for data: {:.1} ms ({:.1}% of the loop)",
        waiting.as_secs_f64() * 1e3,
        100.0 * waiting.as_secs_f64() / total.as_secs_f64()
    );
    println!(
        "tensor allocations by the loader in an epoch of {} batches: {allocs}",
        loader.len()
    );
    println!(
        "held-out digits: test accuracy {:.2}% ({correct} of {})",
        100.0 * correct as f64 / test.len() as f64,
        test.len()
    );
    drop((loader, test_loader, train, test, ds));
    std::fs::remove_file(&path).ok();
    Ok(())
}
