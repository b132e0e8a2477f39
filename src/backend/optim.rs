//! Dispatch of the fused optimizer kernels: one pass per parameter that reads
//! the parameter, its gradient and the optimizer's state once and writes the
//! parameter and the state, and the sum of squares behind `clip_grad_norm_`.
//!
//! The parameter and the state are locked exclusively, the gradient shared.
//! The CPU has kernels for all of them (`cpu::optim`).
//!
//! **CUDA** (`cuda::optim`, `kernels/optim.cu`): the same per-element
//! updates, one thread per element in a grid-stride loop, with the
//! hyper-parameters of [`AdamHyper`] / [`SgdHyper`] passed by value (bias
//! corrections already folded in on the host), operands given by base
//! pointer + offset + shape + strides (the gradient may be strided or
//! expanded; all-dense operands take a fast path), f16/bf16 computed in f32,
//! every operation explicitly rounded in the CPU's order (no FMA), so both
//! devices should give the same bits (not yet run on a GPU); and a sum-of-squares reduction accumulated
//! in f64, one partial per block, summed and read back by the host.

use super::{cpu, cuda, device_of, Operand};
use crate::device::Device;
use crate::error::Result;
use crate::storage::lock;

/// Everything one Adam/AdamW update of one parameter needs (PyTorch's
/// `_single_tensor_adam`), with the step's bias corrections worked out.
#[derive(Copy, Clone, Debug)]
pub(crate) struct AdamHyper {
    /// Learning rate.
    pub lr: f64,
    /// Decay of the first moment.
    pub beta1: f64,
    /// Decay of the second moment.
    pub beta2: f64,
    /// Added to the denominator.
    pub eps: f64,
    /// L2 penalty (Adam) or decoupled decay (AdamW).
    pub weight_decay: f64,
    /// `p *= 1 - lr * weight_decay` instead of `g += weight_decay * p`.
    pub decoupled: bool,
    /// Ascend instead of descend (`g = -grad`).
    pub maximize: bool,
    /// `1 - beta1^t`.
    pub bias_correction1: f64,
    /// `1 - beta2^t`.
    pub bias_correction2: f64,
}

/// Everything one SGD update of one parameter needs (PyTorch's
/// `_single_tensor_sgd`): the optimizer's options (`SgdConfig`'s) and
/// whether this is the momentum buffer's first step.
#[derive(Copy, Clone, Debug)]
pub(crate) struct SgdHyper {
    pub lr: f64,
    /// A momentum buffer is passed when this is not 0.
    pub momentum: f64,
    pub dampening: f64,
    pub weight_decay: f64,
    pub nesterov: bool,
    pub maximize: bool,
    /// The buffer's first step: `buf = g` rather than the momentum update.
    pub first: bool,
}

/// One fused Adam/AdamW update: `p`, `m`, `v` (and `vmax` with amsgrad)
/// written, `g` read, all of one shape and dtype (the optimizer checks).
pub(crate) fn adam_step(
    op: &'static str,
    p: &Operand,
    g: &Operand,
    m: &Operand,
    v: &Operand,
    vmax: Option<&Operand>,
    h: &AdamHyper,
) -> Result<()> {
    let d = device_of(op, &[p, g, m, v])?;
    let _l = match vmax {
        Some(x) => {
            device_of(op, &[p, x])?;
            lock(&[g.storage], &[p.storage, m.storage, v.storage, x.storage])
        }
        None => lock(&[g.storage], &[p.storage, m.storage, v.storage]),
    };
    match d {
        Device::Cpu => {
            cpu::optim::adam(p, g, m, v, vmax, h);
            Ok(())
        }
        Device::Cuda(_) => cuda::adam_step(op, p, g, m, v, vmax, h),
    }
}

/// One fused SGD update: `p` (and the momentum buffer `buf`) written, `g`
/// read, all of one shape and dtype.
pub(crate) fn sgd_step(
    op: &'static str,
    p: &Operand,
    g: &Operand,
    buf: Option<&Operand>,
    h: &SgdHyper,
) -> Result<()> {
    let d = device_of(op, &[p, g])?;
    let _l = match buf {
        Some(b) => {
            device_of(op, &[p, b])?;
            lock(&[g.storage], &[p.storage, b.storage])
        }
        None => lock(&[g.storage], &[p.storage]),
    };
    match d {
        Device::Cpu => {
            cpu::optim::sgd(p, g, buf, h);
            Ok(())
        }
        Device::Cuda(_) => cuda::sgd_step(op, p, g, buf, h),
    }
}

