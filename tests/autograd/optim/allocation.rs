//! Allocation-free steps after the first, training, parameters without a gradient.

use super::*;

/// Sum of `allocation.all.allocated` (bytes and count of every block the
/// allocator ever handed out).
pub(super) fn allocs() -> (u64, u64) {
    let s = memory::memory_stats(CPU);
    (s.allocation.all.allocated, s.allocated_bytes.all.allocated)
}

/// Steps 2..10 allocate nothing, and the state is exactly `buffers` blocks
/// of each parameter's size.
pub(super) fn steps_allocate_nothing(opt: &mut dyn Optimizer, buffers: usize, label: &str) {
    let mut model = Mlp::new(8, 16, 4, DType::F32, 3);
    let grads = fixed_grads(&model, 0);
    set_grads(&model, &grads);
    let per_set: usize = model
        .parameters()
        .iter()
        .map(|p| memory::round_size(p.numel() * 4))
        .sum();
    let live_before = memory::memory_allocated(CPU);
    opt.step(&mut model).unwrap();
    let state = memory::memory_allocated(CPU) - live_before;
    assert_eq!(state, buffers * per_set, "{label}: the first step's state");
    let after_first = allocs();
    for _ in 2..=10 {
        opt.step(&mut model).unwrap();
    }
    assert_eq!(allocs(), after_first, "{label}: steps 2..10 allocated");
    assert_eq!(
        memory::memory_allocated(CPU) - live_before,
        state,
        "{label}"
    );
}

#[test]
fn steps_after_the_first_allocate_nothing() {
    let _l = lock();
    for c in sgd_option_sets() {
        let buffers = usize::from(c.momentum != 0.0);
        steps_allocate_nothing(&mut Sgd::new(c).unwrap(), buffers, &format!("{c:?}"));
    }
    for amsgrad in [false, true] {
        let c = AdamConfig {
            weight_decay: 0.1,
            amsgrad,
            maximize: amsgrad,
            ..Default::default()
        };
        let buffers = 2 + usize::from(amsgrad);
        steps_allocate_nothing(&mut Adam::new(c).unwrap(), buffers, "Adam");
        steps_allocate_nothing(&mut AdamW::new(c).unwrap(), buffers, "AdamW");
    }
}

#[test]
fn training_reduces_the_loss_and_zero_grad_frees() {
    let _l = lock();
    let mut model = Mlp::new(4, 16, 1, DType::F32, 11);
    let mut g = Generator::new(5);
    let x = Tensor::randn_with(&[32, 4], DType::F32, CPU, &mut g).unwrap();
    let y = x.sum(&[1], true).unwrap().sin().unwrap();
    let mut opt = Adam::new(AdamConfig {
        lr: 0.01,
        ..Default::default()
    })
    .unwrap();
    let loss = |m: &Mlp| {
        m.forward(&x)
            .unwrap()
            .sub(&y)
            .unwrap()
            .square()
            .unwrap()
            .mean_all()
            .unwrap()
    };
    let first = loss(&model).item::<f32>().unwrap();
    for _ in 0..200 {
        let l = loss(&model);
        l.backward().unwrap();
        opt.step(&mut model).unwrap();
        opt.zero_grad(&model);
        assert!(model.w1.grad().is_none());
    }
    let last = loss(&model).item::<f32>().unwrap();
    assert!(last < first * 0.5, "loss {first} -> {last}");
    assert!(model.w1.requires_grad() && model.w1.is_leaf());
}

#[test]
fn parameters_without_grad_are_skipped() {
    let _l = lock();
    let mut model = Mlp::new(3, 4, 2, DType::F32, 1);
    let before: Vec<Vec<f64>> = model.parameters().iter().map(|p| vals(p)).collect();
    model
        .w2
        .set_grad(Some(Tensor::ones(&[4, 2], DType::F32, CPU).unwrap()))
        .unwrap();
    Sgd::new(SgdConfig {
        lr: 1.0,
        ..Default::default()
    })
    .unwrap()
    .step(&mut model)
    .unwrap();
    let after: Vec<Vec<f64>> = model.parameters().iter().map(|p| vals(p)).collect();
    assert_eq!(before[0], after[0]);
    assert_eq!(before[1], after[1]);
    assert_eq!(before[3], after[3]);
    let want: Vec<f64> = before[2].iter().map(|v| v - 1.0).collect();
    assert_close("w2", &after[2], &want, 1e-6);
}
