//! Learning-rate schedules with PyTorch's closed forms.

use super::{check_range, Optimizer};
use crate::error::{bail, Error, Result};

/// A learning-rate schedule: [`step`](LrScheduler::step) once per epoch,
/// after the optimizer's steps, as in PyTorch.
pub trait LrScheduler {
    /// The learning rate at `epoch` (closed form).
    fn lr_at(&self, epoch: usize) -> f64;
    /// The number of `step` calls so far.
    fn last_epoch(&self) -> usize;
    /// Advances one epoch and sets the optimizer's learning rate.
    fn step(&mut self, opt: &mut dyn Optimizer);
    /// The learning rate for the current epoch.
    fn get_lr(&self) -> f64 {
        self.lr_at(self.last_epoch())
    }
}

/// `lr = base_lr * gamma^(epoch / step_size)` (integer division), PyTorch's
/// `StepLR`.
///
/// ```
/// # use tensorscope::optim::{LrScheduler, Sgd, SgdConfig, StepLR, Optimizer};
/// let mut opt = Sgd::new(SgdConfig { lr: 0.1, ..Default::default() })?;
/// let mut sched = StepLR::new(&opt, 2, 0.5)?;
/// sched.step(&mut opt);
/// sched.step(&mut opt);
/// assert_eq!(opt.lr(), 0.05);
/// # Ok::<(), tensorscope::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct StepLR {
    base_lr: f64,
    step_size: usize,
    gamma: f64,
    epoch: usize,
}

impl StepLR {
    /// A schedule starting from `opt`'s current learning rate; an `Err` for
    /// `step_size == 0` or a negative or non-finite `gamma`.
    pub fn new(opt: &dyn Optimizer, step_size: usize, gamma: f64) -> Result<StepLR> {
        if step_size == 0 {
            bail!(Error::arg(
                "StepLR::new",
                "step_size must be at least 1, got 0"
            ));
        }
        check_range("StepLR::new", "gamma", gamma, 0.0, f64::INFINITY, false)?;
        Ok(StepLR {
            base_lr: opt.lr(),
            step_size,
            gamma,
            epoch: 0,
        })
    }
}

impl LrScheduler for StepLR {
    fn lr_at(&self, epoch: usize) -> f64 {
        self.base_lr * self.gamma.powi((epoch / self.step_size) as i32)
    }
    fn last_epoch(&self) -> usize {
        self.epoch
    }
    fn step(&mut self, opt: &mut dyn Optimizer) {
        self.epoch += 1;
        opt.set_lr(self.lr_at(self.epoch));
    }
}

/// `lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / t_max)) / 2`,
/// PyTorch's `CosineAnnealingLR` closed form.
#[derive(Clone, Debug)]
pub struct CosineAnnealingLR {
    base_lr: f64,
    t_max: usize,
    eta_min: f64,
    epoch: usize,
}

impl CosineAnnealingLR {
    /// A schedule starting from `opt`'s current learning rate; an `Err` for
    /// `t_max == 0` or a negative or non-finite `eta_min`.
    pub fn new(opt: &dyn Optimizer, t_max: usize, eta_min: f64) -> Result<CosineAnnealingLR> {
        if t_max == 0 {
            bail!(Error::arg(
                "CosineAnnealingLR::new",
                "t_max must be at least 1, got 0"
            ));
        }
        check_range(
            "CosineAnnealingLR::new",
            "eta_min",
            eta_min,
            0.0,
            f64::INFINITY,
            false,
        )?;
        Ok(CosineAnnealingLR {
            base_lr: opt.lr(),
            t_max,
            eta_min,
            epoch: 0,
        })
    }
}

impl LrScheduler for CosineAnnealingLR {
    fn lr_at(&self, epoch: usize) -> f64 {
        let c = (std::f64::consts::PI * epoch as f64 / self.t_max as f64).cos();
        self.eta_min + (self.base_lr - self.eta_min) * (1.0 + c) / 2.0
    }
    fn last_epoch(&self) -> usize {
        self.epoch
    }
    fn step(&mut self, opt: &mut dyn Optimizer) {
        self.epoch += 1;
        opt.set_lr(self.lr_at(self.epoch));
    }
}
