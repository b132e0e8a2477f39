//! `LayerNorm` and `BatchNorm1d`.
//!
//! `LayerNorm` is one fused kernel forward and one backward on the CPU
//! (`backend/cpu/norm.rs`) and on CUDA (`kernels/nn.cu`), through
//! [`fused_norm`]; `BatchNorm1d` is a composition of differentiable ops
//! (mean, sub, mul, rsqrt, ...), so its gradients come from autograd.

use super::module::check_parts;
use super::rms_norm::{check_eps, check_normalized_shape};
use super::Module;
use crate::autograd::no_grad;
use crate::backend::nn::NormKind;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{bail, Error, Result};
use crate::ops::fused_norm::fused_norm;
use crate::tensor::Tensor;

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
///
/// For an input of the layer's dtype the forward is one fused kernel, on
/// the CPU and on CUDA, that writes the output and, when a gradient will be
/// needed, each row's mean and `1 / sqrt(var + eps)` (f32, f64 for f64:
/// what PyTorch's `native_layer_norm` saves); the backward is one fused
/// pass for the input's, weight's and bias's gradients. The statistics are
/// accumulated in f32 (f64 for f64; f16 and bf16 inputs in f32), the
/// variance about the mean in a second sweep over the row while it is in
/// cache. So the forward allocates exactly the output, plus the two
/// statistics when recording a graph; the backward allocates the gradients
/// it returns. An input of another dtype than the layer's goes through the
/// composition of elementwise ops and reductions (and promotes).
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
        (|| -> Result<LayerNorm> {
            check_normalized_shape("LayerNorm", normalized_shape)?;
            if !dtype.is_float() {
                bail!(Error::dtype("LayerNorm", "a float dtype", dtype));
            }
            check_eps("LayerNorm", Some(eps))?;
            Ok(LayerNorm {
                normalized_shape: normalized_shape.to_vec(),
                eps,
                weight: Tensor::ones(normalized_shape, dtype, device)?.requires_grad_(true)?,
                bias: Tensor::zeros(normalized_shape, dtype, device)?.requires_grad_(true)?,
            })
        })()
        .map_err(|e| e.reported_as("LayerNorm"))
    }

    /// A layer over existing tensors (a checkpoint's, say): `weight` and
    /// `bias` of one float dtype, shape (`normalized_shape`) and device,
    /// used as they are (not copied, `requires_grad` left as given). An
    /// `Err` naming `LayerNorm::from_parts` otherwise, or for an `eps` that
    /// is negative or not finite.
    ///
    /// ```
    /// use tensorscope::nn::{LayerNorm, Module};
    /// use tensorscope::{DType, Device, Tensor};
    /// let w = Tensor::full(&[2], 2.0, DType::F32, Device::Cpu)?;
    /// let b = Tensor::ones(&[2], DType::F32, Device::Cpu)?;
    /// let ln = LayerNorm::from_parts(w, b, 0.0)?;
    /// let x = Tensor::from_vec(vec![1.0f32, 3.0], &[1, 2], Device::Cpu)?;
    /// assert_eq!(ln.forward(&x)?.to_vec::<f32>()?, [-1.0, 3.0]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn from_parts(weight: Tensor, bias: Tensor, eps: f64) -> Result<LayerNorm> {
        const OP: &str = "LayerNorm::from_parts";
        check_normalized_shape(OP, weight.shape())?;
        let shape = weight.shape().to_vec();
        let what = "the bias must have the weight's shape";
        check_parts(OP, &weight, Some((&bias, &shape, what)))?;
        check_eps(OP, Some(eps))?;
        Ok(LayerNorm {
            normalized_shape: shape,
            eps,
            weight,
            bias,
        })
    }

    /// The forward over the given weight and bias (the layer's own, or
    /// their autocast casts).
    fn forward_parts(&self, x: &Tensor, weight: &Tensor, bias: &Tensor) -> Result<Tensor> {
        let k = self.normalized_shape.len();
        if x.rank() < k || x.shape()[x.rank() - k..] != self.normalized_shape[..] {
            bail!(Error::shape(
                "LayerNorm",
                x.shape(),
                &self.normalized_shape,
                "the input's trailing dimensions must equal normalized_shape"
            ));
        }
        if !x.dtype().is_float() {
            bail!(Error::dtype("LayerNorm", "a float input", x.dtype()));
        }
        // The fields are public: a replaced weight or bias is checked here.
        for (what, t) in [("weight", weight), ("bias", bias)] {
            if t.shape() != self.normalized_shape.as_slice() {
                bail!(Error::shape(
                    "LayerNorm",
                    &self.normalized_shape,
                    t.shape(),
                    format!("the {what} must have normalized_shape")
                ));
            }
        }
        let cols = crate::layout::numel(&self.normalized_shape);
        if x.numel() > 0 && x.dtype() == weight.dtype() {
            let (w, b) = (Some(weight), Some(bias));
            return fused_norm("LayerNorm", x, w, b, cols, self.eps, NormKind::Layer);
        }
        if x.numel() > 0 && lower_than_params(x, weight, Some(bias)) {
            // PyTorch's mixed-dtype kernel: the result has the input's dtype.
            let w = crate::autocast::param_as(weight, x.dtype())?;
            let b = crate::autocast::param_as(bias, x.dtype())?;
            return fused_norm(
                "LayerNorm",
                x,
                Some(&w),
                Some(&b),
                cols,
                self.eps,
                NormKind::Layer,
            );
        }
        // Any other mix of dtypes (or an empty input): the composition of
        // elementwise ops and reductions, which promotes.
        let dims: Vec<isize> = (1..=k as isize).map(|i| -i).collect();
        (|| {
            let mean = x.mean(&dims, true)?;
            let xc = x.sub(&mean)?;
            let var = xc.square()?.mean(&dims, true)?;
            let inv = var.add_scalar(self.eps)?.rsqrt()?;
            xc.mul(&inv)?.mul(weight)?.add(bias)
        })()
        .map_err(|e| e.reported_as("LayerNorm"))
    }
}

