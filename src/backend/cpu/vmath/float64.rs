//! The f64 kernels. Branch-free like the f32 ones (see `super::float32`), except
//! `erf` and `gelu`, which keep the scalar series and continued fraction of
//! `num::erf_precise` (a few ulps; a vectorised f64 erf is not written yet),
//! and `sin` and `cos`, which call libm (see `super::trig`).

#![allow(clippy::excessive_precision)]

use super::horner;

/// `ln 2` split so that `k * LN2_HI` is exact for |k| < 2^11 (fdlibm's).
const LN2_HI: f64 = 6.931_471_803_691_238_164_90e-01;
const LN2_LO: f64 = 1.908_214_929_270_587_700_02e-10;

const MAGIC: f64 = 6_755_399_441_055_744.0; // 1.5 * 2^52

/// `e^r` for the `xc` of [`exp`] and [`exp_neg`]: `xc = n ln 2 + r` with
/// `|r| <= ln2 / 2` (Cody-Waite), the Taylor series of `e^r` to degree 13
/// (truncation below 2^-60). Returns `(e^r, t)` with `t = n + 1.5 * 2^52`:
/// `n` in `t`'s low bits.
#[inline(always)]
fn exp_reduced<const F: bool>(xc: f64) -> (f64, f64) {
    const INV_FACT: [f64; 14] = [
        1.0,
        1.0,
        1.0 / 2.0,
        1.0 / 6.0,
        1.0 / 24.0,
        1.0 / 120.0,
        1.0 / 720.0,
        1.0 / 5040.0,
        1.0 / 40320.0,
        1.0 / 362_880.0,
        1.0 / 3_628_800.0,
        1.0 / 39_916_800.0,
        1.0 / 479_001_600.0,
        1.0 / 6_227_020_800.0,
    ];
    let t = xc * std::f64::consts::LOG2_E + MAGIC;
    let fx = t - MAGIC;
    let r = (xc - fx * LN2_HI) - fx * LN2_LO;
    (horner::<_, F, _>(&INV_FACT, r), t)
}

/// `e^x` ([`exp_reduced`]), with `2^n` applied in two halves so that
/// results down to the subnormals are right.
#[inline(always)]
pub(crate) fn exp<const F: bool>(x: f64) -> f64 {
    const HI: f64 = 709.782_712_893_384; // ln(f64::MAX)
    const LO: f64 = -745.2; // below: 0
    let (p, t) = exp_reduced::<F>(x.clamp(LO, HI));
    let n = (t.to_bits() as i64).wrapping_sub(MAGIC.to_bits() as i64);
    let n1 = n >> 1;
    let p1 = f64::from_bits(((n1 + 1023) as u64) << 52);
    let p2 = f64::from_bits(((n - n1 + 1023) as u64) << 52);
    let v = p * p1 * p2;
    let v = if x > HI { f64::INFINITY } else { v };
    if x < LO {
        0.0
    } else {
        v
    }
}

/// `e^x` for `x <= 0`, as `super::float32::exp_neg`: the bits of [`exp`],
/// `2^n` in one step as `y 2^(n + 600) 2^-600`; exact for every `x` up to
/// 293 (`n + 600 <= 1023`). NaN propagates; `-inf` gives 0.
#[inline(always)]
pub(crate) fn exp_neg<const F: bool>(x: f64) -> f64 {
    const LO: f64 = -745.2; // below: 0
    debug_assert!(x.is_nan() || x <= 293.0, "exp_neg({x})");
    let (p, t) = exp_reduced::<F>(if x < LO { LO } else { x });
    let b = (t.to_bits() as i64).wrapping_add(1023 + 600 - MAGIC.to_bits() as i64);
    p * f64::from_bits((b as u64) << 52) * f64::from_bits((1023 - 600) << 52)
}

/// fdlibm's reduction of a positive normal `x` for `ln`: `x = 2^k m` with
/// `sqrt(1/2) <= m < sqrt 2`; returns `(k, f = m - 1, s = f / (2 + f))`,
/// so that `ln m = 2 atanh s`. (Meaningless for 0, subnormals, infinities
/// and NaN: the callers select those.)
#[inline(always)]
pub(crate) fn log_reduce(x: f64) -> (i64, f64, f64) {
    let ix = (x.to_bits() as i64).wrapping_add(0x3ff0_0000_0000_0000 - 0x3fe6_a09e_667f_3bcd);
    let k = (ix >> 52) - 0x3ff;
    let m = f64::from_bits(((ix & 0x000f_ffff_ffff_ffff) + 0x3fe6_a09e_667f_3bcd) as u64);
    let f = m - 1.0;
    (k, f, f / (2.0 + f))
}

