//! ULP tests of every kernel at every dispatch level this CPU has.
//!
//! Each kernel runs over its sweep inside `simd::run_at(level, ..)`, as the
//! unary ops run it, so the code under test is the vectorised code of that
//! level. Levels the CPU lacks print a skip line.

use super::{float32 as k32, float64 as k64};
use crate::backend::cpu::num::{erf_precise, gelu_f64};
use crate::backend::cpu::simd::{run_at, Level};

/// Inputs for f32: a stride through every bit pattern (so every binade,
/// both signs, subnormals, infinities and NaNs), a dense linear sweep of
/// [-30, 30], and the special values.
fn sweep32() -> Vec<f32> {
    let mut v: Vec<f32> = (0..=u32::MAX).step_by(32_771).map(f32::from_bits).collect();
    let n = 240_000;
    v.extend((0..n).map(|i| -30.0 + 60.0 * i as f32 / n as f32));
    v.extend([
        0.0,
        -0.0,
        f32::MIN_POSITIVE,
        -f32::MIN_POSITIVE,
        1e-45,
        -1e-45,
        f32::MAX,
        f32::MIN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        0.625,
        -0.625,
        1.0,
        -1.0,
        20.0,
        20.000_002,
        88.72,
        88.73,
        -103.9,
        -104.1,
        4096.0,
        -9.5,
        -13.5,
    ]);
    v
}

fn sweep64() -> Vec<f64> {
    let mut v: Vec<f64> = (0..200_000u64)
        .map(|i| f64::from_bits(i.wrapping_mul(0x0001_4f8b_588e_368f)))
        .collect();
    let n = 200_000;
    v.extend((0..n).map(|i| -40.0 + 80.0 * i as f64 / n as f64));
    v.extend([
        0.0,
        -0.0,
        f64::MIN_POSITIVE,
        5e-324,
        -5e-324,
        f64::MAX,
        f64::MIN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        0.625,
        -0.625,
        20.0,
        709.78,
        709.79,
        -745.1,
        -745.3,
    ]);
    v
}

/// Distance of `got` from the exact `want`, in ulps of `want` rounded to
/// f32 (the spacing at a subnormal is the smallest subnormal). NaN matches
/// NaN only; an infinity matches only itself.
fn ulps32(got: f32, want: f64) -> f64 {
    if want.is_nan() || got.is_nan() {
        return if want.is_nan() && got.is_nan() {
            0.0
        } else {
            f64::INFINITY
        };
    }
    let w = want as f32;
    if w.is_infinite() || got.is_infinite() {
        return if got == w { 0.0 } else { f64::INFINITY };
    }
    let a = w.abs();
    let spacing = if a == f32::MAX {
        (a - f32::from_bits(a.to_bits() - 1)) as f64
    } else {
        (f32::from_bits(a.to_bits() + 1) - a) as f64
    };
    (got as f64 - want).abs() / spacing
}

fn ulps64(got: f64, want: f64) -> f64 {
    if want.is_nan() || got.is_nan() {
        return if want.is_nan() && got.is_nan() {
            0.0
        } else {
            f64::INFINITY
        };
    }
    if want.is_infinite() || got.is_infinite() {
        return if got == want { 0.0 } else { f64::INFINITY };
    }
    let a = want.abs();
    let spacing = if a == f64::MAX {
        a - f64::from_bits(a.to_bits() - 1)
    } else {
        f64::from_bits(a.to_bits() + 1) - a
    };
    (got - want).abs() / spacing
}

