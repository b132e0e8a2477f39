//! The fused LayerNorm / RMSNorm op with its autograd node, shared by
//! [`LayerNorm`](crate::nn::LayerNorm), [`RMSNorm`](crate::nn::RMSNorm) and
//! [`rms_norm`](crate::nn::rms_norm): one kernel forward and one backward on
//! the CPU and on CUDA (`backend::nn`).
//!
//! Memory: the forward allocates the output and, only when a gradient will
//! be needed, the per-row statistics (`rstd`, and `mean` for LayerNorm: one
//! f32 each per row, f64 for f64 inputs), which the node saves with the input
//! and the weight. The backward allocates exactly the gradients it returns.

use crate::autograd::{attach, needs_grad, no_grad, Saved};
use crate::backend::nn::{self as fused, NormGrads, NormKind};
use crate::backend::Operand;
use crate::dtype::DType;
use crate::error::{bail, Error, Result};
use crate::tensor::Tensor;

/// The dtype of the saved statistics: f64 for f64 inputs, f32 otherwise.
fn stats_dtype(dt: DType) -> DType {
    if dt == DType::F64 {
        DType::F64
    } else {
        DType::F32
    }
}

/// `(x - mean) * rstd * w + b` (LayerNorm) or `x * rstd * w` (RMSNorm) over
/// the trailing features of `x` (`cols` of them: the product of the
/// normalised shape, which the caller has checked), recorded for autograd.
/// `w` and `b` (shape: the normalised shape) must have `x`'s dtype and
/// device; `x` must not be empty.
pub(crate) fn fused_norm(
    op: &'static str,
    x: &Tensor,
    w: Option<&Tensor>,
    b: Option<&Tensor>,
    cols: usize,
    eps: f64,
    kind: NormKind,
) -> Result<Tensor> {
    let (dev, dt) = (x.device(), x.dtype());
    for t in w.iter().chain(b.iter()) {
        if t.device() != dev {
            bail!(Error::DeviceMismatch {
                op,
                lhs: dev,
                rhs: t.device(),
            });
        }
        // The kernels read `cols` elements of each: a smaller weight would
        // be read past its end, so this is checked even though every
        // caller checks the shape first.
        if t.dtype() != dt || t.numel() != cols {
            bail!(Error::shape(
                op,
                x.shape(),
                t.shape(),
                format!("a weight or bias of {cols} {dt} elements, one per normalised element")
            ));
        }
    }
    let rows = x.numel() / cols;
    let rc = [rows as isize, cols as isize];
    let x = x.contiguous()?;
    let w = w.map(|t| t.contiguous()).transpose()?;
    let b = b.map(|t| t.contiguous()).transpose()?;
    let mut inputs = vec![&x];
    inputs.extend(w.iter());
    inputs.extend(b.iter());
    let grad = needs_grad(&inputs);
    let y = Tensor::alloc(x.shape(), dt, dev)?;
    let stats = if grad {
        let rstd = Tensor::alloc(&[rows], stats_dtype(dt), dev)?;
        let mean = match kind {
            NormKind::Layer => Some(Tensor::alloc(&[rows], stats_dtype(dt), dev)?),
            NormKind::Rms => None,
        };
        Some((rstd, mean))
    } else {
        None
    };
    no_grad(|| -> Result<()> {
        let (xv, yv) = (x.view(&rc)?, y.view(&rc)?);
        let (ow, ob) = (w.as_ref().map(Operand::of), b.as_ref().map(Operand::of));
        let os = stats
            .as_ref()
            .map(|(r, m)| (Operand::of(r), m.as_ref().map(Operand::of)));
        fused::norm_forward(
            &Operand::of(&xv),
            ow.as_ref(),
            ob.as_ref(),
            &Operand::of(&yv),
            os.as_ref().map(|(r, m)| (r, m.as_ref())),
            eps,
            kind,
        )
    })?;
    let Some((rstd, mean)) = stats else {
        return Ok(y);
    };
    let name = match kind {
        NormKind::Layer => "NativeLayerNormBackward",
        NormKind::Rms => "RmsNormBackward",
    };
    let sx = Saved::new(&x, name)?;
    let sw = w.as_ref().map(|t| Saved::new(t, name)).transpose()?;
    let sr = Saved::new(&rstd, name)?;
    let sm = mean.as_ref().map(|t| Saved::new(t, name)).transpose()?;
    let need_x = x.requires_grad();
    let need_w = w.as_ref().is_some_and(|t| t.requires_grad());
    let need_b = b.as_ref().is_some_and(|t| t.requires_grad());
    let (has_w, has_b) = (w.is_some(), b.is_some());
    let p_shape = w.as_ref().or(b.as_ref()).map(|t| t.shape().to_vec());
    Ok(attach(
        y,
        name,
        &inputs,
        Box::new(move |g: &Tensor| {
            let (x, rstd) = (sx.get()?, sr.get()?);
            let w = sw.as_ref().map(|s| s.get()).transpose()?;
            let mean = sm.as_ref().map(|s| s.get()).transpose()?;
            no_grad(|| {
                let g = g.to_dtype(dt)?.contiguous()?;
                let alloc = |on: bool, shape: &[usize]| -> Result<Option<Tensor>> {
                    on.then(|| Tensor::alloc(shape, dt, dev)).transpose()
                };
                let ps = p_shape.as_deref().unwrap_or(&[]);
                let dx = alloc(need_x, x.shape())?;
                let dw = alloc(need_w, ps)?;
                let db = alloc(need_b, ps)?;
                let (gv, xv) = (g.view(&rc)?, x.view(&rc)?);
                let dxv = dx.as_ref().map(|t| t.view(&rc)).transpose()?;
                let (ogv, oxv, orstd) = (Operand::of(&gv), Operand::of(&xv), Operand::of(rstd));
                let ow = w.map(Operand::of);
                let om = mean.map(Operand::of);
                let odx = dxv.as_ref().map(Operand::of);
                let (odw, odb) = (dw.as_ref().map(Operand::of), db.as_ref().map(Operand::of));
                fused::norm_backward(&NormGrads {
                    dy: &ogv,
                    x: &oxv,
                    w: ow.as_ref(),
                    mean: om.as_ref(),
                    rstd: &orstd,
                    dx: odx.as_ref(),
                    dw: odw.as_ref(),
                    db: odb.as_ref(),
                })?;
                let mut grads = vec![dx];
                if has_w {
                    grads.push(dw);
                }
                if has_b {
                    grads.push(db);
                }
                Ok(grads)
            })
        }),
    ))
}
