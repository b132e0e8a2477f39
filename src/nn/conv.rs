//! `Conv1d` and `Conv2d` (over [`Tensor::conv1d`] / [`Tensor::conv2d`]),
//! the pooling layers, and `Flatten`.

use super::module::check_parts;
use super::prune::{self, PruneMasks};
use super::{init, Module};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{bail, Error, Result};
use crate::ops::conv::{ConvOptions, ConvTransposeOptions};
use crate::ops::pool::PoolOptions;
use crate::tensor::Tensor;

/// A convolution layer over `D` spatial dimensions: `weight`
/// `[out, in / groups, k...]` and `bias` `[out]`, initialised as
/// PyTorch's (`kaiming_uniform_(a = sqrt(5))`: uniform in
/// `[-1/sqrt(fan_in), 1/sqrt(fan_in))`, `fan_in = in / groups * prod(k)`).
/// [`Conv1d`] and [`Conv2d`] are its two forms.
///
/// ```
/// use tensorscope::nn::{Conv2d, Module};
/// use tensorscope::{ConvOptions, DType, Device, Padding, Tensor};
/// let conv = Conv2d::new(3, 8, [3, 3], ConvOptions { padding: Padding::Same, ..ConvOptions::default() })?;
/// let y = conv.forward(&Tensor::ones(&[2, 3, 16, 16], DType::F32, Device::Cpu)?)?;
/// assert_eq!(y.shape(), &[2, 8, 16, 16]);
/// assert_eq!(conv.weight.shape(), &[8, 3, 3, 3]);
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub struct Conv<const D: usize> {
    /// `[out_channels, in_channels / groups, kernel...]`.
    pub weight: Tensor,
    /// `[out_channels]`, if the layer has a bias.
    pub bias: Option<Tensor>,
    /// Stride, padding, dilation and groups.
    pub options: ConvOptions<D>,
    /// The masks of pruned parameters ([`nn::prune`](super::prune)).
    pruning: PruneMasks,
}

/// A 1-d convolution layer (`nn.Conv1d`): `[N, C, L]` to `[N, O, OL]`.
pub type Conv1d = Conv<1>;
/// A 2-d convolution layer (`nn.Conv2d`): `[N, C, H, W]` to `[N, O, OH, OW]`.
pub type Conv2d = Conv<2>;

impl<const D: usize> Conv<D> {
    /// An f32 layer on the CPU, with a bias.
    pub fn new(
        in_channels: usize,
        out_channels: usize,
        kernel: [usize; D],
        options: ConvOptions<D>,
    ) -> Result<Conv<D>> {
        Conv::with_options(
            in_channels,
            out_channels,
            kernel,
            options,
            true,
            DType::F32,
            Device::Cpu,
        )
    }

    /// A layer of a float `dtype` on `device`, with or without a bias. An
    /// `Err` naming the layer if the groups do not divide both channel
    /// counts.
    pub fn with_options(
        in_channels: usize,
        out_channels: usize,
        kernel: [usize; D],
        options: ConvOptions<D>,
        bias: bool,
        dtype: DType,
        device: Device,
    ) -> Result<Conv<D>> {
        let name = Self::NAME;
        (|| -> Result<Conv<D>> {
            if !dtype.is_float() {
                bail!(Error::dtype(name, "a float dtype", dtype));
            }
            let g = options.groups;
            if g == 0 || !in_channels.is_multiple_of(g) || !out_channels.is_multiple_of(g) {
                bail!(Error::arg(
                    name,
                    format!(
                        "groups ({g}) must divide in_channels ({in_channels}) and out_channels ({out_channels})"
                    )
                ));
            }
            let mut shape = vec![out_channels, in_channels / g];
            shape.extend(kernel);
            let mut w = Tensor::empty(&shape, dtype, device)?;
            init::kaiming_uniform_(&mut w, 5f64.sqrt())?;
            let bias = if bias {
                let fan_in = in_channels / g * crate::layout::numel(&kernel);
                let bound = init::kaiming_bound(5f64.sqrt(), fan_in);
                let mut b = Tensor::empty(&[out_channels], dtype, device)?;
                init::uniform_(&mut b, -bound, bound)?;
                Some(b.requires_grad_(true)?)
            } else {
                None
            };
            Ok(Conv {
                weight: w.requires_grad_(true)?,
                bias,
                options,
                pruning: PruneMasks::default(),
            })
        })()
        .map_err(|e| e.reported_as(name))
    }

