//! `Dropout`.

use super::{donation_verdict, Module, Verdict};
use crate::error::{bail, Error, Result};
use crate::Tensor;

/// Zeroes each element with probability `p` in training mode and scales the
/// kept ones by `1 / (1 - p)`; the identity in evaluation mode. A new layer
/// is in training mode (as in PyTorch).
///
/// In evaluation mode the forward on an owned input returns it as it is (no
/// allocation); in training mode with a donated buffer (only handle, no graph
/// needed) the mask is applied in place, so only the mask (one buffer of the
/// input's size) is allocated.
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
}

impl Module for Dropout {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if !self.active() {
            return Ok(x.alias());
        }
        x.mul(&self.mask(x)?)
    }

    fn forward_owned(&self, mut x: Tensor) -> Result<Tensor> {
        if !self.active() {
            return Ok(x);
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
