//! Gradient clipping: by global norm and by value.

use super::check_range;
use crate::backend::optim::sum_squares;
use crate::backend::Operand;
use crate::error::{bail, Error, Result};
use crate::nn::Module;

/// Scales every gradient of `model` in place so that their global L2 norm
/// is at most `max_norm`, and returns the norm before clipping, as PyTorch's
/// `torch.nn.utils.clip_grad_norm_` (coefficient `max_norm / (norm + 1e-6)`,
/// applied only when below 1). The norm is accumulated in f64 by one read of
/// each gradient, and the scaling is in place: nothing is allocated from the
/// device allocator, on the first call or any other. Parameters without a
/// gradient are skipped; with none at all the norm is 0.
///
/// An `Err` (and no gradient changed) for a negative or non-finite
/// `max_norm`, a gradient that is not a float tensor, or one whose elements
/// share memory (an expanded tensor set with `set_grad`), which PyTorch
/// refuses too.
pub fn clip_grad_norm_(model: &dyn Module, max_norm: f64) -> Result<f64> {
    const OP: &str = "clip_grad_norm_";
    check_range(OP, "max_norm", max_norm, 0.0, f64::INFINITY, false)?;
    let _g = crate::autograd::no_grad_guard();
    let params = model.parameters();
    let mut sq = 0.0f64;
    for p in &params {
        let Some(g) = p.grad() else { continue };
        if !g.dtype().is_float() {
            bail!(Error::dtype(OP, "a float gradient", g.dtype()));
        }
        // Every gradient must be writable before any is scaled.
        g.check_writable(OP)?;
        sq += sum_squares(OP, &Operand::of(&g))?;
    }
    let total = sq.sqrt();
    let coef = max_norm / (total + 1e-6);
    if coef < 1.0 {
        for p in &params {
            if let Some(mut g) = p.grad() {
                g.mul_scalar_(coef)?;
            }
        }
    }
    Ok(total)
}

/// Clamps every gradient of `model` in place to `[-clip_value,
/// clip_value]`, as PyTorch's `torch.nn.utils.clip_grad_value_` (NaN stays
/// NaN). In place: nothing is allocated. Parameters without a gradient are
/// skipped.
///
/// An `Err` (and no gradient changed) for a negative or NaN `clip_value`
/// (PyTorch clamps with `min > max` there, setting every gradient to the
/// negative value: deviation 19 in `tests/agreement/deviations.rs`), a gradient that
/// is not a float tensor, or one whose elements share memory.
///
/// ```
/// use tensorscope::nn::{Linear, Module};
/// use tensorscope::optim::clip_grad_value_;
/// use tensorscope::{DType, Device, Tensor};
/// let fc = Linear::new(3, 1)?;
/// let x = Tensor::full(&[1, 3], 100.0, DType::F32, Device::Cpu)?;
/// fc.forward(&x)?.sum_all()?.backward()?;
/// clip_grad_value_(&fc, 0.5)?;
/// assert_eq!(fc.weight.grad().unwrap().to_vec::<f32>()?, [0.5, 0.5, 0.5]);
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub fn clip_grad_value_(model: &dyn Module, clip_value: f64) -> Result<()> {
    const OP: &str = "clip_grad_value_";
    if clip_value.is_nan() || clip_value < 0.0 {
        bail!(Error::arg(
            OP,
            format!("clip_value must be non-negative, got {clip_value}")
        ));
    }
    let _g = crate::autograd::no_grad_guard();
    let params = model.parameters();
    for p in &params {
        let Some(g) = p.grad() else { continue };
        if !g.dtype().is_float() {
            bail!(Error::dtype(OP, "a float gradient", g.dtype()));
        }
        g.check_writable(OP)?;
    }
    for p in &params {
        if let Some(mut g) = p.grad() {
            g.clamp_(Some(-clip_value), Some(clip_value))?;
        }
    }
    Ok(())
}
