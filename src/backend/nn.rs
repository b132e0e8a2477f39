//! Dispatch of the fused nn kernels: LayerNorm and RMSNorm forward and
//! backward, and cross-entropy from logits.
//!
//! Each function locks the storages it touches (shared for inputs, exclusive
//! for outputs), then runs the device's kernel. The norms have a kernel
//! on both devices; the fused cross-entropy is
//! CPU-only (CUDA answers [`Error::DeviceUnavailable`] and the loss composes
//! log_softmax and a gather there instead).

use super::{cpu, cuda, device_of, Operand};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::storage::{lock, Storage};

/// Which normalisation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NormKind {
    /// `(x - mean) / sqrt(var + eps) * w + b`.
    Layer,
    /// `x / sqrt(mean(x^2) + eps) * w` (no mean, no bias).
    Rms,
}

/// The operands of a fused norm's backward pass (dense; `mean` is `None`
/// for RMSNorm; each output is optional).
pub(crate) struct NormGrads<'a> {
    pub dy: &'a Operand<'a>,
    pub x: &'a Operand<'a>,
    pub w: Option<&'a Operand<'a>>,
    pub mean: Option<&'a Operand<'a>>,
    pub rstd: &'a Operand<'a>,
    pub dx: Option<&'a Operand<'a>>,
    pub dw: Option<&'a Operand<'a>>,
    pub db: Option<&'a Operand<'a>>,
}

/// The options of the fused cross-entropy (the op layer's
/// `CrossEntropyOptions`, the class weight aside).
#[derive(Clone, Copy, Debug)]
pub(crate) struct CeConfig {
    /// Targets equal to this count for nothing.
    pub ignore_index: Option<i64>,
    /// `ε` in `[0, 1]`.
    pub label_smoothing: f64,
}

/// What the forward pass found: the sum of the per-row losses and the mean's
/// denominator `D = Σ_i w_{t_i}` over the targets not ignored (their count
/// without a class weight), both in f64.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CeSums {
    pub loss: f64,
    pub weight: f64,
}

/// A target that is neither a class in `0..C` nor the ignored index.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BadTarget(pub i64);

/// The incoming gradient of the backward pass: one value for a reduced loss
/// (with the mean's `1 / D` as its scale), or dense `[rows]` per-row
/// gradients (`Reduction::None`).
pub(crate) enum CeGrad<'a> {
    /// `dL/dloss_i` is `scale` times the one element of this operand (of the
    /// logits' dtype) for every row.
    Scalar(&'a Operand<'a>, f64),
    /// `dL/dloss_i` per row.
    PerRow(&'a Operand<'a>),
}

/// The storages of the operands present.
fn storages<'a>(ops: &[Option<&'a Operand<'a>>]) -> Vec<&'a Storage> {
    ops.iter().flatten().map(|o| o.storage).collect()
}

/// The operands present.
fn present<'a>(ops: &[Option<&'a Operand<'a>>]) -> Vec<&'a Operand<'a>> {
    ops.iter().flatten().copied().collect()
}

/// Fused LayerNorm (`kind` Layer) or RMSNorm forward over the last dimension
/// of dense `x` into dense `y`; `stats` is `(rstd, mean)` (`mean` for
/// LayerNorm only), written when given. See `cpu::norm::norm_forward`.
pub(crate) fn norm_forward(
    x: &Operand,
    w: Option<&Operand>,
    b: Option<&Operand>,
    y: &Operand,
    stats: Option<(&Operand, Option<&Operand>)>,
    eps: f64,
    kind: NormKind,
) -> Result<()> {
    let op = match kind {
        NormKind::Layer => "layer_norm",
        NormKind::Rms => "rms_norm",
    };
    let (rstd, mean) = match stats {
        Some((r, m)) => (Some(r), m),
        None => (None, None),
    };
    let d = device_of(op, &present(&[Some(x), w, b, Some(y), rstd, mean]))?;
    let _l = lock(
        &storages(&[Some(x), w, b]),
        &storages(&[Some(y), rstd, mean]),
    );
    match (d, kind) {
        (Device::Cpu, _) => {
            cpu::norm::norm_forward(x, w, b, y, stats, eps, kind);
            Ok(())
        }
        (Device::Cuda(_), NormKind::Layer) => cuda::layer_norm(x, w, b, y, mean, rstd, eps),
        (Device::Cuda(_), NormKind::Rms) => cuda::rms_norm(x, w, y, rstd, eps),
    }
}

