//! Naive f64 references of PyTorch's `_single_tensor_adam`,
//! `_single_tensor_sgd`, `_single_tensor_rmsprop` and
//! `_single_tensor_adagrad` update equations and of `lion-pytorch`'s, with
//! the state rounded to the parameter's dtype as the optimizers store it;
//! shared by tests/autograd/optim/, tests/autograd/optim_rules.rs and tests/cuda/cuda_ops/.

use super::store;
use tensorscope::optim::{AdagradConfig, AdamConfig, LionConfig, RMSpropConfig, SgdConfig};
use tensorscope::DType;

/// One update of one parameter: (parameter, gradient, state, step number),
/// all row-major.
pub type RefStep = dyn Fn(&mut [f64], &[f64], &mut [Vec<f64>], usize);

/// Adam (`decoupled = false`) or AdamW: state `[m, v, max v]`.
pub fn ref_adam(c: AdamConfig, decoupled: bool, dt: DType) -> Box<RefStep> {
    Box::new(move |p, g, st, t| {
        let (b1, b2) = c.betas;
        let r = |x: f64| store(dt, x);
        for i in 0..p.len() {
            let mut gi = if c.maximize { -g[i] } else { g[i] };
            if decoupled {
                p[i] *= 1.0 - c.lr * c.weight_decay;
            } else {
                gi += c.weight_decay * p[i];
            }
            let m = b1 * st[0][i] + (1.0 - b1) * gi;
            let v = b2 * st[1][i] + (1.0 - b2) * gi * gi;
            let vhat = if c.amsgrad {
                let vm = st[2][i].max(v);
                st[2][i] = r(vm);
                vm
            } else {
                v
            };
            let bc1 = 1.0 - b1.powi(t as i32);
            let bc2 = 1.0 - b2.powi(t as i32);
            p[i] = r(p[i] - c.lr / bc1 * m / (vhat.sqrt() / bc2.sqrt() + c.eps));
            st[0][i] = r(m);
            st[1][i] = r(v);
        }
    })
}

/// SGD: state `[momentum buffer]` (set to the first step's update).
pub fn ref_sgd(c: SgdConfig, dt: DType) -> Box<RefStep> {
    Box::new(move |p, g, st, t| {
        for i in 0..p.len() {
            let mut d = if c.maximize { -g[i] } else { g[i] };
            d += c.weight_decay * p[i];
            if c.momentum != 0.0 {
                let b = if t == 1 {
                    d
                } else {
                    c.momentum * st[0][i] + (1.0 - c.dampening) * d
                };
                d = if c.nesterov { d + c.momentum * b } else { b };
                st[0][i] = store(dt, b);
            }
            p[i] = store(dt, p[i] - c.lr * d);
        }
    })
}

/// RMSprop: state `[square_avg, momentum buffer, grad_avg]`.
pub fn ref_rmsprop(c: RMSpropConfig, dt: DType) -> Box<RefStep> {
    Box::new(move |p, g, st, _t| {
        let r = |x: f64| store(dt, x);
        for i in 0..p.len() {
            let mut gi = if c.maximize { -g[i] } else { g[i] };
            gi += c.weight_decay * p[i];
            let sq = c.alpha * st[0][i] + (1.0 - c.alpha) * gi * gi;
            st[0][i] = r(sq);
            let var = if c.centered {
                let ga = st[2][i] + (1.0 - c.alpha) * (gi - st[2][i]);
                st[2][i] = r(ga);
                sq - ga * ga
            } else {
                sq
            };
            let avg = var.sqrt() + c.eps;
            let d = if c.momentum > 0.0 {
                let b = c.momentum * st[1][i] + gi / avg;
                st[1][i] = r(b);
                b
            } else {
                gi / avg
            };
            p[i] = r(p[i] - c.lr * d);
        }
    })
}

/// Adagrad: state `[sum]`, which starts at `initial_accumulator_value`.
pub fn ref_adagrad(c: AdagradConfig, dt: DType) -> Box<RefStep> {
    Box::new(move |p, g, st, t| {
        let clr = c.lr / (1.0 + (t - 1) as f64 * c.lr_decay);
        for i in 0..p.len() {
            if t == 1 {
                st[0][i] = store(dt, c.initial_accumulator_value);
            }
            let mut gi = if c.maximize { -g[i] } else { g[i] };
            gi += c.weight_decay * p[i];
            let sum = st[0][i] + gi * gi;
            st[0][i] = store(dt, sum);
            p[i] = store(dt, p[i] - clr * gi / (sum.sqrt() + c.eps));
        }
    })
}

/// Lion: state `[exp_avg]`; `sign` is `torch.sign`'s (0 at 0).
pub fn ref_lion(c: LionConfig, dt: DType) -> Box<RefStep> {
    Box::new(move |p, g, st, _t| {
        let (b1, b2) = c.betas;
        for i in 0..p.len() {
            let gi = if c.maximize { -g[i] } else { g[i] };
            let u = b1 * st[0][i] + (1.0 - b1) * gi;
            let s = if u > 0.0 {
                1.0
            } else if u < 0.0 {
                -1.0
            } else {
                0.0
            };
            p[i] = store(dt, p[i] * (1.0 - c.lr * c.weight_decay) - c.lr * s);
            st[0][i] = store(dt, b2 * st[0][i] + (1.0 - b2) * gi);
        }
    })
}

