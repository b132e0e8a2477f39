//! Backward formulas of the elementwise unary ops: generated from the table
//! in `src/unary_table.rs`, plus `clamp` (which takes bounds) and the
//! helpers the table's formulas call.

use super::{attach, needs_grad, BackwardFn, Saved};
use crate::backend::{Operand, UnaryGrad, UnaryOp};
use crate::error::Result;
use crate::tensor::Tensor;

/// ReLU's backward from its output `y`: 0 where `y <= 0`, else `g` (a NaN
/// output passes its gradient on, as PyTorch's `threshold_backward` does).
/// One fused pass on the CPU; elsewhere a composite of ops every device has.
pub(crate) fn relu_backward(g: &Tensor, y: &Tensor) -> Result<Tensor> {
    cpu_fused(g, y, crate::backend::relu_backward, || {
        let z = g.zeros_like()?;
        Tensor::where_cond(&y.le_scalar(0.0)?, &z, g)
    })
}

/// `g * which(saved)`: one fused pass on the CPU (`backend::unary_grad`),
/// `composite` (ops every device has) elsewhere or for mixed shapes.
fn fused_grad(
    which: UnaryGrad,
    g: &Tensor,
    saved: &Tensor,
    composite: impl FnOnce() -> Result<Tensor>,
) -> Result<Tensor> {
    cpu_fused(
        g,
        saved,
        |g, s, out| crate::backend::unary_grad(which, g, s, out),
        composite,
    )
}

/// A backward of `g` and a saved tensor through a CPU-only fused `kernel`
/// (writing a fresh tensor of the saved one's shape and dtype) when both
/// are float CPU tensors of one shape, else through `composite`.
fn cpu_fused(
    g: &Tensor,
    saved: &Tensor,
    kernel: impl FnOnce(&Operand, &Operand, &Operand) -> Result<()>,
    composite: impl FnOnce() -> Result<Tensor>,
) -> Result<Tensor> {
    if saved.device().is_cpu()
        && g.device().is_cpu()
        && g.shape() == saved.shape()
        && saved.dtype().is_float()
    {
        let g = g.to_dtype(saved.dtype())?;
        let out = Tensor::alloc(saved.shape(), saved.dtype(), saved.device())?;
        kernel(&Operand::of(&g), &Operand::of(saved), &Operand::of(&out))?;
        return Ok(out);
    }
    composite()
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

/// d/dx silu(x) = s (1 + x (1 - s)), s = sigmoid(x).
fn silu_derivative(x: &Tensor) -> Result<Tensor> {
    let s = x.sigmoid()?;
    let mut d = s.neg()?;
    d.add_scalar_(1.0)?.mul_(x)?.add_scalar_(1.0)?.mul_(&s)?;
    Ok(d)
}

/// d/dx softplus(x) = sigmoid(x), and 1 above the threshold 20 (PyTorch's
/// `softplus_backward`).
fn softplus_derivative(x: &Tensor) -> Result<Tensor> {
    let s = x.sigmoid()?;
    Tensor::where_cond(&x.gt_scalar(20.0)?, &s.ones_like()?, &s)
}

/// d/dx of `x/2 (1 + tanh u)`, `u = k (x + c x^3)`: PyTorch's
/// `gelu_backward` with `approximate="tanh"`,
/// `(1 + t)/2 + x/2 (1 - t^2) k (1 + 3 c x^2)` with `t = tanh u`.
fn gelu_tanh_derivative(x: &Tensor) -> Result<Tensor> {
    const K: f64 = 0.797_884_560_802_865_4;
    const C: f64 = 0.044_715;
    let x2 = x.square()?;
    let mut u = x2.mul_scalar(C)?;
    u.add_scalar_(1.0)?.mul_(x)?.mul_scalar_(K)?;
    let t = u.tanh()?;
    // right = x/2 (1 - t^2) k (1 + 3 c x^2)
    let mut right = t.square()?;
    right
        .neg_()?
        .add_scalar_(1.0)?
        .mul_(x)?
        .mul_scalar_(0.5 * K)?;
    let mut poly = x2;
    poly.mul_scalar_(3.0 * C)?.add_scalar_(1.0)?;
    right.mul_(&poly)?;
    let mut left = t;
    left.add_scalar_(1.0)?.mul_scalar_(0.5)?;
    left.add_(&right)?;
    Ok(left)
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
