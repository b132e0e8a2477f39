//! Long-running processes and their memory figures (issue 5, item 5):
//!
//! (a) 10,000 Adam training steps: allocated memory after every step is the
//!     same baseline (parameters + optimizer state + data), and reserved
//!     memory stops growing after step 2.
//! (b) a model built, used and dropped 1,000 times: allocated back to the
//!     start every time, reserved bounded, `empty_cache` brings it to 0.
//! (c) an inference service answering 10,000 requests of batch 1..=64 under
//!     no_grad: reserved memory flat after warm-up, no growth trend.
//!
//! Run with `cargo run --release --example long_running`. It uses CUDA
//! device 0 when a GPU is present and the CPU otherwise.

use std::time::Instant;
use tensorscope::autograd::no_grad_guard;
use tensorscope::memory::{self, fmt_bytes};
use tensorscope::nn::{Linear, Module, ReLU, Sequential};
use tensorscope::optim::{Adam, AdamConfig, Optimizer};
use tensorscope::{DType, Device, Generator, Result, Tensor};

/// CUDA device 0 when a GPU is present, the CPU otherwise (as the tour).
fn dev() -> Device {
    Device::cuda_if_available()
}

/// An `i`-`h`-`o` MLP (Linear, ReLU, Linear) with PyTorch's default
/// initialisation, drawn from the global generator seeded with `seed`.
fn mlp(i: usize, h: usize, o: usize, seed: u64) -> Result<Sequential> {
    tensorscope::manual_seed(seed);
    let mut net = Sequential::new();
    net.add(Linear::new(i, h)?)
        .add(ReLU)
        .add(Linear::new(h, o)?);
    net.to_device(dev())?;
    Ok(net)
}

fn training() -> Result<()> {
    println!("(a) 10,000 Adam steps, MLP 64-256-10, batch 64");
    let mut g = Generator::new(1);
    let mut model = mlp(64, 256, 10, 1)?;
    let x = Tensor::randn_with(&[64, 64], DType::F32, dev(), &mut g)?;
    let y = x.narrow(1, 0, 10)?.sin()?;
    let mut opt = Adam::new(AdamConfig {
        lr: 1e-3,
        ..Default::default()
    })?;
    let t0 = Instant::now();
    let (mut baseline, mut reserved2) = (0, 0);
    let (mut off_baseline, mut reserved_grew, mut first_loss, mut loss_v) = (0, 0, 0.0, 0.0);
    for step in 1..=10_000 {
        let loss = model.forward(&x)?.sub(&y)?.square()?.mean_all()?;
        loss.backward()?;
        opt.step(&mut model)?;
        opt.zero_grad(&model);
        loss_v = loss.item::<f32>()?;
        drop(loss);
        let (a, r) = (
            memory::memory_allocated(dev()),
            memory::memory_reserved(dev()),
        );
        match step {
            1 => {
                baseline = a;
                first_loss = loss_v;
                println!(
                    "    after step 1: allocated {} (params + Adam state + data), reserved {}",
                    fmt_bytes(a),
                    fmt_bytes(r)
                );
            }
            2 => reserved2 = r,
            _ => {}
        }
        off_baseline += usize::from(a != baseline);
        reserved_grew += usize::from(step > 2 && r > reserved2);
    }
    println!(
        "    steps 2..10000: {off_baseline} steps off the baseline, {reserved_grew} steps with reserved above step 2's {}",
        fmt_bytes(reserved2)
    );
    println!(
        "    loss {first_loss:.4} -> {loss_v:.4}; peak allocated {}; {:.1} s ({:.0} us/step)",
        fmt_bytes(memory::max_memory_allocated(dev())),
        t0.elapsed().as_secs_f64(),
        t0.elapsed().as_secs_f64() * 1e6 / 10_000.0
    );
    Ok(())
}

fn build_and_drop() -> Result<()> {
    println!("(b) a model (MLP 256-512-10) built, run forward+backward, and dropped 1,000 times");
    let start = memory::memory_allocated(dev());
    let mut g = Generator::new(2);
    let (mut not_back, mut max_reserved, mut min_reserved) = (0, 0, usize::MAX);
    let t0 = Instant::now();
    for _ in 0..1000 {
        {
            let model = mlp(256, 512, 10, 2)?;
            let x = Tensor::randn_with(&[32, 256], DType::F32, dev(), &mut g)?;
            model.forward(&x)?.square()?.sum_all()?.backward()?;
        }
        not_back += usize::from(memory::memory_allocated(dev()) != start);
        let r = memory::memory_reserved(dev());
        max_reserved = max_reserved.max(r);
        min_reserved = min_reserved.min(r);
    }
    println!(
        "    allocated back to the start ({}) after {} of 1000 builds; reserved between {} and {}",
        fmt_bytes(start),
        1000 - not_back,
        fmt_bytes(min_reserved),
        fmt_bytes(max_reserved)
    );
    memory::empty_cache(dev());
    println!(
        "    empty_cache: reserved {} (allocated {}); {:.1} s",
        fmt_bytes(memory::memory_reserved(dev())),
        fmt_bytes(memory::memory_allocated(dev())),
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

fn service() -> Result<()> {
    println!("(c) an inference service: 10,000 requests of batch 1..=64, MLP 256-512-10, no_grad");
    let mut g = Generator::new(3);
    let model = mlp(256, 512, 10, 3)?;
    let _ng = no_grad_guard();
    let base = memory::memory_allocated(dev());
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    let (n, warmup) = (10_000, 500);
    let mut reserved = Vec::with_capacity(n);
    let mut off = 0;
    let t0 = Instant::now();
    for _ in 0..n {
        let b = 1 + (next() % 64) as usize;
        let x = Tensor::randn_with(&[b, 256], DType::F32, dev(), &mut g)?;
        let _pred = model.forward(&x)?.argmax(1, false)?.to_vec::<i64>()?;
        drop(x);
        off += usize::from(memory::memory_allocated(dev()) != base);
        reserved.push(memory::memory_reserved(dev()));
    }
    let after = &reserved[warmup..];
    let (peak, low) = (*after.iter().max().unwrap(), *after.iter().min().unwrap());
    let q = after.len() / 4;
    let first_q = *after[..q].iter().max().unwrap();
    let last_q = *after[after.len() - q..].iter().max().unwrap();
    println!("    requests that left allocated memory off the baseline: {off}");
    println!(
        "    after {warmup} warm-up requests: reserved {}..{} ({:.1}% of peak at the lowest)",
        fmt_bytes(low),
        fmt_bytes(peak),
        100.0 * low as f64 / peak as f64
    );
    println!(
        "    max reserved, first quarter {} / last quarter {}; {:.1} s ({:.0} us/request)",
        fmt_bytes(first_q),
        fmt_bytes(last_q),
        t0.elapsed().as_secs_f64(),
        t0.elapsed().as_secs_f64() * 1e6 / n as f64
    );
    Ok(())
}

fn main() -> Result<()> {
    println!("long_running on {}\n", dev());
    training()?;
    build_and_drop()?;
    service()?;
    Ok(())
}
