//! `LayerNorm` and `BatchNorm1d`.
//!
//! Both are compositions of differentiable ops (mean, sub, mul, rsqrt, ...),
//! so their gradients come from autograd.

use super::Module;
use crate::autograd::no_grad;
use crate::error::{bail, Error, Result};
use crate::{DType, Device, Tensor};

/// Normalises over the last `normalized_shape.len()` dimensions:
/// `(x - mean) / sqrt(var + eps) * weight + bias`, with the biased variance,
/// `eps = 1e-5`, and affine `weight = 1`, `bias = 0` of shape
/// `normalized_shape`.
///
/// ```
/// use tensorscope::nn::{LayerNorm, Module};
/// use tensorscope::{Device, Tensor};
/// let ln = LayerNorm::new(&[2])?;
/// let y = ln.forward(&Tensor::from_slice(&[1.0f32, 3.0], &[1, 2], Device::Cpu)?)?;
/// let v = y.to_vec::<f32>()?;
/// assert!((v[0] + 1.0).abs() < 1e-4 && (v[1] - 1.0).abs() < 1e-4);
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub struct LayerNorm {
    normalized_shape: Vec<usize>,
    eps: f64,
    /// The scale, of shape `normalized_shape` (1 at creation).
    pub weight: Tensor,
    /// The shift, of shape `normalized_shape` (0 at creation).
    pub bias: Tensor,
}

impl LayerNorm {
    /// An f32 layer on the CPU with `eps = 1e-5`.
    pub fn new(normalized_shape: &[usize]) -> Result<LayerNorm> {
        LayerNorm::with_options(normalized_shape, 1e-5, DType::F32, Device::Cpu)
    }

    /// A layer with the given `eps`, float dtype and device.
    pub fn with_options(
        normalized_shape: &[usize],
        eps: f64,
        dtype: DType,
        device: Device,
    ) -> Result<LayerNorm> {
        if normalized_shape.is_empty() {
            bail!(Error::arg(
                "LayerNorm",
                "normalized_shape must name at least one dimension"
            ));
        }
        if !dtype.is_float() {
            bail!(Error::dtype("LayerNorm", "a float dtype", dtype));
        }
        if !(eps.is_finite() && eps >= 0.0) {
            bail!(Error::arg(
                "LayerNorm",
                format!("eps must be finite and non-negative, got {eps}")
            ));
        }
        Ok(LayerNorm {
            normalized_shape: normalized_shape.to_vec(),
            eps,
            weight: Tensor::ones(normalized_shape, dtype, device)?.requires_grad_(true)?,
            bias: Tensor::zeros(normalized_shape, dtype, device)?.requires_grad_(true)?,
        })
    }
}

impl Module for LayerNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let k = self.normalized_shape.len();
        if x.rank() < k || x.shape()[x.rank() - k..] != self.normalized_shape[..] {
            bail!(Error::shape(
                "LayerNorm",
                x.shape(),
                &self.normalized_shape,
                "the input's trailing dimensions must equal normalized_shape"
            ));
        }
        let dims: Vec<isize> = (1..=k as isize).map(|i| -i).collect();
        let mean = x.mean(&dims, true)?;
        let xc = x.sub(&mean)?;
        let var = xc.square()?.mean(&dims, true)?;
        let inv = var.add_scalar(self.eps)?.rsqrt()?;
        xc.mul(&inv)?.mul(&self.weight)?.add(&self.bias)
    }

    fn named_parameters(&self) -> Vec<(String, &Tensor)> {
        vec![("weight".into(), &self.weight), ("bias".into(), &self.bias)]
    }

    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
        vec![
            ("weight".into(), &mut self.weight),
            ("bias".into(), &mut self.bias),
        ]
    }
}

/// Batch normalisation of an `[N, C]` input over the batch dimension.
///
/// * Training mode (the default): normalises with the batch mean and
///   **biased** variance, and updates the running statistics under `no_grad`:
///   `running = (1 - momentum) * running + momentum * batch_stat`, with the
///   **unbiased** batch variance for `running_var` (momentum 0.1, as PyTorch).
///   `num_batches_tracked` counts the updates. A batch of one sample is an
///   error (the variance is undefined).
/// * Evaluation mode: normalises with the running statistics.
///
/// `weight` (1) and `bias` (0) are trainable; `running_mean` (0),
/// `running_var` (1) and `num_batches_tracked` (i64 0) are buffers: listed by
/// `named_parameters_mut` after the parameters, not by `named_parameters`
/// (see the [module docs](super)).
///
/// The running statistics are written through a second handle to the buffer
/// (an alias), so `forward(&self)` can update them without `&mut`.
///
/// ```
/// use tensorscope::nn::{BatchNorm1d, Module};
/// use tensorscope::{Device, Tensor};
/// let bn = BatchNorm1d::new(1)?;
/// let x = Tensor::from_slice(&[1.0f32, 3.0], &[2, 1], Device::Cpu)?;
/// let y = bn.forward(&x)?;
/// assert!((y.to_vec::<f32>()?[1] - 1.0).abs() < 1e-4);
/// // running_mean = 0.9 * 0 + 0.1 * 2, running_var = 0.9 * 1 + 0.1 * 2 (unbiased)
/// assert!((bn.running_mean.to_vec::<f32>()?[0] - 0.2).abs() < 1e-6);
/// assert!((bn.running_var.to_vec::<f32>()?[0] - 1.1).abs() < 1e-6);
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub struct BatchNorm1d {
    num_features: usize,
    eps: f64,
    momentum: f64,
    training: bool,
    /// The scale `[C]` (1 at creation).
    pub weight: Tensor,
    /// The shift `[C]` (0 at creation).
    pub bias: Tensor,
    /// Buffer: running mean `[C]`.
    pub running_mean: Tensor,
    /// Buffer: running (unbiased) variance `[C]`.
    pub running_var: Tensor,
    /// Buffer: number of training batches seen (i64 scalar).
    pub num_batches_tracked: Tensor,
}

