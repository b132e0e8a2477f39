//! Optimizers against naive f64 references of PyTorch's update equations,
//! allocation-free steps after the first, clipping, schedules, bad input.

use std::sync::Mutex;
use tensorscope::nn::Module;
use tensorscope::optim::{
    clip_grad_norm_, Adam, AdamConfig, AdamW, CosineAnnealingLR, LrScheduler, Optimizer, Sgd,
    SgdConfig, StepLR,
};
use tensorscope::{memory, DType, Device, Error, Generator, Result, Tensor};

mod common;
use common::layouts::{self, make, Kind};
use common::optim_ref::{adam_option_sets, sgd_option_sets, RefOpt};
use common::{store, Params};

static LOCK: Mutex<()> = Mutex::new(());
fn lock() -> std::sync::MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

const CPU: Device = Device::Cpu;

/// A two-layer MLP written by hand (no nn layers needed).
struct Mlp {
    w1: Tensor,
    b1: Tensor,
    w2: Tensor,
    b2: Tensor,
}

impl Mlp {
    fn new(i: usize, h: usize, o: usize, dt: DType, seed: u64) -> Mlp {
        let mut g = Generator::new(seed);
        let mut p = |s: &[usize]| {
            Tensor::randn_with(s, dt, CPU, &mut g)
                .unwrap()
                .requires_grad_(true)
                .unwrap()
        };
        Mlp {
            w1: p(&[i, h]),
            b1: p(&[h]),
            w2: p(&[h, o]),
            b2: p(&[o]),
        }
    }
}

impl Module for Mlp {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.matmul(&self.w1)?
            .add(&self.b1)?
            .relu()?
            .matmul(&self.w2)?
            .add(&self.b2)
    }
    fn named_parameters(&self) -> Vec<(String, &Tensor)> {
        vec![
            ("w1".into(), &self.w1),
            ("b1".into(), &self.b1),
            ("w2".into(), &self.w2),
            ("b2".into(), &self.b2),
        ]
    }
    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
        vec![
            ("w1".into(), &mut self.w1),
            ("b1".into(), &mut self.b1),
            ("w2".into(), &mut self.w2),
            ("b2".into(), &mut self.b2),
        ]
    }
}

fn vals(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap()
}

/// Fixed gradients, one per parameter and per step; the w1 gradient is a
/// transposed (non-contiguous) tensor.
fn fixed_grads(model: &Mlp, step: usize) -> Vec<Tensor> {
    let mut g = Generator::new(1000 + step as u64);
    model
        .parameters()
        .iter()
        .enumerate()
        .map(|(k, p)| {
            let dt = p.dtype();
            if k == 0 {
                let s = p.shape();
                Tensor::randn_with(&[s[1], s[0]], dt, CPU, &mut g)
                    .unwrap()
                    .t()
                    .unwrap()
            } else {
                Tensor::randn_with(p.shape(), dt, CPU, &mut g).unwrap()
            }
        })
        .collect()
}

fn set_grads(model: &Mlp, grads: &[Tensor]) {
    for (p, g) in model.parameters().into_iter().zip(grads) {
        p.set_grad(Some(g.alias())).unwrap();
    }
}

fn assert_close(what: &str, got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!(
            (a - b).abs() <= tol * (1.0 + b.abs()),
            "{what}[{i}]: got {a}, want {b}"
        );
    }
}

/// Runs `steps` steps of `opt` and of `reference` (one f64 vector per
/// parameter, updated with the gradient) side by side.
fn compare(
    dt: DType,
    tol: f64,
    opt: &mut dyn Optimizer,
    mut reference: impl FnMut(usize, &mut [f64], &[f64], usize),
    label: &str,
) {
    let mut model = Mlp::new(3, 4, 2, dt, 7);
    let mut ref_p: Vec<Vec<f64>> = model.parameters().iter().map(|p| vals(p)).collect();
    for step in 0..5 {
        let grads = fixed_grads(&model, step);
        set_grads(&model, &grads);
        opt.step(&mut model).unwrap();
        for (k, g) in grads.iter().enumerate() {
            // contiguous values in the parameter's (row-major) order
            let gv = vals(&g.contiguous().unwrap());
            reference(k, &mut ref_p[k], &gv, step + 1);
        }
        for (k, p) in model.parameters().iter().enumerate() {
            assert_close(
                &format!("{label} {dt} step {} param {k}", step + 1),
                &vals(p),
                &ref_p[k],
                tol,
            );
        }
    }
}

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
enum GradKind {
    Of(Kind),
    Expanded,
}

const GRAD_KINDS: [GradKind; 4] = [
    GradKind::Of(Kind::Contiguous),
    GradKind::Of(Kind::Transposed),
    GradKind::Of(Kind::Stepped),
    GradKind::Expanded,
];

