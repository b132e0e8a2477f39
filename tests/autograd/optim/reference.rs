//! Optimizers against naive f64 references of PyTorch's update equations, and the fused kernels over every option and layout.

use super::*;

#[test]
fn sgd_matches_reference() {
    let _l = lock();
    for (dt, tol) in [(DType::F64, 1e-12), (DType::F32, 1e-5)] {
        for c in sgd_option_sets() {
            let mut opt = Sgd::new(c).unwrap();
            let mut r = RefOpt::sgd(c, dt);
            compare(
                dt,
                tol,
                &mut opt,
                |k, p, g, t| r.update(k, p, g, t),
                &format!("{c:?}"),
            );
        }
    }
}

#[test]
fn adam_and_adamw_match_reference() {
    let _l = lock();
    for (dt, tol) in [(DType::F64, 1e-12), (DType::F32, 1e-5)] {
        for c in adam_option_sets() {
            let mut opt = Adam::new(c).unwrap();
            let mut r = RefOpt::adam(c, false, dt);
            compare(
                dt,
                tol,
                &mut opt,
                |k, p, g, t| r.update(k, p, g, t),
                &format!("Adam {c:?}"),
            );
            let mut opt = AdamW::new(c).unwrap();
            let mut r = RefOpt::adam(c, true, dt);
            compare(
                dt,
                tol,
                &mut opt,
                |k, p, g, t| r.update(k, p, g, t),
                &format!("AdamW {c:?}"),
            );
        }
    }
    assert_eq!(AdamConfig::adamw_default().weight_decay, 0.01);
}

#[test]
fn adam_in_f16_stays_close() {
    let _l = lock();
    let c = AdamConfig {
        lr: 0.01,
        ..Default::default()
    };
    let mut opt = Adam::new(c).unwrap();
    // (a reference that keeps full-precision state: close, not exact)
    let mut r = RefOpt::adam(c, false, DType::F64);
    compare(
        DType::F16,
        2e-2,
        &mut opt,
        |k, p, g, t| r.update(k, p, g, t),
        "Adam f16",
    );
}

/// How a gradient is laid out: one of the shared layouts, or a row
/// broadcast over the first dimension (stride 0).
#[derive(Clone, Copy, Debug)]
pub(super) enum GradKind {
    Of(Kind),
    Expanded,
}

pub(super) const GRAD_KINDS: [GradKind; 4] = [
    GradKind::Of(Kind::Contiguous),
    GradKind::Of(Kind::Transposed),
    GradKind::Of(Kind::Stepped),
    GradKind::Expanded,
];

/// Deterministic gradient values for step `t` (larger on the first step, so
/// that amsgrad's running maximum differs from `v` later).
pub(super) fn grad_values(shape: &[usize], t: usize, salt: usize, kind: GradKind) -> Vec<f64> {
    let cols = *shape.last().unwrap();
    let scale = if t == 1 { 3.0 } else { 0.5 + 0.25 * t as f64 };
    (0..layouts::numel(shape))
        .map(|i| {
            let i = if matches!(kind, GradKind::Expanded) {
                i % cols
            } else {
                i
            };
            ((i * 37 + t * 101 + salt * 13) as f64 * 0.7).sin() * scale
        })
        .collect()
}

pub(super) fn make_grad(v: &[f64], shape: &[usize], dt: DType, kind: GradKind) -> Tensor {
    match kind {
        GradKind::Of(k) => make(v, shape, dt, k),
        GradKind::Expanded => {
            let cols = *shape.last().unwrap();
            let mut row_shape = vec![1; shape.len()];
            row_shape[shape.len() - 1] = cols;
            let row = make(&v[..cols], &row_shape, dt, Kind::Contiguous);
            let s: Vec<isize> = shape.iter().map(|&d| d as isize).collect();
            row.expand(&s).unwrap()
        }
    }
}

/// Row-major values of any tensor.
pub(super) fn logical(t: &Tensor) -> Vec<f64> {
    vals(&t.contiguous().unwrap())
}

/// A naive reference update: parameter index, row-major parameter values,
/// row-major gradient, step number.
pub(super) type Reference<'a> = dyn FnMut(usize, &mut [f64], &[f64], usize) + 'a;

/// `steps` steps of `opt` on parameters of the given shapes and layouts with
/// gradients of layout `gk`, checked after each against `reference` (called
/// with the parameter's index, its row-major values, the row-major gradient
/// and the step number).
#[allow(clippy::too_many_arguments)]
pub(super) fn check_layouts(
    dt: DType,
    tol: f64,
    shapes: &[(&[usize], Kind)],
    gk: GradKind,
    steps: usize,
    opt: &mut dyn Optimizer,
    reference: &mut Reference,
    label: &str,
) {
    let mut model = Params(
        shapes
            .iter()
            .enumerate()
            .map(|(k, &(shape, kind))| {
                let v: Vec<f64> = (0..layouts::numel(shape))
                    .map(|i| ((i * 7 + k * 3) as f64 * 0.31).cos() * 2.0)
                    .collect();
                let p = make(&v, shape, dt, kind).requires_grad_(true).unwrap();
                (format!("p{k}"), p)
            })
            .collect(),
    );
    let mut want: Vec<Vec<f64>> = model.0.iter().map(|(_, p)| logical(p)).collect();
    for t in 1..=steps {
        for (k, (&(shape, _), (_, p))) in shapes.iter().zip(&model.0).enumerate() {
            let g = make_grad(&grad_values(shape, t, k, gk), shape, dt, gk);
            let gv = logical(&g);
            p.set_grad(Some(g)).unwrap();
            reference(k, &mut want[k], &gv, t);
        }
        let versions: Vec<u64> = model.0.iter().map(|(_, p)| p.version()).collect();
        opt.step(&mut model).unwrap();
        for (k, (_, p)) in model.0.iter().enumerate() {
            assert_eq!(p.version(), versions[k] + 1, "{label}: one bump per step");
            assert_close(
                &format!(
                    "{label} {dt} grads {gk:?} step {t} param {k} {:?}",
                    shapes[k]
                ),
                &logical(p),
                &want[k],
                tol,
            );
        }
    }
}

