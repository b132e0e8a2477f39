//! Stochastic gradient descent with momentum, dampening, Nesterov and weight
//! decay, with PyTorch's update equations.

use std::collections::HashMap;

use super::{check_grad, check_range, check_state, zeros_for, Optimizer};
use crate::error::{bail, Error, Result};
use crate::nn::Module;
use crate::Tensor;

/// The hyper-parameters of [`Sgd`] (PyTorch's defaults except `lr`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SgdConfig {
    /// Learning rate.
    pub lr: f64,
    /// Momentum factor (0 disables the momentum buffer).
    pub momentum: f64,
    /// Dampening of the gradient added to the momentum buffer.
    pub dampening: f64,
    /// L2 penalty added to the gradient: `g + weight_decay * p`.
    pub weight_decay: f64,
    /// Nesterov momentum (needs `momentum > 0` and `dampening == 0`).
    pub nesterov: bool,
}

impl Default for SgdConfig {
    fn default() -> Self {
        SgdConfig {
            lr: 1e-3,
            momentum: 0.0,
            dampening: 0.0,
            weight_decay: 0.0,
            nesterov: false,
        }
    }
}

struct SgdState {
    /// The momentum buffer (allocated when `momentum != 0`).
    buf: Option<Tensor>,
    /// `d_p` of PyTorch's algorithm.
    d: Tensor,
    /// Scratch for scaled terms.
    tmp: Tensor,
}

/// SGD, exactly PyTorch's `torch.optim.SGD` (without `maximize`):
///
/// ```text
/// g = grad + weight_decay * p
/// buf = g                                   (first step)
/// buf = momentum * buf + (1 - dampening) * g (later steps)
/// g = g + momentum * buf  if nesterov, else g = buf
/// p = p - lr * g
/// ```
pub struct Sgd {
    cfg: SgdConfig,
    state: HashMap<String, SgdState>,
}

impl Sgd {
    /// An SGD optimizer; an `Err` for a negative learning rate, momentum or
    /// weight decay, or for Nesterov without momentum or with dampening.
    pub fn new(cfg: SgdConfig) -> Result<Sgd> {
        check_range("Sgd::new", "lr", cfg.lr, 0.0, f64::INFINITY, false)?;
        check_range(
            "Sgd::new",
            "momentum",
            cfg.momentum,
            0.0,
            f64::INFINITY,
            false,
        )?;
        check_range(
            "Sgd::new",
            "dampening",
            cfg.dampening,
            f64::MIN,
            f64::INFINITY,
            false,
        )?;
        check_range(
            "Sgd::new",
            "weight_decay",
            cfg.weight_decay,
            0.0,
            f64::INFINITY,
            false,
        )?;
        if cfg.nesterov && (cfg.momentum <= 0.0 || cfg.dampening != 0.0) {
            bail!(Error::arg(
                "Sgd::new",
                "Nesterov momentum requires a momentum and zero dampening"
            ));
        }
        Ok(Sgd {
            cfg,
            state: HashMap::new(),
        })
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &SgdConfig {
        &self.cfg
    }
}

impl Optimizer for Sgd {
    fn step(&mut self, model: &mut dyn Module) -> Result<()> {
        let _g = crate::autograd::no_grad_guard();
        let c = self.cfg;
        for (name, p) in model.named_parameters_mut() {
            let Some(g) = p.grad() else { continue };
            check_grad("Sgd::step", &name, p, &g)?;
            let first = !self.state.contains_key(&name);
            if first {
                let buf = if c.momentum != 0.0 {
                    Some(zeros_for(p)?)
                } else {
                    None
                };
                self.state.insert(
                    name.clone(),
                    SgdState {
                        buf,
                        d: zeros_for(p)?,
                        tmp: zeros_for(p)?,
                    },
                );
            }
            let st = self.state.get_mut(&name).expect("inserted above");
            check_state("Sgd::step", &name, p, &st.d)?;
            st.d.copy_(&g)?;
            if c.weight_decay != 0.0 {
                st.tmp.copy_(p)?;
                st.tmp.mul_scalar_(c.weight_decay)?;
                st.d.add_(&st.tmp)?;
            }
            if let Some(buf) = st.buf.as_mut() {
                if first {
                    buf.copy_(&st.d)?;
                } else {
                    buf.mul_scalar_(c.momentum)?;
                    st.tmp.copy_(&st.d)?;
                    st.tmp.mul_scalar_(1.0 - c.dampening)?;
                    buf.add_(&st.tmp)?;
                }
                if c.nesterov {
                    st.tmp.copy_(buf)?;
                    st.tmp.mul_scalar_(c.momentum)?;
                    st.d.add_(&st.tmp)?;
                } else {
                    st.d.copy_(buf)?;
                }
            }
            st.d.mul_scalar_(c.lr)?;
            p.sub_(&st.d)?;
        }
        Ok(())
    }

    fn lr(&self) -> f64 {
        self.cfg.lr
    }

    fn set_lr(&mut self, lr: f64) {
        self.cfg.lr = lr;
    }
}
