//! Issue 17 item 6: RMSprop, Adagrad and Lion on the CPU and on CUDA
//! device 0 (`on_both!`). Every option set, float dtype and parameter and
//! gradient layout against naive f64 references of the update equations
//! (tests/common/optim_ref.rs), and on CUDA against the CPU; steps after the
//! first allocate nothing and the state is exactly the buffers the options
//! call for; the state follows a parameter through pruning's renaming;
//! refused hyper-parameters and a parameter that no longer fits its state
//! are errors naming the optimizer.
//! Agreement with PyTorch itself is in the differential suite.

use crate::common;

#[cfg(feature = "cuda")]
use common::devices::on_both;
use common::optim_ref::{
    adagrad_option_sets, lion_option_sets, ref_adagrad, ref_lion, ref_rmsprop, rmsprop_option_sets,
};
use common::optim_steps::{check_cases, grad_vals, laid_out, Case, Lay};
use common::{read, Params, FLOATS};
use tensorscope::optim::{
    Adagrad, AdagradConfig, Lion, LionConfig, Optimizer, RMSprop, RMSpropConfig,
};
use tensorscope::{memory, DType, Device, Error, Tensor};

#[cfg(feature = "cuda")]
on_both!(
    updates_match_the_reference,
    steps_after_the_first_allocate_nothing,
    bad_input_is_an_error,
);

#[cfg(not(feature = "cuda"))]
common::on_cpu!(
    updates_match_the_reference,
    steps_after_the_first_allocate_nothing,
    bad_input_is_an_error,
);

fn cases(dt: DType) -> Vec<Case> {
    let mut v: Vec<Case> = Vec::new();
    for c in rmsprop_option_sets() {
        v.push((
            format!("{c:?}"),
            Box::new(move || Box::new(RMSprop::new(c).unwrap())),
            ref_rmsprop(c, dt),
        ));
    }
    for c in adagrad_option_sets() {
        v.push((
            format!("{c:?}"),
            Box::new(move || Box::new(Adagrad::new(c).unwrap())),
            ref_adagrad(c, dt),
        ));
    }
    for c in lion_option_sets() {
        v.push((
            format!("{c:?}"),
            Box::new(move || Box::new(Lion::new(c).unwrap())),
            ref_lion(c, dt),
        ));
    }
    v
}

/// Every option set of the three optimizers for four steps, in every float
/// dtype, on contiguous, transposed and stepped parameters with
/// contiguous, transposed and expanded gradients: against the f64
/// reference, and on CUDA against the CPU (`optim_steps::check_cases`, as
/// Adam's and SGD's in tests/cuda/cuda_ops/).
fn updates_match_the_reference(dev: Device) {
    for dt in FLOATS {
        check_cases(dev, dt, cases(dt));
    }
}

/// The blocks and bytes the allocator of `dev` ever handed out.
fn allocs(dev: Device) -> (u64, u64) {
    let s = memory::memory_stats(dev);
    (s.allocation.all.allocated, s.allocated_bytes.all.allocated)
}

/// The first step makes exactly the state the options call for (one
/// parameter-sized buffer per slot); steps 2..10 allocate nothing; the
/// state is keyed by name without pruning's `_orig`, so renaming the
/// parameter keeps it; dropping the optimizer frees it.
fn steps_after_the_first_allocate_nothing(dev: Device) {
    let opts: Vec<(Box<dyn Optimizer>, usize, &str)> = vec![
        (
            Box::new(RMSprop::new(RMSpropConfig::default()).unwrap()),
            1,
            "RMSprop",
        ),
        (
            Box::new(
                RMSprop::new(RMSpropConfig {
                    momentum: 0.9,
                    ..Default::default()
                })
                .unwrap(),
            ),
            2,
            "RMSprop momentum",
        ),
        (
            Box::new(
                RMSprop::new(RMSpropConfig {
                    momentum: 0.9,
                    centered: true,
                    ..Default::default()
                })
                .unwrap(),
            ),
            3,
            "RMSprop momentum centered",
        ),
        (
            Box::new(
                Adagrad::new(AdagradConfig {
                    initial_accumulator_value: 0.1,
                    ..Default::default()
                })
                .unwrap(),
            ),
            1,
            "Adagrad",
        ),
        (
            Box::new(Lion::new(LionConfig::default()).unwrap()),
            1,
            "Lion",
        ),
    ];
    for (mut opt, buffers, label) in opts {
        let start = memory::memory_allocated(dev);
        let mut model = Params(
            [(3usize, 40usize), (1, 40)]
                .iter()
                .enumerate()
                .map(|(k, &(r, c))| {
                    let v: Vec<f64> = (0..r * c)
                        .map(|i| ((i * 7 + k) as f64 * 0.31).cos())
                        .collect();
                    let p = laid_out(&v, r, c, DType::F32, dev, Lay::Contiguous);
                    (format!("w{k}"), p.requires_grad_(true).unwrap())
                })
                .collect(),
        );
        let per_set: usize = model
            .0
            .iter()
            .map(|(_, p)| memory::round_size(p.numel() * 4))
            .sum();
        for (k, (_, p)) in model.0.iter().enumerate() {
            let s = p.shape().to_vec();
            let g = laid_out(
                &grad_vals(s[0] * s[1], 1, k),
                s[0],
                s[1],
                DType::F32,
                dev,
                Lay::Transposed,
            );
            p.set_grad(Some(g)).unwrap();
        }
        let before = memory::memory_allocated(dev);
        opt.step(&mut model).unwrap();
        let state = memory::memory_allocated(dev) - before;
        assert_eq!(state, buffers * per_set, "{label}: the first step's state");
        let settled = allocs(dev);
        for _ in 2..=10 {
            opt.step(&mut model).unwrap();
        }
        // Pruning renames `w0` to `w0_orig`: the same state is used.
        model.0[0].0 = "w0_orig".into();
        opt.step(&mut model).unwrap();
        assert_eq!(allocs(dev), settled, "{label}: steps 2..11 allocated");
        assert_eq!(memory::memory_allocated(dev) - before, state, "{label}");
        drop(opt);
        drop(model);
        assert_eq!(memory::memory_allocated(dev), start, "{label}: all freed");
    }
}