/// `true` for an f16 or bf16 input to a layer whose parameters are f32:
/// the mix PyTorch's norm kernels accept, returning the input's dtype
/// (the parameters are applied in it here: deviation 34).
fn lower_than_params(x: &Tensor, weight: &Tensor, bias: Option<&Tensor>) -> bool {
    matches!(x.dtype(), DType::F16 | DType::BF16)
        && weight.dtype() == DType::F32
        && bias.is_none_or(|b| b.dtype() == DType::F32)
}

impl Module for LayerNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let _op = crate::alloc::history::op_context("layer_norm");
        if let Some(c) = crate::autocast::cast(
            &crate::autocast::LAYER_NORM,
            &[Some(x), Some(&self.weight), Some(&self.bias)],
        )? {
            return self.forward_parts(c.get(0), c.get(1), c.get(2));
        }
        self.forward_parts(x, &self.weight, &self.bias)
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

/// Options of [`BatchNorm1d::with_config`], PyTorch's keyword arguments;
/// `Default` gives PyTorch's defaults (those of [`BatchNorm1d::new`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BatchNormOptions {
    /// Added to the variance before the square root (default `1e-5`).
    pub eps: f64,
    /// Weight of the new batch statistic in the running average, in
    /// `[0, 1]` (default `Some(0.1)`); `None` keeps a cumulative average
    /// (each batch weighs `1 / num_batches_tracked`), as PyTorch's
    /// `momentum=None`.
    pub momentum: Option<f64>,
    /// Learnable per-channel `weight` (1) and `bias` (0); default `true`.
    pub affine: bool,
    /// Keep running statistics (default `true`). Without them the layer has
    /// no buffers and normalises with the batch statistics in evaluation
    /// mode too.
    pub track_running_stats: bool,
}

impl Default for BatchNormOptions {
    fn default() -> Self {
        BatchNormOptions {
            eps: 1e-5,
            momentum: Some(0.1),
            affine: true,
            track_running_stats: true,
        }
    }
}

