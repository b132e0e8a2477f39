//! Gradient clipping by global norm.

use super::check_range;
use crate::error::Result;
use crate::nn::Module;
use crate::DType;

/// Scales every gradient of `model` in place so that their global L2 norm
/// is at most `max_norm`, and returns the norm before clipping, as PyTorch's
/// `torch.nn.utils.clip_grad_norm_` (coefficient `max_norm / (norm + 1e-6)`,
/// applied only when below 1). The norm is accumulated in f64. Parameters
/// without a gradient are skipped; with none at all the norm is 0.
///
/// An `Err` for a negative or non-finite `max_norm`.
pub fn clip_grad_norm_(model: &dyn Module, max_norm: f64) -> Result<f64> {
    check_range(
        "clip_grad_norm_",
        "max_norm",
        max_norm,
        0.0,
        f64::INFINITY,
        false,
    )?;
    let _g = crate::autograd::no_grad_guard();
    let grads: Vec<_> = model
        .parameters()
        .into_iter()
        .filter_map(|p| p.grad())
        .collect();
    let mut sq = 0.0f64;
    for g in &grads {
        let g64 = g.to_dtype(DType::F64)?;
        sq += g64.mul(&g64)?.sum_all()?.item::<f64>()?;
    }
    let total = sq.sqrt();
    let coef = max_norm / (total + 1e-6);
    if coef < 1.0 {
        for mut g in grads {
            g.mul_scalar_(coef)?;
        }
    }
    Ok(total)
}
