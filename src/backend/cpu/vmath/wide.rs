//! f32 kernels computed in f64 lanes: `sinh`, `cosh`, `atan`, `asin` and
//! `acos` (`tan` is in `trig`, beside `sin` and `cos`, whose reduction it
//! shares; `exp2`, `log2` and `expm1` are f32 polynomials in `float32`,
//! since f64 lanes left them slower than PyTorch's).
//!
//! Decision: libm calls per element take several times PyTorch's time
//! (Note [wide f32 kernels] in `bench/results/ops-why.md`). Each kernel
//! here widens its f32 argument (exactly), evaluates the function in f64 with
//! [`float64::exp`] (1 ulp of f64) or the arctangent polynomial below, and
//! rounds once to f32: the f64 errors are below 2^-40 relative, so the result
//! is the correctly rounded one except within 2^-40 of a midpoint between two
//! f32s, half an ulp and a hair (the tests' bound is 1 ulp). The f64 lanes
//! halve the vector width, which still leaves the loop several times faster
//! than a libm call per element, and the f64 range covers every intermediate
//! (`e^89` for `sinh`, `1 / 0` for `asin(1)`) without special branches.
//!
//! f64 tensors keep libm for these functions (`float64`'s wrappers): a
//! vectorised f64 version would need double-double arithmetic to keep 1
//! ulp, which is not written yet.

#![allow(clippy::excessive_precision)]

use super::{float64, horner};

/// Below this magnitude `sinh` uses its Taylor series (whose
/// first omitted term is below 2^-50 relative there); above it the
/// cancellation of `e^x - 1` in f64 costs at most `2^-53 / 2^-10`.
const TAYLOR_BELOW: f64 = 1.0 / 1024.0;

/// `sinh x`: `(e^|x| - e^-|x|) / 2` in f64, the Taylor series
/// `a + a^3/6 + a^5/120` below 2^-10, the sign of `x` (so -0 stays -0).
#[inline(always)]
pub(crate) fn sinh<const F: bool>(x: f32) -> f32 {
    let a = (x as f64).abs();
    let e = float64::exp::<F>(a);
    let big = 0.5 * (e - 1.0 / e);
    let z = a * a;
    let small = a * horner::<_, F, _>(&[1.0, 1.0 / 6.0, 1.0 / 120.0], z);
    let s = if a < TAYLOR_BELOW { small } else { big };
    s.copysign(x as f64) as f32
}

/// `cosh x`: `(e^|x| + e^-|x|) / 2` in f64 (no cancellation).
#[inline(always)]
pub(crate) fn cosh<const F: bool>(x: f32) -> f32 {
    let e = float64::exp::<F>((x as f64).abs());
    (0.5 * (e + 1.0 / e)) as f32
}

/// `(atan(u) / u - 1) / u^2` as a series in `z = u^2`: the Taylor
/// coefficients `(-1)^(k+1) / (2k + 3)`. On `|u| <= tan(pi/8)` (`z <=
/// 0.1716`) the series alternates with decreasing terms, so the first
/// omitted one, `z^14 / 31 < 2^-40`, bounds the truncation.
const ATAN_SERIES: [f64; 14] = [
    -1.0 / 3.0,
    1.0 / 5.0,
    -1.0 / 7.0,
    1.0 / 9.0,
    -1.0 / 11.0,
    1.0 / 13.0,
    -1.0 / 15.0,
    1.0 / 17.0,
    -1.0 / 19.0,
    1.0 / 21.0,
    -1.0 / 23.0,
    1.0 / 25.0,
    -1.0 / 27.0,
    1.0 / 29.0,
];

/// `atan t` for `t >= 0` (or NaN) in f64: Cephes' reduction (above
/// `tan(3pi/8)`, `pi/2 - atan(1/t)`; above `tan(pi/8)`, `pi/4 +
/// atan((t - 1)/(t + 1))`), then [`ATAN_SERIES`] on `|u| <= tan(pi/8)`.
/// `atan(inf) = pi/2`; NaN stays NaN. Relative error below 2^-40.
#[inline(always)]
fn atan_core<const F: bool>(t: f64) -> f64 {
    const TAN_3PI_8: f64 = 2.414_213_562_373_095_048_8;
    const TAN_PI_8: f64 = 0.414_213_562_373_095_048_8;
    let big = t > TAN_3PI_8;
    let mid = t > TAN_PI_8;
    let u = if big {
        -1.0 / t
    } else if mid {
        (t - 1.0) / (t + 1.0)
    } else {
        t
    };
    let base = if big {
        std::f64::consts::FRAC_PI_2
    } else if mid {
        std::f64::consts::FRAC_PI_4
    } else {
        0.0
    };
    let z = u * u;
    base + (u + u * z * horner::<_, F, _>(&ATAN_SERIES, z))
}

/// `atan x`, odd (`atan(-0) = -0`), `±pi/2` at the infinities.
#[inline(always)]
pub(crate) fn atan<const F: bool>(x: f32) -> f32 {
    let x = x as f64;
    atan_core::<F>(x.abs()).copysign(x) as f32
}

/// `asin x = atan(x / sqrt((1 - x)(1 + x)))` in f64 (both factors are
/// exact for an f32 `x`; `asin(±1) = ±pi/2` through `atan(inf)`); NaN
/// outside `[-1, 1]` (the square root of a negative).
#[inline(always)]
pub(crate) fn asin<const F: bool>(x: f32) -> f32 {
    let x = x as f64;
    let a = x.abs();
    let t = a / ((1.0 - a) * (1.0 + a)).sqrt();
    atan_core::<F>(t).copysign(x) as f32
}

/// `acos x = 2 atan(sqrt((1 - x) / (1 + x)))` in f64: no cancellation near
/// 1 (where `pi/2 - asin x` would lose the small result's bits);
/// `acos(-1) = pi` through `atan(inf)`; NaN outside `[-1, 1]`.
#[inline(always)]
pub(crate) fn acos<const F: bool>(x: f32) -> f32 {
    let x = x as f64;
    (2.0 * atan_core::<F>(((1.0 - x) / (1.0 + x)).sqrt())) as f32
}
