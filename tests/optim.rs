//! Optimizers against naive f64 references of PyTorch's update equations,
//! allocation-free steps after the first, clipping, schedules, bad input.

use std::sync::Mutex;
use tensorscope::nn::Module;
use tensorscope::optim::{
    clip_grad_norm_, Adam, AdamConfig, AdamW, CosineAnnealingLR, LrScheduler, Optimizer, Sgd,
    SgdConfig, StepLR,
};
use tensorscope::{memory, DType, Device, Error, Generator, Result, Tensor};

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

struct RefSgd {
    c: SgdConfig,
    bufs: Vec<Vec<f64>>,
}

impl RefSgd {
    fn update(&mut self, k: usize, p: &mut [f64], g: &[f64], t: usize) {
        let c = self.c;
        if self.bufs.len() <= k {
            self.bufs.resize(k + 1, vec![]);
        }
        for i in 0..p.len() {
            let mut d = g[i] + c.weight_decay * p[i];
            if c.momentum != 0.0 {
                if t == 1 {
                    if self.bufs[k].is_empty() {
                        self.bufs[k] = vec![0.0; p.len()];
                    }
                    self.bufs[k][i] = d;
                } else {
                    self.bufs[k][i] = c.momentum * self.bufs[k][i] + (1.0 - c.dampening) * d;
                }
                d = if c.nesterov {
                    d + c.momentum * self.bufs[k][i]
                } else {
                    self.bufs[k][i]
                };
            }
            p[i] -= c.lr * d;
        }
    }
}

struct RefAdam {
    c: AdamConfig,
    decoupled: bool,
    m: Vec<Vec<f64>>,
    v: Vec<Vec<f64>>,
}

impl RefAdam {
    fn update(&mut self, k: usize, p: &mut [f64], g: &[f64], t: usize) {
        let c = self.c;
        let (b1, b2) = c.betas;
        if self.m.len() <= k {
            self.m.resize(k + 1, vec![]);
            self.v.resize(k + 1, vec![]);
        }
        if self.m[k].is_empty() {
            self.m[k] = vec![0.0; p.len()];
            self.v[k] = vec![0.0; p.len()];
        }
        for i in 0..p.len() {
            let mut gi = g[i];
            if self.decoupled {
                p[i] *= 1.0 - c.lr * c.weight_decay;
            } else {
                gi += c.weight_decay * p[i];
            }
            self.m[k][i] = b1 * self.m[k][i] + (1.0 - b1) * gi;
            self.v[k][i] = b2 * self.v[k][i] + (1.0 - b2) * gi * gi;
            let bc1 = 1.0 - b1.powi(t as i32);
            let bc2 = 1.0 - b2.powi(t as i32);
            let denom = self.v[k][i].sqrt() / bc2.sqrt() + c.eps;
            p[i] -= c.lr / bc1 * self.m[k][i] / denom;
        }
    }
}

fn sgd_configs() -> Vec<SgdConfig> {
    vec![
        SgdConfig {
            lr: 0.1,
            ..Default::default()
        },
        SgdConfig {
            lr: 0.1,
            weight_decay: 0.01,
            ..Default::default()
        },
        SgdConfig {
            lr: 0.05,
            momentum: 0.9,
            ..Default::default()
        },
        SgdConfig {
            lr: 0.05,
            momentum: 0.9,
            dampening: 0.3,
            weight_decay: 0.02,
            ..Default::default()
        },
        SgdConfig {
            lr: 0.05,
            momentum: 0.8,
            nesterov: true,
            weight_decay: 0.05,
            ..Default::default()
        },
    ]
}

#[test]
fn sgd_matches_reference() {
    let _l = lock();
    for (dt, tol) in [(DType::F64, 1e-12), (DType::F32, 1e-5)] {
        for c in sgd_configs() {
            let mut opt = Sgd::new(c).unwrap();
            let mut r = RefSgd { c, bufs: vec![] };
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
    let cfgs = [
        AdamConfig {
            lr: 0.01,
            ..Default::default()
        },
        AdamConfig {
            lr: 0.02,
            betas: (0.8, 0.99),
            eps: 1e-6,
            weight_decay: 0.1,
        },
    ];
    for (dt, tol) in [(DType::F64, 1e-12), (DType::F32, 1e-5)] {
        for c in cfgs {
            let mut opt = Adam::new(c).unwrap();
            let mut r = RefAdam {
                c,
                decoupled: false,
                m: vec![],
                v: vec![],
            };
            compare(
                dt,
                tol,
                &mut opt,
                |k, p, g, t| r.update(k, p, g, t),
                &format!("Adam {c:?}"),
            );
            let mut opt = AdamW::new(c).unwrap();
            let mut r = RefAdam {
                c,
                decoupled: true,
                m: vec![],
                v: vec![],
            };
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
    let mut r = RefAdam {
        c,
        decoupled: false,
        m: vec![],
        v: vec![],
    };
    compare(
        DType::F16,
        2e-2,
        &mut opt,
        |k, p, g, t| r.update(k, p, g, t),
        "Adam f16",
    );
}

/// Sum of `allocation.all.allocated` (bytes and count of every block the
/// allocator ever handed out).
fn allocs() -> (u64, u64) {
    let s = memory::memory_stats(CPU);
    (s.allocation.all.allocated, s.allocated_bytes.all.allocated)
}

fn steps_allocate_nothing(opt: &mut dyn Optimizer, label: &str) {
    let mut model = Mlp::new(8, 16, 4, DType::F32, 3);
    let grads = fixed_grads(&model, 0);
    set_grads(&model, &grads);
    let live_before = memory::memory_allocated(CPU);
    opt.step(&mut model).unwrap();
    let state = memory::memory_allocated(CPU) - live_before;
    assert!(state > 0, "{label}: the first step allocates the state");
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
    for c in sgd_configs() {
        steps_allocate_nothing(&mut Sgd::new(c).unwrap(), &format!("{c:?}"));
    }
    let c = AdamConfig {
        weight_decay: 0.1,
        ..Default::default()
    };
    steps_allocate_nothing(&mut Adam::new(c).unwrap(), "Adam");
    steps_allocate_nothing(&mut AdamW::new(c).unwrap(), "AdamW");
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
