//! Loss functions, differentiable through autograd.
//!
//! The plain functions ([`mse_loss`], [`cross_entropy`], [`bce_with_logits`])
//! take PyTorch's defaults and average over the batch. Their `_with` forms
//! take PyTorch's options: a [`Reduction`] (`Mean`, `Sum` or `None`), and
//! for cross-entropy `ignore_index`, a class `weight` and `label_smoothing`
//! ([`CrossEntropyOptions`]), for BCE an element `weight` and `pos_weight`
//! ([`BceWithLogitsOptions`]). Results match PyTorch 2.15's to rounding (the
//! tests compare against numbers it produced).

use crate::dtype::DType;
use crate::error::{bail, Error, Result};
use crate::ops::cross_entropy::cross_entropy_rows;
pub use crate::ops::cross_entropy::{CrossEntropyOptions, Reduction};
use crate::tensor::Tensor;

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

fn reduce(loss: Tensor, reduction: Reduction) -> Result<Tensor> {
    match reduction {
        Reduction::Mean => loss.mean_all(),
        Reduction::Sum => loss.sum_all(),
        Reduction::None => Ok(loss),
    }
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
    mse_loss_with(pred, target, Reduction::Mean)
}

/// [`mse_loss`] with a [`Reduction`]: `Sum` adds the squared errors, `None`
/// returns them elementwise (the input's shape).
///
/// ```
/// use tensorscope::nn::{mse_loss_with, Reduction};
/// use tensorscope::{Device, Tensor};
/// let p = Tensor::from_slice(&[1.0f32, 2.0], &[2], Device::Cpu)?;
/// let t = Tensor::from_slice(&[0.0f32, 4.0], &[2], Device::Cpu)?;
/// assert_eq!(mse_loss_with(&p, &t, Reduction::Sum)?.item::<f32>()?, 5.0);
/// assert_eq!(mse_loss_with(&p, &t, Reduction::None)?.to_vec::<f32>()?, vec![1.0, 4.0]);
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub fn mse_loss_with(pred: &Tensor, target: &Tensor, reduction: Reduction) -> Result<Tensor> {
    if let Some(c) = crate::autocast::cast(&crate::autocast::MSE_LOSS, &[Some(pred), Some(target)])?
    {
        return mse_loss_with(c.get(0), c.get(1), reduction);
    }
    same_shape("mse_loss", pred, target)?;
    reduce(pred.sub(target)?.square()?, reduction)
}

/// Checks `label_smoothing` and the class weight of a cross-entropy.
fn check_ce_options(logits: &Tensor, opts: &CrossEntropyOptions<'_>) -> Result<()> {
    let op = "cross_entropy";
    let eps = opts.label_smoothing;
    if !(0.0..=1.0).contains(&eps) {
        bail!(Error::arg(
            op,
            format!("label_smoothing must be in [0, 1], got {eps}")
        ));
    }
    let c = logits.shape()[if logits.rank() == 1 { 0 } else { 1 }];
    if let Some(w) = opts.weight {
        if w.shape() != [c] {
            bail!(Error::shape(
                op,
                logits.shape(),
                w.shape(),
                format!("the class weight must be [C] = [{c}]")
            ));
        }
        if w.dtype() != logits.dtype() {
            bail!(Error::dtype(
                op,
                format!(
                    "{} (the logits' dtype) for the class weight",
                    logits.dtype()
                ),
                w.dtype()
            ));
        }
        logits.same_device(op, w)?;
    }
    Ok(())
}

/// Class indices as i64: i64 itself, or i32 and u8 widened (PyTorch's
/// losses take all three); any other dtype is an `Err` naming `op`.
fn class_indices(op: &'static str, t: &Tensor, or: &str) -> Result<Tensor> {
    match t.dtype() {
        DType::I64 => Ok(t.alias()),
        DType::I32 | DType::U8 => t.to_dtype(DType::I64),
        other => bail!(Error::dtype(
            op,
            format!("class indices of i64, i32 or u8 {or}")
                .trim_end()
                .to_string(),
            other
        )),
    }
}