/// Batch normalisation per channel `C`: [`BatchNorm1d`] (`BatchNorm<1>`) of
/// an `[N, C]` or `[N, C, L]` input, with statistics over `N` (and `L`), as
/// PyTorch's `BatchNorm1d`; [`BatchNorm2d`] (`BatchNorm<2>`) of an
/// `[N, C, H, W]` input, over `N`, `H` and `W`.
///
/// * Training mode (the default): normalises with the batch mean and
///   **biased** variance, and updates the running statistics under `no_grad`:
///   `running = (1 - momentum) * running + momentum * batch_stat`, with the
///   **unbiased** batch variance for `running_var` (momentum 0.1, as PyTorch;
///   see [`BatchNormOptions`] for `momentum: None`, a cumulative average).
///   `num_batches_tracked` counts the updates. A batch with one value per
///   channel (`N * L == 1`) is an error (the variance is undefined).
/// * Evaluation mode: normalises with the running statistics (with the
///   batch statistics when `track_running_stats` is off).
///
/// `weight` (1) and `bias` (0) are trainable (`None` without `affine`);
/// `running_mean` (0), `running_var` (1) and `num_batches_tracked` (i64 0)
/// are buffers (`None` without `track_running_stats`): listed by
/// `named_parameters_mut` after the parameters, not by `named_parameters`
/// (see the [module docs](super)). The input must have the layer's dtype.
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
/// let rm = bn.running_mean.as_ref().unwrap();
/// assert!((rm.to_vec::<f32>()?[0] - 0.2).abs() < 1e-6);
/// assert!((bn.running_var.as_ref().unwrap().to_vec::<f32>()?[0] - 1.1).abs() < 1e-6);
/// # Ok::<(), tensorscope::Error>(())
/// ```
///
/// A sequence input `[N, C, L]`, without affine parameters, with a
/// cumulative running average:
///
/// ```
/// use tensorscope::nn::{BatchNorm1d, BatchNormOptions, Module};
/// use tensorscope::{DType, Device, Tensor};
/// let opts = BatchNormOptions { affine: false, momentum: None, ..Default::default() };
/// let bn = BatchNorm1d::with_config(2, opts, DType::F32, Device::Cpu)?;
/// assert!(bn.weight.is_none() && bn.named_parameters().is_empty());
/// let x = Tensor::arange(0.0, 12.0, 1.0, DType::F32, Device::Cpu)?.view(&[2, 2, 3])?;
/// assert_eq!(bn.forward(&x)?.shape(), &[2, 2, 3]);
/// // Channel 0 holds 0, 1, 2, 6, 7, 8: mean 4 (one batch: the average is that batch's).
/// assert_eq!(bn.running_mean.as_ref().unwrap().to_vec::<f32>()?[0], 4.0);
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub struct BatchNorm<const D: usize> {
    num_features: usize,
    opts: BatchNormOptions,
    dtype: DType,
    training: bool,
    /// The scale `[C]` (1 at creation); `None` without `affine`.
    pub weight: Option<Tensor>,
    /// The shift `[C]` (0 at creation); `None` without `affine`.
    pub bias: Option<Tensor>,
    /// Buffer: running mean `[C]`; `None` without `track_running_stats`.
    pub running_mean: Option<Tensor>,
    /// Buffer: running (unbiased) variance `[C]`; `None` without
    /// `track_running_stats`.
    pub running_var: Option<Tensor>,
    /// Buffer: number of training batches seen (i64 scalar); `None` without
    /// `track_running_stats`.
    pub num_batches_tracked: Option<Tensor>,
}

/// `BatchNorm1d`: `[N, C]` or `[N, C, L]` inputs.
pub type BatchNorm1d = BatchNorm<1>;

