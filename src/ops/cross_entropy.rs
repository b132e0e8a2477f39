//! Cross-entropy from logits and class indices, the op behind
//! `nn::cross_entropy_with` (which checks the arguments and lays the logits
//! out as rows): one fused CPU kernel per direction
//! (`backend/cpu/cross_entropy.rs`) with its autograd node, and the
//! composition of `log_softmax` and a gather on every other device, behind
//! one entry, [`cross_entropy_rows`]. The loss's options live here so that
//! the op layer can read them; `nn` re-exports them.
//!
//! Memory of the fused path: the forward allocates the result (and, for
//! `Reduction::None`, the per-row losses it is), plus one f32 (f64 for f64
//! logits) per row, the row's logsumexp, when a gradient will be needed;
//! log_softmax is never materialised. The backward allocates the logits'
//! gradient.

use crate::autograd::{attach, needs_grad, no_grad, Saved};
use crate::backend::nn::{self as fused, CeConfig, CeGrad};
use crate::backend::Operand;
use crate::dtype::DType;
use crate::error::{bail, Error, Result};
use crate::tensor::Tensor;

/// How a loss reduces its per-element values (PyTorch's `reduction=`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Reduction {
    /// The mean (for a weighted cross-entropy: the sum divided by the summed
    /// weights of the counted targets). The default.
    #[default]
    Mean,
    /// The sum.
    Sum,
    /// No reduction: one value per element (per sample for cross-entropy).
    None,
}

/// Options of [`cross_entropy_with`](crate::nn::loss::cross_entropy_with);
/// `Default` gives [`cross_entropy`](crate::nn::loss::cross_entropy)'s
/// behaviour.
#[derive(Clone, Copy, Debug, Default)]
pub struct CrossEntropyOptions<'a> {
    /// How the per-sample losses are reduced.
    pub reduction: Reduction,
    /// Targets equal to this class index count for nothing (no loss, no
    /// gradient, not in the mean's denominator). `None` (the default here)
    /// ignores nothing and every target must be a class; PyTorch's default
    /// is `Some(-100)`, the usual padding label.
    pub ignore_index: Option<i64>,
    /// A rescaling weight per class, shape `[C]`, the logits' dtype. With
    /// `Mean`, the sum of the weighted losses is divided by the sum of the
    /// weights of the (not ignored) targets, as in PyTorch.
    pub weight: Option<&'a Tensor>,
    /// In `[0, 1]`: the target becomes a mix of the one-hot class (`1 - ε`)
    /// and the uniform distribution (`ε / C`). 0 by default.
    pub label_smoothing: f64,
}

/// Cross-entropy of `rows [M, C]` (the logits with the class dimension
/// last, a differentiable view or copy of them) against i64 class indices
/// `targets` (any shape of `M` elements; `Reduction::None` gives that shape),
/// the options checked by the caller. `class_dim` is the logits' class
/// dimension, named in range errors. The one entry of the op: the fused
/// kernel where it applies (CPU logits, no class weight needing a gradient),
/// the composition of `log_softmax` and a gather everywhere else.
pub(crate) fn cross_entropy_rows(
    rows: &Tensor,
    targets: &Tensor,
    opts: &CrossEntropyOptions<'_>,
    class_dim: usize,
) -> Result<Tensor> {
    let op = "cross_entropy";
    let c = rows.shape()[1];
    let eps = opts.label_smoothing;
    if fused_applies(rows, opts) {
        return cross_entropy_fused(rows, targets, opts, class_dim);
    }
    let flat = targets.reshape(&[-1])?;

    // Range check; the ignored targets are replaced by class 0 for the
    // lookups and masked out.
    let (safe, valid) = match opts.ignore_index {
        Some(ig) => {
            let ignored = flat.eq_scalar(ig as f64)?;
            let zero = Tensor::zeros(&[], DType::I64, flat.device())?;
            let safe = Tensor::where_cond(&ignored, &zero, &flat)?;
            (safe, Some(ignored.eq_scalar(0.0)?))
        }
        None => (flat.alias(), None),
    };
    if safe.numel() > 0 {
        let lo = safe.min_all()?.item::<i64>()?;
        let hi = safe.max_all()?.item::<i64>()?;
        if lo < 0 || hi >= c as i64 {
            bail!(Error::IndexOutOfRange {
                op,
                index: if lo < 0 { lo } else { hi },
                dim: class_dim,
                size: c,
            });
        }
    }

    let logp = rows.log_softmax(1)?;
    let dt = rows.dtype();
    // Per-sample weight of the target class, zero where ignored.
    let mut wt: Option<Tensor> = match opts.weight {
        Some(w) => Some(w.index_select(0, &safe)?),
        None => None,
    };
    if let Some(v) = &valid {
        let v = v.to_dtype(dt)?;
        wt = Some(match wt {
            Some(w) => w.mul(&v)?,
            None => v,
        });
    }
    let picked = logp.gather(1, &safe.unsqueeze(1)?)?.squeeze_dim(1)?;
    let mut nll = match &wt {
        Some(w) => picked.mul(w)?.neg()?,
        None => picked.neg()?,
    };
    let reduce_ce = |per: Tensor| -> Result<Tensor> {
        match opts.reduction {
            Reduction::Mean => match &wt {
                Some(w) => per.sum_all()?.div(&w.sum_all()?),
                None => per.mean_all(),
            },
            Reduction::Sum => per.sum_all(),
            Reduction::None => per.reshape(
                &targets
                    .shape()
                    .iter()
                    .map(|&d| d as isize)
                    .collect::<Vec<_>>(),
            ),
        }
    };
    if eps > 0.0 {
        // PyTorch: (1 - ε) nll + ε / C * smooth, smooth = -Σ_c w_c logp_c,
        // zero where ignored, reduced like the nll part.
        let mut smooth = match opts.weight {
            Some(w) => logp.mul(w)?.sum(&[1], false)?.neg()?,
            None => logp.sum(&[1], false)?.neg()?,
        };
        if let Some(v) = &valid {
            smooth = smooth.mul(&v.to_dtype(dt)?)?;
        }
        nll = nll.mul_scalar(1.0 - eps)?;
        let smooth = smooth.mul_scalar(eps / c as f64)?;
        return match opts.reduction {
            Reduction::None => reduce_ce(nll.add(&smooth)?),
            _ => reduce_ce(nll)?.add(&reduce_ce(smooth)?),
        };
    }
    reduce_ce(nll)
}

/// `true` when the fused kernel can compute this cross-entropy (class-index
/// targets already checked): CPU logits, and no class weight that would
/// need a gradient (the composition gives it one).
fn fused_applies(logits: &Tensor, opts: &CrossEntropyOptions<'_>) -> bool {
    logits.device().is_cpu() && !opts.weight.is_some_and(|w| needs_grad(&[w]))
}

/// The fused cross-entropy over `rows [M, C]` (the logits with the class
/// dimension last, a differentiable view or copy of them) and i64 `targets`
/// (any shape of `M` elements; `Reduction::None` gives that shape).
/// `class_dim` is the logits' class dimension, named in range errors.
fn cross_entropy_fused(
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