/// `ln x`, as `super::float32::log` with 11 terms of the atanh series.
#[inline(always)]
pub(crate) fn log<const F: bool>(x: f64) -> f64 {
    let sub = x < f64::MIN_POSITIVE;
    let xs = if sub { x * 18_014_398_509_481_984.0 } else { x }; // 2^54
    let (k, f, s) = log_reduce(xs);
    let k = k - if sub { 54 } else { 0 };
    let z = s * s;
    let r = z * horner::<_, F, _>(
        &[
            2.0 / 3.0,
            2.0 / 5.0,
            2.0 / 7.0,
            2.0 / 9.0,
            2.0 / 11.0,
            2.0 / 13.0,
            2.0 / 15.0,
            2.0 / 17.0,
            2.0 / 19.0,
            2.0 / 21.0,
            2.0 / 23.0,
        ],
        z,
    );
    let hfsq = 0.5 * f * f;
    let kf = k as f64;
    let y = kf * LN2_HI + (((s * (hfsq + r) + kf * LN2_LO) - hfsq) + f);
    let y = if x == f64::INFINITY { x } else { y };
    let y = if x == 0.0 { f64::NEG_INFINITY } else { y };
    if x < 0.0 || x.is_nan() {
        f64::NAN
    } else {
        y
    }
}

/// `tanh` below 0.625: Cephes' rational form `x + x z P(z) / Q(z)`.
#[inline(always)]
fn tanh_small<const F: bool>(x: f64, z: f64) -> f64 {
    const P: [f64; 3] = [
        -1.614_687_684_417_084_479_52e3,
        -9.928_772_310_019_185_865_64e1,
        -9.643_991_794_250_522_386_28e-1,
    ];
    const Q: [f64; 4] = [
        4.844_063_053_251_254_860_48e3,
        2.235_488_390_601_004_485_83e3,
        1.128_116_784_916_329_314_02e2,
        1.0,
    ];
    x + x * z * horner::<_, F, _>(&P, z) / horner::<_, F, _>(&Q, z)
}

/// `ln(1 + e)` for `e` in `[0, 1]`, for `softplus`: `log1p` (f32's
/// shorter series would need 17 terms at f64's precision).
#[inline(always)]
fn ln1p_unit<const F: bool>(e: f64) -> f64 {
    log1p::<F>(e)
}

/// `ln(1 + x)` accurate near 0: `u = 1 + x`, `ln u + (x - (u - 1)) / u`.
#[inline(always)]
pub(crate) fn log1p<const F: bool>(x: f64) -> f64 {
    let u = 1.0 + x;
    let c = (x - (u - 1.0)) / u;
    let y = log::<F>(u) + c;
    // x = inf: c is NaN, the answer is inf.
    let y = if u == f64::INFINITY { u } else { y };
    if u == 0.0 {
        f64::NEG_INFINITY
    } else {
        y
    }
}

super::derived_kernels!(f64);

/// The error function (scalar: see the module docs).
#[inline(always)]
pub(crate) fn erf<const F: bool>(x: f64) -> f64 {
    crate::backend::cpu::numeric_traits::erf_precise(x)
}

/// GELU, exact form (scalar: see the module docs).
#[inline(always)]
pub(crate) fn gelu<const F: bool>(x: f64) -> f64 {
    crate::backend::cpu::numeric_traits::gelu_f64(x)
}

/// gelu'(x) = `Phi(x) + x phi(x)` (scalar erf: see the module docs).
#[inline(always)]
pub(crate) fn gelu_grad<const F: bool>(x: f64) -> f64 {
    use crate::backend::cpu::numeric_traits::{erf_precise, erfc_precise};
    let z = x * std::f64::consts::FRAC_1_SQRT_2;
    let cdf = if x >= 0.0 {
        0.5 * (1.0 + erf_precise(z))
    } else {
        0.5 * erfc_precise(-z)
    };
    let pdf = exp_neg::<F>(-0.5 * x * x) * 0.398_942_280_401_432_7;
    cdf + x * pdf
}

/// libm's `sin` (scalar: see the module docs).
#[inline(always)]
pub(crate) fn sin<const F: bool>(x: f64) -> f64 {
    x.sin()
}

/// libm's `cos` (scalar: see the module docs).
#[inline(always)]
pub(crate) fn cos<const F: bool>(x: f64) -> f64 {
    x.cos()
}

/// Never: [`sin`] and [`cos`] are libm already, exact everywhere.
#[inline(always)]
pub(crate) fn trig_outside(_x: f64) -> bool {
    false
}

/// libm wrappers for the f64 forms of the functions `super::wide`
/// computes for f32 in f64 lanes (scalar: see that module's docs).
macro_rules! libm {
    ($($name:ident = $libm:ident),*) => {$(
        #[doc = concat!("libm's `", stringify!($libm), "` (scalar).")]
        #[inline(always)]
        pub(crate) fn $name<const F: bool>(x: f64) -> f64 {
            x.$libm()
        }
    )*};
}
libm!(
    tan = tan,
    atan = atan,
    asin = asin,
    acos = acos,
    sinh = sinh,
    cosh = cosh,
    expm1 = exp_m1,
    exp2 = exp2,
    log2 = log2
);