/// Batch normalisation of an `[N, C, H, W]` input per channel, with
/// statistics over `N`, `H` and `W`: PyTorch's `BatchNorm2d`, with
/// everything else as [`BatchNorm1d`] (the same options, buffers, modes
/// and errors).
///
/// ```
/// use tensorscope::nn::{BatchNorm2d, Module};
/// use tensorscope::{DType, Device, Tensor};
/// let bn = BatchNorm2d::new(3)?;
/// let x = Tensor::randn(&[4, 3, 5, 5], DType::F32, Device::Cpu)?;
/// let y = bn.forward(&x)?;
/// // Each channel of the output has mean 0 over the batch and the plane.
/// let m = y.mean(&[0, 2, 3], false)?.to_vec::<f32>()?;
/// assert!(m.iter().all(|v| v.abs() < 1e-5));
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub type BatchNorm2d = BatchNorm<2>;

/// A finite, non-negative `eps` and a momentum in `[0, 1]`.
fn check_batch_norm_options(op: &'static str, opts: &BatchNormOptions) -> Result<()> {
    let eps = opts.eps;
    let momentum_ok = opts.momentum.is_none_or(|m| (0.0..=1.0).contains(&m));
    if !(eps.is_finite() && eps >= 0.0 && momentum_ok) {
        bail!(Error::arg(
            op,
            format!(
                "eps must be finite and non-negative and momentum in [0, 1], got eps {eps}, momentum {:?}",
                opts.momentum
            )
        ));
    }
    Ok(())
}

impl<const D: usize> BatchNorm<D> {
    const NAME: &'static str = if D == 1 { "BatchNorm1d" } else { "BatchNorm2d" };
    /// `BatchNorm<D>` exists for D = 1 and 2 only (a compile-time error
    /// otherwise, when the layer is built).
    const VALID: () = assert!(D == 1 || D == 2, "BatchNorm<D>: D must be 1 or 2");

    /// An f32 layer on the CPU with `eps = 1e-5`, `momentum = 0.1`.
    pub fn new(num_features: usize) -> Result<BatchNorm<D>> {
        BatchNorm::with_config(
            num_features,
            BatchNormOptions::default(),
            DType::F32,
            Device::Cpu,
        )
    }

    /// A layer with the given `eps`, `momentum` (in `[0, 1]`), float dtype and device.
    pub fn with_options(
        num_features: usize,
        eps: f64,
        momentum: f64,
        dtype: DType,
        device: Device,
    ) -> Result<BatchNorm<D>> {
        let opts = BatchNormOptions {
            eps,
            momentum: Some(momentum),
            ..Default::default()
        };
        BatchNorm::with_config(num_features, opts, dtype, device)
    }

    /// A layer with all of PyTorch's options ([`BatchNormOptions`]).
    pub fn with_config(
        num_features: usize,
        opts: BatchNormOptions,
        dtype: DType,
        device: Device,
    ) -> Result<BatchNorm<D>> {
        let name = Self::NAME;
        #[allow(clippy::let_unit_value)]
        let () = Self::VALID;
        (|| -> Result<BatchNorm<D>> {
            if !dtype.is_float() {
                bail!(Error::dtype(name, "a float dtype", dtype));
            }
            check_batch_norm_options(name, &opts)?;
            let c = [num_features];
            let (weight, bias) = if opts.affine {
                (
                    Some(Tensor::ones(&c, dtype, device)?.requires_grad_(true)?),
                    Some(Tensor::zeros(&c, dtype, device)?.requires_grad_(true)?),
                )
            } else {
                (None, None)
            };
            let (running_mean, running_var, num_batches_tracked) = if opts.track_running_stats {
                (
                    Some(Tensor::zeros(&c, dtype, device)?),
                    Some(Tensor::ones(&c, dtype, device)?),
                    Some(Tensor::zeros(&[], DType::I64, device)?),
                )
            } else {
                (None, None, None)
            };
            Ok(BatchNorm {
                num_features,
                opts,
                dtype,
                training: true,
                weight,
                bias,
                running_mean,
                running_var,
                num_batches_tracked,
            })
        })()
        .map_err(|e| e.reported_as(name))
    }

