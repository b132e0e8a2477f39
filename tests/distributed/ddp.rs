//! `DistributedDataParallel` in a world of one process: the gradients are
//! the plain backward's, the buckets are what the parameters need, a step
//! allocates nothing a plain backward does not, and bad input is an `Err`.
//! The helpers here also serve the runs across processes (`ddp_mpi.rs`).

use tensorscope::distributed::{DdpOptions, DistributedDataParallel, ProcessGroup};
use tensorscope::memory::memory_stats;
use tensorscope::nn::{mse_loss, Linear, Module, Sequential, Tanh};
use tensorscope::optim::{Optimizer, Sgd, SgdConfig};
use tensorscope::{manual_seed, DType, Device, Result, Tensor};

pub(crate) const CPU: Device = Device::Cpu;

/// The model of every test: 6 -> 16 -> 4 with a tanh.
pub(crate) fn mlp(seed: u64) -> Sequential {
    manual_seed(seed);
    let mut m = Sequential::new();
    m.add(Linear::new(6, 16).unwrap())
        .add(Tanh)
        .add(Linear::new(16, 4).unwrap());
    m
}

/// Step `step`'s whole batch of `b` rows, the same on every rank.
pub(crate) fn batch(step: usize, b: usize) -> (Tensor, Tensor) {
    manual_seed(1000 + step as u64);
    let x = Tensor::randn(&[b, 6], DType::F32, CPU).unwrap();
    let y = Tensor::randn(&[b, 4], DType::F32, CPU).unwrap();
    (x, y)
}

/// Rows `[r * n, (r + 1) * n)` of `t`.
pub(crate) fn rows(t: &Tensor, r: usize, n: usize) -> Tensor {
    t.narrow(0, r * n, n).unwrap()
}

pub(crate) fn sgd() -> Sgd {
    Sgd::new(SgdConfig {
        lr: 0.05,
        momentum: 0.9,
        ..Default::default()
    })
    .unwrap()
}

/// Small buckets, so that a step reduces several.
pub(crate) fn small_buckets() -> DdpOptions {
    DdpOptions {
        bucket_cap_mb: 300.0 / (1 << 20) as f64,
        ..Default::default()
    }
}

pub(crate) fn values(m: &dyn Module) -> Vec<Vec<f32>> {
    m.parameters()
        .iter()
        .map(|p| p.to_vec::<f32>().unwrap())
        .collect()
}

pub(crate) fn grads(m: &dyn Module) -> Vec<Option<Vec<f32>>> {
    m.parameters()
        .iter()
        .map(|p| p.grad().map(|g| g.to_vec::<f32>().unwrap()))
        .collect()
}

/// Every parameter's gradient, each one present.
pub(crate) fn all_grads(m: &dyn Module) -> Vec<Vec<f32>> {
    grads(m)
        .into_iter()
        .map(|g| g.expect("a gradient"))
        .collect()
}

/// `|a - b| <= tol * max(1, |b|)` everywhere.
pub(crate) fn assert_close(what: &str, a: &[Vec<f32>], b: &[Vec<f32>], tol: f32) {
    assert_eq!(a.len(), b.len(), "{what}: tensor count");
    for (k, (x, y)) in a.iter().zip(b).enumerate() {
        assert_eq!(x.len(), y.len(), "{what}: tensor {k} length");
        for (i, (p, q)) in x.iter().zip(y).enumerate() {
            assert!(
                (p - q).abs() <= tol * q.abs().max(1.0),
                "{what}: tensor {k} element {i}: {p} vs {q}"
            );
        }
    }
}

pub(crate) fn loss_of(m: &dyn Module, x: &Tensor, y: &Tensor) -> Result<Tensor> {
    mse_loss(&m.forward(x)?, y)
}

/// Blocks the allocator handed out during `f`.
pub(crate) fn allocations(f: impl FnOnce()) -> u64 {
    let s0 = memory_stats(CPU).allocation.all.allocated;
    f();
    memory_stats(CPU).allocation.all.allocated - s0
}

#[test]
fn one_rank_gives_the_plain_gradients_in_buckets_allocated_once() {
    let _g = crate::common::serial();
    let pg = ProcessGroup::single();
    let plain = mlp(1);
    let mut ddp = DistributedDataParallel::with_options(mlp(1), &pg, small_buckets()).unwrap();
    // 300-byte buckets, the last parameters first: 2.bias and 2.weight
    // (272 B), then 0.bias (64 B; 0.weight would pass 300), then 0.weight.
    assert_eq!(ddp.bucket_count(), 3);
    let params: usize = plain.parameters().iter().map(|p| p.numel()).sum();
    assert_eq!(ddp.bucket_bytes(), 4 * params + 4 * (1 + 4));
    let (x, y) = batch(0, 8);
    loss_of(&plain, &x, &y).unwrap().backward().unwrap();
    let loss = loss_of(ddp.module(), &x, &y).unwrap();
    ddp.backward(&loss).unwrap();
    let want = all_grads(&plain);
    let got = all_grads(ddp.module());
    assert_eq!(got, want, "a world of one averages over one rank");
    assert!(ddp.unused_parameters().unwrap().is_empty());
}

