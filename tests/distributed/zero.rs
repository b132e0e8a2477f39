//! `ZeroRedundancyOptimizer` (ZeRO-1): in a world of one it is its inner
//! optimizer; across 2 ranks each rank's optimizer state is half of one
//! process's (allocator bytes), and the replicas follow one process's
//! Adam on the whole batch.

use crate::ddp::{assert_close, values, CPU};
use tensorscope::distributed::{DistributedDataParallel, ProcessGroup, ZeroRedundancyOptimizer};
use tensorscope::memory::memory_allocated;
use tensorscope::nn::{mse_loss, Linear, Module, Sequential, Tanh};
use tensorscope::optim::{Adam, AdamConfig, Optimizer};
use tensorscope::{manual_seed, DType, Tensor};

/// Four 16x16 layers: parameters of two sizes, four of each.
fn four(seed: u64) -> Sequential {
    manual_seed(seed);
    let mut m = Sequential::new();
    for i in 0..4 {
        m.add(Linear::new(16, 16).unwrap());
        if i < 3 {
            m.add(Tanh);
        }
    }
    m
}

fn adam() -> Adam {
    Adam::new(AdamConfig {
        lr: 1e-2,
        ..Default::default()
    })
    .unwrap()
}

fn data(step: usize) -> (Tensor, Tensor) {
    manual_seed(500 + step as u64);
    (
        Tensor::randn(&[8, 16], DType::F32, CPU).unwrap(),
        Tensor::randn(&[8, 16], DType::F32, CPU).unwrap(),
    )
}

/// Allocated bytes a call leaves behind.
fn kept(f: impl FnOnce()) -> usize {
    let a = memory_allocated(CPU);
    f();
    memory_allocated(CPU) - a
}

/// Rank r's half of the batch, sharded Adam, against one process's Adam on
/// the whole batch; each rank's state is 1/world of the reference's.
pub(crate) fn sharded_adam_body(pg: &ProcessGroup) {
    let (w, r) = (pg.world_size(), pg.rank());
    let n = 8 / w;
    let mut reference = four(1);
    let mut ref_opt = adam();
    let mut ddp = DistributedDataParallel::new(four(1 + r as u64), pg).unwrap();
    let mut zero = ZeroRedundancyOptimizer::new(adam(), pg);
    for step in 0..10 {
        let (x, y) = data(step);
        mse_loss(&reference.forward(&x).unwrap(), &y)
            .unwrap()
            .backward()
            .unwrap();
        let (xr, yr) = (
            x.narrow(0, r * n, n).unwrap(),
            y.narrow(0, r * n, n).unwrap(),
        );
        let loss = mse_loss(&ddp.forward(&xr).unwrap(), &yr).unwrap();
        ddp.backward(&loss).unwrap();
        let a = kept(|| ref_opt.step(&mut reference).unwrap());
        let b = kept(|| zero.step(ddp.module_mut()).unwrap());
        if step == 0 {
            assert!(a > 0);
            assert_eq!(
                b * w,
                a,
                "rank {r}: optimizer state bytes, sharded x world = whole"
            );
        } else {
            assert_eq!((a, b), (0, 0), "rank {r} step {step}: state made once");
        }
        ref_opt.zero_grad(&reference);
        zero.zero_grad(ddp.module());
    }
    if w == 2 {
        // Largest first to the least loaded: the weights alternate, then
        // the biases.
        assert_eq!(zero.owners().unwrap(), [0, 0, 1, 1, 0, 0, 1, 1]);
    }
    assert_close(
        &format!("rank {r} after 10 steps"),
        &values(ddp.module()),
        &values(&reference),
        2e-5,
    );
}

/// One data-parallel step with sharded Adam on rank r's rows of `step`.
fn train_step(
    pg: &ProcessGroup,
    ddp: &mut DistributedDataParallel<Sequential>,
    zero: &mut ZeroRedundancyOptimizer<Adam>,
    step: usize,
) {
    let (w, r) = (pg.world_size(), pg.rank());
    let n = 8 / w;
    let (x, y) = data(step);
    let (xr, yr) = (
        x.narrow(0, r * n, n).unwrap(),
        y.narrow(0, r * n, n).unwrap(),
    );
    zero.zero_grad(ddp.module());
    let loss = mse_loss(&ddp.forward(&xr).unwrap(), &yr).unwrap();
    ddp.backward(&loss).unwrap();
    zero.step(ddp.module_mut()).unwrap();
}

