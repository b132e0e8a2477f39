//! Issue 50 item 7: collectives and a data-parallel training step across
//! the ranks of an `mpirun` job (feature `mpi`); `bench/torch_distributed.py`
//! is the PyTorch twin under torchrun (gloo), and `bench/run_distributed.sh`
//! runs both, interleaved, and writes `bench/results/distributed.md`.
//!
//! Rows, printed by rank 0 as `row<TAB>seconds<TAB>extra`:
//! * `all_reduce_<K>KiB`: `all_reduce(Sum)` of an f32 tensor of K KiB, the
//!   median of its repetitions; the extra figure is the bus bandwidth in
//!   GB/s, `2 (n - 1) / n * bytes / time` (NCCL's definition).
//! * `ddp_step`: one training step of an MLP 512-2048-2048-10 (ReLU,
//!   2.2 M parameters) on 64 rows a rank: zero_grad, forward,
//!   cross-entropy, the data-parallel backward, SGD with momentum; the
//!   median step; the extra figure is the step's peak resident set over
//!   the process before the model was made, in bytes (VmHWM), taken in a
//!   fresh job (`--peak`).
//!
//! `mpirun -np 2 target/release/deps/distributed-* [--peak]`

use std::time::Instant;
use tensorscope::distributed::{DistributedDataParallel, ProcessGroup, ReduceOp};
use tensorscope::nn::{cross_entropy, Linear, ReLU, Sequential};
use tensorscope::optim::{Optimizer, Sgd, SgdConfig};
use tensorscope::{DType, Device, Result, Tensor};

// Only the resident-set reader is used: a job's peak is the ranks' maximum,
// gathered over MPI, not a fresh single process's.
#[allow(dead_code)]
#[path = "common/peak.rs"]
mod peak;
#[path = "common/timing.rs"]
mod timing;

use peak::status_bytes;

const CPU: Device = Device::Cpu;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn all_reduce_rows(pg: &ProcessGroup) -> Result<()> {
    let n = pg.world_size() as f64;
    for kib in [64usize, 1024, 16 * 1024, 64 * 1024] {
        let elems = kib * 256;
        let mut t = Tensor::ones(&[elems], DType::F32, CPU)?;
        let reps = (256 * 1024 / kib).clamp(8, 200);
        for _ in 0..3 {
            pg.all_reduce(&mut t, ReduceOp::Sum)?;
        }
        let mut times = Vec::with_capacity(reps);
        for _ in 0..reps {
            pg.barrier()?;
            let t0 = Instant::now();
            pg.all_reduce(&mut t, ReduceOp::Sum)?;
            times.push(t0.elapsed().as_secs_f64());
        }
        let s = median(times);
        let busbw = 2.0 * (n - 1.0) / n * (elems * 4) as f64 / s / 1e9;
        if pg.rank() == 0 {
            println!("all_reduce_{kib}KiB\t{s:.9}\t{busbw:.3}");
        }
    }
    Ok(())
}

fn model() -> Result<Sequential> {
    let mut m = Sequential::new();
    m.add(Linear::new(512, 2048)?)
        .add(ReLU)
        .add(Linear::new(2048, 2048)?)
        .add(ReLU)
        .add(Linear::new(2048, 10)?);
    Ok(m)
}

/// The step's median time, over `steps` after 5 warm-up steps.
fn ddp_step(pg: &ProcessGroup, steps: usize) -> Result<f64> {
    tensorscope::manual_seed(1 + pg.rank() as u64);
    let mut ddp = DistributedDataParallel::new(model()?, pg)?;
    let mut opt = Sgd::new(SgdConfig {
        lr: 0.01,
        momentum: 0.9,
        ..Default::default()
    })?;
    let x = Tensor::randn(&[64, 512], DType::F32, CPU)?;
    let y = Tensor::randint(0, 10, &[64], DType::I64, CPU)?;
    let mut times = Vec::with_capacity(steps);
    for i in 0..steps + 5 {
        pg.barrier()?;
        let t0 = Instant::now();
        opt.zero_grad(ddp.module());
        let loss = cross_entropy(&ddp.forward(&x)?, &y)?;
        ddp.backward(&loss)?;
        opt.step(ddp.module_mut())?;
        if i >= 5 {
            times.push(t0.elapsed().as_secs_f64());
        }
    }
    Ok(median(times))
}

fn main() -> Result<()> {
    let peak = std::env::args().any(|a| a == "--peak");
    let pg = ProcessGroup::mpi()?;
    if peak {
        let before = status_bytes("VmRSS:");
        ddp_step(&pg, 3)?;
        let grew = status_bytes("VmHWM:").saturating_sub(before);
        let mut t = Tensor::from_slice(&[grew as f64], &[1], CPU)?;
        pg.all_reduce(&mut t, ReduceOp::Max)?;
        if pg.rank() == 0 {
            println!("ddp_step_peak\t0\t{}", t.to_vec::<f64>()?[0]);
        }
        return Ok(());
    }
    all_reduce_rows(&pg)?;
    let s = ddp_step(&pg, 30)?;
    if pg.rank() == 0 {
        println!("ddp_step\t{s:.9}\t0");
    }
    Ok(())
}