    /// A layer over the tensors given: `weight [out, in / groups, k...]`
    /// of a float dtype and `bias [out]` of its dtype and device, used as
    /// they are (not copied, `requires_grad` left as given). An `Err`
    /// naming `Conv2d::from_parts` (or `Conv1d::`) for a weight of another
    /// rank, groups that do not divide its out channels, or a bias of
    /// another shape, dtype or device.
    ///
    /// ```
    /// use tensorscope::nn::{Conv2d, Module};
    /// use tensorscope::{ConvOptions, DType, Device, Tensor};
    /// let w = Tensor::ones(&[4, 3, 1, 1], DType::F32, Device::Cpu)?;
    /// let conv = Conv2d::from_parts(w, None, ConvOptions::default())?;
    /// let y = conv.forward(&Tensor::ones(&[1, 3, 2, 2], DType::F32, Device::Cpu)?)?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![3.0; 16]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn from_parts(
        weight: Tensor,
        bias: Option<Tensor>,
        options: ConvOptions<D>,
    ) -> Result<Conv<D>> {
        let op = if D == 1 {
            "Conv1d::from_parts"
        } else {
            "Conv2d::from_parts"
        };
        let layout = if D == 1 {
            "[out, in / groups, k]"
        } else {
            "[out, in / groups, kh, kw]"
        };
        // The groups split dim 0 (out), which is also the bias's length.
        let (rank, g) = (D + 2, options.groups);
        check_conv_parts(
            op,
            &weight,
            bias.as_ref(),
            (rank, layout),
            (g, "out"),
            |s| s[0],
        )?;
        Ok(Conv {
            weight,
            bias,
            options,
            pruning: PruneMasks::default(),
        })
    }

    const NAME: &'static str = if D == 1 { "Conv1d" } else { "Conv2d" };
}

impl Module for Conv<1> {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.pruning
            .with_weight_and_bias(&self.weight, self.bias.as_ref(), |w, b| {
                x.conv1d(w, b, &self.options)
            })
    }
    prune::prunable_weight_and_bias!();
}

impl Module for Conv<2> {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.pruning
            .with_weight_and_bias(&self.weight, self.bias.as_ref(), |w, b| {
                x.conv2d(w, b, &self.options)
            })
    }
    prune::prunable_weight_and_bias!();
}

/// A transposed 2-d convolution layer (`nn.ConvTranspose2d`): `weight`
/// `[in, out / groups, kh, kw]`, `bias` `[out]`, initialised as PyTorch's
/// (`fan_in = out / groups * kh * kw`).
///
/// ```
/// use tensorscope::nn::{ConvTranspose2d, Module};
/// use tensorscope::{ConvTransposeOptions, DType, Device, Tensor};
/// let up = ConvTranspose2d::new(8, 4, [2, 2], ConvTransposeOptions { stride: [2, 2], ..Default::default() })?;
/// let y = up.forward(&Tensor::ones(&[1, 8, 5, 5], DType::F32, Device::Cpu)?)?;
/// assert_eq!(y.shape(), &[1, 4, 10, 10]);
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub struct ConvTranspose2d {
    /// `[in_channels, out_channels / groups, kh, kw]`.
    pub weight: Tensor,
    /// `[out_channels]`, if the layer has a bias.
    pub bias: Option<Tensor>,
    /// Stride, padding, output padding, groups and dilation.
    pub options: ConvTransposeOptions,
    /// The masks of pruned parameters ([`nn::prune`](super::prune)).
    pruning: PruneMasks,
}

