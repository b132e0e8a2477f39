//! Backward formulas of the elementwise and view ops. Each function takes the
//! op's inputs and its freshly computed output and, if a graph must be
//! recorded, returns the output with its node attached. Gradients are
//! computed with ordinary tensor ops (the engine runs them under `no_grad`),
//! so every formula works on every device.

use super::{attach, attach_view, needs_grad, BackwardFn, Saved};
use crate::backend::BinaryOp;
use crate::dtype::DType;
use crate::error::Result;
use crate::tensor::Tensor;

/// Sums `g` over the dimensions that were broadcast to reach it from `shape`,
/// and converts it to `dtype`: the gradient of a broadcast.
pub(crate) fn sum_to(g: &Tensor, shape: &[usize], dtype: DType) -> Result<Tensor> {
    let r = if g.shape() == shape {
        g.alias()
    } else {
        let lead = g.rank() - shape.len();
        let mut dims: Vec<isize> = (0..lead as isize).collect();
        for (i, &s) in shape.iter().enumerate() {
            if s == 1 && g.shape()[lead + i] != 1 {
                dims.push((lead + i) as isize);
            }
        }
        let s: Vec<isize> = shape.iter().map(|&d| d as isize).collect();
        if dims.is_empty() {
            g.reshape(&s)?
        } else {
            g.sum(&dims, true)?.reshape(&s)?
        }
    };
    r.to_dtype(dtype)
}

fn name_of(op: BinaryOp) -> &'static str {
    match op {
        BinaryOp::Add => "AddBackward",
        BinaryOp::Sub => "SubBackward",
        BinaryOp::Mul => "MulBackward",
        BinaryOp::Div => "DivBackward",
        BinaryOp::Pow => "PowBackward",
        BinaryOp::Maximum => "MaximumBackward",
        BinaryOp::Minimum => "MinimumBackward",
        BinaryOp::Atan2 => "Atan2Backward",
        BinaryOp::Fmod => "FmodBackward",
        BinaryOp::Remainder => "RemainderBackward",
        BinaryOp::FloorDivide => "FloorDivideBackward",
        _ => "CompareBackward",
    }
}

/// Gradient mask for maximum/minimum: 1 where `a` wins, 0.5 on ties (PyTorch
/// splits the gradient evenly), 0 where it loses.
fn winner_mask(a: &Tensor, b: &Tensor, max: bool) -> Result<Tensor> {
    let wins = if max { a.gt(b)? } else { a.lt(b)? };
    let ties = a.eq(b)?;
    wins.to_dtype(a.dtype())?
        .add(&ties.to_dtype(a.dtype())?.mul_scalar(0.5)?)
}