/// Tolerances of the fused kernels against the rounded f64 references:
/// f64 exact to rounding, f32 computed in f32, f16/bf16 two units in the
/// last place (the f32 computation may round the other way).
pub(super) const TOLS: [(DType, f64); 4] = [
    (DType::F64, 1e-12),
    (DType::F32, 1e-5),
    (DType::F16, 2e-3),
    (DType::BF16, 1.6e-2),
];

/// Small parameters of every layout (one walk on the calling thread).
pub(super) const SMALL: [(&[usize], Kind); 4] = [
    (&[5, 7], Kind::Contiguous),
    (&[5, 7], Kind::Transposed),
    (&[5, 7], Kind::Stepped),
    (&[7], Kind::Stepped),
];

/// One parameter large enough to be split over the kernel pool, and its
/// transpose.
pub(super) const LARGE: [(&[usize], Kind); 2] = [
    (&[384, 400], Kind::Contiguous),
    (&[400, 384], Kind::Transposed),
];

#[test]
fn fused_adam_matches_reference_for_every_option_and_layout() {
    let _l = lock();
    for (dt, tol) in TOLS {
        for c in adam_option_sets() {
            for decoupled in [false, true] {
                for gk in GRAD_KINDS {
                    let mut opt: Box<dyn Optimizer> = if decoupled {
                        Box::new(AdamW::new(c).unwrap())
                    } else {
                        Box::new(Adam::new(c).unwrap())
                    };
                    let mut r = RefOpt::adam(c, decoupled, dt);
                    let label = format!("decoupled {decoupled} {c:?}");
                    check_layouts(
                        dt,
                        tol,
                        &SMALL,
                        gk,
                        4,
                        &mut *opt,
                        &mut |k, p, g, t| r.update(k, p, g, t),
                        &label,
                    );
                }
            }
        }
    }
}

#[test]
fn fused_sgd_matches_reference_for_every_option_and_layout() {
    let _l = lock();
    let cfgs = sgd_option_sets();
    for (dt, tol) in TOLS {
        for c in &cfgs {
            for gk in GRAD_KINDS {
                let mut opt = Sgd::new(*c).unwrap();
                let mut r = RefOpt::sgd(*c, dt);
                check_layouts(
                    dt,
                    tol,
                    &SMALL,
                    gk,
                    4,
                    &mut opt,
                    &mut |k, p, g, t| r.update(k, p, g, t),
                    &format!("{c:?}"),
                );
            }
        }
    }
}

/// Parameters split over the kernel pool: every chunk updated once, with
/// contiguous and transposed gradients.
#[test]
fn fused_steps_on_large_parameters_match_reference() {
    let _l = lock();
    let c = AdamConfig {
        lr: 0.01,
        weight_decay: 0.05,
        amsgrad: true,
        ..Default::default()
    };
    let s = SgdConfig {
        lr: 0.05,
        momentum: 0.9,
        weight_decay: 0.01,
        ..Default::default()
    };
    for (dt, tol) in [(DType::F32, 1e-5), (DType::BF16, 1.6e-2)] {
        for gk in [
            GradKind::Of(Kind::Contiguous),
            GradKind::Of(Kind::Transposed),
        ] {
            let mut opt = AdamW::new(c).unwrap();
            let mut r = RefOpt::adam(c, true, dt);
            check_layouts(
                dt,
                tol,
                &LARGE,
                gk,
                3,
                &mut opt,
                &mut |k, p, g, t| r.update(k, p, g, t),
                "AdamW large",
            );
            let mut opt = Sgd::new(s).unwrap();
            let mut r = RefOpt::sgd(s, dt);
            check_layouts(
                dt,
                tol,
                &LARGE,
                gk,
                3,
                &mut opt,
                &mut |k, p, g, t| r.update(k, p, g, t),
                "Sgd large",
            );
        }
    }
}

/// A gradient that shares the parameter's storage: with the same layout it
/// is read element by element before each write; through another layout
/// (a transposed view of the parameter itself) it is copied first (the one
/// case where a step allocates). Either way the result is the reference's
/// with the gradient's values taken before the step.
#[test]
fn a_gradient_sharing_the_parameters_storage() {
    let _l = lock();
    let c = AdamConfig {
        lr: 0.1,
        weight_decay: 0.1,
        ..Default::default()
    };
    for transposed in [false, true] {
        let v: Vec<f64> = (0..16).map(|i| (i as f64 * 0.37).sin()).collect();
        let p = make(&v, &[4, 4], DType::F64, Kind::Contiguous)
            .requires_grad_(true)
            .unwrap();
        let g = if transposed {
            p.detach().t().unwrap()
        } else {
            p.detach()
        };
        let gv = logical(&g);
        p.set_grad(Some(g)).unwrap();
        let mut model = Params(vec![("p".into(), p)]);
        Adam::new(c).unwrap().step(&mut model).unwrap();
        let mut want = v.clone();
        RefOpt::adam(c, false, DType::F64).update(0, &mut want, &gv, 1);
        assert_close(
            &format!("self-grad transposed {transposed}"),
            &logical(&model.0[0].1),
            &want,
            1e-12,
        );
    }
}