/// (name, kernel, f64 reference, ulps, cond): the bound at `x` is
/// `ulps + cond * kappa(x)`, with `kappa` the condition number
/// `|x f'(x) / f(x)|` of the function. `cond` is 0 for the kernels that
/// reduce their argument exactly (exp, log, ...) and 2 for the compositions
/// (silu, gelu, gelu_tanh) whose inner argument (`-x`, `x/sqrt 2`,
/// `sqrt(2/pi)(x + 0.044715 x^3)`) is itself rounded before the outer
/// function amplifies that rounding: no implementation in the same
/// precision avoids it.
type Case32 = (&'static str, fn(f32) -> f32, fn(f64) -> f64, f64, f64);
type Case64 = (&'static str, fn(f64) -> f64, fn(f64) -> f64, f64, f64);

/// Derivatives (names ending in `'`) are sums of O(1) terms that cancel
/// near the roots of the derivative (gelu' at -0.75) and where a factor
/// saturates (silu' far right): there they are held to an absolute 16 eps
/// instead of ulps of the (small) result, as `torch.autograd.gradcheck`
/// holds gradients to an absolute tolerance.
const DERIV_ABS_32: f64 = 16.0 * f32::EPSILON as f64;
const DERIV_ABS_64: f64 = 16.0 * f64::EPSILON;

/// `|x f'(x) / f(x)|` by a central difference of the reference.
fn kappa(r: fn(f64) -> f64, x: f64, h: f64) -> f64 {
    let y = r(x);
    if x == 0.0 || y == 0.0 || !y.is_finite() || !x.is_finite() {
        return 0.0;
    }
    let d = (r(x * (1.0 + h)) - r(x * (1.0 - h))) / (2.0 * h);
    (d / y).abs()
}

fn sigmoid_ref(x: f64) -> f64 {
    let e = (-x.abs()).exp();
    if x >= 0.0 {
        1.0 / (1.0 + e)
    } else {
        e / (1.0 + e)
    }
}
fn softplus_ref(x: f64) -> f64 {
    if x > 20.0 {
        x
    } else {
        x.max(0.0) + (-x.abs()).exp().ln_1p()
    }
}
fn gelu_tanh_ref(x: f64) -> f64 {
    let u = 0.797_884_560_802_865_4 * (x + 0.044_715 * x * x * x);
    x * sigmoid_ref(2.0 * u)
}

fn silu_grad_ref(x: f64) -> f64 {
    let s = sigmoid_ref(x);
    s * (1.0 + x * (1.0 - s))
}
fn softplus_grad_ref(x: f64) -> f64 {
    if x > 20.0 {
        1.0
    } else {
        sigmoid_ref(x)
    }
}
fn gelu_grad_ref(x: f64) -> f64 {
    use crate::backend::cpu::num::erfc_precise;
    let z = x * std::f64::consts::FRAC_1_SQRT_2;
    let cdf = if x >= 0.0 {
        0.5 * (1.0 + erf_precise(z))
    } else {
        0.5 * erfc_precise(-z)
    };
    cdf + x * (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt()
}
fn gelu_tanh_grad_ref(x: f64) -> f64 {
    let (k, c) = (0.797_884_560_802_865_4, 0.044_715);
    let t = (k * (x + c * x * x * x)).tanh();
    // 1 - t^2 is 0 beyond |x| = 30: the clamp avoids 0 * inf only.
    let x = x.clamp(-30.0, 30.0);
    0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * c * x * x)
}
fn erf_grad_ref(x: f64) -> f64 {
    std::f64::consts::FRAC_2_SQRT_PI * (-x * x).exp()
}

fn cases32() -> Vec<Case32> {
    vec![
        ("exp", k32::exp, f64::exp, 1.0, 0.0),
        ("log", k32::log, f64::ln, 1.0, 0.0),
        ("log1p", k32::log1p, f64::ln_1p, 2.0, 0.0),
        ("tanh", k32::tanh, f64::tanh, 2.0, 0.0),
        ("sigmoid", k32::sigmoid, sigmoid_ref, 3.0, 0.0),
        ("silu", k32::silu, |x| x * sigmoid_ref(x), 2.0, 2.0),
        ("softplus", k32::softplus, softplus_ref, 2.0, 0.0),
        ("erf", k32::erf, erf_precise, 3.0, 0.0),
        ("gelu", k32::gelu, gelu_f64, 4.0, 2.0),
        ("gelu_tanh", k32::gelu_tanh, gelu_tanh_ref, 4.0, 2.0),
        ("tanh'", k32::tanh_grad, |y| 1.0 - y * y, 4.0, 2.0),
        ("sigmoid'", k32::sigmoid_grad, |y| y * (1.0 - y), 4.0, 2.0),
        ("silu'", k32::silu_grad, silu_grad_ref, 4.0, 2.0),
        ("softplus'", k32::softplus_grad, softplus_grad_ref, 4.0, 2.0),
        ("gelu'", k32::gelu_grad, gelu_grad_ref, 4.0, 2.0),
        (
            "gelu_tanh'",
            k32::gelu_tanh_grad,
            gelu_tanh_grad_ref,
            4.0,
            2.0,
        ),
        ("erf'", k32::erf_grad, erf_grad_ref, 4.0, 2.0),
    ]
}

fn cases64() -> Vec<Case64> {
    vec![
        ("exp", k64::exp, f64::exp, 1.0, 0.0),
        ("log", k64::log, f64::ln, 1.0, 0.0),
        ("log1p", k64::log1p, f64::ln_1p, 2.0, 0.0),
        ("tanh", k64::tanh, f64::tanh, 2.0, 0.0),
        ("sigmoid", k64::sigmoid, sigmoid_ref, 4.0, 0.0),
        ("silu", k64::silu, |x| x * sigmoid_ref(x), 4.0, 2.0),
        ("softplus", k64::softplus, softplus_ref, 4.0, 0.0),
        ("gelu_tanh", k64::gelu_tanh, gelu_tanh_ref, 4.0, 2.0),
        ("tanh'", k64::tanh_grad, |y| 1.0 - y * y, 4.0, 2.0),
        ("sigmoid'", k64::sigmoid_grad, |y| y * (1.0 - y), 4.0, 2.0),
        ("silu'", k64::silu_grad, silu_grad_ref, 4.0, 2.0),
        ("softplus'", k64::softplus_grad, softplus_grad_ref, 4.0, 2.0),
        ("gelu'", k64::gelu_grad, gelu_grad_ref, 4.0, 2.0),
        (
            "gelu_tanh'",
            k64::gelu_tanh_grad,
            gelu_tanh_grad_ref,
            4.0,
            2.0,
        ),
        ("erf'", k64::erf_grad, erf_grad_ref, 4.0, 2.0),
    ]
}

/// The worst case of one kernel at one level: (ulps, the input, the
/// ratio of the error to its bound), maximised over the ratio.
fn worst32(level: Level, case: &Case32, xs: &[f32]) -> (f64, f32, f64) {
    let &(name, f, r, ulps, cond) = case;
    let mut out = xs.to_vec();
    run_at(level, || out.iter_mut().for_each(|x| *x = f(*x))).unwrap_or_else(|_| panic!("level"));
    let mut worst = (0.0f64, 0.0f32, 0.0f64);
    for (&x, &y) in xs.iter().zip(&out) {
        let want = r(x as f64);
        let u = if name.ends_with('\'') && (y as f64 - want).abs() <= DERIV_ABS_32 {
            0.0
        } else {
            ulps32(y, want)
        };
        let bound = ulps
            + if cond > 0.0 {
                cond * kappa(r, x as f64, 1e-6)
            } else {
                0.0
            };
        let ratio = u / bound;
        if ratio > worst.2 || u.is_nan() {
            worst = (u, x, ratio);
        }
    }
    worst
}

fn worst64(level: Level, case: &Case64, xs: &[f64]) -> (f64, f64, f64) {
    let &(name, f, r, ulps, cond) = case;
    let mut out = xs.to_vec();
    run_at(level, || out.iter_mut().for_each(|x| *x = f(*x))).unwrap_or_else(|_| panic!("level"));
    let mut worst = (0.0f64, 0.0f64, 0.0f64);
    for (&x, &y) in xs.iter().zip(&out) {
        let want = r(x);
        let u = if name.ends_with('\'') && (y - want).abs() <= DERIV_ABS_64 {
            0.0
        } else {
            ulps64(y, want)
        };
        let bound = ulps
            + if cond > 0.0 {
                cond * kappa(r, x, 1e-7)
            } else {
                0.0
            };
        let ratio = u / bound;
        if ratio > worst.2 || u.is_nan() {
            worst = (u, x, ratio);
        }
    }
    worst
}

#[test]
fn f32_kernels_are_within_their_ulp_bounds_at_every_level() {
    let xs = sweep32();
    let mut bad = Vec::new();
    for &level in Level::all() {
        if !level.is_available() {
            println!("skip: this CPU has no {}", level.name());
            continue;
        }
        for case in cases32() {
            let (u, x, ratio) = worst32(level, &case, &xs);
            let name = case.0;
            println!(
                "f32 {name:>10} at {}: worst {u:.3} ulp at x = {x:e}, {:.0}% of its bound",
                level.name(),
                ratio * 100.0
            );
            if ratio > 1.0 {
                bad.push(format!(
                    "f32 {name} at {}: {u} ulp at x = {x:e}",
                    level.name()
                ));
            }
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
}

#[test]
fn f64_kernels_are_within_their_ulp_bounds_at_every_level() {
    let xs = sweep64();
    let mut bad = Vec::new();
    for &level in Level::all() {
        if !level.is_available() {
            println!("skip: this CPU has no {}", level.name());
            continue;
        }
        for case in cases64() {
            let (u, x, ratio) = worst64(level, &case, &xs);
            let name = case.0;
            println!(
                "f64 {name:>10} at {}: worst {u:.3} ulp at x = {x:e}, {:.0}% of its bound",
                level.name(),
                ratio * 100.0
            );
            if ratio > 1.0 {
                bad.push(format!(
                    "f64 {name} at {}: {u} ulp at x = {x:e}",
                    level.name()
                ));
            }
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
}

#[test]
fn special_values_follow_ieee_and_pytorch() {
    let inf = f32::INFINITY;
    assert_eq!(k32::exp(-inf), 0.0);
    assert_eq!(k32::exp(inf), inf);
    assert_eq!(k32::log(0.0), -inf);
    assert_eq!(k32::log(-0.0), -inf);
    assert!(k32::log(-1.0).is_nan());
    assert_eq!(k32::log(inf), inf);
    assert_eq!(k32::log1p(-1.0), -inf);
    assert_eq!(k32::tanh(inf), 1.0);
    assert_eq!(k32::tanh(-inf), -1.0);
    assert!(k32::tanh(-0.0).is_sign_negative());
    assert_eq!(k32::sigmoid(-inf), 0.0);
    assert_eq!(k32::sigmoid(inf), 1.0);
    assert_eq!(k32::erf(inf), 1.0);
    assert_eq!(k32::erf(-inf), -1.0);
    assert_eq!(k32::gelu(inf), inf);
    assert_eq!(k32::softplus(inf), inf);
    assert_eq!(k32::softplus(-inf), 0.0);
    assert_eq!(k32::softplus(25.0), 25.0);
    for f in [
        k32::exp,
        k32::log,
        k32::tanh,
        k32::sigmoid,
        k32::erf,
        k32::gelu,
        k32::silu,
    ] {
        assert!(f(f32::NAN).is_nan());
    }
    assert_eq!(k64::exp(f64::NEG_INFINITY), 0.0);
    assert_eq!(k64::log(0.0), f64::NEG_INFINITY);
    assert!(k64::log(-1.0).is_nan());
    assert_eq!(k64::tanh(f64::INFINITY), 1.0);
}
