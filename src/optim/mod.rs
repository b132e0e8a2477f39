//! Optimizers, gradient clipping and learning-rate schedules.
//!
//! An [`Optimizer`] takes the model by `&mut` for the length of a step, so no
//! other borrow of a parameter can be alive while the update runs. State
//! (momentum buffers, Adam's moments) is keyed by parameter name and
//! allocated on the first step only; every later step updates in place under
//! `no_grad` and allocates nothing from the device allocator. Each
//! parameter's update is one fused pass (`backend::optim`): the parameter,
//! its gradient and its state are read once and written once.
//!
//! ```
//! use tensorscope::nn::Module;
//! use tensorscope::optim::{Optimizer, Sgd, SgdConfig};
//! use tensorscope::{DType, Device, Tensor};
//!
//! struct Line { w: Tensor }
//! impl Module for Line {
//!     fn forward(&self, x: &Tensor) -> tensorscope::Result<Tensor> { x.mul(&self.w) }
//!     fn named_parameters(&self) -> Vec<(String, &Tensor)> { vec![("w".into(), &self.w)] }
//!     fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> { vec![("w".into(), &mut self.w)] }
//! }
//!
//! let mut model = Line { w: Tensor::ones(&[3], DType::F32, Device::Cpu)?.requires_grad_(true)? };
//! let mut opt = Sgd::new(SgdConfig { lr: 0.5, ..Default::default() })?;
//! let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3], Device::Cpu)?;
//! model.forward(&x)?.sum_all()?.backward()?;   // d/dw = x
//! opt.step(&mut model)?;                        // w = 1 - 0.5 * x
//! assert_eq!(model.w.to_vec::<f32>()?, vec![0.5, 0.0, -0.5]);
//! opt.zero_grad(&model);
//! # Ok::<(), tensorscope::Error>(())
//! ```

mod adagrad;
mod adam;
mod clip;
mod elementwise;
mod grad_scaler;
mod lion;
mod master_weights;
mod rmsprop;
mod schedule;
mod sgd;

pub use adagrad::{Adagrad, AdagradConfig};
pub use adam::{Adam, AdamConfig, AdamW};
pub use clip::{clip_grad_norm_, clip_grad_value_};
pub use grad_scaler::{GradScaler, GradScalerConfig};
pub use lion::{Lion, LionConfig};
pub use master_weights::MasterWeights;
pub use rmsprop::{RMSprop, RMSpropConfig};
pub use schedule::{CosineAnnealingLR, LrScheduler, StepLR};
pub use sgd::{Sgd, SgdConfig};

use crate::error::{bail, Error, Result};
use crate::nn::Module;
use crate::tensor::Tensor;

/// Something that updates a module's parameters from their gradients.
pub trait Optimizer {
    /// One update of every parameter that has a gradient (parameters without
    /// one are skipped, as in PyTorch). The model is borrowed mutably for the
    /// whole step.
    fn step(&mut self, model: &mut dyn Module) -> Result<()>;

    /// Frees every parameter's gradient (PyTorch's `set_to_none=True`).
    fn zero_grad(&self, model: &dyn Module) {
        model.zero_grad()
    }

    /// The optimizer's state as named tensors for a checkpoint, copies
    /// taken now: each parameter's name, a dot, and PyTorch's name for the
    /// buffer (`"0.weight.exp_avg"`, `"0.weight.step"`). An `Err` for an
    /// optimizer that cannot save its state yet (Adam, AdamW and SGD can).
    fn state_dict(&self) -> Result<Vec<(String, Tensor)>> {
        Err(Error::arg(
            "Optimizer::state_dict",
            "this optimizer cannot save its state yet (Adam, AdamW and SGD can)",
        ))
    }

    /// Restores a [`state_dict`](Optimizer::state_dict), replacing the
    /// whole state. Everything is checked first: on an `Err` nothing
    /// changed. A state that does not fit the parameters is an `Err` at the
    /// next step, as for a parameter that changed.
    fn load_state_dict(&mut self, state: &[(String, Tensor)]) -> Result<()> {
        let _ = state;
        Err(Error::arg(
            "Optimizer::load_state_dict",
            "this optimizer cannot load a state yet (Adam, AdamW and SGD can)",
        ))
    }

