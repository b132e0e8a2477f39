//! Root-mean-square normalisation: the functional [`rms_norm`] and the
//! [`RMSNorm`] layer (PyTorch's `torch.nn.functional.rms_norm` and
//! `torch.nn.RMSNorm`).
//!
//! `y = x / sqrt(mean(x^2) + eps) * weight` over the trailing
//! `normalized_shape` dimensions, one fused kernel forward and one backward
//! on the CPU and on CUDA (see [`fused_norm`]).

use super::module::check_parts;
use super::Module;
use crate::backend::nn::NormKind;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{bail, Error, Result};
use crate::ops::fused_norm::fused_norm;
use crate::tensor::Tensor;

/// The `eps` used when none is given: the machine epsilon of the type the
/// statistics are computed in, f32's (`1.19e-7`) for f32, f16 and bf16
/// inputs and f64's for f64. That is what PyTorch 2.15 computes
/// (`std::numeric_limits<opmath_type>::epsilon()`); its documentation says
/// `torch.finfo(x.dtype).eps`, which differs for f16 and bf16, and the
/// numbers follow the code (a test pins them).
pub fn rms_norm_default_eps(dtype: DType) -> f64 {
    if dtype == DType::F64 {
        f64::EPSILON
    } else {
        f32::EPSILON as f64
    }
}

/// `eps`, when given, finite and non-negative (LayerNorm's and RMSNorm's rule).
pub(super) fn check_eps(op: &'static str, eps: Option<f64>) -> Result<()> {
    if let Some(e) = eps
        && !(e.is_finite() && e >= 0.0)
    {
        bail!(Error::arg(
            op,
            format!("eps must be finite and non-negative, got {e}")
        ));
    }
    Ok(())
}

/// At least one normalised dimension (LayerNorm's and RMSNorm's rule).
pub(super) fn check_normalized_shape(op: &'static str, normalized_shape: &[usize]) -> Result<()> {
    if normalized_shape.is_empty() {
        bail!(Error::arg(
            op,
            "normalized_shape must name at least one dimension"
        ));
    }
    Ok(())
}

/// [`rms_norm`] reporting its errors as `op`.
fn rms_norm_op(
    op: &'static str,
    x: &Tensor,
    normalized_shape: &[usize],
    weight: Option<&Tensor>,
    eps: Option<f64>,
) -> Result<Tensor> {
    if let Some(c) = crate::autocast::cast(&crate::autocast::RMS_NORM, &[Some(x), weight])? {
        return rms_norm_op(op, c.get(0), normalized_shape, c.opt(1), eps);
    }
    check_normalized_shape(op, normalized_shape)?;
    check_eps(op, eps)?;
    if !x.dtype().is_float() {
        bail!(Error::dtype(op, "a float input", x.dtype()));
    }
    let k = normalized_shape.len();
    if x.rank() < k || x.shape()[x.rank() - k..] != normalized_shape[..] {
        bail!(Error::shape(
            op,
            x.shape(),
            normalized_shape,
            "the input's trailing dimensions must equal normalized_shape"
        ));
    }
    let w = match weight {
        None => None,
        Some(w) => {
            if w.shape() != normalized_shape {
                bail!(Error::shape(
                    op,
                    w.shape(),
                    normalized_shape,
                    "the weight must have the shape normalized_shape"
                ));
            }
            if !w.dtype().is_float() {
                bail!(Error::dtype(op, "a float weight", w.dtype()));
            }
            x.same_device(op, w)?;
            // The result has the input's dtype, as in PyTorch (from the
            // autocast cache for an f32 parameter inside a region).
            Some(crate::autocast::param_as(w, x.dtype())?)
        }
    };
    let eps = eps.unwrap_or_else(|| rms_norm_default_eps(x.dtype()));
    if x.numel() == 0 {
        // Nothing to normalise: the composition gives the empty result (and its graph).
        let dims: Vec<isize> = (1..=k as isize).map(|i| -i).collect();
        let y = x.mul(&x.square()?.mean(&dims, true)?.add_scalar(eps)?.rsqrt()?)?;
        return match &w {
            Some(w) => y.mul(w),
            None => Ok(y),
        };
    }
    let cols = crate::layout::numel(normalized_shape);
    fused_norm(op, x, w.as_ref(), None, cols, eps, NormKind::Rms)
}

/// RMS normalisation over the trailing `normalized_shape` dimensions of
/// `x`: `x / sqrt(mean(x^2) + eps) * weight`, as PyTorch's
/// `torch.nn.functional.rms_norm(x, normalized_shape, weight, eps)`.
///
/// `weight` (optional) has the shape `normalized_shape`; one of another
/// float dtype is converted to `x`'s (the result has `x`'s dtype, as in
/// PyTorch). `eps: None` takes [`rms_norm_default_eps`]. The statistics are
/// computed in f32 (f64 for f64) by one fused kernel forward and one
/// backward on the CPU and on CUDA; the forward allocates the output, plus
/// one f32 (f64) per row when a gradient will be needed.
///
/// ```
/// use tensorscope::nn::rms_norm;
/// use tensorscope::{Device, Tensor};
/// let x = Tensor::from_slice(&[3.0f32, 4.0], &[1, 2], Device::Cpu)?;
/// // mean(x^2) = 12.5: y = x / sqrt(12.5)
/// let y = rms_norm(&x, &[2], None, Some(0.0))?.to_vec::<f32>()?;
/// assert!((y[0] - 3.0 / 12.5f32.sqrt()).abs() < 1e-6);
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub fn rms_norm(
    x: &Tensor,
    normalized_shape: &[usize],
    weight: Option<&Tensor>,
    eps: Option<f64>,
) -> Result<Tensor> {
    rms_norm_op("rms_norm", x, normalized_shape, weight, eps)
}

