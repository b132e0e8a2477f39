//! Adam (L2 weight decay) and AdamW (decoupled weight decay), with PyTorch's
//! update equations and bias correction.

use std::collections::HashMap;

use super::{check_grad, check_range, check_state, writable_with_grad, zeros_for, Optimizer};
use crate::backend::optim::{adam_step, AdamHyper};
use crate::backend::Operand;
use crate::device::Device;
use crate::error::{bail, Error, Result};
use crate::nn::Module;
use crate::tensor::Tensor;

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
    /// AMSGrad: divide by the running maximum of the second moment (one
    /// more state buffer per parameter).
    pub amsgrad: bool,
    /// Maximize the objective (step along `+grad`).
    pub maximize: bool,
}

impl Default for AdamConfig {
    /// PyTorch's `Adam` defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8, no
    /// weight decay, no amsgrad, minimize. ([`AdamW::new`] does not change
    /// `weight_decay`; PyTorch's AdamW default is 0.01: use
    /// [`AdamConfig::adamw_default`].)
    fn default() -> Self {
        AdamConfig {
            lr: 1e-3,
            betas: (0.9, 0.999),
            eps: 1e-8,
            weight_decay: 0.0,
            amsgrad: false,
            maximize: false,
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
    /// The running maximum of `v` (amsgrad only).
    vmax: Option<Tensor>,
}

/// Adam, exactly PyTorch's `torch.optim.Adam` (single-tensor form):
///
/// ```text
/// t += 1;  g = maximize ? -grad : grad;  g = g + weight_decay * p
/// m = lerp(m, g, 1 - b1);  v = b2 * v + (1 - b2) * g * g
/// vhat = amsgrad ? (vmax = max(vmax, v)) : v
/// p = p - lr / (1 - b1^t) * m / (sqrt(vhat) / sqrt(1 - b2^t) + eps)
/// ```
///
/// Each parameter is updated by one fused pass that reads `p`, its
/// gradient, `m` and `v` once and writes `p`, `m` and `v`, computed in f32
/// for f32/f16/bf16 parameters (the state has the parameter's dtype, as in
/// PyTorch) and in f64 for f64.
///
/// ```
/// use tensorscope::nn::{Linear, Module};
/// use tensorscope::optim::{Adam, AdamConfig, Optimizer};
/// use tensorscope::{DType, Device, Tensor};
///
/// let mut model = Linear::new(4, 2)?;
/// let mut opt = Adam::new(AdamConfig { lr: 1e-2, amsgrad: true, ..Default::default() })?;
/// let x = Tensor::ones(&[3, 4], DType::F32, Device::Cpu)?;
/// for _ in 0..3 {
///     opt.zero_grad(&model);
///     model.forward(&x)?.square()?.mean_all()?.backward()?;
///     opt.step(&mut model)?;
/// }
/// # Ok::<(), tensorscope::Error>(())
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
            let g = writable_with_grad(op, p, g)?;
            let key = super::state_key(&name);
            if !self.state.contains_key(key) {
                let st = AdamState {
                    step: 0,
                    m: zeros_for(p)?,
                    v: zeros_for(p)?,
                    vmax: if c.amsgrad { Some(zeros_for(p)?) } else { None },
                };
                self.state.insert(key.to_string(), st);
            }
            let st = self.state.get_mut(key).expect("inserted above");
            check_state(op, &name, p, &st.m)?;
            st.step += 1;
            let t = st.step as f64;
            let h = AdamHyper {
                lr: c.lr,
                beta1: b1,
                beta2: b2,
                eps: c.eps,
                weight_decay: c.weight_decay,
                decoupled: self.decoupled,
                maximize: c.maximize,
                bias_correction1: 1.0 - b1.powf(t),
                bias_correction2: 1.0 - b2.powf(t),
            };
            let vmax = st.vmax.as_ref().map(Operand::of);
            adam_step(
                op,
                &Operand::of(p),
                &Operand::of(&g),
                &Operand::of(&st.m),
                &Operand::of(&st.v),
                vmax.as_ref(),
                &h,
            )?;
            p.storage().bump_version();
            st.m.storage().bump_version();
            st.v.storage().bump_version();
            if let Some(x) = &st.vmax {
                x.storage().bump_version();
            }
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

impl Adam {
    fn save_state(&self) -> Result<Vec<(String, Tensor)>> {
        let mut names: Vec<&String> = self.state.keys().collect();
        names.sort();
        let mut out = Vec::with_capacity(4 * names.len());
        for name in names {
            let st = &self.state[name];
            let step = Tensor::from_slice(&[st.step as i64], &[], Device::Cpu)?;
            out.push((format!("{name}.step"), step));
            out.push((format!("{name}.exp_avg"), st.m.deep_clone()?));
            out.push((format!("{name}.exp_avg_sq"), st.v.deep_clone()?));
            if let Some(x) = &st.vmax {
                out.push((format!("{name}.max_exp_avg_sq"), x.deep_clone()?));
            }
        }
        Ok(out)
    }

    fn load_state(&mut self, op: &'static str, state: &[(String, Tensor)]) -> Result<()> {
        type Parts<'a> = (
            Option<u64>,
            Option<&'a Tensor>,
            Option<&'a Tensor>,
            Option<&'a Tensor>,
        );
        let mut parts: HashMap<&str, Parts> = HashMap::new();
        for (key, t) in state {
            let (name, buf) = super::split_state_key(op, key)?;
            let e = parts.entry(name).or_default();
            match buf {
                "step" => e.0 = Some(super::state_count(op, key, t)?),
                "exp_avg" => e.1 = Some(t),
                "exp_avg_sq" => e.2 = Some(t),
                "max_exp_avg_sq" if self.cfg.amsgrad => e.3 = Some(t),
                _ => bail!(Error::arg(
                    op,
                    format!(
                        "{key:?} is no buffer of this Adam (step, exp_avg, exp_avg_sq{})",
                        if self.cfg.amsgrad {
                            ", max_exp_avg_sq"
                        } else {
                            ""
                        }
                    )
                )),
            }
        }
        let mut next = HashMap::with_capacity(parts.len());
        for (name, (step, m, v, vmax)) in parts {
            let (Some(step), Some(m), Some(v)) = (step, m, v) else {
                bail!(Error::arg(
                    op,
                    format!("parameter {name:?} lacks one of step, exp_avg, exp_avg_sq")
                ));
            };
            if self.cfg.amsgrad && vmax.is_none() {
                bail!(Error::arg(
                    op,
                    format!("parameter {name:?} lacks max_exp_avg_sq (amsgrad)")
                ));
            }
            for b in [Some(v), vmax].into_iter().flatten() {
                if b.shape() != m.shape() || b.dtype() != m.dtype() || b.device() != m.device() {
                    bail!(Error::shape(
                        op,
                        m.shape(),
                        b.shape(),
                        format!("parameter {name:?}'s buffers differ in shape, dtype or device")
                    ));
                }
            }
            let st = AdamState {
                step,
                m: m.deep_clone()?,
                v: v.deep_clone()?,
                vmax: vmax.map(Tensor::deep_clone).transpose()?,
            };
            next.insert(name.to_string(), st);
        }
        self.state = next;
        Ok(())
    }
}

impl Optimizer for Adam {
    fn step(&mut self, model: &mut dyn Module) -> Result<()> {
        let _op = crate::alloc::history::op_context("Adam::step");
        self.step_impl(model, "Adam::step")
    }
    fn state_dict(&self) -> Result<Vec<(String, Tensor)>> {
        self.save_state()
    }
    fn load_state_dict(&mut self, state: &[(String, Tensor)]) -> Result<()> {
        self.load_state("Adam::load_state_dict", state)
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
        let _op = crate::alloc::history::op_context("AdamW::step");
        self.0.step_impl(model, "AdamW::step")
    }
    fn state_dict(&self) -> Result<Vec<(String, Tensor)>> {
        self.0.save_state()
    }
    fn load_state_dict(&mut self, state: &[(String, Tensor)]) -> Result<()> {
        self.0.load_state("AdamW::load_state_dict", state)
    }
    fn lr(&self) -> f64 {
        self.0.cfg.lr
    }
    fn set_lr(&mut self, lr: f64) {
        self.0.cfg.lr = lr;
    }
}