impl ConvTranspose2d {
    /// An f32 layer on the CPU, with a bias. An `Err` naming the layer if
    /// the groups do not divide both channel counts.
    pub fn new(
        in_channels: usize,
        out_channels: usize,
        kernel: [usize; 2],
        options: ConvTransposeOptions,
    ) -> Result<ConvTranspose2d> {
        const NAME: &str = "ConvTranspose2d";
        (|| -> Result<ConvTranspose2d> {
            let g = options.groups;
            if g == 0 || !in_channels.is_multiple_of(g) || !out_channels.is_multiple_of(g) {
                bail!(Error::arg(
                    NAME,
                    format!(
                        "groups ({g}) must divide in_channels ({in_channels}) and out_channels ({out_channels})"
                    )
                ));
            }
            let shape = [in_channels, out_channels / g, kernel[0], kernel[1]];
            let mut w = Tensor::empty(&shape, DType::F32, Device::Cpu)?;
            init::kaiming_uniform_(&mut w, 5f64.sqrt())?;
            let fan_in = out_channels / g * kernel[0] * kernel[1];
            let bound = init::kaiming_bound(5f64.sqrt(), fan_in);
            let mut b = Tensor::empty(&[out_channels], DType::F32, Device::Cpu)?;
            init::uniform_(&mut b, -bound, bound)?;
            Ok(ConvTranspose2d {
                weight: w.requires_grad_(true)?,
                bias: Some(b.requires_grad_(true)?),
                options,
                pruning: PruneMasks::default(),
            })
        })()
        .map_err(|e| e.reported_as(NAME))
    }
}

impl ConvTranspose2d {
    /// A layer over the tensors given: `weight [in, out / groups, kh, kw]`
    /// of a float dtype and `bias [out]` of its dtype and device, used as
    /// they are. An `Err` naming `ConvTranspose2d::from_parts` for a weight
    /// of another rank, groups that do not divide its in channels, or a
    /// bias of another shape, dtype or device.
    pub fn from_parts(
        weight: Tensor,
        bias: Option<Tensor>,
        options: ConvTransposeOptions,
    ) -> Result<ConvTranspose2d> {
        const OP: &str = "ConvTranspose2d::from_parts";
        // The groups split dim 0 (in); the bias is dim 1 times the groups.
        let (layout, g) = ("[in, out / groups, kh, kw]", options.groups);
        check_conv_parts(OP, &weight, bias.as_ref(), (4, layout), (g, "in"), |s| {
            s[1] * g
        })?;
        Ok(ConvTranspose2d {
            weight,
            bias,
            options,
            pruning: PruneMasks::default(),
        })
    }
}

/// A convolution's `from_parts` checks: `weight` of `rank` dims (laid
/// out as `layout`) and a float dtype, `groups` dividing its dim 0 (the
/// `what` channels), and `bias` `[out(weight.shape())]` of its dtype and
/// device. The errors name `op`.
fn check_conv_parts(
    op: &'static str,
    weight: &Tensor,
    bias: Option<&Tensor>,
    (rank, layout): (usize, &str),
    (groups, what): (usize, &str),
    out: impl Fn(&[usize]) -> usize,
) -> Result<()> {
    if weight.rank() != rank {
        bail!(Error::arg(
            op,
            format!("expected a weight {layout}, got shape {:?}", weight.shape())
        ));
    }
    let n = weight.shape()[0];
    if groups == 0 || !n.is_multiple_of(groups) {
        bail!(Error::arg(
            op,
            format!("groups ({groups}) must divide the weight's {what} channels ({n})")
        ));
    }
    let shape = [out(weight.shape())];
    let note = format!("the bias must be [out_channels] = {shape:?}");
    check_parts(op, weight, bias.map(|b| (b, &shape[..], note.as_str())))
}