/// Cross-entropy against class probabilities (targets of the logits' shape
/// and dtype), PyTorch's formula: `-Σ_c w_c t_c log_softmax(x)_c` per
/// sample, the targets smoothed to `(1 - ε) t + ε / C` first; `Mean`
/// divides by the number of samples.
fn cross_entropy_probs(
    logits: &Tensor,
    targets: &Tensor,
    opts: &CrossEntropyOptions<'_>,
) -> Result<Tensor> {
    let op = "cross_entropy";
    if targets.rank() + 1 == logits.rank() {
        // The shape of class indices: a float tensor there is a dtype mistake.
        bail!(Error::dtype(
            op,
            "i64 class indices (or class probabilities of the logits' shape)",
            targets.dtype()
        ));
    }
    if logits.rank() == 0 || targets.shape() != logits.shape() {
        bail!(Error::shape(
            op,
            logits.shape(),
            targets.shape(),
            "class-probability targets must have the logits' shape ([N, C], [N, C, d1, ...] or [C])"
        ));
    }
    if targets.dtype() != logits.dtype() {
        bail!(Error::dtype(
            op,
            format!(
                "{} (the logits' dtype) for probability targets",
                logits.dtype()
            ),
            targets.dtype()
        ));
    }
    logits.same_device(op, targets)?;
    if let Some(ig) = opts.ignore_index.filter(|&i| i >= 0) {
        bail!(Error::arg(
            op,
            format!("ignore_index ({ig}) is not supported with class-probability targets")
        ));
    }
    check_ce_options(logits, opts)?;
    let class_dim = if logits.rank() == 1 { 0 } else { 1 };
    let c = logits.shape()[class_dim];
    let eps = opts.label_smoothing;
    let t = if eps > 0.0 {
        targets.mul_scalar(1.0 - eps)?.add_scalar(eps / c as f64)?
    } else {
        targets.alias()
    };
    let mut prod = logits.log_softmax(class_dim as isize)?.mul(&t)?;
    if let Some(w) = opts.weight {
        // [C] seen as [C, 1, ...] against the dims after the class dim.
        let mut ws = vec![c as isize];
        ws.extend(std::iter::repeat_n(1, logits.rank() - class_dim - 1));
        prod = prod.mul(&w.view(&ws)?)?;
    }
    let per = prod.sum(&[class_dim as isize], false)?.neg()?;
    reduce(per, opts.reduction)
}

/// Cross-entropy from unnormalised `logits [N, C]` and class indices
/// `targets` (i64, `[N]`, each in `0..C`): `-mean_i log_softmax(logits)[i, t_i]`.
/// See [`cross_entropy_with`] for the options and the other accepted shapes.
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
    let _op = crate::alloc::history::op_context_with("cross_entropy", || {
        vec![logits.shape().to_vec(), targets.shape().to_vec()]
    });
    cross_entropy_with(logits, targets, &CrossEntropyOptions::default())
}