/// Root-mean-square normalisation over the last `normalized_shape.len()`
/// dimensions with a learnable `weight` (1 at creation), as PyTorch's
/// `torch.nn.RMSNorm(normalized_shape, eps=None, elementwise_affine=True)`:
/// `y = x / sqrt(mean(x^2) + eps) * weight`. See [`rms_norm`].
///
/// ```
/// use tensorscope::nn::{Module, RMSNorm};
/// use tensorscope::{Device, Tensor};
/// let norm = RMSNorm::new(&[4])?;
/// let x = Tensor::from_slice(&[1.0f32, -1.0, 1.0, -1.0], &[1, 4], Device::Cpu)?;
/// let y = norm.forward(&x)?.to_vec::<f32>()?;
/// assert!((y[0] - 1.0).abs() < 1e-6 && (y[1] + 1.0).abs() < 1e-6);
/// assert_eq!(norm.named_parameters()[0].0, "weight");
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub struct RMSNorm {
    normalized_shape: Vec<usize>,
    eps: Option<f64>,
    /// The scale, of shape `normalized_shape` (1 at creation); `None`
    /// without `elementwise_affine`.
    pub weight: Option<Tensor>,
}

impl RMSNorm {
    /// An f32 layer on the CPU with `eps = None` (see
    /// [`rms_norm_default_eps`]) and a weight: PyTorch's defaults.
    pub fn new(normalized_shape: &[usize]) -> Result<RMSNorm> {
        RMSNorm::with_options(normalized_shape, None, true, DType::F32, Device::Cpu)
    }

    /// A layer with the given `eps` (`None`: [`rms_norm_default_eps`] of the
    /// input's dtype), with or without a weight (`elementwise_affine`), of
    /// a float dtype, on a device.
    pub fn with_options(
        normalized_shape: &[usize],
        eps: Option<f64>,
        elementwise_affine: bool,
        dtype: DType,
        device: Device,
    ) -> Result<RMSNorm> {
        const OP: &str = "RMSNorm";
        check_normalized_shape(OP, normalized_shape)?;
        check_eps(OP, eps)?;
        if !dtype.is_float() {
            bail!(Error::dtype(OP, "a float dtype", dtype));
        }
        let weight = if elementwise_affine {
            let w = Tensor::ones(normalized_shape, dtype, device).map_err(|e| e.reported_as(OP))?;
            Some(w.requires_grad_(true)?)
        } else {
            None
        };
        Ok(RMSNorm {
            normalized_shape: normalized_shape.to_vec(),
            eps,
            weight,
        })
    }

    /// A layer over an existing weight (a checkpoint's, say), of a float
    /// dtype, whose shape is `normalized_shape`; used as it is (not copied).
    /// `eps` as in [`with_options`](RMSNorm::with_options). An `Err`
    /// naming `RMSNorm::from_parts` for a scalar or non-float weight or a
    /// bad `eps`.
    ///
    /// ```
    /// use tensorscope::nn::{Module, RMSNorm};
    /// use tensorscope::{DType, Device, Tensor};
    /// let w = Tensor::full(&[2], 2.0, DType::F32, Device::Cpu)?;
    /// let norm = RMSNorm::from_parts(w, Some(0.0))?;
    /// let x = Tensor::from_vec(vec![3.0f32, 4.0], &[1, 2], Device::Cpu)?;
    /// let y = norm.forward(&x)?.to_vec::<f32>()?; // x / rms(x) * 2, rms = 3.5355
    /// assert!((y[0] - 1.6970563).abs() < 1e-6 && (y[1] - 2.2627417).abs() < 1e-6);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn from_parts(weight: Tensor, eps: Option<f64>) -> Result<RMSNorm> {
        const OP: &str = "RMSNorm::from_parts";
        check_normalized_shape(OP, weight.shape())?;
        check_eps(OP, eps)?;
        check_parts(OP, &weight, None)?;
        Ok(RMSNorm {
            normalized_shape: weight.shape().to_vec(),
            eps,
            weight: Some(weight),
        })
    }

    /// The `eps` the layer was made with (`None`: the dtype's default).
    pub fn eps(&self) -> Option<f64> {
        self.eps
    }

    /// The normalised trailing shape.
    pub fn normalized_shape(&self) -> &[usize] {
        &self.normalized_shape
    }
}

impl Module for RMSNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let _op = crate::alloc::history::op_context("rms_norm");
        rms_norm_op(
            "RMSNorm",
            x,
            &self.normalized_shape,
            self.weight.as_ref(),
            self.eps,
        )
    }

    fn named_parameters(&self) -> Vec<(String, &Tensor)> {
        self.weight
            .iter()
            .map(|w| ("weight".to_string(), w))
            .collect()
    }

    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
        self.weight
            .iter_mut()
            .map(|w| ("weight".to_string(), w))
            .collect()
    }
}
