//! Data-parallel training: the digits MLP on every rank of an `mpirun` job.
//! Each rank starts from its own random weights (DistributedDataParallel
//! broadcasts rank 0's), reads its own share of every epoch through the
//! DataLoader, and the gradients are averaged in buckets during backward.
//! Every rank prints its loss, step time and memory, and the ranks check
//! that their replicas are still identical at the end.
//!
//! ```text
//! cargo run --release --example ddp                   # a world of one
//! cargo build --release --features mpi --example ddp
//! mpirun -np 2 target/release/examples/ddp
//! ```

#[path = "digits.rs"]
mod digits;

use std::sync::Arc;
use std::time::{Duration, Instant};
use tensorscope::data::{DataLoader, TensorDataset};
use tensorscope::distributed::{DistributedDataParallel, ProcessGroup, ReduceOp};
use tensorscope::memory::{self, fmt_bytes};
use tensorscope::nn::{cross_entropy, Module};
use tensorscope::optim::{Adam, AdamConfig, Optimizer};
use tensorscope::{DType, Device, Result, Tensor};

const CPU: Device = Device::Cpu;
const EPOCHS: usize = 20;
/// Samples per step over all ranks.
const GLOBAL_BATCH: usize = 64;

/// The `mpirun` job's world when launched by it (feature `mpi`), else a
/// world of this one process.
fn group() -> Result<ProcessGroup> {
    #[cfg(feature = "mpi")]
    if std::env::var_os("OMPI_COMM_WORLD_SIZE").is_some() || std::env::var_os("PMI_SIZE").is_some()
    {
        return ProcessGroup::mpi();
    }
    #[cfg(not(feature = "mpi"))]
    if std::env::var("OMPI_COMM_WORLD_SIZE").is_ok_and(|n| n != "1") {
        eprintln!("launched by mpirun, but built without MPI: build with `--features mpi`");
        std::process::exit(2);
    }
    Ok(ProcessGroup::single())
}

/// Runs `f` on each rank in turn, flushing, so that the ranks' lines do
/// not interleave (mpirun may still forward them in another order).
fn in_rank_order(pg: &ProcessGroup, f: impl Fn()) -> Result<()> {
    use std::io::Write;
    for r in 0..pg.world_size() {
        if r == pg.rank() {
            f();
            std::io::stdout().flush().ok();
        }
        pg.barrier()?;
    }
    Ok(())
}

fn main() -> Result<()> {
    let pg = group()?;
    let (rank, world) = (pg.rank(), pg.world_size());
    let (xs, ys) = digits::load();
    let n = ys.len();
    let (order, n_train) = digits::split(n);
    let pick = |ids: &[usize]| digits::pick(&xs, &ys, ids, &[ids.len(), 64], CPU);
    let (x_train, y_train) = pick(&order[..n_train])?;
    let (x_test, y_test) = pick(&order[n_train..])?;
    let batch = GLOBAL_BATCH / world;
    let mut loader = DataLoader::builder(Arc::new(TensorDataset::new(vec![x_train, y_train])?))
        .batch_size(batch)
        .shuffle(1)
        .distributed(rank, world)
        .build()?;
    if rank == 0 {
        println!(
            "digits over {world} rank(s): {n_train} training samples, {} batches of {batch} a rank per epoch",
            loader.len()
        );
    }

    tensorscope::manual_seed(7 + rank as u64);
    let mut net = digits::model()?;
    net.to_device(CPU)?;
    let mut ddp = DistributedDataParallel::new(net, &pg)?;
    let mut opt = Adam::new(AdamConfig {
        lr: 3e-3,
        ..Default::default()
    })?;
    memory::reset_peak_memory_stats(CPU);
    let bar = (rank == 0).then(|| digits::epoch_bar(EPOCHS * loader.len()));
    let (mut busy, mut steps, mut last_loss) = (Duration::ZERO, 0u32, 0.0f32);
    for e in 0..EPOCHS {
        if let Some(b) = &bar {
            b.set_prefix(format!("{:>2}", e + 1));
        }
        let mut epoch = loader.epoch();
        while let Some(b) = epoch.next() {
            let b = b?;
            let t = Instant::now();
            opt.zero_grad(ddp.module());
            let (x, y) = (b.field(0)?, b.field(1)?);
            let loss = cross_entropy(&ddp.forward(&x)?, &y)?;
            ddp.backward(&loss)?;
            opt.step(ddp.module_mut())?;
            busy += t.elapsed();
            steps += 1;
            last_loss = loss.item::<f32>()?;
            if let Some(bar) = &bar {
                bar.set_message(format!("loss {last_loss:.4}"));
                bar.inc(1);
            }
        }
    }
    if let Some(b) = bar {
        b.finish();
    }

    // The replicas must still be identical: every rank's weight checksum,
    // its maximum and minimum over the ranks.
    let mut sum = 0.0f64;
    for p in ddp.module().parameters() {
        sum += p.to_dtype(DType::F64)?.sum_all()?.item::<f64>()?;
    }
    let mut hi = Tensor::from_slice(&[sum], &[1], CPU)?;
    let mut lo = hi.deep_clone()?;
    pg.all_reduce(&mut hi, ReduceOp::Max)?;
    pg.all_reduce(&mut lo, ReduceOp::Min)?;
    let identical = hi.to_vec::<f64>()? == lo.to_vec::<f64>()?;
    let acc = 100.0 * digits::accuracy(ddp.module(), &x_test, &y_test)?;
    let step_ms = busy.as_secs_f64() * 1e3 / f64::from(steps.max(1));
    in_rank_order(&pg, || {
        println!(
            "rank {rank}/{world}: last loss {last_loss:.4}, {steps} steps of {step_ms:.3} ms, \
             allocator peak {}, gradient buckets {} in {}, test accuracy {acc:.2}%",
            fmt_bytes(memory::max_memory_allocated(CPU)),
            fmt_bytes(ddp.bucket_bytes()),
            ddp.bucket_count()
        )
    })?;
    if rank == 0 {
        println!(
            "replicas identical after {steps} steps: {}",
            if identical { "yes" } else { "NO" }
        );
    }
    assert!(identical, "every rank holds the same weights");
    assert!(acc >= 90.0, "the model learns: {acc:.2}% on the test split");
    Ok(())
}
