//! `Linear`: `y = x W^T + b`.

use super::module::check_parts;
use super::prune::PruneMasks;
use super::{init, Module};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{bail, Error, Result};
use crate::tensor::Tensor;

/// A fully connected layer: `y = x.matmul(weight.t()) + bias`, with
/// `weight: [out, in]` and `bias: [out]`.
///
/// Initialised as PyTorch does: both weight and bias uniform in
/// `[-1/sqrt(in), 1/sqrt(in))` (`kaiming_uniform_(a = sqrt(5))`).
///
/// The forward is [`Tensor::linear`]: on the CPU the bias is broadcast into
/// the output and the product accumulated onto it in one gemm call, so a
/// forward allocates one output and makes no separate bias pass; in
/// training it records one node (PyTorch's `AddmmBackward`).
///
/// ```
/// use tensorscope::nn::{Linear, Module};
/// use tensorscope::{DType, Device, Tensor};
/// let lin = Linear::new(3, 2)?;
/// let y = lin.forward(&Tensor::ones(&[5, 3], DType::F32, Device::Cpu)?)?;
/// assert_eq!(y.shape(), &[5, 2]);
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub struct Linear {
    /// `[out_features, in_features]` (`weight_orig` while it is pruned:
    /// [`prune::masked`](super::prune::masked) gives the masked value).
    pub weight: Tensor,
    /// `[out_features]`, if the layer has a bias.
    pub bias: Option<Tensor>,
    /// The masks of pruned parameters ([`nn::prune`](super::prune)).
    pruning: PruneMasks,
}

impl Linear {
    /// An f32 layer on the CPU, with a bias.
    pub fn new(in_features: usize, out_features: usize) -> Result<Linear> {
        Linear::with_options(in_features, out_features, true, DType::F32, Device::Cpu)
    }

    /// A layer of the given dtype (a float) on `device`, with or without bias.
    pub fn with_options(
        in_features: usize,
        out_features: usize,
        bias: bool,
        dtype: DType,
        device: Device,
    ) -> Result<Linear> {
        (|| -> Result<Linear> {
            if !dtype.is_float() {
                bail!(Error::dtype("Linear", "a float dtype", dtype));
            }
            let mut w = Tensor::empty(&[out_features, in_features], dtype, device)?;
            init::kaiming_uniform_(&mut w, 5f64.sqrt())?;
            let bias = if bias {
                let bound = init::kaiming_bound(5f64.sqrt(), in_features);
                let mut b = Tensor::empty(&[out_features], dtype, device)?;
                init::uniform_(&mut b, -bound, bound)?;
                Some(b.requires_grad_(true)?)
            } else {
                None
            };
            Ok(Linear {
                weight: w.requires_grad_(true)?,
                bias,
                pruning: PruneMasks::default(),
            })
        })()
        .map_err(|e| e.reported_as("Linear"))
    }

    /// A layer over the tensors given (candle's `Linear::new`): `weight`
    /// `[out, in]` of a float dtype, `bias` `[out]` of the same dtype and
    /// device, used as they are (make them require grad to train them).
    ///
    /// ```
    /// use tensorscope::nn::{Linear, Module};
    /// use tensorscope::{DType, Device, Tensor};
    /// let w = Tensor::ones(&[2, 3], DType::F32, Device::Cpu)?;
    /// let lin = Linear::from_parts(w, None)?;
    /// let y = lin.forward(&Tensor::ones(&[1, 3], DType::F32, Device::Cpu)?)?;
    /// assert_eq!(y.to_vec::<f32>()?, [3.0, 3.0]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn from_parts(weight: Tensor, bias: Option<Tensor>) -> Result<Linear> {
        const OP: &str = "Linear::from_parts";
        if weight.rank() != 2 {
            bail!(Error::shape(
                OP,
                weight.shape(),
                &[],
                "the weight must be [out_features, in_features]"
            ));
        }
        let out = [weight.shape()[0]];
        let part = bias
            .as_ref()
            .map(|b| (b, &out[..], "the bias must be [out_features]"));
        check_parts(OP, &weight, part)?;
        Ok(Linear {
            weight,
            bias,
            pruning: PruneMasks::default(),
        })
    }

    /// `in_features`.
    pub fn in_features(&self) -> usize {
        self.weight.shape()[1]
    }

    /// `out_features`.
    pub fn out_features(&self) -> usize {
        self.weight.shape()[0]
    }
}

impl Module for Linear {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let _op = crate::alloc::history::op_context_with("linear", || vec![x.shape().to_vec()]);
        if x.rank() == 0 || x.shape()[x.rank() - 1] != self.in_features() {
            bail!(Error::shape(
                "Linear",
                x.shape(),
                self.weight.shape(),
                format!(
                    "the input's last dimension must be in_features = {}",
                    self.in_features()
                )
            ));
        }
        self.pruning
            .with_weight_and_bias(&self.weight, self.bias.as_ref(), |w, b| x.linear(w, b))
    }

    super::prune::prunable_weight_and_bias!();
}
