//! Lower precision (issue 49, seed 003's "use lower precision"): the GUIDE's
//! small GPT (`examples/models/gpt.rs`) trained from one seed three ways,
//! with a progress bar each:
//!
//! 1. in f32;
//! 2. under a bf16 autocast region: the products and attention in bf16,
//!    the loss in f32, the parameters and their gradients f32;
//! 3. under an f16 region with a `GradScaler`, whose skipped steps and
//!    scale are printed.
//!
//! It prints each run's loss curve, tokens per second and the peak of a
//! training step over its start, and the line
//! `peak memory: f32 <bytes> B, bf16 autocast <bytes> B`.
//!
//! `cargo run --release --example amp` (the CPU, or cuda:0 when a GPU is
//! present).

use indicatif::{ProgressBar, ProgressStyle};
use std::time::Instant;
#[path = "models/gpt.rs"]
mod model;

use model::{corpus, Gpt, SEQ};
use tensorscope::autocast::autocast_guard;
use tensorscope::nn::{cross_entropy, Module};
use tensorscope::optim::{Adam, AdamConfig, GradScaler, Optimizer};
use tensorscope::{memory, DType, Device, Generator, Result, Tensor};

const BATCH: usize = 16;
const STEPS: usize = 200;
/// Steps between the printed points of a loss curve.
const EVERY: usize = 40;

/// `BATCH` windows of the text: inputs and next-token targets.
fn batch(data: &[i64], g: &mut Generator, dev: Device) -> Result<(Tensor, Tensor)> {
    model::windows(data, BATCH, g, dev)
}

/// What one run measured.
struct Run {
    curve: Vec<f32>,
    tokens_per_s: f64,
    /// The largest peak of a step over its start, step 0 (which makes
    /// Adam's state) excluded.
    step_peak: usize,
    skipped: usize,
    scale: f64,
}

/// Trains a fresh model (seed 1) for `STEPS` steps, under a region of
/// `region` when given, with a `GradScaler` when `scaled`.
fn train(
    data: &[i64],
    vocab: usize,
    region: Option<DType>,
    scaled: bool,
    dev: Device,
) -> Result<Run> {
    tensorscope::manual_seed(1);
    let mut model = Gpt::new(vocab, dev)?;
    model.to_device(dev)?;
    let mut opt = Adam::new(AdamConfig {
        lr: 2e-3,
        ..Default::default()
    })?;
    let mut scaler = GradScaler::new();
    let mut g = Generator::new(3);
    let label = match region {
        None => "f32".to_string(),
        Some(dt) => format!("{dt} autocast{}", if scaled { " + GradScaler" } else { "" }),
    };
    let bar = ProgressBar::new(STEPS as u64);
    bar.set_style(
        ProgressStyle::with_template(&format!("{label:>24} {{bar:30}} {{pos}}/{{len}} {{msg}}"))
            .expect("a valid template"),
    );
    let (mut curve, mut step_peak, mut skipped) = (Vec::new(), 0, 0);
    let start = Instant::now();
    for step in 0..STEPS {
        let (x, y) = batch(data, &mut g, dev)?;
        let (r, m) = memory::measure(dev, || -> Result<f32> {
            opt.zero_grad(&model);
            let loss = {
                let _ac = region
                    .map(|dt| autocast_guard(dev.device_type(), dt))
                    .transpose()?;
                let logits = model.forward(&x)?.reshape(&[-1, vocab as isize])?;
                cross_entropy(&logits, &y)?
            };
            if scaled {
                scaler.scale(&loss)?.backward()?;
                if !scaler.step(&mut opt, &mut model)? {
                    skipped += 1;
                }
                scaler.update()?;
            } else {
                loss.backward()?;
                opt.step(&mut model)?;
            }
            loss.item::<f32>()
        })?;
        let loss = r?;
        if step > 0 {
            step_peak = step_peak.max(m.peak_delta);
        }
        if step % EVERY == 0 || step == STEPS - 1 {
            curve.push(loss);
        }
        bar.set_message(format!("loss {loss:.3}"));
        bar.inc(1);
    }
    bar.finish_and_clear();
    let secs = start.elapsed().as_secs_f64();
    Ok(Run {
        curve,
        tokens_per_s: (STEPS * BATCH * SEQ) as f64 / secs,
        step_peak,
        skipped,
        scale: scaler.scale_factor(),
    })
}

fn main() -> Result<()> {
    let dev = Device::cuda_if_available();
    let (ids, chars) = corpus();
    let vocab = chars.len();
    println!(
        "the GUIDE's GPT on {dev} ({}): {STEPS} Adam steps of {BATCH}x{SEQ} tokens, from one seed, three ways",
        tensorscope::cpu_capability()
    );
    let runs = [
        ("f32", train(&ids, vocab, None, false, dev)?),
        (
            "bf16 autocast",
            train(&ids, vocab, Some(DType::BF16), false, dev)?,
        ),
        (
            "f16 autocast + GradScaler",
            train(&ids, vocab, Some(DType::F16), true, dev)?,
        ),
    ];
    for (name, r) in &runs {
        let curve: Vec<String> = r.curve.iter().map(|l| format!("{l:.3}")).collect();
        println!(
            "{name:>26}: loss every {EVERY} steps {}; {:.0} tokens/s; a step peaks {} over its start",
            curve.join(" "),
            r.tokens_per_s,
            memory::fmt_bytes(r.step_peak)
        );
    }
    let f16 = &runs[2].1;
    println!(
        "GradScaler: {} of {STEPS} steps skipped (an inf or NaN gradient), final scale {}",
        f16.skipped, f16.scale
    );
    println!(
        "peak memory: f32 {} B, bf16 autocast {} B",
        runs[0].1.step_peak, runs[1].1.step_peak
    );
    println!(
        "bf16 autocast peaks at {:.2}x the f32 step and runs at {:.2}x its speed",
        runs[1].1.step_peak as f64 / runs[0].1.step_peak as f64,
        runs[1].1.tokens_per_s / runs[0].1.tokens_per_s
    );
    Ok(())
}
