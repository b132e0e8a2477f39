//! Lion (Chen et al. 2023, "Symbolic Discovery of Optimization
//! Algorithms"), with the update of its authors' `lion-pytorch`.

use super::elementwise::{step, SlotMap};
use super::{check_range, zeros_for, Optimizer};
use crate::backend::optim::UpdateRule;
use crate::error::Result;
use crate::nn::Module;

/// The hyper-parameters of [`Lion`]; the default is `lion-pytorch`'s.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LionConfig {
    /// Learning rate (1e-4; typically 3-10x smaller than AdamW's).
    pub lr: f64,
    /// `(beta1, beta2)`: the interpolation that gives the update's sign,
    /// and the momentum's decay ((0.9, 0.99)).
    pub betas: (f64, f64),
    /// Decoupled weight decay, `p *= 1 - lr * weight_decay` (0).
    pub weight_decay: f64,
    /// Maximize the objective (not in `lion-pytorch`: the gradient is
    /// negated, as every PyTorch optimizer does).
    pub maximize: bool,
}

impl Default for LionConfig {
    fn default() -> Self {
        LionConfig {
            lr: 1e-4,
            betas: (0.9, 0.99),
            weight_decay: 0.0,
            maximize: false,
        }
    }
}

/// Lion: the sign of an interpolation of the momentum and the gradient.
/// PyTorch has no Lion; the reference is `lion-pytorch`'s update:
///
/// ```text
/// g = maximize ? -grad : grad
/// p = p * (1 - lr * weight_decay)
/// p = p - lr * sign(beta1 * m + (1 - beta1) * g)
/// m = beta2 * m + (1 - beta2) * g
/// ```
///
/// `sign` is `torch.sign`'s (0 for 0, and for NaN). One state buffer per
/// parameter (`exp_avg`, zero on its first step): half of Adam's. Each step
/// is one fused pass per parameter and allocates nothing after the first.
///
/// ```
/// use tensorscope::nn::{Linear, Module};
/// use tensorscope::optim::{Lion, LionConfig, Optimizer};
/// use tensorscope::{DType, Device, Tensor};
///
/// let mut model = Linear::new(4, 2)?;
/// // Start far from the minimum (outputs about 4), whatever the draw.
/// tensorscope::nn::init::constant_(&mut model.weight, 1.0)?;
/// let mut opt = Lion::new(LionConfig { lr: 1e-2, ..Default::default() })?;
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
pub struct Lion {
    cfg: LionConfig,
    state: SlotMap,
}

impl Lion {
    /// A Lion optimizer; an `Err` for a negative or non-finite lr or weight
    /// decay, or a beta outside `[0, 1]`.
    pub fn new(cfg: LionConfig) -> Result<Lion> {
        const OP: &str = "Lion::new";
        check_range(OP, "lr", cfg.lr, 0.0, f64::INFINITY, false)?;
        check_range(OP, "betas.0", cfg.betas.0, 0.0, 1.0, true)?;
        check_range(OP, "betas.1", cfg.betas.1, 0.0, 1.0, true)?;
        check_range(
            OP,
            "weight_decay",
            cfg.weight_decay,
            0.0,
            f64::INFINITY,
            false,
        )?;
        Ok(Lion {
            cfg,
            state: SlotMap::new(),
        })
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &LionConfig {
        &self.cfg
    }
}

impl Optimizer for Lion {
    fn step(&mut self, model: &mut dyn Module) -> Result<()> {
        let c = self.cfg;
        let rule = |_| UpdateRule::Lion {
            lr: c.lr,
            beta1: c.betas.0,
            beta2: c.betas.1,
            weight_decay: c.weight_decay,
            maximize: c.maximize,
        };
        step("Lion::step", model, &mut self.state, zeros_for, rule)
    }
    fn lr(&self) -> f64 {
        self.cfg.lr
    }
    fn set_lr(&mut self, lr: f64) {
        self.cfg.lr = lr;
    }
}