/// Records `out = op(a, b)`.
pub(crate) fn binary(op: BinaryOp, a: &Tensor, b: &Tensor, out: Tensor) -> Result<Tensor> {
    if op.is_comparison() || !needs_grad(&[a, b]) {
        return Ok(out);
    }
    let (sa, sb) = (a.shape().to_vec(), b.shape().to_vec());
    let (da, db) = (a.dtype(), b.dtype());
    let (ra, rb) = (a.requires_grad(), b.requires_grad());
    let name = name_of(op);
    let f: BackwardFn = match op {
        BinaryOp::Add => Box::new(move |g| {
            Ok(vec![
                ra.then(|| sum_to(g, &sa, da)).transpose()?,
                rb.then(|| sum_to(g, &sb, db)).transpose()?,
            ])
        }),
        BinaryOp::Sub => Box::new(move |g| {
            Ok(vec![
                ra.then(|| sum_to(g, &sa, da)).transpose()?,
                rb.then(|| sum_to(&g.neg()?, &sb, db)).transpose()?,
            ])
        }),
        BinaryOp::Mul => {
            let ka = if rb { Some(Saved::new(a, name)?) } else { None };
            let kb = if ra { Some(Saved::new(b, name)?) } else { None };
            Box::new(move |g| {
                let ga = match &kb {
                    Some(b) => Some(sum_to(&g.mul(b.get()?)?, &sa, da)?),
                    None => None,
                };
                let gb = match &ka {
                    Some(a) => Some(sum_to(&g.mul(a.get()?)?, &sb, db)?),
                    None => None,
                };
                Ok(vec![ga, gb])
            })
        }
        BinaryOp::Div => {
            let ka = if rb { Some(Saved::new(a, name)?) } else { None };
            let kb = Saved::new(b, name)?;
            Box::new(move |g| {
                let b = kb.get()?;
                let ga = if ra {
                    Some(sum_to(&g.div(b)?, &sa, da)?)
                } else {
                    None
                };
                let gb = match &ka {
                    // d(a/b)/db = -a / b^2
                    Some(a) => Some(sum_to(&g.mul(a.get()?)?.div(&b.mul(b)?)?.neg()?, &sb, db)?),
                    None => None,
                };
                Ok(vec![ga, gb])
            })
        }
        BinaryOp::Pow => {
            let ka = Saved::new(a, name)?;
            let kb = Saved::new(b, name)?;
            let ko = if rb {
                Some(Saved::new(&out, name)?)
            } else {
                None
            };
            Box::new(move |g| {
                let (a, b) = (ka.get()?, kb.get()?);
                // PyTorch's pow_backward_self and pow_backward_exponent:
                // d(a^b)/da = b * a^(b-1), 0 where b == 0 (so 0^0 has no
                // inf * 0); d(a^b)/db = a^b * ln(a), 0 where a == 0 and
                // b >= 0 (ln 0 is -inf, the limit is 0).
                let ga = if ra {
                    let d = b.mul(&a.pow(&b.sub_scalar(1.0)?)?)?;
                    let d = d.masked_fill(&b.eq_scalar(0.0)?, 0.0)?;
                    Some(sum_to(&g.mul(&d)?, &sa, da)?)
                } else {
                    None
                };
                let gb = match &ko {
                    Some(o) => {
                        let d = o.get()?.mul(&a.log()?)?;
                        let at0 = a.eq_scalar(0.0)?.mul(&b.ge_scalar(0.0)?)?;
                        let d = d.masked_fill(&at0, 0.0)?;
                        Some(sum_to(&g.mul(&d)?, &sb, db)?)
                    }
                    None => None,
                };
                Ok(vec![ga, gb])
            })
        }
        BinaryOp::Maximum | BinaryOp::Minimum => {
            let is_max = op == BinaryOp::Maximum;
            let ka = Saved::new(a, name)?;
            let kb = Saved::new(b, name)?;
            Box::new(move |g| {
                let (a, b) = (ka.get()?, kb.get()?);
                let ga = if ra {
                    Some(sum_to(&g.mul(&winner_mask(a, b, is_max)?)?, &sa, da)?)
                } else {
                    None
                };
                let gb = if rb {
                    Some(sum_to(&g.mul(&winner_mask(b, a, is_max)?)?, &sb, db)?)
                } else {
                    None
                };
                Ok(vec![ga, gb])
            })
        }
        BinaryOp::Atan2 => {
            let ka = Saved::new(a, name)?;
            let kb = Saved::new(b, name)?;
            Box::new(move |g| {
                let (a, b) = (ka.get()?, kb.get()?);
                // d atan2(a, b) = (b da - a db) / (a^2 + b^2); 0 at the
                // origin (where PyTorch's formula gives 0, not 0 * inf).
                let d = a.mul(a)?.add(&b.mul(b)?)?;
                let r = g.div(&d)?.masked_fill(&d.eq_scalar(0.0)?, 0.0)?;
                let ga = ra.then(|| sum_to(&r.mul(b)?, &sa, da)).transpose()?;
                let gb = rb.then(|| sum_to(&r.mul(a)?.neg()?, &sb, db)).transpose()?;
                Ok(vec![ga, gb])
            })
        }
        BinaryOp::Fmod | BinaryOp::Remainder => {
            // d/da = 1; d/db = -trunc(a / b) (fmod) or -(a // b)
            // (remainder: PyTorch's `div(rounding_mode="floor")`, which is
            // floor_divide, not floor of the rounded quotient).
            let k = if rb {
                Some((Saved::new(a, name)?, Saved::new(b, name)?))
            } else {
                None
            };
            let floor = op == BinaryOp::Remainder;
            Box::new(move |g| {
                let ga = ra.then(|| sum_to(g, &sa, da)).transpose()?;
                let gb = match &k {
                    Some((ka, kb)) => {
                        let (a, b) = (ka.get()?, kb.get()?);
                        let q = if floor {
                            a.floor_divide(b)?
                        } else {
                            a.div(b)?.trunc()?
                        };
                        Some(sum_to(&g.mul(&q)?.neg()?, &sb, db)?)
                    }
                    None => None,
                };
                Ok(vec![ga, gb])
            })
        }
        // Piecewise constant: zero gradients, as `floor` (PyTorch records a
        // node whose backward fails; GUIDE 10, deviation 24).
        BinaryOp::FloorDivide => Box::new(move |g| {
            Ok(vec![
                ra.then(|| sum_to(&g.zeros_like()?, &sa, da)).transpose()?,
                rb.then(|| sum_to(&g.zeros_like()?, &sb, db)).transpose()?,
            ])
        }),
        _ => return Ok(out),
    };
    Ok(attach(out, name, &[a, b], f))
}