/// Cross-entropy with PyTorch's options ([`CrossEntropyOptions`]).
///
/// Shapes, as in PyTorch: logits `[N, C]` with targets `[N]`, logits
/// `[N, C, d1, ...]` with targets `[N, d1, ...]` (the class dimension is 1),
/// or unbatched logits `[C]` with a 0-D target. With `Reduction::None` the
/// result has the targets' shape. Targets are class indices in `0..C` (i64, i32 or u8)
/// (or equal to `ignore_index`), or **class probabilities**: a float tensor
/// of the logits' shape and dtype (soft labels, mixup), for which
/// `ignore_index` must not name a class and `Mean` divides by the number of
/// samples, as in PyTorch. Anything else is an `Err` naming the op.
///
/// ```
/// use tensorscope::nn::{cross_entropy_with, CrossEntropyOptions, Reduction};
/// use tensorscope::{Device, Tensor};
/// let logits = Tensor::from_slice(&[2.0f32, 0.0, 0.0, 0.0, 1.0, 0.0], &[2, 3], Device::Cpu)?;
/// let t = Tensor::from_slice(&[0i64, -100], &[2], Device::Cpu)?; // -100: padding
/// let w = Tensor::from_slice(&[1.0f32, 2.0, 1.0], &[3], Device::Cpu)?;
/// let opts = CrossEntropyOptions {
///     ignore_index: Some(-100),
///     weight: Some(&w),
///     label_smoothing: 0.1,
///     reduction: Reduction::None,
/// };
/// let l = cross_entropy_with(&logits, &t, &opts)?.to_vec::<f32>()?;
/// assert_eq!(l[1], 0.0); // the ignored sample
/// assert!((l[0] - 0.4475).abs() < 1e-4); // torch.nn.functional.cross_entropy agrees
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub fn cross_entropy_with(
    logits: &Tensor,
    targets: &Tensor,
    opts: &CrossEntropyOptions<'_>,
) -> Result<Tensor> {
    if let Some(c) = crate::autocast::cast(
        &crate::autocast::CROSS_ENTROPY,
        &[Some(logits), Some(targets), opts.weight],
    )? {
        let opts = CrossEntropyOptions {
            weight: c.opt(2),
            ..*opts
        };
        return cross_entropy_with(c.get(0), c.get(1), &opts);
    }
    let op = "cross_entropy";
    if targets.dtype().is_float() {
        return cross_entropy_probs(logits, targets, opts);
    }
    let shapes_ok = match logits.rank() {
        1 => targets.rank() == 0,
        0 => false,
        r => {
            targets.rank() == r - 1
                && targets.shape()[0] == logits.shape()[0]
                && targets.shape()[1..] == logits.shape()[2..]
        }
    };
    if !shapes_ok {
        bail!(Error::shape(
            op,
            logits.shape(),
            targets.shape(),
            "logits must be [N, C] with targets [N], [N, C, d1, ...] with targets [N, d1, ...], or [C] with a 0-D target"
        ));
    }
    if !logits.dtype().is_float() {
        bail!(Error::dtype(op, "float logits", logits.dtype()));
    }
    logits.same_device(op, targets)?;
    let targets = &class_indices(op, targets, "(or float class probabilities)")?;
    let class_dim = if logits.rank() == 1 { 0 } else { 1 };
    let c = logits.shape()[class_dim];
    check_ce_options(logits, opts)?;

    // Rows [M, C] and targets [M], the class dimension last.
    let rows = if logits.rank() == 1 {
        logits.unsqueeze(0)?
    } else if logits.rank() == 2 {
        logits.alias()
    } else {
        let r = logits.rank();
        let mut perm: Vec<isize> = vec![0];
        perm.extend(2..r as isize);
        perm.push(1);
        logits.permute(&perm)?.reshape(&[-1, c as isize])?
    };
    cross_entropy_rows(&rows, targets, opts, class_dim)
}

/// Options of [`bce_with_logits_with`]; `Default` gives
/// [`bce_with_logits`]'s behaviour.
#[derive(Clone, Copy, Debug, Default)]
pub struct BceWithLogitsOptions<'a> {
    /// How the element losses are reduced.
    pub reduction: Reduction,
    /// A rescaling weight per element, broadcast to the logits' shape.
    pub weight: Option<&'a Tensor>,
    /// The weight of the positive term `t · log σ(x)`, broadcast to the
    /// logits' shape (usually `[C]`, one per class along the last dimension):
    /// `n_negative / n_positive` balances a rare positive class.
    pub pos_weight: Option<&'a Tensor>,
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
    bce_with_logits_with(logits, targets, &BceWithLogitsOptions::default())
}