    /// A layer over the tensors given, `[C]` each, of one float dtype and
    /// device: `weight` and `bias` (both, with `opts.affine`, or neither),
    /// `running_mean` and `running_var` (both, with
    /// `opts.track_running_stats`, or neither), used as they are;
    /// `num_batches_tracked` starts at 0. In training mode, as built. An
    /// `Err` naming `BatchNorm2d::from_parts` (or `1d`) for parts that do
    /// not match the options or one another.
    pub fn from_parts(
        weight: Option<Tensor>,
        bias: Option<Tensor>,
        running_mean: Option<Tensor>,
        running_var: Option<Tensor>,
        opts: BatchNormOptions,
    ) -> Result<BatchNorm<D>> {
        #[allow(clippy::let_unit_value)]
        let () = Self::VALID;
        let op = if D == 1 {
            "BatchNorm1d::from_parts"
        } else {
            "BatchNorm2d::from_parts"
        };
        let affine = (&weight, &bias);
        let stats = (&running_mean, &running_var);
        let pairs_ok = matches!(affine, (Some(_), Some(_))) == opts.affine
            && matches!(affine, (Some(_), Some(_)) | (None, None))
            && matches!(stats, (Some(_), Some(_))) == opts.track_running_stats
            && matches!(stats, (Some(_), Some(_)) | (None, None));
        if !pairs_ok {
            bail!(Error::arg(
                op,
                format!(
                    "weight and bias must both be given exactly when affine ({}), running_mean and running_var exactly when track_running_stats ({})",
                    opts.affine, opts.track_running_stats
                )
            ));
        }
        let parts: Vec<&Tensor> = [&weight, &bias, &running_mean, &running_var]
            .into_iter()
            .flatten()
            .collect();
        let Some(&first) = parts.first() else {
            bail!(Error::arg(
                op,
                "without affine and running statistics the layer has no parts: use with_config"
            ));
        };
        if first.rank() != 1 {
            bail!(Error::arg(
                op,
                format!("expected parts [C], got shape {:?}", first.shape())
            ));
        }
        let c = first.shape()[0];
        for p in &parts[1..] {
            check_parts(op, first, Some((p, &[c][..], "every part must be [C]")))?;
        }
        check_parts(op, first, None)?;
        check_batch_norm_options(op, &opts)?;
        let num_batches_tracked = opts
            .track_running_stats
            .then(|| Tensor::zeros(&[], DType::I64, first.device()))
            .transpose()?;
        Ok(BatchNorm {
            num_features: c,
            opts,
            dtype: first.dtype(),
            training: true,
            weight,
            bias,
            running_mean,
            running_var,
            num_batches_tracked,
        })
    }

    /// The options the layer was built with.
    pub fn options(&self) -> BatchNormOptions {
        self.opts
    }

    fn update_running(&self, mean: &Tensor, var_biased: &Tensor, n: usize) -> Result<()> {
        let (Some(rm), Some(rv), Some(nb)) = (
            &self.running_mean,
            &self.running_var,
            &self.num_batches_tracked,
        ) else {
            return Ok(());
        };
        no_grad(|| {
            // Aliases share the buffers' storage: writing through them updates the buffers.
            let mut nb = nb.alias();
            nb.add_scalar_(1.0)?;
            let m = match self.opts.momentum {
                Some(m) => m,
                None => 1.0 / nb.item::<i64>()? as f64,
            };
            let mean = mean.detach().reshape(&[-1])?;
            let var = var_biased
                .detach()
                .reshape(&[-1])?
                .mul_scalar(n as f64 / (n as f64 - 1.0))?;
            let mut rm = rm.alias();
            rm.mul_scalar_(1.0 - m)?.add_(&mean.mul_scalar(m)?)?;
            let mut rv = rv.alias();
            rv.mul_scalar_(1.0 - m)?.add_(&var.mul_scalar(m)?)?;
            Ok(())
        })
    }
}