/// The RMSprop option sets: defaults, weight decay, momentum, centered
/// (with `1 - alpha >= 0.5`, ATen's other lerp form), and all at once with
/// maximize.
pub fn rmsprop_option_sets() -> Vec<RMSpropConfig> {
    vec![
        RMSpropConfig::default(),
        RMSpropConfig {
            lr: 0.02,
            alpha: 0.9,
            eps: 1e-6,
            weight_decay: 0.1,
            ..Default::default()
        },
        RMSpropConfig {
            momentum: 0.9,
            ..Default::default()
        },
        RMSpropConfig {
            centered: true,
            ..Default::default()
        },
        RMSpropConfig {
            lr: 0.005,
            alpha: 0.3,
            centered: true,
            ..Default::default()
        },
        RMSpropConfig {
            lr: 0.01,
            alpha: 0.95,
            eps: 1e-4,
            weight_decay: 0.05,
            momentum: 0.5,
            centered: true,
            maximize: true,
        },
    ]
}

/// The Adagrad option sets: defaults, lr decay, weight decay with an
/// initial accumulator, and maximize.
pub fn adagrad_option_sets() -> Vec<AdagradConfig> {
    vec![
        AdagradConfig::default(),
        AdagradConfig {
            lr: 0.1,
            lr_decay: 0.05,
            ..Default::default()
        },
        AdagradConfig {
            lr: 0.05,
            weight_decay: 0.1,
            initial_accumulator_value: 0.5,
            eps: 1e-6,
            ..Default::default()
        },
        AdagradConfig {
            lr: 0.05,
            lr_decay: 0.01,
            maximize: true,
            ..Default::default()
        },
    ]
}

/// The Lion option sets: defaults, decoupled weight decay, other betas
/// with maximize.
pub fn lion_option_sets() -> Vec<LionConfig> {
    vec![
        LionConfig {
            lr: 0.01,
            ..Default::default()
        },
        LionConfig {
            lr: 0.003,
            weight_decay: 0.5,
            ..Default::default()
        },
        LionConfig {
            lr: 0.01,
            betas: (0.5, 0.9),
            weight_decay: 0.1,
            maximize: true,
        },
    ]
}

/// A reference optimizer over several parameters, each with its own state
/// (made zero on first use).
pub struct RefOpt {
    step: Box<RefStep>,
    state: Vec<Vec<Vec<f64>>>,
}

impl RefOpt {
    /// Adam or AdamW.
    pub fn adam(c: AdamConfig, decoupled: bool, dt: DType) -> RefOpt {
        RefOpt {
            step: ref_adam(c, decoupled, dt),
            state: vec![],
        }
    }

    /// SGD.
    pub fn sgd(c: SgdConfig, dt: DType) -> RefOpt {
        RefOpt {
            step: ref_sgd(c, dt),
            state: vec![],
        }
    }

    /// Step `t` (from 1) of parameter `k`.
    pub fn update(&mut self, k: usize, p: &mut [f64], g: &[f64], t: usize) {
        if self.state.len() <= k {
            self.state.resize(k + 1, vec![]);
        }
        if self.state[k].is_empty() {
            self.state[k] = vec![vec![0.0; p.len()]; 3];
        }
        (self.step)(p, g, &mut self.state[k], t)
    }
}

/// The Adam/AdamW option sets every optimizer test runs: defaults, betas
/// eps and weight decay, `1 - beta1 >= 0.5` (ATen's lerp takes its other
/// form there), amsgrad, maximize, and all of them at once.
pub fn adam_option_sets() -> Vec<AdamConfig> {
    vec![
        AdamConfig {
            lr: 0.01,
            ..Default::default()
        },
        AdamConfig {
            lr: 0.02,
            betas: (0.8, 0.99),
            eps: 1e-6,
            weight_decay: 0.1,
            ..Default::default()
        },
        // 1 - beta1 >= 0.5: ATen's lerp takes its other form
        AdamConfig {
            lr: 0.05,
            betas: (0.3, 0.9),
            ..Default::default()
        },
        AdamConfig {
            lr: 0.01,
            amsgrad: true,
            ..Default::default()
        },
        AdamConfig {
            lr: 0.01,
            maximize: true,
            ..Default::default()
        },
        AdamConfig {
            lr: 0.03,
            betas: (0.5, 0.95),
            eps: 1e-4,
            weight_decay: 0.2,
            amsgrad: true,
            maximize: true,
        },
    ]
}

/// The SGD option sets every optimizer test runs: plain, weight decay,
/// momentum, dampening, Nesterov, and maximize with and without momentum.
pub fn sgd_option_sets() -> Vec<SgdConfig> {
    vec![
        SgdConfig {
            lr: 0.1,
            ..Default::default()
        },
        SgdConfig {
            lr: 0.1,
            weight_decay: 0.01,
            ..Default::default()
        },
        SgdConfig {
            lr: 0.05,
            momentum: 0.9,
            ..Default::default()
        },
        SgdConfig {
            lr: 0.05,
            momentum: 0.9,
            dampening: 0.3,
            weight_decay: 0.02,
            ..Default::default()
        },
        SgdConfig {
            lr: 0.05,
            momentum: 0.8,
            nesterov: true,
            weight_decay: 0.05,
            ..Default::default()
        },
        SgdConfig {
            lr: 0.1,
            maximize: true,
            weight_decay: 0.1,
            ..Default::default()
        },
        SgdConfig {
            lr: 0.05,
            momentum: 0.7,
            nesterov: true,
            maximize: true,
            ..Default::default()
        },
    ]
}
