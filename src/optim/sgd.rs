//! Stochastic gradient descent with momentum, dampening, Nesterov and weight
//! decay, with PyTorch's update equations.

use std::collections::HashMap;

use super::{check_grad, check_range, check_state, writable_with_grad, zeros_for, Optimizer};
use crate::backend::optim::{sgd_step, SgdHyper};
use crate::backend::Operand;
use crate::error::{bail, Error, Result};
use crate::nn::Module;
use crate::tensor::Tensor;

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
    /// Maximize the objective (step along `+grad`).
    pub maximize: bool,
}

impl Default for SgdConfig {
    fn default() -> Self {
        SgdConfig {
            lr: 1e-3,
            momentum: 0.0,
            dampening: 0.0,
            weight_decay: 0.0,
            nesterov: false,
            maximize: false,
        }
    }
}

struct SgdState {
    /// The momentum buffer (allocated when `momentum != 0`).
    buf: Option<Tensor>,
    /// `false` until the buffer has been set from a first gradient.
    started: bool,
}

/// SGD, exactly PyTorch's `torch.optim.SGD`:
///
/// ```text
/// g = maximize ? -grad : grad;  g = g + weight_decay * p
/// buf = g                                   (first step)
/// buf = momentum * buf + (1 - dampening) * g (later steps)
/// g = g + momentum * buf  if nesterov, else g = buf
/// p = p - lr * g
/// ```
///
/// Each parameter is updated by one fused pass over `p`, its gradient and
/// the momentum buffer.
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
    fn state_dict(&self) -> Result<Vec<(String, Tensor)>> {
        let mut names: Vec<&String> = self.state.keys().collect();
        names.sort();
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            if let Some(b) = self.state[name]
                .buf
                .as_ref()
                .filter(|_| self.state[name].started)
            {
                out.push((format!("{name}.momentum_buffer"), b.deep_clone()?));
            }
        }
        Ok(out)
    }

    fn load_state_dict(&mut self, state: &[(String, Tensor)]) -> Result<()> {
        const OP: &str = "Sgd::load_state_dict";
        let mut next = HashMap::with_capacity(state.len());
        for (key, t) in state {
            let (name, buf) = super::split_state_key(OP, key)?;
            if buf != "momentum_buffer" || self.cfg.momentum == 0.0 {
                bail!(Error::arg(
                    OP,
                    format!(
                        "{key:?} is no buffer of this SGD ({})",
                        if self.cfg.momentum == 0.0 {
                            "without momentum it has none"
                        } else {
                            "momentum_buffer"
                        }
                    )
                ));
            }
            let st = SgdState {
                buf: Some(t.deep_clone()?),
                started: true,
            };
            if next.insert(name.to_string(), st).is_some() {
                bail!(Error::arg(OP, format!("{key:?} is given twice")));
            }
        }
        self.state = next;
        Ok(())
    }

    fn step(&mut self, model: &mut dyn Module) -> Result<()> {
        let _op = crate::alloc::history::op_context("SGD::step");
        let _g = crate::autograd::no_grad_guard();
        let c = self.cfg;
        for (name, p) in model.named_parameters_mut() {
            let Some(g) = p.grad() else { continue };
            check_grad("Sgd::step", &name, p, &g)?;
            let g = writable_with_grad("Sgd::step", p, g)?;
            let key = super::state_key(&name);
            if !self.state.contains_key(key) {
                let buf = if c.momentum != 0.0 {
                    Some(zeros_for(p)?)
                } else {
                    None
                };
                let st = SgdState {
                    buf,
                    started: false,
                };
                self.state.insert(key.to_string(), st);
            }
            let st = self.state.get_mut(key).expect("inserted above");
            if let Some(buf) = &st.buf {
                check_state("Sgd::step", &name, p, buf)?;
            }
            let h = SgdHyper {
                lr: c.lr,
                momentum: c.momentum,
                dampening: c.dampening,
                weight_decay: c.weight_decay,
                nesterov: c.nesterov,
                maximize: c.maximize,
                first: !st.started,
            };
            let buf = st.buf.as_ref().map(Operand::of);
            sgd_step(
                "Sgd::step",
                &Operand::of(p),
                &Operand::of(&g),
                buf.as_ref(),
                &h,
            )?;
            st.started = true;
            p.storage().bump_version();
            if let Some(b) = &st.buf {
                b.storage().bump_version();
            }
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
