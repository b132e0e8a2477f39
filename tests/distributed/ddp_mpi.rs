//! `DistributedDataParallel` across 2 and 4 processes: the ranks' average
//! is one process's whole batch, step after step; accumulation, unused
//! parameters, a model that differs and a rank that fails are handled on
//! every rank without a hang.

use crate::ddp::{
    all_grads, allocations, assert_close, batch, grads, loss_of, mlp, rows, sgd, small_buckets,
    values,
};
use tensorscope::distributed::DistributedDataParallel;
use tensorscope::nn::{Linear, Module};
use tensorscope::optim::Optimizer;
use tensorscope::{DType, Tensor};

const STEPS: usize = 20;
const BATCH: usize = 8;

/// Rank r trains on rows [r B/w, (r+1) B/w) of every step's batch; a
/// reference model in the same process trains on the whole batch.
fn matches_one_process(pg: &tensorscope::distributed::ProcessGroup) {
    let (w, r) = (pg.world_size(), pg.rank());
    let n = BATCH / w;
    let mut reference = mlp(1);
    // Each rank starts from its own weights: rank 0's are broadcast.
    let mut ddp =
        DistributedDataParallel::with_options(mlp(1 + r as u64), pg, small_buckets()).unwrap();
    assert_eq!(
        values(ddp.module()),
        values(&reference),
        "rank {r}: broadcast"
    );
    assert_eq!(ddp.bucket_count(), 3);
    let (mut o1, mut o2) = (sgd(), sgd());
    for step in 0..STEPS {
        let (x, y) = batch(step, BATCH);
        let loss = loss_of(&reference, &x, &y).unwrap();
        let a = allocations(|| loss.backward().unwrap());
        let loss = loss_of(ddp.module(), &rows(&x, r, n), &rows(&y, r, n)).unwrap();
        let b = allocations(|| ddp.backward(&loss).unwrap());
        if step > 0 {
            assert_eq!(b, a, "rank {r} step {step}: blocks allocated by backward");
        }
        o1.step(&mut reference).unwrap();
        o2.step(ddp.module_mut()).unwrap();
        o1.zero_grad(&reference);
        o2.zero_grad(ddp.module());
    }
    assert_close(
        &format!("rank {r} after {STEPS} steps"),
        &values(ddp.module()),
        &values(&reference),
        2e-5,
    );
}

mpi_test!(
    /// Batch B/2 on each of 2 ranks gives the weights of batch B in one
    /// process, over 20 SGD steps with momentum.
    ddp_on_2_ranks_is_one_process_with_the_whole_batch, 2, |pg| { matches_one_process(&pg) }
);
mpi_test!(
    ddp_on_4_ranks_is_one_process_with_the_whole_batch,
    4,
    |pg| { matches_one_process(&pg) }
);

mpi_test!(
    /// Two micro-batches per rank, the first under no_sync: the average of
    /// the ranks' sums.
    no_sync_accumulates_across_ranks, 2, |pg| {
        let (w, r) = (pg.world_size(), pg.rank());
        let reference = mlp(1);
        let mut ddp = DistributedDataParallel::new(mlp(1), &pg).unwrap();
        let (x, y) = batch(0, 4 * w);
        // Micro-batch m of rank q is rows block 2q + m, of 2 rows.
        for q in 0..w {
            for m in 0..2 {
                let loss = loss_of(&reference, &rows(&x, 2 * q + m, 2), &rows(&y, 2 * q + m, 2))
                    .unwrap()
                    .div_scalar(w as f64)
                    .unwrap();
                loss.backward().unwrap();
            }
        }
        ddp.no_sync(|d| {
            let loss = loss_of(d.module(), &rows(&x, 2 * r, 2), &rows(&y, 2 * r, 2)).unwrap();
            d.backward(&loss).unwrap();
        });
        let loss = loss_of(ddp.module(), &rows(&x, 2 * r + 1, 2), &rows(&y, 2 * r + 1, 2)).unwrap();
        ddp.backward(&loss).unwrap();
        let want = all_grads(&reference);
        let got = all_grads(ddp.module());
        assert_close(&format!("rank {r}"), &got, &want, 1e-5);
    }
);

mpi_test!(
    /// Rank 0 uses only the first layer, rank 1 the whole model: the last
    /// layer's gradient on rank 0 is rank 1's over 2; nothing hangs.
    a_parameter_one_rank_did_not_use_gets_the_average, 2, |pg| {
        let r = pg.rank();
        let mut ddp = DistributedDataParallel::new(mlp(1), &pg).unwrap();
        let (x, y) = batch(0, 8);
        let loss = if r == 0 {
            let p = ddp.module().named_parameters();
            x.matmul(&p[0].1.t().unwrap()).unwrap().add(p[1].1).unwrap().square().unwrap().mean_all().unwrap()
        } else {
            loss_of(ddp.module(), &x, &y).unwrap()
        };
        // Rank 1's own gradients, from a replica.
        let own = mlp(1);
        if r == 1 {
            loss_of(&own, &x, &y).unwrap().backward().unwrap();
        }
        ddp.backward(&loss).unwrap();
        assert!(ddp.unused_parameters().unwrap().is_empty());
        let mut out = [Tensor::zeros(&[1], DType::F32, crate::ddp::CPU).unwrap()];
        let last = ddp.module().parameters()[3].grad().unwrap();
        out[0] = last.deep_clone().unwrap();
        // Every rank holds the same average: rank 1 sends its own to check.
        if r == 1 {
            let g = own.parameters()[3].grad().unwrap().div_scalar(2.0).unwrap();
            assert_close("rank 1", &[out[0].to_vec::<f32>().unwrap()], &[g.to_vec::<f32>().unwrap()], 1e-6);
        }
        pg.broadcast(&mut out[0], 1).unwrap();
        assert_eq!(last.to_vec::<f32>().unwrap(), out[0].to_vec::<f32>().unwrap(), "rank {r}");
    }
);

mpi_test!(
    /// A replica of another architecture is an `Err` on every rank at
    /// construction, before any weight moves.
    a_model_that_differs_across_ranks_is_an_err_on_every_rank, 2, |pg| {
        let m = if pg.rank() == 0 { Linear::new(4, 2) } else { Linear::new(4, 3) }.unwrap();
        let e = DistributedDataParallel::new(m, &pg).err().unwrap().to_string();
        assert!(e.starts_with("DistributedDataParallel::new") && e.contains("different"), "{e}");
        // The ranks are still in step.
        pg.barrier().unwrap();
    }
);

mpi_test!(
    /// Rank 1's backward fails (a loss of many elements): both ranks get an
    /// `Err`, and the next step works on both.
    a_rank_whose_backward_fails_fails_the_step_everywhere, 2, |pg| {
        let r = pg.rank();
        let mut ddp = DistributedDataParallel::with_options(mlp(1), &pg, small_buckets()).unwrap();
        let (x, y) = batch(0, 8);
        let out = ddp.forward(&x).unwrap();
        let loss = if r == 1 { out } else { tensorscope::nn::mse_loss(&out, &y).unwrap() };
        let e = ddp.backward(&loss).unwrap_err().to_string();
        let want = if r == 1 { "one element" } else { "another rank failed" };
        assert!(e.starts_with("DistributedDataParallel::backward") && e.contains(want), "rank {r}: {e}");
        ddp.module().zero_grad();
        let loss = loss_of(ddp.module(), &x, &y).unwrap();
        ddp.backward(&loss).unwrap();
        assert!(grads(ddp.module()).iter().all(Option::is_some));
    }
);
