//! f32 master weights for a half-precision model.

use super::Optimizer;
use crate::dtype::DType;
use crate::error::{bail, Error, Result};
use crate::nn::Module;
use crate::tensor::Tensor;

/// Steps an f16/bf16 model through f32 copies of its half parameters (the
/// *master weights*), so that updates smaller than half's resolution
/// accumulate instead of rounding away: `1 - 1e-3` is 1 in bf16, so plain
/// bf16 SGD at that step never moves a weight of 1.
///
/// At the first step each half parameter that requires grad gets an f32
/// copy, and its gradient an f32 buffer; other parameters (f32 norms kept
/// by `to_dtype_keeping`, say) are stepped as they are. Each step converts
/// the gradients into the buffers, steps `inner` over the f32 copies, and
/// rounds them back into the model's parameters, all in place: after the
/// first step nothing is allocated (the inner optimizer's own state aside,
/// which is f32 here: twice a half state's bytes).
///
/// ```
/// use tensorscope::nn::{Linear, Module};
/// use tensorscope::optim::{MasterWeights, Optimizer, Sgd, SgdConfig};
/// use tensorscope::{DType, Device, Tensor};
/// let mut fc = Linear::with_options(1, 1, false, DType::BF16, Device::Cpu)?;
/// tensorscope::autograd::no_grad(|| fc.weight.fill_(1.0).map(|_| ()))?;
/// let mut opt = MasterWeights::new(Sgd::new(SgdConfig { lr: 1e-3, ..Default::default() })?);
/// for _ in 0..10 {
///     opt.zero_grad(&fc);
///     fc.forward(&Tensor::ones(&[1, 1], DType::BF16, Device::Cpu)?)?.sum_all()?.backward()?;
///     opt.step(&mut fc)?;
/// }
/// // The f32 copy is 0.99; the bf16 weight its rounding (plain bf16 SGD stays at 1).
/// assert_eq!(fc.weight.to_vec::<f32>()?, [0.98828125]);
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub struct MasterWeights<O: Optimizer> {
    inner: O,
    /// Per parameter of the model, in its order: the name, and the f32 copy
    /// (a half parameter) or an alias of the parameter itself.
    master: Vec<(String, Tensor, bool)>,
}

/// The master tensors seen as a module by the inner optimizer.
struct Shadow<'a>(&'a mut [(String, Tensor, bool)]);

impl Module for Shadow<'_> {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(x.alias())
    }
    fn named_parameters(&self) -> Vec<(String, &Tensor)> {
        self.0.iter().map(|(n, t, _)| (n.clone(), t)).collect()
    }
    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
        self.0.iter_mut().map(|(n, t, _)| (n.clone(), t)).collect()
    }
}

fn is_half(dt: DType) -> bool {
    matches!(dt, DType::F16 | DType::BF16)
}

impl<O: Optimizer> MasterWeights<O> {
    /// `inner` stepping f32 copies of the model's half parameters.
    pub fn new(inner: O) -> MasterWeights<O> {
        MasterWeights {
            inner,
            master: Vec::new(),
        }
    }

    /// The f32 copy of the half parameter `name`, once the first step made it.
    pub fn master(&self, name: &str) -> Option<&Tensor> {
        self.master
            .iter()
            .find(|(n, _, m)| *m && n == name)
            .map(|(_, t, _)| t)
    }

    /// The inner optimizer.
    pub fn inner(&self) -> &O {
        &self.inner
    }
}

impl<O: Optimizer> Optimizer for MasterWeights<O> {
    fn step(&mut self, model: &mut dyn Module) -> Result<()> {
        const OP: &str = "MasterWeights::step";
        let _g = crate::autograd::no_grad_guard();
        let params = model.named_parameters();
        if self.master.is_empty() {
            for (n, p) in &params {
                let copy = is_half(p.dtype()) && p.requires_grad();
                let t = if copy {
                    p.to_dtype(DType::F32)?.requires_grad_(true)?
                } else {
                    p.alias()
                };
                self.master.push((n.clone(), t, copy));
            }
        }
        let same = params.len() == self.master.len()
            && params
                .iter()
                .zip(&self.master)
                .all(|((n, p), (mn, m, copy))| {
                    n == mn
                        && p.shape() == m.shape()
                        && p.device() == m.device()
                        && (if *copy {
                            is_half(p.dtype())
                        } else {
                            p.shares_storage(m) && p.dtype() == m.dtype()
                        })
                });
        if !same {
            bail!(Error::arg(
                OP,
                "the model's parameters changed since the first step (names, shapes, dtypes or devices)"
            ));
        }
        for ((_, p), (_, m, copy)) in params.iter().zip(&self.master) {
            if !*copy {
                continue;
            }
            match (p.grad(), m.grad()) {
                (Some(g), Some(mut mg)) => {
                    mg.copy_(&g)?;
                }
                (Some(g), None) => m.set_grad(Some(g.to_dtype(DType::F32)?))?,
                (None, _) => m.set_grad(None)?,
            }
        }
        drop(params);
        self.inner.step(&mut Shadow(&mut self.master))?;
        let mut params = model.named_parameters_mut();
        for ((_, p), (_, m, copy)) in params.iter_mut().zip(&self.master) {
            if *copy && m.grad().is_some() {
                p.copy_(m)?;
            }
        }
        Ok(())
    }

    fn zero_grad(&self, model: &dyn Module) {
        model.zero_grad()
    }

    fn lr(&self) -> f64 {
        self.inner.lr()
    }

    fn set_lr(&mut self, lr: f64) {
        self.inner.set_lr(lr)
    }
}