impl BatchNorm1d {
    /// An f32 layer on the CPU with `eps = 1e-5`, `momentum = 0.1`.
    pub fn new(num_features: usize) -> Result<BatchNorm1d> {
        BatchNorm1d::with_options(num_features, 1e-5, 0.1, DType::F32, Device::Cpu)
    }

    /// A layer with the given `eps`, `momentum` (in `[0, 1]`), float dtype and device.
    pub fn with_options(
        num_features: usize,
        eps: f64,
        momentum: f64,
        dtype: DType,
        device: Device,
    ) -> Result<BatchNorm1d> {
        if !dtype.is_float() {
            bail!(Error::dtype("BatchNorm1d", "a float dtype", dtype));
        }
        if !(eps.is_finite() && eps >= 0.0 && (0.0..=1.0).contains(&momentum)) {
            bail!(Error::arg(
                "BatchNorm1d",
                format!("eps must be finite and non-negative and momentum in [0, 1], got eps {eps}, momentum {momentum}")
            ));
        }
        let c = [num_features];
        Ok(BatchNorm1d {
            num_features,
            eps,
            momentum,
            training: true,
            weight: Tensor::ones(&c, dtype, device)?.requires_grad_(true)?,
            bias: Tensor::zeros(&c, dtype, device)?.requires_grad_(true)?,
            running_mean: Tensor::zeros(&c, dtype, device)?,
            running_var: Tensor::ones(&c, dtype, device)?,
            num_batches_tracked: Tensor::zeros(&[], DType::I64, device)?,
        })
    }

    fn update_running(&self, mean: &Tensor, var_biased: &Tensor, n: usize) -> Result<()> {
        no_grad(|| {
            let m = self.momentum;
            let mean = mean.detach().reshape(&[-1])?;
            let var = var_biased
                .detach()
                .reshape(&[-1])?
                .mul_scalar(n as f64 / (n as f64 - 1.0))?;
            // Aliases share the buffers' storage: writing through them updates the buffers.
            let mut rm = self.running_mean.alias();
            rm.mul_scalar_(1.0 - m)?.add_(&mean.mul_scalar(m)?)?;
            let mut rv = self.running_var.alias();
            rv.mul_scalar_(1.0 - m)?.add_(&var.mul_scalar(m)?)?;
            let mut nb = self.num_batches_tracked.alias();
            nb.add_scalar_(1.0)?;
            Ok(())
        })
    }
}

impl Module for BatchNorm1d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if x.rank() != 2 || x.shape()[1] != self.num_features {
            bail!(Error::shape(
                "BatchNorm1d",
                x.shape(),
                &[self.num_features],
                "the input must be [N, C] with C = num_features"
            ));
        }
        let (mean, inv, xc) = if self.training {
            let n = x.shape()[0];
            if n < 2 {
                bail!(Error::arg(
                    "BatchNorm1d",
                    format!("expected more than 1 value per channel when training, got input of shape {:?}", x.shape())
                ));
            }
            let mean = x.mean(&[0], true)?;
            let xc = x.sub(&mean)?;
            let var = xc.square()?.mean(&[0], true)?;
            self.update_running(&mean, &var, n)?;
            (mean, var.add_scalar(self.eps)?.rsqrt()?, xc)
        } else {
            let mean = self.running_mean.alias();
            let inv = self.running_var.add_scalar(self.eps)?.rsqrt()?;
            let xc = x.sub(&mean)?;
            (mean, inv, xc)
        };
        drop(mean);
        xc.mul(&inv)?.mul(&self.weight)?.add(&self.bias)
    }

    fn named_parameters(&self) -> Vec<(String, &Tensor)> {
        vec![("weight".into(), &self.weight), ("bias".into(), &self.bias)]
    }

    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
        vec![
            ("weight".into(), &mut self.weight),
            ("bias".into(), &mut self.bias),
            ("running_mean".into(), &mut self.running_mean),
            ("running_var".into(), &mut self.running_var),
            ("num_batches_tracked".into(), &mut self.num_batches_tracked),
        ]
    }

    fn train(&mut self, on: bool) {
        self.training = on;
    }

    fn is_training(&self) -> bool {
        self.training
    }
}