/// [`bce_with_logits`] with PyTorch's options ([`BceWithLogitsOptions`]):
/// `l = w · [(1 - t) x + (1 + (p - 1) t) · softplus(-x)]` for `pos_weight`
/// `p` and `weight` `w`, then reduced. `weight` and `pos_weight` must
/// broadcast to the logits' shape and have their dtype.
///
/// ```
/// use tensorscope::nn::{bce_with_logits_with, BceWithLogitsOptions, Reduction};
/// use tensorscope::{Device, Tensor};
/// let x = Tensor::from_slice(&[0.0f32, 0.0], &[1, 2], Device::Cpu)?;
/// let t = Tensor::from_slice(&[1.0f32, 0.0], &[1, 2], Device::Cpu)?;
/// let pw = Tensor::from_slice(&[3.0f32, 3.0], &[2], Device::Cpu)?;
/// let opts = BceWithLogitsOptions { pos_weight: Some(&pw), reduction: Reduction::None, ..Default::default() };
/// let l = bce_with_logits_with(&x, &t, &opts)?.to_vec::<f32>()?;
/// let ln2 = 2f32.ln();
/// assert!((l[0] - 3.0 * ln2).abs() < 1e-6 && (l[1] - ln2).abs() < 1e-6);
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub fn bce_with_logits_with(
    logits: &Tensor,
    targets: &Tensor,
    opts: &BceWithLogitsOptions<'_>,
) -> Result<Tensor> {
    if let Some(c) = crate::autocast::cast(
        &crate::autocast::BCE_WITH_LOGITS,
        &[Some(logits), Some(targets), opts.weight, opts.pos_weight],
    )? {
        let opts = BceWithLogitsOptions {
            weight: c.opt(2),
            pos_weight: c.opt(3),
            ..*opts
        };
        return bce_with_logits_with(c.get(0), c.get(1), &opts);
    }
    let op = "bce_with_logits";
    same_shape(op, logits, targets)?;
    if !logits.dtype().is_float() {
        bail!(Error::dtype(op, "float logits", logits.dtype()));
    }
    for (what, t) in [("weight", opts.weight), ("pos_weight", opts.pos_weight)] {
        let Some(t) = t else { continue };
        logits.same_device(op, t)?;
        if t.dtype() != logits.dtype() {
            bail!(Error::dtype(
                op,
                format!("{} (the logits' dtype) for {what}", logits.dtype()),
                t.dtype()
            ));
        }
        crate::layout::check_broadcasts_to(
            op,
            logits.shape(),
            t.shape(),
            format!("{what} must broadcast to the logits' shape"),
        )?;
    }
    // log(1 + exp(-|x|)): the stable tail of softplus.
    let tail = logits.abs()?.neg()?.exp()?.add_scalar(1.0)?.log()?;
    let loss = match opts.pos_weight {
        None => logits.relu()?.sub(&logits.mul(targets)?)?.add(&tail)?,
        Some(p) => {
            // (1 - t) x + (1 + (p - 1) t) softplus(-x), softplus(-x) = max(-x, 0) + tail.
            let sp = logits.neg()?.relu()?.add(&tail)?;
            let lw = p.sub_scalar(1.0)?.mul(targets)?.add_scalar(1.0)?;
            targets.rsub_scalar(1.0)?.mul(logits)?.add(&lw.mul(&sp)?)?
        }
    };
    let loss = match opts.weight {
        Some(w) => loss.mul(w)?,
        None => loss,
    };
    reduce(loss, opts.reduction)
}

/// Mean absolute error: `mean(|pred - target|)` (`F.l1_loss`). Shapes must
/// be equal.
///
/// ```
/// use tensorscope::nn::l1_loss;
/// use tensorscope::{Device, Tensor};
/// let p = Tensor::from_slice(&[1.0f32, 2.0], &[2], Device::Cpu)?;
/// let t = Tensor::from_slice(&[0.0f32, 4.0], &[2], Device::Cpu)?;
/// assert_eq!(l1_loss(&p, &t)?.item::<f32>()?, 1.5);
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub fn l1_loss(pred: &Tensor, target: &Tensor) -> Result<Tensor> {
    l1_loss_with(pred, target, Reduction::Mean)
}

/// [`l1_loss`] with a [`Reduction`].
pub fn l1_loss_with(pred: &Tensor, target: &Tensor, reduction: Reduction) -> Result<Tensor> {
    if let Some(c) = crate::autocast::cast(&crate::autocast::L1_LOSS, &[Some(pred), Some(target)])?
    {
        return l1_loss_with(c.get(0), c.get(1), reduction);
    }
    let _op = crate::alloc::history::op_context("l1_loss");
    same_shape("l1_loss", pred, target)?;
    reduce(pred.sub(target)?.abs()?, reduction)
}

