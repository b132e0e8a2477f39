//! Loss functions (mean reduction), differentiable through autograd.

use crate::error::{bail, Error, Result};
use crate::{DType, Tensor};

fn same_shape(op: &'static str, a: &Tensor, b: &Tensor) -> Result<()> {
    if a.shape() != b.shape() {
        bail!(Error::shape(
            op,
            a.shape(),
            b.shape(),
            "the prediction and the target must have the same shape"
        ));
    }
    Ok(())
}

/// Mean squared error: `mean((pred - target)^2)`. Shapes must be equal.
///
/// ```
/// use tensorscope::nn::mse_loss;
/// use tensorscope::{Device, Tensor};
/// let p = Tensor::from_slice(&[1.0f32, 2.0], &[2], Device::Cpu)?;
/// let t = Tensor::from_slice(&[0.0f32, 4.0], &[2], Device::Cpu)?;
/// assert_eq!(mse_loss(&p, &t)?.item::<f32>()?, 2.5);
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub fn mse_loss(pred: &Tensor, target: &Tensor) -> Result<Tensor> {
    same_shape("mse_loss", pred, target)?;
    pred.sub(target)?.square()?.mean_all()
}

/// Cross-entropy from unnormalised `logits [N, C]` and class indices
/// `targets` (i64, `[N]`, each in `0..C`): `-mean_i log_softmax(logits)[i, t_i]`.
///
/// ```
/// use tensorscope::nn::cross_entropy;
/// use tensorscope::{Device, Tensor};
/// let logits = Tensor::from_slice(&[0.0f32, 0.0], &[1, 2], Device::Cpu)?;
/// let t = Tensor::from_slice(&[1i64], &[1], Device::Cpu)?;
/// assert!((cross_entropy(&logits, &t)?.item::<f32>()? - 2f32.ln()).abs() < 1e-6);
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub fn cross_entropy(logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    let op = "cross_entropy";
    if logits.rank() != 2 || targets.rank() != 1 || targets.shape()[0] != logits.shape()[0] {
        bail!(Error::shape(
            op,
            logits.shape(),
            targets.shape(),
            "logits must be [N, C] and targets [N]"
        ));
    }
    if targets.dtype() != DType::I64 {
        bail!(Error::dtype(op, "i64 class indices", targets.dtype()));
    }
    if !logits.dtype().is_float() {
        bail!(Error::dtype(op, "float logits", logits.dtype()));
    }
    let (n, c) = (logits.shape()[0], logits.shape()[1]);
    if n > 0 {
        let lo = targets.min_all()?.item::<i64>()?;
        let hi = targets.max_all()?.item::<i64>()?;
        if lo < 0 || hi >= c as i64 {
            let bad = if lo < 0 { lo } else { hi };
            bail!(Error::IndexOutOfRange {
                op,
                index: bad,
                dim: 1,
                size: c,
            });
        }
    }
    let picked = logits.log_softmax(1)?.gather(1, &targets.unsqueeze(1)?)?;
    picked.mean_all()?.neg()
}

/// Binary cross-entropy on logits, in the stable form
/// `mean(max(x, 0) - x * t + log(1 + exp(-|x|)))` (no overflow for large
/// `|x|`). Shapes must be equal; targets are probabilities in `[0, 1]`.
///
/// ```
/// use tensorscope::nn::bce_with_logits;
/// use tensorscope::{Device, Tensor};
/// let x = Tensor::from_slice(&[0.0f32], &[1], Device::Cpu)?;
/// let t = Tensor::from_slice(&[1.0f32], &[1], Device::Cpu)?;
/// assert!((bce_with_logits(&x, &t)?.item::<f32>()? - 2f32.ln()).abs() < 1e-6);
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub fn bce_with_logits(logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    same_shape("bce_with_logits", logits, targets)?;
    let softplus_neg_abs = logits.abs()?.neg()?.exp()?.add_scalar(1.0)?.log()?;
    logits
        .relu()?
        .sub(&logits.mul(targets)?)?
        .add(&softplus_neg_abs)?
        .mean_all()
}
