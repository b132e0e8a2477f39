//! tensorscope's side of the CPU benchmark (issue 2, "A benchmark").
//!
//! `cargo bench --bench cpu` runs every workload and prints a table;
//! `cargo bench --bench cpu -- --json PATH` also writes the raw medians as
//! JSON, which `bench/run_cpu.sh` merges with candle's (`bench/peers`) and
//! PyTorch's (`bench/torch_cpu.py`) figures for the same workloads.
//! `--filter NAME` runs only the workloads whose name contains NAME.
//!
//! Every workload is timed as in the peers: warm-up iterations first, then
//! many samples, and the median sample is the figure. Samples of tiny
//! operations time a batch and divide, so the clock's resolution does not
//! matter.

use std::hint::black_box;
use tensorscope::{DType, Device, Tensor};

#[path = "common/timing.rs"]
mod timing;
use timing::{arg_after, fmt_s, measure, write_json, Measured, R};

const N16M: usize = 16 * 1024 * 1024;
const SIDE: usize = 4096;
const MM: usize = 1024;
const CHAIN: usize = 1000;
const PAIRS: usize = 10_000;

fn cpu() -> Device {
    Device::Cpu
}

fn workloads(filter: Option<&str>) -> R<Vec<Measured>> {
    let want = |n: &str| filter.is_none_or(|f| n.contains(f));
    let mut out = Vec::new();

    if want("add_alloc") || want("add_out") {
        let a = Tensor::rand(&[N16M], DType::F32, cpu())?;
        let b = Tensor::rand(&[N16M], DType::F32, cpu())?;
        if want("add_alloc") {
            out.push(measure(
                "add_alloc",
                "a + b, 16M f32, result freshly allocated (and dropped) each time",
                5,
                40,
                1,
                || {
                    black_box(a.add(&b)?);
                    Ok(())
                },
            )?);
        }
        if want("add_out") {
            let mut c = Tensor::empty(&[N16M], DType::F32, cpu())?;
            out.push(measure(
                "add_out",
                "add into a preallocated output, 16M f32",
                5,
                40,
                1,
                || {
                    a.add_out(&b, &mut c)?;
                    Ok(())
                },
            )?);
        }
    }

    if want("add_transposed") {
        let a = Tensor::rand(&[SIDE, SIDE], DType::F32, cpu())?;
        let b = Tensor::rand(&[SIDE, SIDE], DType::F32, cpu())?;
        let at = a.t()?;
        out.push(measure(
            "add_transposed",
            "a.t() + b, 4096x4096 f32, result freshly allocated",
            3,
            20,
            1,
            || {
                black_box(at.add(&b)?);
                Ok(())
            },
        )?);
    }

    #[cfg(feature = "bench-matmul")]
    if want("matmul") {
        let a = Tensor::rand(&[MM, MM], DType::F32, cpu())?;
        let b = Tensor::rand(&[MM, MM], DType::F32, cpu())?;
        out.push(measure(
            "matmul",
            "a.matmul(b), 1024x1024 by 1024x1024 f32, result freshly allocated",
            3,
            20,
            1,
            || {
                black_box(a.matmul(&b)?);
                Ok(())
            },
        )?);
    }
    let _ = MM;

    if want("chain_add") {
        let y = Tensor::ones(&[1], DType::F32, cpu())?;
        let mut x = Tensor::zeros(&[1], DType::F32, cpu())?;
        let m = measure(
            "chain_add",
            "x = x + y, 1000 times, on 1-element f32 tensors (per op)",
            5,
            50,
            1,
            || {
                for _ in 0..CHAIN {
                    x = x.add(&y)?;
                }
                Ok(())
            },
        )?;
        let expect = (55 * CHAIN) as f32;
        let got = x.item::<f32>()?;
        assert_eq!(got, expect, "chain_add computed the wrong sum");
        out.push(Measured {
            samples: m.samples.iter().map(|s| s / CHAIN as f64).collect(),
            ..m
        });
    }

    if want("alloc_free") {
        out.push(measure(
            "alloc_free",
            "Tensor::empty(&[256], F32, Cpu) + drop, served from the cache",
            PAIRS,
            50,
            PAIRS,
            || {
                black_box(Tensor::empty(&[256], DType::F32, cpu())?);
                Ok(())
            },
        )?);
    }
    if want("alloc_free_raw") {
        out.push(measure(
            "alloc_free_raw",
            "the CPU caching allocator alone: allocate(1024 B) + free, served from the cache",
            PAIRS,
            50,
            PAIRS,
            || {
                tensorscope::memory::bench_alloc_free(cpu(), 1024)?;
                Ok(())
            },
        )?);
    }
    Ok(out)
}

fn main() -> R<()> {
    let json = arg_after("--json");
    let filter = arg_after("--filter");
    let threads = rayon::current_num_threads();

    let results = workloads(filter.as_deref())?;

    eprintln!(
        "tensorscope {} (rayon threads: {threads})",
        env!("CARGO_PKG_VERSION")
    );
    eprintln!(
        "{:<16} {:>14} {:>14} {:>14} {:>8}",
        "workload", "median", "min", "max", "samples"
    );
    for m in &results {
        eprintln!(
            "{:<16} {:>14} {:>14} {:>14} {:>8}",
            m.name,
            fmt_s(m.median()),
            fmt_s(m.min()),
            fmt_s(m.max()),
            m.samples.len()
        );
    }

    write_json(json, threads, &results)?;
    Ok(())
}
