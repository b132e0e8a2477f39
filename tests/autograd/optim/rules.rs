//! Versions, bad parameters and gradients, clip_grad_norm_'s layouts.

use super::*;

#[test]
fn steps_bump_versions_and_invalidate_saved_tensors() {
    let _l = lock();
    let opts: Vec<Box<dyn Optimizer>> = vec![
        Box::new(Adam::new(AdamConfig::default()).unwrap()),
        Box::new(Sgd::new(SgdConfig::default()).unwrap()),
    ];
    for mut opt in opts {
        let w = Tensor::ones(&[3], DType::F32, CPU)
            .unwrap()
            .requires_grad_(true)
            .unwrap();
        let mut model = Params(vec![("w".into(), w)]);
        let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3], CPU)
            .unwrap()
            .requires_grad_(true)
            .unwrap();
        let y = x.mul(&model.0[0].1).unwrap().sum_all().unwrap(); // saves w for dx
        model.0[0]
            .1
            .set_grad(Some(Tensor::ones(&[3], DType::F32, CPU).unwrap()))
            .unwrap();
        let v0 = model.0[0].1.version();
        opt.step(&mut model).unwrap();
        assert_eq!(model.0[0].1.version(), v0 + 1);
        let e = y.backward().unwrap_err().to_string();
        assert!(e.contains("version"), "{e}");
    }
}

#[test]
fn bad_parameters_and_gradients_are_errors() {
    let _l = lock();
    // a parameter whose elements share memory cannot be updated in place
    let w = Tensor::ones(&[1, 3], DType::F32, CPU)
        .unwrap()
        .expand(&[4, 3])
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    w.set_grad(Some(Tensor::ones(&[4, 3], DType::F32, CPU).unwrap()))
        .unwrap();
    let mut model = Params(vec![("w".into(), w)]);
    for (mut opt, op) in [
        (
            Box::new(Adam::new(AdamConfig::default()).unwrap()) as Box<dyn Optimizer>,
            "Adam::step",
        ),
        (
            Box::new(AdamW::new(AdamConfig::default()).unwrap()),
            "AdamW::step",
        ),
        (
            Box::new(Sgd::new(SgdConfig::default()).unwrap()),
            "Sgd::step",
        ),
    ] {
        let before = logical(&model.0[0].1);
        let e = opt.step(&mut model).unwrap_err();
        assert!(
            matches!(e, Error::InvalidInPlace { .. }) && e.to_string().contains(op),
            "{e}"
        );
        assert_eq!(logical(&model.0[0].1), before);
    }
    // a gradient of another dtype is refused when it is set (as PyTorch's
    // `x.grad = g`), so no optimizer ever sees one; the step then has no
    // gradient to apply and leaves the parameter alone
    let w = Tensor::ones(&[3], DType::F32, CPU)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let e = w
        .set_grad(Some(Tensor::ones(&[3], DType::F64, CPU).unwrap()))
        .unwrap_err();
    assert!(
        matches!(e, Error::DTypeMismatch { op: "set_grad", .. }),
        "{e}"
    );
    assert!(w.grad().is_none());
    let mut model = Params(vec![("w".into(), w)]);
    for mut opt in [
        Box::new(Adam::new(AdamConfig::default()).unwrap()) as Box<dyn Optimizer>,
        Box::new(Sgd::new(SgdConfig::default()).unwrap()),
    ] {
        opt.step(&mut model).unwrap();
        assert_eq!(logical(&model.0[0].1), vec![1.0; 3]);
    }
}

/// clip_grad_norm_ over gradients of every layout and float dtype: the
/// norm of a naive f64 sum, the scaled values, and no allocation at all,
/// on the first call too; a gradient large enough for the kernel pool.
#[test]
fn clip_grad_norm_allocates_nothing_and_handles_layouts() {
    let _l = lock();
    for (dt, tol) in TOLS {
        let shapes: [&[usize]; 4] = [&[5, 7], &[5, 7], &[5, 7], &[384, 400]];
        let kinds = [GRAD_KINDS[0], GRAD_KINDS[1], GRAD_KINDS[2], GRAD_KINDS[1]];
        let params: Vec<(String, Tensor)> = shapes
            .iter()
            .enumerate()
            .map(|(k, s)| {
                let p = Tensor::zeros(s, dt, CPU)
                    .unwrap()
                    .requires_grad_(true)
                    .unwrap();
                let g = make_grad(&grad_values(s, 2, k, kinds[k]), s, dt, kinds[k]);
                p.set_grad(Some(g)).unwrap();
                (format!("p{k}"), p)
            })
            .collect();
        let model = Params(params);
        let gv: Vec<Vec<f64>> = model
            .parameters()
            .iter()
            .map(|p| logical(&p.grad().unwrap()))
            .collect();
        let norm: f64 = gv.iter().flatten().map(|v| v * v).sum::<f64>().sqrt();
        let before = allocs();
        // no clipping
        let n = clip_grad_norm_(&model, norm * 2.0).unwrap();
        assert!((n - norm).abs() <= 1e-12 * norm, "{dt}: {n} vs {norm}");
        // clipping
        let n = clip_grad_norm_(&model, norm / 4.0).unwrap();
        assert!((n - norm).abs() <= 1e-12 * norm, "{dt}: {n} vs {norm}");
        assert_eq!(allocs(), before, "{dt}: clip_grad_norm_ allocated");
        let coef = 0.25 * norm / (norm + 1e-6);
        for (k, (p, want)) in model.parameters().iter().zip(&gv).enumerate() {
            let w: Vec<f64> = want.iter().map(|v| store(dt, v * coef)).collect();
            assert_close(
                &format!("{dt} clipped {k}"),
                &logical(&p.grad().unwrap()),
                &w,
                tol,
            );
        }
    }
}

/// An expanded gradient cannot be scaled in place: an `Err` naming
/// clip_grad_norm_, whatever the norm, and no gradient changed.
#[test]
fn clip_grad_norm_refuses_an_expanded_gradient() {
    let _l = lock();
    let s: &[usize] = &[5, 7];
    let model = Params(
        [GradKind::Of(Kind::Contiguous), GradKind::Expanded]
            .iter()
            .enumerate()
            .map(|(k, &gk)| {
                let p = Tensor::zeros(s, DType::F32, CPU)
                    .unwrap()
                    .requires_grad_(true)
                    .unwrap();
                p.set_grad(Some(make_grad(
                    &grad_values(s, 1, k, gk),
                    s,
                    DType::F32,
                    gk,
                )))
                .unwrap();
                (format!("p{k}"), p)
            })
            .collect(),
    );
    let before: Vec<Vec<f64>> = model
        .parameters()
        .iter()
        .map(|p| logical(&p.grad().unwrap()))
        .collect();
    for max_norm in [1e-3, 1e6] {
        let e = clip_grad_norm_(&model, max_norm).unwrap_err();
        assert!(
            matches!(e, Error::InvalidInPlace { .. }) && e.to_string().contains("clip_grad_norm_"),
            "{e}"
        );
        let after: Vec<Vec<f64>> = model
            .parameters()
            .iter()
            .map(|p| logical(&p.grad().unwrap()))
            .collect();
        assert_eq!(after, before);
    }
}