/// Hyper-parameters that are refused (PyTorch's checks; non-finite values
/// too, as for every optimizer here), and a parameter that changed shape since its state was made: each an `Err`
/// naming the optimizer, and nothing updated.
fn bad_input_is_an_error(dev: Device) {
    let arg = |r: Result<(), Error>, op: &str, what: &str| {
        let e = r.unwrap_err().to_string();
        assert!(e.contains(op) && e.contains(what), "{op} {what}: {e}");
    };
    let rms = |c: RMSpropConfig| RMSprop::new(c).map(|_| ());
    arg(
        rms(RMSpropConfig {
            lr: -1.0,
            ..Default::default()
        }),
        "RMSprop::new",
        "lr",
    );
    arg(
        rms(RMSpropConfig {
            alpha: -0.1,
            ..Default::default()
        }),
        "RMSprop::new",
        "alpha",
    );
    arg(
        rms(RMSpropConfig {
            momentum: f64::NAN,
            ..Default::default()
        }),
        "RMSprop::new",
        "momentum",
    );
    arg(
        rms(RMSpropConfig {
            eps: -1e-8,
            ..Default::default()
        }),
        "RMSprop::new",
        "eps",
    );
    let ada = |c: AdagradConfig| Adagrad::new(c).map(|_| ());
    arg(
        ada(AdagradConfig {
            lr_decay: -0.1,
            ..Default::default()
        }),
        "Adagrad::new",
        "lr_decay",
    );
    arg(
        ada(AdagradConfig {
            initial_accumulator_value: -1.0,
            ..Default::default()
        }),
        "Adagrad::new",
        "initial_accumulator_value",
    );
    arg(
        ada(AdagradConfig {
            weight_decay: f64::INFINITY,
            ..Default::default()
        }),
        "Adagrad::new",
        "weight_decay",
    );
    let lion = |c: LionConfig| Lion::new(c).map(|_| ());
    arg(
        lion(LionConfig {
            betas: (1.5, 0.99),
            ..Default::default()
        }),
        "Lion::new",
        "betas.0",
    );
    arg(
        lion(LionConfig {
            betas: (0.9, -0.1),
            ..Default::default()
        }),
        "Lion::new",
        "betas.1",
    );
    arg(
        lion(LionConfig {
            lr: -1e-4,
            ..Default::default()
        }),
        "Lion::new",
        "lr",
    );
    // A boundary PyTorch accepts.
    assert!(Lion::new(LionConfig {
        betas: (1.0, 0.0),
        ..Default::default()
    })
    .is_ok());

    let mut model = Params(vec![(
        "w".into(),
        Tensor::ones(&[2, 3], DType::F32, dev)
            .unwrap()
            .requires_grad_(true)
            .unwrap(),
    )]);
    let mut opt = Lion::new(LionConfig::default()).unwrap();
    model.0[0]
        .1
        .set_grad(Some(Tensor::ones(&[2, 3], DType::F32, dev).unwrap()))
        .unwrap();
    opt.step(&mut model).unwrap();
    let after = read(&model.0[0].1);
    // The parameter replaced by one of another shape: the state no longer fits.
    model.0[0].1 = Tensor::ones(&[3, 3], DType::F32, dev)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    model.0[0]
        .1
        .set_grad(Some(Tensor::ones(&[3, 3], DType::F32, dev).unwrap()))
        .unwrap();
    arg(
        opt.step(&mut model),
        "Lion::step",
        "changed since the optimizer's state was made",
    );
    assert_eq!(read(&model.0[0].1), vec![1.0; 9], "nothing updated");
    assert!(after.iter().all(|&x| x == after[0] && x < 1.0), "{after:?}");
}