/// The sum of the squares of a float tensor's elements, accumulated in f64.
pub(crate) fn sum_squares(op: &'static str, src: &Operand) -> Result<f64> {
    let _l = lock(&[src.storage], &[]);
    match src.storage.device() {
        Device::Cpu => Ok(cpu::optim::sum_squares(src)),
        Device::Cuda(_) => cuda::sum_squares(op, src),
    }
}

/// GradScaler's pass over one float gradient: `x *= inv_scale` in place,
/// and `found` (an f32 `[1]` on `x`'s device) set to 1 if an element was
/// inf or NaN (left as it is otherwise). On CUDA nothing waits: `found` is
/// read once per step.
pub(crate) fn unscale_check(
    op: &'static str,
    x: &Operand,
    inv_scale: f32,
    found: &Operand,
) -> Result<()> {
    let d = device_of(op, &[x, found])?;
    let _l = lock(&[], &[x.storage, found.storage]);
    match d {
        Device::Cpu => {
            if cpu::optim::unscale_check(x, inv_scale) {
                cpu::elementwise::fill(found, 1.0);
            }
            Ok(())
        }
        Device::Cuda(_) => cuda::unscale_check(op, x, inv_scale, found),
    }
}

/// The optimizers whose update is one elementwise pass over the parameter,
/// its gradient and up to three state buffers, with their step's constants
/// (host doubles; each kernel converts them to its compute type). The
/// state slots are fixed per optimizer; an unused slot is never touched.
#[derive(Copy, Clone, Debug, PartialEq)]
pub(crate) enum UpdateRule {
    /// PyTorch's `_single_tensor_rmsprop`: slots `[square_avg,
    /// momentum_buffer (momentum > 0), grad_avg (centered)]`.
    RmsProp {
        /// Learning rate.
        lr: f64,
        /// Decay of the running averages.
        alpha: f64,
        /// Added to the root of the average.
        eps: f64,
        /// L2 penalty added to the gradient.
        weight_decay: f64,
        /// Momentum (0: no buffer).
        momentum: f64,
        /// Subtract the squared running mean of the gradient.
        centered: bool,
        /// Ascend.
        maximize: bool,
    },
    /// PyTorch's `_single_tensor_adagrad`: slots `[sum, -, -]`.
    Adagrad {
        /// This step's learning rate, `lr / (1 + (step - 1) * lr_decay)`.
        clr: f64,
        /// Added to the root of the sum.
        eps: f64,
        /// L2 penalty added to the gradient.
        weight_decay: f64,
        /// Ascend.
        maximize: bool,
    },
    /// Lion (Chen et al. 2023, as `lion-pytorch`): slots `[exp_avg, -, -]`.
    Lion {
        /// Learning rate.
        lr: f64,
        /// The interpolation of the update's sign.
        beta1: f64,
        /// The decay of the momentum.
        beta2: f64,
        /// Decoupled decay, `p *= 1 - lr * weight_decay`.
        weight_decay: f64,
        /// Ascend.
        maximize: bool,
    },
}

impl UpdateRule {
    /// Which of the three state slots the update reads and writes.
    pub(crate) fn slots(&self) -> [bool; 3] {
        match *self {
            UpdateRule::RmsProp {
                momentum, centered, ..
            } => [true, momentum > 0.0, centered],
            UpdateRule::Adagrad { .. } | UpdateRule::Lion { .. } => [true, false, false],
        }
    }
}

/// One fused update of `rule`: `p` and the used state slots written, `g`
/// read, all of one shape and dtype (the optimizer checks); `states[i]` is
/// `Some` exactly where `rule.slots()[i]`.
pub(crate) fn rule_step(
    op: &'static str,
    p: &Operand,
    g: &Operand,
    states: [Option<&Operand>; 3],
    rule: &UpdateRule,
) -> Result<()> {
    let d = device_of(op, &[p, g])?;
    let mut writes = vec![p.storage];
    for s in states.iter().flatten() {
        device_of(op, &[p, s])?;
        writes.push(s.storage);
    }
    let _l = lock(&[g.storage], &writes);
    match d {
        Device::Cpu => {
            cpu::optim::rule(p, g, states, rule);
            Ok(())
        }
        Device::Cuda(_) => cuda::rule_step(op, p, g, states, rule),
    }
}