/// `|d| < limit ? 0.5 d^2 / scale : (|d| - 0.5 limit) * slope`, the shared
/// body of smooth L1 (`scale = limit = beta`, `slope = 1`) and Huber
/// (`scale = 1`, `limit = slope = delta`).
fn quadratic_then_linear(
    op: &'static str,
    pred: &Tensor,
    target: &Tensor,
    limit: f64,
    scale: f64,
    slope: f64,
) -> Result<Tensor> {
    same_shape(op, pred, target)?;
    if limit.is_nan() || limit < 0.0 {
        bail!(Error::arg(op, format!("needs a bound >= 0, got {limit}")));
    }
    let d = pred.sub(target)?;
    let ad = d.abs()?;
    if limit == 0.0 {
        // PyTorch's smooth L1 with beta 0 is the L1 loss (no division by 0).
        return ad.mul_scalar(slope);
    }
    let quad = d.square()?.mul_scalar(0.5 / scale)?;
    let lin = ad.sub_scalar(0.5 * limit)?.mul_scalar(slope)?;
    Tensor::where_cond(&ad.lt_scalar(limit)?, &quad, &lin)
}

/// Smooth L1 (`F.smooth_l1_loss(pred, target, beta=beta)`): quadratic
/// below `beta`, linear above, averaged. PyTorch's default `beta` is 1; 0
/// gives the L1 loss; a negative `beta` is an `Err`.
pub fn smooth_l1_loss(pred: &Tensor, target: &Tensor, beta: f64) -> Result<Tensor> {
    if let Some(c) = crate::autocast::cast(
        &crate::autocast::SMOOTH_L1_LOSS,
        &[Some(pred), Some(target)],
    )? {
        return smooth_l1_loss(c.get(0), c.get(1), beta);
    }
    let _op = crate::alloc::history::op_context("smooth_l1_loss");
    quadratic_then_linear("smooth_l1_loss", pred, target, beta, beta, 1.0)?.mean_all()
}

/// Huber (`F.huber_loss(pred, target, delta=delta)`): `0.5 d^2` below
/// `delta`, `delta (|d| - 0.5 delta)` above, averaged. PyTorch's default
/// `delta` is 1; a `delta` that is not positive is an `Err` (as in
/// PyTorch).
pub fn huber_loss(pred: &Tensor, target: &Tensor, delta: f64) -> Result<Tensor> {
    if let Some(c) =
        crate::autocast::cast(&crate::autocast::HUBER_LOSS, &[Some(pred), Some(target)])?
    {
        return huber_loss(c.get(0), c.get(1), delta);
    }
    let _op = crate::alloc::history::op_context("huber_loss");
    if delta.is_nan() || delta <= 0.0 {
        bail!(Error::arg(
            "huber_loss",
            format!("needs delta > 0, got {delta}")
        ));
    }
    quadratic_then_linear("huber_loss", pred, target, delta, 1.0, delta)?.mean_all()
}

/// Negative log-likelihood (`F.nll_loss`): `-mean(log_probs[i, target[i]])`
/// for `log_probs` `[N, C]` (a `log_softmax` output) and class indices
/// `target` `[N]` (i64 or i32). Every target must be a class: no index is
/// ignored (as [`cross_entropy`]'s default here; PyTorch ignores -100).
pub fn nll_loss(log_probs: &Tensor, target: &Tensor) -> Result<Tensor> {
    if let Some(c) =
        crate::autocast::cast(&crate::autocast::NLL_LOSS, &[Some(log_probs), Some(target)])?
    {
        return nll_loss(c.get(0), c.get(1));
    }
    let op = "nll_loss";
    let _op = crate::alloc::history::op_context(op);
    if log_probs.rank() != 2 || target.rank() != 1 || target.shape()[0] != log_probs.shape()[0] {
        bail!(Error::shape(
            op,
            log_probs.shape(),
            target.shape(),
            "needs log_probs [N, C] and target [N]"
        ));
    }
    let target = class_indices(op, target, "")?;
    log_probs
        .gather(1, &target.unsqueeze(1)?)
        .map_err(|e| e.reported_as(op))?
        .mean_all()?
        .neg()
}

