//! Backward formulas of the elementwise unary ops: generated from the table
//! in `src/unary_table.rs`, plus `clamp` (which takes bounds) and the
//! helpers the table's formulas call.

use super::{attach, needs_grad, BackwardFn, Saved};
use crate::backend::{Operand, UnaryOp};
use crate::error::Result;
use crate::tensor::Tensor;

/// ReLU's backward from its output `y`: 0 where `y <= 0`, else `g` (a NaN
/// output passes its gradient on, as PyTorch's `threshold_backward` does).
/// One fused pass on the CPU; elsewhere a composite of ops every device has.
pub(crate) fn relu_backward(g: &Tensor, y: &Tensor) -> Result<Tensor> {
    if y.device().is_cpu() && g.device().is_cpu() && g.shape() == y.shape() {
        let g = g.to_dtype(y.dtype())?;
        let out = Tensor::alloc(y.shape(), y.dtype(), y.device())?;
        crate::backend::relu_backward(&Operand::of(&g), &Operand::of(y), &Operand::of(&out))?;
        return Ok(out);
    }
    let z = g.zeros_like()?;
    Tensor::where_cond(&y.le_scalar(0.0)?, &z, g)
}

/// d/dx gelu(x) = 0.5 (1 + erf(x / sqrt 2)) + x exp(-x^2 / 2) / sqrt(2 pi).
fn gelu_derivative(x: &Tensor) -> Result<Tensor> {
    let cdf = x
        .mul_scalar(std::f64::consts::FRAC_1_SQRT_2)?
        .erf()?
        .add_scalar(1.0)?
        .mul_scalar(0.5)?;
    let pdf = x
        .mul(x)?
        .mul_scalar(-0.5)?
        .exp()?
        .mul_scalar(1.0 / (2.0 * std::f64::consts::PI).sqrt())?;
    cdf.add(&x.mul(&pdf)?)
}

/// Clamp's backward, as PyTorch 2.15 with scalar bounds: `g` where
/// `lo < x < hi` strictly (an absent bound, NaN, lets everything through on
/// its side), 0 elsewhere: an input at a bound gets no gradient.
fn clamp_backward(g: &Tensor, x: &Tensor, lo: f64, hi: f64) -> Result<Tensor> {
    let mut m = x.ones_like()?;
    if !lo.is_nan() {
        m = m.mul(&x.gt_scalar(lo)?.to_dtype(x.dtype())?)?;
    }
    if !hi.is_nan() {
        m = m.mul(&x.lt_scalar(hi)?.to_dtype(x.dtype())?)?;
    }
    g.mul(&m)
}

macro_rules! unary_backward {
    ($($variant:ident $name:ident $inplace:ident $out:ident $domain:ident $doc:literal
       $node:literal $saves:ident ($($arg:ident),*) $body:block);* $(;)?) => {
        /// Records `out = op(a)`.
        pub(crate) fn unary(op: UnaryOp, a: &Tensor, out: Tensor) -> Result<Tensor> {
            if !needs_grad(&[a]) {
                return Ok(out);
            }
            let da = a.dtype();
            let (name, f): (&'static str, BackwardFn) = match op {
                $(UnaryOp::$variant => {
                    ($node, unary_backward!(@fn $saves ($($arg),*) $body, a, &out, $node, da))
                })*
                UnaryOp::Clamp(lo, hi) => {
                    let kx = Saved::new(a, "ClampBackward")?;
                    let f: BackwardFn = Box::new(move |g| {
                        Ok(vec![Some(clamp_backward(g, kx.get()?, lo, hi)?.to_dtype(da)?)])
                    });
                    ("ClampBackward", f)
                }
            };
            Ok(attach(out, name, &[a], f))
        }
    };
    (@fn grad ($g:ident) $body:block, $a:expr, $out:expr, $node:literal, $da:ident) => {
        Box::new(move |$g: &Tensor| {
            let d: Result<Tensor> = $body;
            Ok(vec![Some(d?.to_dtype($da)?)])
        })
    };
    (@fn $which:ident ($g:ident, $v:ident) $body:block, $a:expr, $out:expr, $node:literal, $da:ident) => {{
        let saved = Saved::new(unary_backward!(@saved $which, $a, $out), $node)?;
        Box::new(move |$g: &Tensor| {
            let $v = saved.get()?;
            let d: Result<Tensor> = $body;
            Ok(vec![Some(d?.to_dtype($da)?)])
        })
    }};
    (@saved output, $a:expr, $out:expr) => {
        $out
    };
    (@saved input, $a:expr, $out:expr) => {
        $a
    };
}
crate::unary_table::unary_table!(unary_backward);
