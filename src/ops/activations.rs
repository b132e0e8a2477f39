//! The activations PyTorch has beyond the unary table's: `leaky_relu`,
//! `elu`, `mish`, `hardswish`, `hardsigmoid`. Each is written with the ops
//! below it (comparisons, `where`, `clamp`, `softplus`, `tanh`), so it runs
//! on every device and autograd differentiates it through them; it
//! allocates a few temporaries that a fused kernel would not (a fused
//! kernel per activation is still to come). f16 and bf16 compute in f32
//! and round once, as PyTorch's kernels do.

use crate::alloc::history::op_context;
use crate::dtype::DType;
use crate::error::{bail, Error, Result};
use crate::tensor::Tensor;

/// Runs `f` on `x` in f32 when `x` is f16 or bf16 (and rounds the result
/// back once, as PyTorch's kernels compute half types in f32); as is for
/// f32 and f64; an `Err` naming `op` for any other dtype.
fn in_float(
    op: &'static str,
    x: &Tensor,
    f: impl FnOnce(&Tensor) -> Result<Tensor>,
) -> Result<Tensor> {
    match x.dtype() {
        DType::F32 | DType::F64 => f(x),
        DType::F16 | DType::BF16 => f(&x.to_dtype(DType::F32)?)?.to_dtype(x.dtype()),
        other => bail!(Error::arg(op, format!("needs a float tensor, got {other}"))),
    }
}

impl Tensor {
    /// `x` where `x > 0`, `slope * x` elsewhere
    /// (`torch.nn.functional.leaky_relu`; PyTorch's default slope is 0.01).
    ///
    /// ```
    /// # use tensorscope::{Device, Tensor};
    /// let x = Tensor::from_slice(&[-2.0f32, 3.0], &[2], Device::Cpu)?;
    /// assert_eq!(x.leaky_relu(0.1)?.to_vec::<f32>()?, vec![-0.2, 3.0]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn leaky_relu(&self, slope: f64) -> Result<Tensor> {
        let _op = op_context("leaky_relu");
        in_float("leaky_relu", self, |x| {
            Tensor::where_cond(&x.gt_scalar(0.0)?, x, &x.mul_scalar(slope)?)
        })
    }

    /// `x` where `x > 0`, `alpha (e^x - 1)` elsewhere
    /// (`torch.nn.functional.elu`; PyTorch's default alpha is 1). The
    /// exponential sees `x` where `x <= 0` and 0 elsewhere, so no branch
    /// overflows, and the gradient at 0 is `alpha`, as PyTorch's.
    pub fn elu(&self, alpha: f64) -> Result<Tensor> {
        let _op = op_context("elu");
        in_float("elu", self, |x| {
            let pos = x.gt_scalar(0.0)?;
            let zero = Tensor::zeros(&[], x.dtype(), x.device())?;
            let neg = Tensor::where_cond(&pos, &zero, x)?
                .exp()?
                .sub_scalar(1.0)?
                .mul_scalar(alpha)?;
            Tensor::where_cond(&pos, x, &neg)
        })
    }

    /// `x tanh(softplus(x))` (`torch.nn.functional.mish`).
    pub fn mish(&self) -> Result<Tensor> {
        let _op = op_context("mish");
        in_float("mish", self, |x| x.mul(&x.softplus()?.tanh()?))
    }

    /// `x relu6(x + 3) / 6` (`torch.nn.functional.hardswish`): 0 below -3,
    /// `x (x + 3) / 6` on [-3, 3], `x` above, so that the gradient at the
    /// ends (-0.5 and 1.5) is PyTorch's.
    pub fn hardswish(&self) -> Result<Tensor> {
        let _op = op_context("hardswish");
        in_float("hardswish", self, |x| {
            let zero = Tensor::zeros(&[], x.dtype(), x.device())?;
            let mid = x.mul(&x.add_scalar(3.0)?)?.div_scalar(6.0)?;
            let upper = Tensor::where_cond(&x.le_scalar(3.0)?, &mid, x)?;
            Tensor::where_cond(&x.lt_scalar(-3.0)?, &zero, &upper)
        })
    }

    /// `relu6(x + 3) / 6` (`torch.nn.functional.hardsigmoid`).
    pub fn hardsigmoid(&self) -> Result<Tensor> {
        let _op = op_context("hardsigmoid");
        in_float("hardsigmoid", self, |x| {
            x.add_scalar(3.0)?
                .clamp(Some(0.0), Some(6.0))?
                .div_scalar(6.0)
        })
    }
}