/// Kullback-Leibler divergence (`F.kl_div(input, target)`, PyTorch's
/// default `reduction="mean"`, `log_target=False`): `input` holds log
/// probabilities, `target` probabilities; the pointwise loss is
/// `target (ln target - input)`, 0 where `target` is 0. PyTorch's
/// `batchmean` is [`kl_div_with`]'s `Sum` divided by the batch size.
pub fn kl_div(input: &Tensor, target: &Tensor) -> Result<Tensor> {
    kl_div_with(input, target, Reduction::Mean)
}

/// [`kl_div`] with a [`Reduction`].
pub fn kl_div_with(input: &Tensor, target: &Tensor, reduction: Reduction) -> Result<Tensor> {
    if let Some(c) = crate::autocast::cast(&crate::autocast::KL_DIV, &[Some(input), Some(target)])?
    {
        return kl_div_with(c.get(0), c.get(1), reduction);
    }
    let op = "kl_div";
    let _op = crate::alloc::history::op_context(op);
    same_shape(op, input, target)?;
    // Where `t` is 0 the loss and both gradients are 0 (PyTorch's), and
    // `ln` sees 1 there: no branch holds an infinity that a gradient could
    // multiply by 0.
    let pos = target.gt_scalar(0.0)?;
    let one = Tensor::ones(&[], target.dtype(), target.device())?;
    let safe = Tensor::where_cond(&pos, target, &one)?;
    let point = target.mul(&safe.log()?.sub(input)?)?;
    let zero = Tensor::zeros(&[], point.dtype(), point.device())?;
    reduce(Tensor::where_cond(&pos, &point, &zero)?, reduction)
}

/// Binary cross-entropy on probabilities (`F.binary_cross_entropy`):
/// `-mean(t ln p + (1 - t) ln(1 - p))`, each log clamped at -100 as in
/// PyTorch. Shapes must be equal; a `pred` outside [0, 1] is an `Err`
/// (checked on the values: a device synchronisation on a GPU). At `p`
/// exactly 0 or 1 the gradient stays finite: the saturated log's term
/// contributes 0 (PyTorch divides by `max(p (1 - p), 1e-12)` instead:
/// deviation 15). Prefer [`bce_with_logits`] on logits: it is exact where
/// this saturates.
pub fn binary_cross_entropy(pred: &Tensor, target: &Tensor) -> Result<Tensor> {
    if let Some(c) = crate::autocast::cast(
        &crate::autocast::BINARY_CROSS_ENTROPY,
        &[Some(pred), Some(target)],
    )? {
        return binary_cross_entropy(c.get(0), c.get(1));
    }
    let op = "binary_cross_entropy";
    let _op = crate::alloc::history::op_context(op);
    same_shape(op, pred, target)?;
    if pred.numel() > 0 {
        let (lo, hi) = (
            pred.detach()
                .min_all()?
                .to_dtype(DType::F64)?
                .item::<f64>()?,
            pred.detach()
                .max_all()?
                .to_dtype(DType::F64)?
                .item::<f64>()?,
        );
        if !(lo >= 0.0 && hi <= 1.0) {
            bail!(Error::arg(
                op,
                format!("every prediction must be in [0, 1], found values in [{lo}, {hi}]")
            ));
        }
    }
    // Each log at 1 where its argument is 0 (then -100): no infinity on a
    // branch whose gradient is multiplied by 0.
    let clamped_log = |v: &Tensor| -> Result<Tensor> {
        let pos = v.gt_scalar(0.0)?;
        let one = Tensor::ones(&[], v.dtype(), v.device())?;
        let low = Tensor::full(&[], -100.0, v.dtype(), v.device())?;
        let l = Tensor::where_cond(&pos, v, &one)?
            .log()?
            .clamp(Some(-100.0), None)?;
        Tensor::where_cond(&pos, &l, &low)
    };
    let lp = clamped_log(pred)?;
    let l1p = clamped_log(&pred.rsub_scalar(1.0)?)?;
    let pos = target.mul(&lp)?;
    let neg = target.rsub_scalar(1.0)?.mul(&l1p)?;
    pos.add(&neg)?.mean_all()?.neg()
}
