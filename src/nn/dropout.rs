//! `Dropout`.

use super::{donation_verdict, Module, Verdict};
use crate::autograd::{attach, needs_grad, Saved};
use crate::backend::{self, Operand};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{bail, Error, Result};
use crate::random::with_global;
use crate::tensor::Tensor;

/// Zeroes each element with probability `p` in training mode and scales the
/// kept ones by `1 / (1 - p)`; the identity in evaluation mode. A new layer
/// is in training mode (as in PyTorch).
///
/// In evaluation mode the forward on an owned input returns it as it is (no
/// allocation); in training mode with a donated buffer (only handle, no graph
/// needed) the mask is applied in place, so only the mask (one buffer of the
/// input's size) is allocated.
///
/// On CUDA the training forward is one fused kernel (`kernels/nn.cu`) that
/// draws the mask on the device from the global generator's Philox offset
/// and writes the output and a bool keep mask, which is saved for the
/// backward (`dx = mask ? dy / (1 - p) : 0`, one fused kernel too). As for
/// every random op, CUDA's masks for a seed differ from the CPU's (see
/// [`Generator`](crate::Generator)).
///
/// ```
/// use tensorscope::nn::{Dropout, Module};
/// use tensorscope::{DType, Device, Tensor};
/// let mut d = Dropout::new(0.5)?;
/// d.eval();
/// let x = Tensor::ones(&[4], DType::F32, Device::Cpu)?;
/// assert_eq!(d.forward(&x)?.to_vec::<f32>()?, vec![1.0; 4]);
/// # Ok::<(), tensorscope::Error>(())
/// ```
#[derive(Debug)]
pub struct Dropout {
    p: f64,
    training: bool,
}

impl Dropout {
    /// A dropout layer with drop probability `p` in `[0, 1]`.
    pub fn new(p: f64) -> Result<Dropout> {
        if !(0.0..=1.0).contains(&p) {
            bail!(Error::arg(
                "Dropout",
                format!("dropout probability has to be between 0 and 1, but got {p}")
            ));
        }
        Ok(Dropout { p, training: true })
    }

    /// The drop probability.
    pub fn p(&self) -> f64 {
        self.p
    }

    /// The scaled keep mask (`0` or `1/(1-p)`) in `x`'s dtype.
    fn mask(&self, x: &Tensor) -> Result<Tensor> {
        if !x.dtype().is_float() {
            bail!(Error::dtype("Dropout", "a float dtype", x.dtype()));
        }
        if self.p >= 1.0 {
            return x.zeros_like();
        }
        // floor(u + 1 - p) is 1 exactly when u >= p (probability 1 - p) and
        // 0 otherwise: one buffer, built in place.
        let mut m = x.rand_like()?;
        m.add_scalar_(1.0 - self.p)?
            .floor_()?
            .mul_scalar_(1.0 / (1.0 - self.p))?;
        Ok(m)
    }

    fn active(&self) -> bool {
        self.training && self.p > 0.0
    }

    /// The fused CUDA forward (training mode, `0 < p < 1`): output and bool
    /// keep mask in one kernel; the mask is saved for the backward kernel.
    fn forward_fused(&self, x: &Tensor) -> Result<Tensor> {
        if !x.dtype().is_float() {
            bail!(Error::dtype("Dropout", "a float dtype", x.dtype()));
        }
        let x = x.contiguous()?;
        let y = Tensor::alloc(x.shape(), x.dtype(), x.device())?;
        let mask = Tensor::alloc(x.shape(), DType::Bool, x.device())?;
        let p = self.p;
        let Device::Cuda(ordinal) = x.device() else {
            bail!(Error::arg("Dropout", "the fused kernel runs on CUDA only"));
        };
        let (ox, oy, om) = (Operand::of(&x), Operand::of(&y), Operand::of(&mask));
        with_global(|g| {
            g.philox(ordinal, |seed, off| {
                backend::philox_dropout(&ox, &oy, &om, p, seed, off)
            })
        })?;
        drop((ox, oy, om));
        if !needs_grad(&[&x]) {
            return Ok(y);
        }
        let saved = Saved::new(&mask, "dropout")?;
        Ok(attach(
            y,
            "dropout",
            &[&x],
            Box::new(move |g: &Tensor| {
                let mask = saved.get()?;
                let g = g.contiguous()?;
                let dx = Tensor::alloc(g.shape(), g.dtype(), g.device())?;
                backend::dropout_backward(
                    &Operand::of(&g),
                    &Operand::of(mask),
                    &Operand::of(&dx),
                    p,
                )?;
                Ok(vec![Some(dx)])
            }),
        ))
    }

    /// `true` when the forward goes through the fused CUDA kernel.
    fn fused(&self, x: &Tensor) -> bool {
        x.device().is_cuda() && self.p < 1.0
    }
}

impl Module for Dropout {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if !self.active() {
            return Ok(x.alias());
        }
        if self.fused(x) {
            return self.forward_fused(x);
        }
        x.mul(&self.mask(x)?)
    }

    fn forward_owned(&self, mut x: Tensor) -> Result<Tensor> {
        if !self.active() {
            return Ok(x);
        }
        if self.fused(&x) {
            return self.forward_fused(&x);
        }
        if donation_verdict(&x) == Verdict::Taken {
            let m = self.mask(&x)?;
            x.mul_(&m)?;
            Ok(x)
        } else {
            self.forward(&x)
        }
    }

    fn can_work_in_place(&self) -> bool {
        true
    }

    fn named_parameters(&self) -> Vec<(String, &Tensor)> {
        Vec::new()
    }

    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
        Vec::new()
    }

    fn train(&mut self, on: bool) {
        self.training = on;
    }

    fn is_training(&self) -> bool {
        self.training
    }
}