impl Module for ConvTranspose2d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.pruning
            .with_weight_and_bias(&self.weight, self.bias.as_ref(), |w, b| {
                x.conv_transpose2d(w, b, &self.options)
            })
    }
    prune::prunable_weight_and_bias!();
}

/// Flattens dimensions `start..=end` into one (`nn.Flatten`; by default
/// all but the batch dimension: `[N, C, H, W]` to `[N, C H W]`). A view
/// when the input's layout allows it.
///
/// ```
/// use tensorscope::nn::{Flatten, Module};
/// use tensorscope::{DType, Device, Tensor};
/// let y = Flatten::default().forward(&Tensor::ones(&[2, 3, 4, 5], DType::F32, Device::Cpu)?)?;
/// assert_eq!(y.shape(), &[2, 60]);
/// # Ok::<(), tensorscope::Error>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Flatten {
    /// The first dimension flattened (negative counts from the end).
    pub start_dim: isize,
    /// The last one.
    pub end_dim: isize,
}

impl Default for Flatten {
    /// `start_dim = 1`, `end_dim = -1`, as PyTorch's.
    fn default() -> Flatten {
        Flatten {
            start_dim: 1,
            end_dim: -1,
        }
    }
}

impl Module for Flatten {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        const OP: &str = "Flatten";
        let r = x.rank() as isize;
        let norm = |d: isize| if d < 0 { d + r } else { d };
        let (s, e) = (norm(self.start_dim), norm(self.end_dim));
        if s < 0 || e < s || e >= r {
            bail!(Error::arg(
                OP,
                format!(
                    "start_dim {} and end_dim {} do not name dimensions in order of a tensor of shape {:?}",
                    self.start_dim,
                    self.end_dim,
                    x.shape()
                )
            ));
        }
        let (s, e) = (s as usize, e as usize);
        let shape = x.shape();
        let mut new: Vec<isize> = shape[..s].iter().map(|&d| d as isize).collect();
        new.push(crate::layout::numel(&shape[s..=e]) as isize);
        new.extend(shape[e + 1..].iter().map(|&d| d as isize));
        x.reshape(&new)
    }
    fn named_parameters(&self) -> Vec<(String, &Tensor)> {
        Vec::new()
    }
    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
        Vec::new()
    }
}

/// Max pooling (`nn.MaxPool2d`) over [`Tensor::max_pool2d`].
#[derive(Clone, Copy, Debug)]
pub struct MaxPool2d {
    /// The window.
    pub kernel: [usize; 2],
    /// Stride (the kernel by default), padding and dilation.
    pub options: PoolOptions,
}

/// Average pooling (`nn.AvgPool2d`) over [`Tensor::avg_pool2d`].
#[derive(Clone, Copy, Debug)]
pub struct AvgPool2d {
    /// The window.
    pub kernel: [usize; 2],
    /// Stride (the kernel by default), padding and `count_include_pad`.
    pub options: PoolOptions,
}

/// Average pooling to a fixed size (`nn.AdaptiveAvgPool2d`) over
/// [`Tensor::adaptive_avg_pool2d`].
#[derive(Clone, Copy, Debug)]
pub struct AdaptiveAvgPool2d {
    /// The output's `[OH, OW]`.
    pub output: [usize; 2],
}

macro_rules! parameterless {
    ($t:ty, |$s:ident, $x:ident| $body:expr) => {
        impl Module for $t {
            fn forward(&self, $x: &Tensor) -> Result<Tensor> {
                let $s = self;
                $body
            }
            fn named_parameters(&self) -> Vec<(String, &Tensor)> {
                Vec::new()
            }
            fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
                Vec::new()
            }
        }
    };
}

parameterless!(MaxPool2d, |s, x| x.max_pool2d(s.kernel, &s.options));
parameterless!(AvgPool2d, |s, x| x.avg_pool2d(s.kernel, &s.options));
parameterless!(AdaptiveAvgPool2d, |s, x| x.adaptive_avg_pool2d(s.output));
