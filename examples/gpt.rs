//! A small decoder-only transformer (issue 17 item 8): token and position
//! embeddings, pre-norm blocks of RMSNorm, causal multi-head attention
//! (`nn::MultiheadAttention` over the blocked `scaled_dot_product_attention`)
//! and a GELU MLP, a final RMSNorm, and an output layer tied to the token
//! embedding. It trains as a character-level model on a bundled text
//! (`data/guide.txt`: chapters 1 to 9 of this repository's GUIDE, frozen,
//! 98 KB), with a progress bar; prints the loss on held-out text, tokens
//! per second and the peak memory of a training step; then samples with
//! the key/value cache (each block's keys and values written into buffers
//! allocated once) and without it, and prints what each costs.
//!
//! `cargo run --release --example gpt` (on cuda:0 when a GPU is present).

use indicatif::{ProgressBar, ProgressStyle};
use std::time::Instant;
#[path = "models/gpt.rs"]
mod model;

use model::{corpus, Gpt, D, HEADS, LAYERS, SEQ};
use tensorscope::nn::{cross_entropy, KvCache, Module};
use tensorscope::optim::{Adam, AdamConfig, Optimizer};
use tensorscope::{autograd, memory, Device, Generator, Result, Tensor};

const BATCH: usize = 16;
const STEPS: usize = 1000;

/// `BATCH` windows of the text: inputs and next-token targets.
fn batch(data: &[i64], g: &mut Generator, dev: Device) -> Result<(Tensor, Tensor)> {
    model::windows(data, BATCH, g, dev)
}

/// The mean loss over `n` batches of held-out text.
fn eval_loss(model: &Gpt, data: &[i64], vocab: usize, dev: Device) -> Result<f32> {
    let mut g = Generator::new(99);
    autograd::no_grad(|| {
        let mut total = 0.0;
        for _ in 0..8 {
            let (x, y) = batch(data, &mut g, dev)?;
            let logits = model.forward(&x)?.reshape(&[-1, vocab as isize])?;
            total += cross_entropy(&logits, &y)?.item::<f32>()?;
        }
        Ok(total / 8.0)
    })
}

/// The next token from the last position's logits `[1, T, vocab]`,
/// sampled at temperature 0.8.
fn sample(logits: &Tensor, g: &mut Generator) -> Result<i64> {
    let t = logits.shape()[1];
    let p = logits
        .narrow(1, t - 1, 1)?
        .div_scalar(0.8)?
        .softmax(-1)?
        .to_vec::<f32>()?;
    let mut u = g.next_f64() as f32;
    for (i, &pi) in p.iter().enumerate() {
        if u < pi {
            return Ok(i as i64);
        }
        u -= pi;
    }
    Ok(p.len() as i64 - 1)
}

/// `n` new tokens after `prompt`, with the caches or by recomputing the
/// whole sequence every token; the text and the time.
fn generate(
    model: &Gpt,
    prompt: &[i64],
    n: usize,
    cached: bool,
    dev: Device,
) -> Result<(Vec<i64>, f64)> {
    let mut g = Generator::new(5);
    let mut out = prompt.to_vec();
    let start = Instant::now();
    autograd::no_grad(|| -> Result<()> {
        let mut caches: Vec<KvCache> = model
            .blocks
            .iter()
            .map(|b| b.attn.new_kv_cache(1, SEQ))
            .collect::<Result<_>>()?;
        let ids = Tensor::from_slice(prompt, &[1, prompt.len()], dev)?;
        let mut logits = if cached {
            model.logits(&ids, 0, Some(&mut caches))?
        } else {
            model.forward(&ids)?
        };
        for _ in 0..n {
            let next = sample(&logits, &mut g)?;
            out.push(next);
            logits = if cached {
                let past = out.len() - 1;
                model.logits(
                    &Tensor::from_slice(&[next], &[1, 1], dev)?,
                    past,
                    Some(&mut caches),
                )?
            } else {
                model.forward(&Tensor::from_slice(&out, &[1, out.len()], dev)?)?
            };
        }
        Ok(())
    })?;
    Ok((out, start.elapsed().as_secs_f64()))
}

