//! RMSprop, PyTorch's `torch.optim.RMSprop`.

use super::elementwise::{step, SlotMap};
use super::{check_range, zeros_for, Optimizer};
use crate::backend::optim::UpdateRule;
use crate::error::Result;
use crate::nn::Module;

/// The hyper-parameters of [`RMSprop`]; the default is PyTorch's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RMSpropConfig {
    /// Learning rate (PyTorch: 0.01).
    pub lr: f64,
    /// Decay of the running averages (0.99).
    pub alpha: f64,
    /// Added to the root of the average (1e-8).
    pub eps: f64,
    /// L2 penalty added to the gradient (0).
    pub weight_decay: f64,
    /// Momentum (0: no momentum buffer).
    pub momentum: f64,
    /// Divide by the root of the gradient's variance estimate
    /// (`square_avg - grad_avg^2`) rather than of its second moment (one
    /// more state buffer).
    pub centered: bool,
    /// Maximize the objective.
    pub maximize: bool,
}

impl Default for RMSpropConfig {
    fn default() -> Self {
        RMSpropConfig {
            lr: 1e-2,
            alpha: 0.99,
            eps: 1e-8,
            weight_decay: 0.0,
            momentum: 0.0,
            centered: false,
            maximize: false,
        }
    }
}

/// RMSprop, exactly PyTorch's (single-tensor form):
///
/// ```text
/// g = maximize ? -grad : grad;  g = g + weight_decay * p
/// square_avg = alpha * square_avg + (1 - alpha) * g * g
/// avg = sqrt(square_avg) + eps,  or with centered:
///     grad_avg = lerp(grad_avg, g, 1 - alpha);  avg = sqrt(square_avg - grad_avg^2) + eps
/// momentum > 0:  buf = momentum * buf + g / avg;  p = p - lr * buf
/// otherwise:     p = p - lr * g / avg
/// ```
///
/// State per parameter (the parameter's dtype, made zero on its first
/// step): `square_avg`, and `momentum_buffer` with momentum, `grad_avg`
/// when centered. Each step is one fused pass per parameter and allocates
/// nothing after the first.
///
/// ```
/// use tensorscope::nn::{Linear, Module};
/// use tensorscope::optim::{Optimizer, RMSprop, RMSpropConfig};
/// use tensorscope::{DType, Device, Tensor};
///
/// let mut model = Linear::new(4, 2)?;
/// // Start far from the minimum (outputs about 4), whatever the draw.
/// tensorscope::nn::init::constant_(&mut model.weight, 1.0)?;
/// let mut opt = RMSprop::new(RMSpropConfig { momentum: 0.9, centered: true, ..Default::default() })?;
/// let x = Tensor::ones(&[3, 4], DType::F32, Device::Cpu)?;
/// let loss = |m: &Linear| m.forward(&x)?.square()?.mean_all()?.item::<f32>();
/// let before = loss(&model)?;
/// for _ in 0..5 {
///     opt.zero_grad(&model);
///     model.forward(&x)?.square()?.mean_all()?.backward()?;
///     opt.step(&mut model)?;
/// }
/// assert!(loss(&model)? < before);
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub struct RMSprop {
    cfg: RMSpropConfig,
    state: SlotMap,
}

impl RMSprop {
    /// An RMSprop optimizer; an `Err` for a negative or non-finite lr,
    /// alpha, eps, weight decay or momentum (PyTorch's checks).
    pub fn new(cfg: RMSpropConfig) -> Result<RMSprop> {
        const OP: &str = "RMSprop::new";
        for (what, v) in [
            ("lr", cfg.lr),
            ("alpha", cfg.alpha),
            ("eps", cfg.eps),
            ("weight_decay", cfg.weight_decay),
            ("momentum", cfg.momentum),
        ] {
            check_range(OP, what, v, 0.0, f64::INFINITY, false)?;
        }
        Ok(RMSprop {
            cfg,
            state: SlotMap::new(),
        })
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &RMSpropConfig {
        &self.cfg
    }
}

impl Optimizer for RMSprop {
    fn step(&mut self, model: &mut dyn Module) -> Result<()> {
        let c = self.cfg;
        let rule = |_| UpdateRule::RmsProp {
            lr: c.lr,
            alpha: c.alpha,
            eps: c.eps,
            weight_decay: c.weight_decay,
            momentum: c.momentum,
            centered: c.centered,
            maximize: c.maximize,
        };
        step("RMSprop::step", model, &mut self.state, zeros_for, rule)
    }
    fn lr(&self) -> f64 {
        self.cfg.lr
    }
    fn set_lr(&mut self, lr: f64) {
        self.cfg.lr = lr;
    }
}