    /// The current learning rate.
    fn lr(&self) -> f64;

    /// Sets the learning rate (used by the schedules).
    fn set_lr(&mut self, lr: f64);
}

/// A state key as (parameter name, buffer name): split at the last dot.
pub(crate) fn split_state_key<'a>(op: &'static str, key: &'a str) -> Result<(&'a str, &'a str)> {
    key.rsplit_once('.').ok_or_else(|| {
        Error::arg(
            op,
            format!("state key {key:?} is not \"<parameter>.<buffer>\""),
        )
    })
}

/// A state tensor holding one step count.
pub(crate) fn state_count(op: &'static str, key: &str, t: &Tensor) -> Result<u64> {
    let v = if t.numel() == 1 {
        t.to_dtype(crate::dtype::DType::F64)?
            .reshape(&[])?
            .item::<f64>()?
    } else {
        -1.0
    };
    if !(v >= 0.0 && v.fract() == 0.0 && v < 2f64.powi(53)) {
        bail!(Error::arg(
            op,
            format!(
                "{key:?} must be one step count, got a tensor of shape {:?}",
                t.shape()
            )
        ));
    }
    Ok(v as u64)
}

/// A state buffer of `p`'s shape and dtype, filled with zeros.
pub(crate) fn zeros_for(p: &Tensor) -> Result<Tensor> {
    Tensor::zeros(p.shape(), p.dtype(), p.device())
}

/// Checks that a parameter still matches the state kept for it.
pub(crate) fn check_state(op: &'static str, name: &str, p: &Tensor, buf: &Tensor) -> Result<()> {
    if p.shape() != buf.shape() || p.dtype() != buf.dtype() || p.device() != buf.device() {
        bail!(Error::arg(
            op,
            format!(
                "parameter {name:?} changed since the optimizer's state was made: now {:?} {} on {}, state {:?} {} on {}",
                p.shape(),
                p.dtype(),
                p.device(),
                buf.shape(),
                buf.dtype(),
                buf.device()
            )
        ));
    }
    Ok(())
}

/// Checks that the gradient can update the parameter in place.
pub(crate) fn check_grad(op: &'static str, name: &str, p: &Tensor, g: &Tensor) -> Result<()> {
    if g.dtype() != p.dtype() || g.device() != p.device() {
        bail!(Error::arg(
            op,
            format!(
                "the gradient of {name:?} is {} on {}, the parameter {} on {}",
                g.dtype(),
                g.device(),
                p.dtype(),
                p.device()
            )
        ));
    }
    if !p.dtype().is_float() {
        bail!(Error::dtype(op, "a float parameter", p.dtype()));
    }
    Ok(())
}

/// Checks that `p` can be written in place and returns the gradient ready to
/// be read while `p` is written: `g` itself, or (only if it shares `p`'s
/// storage through another layout, which no autograd-made gradient does) a
/// copy of it.
pub(crate) fn writable_with_grad(op: &'static str, p: &Tensor, g: Tensor) -> Result<Tensor> {
    p.check_writable(op)?;
    if p.shares_storage(&g) && p.layout() != g.layout() {
        g.deep_clone()
    } else {
        Ok(g)
    }
}

/// Checks a hyper-parameter: finite and inside `[lo, hi)` (or `[lo, hi]`).
pub(crate) fn check_range(
    op: &'static str,
    what: &str,
    v: f64,
    lo: f64,
    hi: f64,
    hi_inclusive: bool,
) -> Result<()> {
    let ok = v.is_finite() && v >= lo && (v < hi || (hi_inclusive && v <= hi));
    if !ok {
        let close = if hi_inclusive { ']' } else { ')' };
        bail!(Error::arg(
            op,
            format!("{what} must be in [{lo}, {hi}{close}, got {v}")
        ));
    }
    Ok(())
}

/// The key of a parameter's state in an optimizer: its name without
/// pruning's `_orig` suffix. `nn::prune` renames `weight` to `weight_orig`
/// and `prune::remove` back; PyTorch's optimizers hold the parameter
/// object, which pruning keeps, so its state carries on through both, and
/// so does ours.
pub(crate) fn state_key(name: &str) -> &str {
    name.strip_suffix("_orig").unwrap_or(name)
}
