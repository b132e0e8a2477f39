//! Optimizers against naive f64 references of PyTorch's update equations,
//! allocation-free steps after the first, clipping, schedules, bad input.

use tensorscope::nn::Module;
use tensorscope::optim::{
    clip_grad_norm_, Adam, AdamConfig, AdamW, CosineAnnealingLR, LrScheduler, Optimizer, Sgd,
    SgdConfig, StepLR,
};
use tensorscope::{memory, DType, Device, Error, Generator, Result, Tensor};

use crate::common;
use common::layouts::{self, make, Kind};
use common::optim_ref::{adam_option_sets, sgd_option_sets, RefOpt};
use common::{store, Params};
fn lock() -> crate::common::Guard {
    crate::common::serial()
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

mod reference;
use reference::*;
mod allocation;
mod grad_scaler;
mod master_weights;
mod rules;
mod torch_fixture;
use allocation::*;
mod schedules;
mod state;
