//! Cross-entropy from logits and class indices in one fused CPU kernel per
//! direction (`backend/cpu/cross_entropy.rs`), with its autograd node: the
//! path [`cross_entropy_with`](super::cross_entropy_with) takes on the CPU.
//!
//! Memory: the forward allocates the result (and, for `Reduction::None`, the
//! per-row losses it is), plus one f32 (f64 for f64 logits) per row, the
//! row's logsumexp, when a gradient will be needed; log_softmax is never
//! materialised. The backward allocates the logits' gradient.

use super::loss::{CrossEntropyOptions, Reduction};
use crate::autograd::{attach, needs_grad, no_grad, Saved};
use crate::backend::nn::{self as fused, CeConfig, CeGrad};
use crate::backend::Operand;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// `true` when the fused kernel can compute this cross-entropy (class-index
/// targets already checked): CPU logits, and no class weight that would
/// need a gradient (the composition gives it one).
pub(super) fn applies(logits: &Tensor, opts: &CrossEntropyOptions<'_>) -> bool {
    logits.device().is_cpu() && !opts.weight.is_some_and(|w| needs_grad(&[w]))
}

/// The fused cross-entropy over `rows [M, C]` (the logits with the class
/// dimension last, a differentiable view or copy of them) and i64 `targets`
/// (any shape of `M` elements; `Reduction::None` gives that shape).
/// `class_dim` is the logits' class dimension, named in range errors.
pub(super) fn cross_entropy_fused(
    rows: &Tensor,
    targets: &Tensor,
    opts: &CrossEntropyOptions<'_>,
    class_dim: usize,
) -> Result<Tensor> {
    let (dt, dev) = (rows.dtype(), rows.device());
    let stats_dt = if dt == DType::F64 {
        DType::F64
    } else {
        DType::F32
    };
    let x = rows.contiguous()?;
    let m = x.shape()[0];
    let flat = targets.reshape(&[-1])?.contiguous()?;
    let w = opts.weight.map(|w| w.contiguous()).transpose()?;
    let cfg = CeConfig {
        ignore_index: opts.ignore_index,
        label_smoothing: opts.label_smoothing,
    };
    let grad = needs_grad(&[&x]);
    let per_row = match opts.reduction {
        Reduction::None => Some(Tensor::alloc(&[m], dt, dev)?),
        _ => None,
    };
    let lse = if grad {
        Some(Tensor::alloc(&[m], stats_dt, dev)?)
    } else {
        None
    };
    let sums = {
        let (ox, ot) = (Operand::of(&x), Operand::of(&flat));
        let ow = w.as_ref().map(Operand::of);
        let (opr, ol) = (
            per_row.as_ref().map(Operand::of),
            lse.as_ref().map(Operand::of),
        );
        fused::cross_entropy(&ox, &ot, ow.as_ref(), opr.as_ref(), ol.as_ref(), cfg).map_err(
            |e| match e {
                Error::IndexOutOfRange {
                    op, index, size, ..
                } => Error::IndexOutOfRange {
                    op,
                    index,
                    dim: class_dim,
                    size,
                },
                e => e,
            },
        )?
    };
    // `Mean` divides by the summed weights of the counted targets (their
    // number without a class weight), as PyTorch does.
    let (out, scale) = match (opts.reduction, per_row) {
        (Reduction::None, Some(p)) => {
            let shape: Vec<isize> = targets.shape().iter().map(|&d| d as isize).collect();
            (p.reshape(&shape)?, 1.0)
        }
        (Reduction::Mean, _) => (
            Tensor::full(&[], sums.loss / sums.weight, dt, dev)?,
            1.0 / sums.weight,
        ),
        _ => (Tensor::full(&[], sums.loss, dt, dev)?, 1.0),
    };
    let Some(lse) = lse else {
        return Ok(out);
    };
    const NAME: &str = "NllLossBackward";
    let (sx, st, sl) = (
        Saved::new(&x, NAME)?,
        Saved::new(&flat, NAME)?,
        Saved::new(&lse, NAME)?,
    );
    let sw = w.as_ref().map(|t| Saved::new(t, NAME)).transpose()?;
    let per_sample = opts.reduction == Reduction::None;
    Ok(attach(
        out,
        NAME,
        &[&x],
        Box::new(move |g: &Tensor| {
            let (x, t, lse) = (sx.get()?, st.get()?, sl.get()?);
            let w = sw.as_ref().map(|s| s.get()).transpose()?;
            no_grad(|| {
                let dx = Tensor::alloc(x.shape(), dt, dev)?;
                let g = g.to_dtype(dt)?.reshape(&[-1])?.contiguous()?;
                let og = Operand::of(&g);
                let grad = if per_sample {
                    CeGrad::PerRow(&og)
                } else {
                    CeGrad::Scalar(&og, scale)
                };
                let ow = w.map(Operand::of);
                fused::cross_entropy_backward(
                    &Operand::of(x),
                    &Operand::of(t),
                    ow.as_ref(),
                    &Operand::of(lse),
                    &grad,
                    &Operand::of(&dx),
                    cfg,
                )?;
                Ok(vec![Some(dx)])
            })
        }),
    ))
}