impl<const D: usize> Module for BatchNorm<D> {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let op = Self::NAME;
        let c = self.num_features;
        let rank_ok = if D == 1 {
            x.rank() == 2 || x.rank() == 3
        } else {
            x.rank() == 4
        };
        if !rank_ok || x.shape()[1] != c {
            bail!(Error::shape(
                op,
                x.shape(),
                &[c],
                if D == 1 {
                    "the input must be [N, C] or [N, C, L] with C = num_features"
                } else {
                    "the input must be [N, C, H, W] with C = num_features"
                }
            ));
        }
        // The parts' dtype (they may have been converted: Module::to_dtype).
        let dt = self
            .weight
            .as_ref()
            .or(self.running_mean.as_ref())
            .map_or(self.dtype, |t| t.dtype());
        // An f16 or bf16 input to f32 parts is PyTorch's mixed-dtype batch
        // norm: the result has the input's dtype, the running statistics
        // stay f32.
        let mixed = matches!(x.dtype(), DType::F16 | DType::BF16) && dt == DType::F32;
        if x.dtype() != dt && !mixed {
            bail!(Error::dtype(
                op,
                format!("{dt} (the layer's dtype) for the input"),
                x.dtype()
            ));
        }
        let in_x = |t: &Tensor| crate::autocast::param_as(t, x.dtype());
        // Statistics over every dimension but the channels'; per-channel
        // tensors [C] seen as [C, 1, ...] against [N, C, ...].
        let dims: Vec<isize> = (0..x.rank() as isize).filter(|&d| d != 1).collect();
        let dims = &dims[..];
        let mut chan_shape = vec![c as isize];
        chan_shape.resize(x.rank() - 1, 1);
        let chan = |t: &Tensor| -> Result<Tensor> {
            if x.rank() > 2 {
                t.view(&chan_shape)
            } else {
                Ok(t.alias())
            }
        };
        let n = x.numel() / c.max(1);
        let running = match (&self.running_mean, &self.running_var) {
            (Some(rm), Some(rv)) if !self.training => Some((rm, rv)),
            _ => None,
        };
        let (xc, inv) = match running {
            Some((rm, rv)) => {
                let inv = in_x(&rv.add_scalar(self.opts.eps)?.rsqrt()?)?;
                (x.sub(&chan(&in_x(rm)?)?)?, chan(&inv)?)
            }
            None => {
                if n == 1 {
                    bail!(Error::arg(
                        op,
                        format!("expected more than 1 value per channel when training, got input of shape {:?}", x.shape())
                    ));
                }
                if n == 0 {
                    // An empty batch: an empty result, and no statistics to record.
                    return x.deep_clone();
                }
                let mean = x.mean(dims, true)?;
                let xc = x.sub(&mean)?;
                let var = xc.square()?.mean(dims, true)?;
                if self.training {
                    self.update_running(&mean, &var, n)?;
                }
                (xc, var.add_scalar(self.opts.eps)?.rsqrt()?)
            }
        };
        let w = self.weight.as_ref().map(in_x).transpose()?;
        let b = self.bias.as_ref().map(in_x).transpose()?;
        scale_shift(xc.mul(&inv)?, w.as_ref(), b.as_ref(), chan)
    }

    fn named_parameters(&self) -> Vec<(String, &Tensor)> {
        optional_params(&self.weight, &self.bias)
    }

    fn named_buffers(&self) -> Vec<(String, &Tensor)> {
        [
            ("running_mean", &self.running_mean),
            ("running_var", &self.running_var),
            ("num_batches_tracked", &self.num_batches_tracked),
        ]
        .into_iter()
        .filter_map(|(n, t)| t.as_ref().map(|t| (n.to_string(), t)))
        .collect()
    }

    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
        [
            ("weight", &mut self.weight),
            ("bias", &mut self.bias),
            ("running_mean", &mut self.running_mean),
            ("running_var", &mut self.running_var),
            ("num_batches_tracked", &mut self.num_batches_tracked),
        ]
        .into_iter()
        .filter_map(|(n, t)| t.as_mut().map(|t| (n.to_string(), t)))
        .collect()
    }

    fn train(&mut self, on: bool) {
        self.training = on;
    }

    fn is_training(&self) -> bool {
        self.training
    }
}