fn main() -> Result<()> {
    let dev = Device::cuda_if_available();
    tensorscope::manual_seed(1);
    let (ids, chars) = corpus();
    let vocab = chars.len();
    let split = ids.len() * 9 / 10;
    let (train, held) = (&ids[..split], &ids[split..]);
    let mut model = Gpt::new(vocab, dev)?;
    model.to_device(dev)?;
    let n_params: usize = model.parameters().iter().map(|p| p.numel()).sum();
    println!(
        "gpt on {dev}: {LAYERS} blocks, d {D}, {HEADS} heads, context {SEQ}, vocabulary {vocab} characters, \
         {n_params} parameters (the output layer tied to the token embedding); text: {} characters \
         ({} for training, {} held out)",
        ids.len(),
        train.len(),
        held.len()
    );
    let before = eval_loss(&model, held, vocab, dev)?;
    let mut opt = Adam::new(AdamConfig {
        lr: 2e-3,
        ..Default::default()
    })?;
    let mut g = Generator::new(3);
    let bar = ProgressBar::new(STEPS as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} steps {msg}").expect("a valid template"),
    );
    let start = Instant::now();
    let mut peak = 0;
    let mut last = 0.0;
    for step in 0..STEPS {
        let (x, y) = batch(train, &mut g, dev)?;
        let (loss, m) = memory::measure(dev, || -> Result<f32> {
            opt.zero_grad(&model);
            let logits = model.forward(&x)?.reshape(&[-1, vocab as isize])?;
            let loss = cross_entropy(&logits, &y)?;
            loss.backward()?;
            opt.step(&mut model)?;
            loss.item::<f32>()
        })?;
        let loss = loss?;
        // Step 0 creates Adam's state; later steps show the steady peak.
        if step > 0 {
            peak = peak.max(m.peak_delta);
        }
        last = loss;
        bar.set_message(format!("loss {loss:.3}"));
        bar.inc(1);
    }
    bar.finish_and_clear();
    let secs = start.elapsed().as_secs_f64();
    let after = eval_loss(&model, held, vocab, dev)?;
    println!(
        "trained {STEPS} steps of {BATCH}x{SEQ} tokens in {secs:.1} s: {:.0} tokens/s; training loss {last:.3}; \
         held-out loss {before:.3} -> {after:.3} (uniform guess: {:.3})",
        (STEPS * BATCH * SEQ) as f64 / secs,
        (vocab as f64).ln()
    );
    println!(
        "a training step peaks {} over its start (activations, gradients; Adam's state made at step 1 excluded); \
         {} allocated now (model, Adam state)",
        memory::fmt_bytes(peak),
        memory::fmt_bytes(memory::memory_allocated(dev))
    );
    let prompt: Vec<i64> = "A tensor "
        .chars()
        .map(|c| chars.binary_search(&c).unwrap_or(0) as i64)
        .collect();
    let n = SEQ - prompt.len();
    let text = |t: &[i64]| t.iter().map(|&i| chars[i as usize]).collect::<String>();
    let held_before = memory::memory_allocated(dev);
    memory::reset_peak_memory_stats(dev);
    let (with, t_with) = generate(&model, &prompt, n, true, dev)?;
    let peak_with = memory::max_memory_allocated(dev) - held_before;
    memory::reset_peak_memory_stats(dev);
    let (without, t_without) = generate(&model, &prompt, n, false, dev)?;
    let peak_without = memory::max_memory_allocated(dev) - held_before;
    println!("sample (temperature 0.8):\n---\n{}\n---", text(&with));
    let cache_bytes = 2 * LAYERS * SEQ * D * 4;
    println!(
        "{n} tokens with the KV cache: {:.0} tokens/s, peak {} (the caches: {}); without it (the whole sequence \
         again every token): {:.0} tokens/s, peak {}; same text: {}",
        n as f64 / t_with,
        memory::fmt_bytes(peak_with),
        memory::fmt_bytes(cache_bytes),
        n as f64 / t_without,
        memory::fmt_bytes(peak_without),
        with == without
    );
    drop(opt);
    drop(model);
    println!(
        "at the end: {} allocated",
        memory::fmt_bytes(memory::memory_allocated(dev))
    );
    Ok(())
}
