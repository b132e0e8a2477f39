//! Sequential and buffer donation: the peak activation memory of a 32-layer,
//! 1024-wide inference chain (batch 64), Sequential against a naive loop that
//! keeps every intermediate in a Vec, plus the donation statistics.
//!
//! Run: `cargo run --release --example sequential`

use tensorscope::nn::{Linear, Module, ReLU, Sequential, Sigmoid, Tanh, GELU};
use tensorscope::{autograd, memory, DType, Device, Result, Tensor};

const CPU: Device = Device::Cpu;

/// Peak bytes allocated above the current level while `f` runs.
fn peak_above<R>(f: impl FnOnce() -> Result<R>) -> Result<(usize, R)> {
    let base = memory::memory_allocated(CPU);
    memory::reset_peak_memory_stats(CPU);
    let r = f()?;
    Ok((memory::max_memory_allocated(CPU) - base, r))
}

fn main() -> Result<()> {
    let (layers, width, batch) = (32, 1024, 64);
    tensorscope::manual_seed(0);
    let mut net = Sequential::new();
    for _ in 0..layers {
        net.add(Linear::new(width, width)?).add(ReLU);
    }
    let act = batch * width * 4;
    println!(
        "{layers} x (Linear({width}, {width}) + ReLU), batch {batch}, f32: one activation = {}, parameters = {}",
        memory::fmt_bytes(act),
        memory::fmt_bytes(memory::memory_allocated(CPU))
    );
    let _ng = autograd::no_grad_guard();

    // Naive: every intermediate kept in a Vec until the end.
    let x = Tensor::randn(&[batch, width], DType::F32, CPU)?;
    let (naive, kept) = peak_above(|| {
        let mut all: Vec<Tensor> = Vec::new();
        for l in net.layers() {
            let y = l.forward(all.last().unwrap_or(&x))?;
            all.push(y);
        }
        Ok(all)
    })?;
    let reference = kept.last().unwrap().to_vec::<f32>()?;
    drop(kept);

    // Sequential on a borrowed input.
    let (borrowed, y) = peak_above(|| net.forward(&x))?;
    assert_eq!(y.to_vec::<f32>()?, reference);
    drop(y);
    let sb = net.donation_stats();
    net.reset_donation_stats();

    // Sequential on an owned input (the input's bytes are in the baseline).
    let (owned, y) = peak_above(|| net.forward_owned(x))?;
    assert_eq!(y.to_vec::<f32>()?, reference);
    drop(y);
    let so = net.donation_stats();

    println!("peak activation memory above parameters + input:");
    println!(
        "  naive loop keeping every intermediate : {:>10}  ({:.1} activations)",
        memory::fmt_bytes(naive),
        naive as f64 / act as f64
    );
    println!(
        "  Sequential::forward(&x)               : {:>10}  ({:.1} activations)",
        memory::fmt_bytes(borrowed),
        borrowed as f64 / act as f64
    );
    println!(
        "  Sequential::forward_owned(x)          : {:>10}  ({:.1} activations)",
        memory::fmt_bytes(owned),
        owned as f64 / act as f64
    );
    println!("  donation stats, forward(&x)     : {sb:?}");
    println!("  donation stats, forward_owned(x): {so:?}");

    // An all-elementwise chain on an owned input: everything in place.
    let mut chain = Sequential::new();
    chain.add(ReLU).add(GELU).add(Tanh).add(Sigmoid);
    let x = Tensor::randn(&[batch, width], DType::F32, CPU)?;
    let (elementwise, y) = peak_above(|| chain.forward_owned(x))?;
    drop(y);
    println!(
        "elementwise chain (ReLU, GELU, Tanh, Sigmoid) on an owned input: {} extra bytes; {:?}",
        elementwise,
        chain.donation_stats()
    );
    Ok(())
}
