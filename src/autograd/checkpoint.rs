//! Gradient checkpointing: trade compute for memory.

use super::{attach_node, engine, is_grad_enabled, no_grad, BackwardFn, Saved};
use crate::error::Result;
use crate::tensor::Tensor;
use std::sync::Arc;

/// Runs `f(inputs)` without recording its intermediates, and recomputes it
/// during backward (PyTorch's `torch.utils.checkpoint`).
///
/// Only the inputs are saved, so the activations inside `f` exist during the
/// forward pass only while `f` runs, and again during backward only while
/// this segment's gradient is computed. Gradients are identical to the
/// unchecked run, because the recomputation performs the same ops on the same
/// values. Parameters that `f` captures (for example a layer's weights)
/// receive their gradients during that recomputation.
///
/// `f` must be deterministic: random ops inside it (dropout in training) draw
/// new values when recomputed.
///
/// ```
/// use tensorscope::{autograd::checkpoint, DType, Device, Tensor};
/// let w = Tensor::randn(&[8, 8], DType::F64, Device::Cpu)?.requires_grad_(true)?;
/// let x = Tensor::randn(&[4, 8], DType::F64, Device::Cpu)?;
/// let w2 = w.alias();
/// let y = checkpoint(move |xs: &[Tensor]| xs[0].matmul(&w2)?.tanh(), &[&x])?;
/// y.sum_all()?.backward()?;
/// assert!(w.grad().is_some());
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub fn checkpoint<F>(f: F, inputs: &[&Tensor]) -> Result<Tensor>
where
    F: Fn(&[Tensor]) -> Result<Tensor> + Send + Sync + 'static,
{
    let detached: Vec<Tensor> = inputs.iter().map(|t| t.detach_impl()).collect();
    let out = no_grad(|| f(&detached))?;
    drop(detached);
    if !is_grad_enabled() {
        return Ok(out);
    }
    let saved: Vec<Saved> = inputs
        .iter()
        .map(|t| Saved::new(t, "CheckpointBackward"))
        .collect::<Result<_>>()?;
    let wants: Vec<bool> = inputs.iter().map(|t| t.requires_grad()).collect();
    let f = Arc::new(f);
    let regions = crate::autocast::regions();
    let back: BackwardFn = Box::new(move |g| {
        let _grad = super::enable_grad_guard();
        let _autocast = regions.enter();
        let xs: Vec<Tensor> = saved
            .iter()
            .zip(&wants)
            .map(|(s, &w)| {
                let x = s.get()?.detach_impl();
                if w {
                    x.requires_grad_(true)
                } else {
                    Ok(x)
                }
            })
            .collect::<Result<_>>()?;
        let y = f(&xs)?;
        if y.requires_grad() {
            engine::run_backward(&y, g.to_dtype(y.dtype())?, false)?;
        }
        Ok(xs
            .iter()
            .zip(&wants)
            .map(|(x, &w)| if w { x.grad() } else { None })
            .collect())
    });
    // Attach even when no input requires grad: parameters inside `f` may.
    Ok(attach_node(out, "CheckpointBackward", inputs, back, false))
}
