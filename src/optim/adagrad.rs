//! Adagrad, PyTorch's `torch.optim.Adagrad`.

use super::elementwise::{step, SlotMap};
use super::{check_range, Optimizer};
use crate::backend::optim::UpdateRule;
use crate::error::Result;
use crate::nn::Module;
use crate::tensor::Tensor;

/// The hyper-parameters of [`Adagrad`]; the default is PyTorch's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdagradConfig {
    /// Learning rate (PyTorch: 0.01).
    pub lr: f64,
    /// Step `t` uses `lr / (1 + (t - 1) * lr_decay)` (0).
    pub lr_decay: f64,
    /// L2 penalty added to the gradient (0).
    pub weight_decay: f64,
    /// The sum of squares a parameter starts from (0).
    pub initial_accumulator_value: f64,
    /// Added to the root of the sum (1e-10).
    pub eps: f64,
    /// Maximize the objective.
    pub maximize: bool,
}

impl Default for AdagradConfig {
    fn default() -> Self {
        AdagradConfig {
            lr: 1e-2,
            lr_decay: 0.0,
            weight_decay: 0.0,
            initial_accumulator_value: 0.0,
            eps: 1e-10,
            maximize: false,
        }
    }
}

/// Adagrad, exactly PyTorch's (single-tensor form):
///
/// ```text
/// t += 1;  g = maximize ? -grad : grad;  g = g + weight_decay * p
/// clr = lr / (1 + (t - 1) * lr_decay)
/// sum = sum + g * g;  p = p - clr * g / (sqrt(sum) + eps)
/// ```
///
/// State per parameter (the parameter's dtype): `sum`, made on the
/// parameter's first step and filled with `initial_accumulator_value`
/// (PyTorch makes it in the constructor; the values are the same). Each
/// step is one fused pass per parameter and allocates nothing after the
/// first.
///
/// ```
/// use tensorscope::nn::{Linear, Module};
/// use tensorscope::optim::{Adagrad, AdagradConfig, Optimizer};
/// use tensorscope::{DType, Device, Tensor};
///
/// let mut model = Linear::new(4, 2)?;
/// // Start far from the minimum (outputs about 4), whatever the draw.
/// tensorscope::nn::init::constant_(&mut model.weight, 1.0)?;
/// let mut opt = Adagrad::new(AdagradConfig { lr: 0.1, lr_decay: 0.01, ..Default::default() })?;
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
pub struct Adagrad {
    cfg: AdagradConfig,
    state: SlotMap,
}

impl Adagrad {
    /// An Adagrad optimizer; an `Err` for a negative or non-finite lr,
    /// lr decay, weight decay, initial accumulator value or eps (PyTorch's
    /// checks).
    pub fn new(cfg: AdagradConfig) -> Result<Adagrad> {
        const OP: &str = "Adagrad::new";
        for (what, v) in [
            ("lr", cfg.lr),
            ("lr_decay", cfg.lr_decay),
            ("weight_decay", cfg.weight_decay),
            ("initial_accumulator_value", cfg.initial_accumulator_value),
            ("eps", cfg.eps),
        ] {
            check_range(OP, what, v, 0.0, f64::INFINITY, false)?;
        }
        Ok(Adagrad {
            cfg,
            state: SlotMap::new(),
        })
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &AdagradConfig {
        &self.cfg
    }
}

impl Optimizer for Adagrad {
    fn step(&mut self, model: &mut dyn Module) -> Result<()> {
        let c = self.cfg;
        let init = |p: &Tensor| {
            Tensor::full(
                p.shape(),
                c.initial_accumulator_value,
                p.dtype(),
                p.device(),
            )
        };
        let rule = |t: u64| UpdateRule::Adagrad {
            clr: c.lr / (1.0 + (t - 1) as f64 * c.lr_decay),
            eps: c.eps,
            weight_decay: c.weight_decay,
            maximize: c.maximize,
        };
        step("Adagrad::step", model, &mut self.state, init, rule)
    }
    fn lr(&self) -> f64 {
        self.cfg.lr
    }
    fn set_lr(&mut self, lr: f64) {
        self.cfg.lr = lr;
    }
}
