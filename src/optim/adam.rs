//! Adam (L2 weight decay) and AdamW (decoupled weight decay), with PyTorch's
//! update equations and bias correction.

use std::collections::HashMap;

use super::{check_grad, check_range, check_state, zeros_for, Optimizer};
use crate::error::Result;
use crate::nn::Module;
use crate::Tensor;

/// The hyper-parameters of [`Adam`] and [`AdamW`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamConfig {
    /// Learning rate.
    pub lr: f64,
    /// Decay rates of the first and second moment estimates.
    pub betas: (f64, f64),
    /// Added to the denominator for numerical stability.
    pub eps: f64,
    /// Adam: L2 penalty added to the gradient. AdamW: decoupled decay
    /// (`p *= 1 - lr * weight_decay`).
    pub weight_decay: f64,
}

impl Default for AdamConfig {
    /// PyTorch's `Adam` defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8, no
    /// weight decay. ([`AdamW::new`] does not change `weight_decay`; PyTorch's
    /// AdamW default is 0.01: use [`AdamConfig::adamw_default`].)
    fn default() -> Self {
        AdamConfig {
            lr: 1e-3,
            betas: (0.9, 0.999),
            eps: 1e-8,
            weight_decay: 0.0,
        }
    }
}

impl AdamConfig {
    /// PyTorch's `AdamW` defaults (weight decay 0.01).
    pub fn adamw_default() -> Self {
        AdamConfig {
            weight_decay: 1e-2,
            ..Default::default()
        }
    }
}

struct AdamState {
    step: u64,
    m: Tensor,
    v: Tensor,
    d: Tensor,
    tmp: Tensor,
}

/// Adam, exactly PyTorch's `torch.optim.Adam` (without amsgrad):
///
/// ```text
/// t += 1;  g = grad + weight_decay * p
/// m = b1 * m + (1 - b1) * g;  v = b2 * v + (1 - b2) * g * g
/// p = p - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
/// ```
pub struct Adam {
    cfg: AdamConfig,
    decoupled: bool,
    state: HashMap<String, AdamState>,
}

/// AdamW, PyTorch's `torch.optim.AdamW`: Adam with the weight decay applied
/// to the parameter (`p *= 1 - lr * weight_decay`) instead of the gradient.
pub struct AdamW(Adam);

fn validate(op: &'static str, c: &AdamConfig) -> Result<()> {
    check_range(op, "lr", c.lr, 0.0, f64::INFINITY, false)?;
    check_range(op, "betas.0", c.betas.0, 0.0, 1.0, false)?;
    check_range(op, "betas.1", c.betas.1, 0.0, 1.0, false)?;
    check_range(op, "eps", c.eps, 0.0, f64::INFINITY, false)?;
    check_range(
        op,
        "weight_decay",
        c.weight_decay,
        0.0,
        f64::INFINITY,
        false,
    )
}

impl Adam {
    /// An Adam optimizer; an `Err` for a negative lr, eps or weight decay or
    /// a beta outside `[0, 1)`.
    pub fn new(cfg: AdamConfig) -> Result<Adam> {
        validate("Adam::new", &cfg)?;
        Ok(Adam {
            cfg,
            decoupled: false,
            state: HashMap::new(),
        })
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &AdamConfig {
        &self.cfg
    }

    fn step_impl(&mut self, model: &mut dyn Module, op: &'static str) -> Result<()> {
        let _g = crate::autograd::no_grad_guard();
        let c = self.cfg;
        let (b1, b2) = c.betas;
        for (name, p) in model.named_parameters_mut() {
            let Some(g) = p.grad() else { continue };
            check_grad(op, &name, p, &g)?;
            if !self.state.contains_key(&name) {
                let st = AdamState {
                    step: 0,
                    m: zeros_for(p)?,
                    v: zeros_for(p)?,
                    d: zeros_for(p)?,
                    tmp: zeros_for(p)?,
                };
                self.state.insert(name.clone(), st);
            }
            let st = self.state.get_mut(&name).expect("inserted above");
            check_state(op, &name, p, &st.m)?;
            st.step += 1;
            st.d.copy_(&g)?;
            if c.weight_decay != 0.0 {
                if self.decoupled {
                    p.mul_scalar_(1.0 - c.lr * c.weight_decay)?;
                } else {
                    st.tmp.copy_(p)?;
                    st.tmp.mul_scalar_(c.weight_decay)?;
                    st.d.add_(&st.tmp)?;
                }
            }
            // m = b1 * m + (1 - b1) * g
            st.m.mul_scalar_(b1)?;
            st.tmp.copy_(&st.d)?;
            st.tmp.mul_scalar_(1.0 - b1)?;
            st.m.add_(&st.tmp)?;
            // v = b2 * v + (1 - b2) * g * g
            st.v.mul_scalar_(b2)?;
            st.tmp.copy_(&st.d)?;
            st.tmp.mul_(&st.d)?;
            st.tmp.mul_scalar_(1.0 - b2)?;
            st.v.add_(&st.tmp)?;
            let t = st.step as i32;
            let bc1 = 1.0 - b1.powi(t);
            let bc2_sqrt = (1.0 - b2.powi(t)).sqrt();
            // denom = sqrt(v) / sqrt(bc2) + eps
            st.tmp.copy_(&st.v)?;
            st.tmp.sqrt_()?;
            st.tmp.div_scalar_(bc2_sqrt)?;
            st.tmp.add_scalar_(c.eps)?;
            // p -= lr / bc1 * m / denom
            st.d.copy_(&st.m)?;
            st.d.div_(&st.tmp)?;
            st.d.mul_scalar_(c.lr / bc1)?;
            p.sub_(&st.d)?;
        }
        Ok(())
    }
}

impl AdamW {
    /// An AdamW optimizer (see [`AdamConfig::adamw_default`] for PyTorch's
    /// defaults); the same argument checks as [`Adam::new`].
    pub fn new(cfg: AdamConfig) -> Result<AdamW> {
        validate("AdamW::new", &cfg)?;
        Ok(AdamW(Adam {
            cfg,
            decoupled: true,
            state: HashMap::new(),
        }))
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &AdamConfig {
        &self.0.cfg
    }
}

impl Optimizer for Adam {
    fn step(&mut self, model: &mut dyn Module) -> Result<()> {
        self.step_impl(model, "Adam::step")
    }
    fn lr(&self) -> f64 {
        self.cfg.lr
    }
    fn set_lr(&mut self, lr: f64) {
        self.cfg.lr = lr;
    }
}

impl Optimizer for AdamW {
    fn step(&mut self, model: &mut dyn Module) -> Result<()> {
        self.0.step_impl(model, "AdamW::step")
    }
    fn lr(&self) -> f64 {
        self.0.cfg.lr
    }
    fn set_lr(&mut self, lr: f64) {
        self.0.cfg.lr = lr;
    }
}
