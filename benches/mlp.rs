//! Issue 4 and 5 benchmarks: an MLP 784-1024-1024-10 (ReLU) at batch 128 on
//! the CPU: forward + backward, a full Adam training step, no_grad
//! inference; the autograd overhead per op on 1-element tensors; and the
//! peak activation memory of a 32-layer inference chain through
//! `Sequential` against a naive loop that keeps every intermediate.
//! `bench/run_mlp.sh` runs this and `bench/torch_mlp.py` in one go.
//!
//! Prints one `name value unit` line per figure (medians after warm-up).

use std::time::Instant;
use tensorscope::nn::{cross_entropy, Linear, Module, ReLU, Sequential};
use tensorscope::optim::{Adam, AdamConfig};
use tensorscope::{autograd, memory, DType, Device, Tensor};

#[path = "common/mlp_model.rs"]
mod mlp_model;
#[path = "common/timing.rs"]
mod timing;
use mlp_model::{adam_step, batch, mlp};
use timing::median;

const DEV: Device = Device::Cpu;

fn time(reps: usize, mut f: impl FnMut()) -> f64 {
    for _ in 0..reps.div_ceil(5).max(2) {
        f();
    }
    median(
        (0..reps)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_secs_f64()
            })
            .collect(),
    )
}

fn main() -> tensorscope::Result<()> {
    tensorscope::manual_seed(0);
    let mut net = mlp()?;
    let (x, y) = batch(DEV)?;

    let fb = time(30, || {
        net.zero_grad();
        let loss = cross_entropy(&net.forward(&x).unwrap(), &y).unwrap();
        loss.backward().unwrap();
    });
    println!("mlp_forward_backward {:.3} ms", fb * 1e3);

    let mut opt = Adam::new(AdamConfig::default())?;
    let step = time(30, || adam_step(&mut net, &mut opt, &x, &y).unwrap());
    println!("mlp_adam_step {:.3} ms", step * 1e3);
    memory::reset_peak_memory_stats(DEV);
    let base = memory::memory_allocated(DEV);
    adam_step(&mut net, &mut opt, &x, &y)?;
    println!(
        "mlp_adam_step_peak_above_model {:.3} MiB",
        (memory::max_memory_allocated(DEV) - base) as f64 / 1048576.0
    );

    let inf = time(50, || {
        autograd::no_grad(|| net.forward(&x)).unwrap();
    });
    println!("mlp_inference_no_grad {:.3} ms", inf * 1e3);

    // Autograd overhead: 100 chained adds on a 1-element leaf, then backward.
    let w = Tensor::ones(&[1], DType::F32, DEV)?.requires_grad_(true)?;
    let per_op = time(50, || {
        let mut h = w.alias();
        for _ in 0..100 {
            h = h.add(&w).unwrap();
        }
        h.backward().unwrap();
        w.zero_grad();
    }) / 100.0;
    println!("autograd_tiny_op_fwd_bwd {:.3} us", per_op * 1e6);
    let plain = Tensor::ones(&[1], DType::F32, DEV)?;
    let per_op_plain = time(50, || {
        let mut h = plain.alias();
        for _ in 0..100 {
            h = h.add(&plain).unwrap();
        }
    }) / 100.0;
    println!("tiny_op_no_graph {:.3} us", per_op_plain * 1e6);

    // Peak activation memory: 32 x (Linear(4096, 4096) + ReLU), batch 64, inference.
    let width = 4096;
    let mut chain = Sequential::new();
    for _ in 0..32 {
        chain.add(Linear::new(width, width)?).add(ReLU);
    }
    let input = Tensor::randn(&[64, width], DType::F32, DEV)?;
    let act = (64 * width * 4) as f64 / 1048576.0;
    autograd::no_grad(|| -> tensorscope::Result<()> {
        let base = memory::memory_allocated(DEV);
        memory::reset_peak_memory_stats(DEV);
        drop(chain.forward(&input)?);
        let seq = (memory::max_memory_allocated(DEV) - base) as f64 / 1048576.0;
        memory::reset_peak_memory_stats(DEV);
        let mut kept = vec![input.alias()];
        for layer in chain.layers() {
            let next = layer.forward(kept.last().expect("non-empty"))?;
            kept.push(next);
        }
        let naive = (memory::max_memory_allocated(DEV) - base) as f64 / 1048576.0;
        drop(kept);
        println!("chain32_{width}_activation_MiB {act:.3} MiB");
        println!("chain32_{width}_peak_sequential {seq:.3} MiB");
        println!("chain32_{width}_peak_naive_loop {naive:.3} MiB");
        Ok(())
    })?;
    Ok(())
}