/// 5 steps, the model and the optimizer's shards saved, a fresh model and
/// optimizer loaded from them, 5 more steps: the weights of 10 steps in a
/// row, exactly. Each shard holds its own rank's parameters only.
pub(crate) fn resume_body(pg: &ProcessGroup) {
    let (w, r) = (pg.world_size(), pg.rank());
    // One folder for the job: rank 0's process id.
    let mut id = Tensor::from_slice(&[std::process::id() as i64], &[1], CPU).unwrap();
    pg.broadcast(&mut id, 0).unwrap();
    let dir = std::env::temp_dir().join(format!(
        "tensorscope-zero-{}",
        id.to_vec::<i64>().unwrap()[0]
    ));
    let mut ddp = DistributedDataParallel::new(four(1), pg).unwrap();
    let mut zero = ZeroRedundancyOptimizer::new(adam(), pg);
    let e = zero.save_shard(&dir).unwrap_err().to_string();
    assert!(
        e.starts_with("ZeroRedundancyOptimizer::save_shard") && e.contains("no step"),
        "{e}"
    );
    let e = zero.load_shard(&dir).unwrap_err().to_string();
    assert!(e.starts_with("ZeroRedundancyOptimizer::load_shard"), "{e}");
    let mut straight = (
        DistributedDataParallel::new(four(1), pg).unwrap(),
        ZeroRedundancyOptimizer::new(adam(), pg),
    );
    for step in 0..10 {
        train_step(pg, &mut straight.0, &mut straight.1, step);
    }
    for step in 0..5 {
        train_step(pg, &mut ddp, &mut zero, step);
    }
    let weights = tensorscope::nn::state_dict(ddp.module()).unwrap();
    let path = zero.save_shard(&dir).unwrap();
    let names = tensorscope::nn::Checkpoint::open(&path).unwrap();
    let mut held: Vec<String> = names
        .names()
        .filter_map(|n| n.strip_suffix(".exp_avg").map(str::to_string))
        .collect();
    held.sort();
    let mut mine: Vec<String> = ddp
        .module()
        .named_parameters()
        .iter()
        .zip(zero.owners().unwrap())
        .filter(|(_, o)| **o == r)
        .map(|((n, _), _)| n.clone())
        .collect();
    mine.sort();
    assert_eq!(
        held, mine,
        "rank {r} of {w}: its shard holds its own parameters"
    );
    drop((ddp, zero));
    let mut ddp = DistributedDataParallel::new(four(77), pg).unwrap();
    tensorscope::nn::load_state_dict(ddp.module_mut(), &weights).unwrap();
    let mut zero = ZeroRedundancyOptimizer::new(adam(), pg);
    zero.load_shard(&dir).unwrap();
    for step in 5..10 {
        train_step(pg, &mut ddp, &mut zero, step);
    }
    assert_eq!(
        values(ddp.module()),
        values(straight.0.module()),
        "rank {r}: resumed"
    );
    pg.barrier().unwrap();
    if r == 0 {
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn a_world_of_one_resumes_from_its_shard() {
    let _g = crate::common::serial();
    resume_body(&ProcessGroup::single());
}

#[test]
fn a_world_of_one_is_the_inner_optimizer() {
    let _g = crate::common::serial();
    sharded_adam_body(&ProcessGroup::single());
}

#[cfg(feature = "mpi")]
mpi_test!(
    /// 2 ranks: half the state each, the weights of one process.
    sharded_adam_on_2_ranks_is_one_process_with_half_the_state, 2, |pg| {
        sharded_adam_body(&pg)
    }
);

#[cfg(feature = "mpi")]
mpi_test!(
    /// 4 ranks: a quarter of the state each.
    sharded_adam_on_4_ranks_is_one_process_with_a_quarter_of_the_state, 4, |pg| {
        sharded_adam_body(&pg)
    }
);

#[cfg(feature = "mpi")]
mpi_test!(
    /// 2 ranks save their shards, and a fresh job of 2 resumes from them.
    sharded_checkpoints_resume_on_2_ranks, 2, |pg| { resume_body(&pg) }
);
