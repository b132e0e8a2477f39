//! Elementwise activations: `ReLU`, `GELU` (erf or tanh form), `Sigmoid`, `Tanh`, `SiLU`, `Softplus` (in place when they may), and `LeakyReLU`, `ELU`, `Mish`, `Hardswish`.
//!
//! They have no parameters, preserve the shape and can work in place: given
//! an owned input (see [`Sequential`](super::Sequential)) that is the only
//! handle to its storage and that no graph needs, they overwrite it
//! (`relu_`, ...) and allocate nothing; otherwise they allocate.

use super::{donation_verdict, Module, Verdict};
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// An owned input that may be overwritten ([`donation_verdict`]) goes
/// through the in-place kernel `op_`; any other through `m.forward`.
fn in_place_or_forward(
    m: &dyn Module,
    mut x: Tensor,
    op_: impl FnOnce(&mut Tensor) -> Result<()>,
) -> Result<Tensor> {
    if donation_verdict(&x) == Verdict::Taken {
        op_(&mut x)?;
        Ok(x)
    } else {
        m.forward(&x)
    }
}

macro_rules! activation {
    ($(#[$doc:meta])* $name:ident, $op:ident, $op_:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, Default)]
        pub struct $name;

        impl Module for $name {
            fn forward(&self, x: &Tensor) -> Result<Tensor> {
                x.$op()
            }

            fn forward_owned(&self, x: Tensor) -> Result<Tensor> {
                in_place_or_forward(self, x, |x| x.$op_().map(drop))
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
        }
    };
}

activation!(
    /// `max(x, 0)`.
    ReLU, relu, relu_
);

/// Which form [`GELU`] computes (PyTorch's `approximate` argument).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum GeluApproximate {
    /// `x/2 * (1 + erf(x / sqrt(2)))`, PyTorch's `"none"` ([`Tensor::gelu`]).
    #[default]
    None,
    /// `x/2 * (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`, PyTorch's
    /// `"tanh"` ([`Tensor::gelu_tanh`]), as GPT-2 and BERT use it.
    Tanh,
}

/// `nn.GELU`: the exact (erf) form by default, the tanh form with
/// [`GeluApproximate::Tanh`]. In place on an owned input, like the others.
///
/// ```
/// use tensorscope::nn::{GeluApproximate, Module, Sequential, GELU};
/// use tensorscope::{DType, Device, Tensor};
/// let x = Tensor::randn(&[4, 8], DType::F32, Device::Cpu)?;
/// let tanh = GELU::new("tanh")?;
/// assert_eq!(tanh.approximate, GeluApproximate::Tanh);
/// let d = tanh.forward(&x)?.sub(&x.gelu_tanh()?)?.abs()?.max_all()?;
/// assert_eq!(d.item::<f32>()?, 0.0);
/// // `GELU` alone is the exact form, as a value too.
/// let _model = Sequential::new().add(GELU);
/// # Ok::<(), tensorscope::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GELU {
    /// The form computed.
    pub approximate: GeluApproximate,
}

/// The exact GELU, so that `GELU` reads as a value as it did when the
/// module had no options (`Sequential::new().add(GELU)`).
pub const GELU: GELU = GELU {
    approximate: GeluApproximate::None,
};

impl GELU {
    /// PyTorch's `nn.GELU(approximate=...)`: `"none"` or `"tanh"`; any
    /// other string is an error naming it.
    pub fn new(approximate: &str) -> Result<GELU> {
        let approximate = match approximate {
            "none" => GeluApproximate::None,
            "tanh" => GeluApproximate::Tanh,
            other => {
                return Err(Error::arg(
                    "GELU",
                    format!("approximate argument must be either none or tanh, got {other:?}"),
                ))
            }
        };
        Ok(GELU { approximate })
    }
}

impl Module for GELU {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self.approximate {
            GeluApproximate::None => x.gelu(),
            GeluApproximate::Tanh => x.gelu_tanh(),
        }
    }

    fn forward_owned(&self, x: Tensor) -> Result<Tensor> {
        in_place_or_forward(self, x, |x| {
            match self.approximate {
                GeluApproximate::None => x.gelu_()?,
                GeluApproximate::Tanh => x.gelu_tanh_()?,
            };
            Ok(())
        })
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
}

activation!(
    /// `1 / (1 + exp(-x))`.
    Sigmoid, sigmoid, sigmoid_
);
activation!(
    /// `tanh(x)`.
    Tanh, tanh, tanh_
);
activation!(
    /// `x * sigmoid(x)` (SiLU, swish).
    SiLU, silu, silu_
);
activation!(
    /// `ln(1 + e^x)` (beta 1, threshold 20: PyTorch's defaults).
    Softplus, softplus, softplus_
);

/// An activation without an in-place kernel: `forward_owned` is `forward`.
macro_rules! composite_activation {
    ($(#[$doc:meta])* $name:ident { $($field:ident: $ty:ty = $default:expr),* } => |$s:ident, $x:ident| $body:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy)]
        pub struct $name {
            $(
                #[doc = concat!("PyTorch's `", stringify!($field), "` (default ", stringify!($default), ").")]
                pub $field: $ty,
            )*
        }

        impl Default for $name {
            fn default() -> Self {
                $name { $($field: $default),* }
            }
        }

        impl Module for $name {
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

composite_activation!(
    /// `x` above 0, `negative_slope * x` below ([`Tensor::leaky_relu`]).
    LeakyReLU { negative_slope: f64 = 0.01 } => |s, x| x.leaky_relu(s.negative_slope)
);
composite_activation!(
    /// `x` above 0, `alpha (e^x - 1)` below ([`Tensor::elu`]).
    ELU { alpha: f64 = 1.0 } => |s, x| x.elu(s.alpha)
);
composite_activation!(
    /// `x tanh(softplus(x))` ([`Tensor::mish`]).
    Mish {} => |_s, x| x.mish()
);
composite_activation!(
    /// `x relu6(x + 3) / 6` ([`Tensor::hardswish`]).
    Hardswish {} => |_s, x| x.hardswish()
);

/// The identity (`nn.Identity`): the input itself, as a fresh handle to the
/// same storage (an alias; no copy, no allocation). It does not report
/// [`can_work_in_place`](Module::can_work_in_place): it writes nothing, so
/// a `Sequential`'s donation counters do not count it as a buffer taken.
#[derive(Debug, Clone, Copy, Default)]
pub struct Identity;

impl Module for Identity {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(x.alias())
    }

    fn forward_owned(&self, x: Tensor) -> Result<Tensor> {
        Ok(x)
    }

    fn named_parameters(&self) -> Vec<(String, &Tensor)> {
        Vec::new()
    }

    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
        Vec::new()
    }
}
