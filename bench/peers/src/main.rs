//! candle's side of the CPU benchmark: the workloads of `benches/cpu.rs`,
//! with the same warm-up, sample counts and batching, in candle-core (CPU).
//!
//! `tensorscope-bench-peers --json PATH [--filter NAME]`
//!
//! candle has no `out=` form of `add`, so `add_out` is not run here, and no
//! public allocator, so neither is `alloc_free_raw`.

use candle_core::{DType, Device, Tensor};
use std::hint::black_box;

#[path = "../../../benches/common/timing.rs"]
mod timing;
use timing::{arg_after, measure, write_json, Measured, R};

const N16M: usize = 16 * 1024 * 1024;
const SIDE: usize = 4096;
const MM: usize = 1024;
const CHAIN: usize = 1000;
const PAIRS: usize = 10_000;

fn workloads(filter: Option<&str>) -> R<Vec<Measured>> {
    let want = |n: &str| filter.is_none_or(|f| n.contains(f));
    let dev = Device::Cpu;
    let mut out = Vec::new();

    if want("add_alloc") {
        let a = Tensor::rand(0f32, 1f32, N16M, &dev)?;
        let b = Tensor::rand(0f32, 1f32, N16M, &dev)?;
        out.push(measure(
            "add_alloc",
            "(&a + &b), 16M f32, result freshly allocated (and dropped) each time",
            5,
            40,
            1,
            || {
                black_box((&a + &b)?);
                Ok(())
            },
        )?);
    }

    if want("add_transposed") {
        let a = Tensor::rand(0f32, 1f32, (SIDE, SIDE), &dev)?;
        let b = Tensor::rand(0f32, 1f32, (SIDE, SIDE), &dev)?;
        let at = a.t()?;
        out.push(measure(
            "add_transposed",
            "(&a.t() + &b), 4096x4096 f32, result freshly allocated",
            3,
            20,
            1,
            || {
                black_box((&at + &b)?);
                Ok(())
            },
        )?);
    }

    if want("matmul") {
        let a = Tensor::rand(0f32, 1f32, (MM, MM), &dev)?;
        let b = Tensor::rand(0f32, 1f32, (MM, MM), &dev)?;
        out.push(measure(
            "matmul",
            "a.matmul(&b), 1024x1024 by 1024x1024 f32, result freshly allocated",
            3,
            20,
            1,
            || {
                black_box(a.matmul(&b)?);
                Ok(())
            },
        )?);
    }

    if want("chain_add") {
        let y = Tensor::ones(1, DType::F32, &dev)?;
        let mut x = Tensor::zeros(1, DType::F32, &dev)?;
        let m = measure(
            "chain_add",
            "x = (&x + &y), 1000 times, on 1-element f32 tensors (per op)",
            5,
            50,
            1,
            || {
                for _ in 0..CHAIN {
                    x = (&x + &y)?;
                }
                Ok(())
            },
        )?;
        let got = x.to_vec1::<f32>()?[0];
        assert_eq!(got, (55 * CHAIN) as f32, "chain_add computed the wrong sum");
        out.push(Measured {
            samples: m.samples.iter().map(|s| s / CHAIN as f64).collect(),
            ..m
        });
    }

    // Only on request (`--filter mlp_inference`, from bench/run_mlp.sh): the
    // CPU benchmark's report does not know this workload.
    if filter == Some("mlp_inference") {
        // The MLP of benches/mlp.rs: 784-1024-1024-10, ReLU, batch 128, f32.
        let lin = |o: usize, i: usize| -> R<(Tensor, Tensor)> {
            let bound = 1.0 / (i as f64).sqrt();
            Ok((
                Tensor::rand(-bound as f32, bound as f32, (o, i), &dev)?,
                Tensor::rand(-bound as f32, bound as f32, o, &dev)?,
            ))
        };
        let (w1, b1) = lin(1024, 784)?;
        let (w2, b2) = lin(1024, 1024)?;
        let (w3, b3) = lin(10, 1024)?;
        let x = Tensor::randn(0f32, 1f32, (128, 784), &dev)?;
        out.push(measure(
            "mlp_inference",
            "MLP 784-1024-1024-10 (ReLU) forward, batch 128",
            10,
            50,
            1,
            || {
                let h = x.matmul(&w1.t()?)?.broadcast_add(&b1)?.relu()?;
                let h = h.matmul(&w2.t()?)?.broadcast_add(&b2)?.relu()?;
                black_box(h.matmul(&w3.t()?)?.broadcast_add(&b3)?);
                Ok(())
            },
        )?);
    }

    if want("alloc_free") {
        out.push(measure(
            "alloc_free",
            "unsafe Tensor::empty(256, F32, &Cpu) + drop",
            PAIRS,
            50,
            PAIRS,
            || {
                // SAFETY: the uninitialised tensor is dropped unread.
                black_box(unsafe { Tensor::empty(256, DType::F32, &dev)? });
                Ok(())
            },
        )?);
    }
    Ok(out)
}

fn main() -> R<()> {
    let json = arg_after("--json");
    let filter = arg_after("--filter");
    let results = workloads(filter.as_deref())?;
    let threads = candle_core::utils::get_num_threads();
    eprintln!("candle-core 0.11.1 (threads: {threads})");
    for m in &results {
        eprintln!(
            "{:<16} median {:.6e} s  min {:.6e} s  max {:.6e} s  ({} samples)",
            m.name,
            m.median(),
            m.min(),
            m.max(),
            m.samples.len()
        );
    }
    if let Some(path) = json {
        write_json(&path, "candle-core", "0.11.1", threads, &results)?;
    }
    Ok(())
}