/// Fused backward of [`norm_forward`] (RMSNorm when `a.mean` is `None`).
pub(crate) fn norm_backward(a: &NormGrads) -> Result<()> {
    let op = if a.mean.is_some() {
        "layer_norm_backward"
    } else {
        "rms_norm_backward"
    };
    let ins = [Some(a.dy), Some(a.x), a.w, a.mean, Some(a.rstd)];
    let outs = [a.dx, a.dw, a.db];
    let d = device_of(op, &[present(&ins), present(&outs)].concat())?;
    let _l = lock(&storages(&ins), &storages(&outs));
    match (d, a.mean) {
        (Device::Cpu, _) => {
            cpu::norm::norm_backward(a);
            Ok(())
        }
        (Device::Cuda(_), Some(mean)) => {
            cuda::layer_norm_backward(a.dy, a.x, a.w, mean, a.rstd, a.dx, a.dw, a.db)
        }
        (Device::Cuda(_), None) => cuda::rms_norm_backward(a.dy, a.x, a.w, a.rstd, a.dx, a.dw),
    }
}

fn ce_unavailable(device: Device) -> Error {
    Error::DeviceUnavailable {
        op: "cross_entropy",
        device,
        reason: "the fused cross-entropy is a CPU kernel (the loss composes log_softmax on CUDA)"
            .into(),
    }
}

/// Fused cross-entropy forward (CPU only): dense logits `[rows, C]`, dense
/// i64 targets `[rows]`; see `cpu::cross_entropy::cross_entropy`. A target
/// out of range is the `IndexOutOfRange` error of `op`.
pub(crate) fn cross_entropy(
    x: &Operand,
    target: &Operand,
    weight: Option<&Operand>,
    per_row: Option<&Operand>,
    lse: Option<&Operand>,
    cfg: CeConfig,
) -> Result<CeSums> {
    const OP: &str = "cross_entropy";
    let ins = [Some(x), Some(target), weight];
    let outs = [per_row, lse];
    let d = device_of(OP, &[present(&ins), present(&outs)].concat())?;
    if d != Device::Cpu {
        return Err(ce_unavailable(d));
    }
    let _l = lock(&storages(&ins), &storages(&outs));
    let size = x.layout.shape()[1];
    cpu::cross_entropy::cross_entropy(x, target, weight, per_row, lse, cfg).map_err(
        |BadTarget(index)| Error::IndexOutOfRange {
            op: OP,
            index,
            dim: 1,
            size,
        },
    )
}

/// Fused cross-entropy backward (CPU only) into dense `dx`.
pub(crate) fn cross_entropy_backward(
    x: &Operand,
    target: &Operand,
    weight: Option<&Operand>,
    lse: &Operand,
    grad: &CeGrad,
    dx: &Operand,
    cfg: CeConfig,
) -> Result<()> {
    let g = match grad {
        CeGrad::PerRow(o) | CeGrad::Scalar(o, _) => Some(*o),
    };
    let ins = [Some(x), Some(target), weight, Some(lse), g];
    let d = device_of(
        "cross_entropy_backward",
        &[present(&ins), vec![dx]].concat(),
    )?;
    if d != Device::Cpu {
        return Err(ce_unavailable(d));
    }
    let _l = lock(&storages(&ins), &[dx.storage]);
    cpu::cross_entropy::cross_entropy_backward(x, target, weight, lse, grad, dx, cfg);
    Ok(())
}