#[test]
fn a_step_allocates_what_the_plain_backward_allocates() {
    let _g = crate::common::serial();
    let pg = ProcessGroup::single();
    let mut plain = mlp(1);
    let mut ddp = DistributedDataParallel::with_options(mlp(1), &pg, small_buckets()).unwrap();
    let (mut o1, mut o2) = (sgd(), sgd());
    for step in 0..5 {
        let (x, y) = batch(step, 8);
        let loss = loss_of(&plain, &x, &y).unwrap();
        let a = allocations(|| loss.backward().unwrap());
        let loss = loss_of(ddp.module(), &x, &y).unwrap();
        let b = allocations(|| ddp.backward(&loss).unwrap());
        assert_eq!(b, a, "step {step}: blocks allocated by backward");
        assert!(a > 0);
        o1.step(&mut plain).unwrap();
        o2.step(ddp.module_mut()).unwrap();
        o1.zero_grad(&plain);
        o2.zero_grad(ddp.module());
    }
    assert_close("after 5 steps", &values(ddp.module()), &values(&plain), 0.0);
}

#[test]
fn no_sync_accumulates_and_the_next_backward_averages_the_sum() {
    let _g = crate::common::serial();
    let pg = ProcessGroup::single();
    let plain = mlp(1);
    let mut ddp = DistributedDataParallel::new(mlp(1), &pg).unwrap();
    let (x, y) = batch(0, 8);
    for half in 0..2 {
        let (x, y) = (rows(&x, half, 4), rows(&y, half, 4));
        loss_of(&plain, &x, &y).unwrap().backward().unwrap();
    }
    ddp.no_sync(|d| {
        let loss = loss_of(d.module(), &rows(&x, 0, 4), &rows(&y, 0, 4)).unwrap();
        d.backward(&loss).unwrap();
    });
    let loss = loss_of(ddp.module(), &rows(&x, 1, 4), &rows(&y, 1, 4)).unwrap();
    ddp.backward(&loss).unwrap();
    let want = all_grads(&plain);
    let got = all_grads(ddp.module());
    assert_close("accumulated", &got, &want, 1e-6);
}

#[test]
fn a_parameter_no_rank_used_keeps_no_gradient() {
    let _g = crate::common::serial();
    let pg = ProcessGroup::single();
    let mut ddp = DistributedDataParallel::new(mlp(1), &pg).unwrap();
    let (x, _) = batch(0, 8);
    // Only the first layer takes part.
    let first = &ddp.module().named_parameters()[..2];
    let h = x.matmul(&first[0].1.t().unwrap()).unwrap();
    let loss = h
        .add(first[1].1)
        .unwrap()
        .square()
        .unwrap()
        .mean_all()
        .unwrap();
    ddp.backward(&loss).unwrap();
    let g = grads(ddp.module());
    assert!(g[0].is_some() && g[1].is_some());
    assert!(g[2].is_none() && g[3].is_none());
    assert_eq!(ddp.unused_parameters().unwrap(), ["2.weight", "2.bias"]);
}

#[test]
fn half_gradients_travel_in_f32_buckets() {
    let _g = crate::common::serial();
    let pg = ProcessGroup::single();
    let mut plain = mlp(1);
    plain.to_dtype(DType::BF16).unwrap();
    let mut m = mlp(1);
    m.to_dtype(DType::BF16).unwrap();
    let mut ddp = DistributedDataParallel::new(m, &pg).unwrap();
    let params: usize = plain.parameters().iter().map(|p| p.numel()).sum();
    assert_eq!(ddp.bucket_bytes(), 4 * params + 4 * (1 + 4));
    let (x, y) = batch(0, 8);
    let (x, y) = (
        x.to_dtype(DType::BF16).unwrap(),
        y.to_dtype(DType::BF16).unwrap(),
    );
    loss_of(&plain, &x, &y).unwrap().backward().unwrap();
    let loss = loss_of(ddp.module(), &x, &y).unwrap();
    ddp.backward(&loss).unwrap();
    for (a, b) in plain.parameters().iter().zip(ddp.module().parameters()) {
        let (a, b) = (a.grad().unwrap(), b.grad().unwrap());
        assert_eq!(b.dtype(), DType::BF16);
        assert_eq!(b.to_vec::<f32>().unwrap(), a.to_vec::<f32>().unwrap());
    }
}

#[test]
fn bad_input_is_an_err_naming_the_call() {
    let _g = crate::common::serial();
    let pg = ProcessGroup::single();
    for cap in [0.0, -1.0, f64::NAN] {
        let opts = DdpOptions {
            bucket_cap_mb: cap,
            ..Default::default()
        };
        let e = DistributedDataParallel::with_options(mlp(1), &pg, opts)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.starts_with("DistributedDataParallel::new") && e.contains("bucket_cap_mb"),
            "{e}"
        );
    }
    let mut ddp = DistributedDataParallel::new(mlp(1), &pg).unwrap();
    let (x, y) = batch(0, 8);
    // A loss of more than one element.
    let out = ddp.forward(&x).unwrap();
    let e = ddp.backward(&out).unwrap_err().to_string();
    assert!(
        e.starts_with("DistributedDataParallel::backward") && e.contains("[8, 4]"),
        "{e}"
    );
    // A parameter replaced by one of another shape.
    let bias = Tensor::zeros(&[5], DType::F32, CPU)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    *ddp.module_mut().named_parameters_mut().remove(3).1 = bias;
    let e = ddp.backward(&x.sum_all().unwrap()).unwrap_err().to_string();
    assert!(
        e.contains("\"2.bias\" is [5] float32 on cpu now, [4] float32"),
        "{e}"
    );
    // The group is still usable: nothing got stuck.
    let mut ddp = DistributedDataParallel::new(mlp(1), &pg).unwrap();
    let loss = loss_of(ddp.module(), &x, &y).unwrap();
    ddp.backward(&loss).unwrap();
}