/// Deterministic gradient values for step `t` (larger on the first step, so
/// that amsgrad's running maximum differs from `v` later).
fn grad_values(shape: &[usize], t: usize, salt: usize, kind: GradKind) -> Vec<f64> {
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

fn make_grad(v: &[f64], shape: &[usize], dt: DType, kind: GradKind) -> Tensor {
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
fn logical(t: &Tensor) -> Vec<f64> {
    vals(&t.contiguous().unwrap())
}

/// A naive reference update: parameter index, row-major parameter values,
/// row-major gradient, step number.
type Reference<'a> = dyn FnMut(usize, &mut [f64], &[f64], usize) + 'a;

/// `steps` steps of `opt` on parameters of the given shapes and layouts with
/// gradients of layout `gk`, checked after each against `reference` (called
/// with the parameter's index, its row-major values, the row-major gradient
/// and the step number).
#[allow(clippy::too_many_arguments)]
fn check_layouts(
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
const TOLS: [(DType, f64); 4] = [
    (DType::F64, 1e-12),
    (DType::F32, 1e-5),
    (DType::F16, 2e-3),
    (DType::BF16, 1.6e-2),
];

/// Small parameters of every layout (one walk on the calling thread).
const SMALL: [(&[usize], Kind); 4] = [
    (&[5, 7], Kind::Contiguous),
    (&[5, 7], Kind::Transposed),
    (&[5, 7], Kind::Stepped),
    (&[7], Kind::Stepped),
];

/// One parameter large enough to be split over the kernel pool, and its
/// transpose.
const LARGE: [(&[usize], Kind); 2] = [
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

/// The optimizers against torch.optim in float64. The numbers were printed by
/// PyTorch 2.15.0 (CPU) with this script:
///
/// ```text
/// import torch
/// torch.set_default_dtype(torch.float64)
/// p0 = [0.5, -1.0, 2.0, 0.0, 1.5, -0.25]
/// grads = [[0.3, -0.2, 1.0, 0.05, -0.7, 0.4],
///          [-0.1, 0.25, 0.5, -0.3, 0.2, 0.0],
///          [0.02, -0.6, -0.1, 0.4, 0.05, 0.9]]
/// cases = {
///   "adam": (torch.optim.Adam, dict(lr=0.1)),
///   "adam_all": (torch.optim.Adam, dict(lr=0.1, betas=(0.3, 0.9), eps=1e-3, weight_decay=0.1, amsgrad=True, maximize=True)),
///   "adamw_ams": (torch.optim.AdamW, dict(lr=0.1, weight_decay=0.5, amsgrad=True)),
///   "sgd_mom": (torch.optim.SGD, dict(lr=0.1, momentum=0.9, dampening=0.2, weight_decay=0.05, maximize=True)),
///   "sgd_nesterov": (torch.optim.SGD, dict(lr=0.1, momentum=0.8, nesterov=True, weight_decay=0.05)),
/// }
/// for name, (cls, kw) in cases.items():
///     p = torch.nn.Parameter(torch.tensor(p0).reshape(2, 3))
///     opt = cls([p], **kw)
///     out = []
///     for g in grads:
///         p.grad = torch.tensor(g).reshape(2, 3)
///         opt.step()
///         out.append(p.detach().flatten().tolist())
///     print(name, [[repr(x) for x in r] for r in out])
/// ```
#[test]
fn matches_torch_optim_fixture() {
    let _l = lock();
    const P0: [f64; 6] = [0.5, -1.0, 2.0, 0.0, 1.5, -0.25];
    const G: [[f64; 6]; 3] = [
        [0.3, -0.2, 1.0, 0.05, -0.7, 0.4],
        [-0.1, 0.25, 0.5, -0.3, 0.2, 0.0],
        [0.02, -0.6, -0.1, 0.4, 0.05, 0.9],
    ];
    type Want = [[f64; 6]; 3];
    let adam: Want = [
        [
            0.4000000033333332,
            -0.9000000049999998,
            1.900000001,
            -0.09999998000000399,
            1.5999999985714286,
            -0.34999999750000005,
        ],
        [
            0.35997814792808075,
            -0.9162732304481741,
            1.806782038298161,
            -0.03760811625382157,
            1.6439728025770168,
            -0.41700582054404756,
        ],
        [
            0.32506696968844956,
            -0.8658234296791494,
            1.740707399161892,
            -0.059287630263029766,
            1.6735025940551407,
            -0.49640962447179504,
        ],
    ];
    let adam_all: Want = [
        [
            0.599601593625498,
            -1.099009900990099,
            2.099875156054931,
            0.09803921568627451,
            1.400117508813161,
            -0.15023474178403756,
        ],
        [
            0.568262554656889,
            -1.005374142281058,
            2.168927132920462,
            -0.00125916430556533,
            1.3758306359383927,
            -0.11479221731191958,
        ],
        [
            0.5426123948524444,
            -1.082709911438832,
            2.1465335803610706,
            0.07254567090435281,
            1.3555154418144992,
            -0.0006652211061898838,
        ],
    ];
    let adamw_ams: Want = [
        [
            0.37500000333333317,
            -0.8500000049999997,
            1.800000001,
            -0.09999998000000399,
            1.5249999985714284,
            -0.33749999750000004,
        ],
        [
            0.31622814776141406,
            -0.8237732301981741,
            1.6167820382481608,
            -0.03260811725382137,
            1.4927228026484451,
            -0.38759730937879167,
        ],
        [
            0.2655055621337121,
            -0.7321347679192405,
            1.4698682971994836,
            -0.0526572254003385,
            1.4476164539941467,
            -0.44762124783759955,
        ],
    ];
    let sgd_mom: Want = [
        [0.5275, -1.015, 2.09, 0.005000000000000001, 1.4225, -0.20875],
        [
            0.54214,
            -1.00444,
            2.2026399999999997,
            -0.014519999999999998,
            1.3630600000000002,
            -0.17079,
        ],
        [
            0.55474744,
            -1.03891824,
            2.2872054399999997,
            -2.991999999999498e-05,
            1.30811176,
            -0.06394283999999999,
        ],
    ];
    let sgd_nesterov: Want = [
        [
            0.4415,
            -0.955,
            1.802,
            -0.009000000000000001,
            1.6125,
            -0.31975,
        ],
        [
            0.4347265,
            -0.975405,
            1.625382,
            0.041881,
            1.6019875000000001,
            -0.34167225,
        ],
        [
            0.4155611615,
            -0.858770355,
            1.534667162,
            -0.013827129000000007,
            1.5926096125000002,
            -0.51941399975,
        ],
    ];
    type Make = fn() -> Box<dyn Optimizer>;
    let cases: [(&str, Make, Want); 5] = [
        (
            "adam",
            || {
                Box::new(
                    Adam::new(AdamConfig {
                        lr: 0.1,
                        ..Default::default()
                    })
                    .unwrap(),
                )
            },
            adam,
        ),
        (
            "adam_all",
            || {
                Box::new(
                    Adam::new(AdamConfig {
                        lr: 0.1,
                        betas: (0.3, 0.9),
                        eps: 1e-3,
                        weight_decay: 0.1,
                        amsgrad: true,
                        maximize: true,
                    })
                    .unwrap(),
                )
            },
            adam_all,
        ),
        (
            "adamw_ams",
            || {
                Box::new(
                    AdamW::new(AdamConfig {
                        lr: 0.1,
                        weight_decay: 0.5,
                        amsgrad: true,
                        ..Default::default()
                    })
                    .unwrap(),
                )
            },
            adamw_ams,
        ),
        (
            "sgd_mom",
            || {
                Box::new(
                    Sgd::new(SgdConfig {
                        lr: 0.1,
                        momentum: 0.9,
                        dampening: 0.2,
                        weight_decay: 0.05,
                        maximize: true,
                        ..Default::default()
                    })
                    .unwrap(),
                )
            },
            sgd_mom,
        ),
        (
            "sgd_nesterov",
            || {
                Box::new(
                    Sgd::new(SgdConfig {
                        lr: 0.1,
                        momentum: 0.8,
                        nesterov: true,
                        weight_decay: 0.05,
                        ..Default::default()
                    })
                    .unwrap(),
                )
            },
            sgd_nesterov,
        ),
    ];
    for (name, make_opt, want) in cases {
        for (dt, tol) in [(DType::F64, 1e-14), (DType::F32, 1e-6)] {
            let mut opt = make_opt();
            let p = Tensor::from_slice(&P0, &[2, 3], CPU)
                .unwrap()
                .to_dtype(dt)
                .unwrap()
                .requires_grad_(true)
                .unwrap();
            let mut model = Params(vec![("p".into(), p)]);
            for (t, g) in G.iter().enumerate() {
                let g = Tensor::from_slice(g, &[2, 3], CPU)
                    .unwrap()
                    .to_dtype(dt)
                    .unwrap();
                model.0[0].1.set_grad(Some(g)).unwrap();
                opt.step(&mut model).unwrap();
                assert_close(
                    &format!("{name} {dt} step {}", t + 1),
                    &logical(&model.0[0].1),
                    &want[t],
                    tol,
                );
            }
        }
    }
}

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

/// Sum of `allocation.all.allocated` (bytes and count of every block the
/// allocator ever handed out).
fn allocs() -> (u64, u64) {
    let s = memory::memory_stats(CPU);
    (s.allocation.all.allocated, s.allocated_bytes.all.allocated)
}

/// Steps 2..10 allocate nothing, and the state is exactly `buffers` blocks
/// of each parameter's size.
fn steps_allocate_nothing(opt: &mut dyn Optimizer, buffers: usize, label: &str) {
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
