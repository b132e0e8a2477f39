//! A real task: an MLP on the UCI 8x8 handwritten digits (1,797 samples,
//! committed in `data/digits.csv`, as scikit-learn ships them), trained with
//! Adam, with a progress bar showing loss and memory. The best weights are
//! snapshotted, saved as safetensors, reloaded into a fresh model, and
//! evaluated.
//!
//! `cargo run --release --example digits`

use indicatif::{ProgressBar, ProgressStyle};
use tensorscope::nn::{
    cross_entropy, load_safetensors, save_safetensors, snapshot, Linear, Module, ReLU, Sequential,
};
use tensorscope::optim::{Adam, AdamConfig, Optimizer};
use tensorscope::{autograd, memory, Device, Generator, Tensor};

/// CUDA device 0 when a GPU is present, the CPU otherwise (as the tour).
fn dev() -> Device {
    Device::cuda_if_available()
}

pub fn model() -> tensorscope::Result<Sequential> {
    let mut net = Sequential::new();
    net.add(Linear::new(64, 128)?)
        .add(ReLU)
        .add(Linear::new(128, 64)?)
        .add(ReLU)
        .add(Linear::new(64, 10)?);
    net.to_device(dev())?;
    Ok(net)
}

/// Rows of `data/digits.csv`: 64 pixels (0..16) then the label.
pub fn load() -> (Vec<f32>, Vec<i64>) {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/data/digits.csv"))
        .expect("data/digits.csv");
    let (mut x, mut y) = (Vec::new(), Vec::new());
    for line in text.lines().filter(|l| !l.is_empty()) {
        let v: Vec<f32> = line
            .split(',')
            .map(|s| s.trim().parse().expect("a number"))
            .collect();
        x.extend(v[..64].iter().map(|p| p / 16.0));
        y.push(v[64] as i64);
    }
    (x, y)
}

/// The sample order of the train/test split (a seeded shuffle of `0..n`)
/// and how many of its first entries train (80%); the CNN example uses
/// the same split.
pub fn split(n: usize) -> (Vec<usize>, usize) {
    let mut order: Vec<usize> = (0..n).collect();
    let mut g = Generator::new(42);
    for i in (1..n).rev() {
        order.swap(i, (g.next_u64() % (i as u64 + 1)) as usize);
    }
    (order, n * 4 / 5)
}

/// Samples `ids` of (`xs`, `ys`) on `dev`: the pixels as `shape`, the
/// labels as `[ids.len()]`.
pub fn pick(
    xs: &[f32],
    ys: &[i64],
    ids: &[usize],
    shape: &[usize],
    dev: Device,
) -> tensorscope::Result<(Tensor, Tensor)> {
    let x: Vec<f32> = ids
        .iter()
        .flat_map(|&i| xs[i * 64..(i + 1) * 64].iter().copied())
        .collect();
    let y: Vec<i64> = ids.iter().map(|&i| ys[i]).collect();
    Ok((
        Tensor::from_vec(x, shape, dev)?,
        Tensor::from_vec(y, &[ids.len()], dev)?,
    ))
}

/// Accuracy of `net` on (x, y), without a graph.
pub fn accuracy(net: &Sequential, x: &Tensor, y: &Tensor) -> tensorscope::Result<f64> {
    autograd::no_grad(|| {
        let correct = net
            .forward(x)?
            .argmax(1, false)?
            .eq(y)?
            .sum_all()?
            .item::<i64>()?;
        Ok(correct as f64 / y.numel() as f64)
    })
}

/// Trains, snapshots, saves, reloads and evaluates; returns the reloaded
/// model's test accuracy. (The tour calls this too.)
/// The indices `0..n` in a fresh order for one epoch (Fisher-Yates from
/// `g`): the digits examples' shuffle.
pub fn shuffled(n: usize, g: &mut Generator) -> Vec<i64> {
    let mut ids: Vec<i64> = (0..n as i64).collect();
    for i in (1..ids.len()).rev() {
        ids.swap(i, (g.next_u64() % (i as u64 + 1)) as usize);
    }
    ids
}

/// The digits examples' progress bar over `steps` training steps.
pub fn epoch_bar(steps: usize) -> ProgressBar {
    let bar = ProgressBar::new(steps as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} epoch {prefix} {msg}")
            .expect("a valid template"),
    );
    bar
}

pub fn run() -> tensorscope::Result<f64> {
    tensorscope::manual_seed(7);
    let (xs, ys) = load();
    let n = ys.len();
    let (order, n_train) = split(n);
    let pick = |ids: &[usize]| pick(&xs, &ys, ids, &[ids.len(), 64], dev());
    let (x_train, y_train) = pick(&order[..n_train])?;
    let (x_test, y_test) = pick(&order[n_train..])?;
    println!(
        "digits on {}: {n} samples, {n_train} for training, {} for testing",
        dev(),
        n - n_train
    );

    let mut net = model()?;
    let mut opt = Adam::new(AdamConfig {
        lr: 3e-3,
        ..Default::default()
    })?;
    let (epochs, batch) = (40usize, 64usize);
    let steps_per_epoch = n_train.div_ceil(batch);
    let bar = epoch_bar(epochs * steps_per_epoch);
    let mut best = (0.0, Vec::new(), 0);
    let mut shuffle = Generator::new(1);
    for epoch in 1..=epochs {
        let ids = shuffled(n_train, &mut shuffle);
        bar.set_prefix(format!("{epoch:>2}"));
        for chunk in ids.chunks(batch) {
            let idx = Tensor::from_slice(chunk, &[chunk.len()], dev())?;
            let (xb, yb) = (
                x_train.index_select(0, &idx)?,
                y_train.index_select(0, &idx)?,
            );
            opt.zero_grad(&net);
            let loss = cross_entropy(&net.forward(&xb)?, &yb)?;
            loss.backward()?;
            opt.step(&mut net)?;
            bar.set_message(format!(
                "loss {:.4}  allocated {}  reserved {}",
                loss.item::<f32>()?,
                memory::fmt_bytes(memory::memory_allocated(dev())),
                memory::fmt_bytes(memory::memory_reserved(dev()))
            ));
            bar.inc(1);
        }
        let acc = accuracy(&net, &x_test, &y_test)?;
        if acc > best.0 {
            best = (acc, snapshot(&net)?, epoch);
        }
    }
    bar.finish();
    println!(
        "best test accuracy {:.2}% at epoch {}",
        100.0 * best.0,
        best.2
    );

    // Save the best weights as safetensors, reload them into a fresh model.
    let path = std::env::temp_dir().join("tensorscope-digits-best.safetensors");
    let mut best_net = model()?;
    tensorscope::nn::load_state_dict(&mut best_net, &best.1)?;
    save_safetensors(&best_net, &path)?;
    let mut reloaded = model()?;
    load_safetensors(&mut reloaded, &path)?;
    let acc = accuracy(&reloaded, &x_test, &y_test)?;
    println!(
        "reloaded from {}: test accuracy {:.2}%",
        path.display(),
        100.0 * acc
    );
    Ok(acc)
}

#[allow(dead_code)] // unused when the tour includes this file as a module
fn main() -> tensorscope::Result<()> {
    let acc = run()?;
    assert!(
        acc >= 0.95,
        "the reloaded model reaches at least 95% test accuracy"
    );
    Ok(())
}