/// Records `out = op(a, s)` for a scalar `s`.
pub(crate) fn binary_scalar(op: BinaryOp, a: &Tensor, s: f64, out: Tensor) -> Result<Tensor> {
    if op.is_comparison() || !needs_grad(&[a]) {
        return Ok(out);
    }
    let da = a.dtype();
    let name = name_of(op);
    let f: BackwardFn = match op {
        BinaryOp::Add | BinaryOp::Sub => Box::new(move |g| Ok(vec![Some(g.to_dtype(da)?)])),
        BinaryOp::Mul => Box::new(move |g| Ok(vec![Some(g.mul_scalar(s)?.to_dtype(da)?)])),
        BinaryOp::Div => Box::new(move |g| Ok(vec![Some(g.div_scalar(s)?.to_dtype(da)?)])),
        // x^0 is constant: the gradient is 0 (not 0 * 0^-1 = NaN at x = 0).
        BinaryOp::Pow if s == 0.0 => {
            Box::new(move |g| Ok(vec![Some(g.zeros_like()?.to_dtype(da)?)]))
        }
        BinaryOp::Pow => {
            let ka = Saved::new(a, name)?;
            Box::new(move |g| {
                Ok(vec![Some(
                    g.mul(&ka.get()?.pow_scalar(s - 1.0)?.mul_scalar(s)?)?
                        .to_dtype(da)?,
                )])
            })
        }
        BinaryOp::Maximum | BinaryOp::Minimum => {
            let ka = Saved::new(a, name)?;
            let is_max = op == BinaryOp::Maximum;
            Box::new(move |g| {
                let a = ka.get()?;
                let wins = if is_max {
                    a.gt_scalar(s)?
                } else {
                    a.lt_scalar(s)?
                };
                let m = wins
                    .to_dtype(a.dtype())?
                    .add(&a.eq_scalar(s)?.to_dtype(a.dtype())?.mul_scalar(0.5)?)?;
                Ok(vec![Some(g.mul(&m)?.to_dtype(da)?)])
            })
        }
        BinaryOp::Atan2 => {
            let ka = Saved::new(a, name)?;
            Box::new(move |g| {
                let a = ka.get()?;
                let d = a.mul(a)?.add_scalar(s * s)?;
                let r = g.div(&d)?.masked_fill(&d.eq_scalar(0.0)?, 0.0)?;
                Ok(vec![Some(r.mul_scalar(s)?.to_dtype(da)?)])
            })
        }
        BinaryOp::Fmod | BinaryOp::Remainder => Box::new(move |g| Ok(vec![Some(g.to_dtype(da)?)])),
        BinaryOp::FloorDivide => Box::new(move |g| Ok(vec![Some(g.zeros_like()?.to_dtype(da)?)])),
        _ => return Ok(out),
    };
    Ok(attach(out, name, &[a], f))
}

/// Records `out = where(cond, a, b)`.
pub(crate) fn where_cond(cond: &Tensor, a: &Tensor, b: &Tensor, out: Tensor) -> Result<Tensor> {
    if !needs_grad(&[a, b]) {
        return Ok(out);
    }
    let kc = Saved::new(cond, "WhereBackward")?;
    let (sa, sb, da, db) = (a.shape().to_vec(), b.shape().to_vec(), a.dtype(), b.dtype());
    let (ra, rb) = (a.requires_grad(), b.requires_grad());
    let f: BackwardFn = Box::new(move |g| {
        let c = kc.get()?;
        let z = g.zeros_like()?;
        let ga = if ra {
            Some(sum_to(&Tensor::where_cond(c, g, &z)?, &sa, da)?)
        } else {
            None
        };
        let gb = if rb {
            Some(sum_to(&Tensor::where_cond(c, &z, g)?, &sb, db)?)
        } else {
            None
        };
        Ok(vec![ga, gb])
    });
    Ok(attach(out, "WhereBackward", &[a, b], f))
}

/// Records a dtype conversion or copy: the gradient goes back converted.
pub(crate) fn cast(a: &Tensor, out: Tensor, name: &'static str) -> Result<Tensor> {
    if !needs_grad(&[a]) || !out.dtype().is_float() {
        return Ok(out);
    }
    let (da, dev) = (a.dtype(), a.device());
    Ok(attach(
        out,
        name,
        &[a],
        Box::new(move |g| Ok(vec![Some(g.to_dtype(da)?.to_device(dev)?)])),
    ))
}

/// Records a view whose gradient is `back(g)` (e.g. a transpose back, or a
/// reshape to the input's shape).
pub(crate) fn view<F>(a: &Tensor, out: Tensor, name: &'static str, back: F) -> Tensor
where
    F: Fn(&Tensor) -> Result<Tensor> + Send + Sync + 'static,
{
    if !needs_grad(&[a]) {
        return out;
    }
    attach_view(out, name, a, Box::new(move |g| Ok(vec![Some(back(g)?)])))
}

/// Records a view that picks part of its input (narrow, slice, select, a
/// diagonal...): the gradient is zeros of the input's shape with `g` written
/// through the same view, `pick` applied to the zeros.
pub(crate) fn pick<F>(a: &Tensor, out: Tensor, name: &'static str, pick: F) -> Tensor
where
    F: Fn(&Tensor) -> Result<Tensor> + Send + Sync + 'static,
{
    let (shape, dt) = (a.shape().to_vec(), a.dtype());
    view(a, out, name, move |g| {
        let z = Tensor::zeros(&shape, dt, g.device())?;
        let mut part = pick(&z)?;
        part.copy_(g)?;
        Ok(z)
    })
}
