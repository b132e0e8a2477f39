//! Clip_grad_norm_ against a reference, the learning-rate schedules, bad hyper-parameters.

use super::*;

#[test]
fn clip_grad_norm_matches_reference() {
    let _l = lock();
    let model = Mlp::new(3, 4, 2, DType::F32, 2);
    let grads = fixed_grads(&model, 0);
    set_grads(&model, &grads);
    let gv: Vec<Vec<f64>> = grads.iter().map(vals).collect();
    let norm: f64 = gv.iter().flatten().map(|v| v * v).sum::<f64>().sqrt();
    // above the norm: nothing changes
    let n = clip_grad_norm_(&model, norm * 2.0).unwrap();
    assert!((n - norm).abs() < 1e-9 * norm);
    for (p, want) in model.parameters().iter().zip(&gv) {
        assert_eq!(&vals(&p.grad().unwrap()), want);
    }
    // clip to 1.0: every gradient scaled by 1 / (norm + 1e-6)
    let n = clip_grad_norm_(&model, 1.0).unwrap();
    assert!((n - norm).abs() < 1e-9 * norm);
    let coef = 1.0 / (norm + 1e-6);
    let mut sq = 0.0;
    for (p, want) in model.parameters().iter().zip(&gv) {
        let got = vals(&p.grad().unwrap());
        let w: Vec<f64> = want.iter().map(|v| v * coef).collect();
        assert_close("clipped", &got, &w, 1e-6);
        sq += got.iter().map(|v| v * v).sum::<f64>();
    }
    assert!((sq.sqrt() - 1.0).abs() < 1e-5);
    // the grads were scaled in place: same storages
    let model2 = Mlp::new(3, 4, 2, DType::F32, 2);
    assert_eq!(clip_grad_norm_(&model2, 1.0).unwrap(), 0.0);
    let e = clip_grad_norm_(&model, -1.0).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { .. }) && e.to_string().contains("clip_grad_norm_"),
        "{e}"
    );
}

#[test]
fn step_lr_closed_form() {
    let _shared = crate::common::shared();
    let mut opt = Sgd::new(SgdConfig {
        lr: 0.1,
        ..Default::default()
    })
    .unwrap();
    let mut s = StepLR::new(&opt, 3, 0.1).unwrap();
    // by hand: epochs 0-2: 0.1, 3-5: 0.01, 6-8: 0.001, 9: 0.0001
    let want = [0.1, 0.1, 0.1, 0.01, 0.01, 0.01, 0.001, 0.001, 0.001, 0.0001];
    assert_eq!(s.get_lr(), 0.1);
    for (e, w) in want.iter().enumerate().skip(1) {
        s.step(&mut opt);
        assert_eq!(s.last_epoch(), e);
        assert!(
            (opt.lr() - w).abs() < 1e-15,
            "epoch {e}: {} vs {w}",
            opt.lr()
        );
    }
    let e = StepLR::new(&opt, 0, 0.1).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { .. }) && e.to_string().contains("StepLR"),
        "{e}"
    );
    assert!(StepLR::new(&opt, 1, -1.0).is_err());
}

#[test]
fn cosine_closed_form() {
    let _shared = crate::common::shared();
    let mut opt = Adam::new(AdamConfig {
        lr: 1.0,
        ..Default::default()
    })
    .unwrap();
    let mut s = CosineAnnealingLR::new(&opt, 4, 0.0).unwrap();
    // by hand: (1 + cos(pi * e / 4)) / 2 for e = 0..8
    let h = std::f64::consts::FRAC_1_SQRT_2 / 2.0;
    let want = [1.0, 0.5 + h, 0.5, 0.5 - h, 0.0, 0.5 - h, 0.5, 0.5 + h, 1.0];
    for (e, w) in want.iter().enumerate().skip(1) {
        s.step(&mut opt);
        assert!(
            (opt.lr() - w).abs() < 1e-12,
            "epoch {e}: {} vs {w}",
            opt.lr()
        );
    }
    let mut opt = Sgd::new(SgdConfig {
        lr: 0.1,
        ..Default::default()
    })
    .unwrap();
    let mut s = CosineAnnealingLR::new(&opt, 10, 0.02).unwrap();
    for _ in 0..5 {
        s.step(&mut opt);
    }
    assert!((opt.lr() - 0.06).abs() < 1e-12); // 0.02 + 0.08 * (1 + cos(pi/2)) / 2
    for _ in 0..5 {
        s.step(&mut opt);
    }
    assert!((opt.lr() - 0.02).abs() < 1e-12);
    let e = CosineAnnealingLR::new(&opt, 0, 0.0).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { .. }) && e.to_string().contains("CosineAnnealingLR"),
        "{e}"
    );
}

#[test]
fn bad_hyper_parameters_are_errors() {
    let _shared = crate::common::shared();
    let cases: Vec<(Result<()>, &str)> = vec![
        (
            Sgd::new(SgdConfig {
                lr: -0.1,
                ..Default::default()
            })
            .map(|_| ()),
            "Sgd::new",
        ),
        (
            Sgd::new(SgdConfig {
                lr: 0.1,
                nesterov: true,
                ..Default::default()
            })
            .map(|_| ()),
            "Nesterov",
        ),
        (
            Sgd::new(SgdConfig {
                lr: 0.1,
                momentum: 0.9,
                dampening: 0.1,
                nesterov: true,
                ..Default::default()
            })
            .map(|_| ()),
            "Nesterov",
        ),
        (
            Sgd::new(SgdConfig {
                lr: f64::NAN,
                ..Default::default()
            })
            .map(|_| ()),
            "lr",
        ),
        (
            Adam::new(AdamConfig {
                betas: (1.0, 0.9),
                ..Default::default()
            })
            .map(|_| ()),
            "betas.0",
        ),
        (
            Adam::new(AdamConfig {
                eps: -1.0,
                ..Default::default()
            })
            .map(|_| ()),
            "eps",
        ),
        (
            AdamW::new(AdamConfig {
                weight_decay: -1.0,
                ..Default::default()
            })
            .map(|_| ()),
            "AdamW::new",
        ),
    ];
    for (r, needle) in cases {
        let e = r.unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
        assert!(e.to_string().contains(needle), "{e} should name {needle}");
    }
}

#[test]
fn a_parameter_that_changed_shape_is_an_error() {
    let _l = lock();
    let mut model = Mlp::new(3, 4, 2, DType::F32, 1);
    let mut opt = Adam::new(AdamConfig::default()).unwrap();
    model
        .b2
        .set_grad(Some(Tensor::ones(&[2], DType::F32, CPU).unwrap()))
        .unwrap();
    opt.step(&mut model).unwrap();
    model.b2 = Tensor::zeros(&[5], DType::F32, CPU)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    model
        .b2
        .set_grad(Some(Tensor::ones(&[5], DType::F32, CPU).unwrap()))
        .unwrap();
    let e = opt.step(&mut model).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { .. }) && e.to_string().contains("Adam::step"),
        "{e}"
    );
    assert!(e.to_string().contains("b2"), "{e}");
}
