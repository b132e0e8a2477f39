//! Issue 49 item 4: f32 master weights for a half model. Updates below
//! bf16's resolution accumulate in the f32 copies (plain bf16 Adam loses
//! them), f32 parameters kept by `to_dtype_keeping` are stepped in place,
//! steps after the first allocate nothing, and a model whose parameters
//! changed is refused.

use super::*;
use tensorscope::nn::{LayerNorm, Linear, Sequential};
use tensorscope::optim::MasterWeights;

fn half_model(dev: Device) -> Sequential {
    tensorscope::manual_seed(9);
    let mut m = Sequential::new();
    m.add(Linear::with_options(8, 8, true, DType::F32, dev).unwrap())
        .add(LayerNorm::with_options(&[8], 1e-5, DType::F32, dev).unwrap());
    m.to_dtype_keeping(DType::BF16, &|n| n.starts_with("1."))
        .unwrap();
    m
}

fn train(m: &mut Sequential, opt: &mut dyn Optimizer, dev: Device, steps: usize) {
    let x = Tensor::ones(&[4, 8], DType::BF16, dev).unwrap();
    for _ in 0..steps {
        opt.zero_grad(m);
        m.forward(&x)
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap()
            .square()
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        opt.step(m).unwrap();
    }
}

fn small_updates_accumulate(dev: Device) {
    let adam = || {
        Adam::new(AdamConfig {
            lr: 1e-4,
            ..Default::default()
        })
        .unwrap()
    };
    let (mut plain, mut mixed) = (half_model(dev), half_model(dev));
    let w0 = plain.parameters()[0].to_vec::<f32>().unwrap();
    let mut opt = adam();
    train(&mut plain, &mut opt, dev, 20);
    let mut mw = MasterWeights::new(adam());
    train(&mut mixed, &mut mw, dev, 20);
    let moved = |m: &Sequential| {
        let w = m.parameters()[0].to_vec::<f32>().unwrap();
        w.iter().zip(&w0).filter(|(a, b)| a != b).count()
    };
    // 20 steps of 1e-4 move a weight by about 2e-3: below half a bf16 step
    // for most weights one by one, but not in the f32 copy.
    assert!(
        moved(&mixed) > moved(&plain),
        "master {} vs plain {}",
        moved(&mixed),
        moved(&plain)
    );
    let master = mw.master("0.weight").unwrap();
    assert_eq!(master.dtype(), DType::F32);
    let rounded = master
        .to_dtype(DType::BF16)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(
        mixed.parameters()[0].to_vec::<f32>().unwrap(),
        rounded,
        "the weight is its master rounded"
    );
    assert!(
        mw.master("1.weight").is_none(),
        "the f32 norm is stepped as it is"
    );
    assert_eq!(mixed.parameters()[2].dtype(), DType::F32);
}

fn later_steps_allocate_nothing(dev: Device) {
    let mut m = half_model(dev);
    let mut mw = MasterWeights::new(
        Sgd::new(SgdConfig {
            lr: 1e-2,
            ..Default::default()
        })
        .unwrap(),
    );
    train(&mut m, &mut mw, dev, 1);
    let x = Tensor::ones(&[4, 8], DType::BF16, dev).unwrap();
    m.forward(&x)
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    let before = memory::memory_stats(dev).allocation.all.allocated;
    for _ in 0..3 {
        mw.step(&mut m).unwrap();
    }
    assert_eq!(memory::memory_stats(dev).allocation.all.allocated, before);
}

fn changed_parameters_are_refused(dev: Device) {
    let mut m = half_model(dev);
    let mut mw = MasterWeights::new(Sgd::new(SgdConfig::default()).unwrap());
    train(&mut m, &mut mw, dev, 1);
    m.to_dtype(DType::F32).unwrap();
    let e = mw.step(&mut m).unwrap_err().to_string();
    assert!(
        e.contains("MasterWeights::step") && e.contains("changed"),
        "{e}"
    );
}

common::on_devices!(
    small_updates_accumulate,
    later_steps_allocate_nothing,
    changed_parameters_are_refused
);