/// `y * weight + bias` per channel, each applied on its own when present (a
/// user may set either field to `None`); `chan` shapes a `[C]` tensor to
/// broadcast against `y`.
fn scale_shift(
    y: Tensor,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    chan: impl Fn(&Tensor) -> Result<Tensor>,
) -> Result<Tensor> {
    let y = match weight {
        Some(w) => y.mul(&chan(w)?)?,
        None => y,
    };
    match bias {
        Some(b) => y.add(&chan(b)?),
        None => Ok(y),
    }
}

/// The named `weight` and `bias` of a layer where both are optional.
fn optional_params<'a>(w: &'a Option<Tensor>, b: &'a Option<Tensor>) -> Vec<(String, &'a Tensor)> {
    [("weight", w), ("bias", b)]
        .into_iter()
        .filter_map(|(n, t)| t.as_ref().map(|t| (n.to_string(), t)))
        .collect()
}

/// Group normalisation (`nn.GroupNorm`): the `C` channels of an `[N, C,
/// ...]` input split into `num_groups` groups, each sample's group
/// normalised over its channels and positions with its mean and biased
/// variance, then scaled and shifted per channel by `weight` (1) and
/// `bias` (0), trainable when `affine`. No running statistics: training
/// and evaluation compute the same.
///
/// The normalisation is the fused LayerNorm kernel over rows of `C /
/// num_groups * positions` elements (one pass forward, one backward, on
/// the CPU and on CUDA), then the per-channel affine.
///
/// ```
/// use tensorscope::nn::{GroupNorm, Module};
/// use tensorscope::{DType, Device, Tensor};
/// let gn = GroupNorm::new(2, 4)?;
/// let x = Tensor::randn(&[3, 4, 5, 5], DType::F32, Device::Cpu)?;
/// let y = gn.forward(&x)?;
/// // Each sample's group of 2 channels has mean 0.
/// let m = y.reshape(&[3, 2, 50])?.mean(&[2], false)?.to_vec::<f32>()?;
/// assert!(m.iter().all(|v| v.abs() < 1e-5));
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub struct GroupNorm {
    num_groups: usize,
    num_channels: usize,
    eps: f64,
    /// The scale `[C]` (1 at creation); `None` without `affine`.
    pub weight: Option<Tensor>,
    /// The shift `[C]` (0 at creation); `None` without `affine`.
    pub bias: Option<Tensor>,
}

impl GroupNorm {
    /// An f32 layer on the CPU with `eps = 1e-5` and affine parameters.
    pub fn new(num_groups: usize, num_channels: usize) -> Result<GroupNorm> {
        GroupNorm::with_options(
            num_groups,
            num_channels,
            1e-5,
            true,
            DType::F32,
            Device::Cpu,
        )
    }

    /// A layer with PyTorch's options: `eps` (finite, non-negative),
    /// `affine`, a float dtype and a device. `num_groups` must divide
    /// `num_channels`.
    pub fn with_options(
        num_groups: usize,
        num_channels: usize,
        eps: f64,
        affine: bool,
        dtype: DType,
        device: Device,
    ) -> Result<GroupNorm> {
        const OP: &str = "GroupNorm";
        (|| -> Result<GroupNorm> {
            if !dtype.is_float() {
                bail!(Error::dtype(OP, "a float dtype", dtype));
            }
            if num_groups == 0 || !num_channels.is_multiple_of(num_groups) {
                bail!(Error::arg(
                    OP,
                    format!("num_channels ({num_channels}) must be divisible by num_groups ({num_groups})")
                ));
            }
            if !(eps.is_finite() && eps >= 0.0) {
                bail!(Error::arg(OP, format!("eps must be finite and non-negative, got {eps}")));
            }
            let c = [num_channels];
            let (weight, bias) = if affine {
                (
                    Some(Tensor::ones(&c, dtype, device)?.requires_grad_(true)?),
                    Some(Tensor::zeros(&c, dtype, device)?.requires_grad_(true)?),
                )
            } else {
                (None, None)
            };
            Ok(GroupNorm {
                num_groups,
                num_channels,
                eps,
                weight,
                bias,
            })
        })()
        .map_err(|e| e.reported_as(OP))
    }

