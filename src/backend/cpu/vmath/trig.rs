//! `sin`, `cos` and `tan` of f32 (and of f16 and bf16, which compute in f32).
//!
//! Decision: the f32 kernels compute in f64 lanes. The input is
//! widened, `n = round(x 2/pi)` (the 1.5 * 2^52 trick, which also leaves
//! `n mod 4` in the low bits), `r = (x - n P1) - n P1T` (Cody-Waite, with
//! fdlibm's `P1`, the first 33 bits of pi/2, and `P1T = pi/2 - P1` to 53
//! bits), then musl's `__sindf`/`__cosdf` minimax polynomials on
//! `[-pi/4, pi/4]` (errors 2^-37.5 and 2^-34.1), both evaluated, the
//! quadrant `n & 3` choosing one and its sign without a branch, and one
//! rounding to f32.
//!
//! Why the reduction is exact enough below [`TRIG_MAX`] = 2^20: there
//! `|n| < 2^20`, so `n P1` (20 + 33 bits) is exact, and `x - n P1` is exact
//! too (Sterbenz: for `n != 0` the two are within a factor 2). The only
//! errors are the rounding of `n P1T` and of the last subtraction, and
//! `P1T`'s own truncation: below `2^20 * 2^-53 * 6.1e-11 = 7e-21`
//! absolute, far below the distance of any f32 in that range from a
//! multiple of pi/2 (heuristically ~1e-9 at least), so the result is the
//! f64 value within ~2^-34 relative, rounded once: 0.5 ulp plus a few
//! thousandths. `super::tests` asserts 2 ulps at every level over its
//! sweeps, and its ignored `trig_exhaustive` runs every f32 in
//! `[0, 2^20]` (the kernels are exactly odd and even, every step being
//! sign-symmetric): worst 0.5009 ulp for both at AVX2+FMA (the machine:
//! Note [vmath ulps] in `bench/results/ops-why.md`).
//!
//! Above 2^20, at infinities and at NaN the result of these functions is
//! meaningless (finite garbage or NaN): [`trig_outside`] names those inputs
//! and the unary op recomputes them with libm (`f32::sin`, `f32::cos`) in a
//! fix-up pass after the vector loop (`unary::Block1`), so that the loop
//! stays branch-free and huge arguments, `sin(inf) = NaN` and NaN keep
//! libm's (and PyTorch's) answers. `sin(-0) = -0` holds in the vector path
//! (`n = +0`, `r = -0`).
//!
//! f64 tensors keep libm (`super::float64::sin`): a vectorised f64 version
//! needs a 3-part reduction with error tracking and a longer polynomial,
//! which is not written yet.

#![allow(clippy::excessive_precision)]

use super::horner;

/// Largest |x| the vector kernels reduce exactly; above it (and at
/// infinities and NaN) [`trig_outside`] is true.
pub(crate) const TRIG_MAX: f32 = 1_048_576.0; // 2^20

/// `2 / pi`.
const INV_PIO2: f64 = std::f64::consts::FRAC_2_PI;
/// The first 33 bits of pi/2 (fdlibm's `pio2_1`, 0x3FF921FB_54400000).
const P1: f64 = f64::from_bits(0x3FF9_21FB_5440_0000);
/// `pi/2 - P1` to 53 bits (fdlibm's `pio2_1t`).
const P1T: f64 = f64::from_bits(0x3DD0_B461_1A62_6331);
/// 1.5 * 2^52: adding it rounds to an integer kept in the low bits.
const MAGIC: f64 = 6_755_399_441_055_744.0;

/// `(sin(x) / x - 1) / x^2` on `x^2` in `[0, (pi/4)^2]` (musl's `__sindf`,
/// 2^-37.5 relative), as exact bit patterns.
const S: [f64; 4] = [
    f64::from_bits(0xBFC5_5555_54CB_AC77),
    f64::from_bits(0x3F81_1110_896E_FBB2),
    f64::from_bits(0xBF2A_00F9_E2CA_E774),
    f64::from_bits(0x3EC6_CD87_8C3B_46A7),
];
/// `(cos(x) - 1) / x^2` on `x^2` in `[0, (pi/4)^2]` (musl's `__cosdf`,
/// 2^-34.1 absolute).
const C: [f64; 4] = [
    f64::from_bits(0xBFDF_FFFF_FD0C_5E81),
    f64::from_bits(0x3FA5_5553_E105_3A42),
    f64::from_bits(0xBF56_C087_E80F_1E27),
    f64::from_bits(0x3EF9_9342_E0EE_5069),
];

/// The reduction of the widened `x`: `t` (whose low bits hold the
/// quadrant `n`) and `r = x - n pi/2`, then `sin r` and `cos r` by the
/// polynomials, all in f64.
#[inline(always)]
fn reduce<const F: bool>(x: f32) -> (f64, f64, f64) {
    let x = x as f64;
    let t = x * INV_PIO2 + MAGIC;
    let n = t - MAGIC;
    let r = (x - n * P1) - n * P1T;
    let z = r * r;
    // `r (1 + z P)`, not `r + r z P`: the product keeps the sign of
    // `r = -0` (P < 0 would turn `r z P` into +0 and the sum with it), and
    // its extra rounding (2^-53) is far below an f32 ulp.
    let s = r * (1.0 + z * horner::<_, F, _>(&S, z));
    let c = 1.0 + z * horner::<_, F, _>(&C, z);
    (t, s, c)
}

/// `sin(x + q pi/2)` for `q = quadrant + shift`, from the reduced `r`:
/// the sine or cosine polynomial by `q & 1`, negated by `q & 2`.
#[inline(always)]
fn eval<const F: bool>(x: f32, shift: u64) -> f32 {
    let (t, s, c) = reduce::<F>(x);
    // `n` in two's complement in the low bits of `t` (|n| < 2^51).
    let q = t.to_bits().wrapping_add(shift);
    let v = if q & 1 == 0 { s } else { c };
    f64::from_bits(v.to_bits() ^ ((q & 2) << 62)) as f32
}

/// `tan x` for `|x| <= TRIG_MAX`: `sin r / cos r` in even quadrants and
/// `-cos r / sin r` in odd ones, divided in f64 (each polynomial within
/// 2^-33.6 relative, so the quotient within 2^-32.5: half an f32 ulp and
/// a hair). `tan(-0) = -0`; the rest of the domain as [`sin`].
#[inline(always)]
pub(crate) fn tan<const F: bool>(x: f32) -> f32 {
    let (t, s, c) = reduce::<F>(x);
    (if t.to_bits() & 1 == 0 { s / c } else { -c / s }) as f32
}

/// `sin x` for `|x| <= TRIG_MAX` (see the module docs for the rest).
#[inline(always)]
pub(crate) fn sin<const F: bool>(x: f32) -> f32 {
    eval::<F>(x, 0)
}

/// `cos x` for `|x| <= TRIG_MAX`: `sin(x + pi/2)`, one quadrant on.
#[inline(always)]
pub(crate) fn cos<const F: bool>(x: f32) -> f32 {
    eval::<F>(x, 1)
}

/// Whether [`sin`], [`cos`] and [`tan`] leave `x` to libm: `|x| > TRIG_MAX`,
/// infinities and NaN.
#[inline(always)]
pub(crate) fn trig_outside(x: f32) -> bool {
    x.abs() > TRIG_MAX || x.is_nan()
}