    /// A layer of `num_groups` groups over the tensors given: `weight` and
    /// `bias` `[C]` of one float dtype and device, used as they are. An
    /// `Err` naming `GroupNorm::from_parts` for parts of other shapes,
    /// dtypes or devices, groups that do not divide `C`, or a bad `eps`.
    pub fn from_parts(
        num_groups: usize,
        weight: Tensor,
        bias: Tensor,
        eps: f64,
    ) -> Result<GroupNorm> {
        const OP: &str = "GroupNorm::from_parts";
        if weight.rank() != 1 {
            bail!(Error::arg(
                OP,
                format!("expected a weight [C], got shape {:?}", weight.shape())
            ));
        }
        let c = weight.shape()[0];
        check_parts(
            OP,
            &weight,
            Some((&bias, &[c][..], "the bias must be [C], as the weight")),
        )?;
        if num_groups == 0 || !c.is_multiple_of(num_groups) {
            bail!(Error::arg(
                OP,
                format!("num_channels ({c}) must be divisible by num_groups ({num_groups})")
            ));
        }
        check_eps(OP, Some(eps))?;
        Ok(GroupNorm {
            num_groups,
            num_channels: c,
            eps,
            weight: Some(weight),
            bias: Some(bias),
        })
    }

    /// The number of groups.
    pub fn num_groups(&self) -> usize {
        self.num_groups
    }

    /// The forward over the given weight and bias (the layer's own, or
    /// their autocast casts).
    fn forward_parts(
        &self,
        x: &Tensor,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
    ) -> Result<Tensor> {
        const OP: &str = "GroupNorm";
        let c = self.num_channels;
        if x.rank() < 2 || x.shape()[1] != c {
            bail!(Error::shape(
                OP,
                x.shape(),
                &[c],
                "the input must be [N, C, ...] with C = num_channels"
            ));
        }
        if let Some(w) = weight
            && x.dtype() != w.dtype()
            && !lower_than_params(x, w, bias)
        {
            bail!(Error::dtype(
                OP,
                format!("{} (the layer's dtype) for the input", w.dtype()),
                x.dtype()
            ));
        }
        if !x.dtype().is_float() {
            bail!(Error::dtype(OP, "a float dtype", x.dtype()));
        }
        if x.numel() == 0 {
            return x.deep_clone();
        }
        let (n, g) = (x.shape()[0], self.num_groups);
        let cols = x.numel() / (n * g);
        let rows = x.reshape(&[(n * g) as isize, cols as isize])?;
        let y = fused_norm(OP, &rows, None, None, cols, self.eps, NormKind::Layer)?
            .reshape(&x.shape().iter().map(|&d| d as isize).collect::<Vec<_>>())?;
        let mut cs = vec![c as isize];
        cs.resize(x.rank() - 1, 1);
        let w = weight
            .map(|w| crate::autocast::param_as(w, x.dtype()))
            .transpose()?;
        let b = bias
            .map(|b| crate::autocast::param_as(b, x.dtype()))
            .transpose()?;
        scale_shift(y, w.as_ref(), b.as_ref(), |t| t.view(&cs))
    }
}

impl Module for GroupNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let _op = crate::alloc::history::op_context("group_norm");
        let (w, b) = (self.weight.as_ref(), self.bias.as_ref());
        if let Some(c) = crate::autocast::cast(&crate::autocast::GROUP_NORM, &[Some(x), w, b])? {
            return self.forward_parts(c.get(0), c.opt(1), c.opt(2));
        }
        self.forward_parts(x, w, b)
    }

    fn named_parameters(&self) -> Vec<(String, &Tensor)> {
        optional_params(&self.weight, &self.bias)
    }

    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
        [("weight", &mut self.weight), ("bias", &mut self.bias)]
            .into_iter()
            .filter_map(|(n, t)| t.as_mut().map(|t| (n.to_string(), t)))
            .collect()
    }
}
