//! The f32 kernels (also the compute type of f16 and bf16).
//!
//! Every function is branch-free (selects, not jumps) and calls nothing, so
//! a loop over it inside [`crate::backend::cpu::simd::run`] vectorises at
//! every level. The polynomials' steps are [`Madd`]s, fused when the level
//! has FMA (`F`); the argument reductions keep separate products and sums. Error bounds are in `super`'s table and are
//! asserted by `super::tests`.

#![allow(clippy::excessive_precision)]

pub(crate) use super::trig::{cos, sin, tan, trig_outside};
pub(crate) use super::wide::{acos, asin, atan, cosh, sinh};
use super::{
    derived_kernels, horner, Madd, ERFC_Q_F32 as ERFC_Q, ERFC_Q_WIDE_F32 as ERFC_Q_WIDE,
    ERF_SMALL_F32 as ERF_P,
};

/// `ln 2` split so that `k * LN2_HI` is exact for |k| < 2^9.
const LN2_HI: f32 = 0.693_145_751_953_125;
const LN2_LO: f32 = 1.428_606_765_330_187_045e-6;

/// `a * b` as `hi + lo` exactly: one FMA where the level has it, Dekker's
/// product otherwise (the same two floats); `lo` is meaningful for
/// `|a|, |b| < 2^100`.
#[inline(always)]
fn two_prod<const F: bool>(a: f32, b: f32) -> (f32, f32) {
    const SPLIT: f32 = 4097.0; // 2^12 + 1
    let p = a * b;
    if F {
        return (p, a.mul_add(b, -p));
    }
    let ta = a * SPLIT;
    let ah = ta - (ta - a);
    let al = a - ah;
    let tb = b * SPLIT;
    let bh = tb - (tb - b);
    let bl = b - bh;
    let e = ((ah * bh - p) + ah * bl + al * bh) + al * bl;
    (p, e)
}

/// `y 2^n` for `y` near 1 and the integer `n` in `[-151, 128]` that the
/// 1.5 * 2^23 rounding trick left in the low bits of `t` (`t = n + 1.5 *
/// 2^23`), rounded once ([`exp`], [`exp2`]): below 0, `y 2^(n + 64)`
/// (exact) then `2^-64`, so that results down to the subnormals round
/// once; from 0 up, `y 2^(n - 1)` (exact) then `2`, so that `n = 128`
/// (beyond f32's exponents) overflows to infinity exactly where the
/// result does. Two selects where the two halves `2^(n/2) 2^(n - n/2)` it
/// replaced took five integer steps and a product more (Note [exp_neg] in
/// `bench/results/ops-why.md`).
#[inline(always)]
fn times_pow2(y: f32, t: f32) -> f32 {
    let bits = t.to_bits() as i32;
    let neg = bits < 0x4B40_0000;
    let b = bits.wrapping_add(if neg { 127 + 64 } else { 127 - 1 } - 0x4B40_0000);
    let last = if neg {
        f32::from_bits((127 - 64) << 23)
    } else {
        2.0
    };
    y * f32::from_bits((b as u32) << 23) * last
}

/// `e^r` on `|r| <= ln2 / 2` for the `xc` of [`exp`] and [`exp_neg`]:
/// `xc = n ln2 + r` (Cody-Waite), then Cephes' `expf` polynomial (degree 7).
/// Returns `(e^r, t)` with `t = n + 1.5 * 2^23`: `n` in `t`'s low bits.
#[inline(always)]
fn exp_reduced<const F: bool>(xc: f32) -> (f32, f32) {
    // Round to nearest with the 1.5 * 2^23 trick (no `round` instruction
    // needed), which also leaves n in the low bits: no float-to-int conversion.
    let t = xc * std::f32::consts::LOG2_E + 12_582_912.0;
    let fx = t - 12_582_912.0;
    let r = xc - fx * 0.693_359_4 + fx * 2.121_944_4e-4;
    let y = horner::<f32, F, 6>(
        &[
            0.5,
            1.666_666_5e-1,
            4.166_579_6e-2,
            8.333_452e-3,
            1.398_199_9e-3,
            1.987_569_1e-4,
        ],
        r,
    );
    // `y r^2 + r + 1`, in that order.
    ((y * r).madd::<F>(r, r) + 1.0, t)
}

/// `e^x` within 1 ulp ([`exp_reduced`]), `2^n` applied by [`times_pow2`]
/// so that results down to the subnormals are right. NaN propagates;
/// `exp(-inf) = 0`, `exp(inf) = inf`.
#[inline(always)]
pub(crate) fn exp<const F: bool>(x: f32) -> f32 {
    // Beyond the clamp the result is infinite or 0 anyway: e^89 overflows
    // and e^-104 rounds to 0, each by [`times_pow2`]'s one rounding.
    // `clamp` keeps NaN (unlike min/max).
    let (y, t) = exp_reduced::<F>(x.clamp(-104.0, 89.0));
    times_pow2(y, t)
}

/// `e^x` for `x <= 0`, as [`exp`] (the same bits) but cheaper, for the
/// callers whose argument is never positive by construction (`e^-|x|` in
/// `sigmoid`, `e^(-x^2)` in `erf`, `x - max` in softmax): one lower clamp,
/// and `2^n` always as `y 2^(n + 64) 2^-64` (the first product exact, the
/// second the one rounding, subnormal results included), where [`exp`]
/// clamps both ends and picks its scaling by the sign of `n`. Exact for
/// every `x` up to 43 (`n + 64 <= 127`), so an argument that rounding
/// lifts a little above 0 is still right; above that the result is
/// meaningless. NaN propagates; `-inf` gives 0.
///
/// `sigmoid` takes about a quarter less time with this than with `exp`, two
/// halves and special-value selects (Note [exp_neg] in
/// `bench/results/ops-why.md`).
#[inline(always)]
pub(crate) fn exp_neg<const F: bool>(x: f32) -> f32 {
    const LO: f32 = -104.0; // below: 0
    debug_assert!(x.is_nan() || x <= 43.0, "exp_neg({x})");
    // `x < LO` is false for NaN, which passes through.
    let (y, t) = exp_reduced::<F>(if x < LO { LO } else { x });
    // `t`'s bits are `0x4B40_0000 + n`; this is the biased exponent of
    // 2^(n + 64), placed by the shift.
    let b = (t.to_bits() as i32).wrapping_add(127 + 64 - 0x4B40_0000);
    y * f32::from_bits((b as u32) << 23) * f32::from_bits((127 - 64) << 23)
}

/// `2^x` within 2 ulps: `x = n + r` with `n` the nearest integer (exact:
/// `|r| <= 1/2`), the Taylor series of `2^r = e^(r ln 2)` to degree 7
/// (truncation below 6e-9 relative), and `2^n` applied by [`times_pow2`]. Integers give exact powers of two. NaN propagates;
/// `exp2(-inf) = 0`, `exp2(x >= 128) = inf`.
#[inline(always)]
pub(crate) fn exp2<const F: bool>(x: f32) -> f32 {
    let xc = x.clamp(-151.0, 128.0);
    let t = xc + 12_582_912.0;
    let fx = t - 12_582_912.0;
    let r = xc - fx;
    let y = horner::<f32, F, 8>(
        &[
            1.0,
            std::f32::consts::LN_2,
            0.2402265069591007,
            0.055504108664821576,
            0.009618129107628477,
            0.0013333558146428441,
            0.00015403530393381606,
            1.5252733804059838e-05,
        ],
        r,
    );
    // 2^128 overflows and 2^-151 rounds to 0 by `times_pow2` itself, so
    // the clamp alone gives the results beyond it.
    times_pow2(y, t)
}

/// `e^x - 1` within 3 ulps: below 1 in magnitude the Taylor series to
/// degree 11 (`x P(x)`: no cancellation, `expm1(-0) = -0`; truncation
/// below 3e-9 relative), above it `e^x - 1` (the cancellation there costs at
/// most a factor `e / (e - 1)` on [`exp`]'s ulp). `-inf` gives -1.
#[inline(always)]
pub(crate) fn expm1<const F: bool>(x: f32) -> f32 {
    let small = x * horner::<f32, F, 11>(
        &[
            1.0,
            0.5,
            0.16666666666666666,
            0.041666666666666664,
            0.008333333333333333,
            0.001388888888888889,
            0.0001984126984126984,
            2.48015873015873e-05,
            2.7557319223985893e-06,
            2.755731922398589e-07,
            2.505210838544172e-08,
        ],
        x,
    );
    let big = exp::<F>(x) - 1.0;
    if x.abs() < 1.0 {
        small
    } else {
        big
    }
}

/// `log2 x` within 2 ulps: [`log`]'s reduction `x = 2^k m`, `ln m` by its
/// series, then `k + ln m log2(e)` in one fused step where the level has
/// FMA. Exact powers of two give exact integers (`ln m = 0`).
#[inline(always)]
pub(crate) fn log2<const F: bool>(x: f32) -> f32 {
    let p = log_reduce::<F>(x);
    let lnm = p.f - (p.hfsq - p.s * (p.hfsq + p.r));
    log_specials(x, lnm.madd::<F>(std::f32::consts::LOG2_E, p.k))
}

/// The pieces of `ln x` for a finite positive `x` (subnormals included):
/// `x = 2^k m` with `m` in `[sqrt(1/2), sqrt(2))`, `f = m - 1`,
/// `s = f / (2 + f)`, `hfsq = f^2 / 2` and `r = s^2 R(s^2)` (the atanh
/// series), so that `ln m = f - hfsq + s (hfsq + r)`.
struct LogParts {
    k: f32,
    f: f32,
    s: f32,
    hfsq: f32,
    r: f32,
}

/// [`LogParts`] of `x` (fdlibm's scheme, with the series' own
/// coefficients). Subnormals are scaled by 2^23 first.
#[inline(always)]
fn log_reduce<const F: bool>(x: f32) -> LogParts {
    let sub = x < f32::MIN_POSITIVE;
    let xs = if sub { x * 8_388_608.0 } else { x };
    // Offset so that the exponent field rounds m into [sqrt(1/2), sqrt(2)).
    let ix = (xs.to_bits() as i32).wrapping_add(0x3f80_0000 - 0x3f35_04f3);
    let k = (ix >> 23) - 0x7f - if sub { 23 } else { 0 };
    let m = f32::from_bits(((ix & 0x007f_ffff) + 0x3f35_04f3) as u32);
    let f = m - 1.0;
    let s = f / (2.0 + f);
    let z = s * s;
    let r = z * horner::<_, F, _>(
        &[
            2.0 / 3.0,
            2.0 / 5.0,
            2.0 / 7.0,
            2.0 / 9.0,
            2.0 / 11.0,
            2.0 / 13.0,
        ],
        z,
    );
    LogParts {
        k: k as f32,
        f,
        s,
        hfsq: 0.5 * f * f,
        r,
    }
}

/// A logarithm's value `y` at `x` with the special cases applied: `x < 0`
/// and NaN give NaN, 0 gives -inf, inf gives inf.
#[inline(always)]
fn log_specials(x: f32, y: f32) -> f32 {
    let y = if x == f32::INFINITY { x } else { y };
    let y = if x == 0.0 { f32::NEG_INFINITY } else { y };
    if x < 0.0 || x.is_nan() {
        f32::NAN
    } else {
        y
    }
}

/// `ln x`: [`log_reduce`], then `ln x = k ln2 + f - hfsq + s (hfsq + r)`
/// with `ln 2` in two parts.
#[inline(always)]
pub(crate) fn log<const F: bool>(x: f32) -> f32 {
    let LogParts { k, f, s, hfsq, r } = log_reduce::<F>(x);
    let y = k * LN2_HI + (((s * (hfsq + r) + k * LN2_LO) - hfsq) + f);
    log_specials(x, y)
}

/// `ln(1 + x)` within 2 ulps (1.2 measured): `u = 1 + x = 2^k m` reduced as
/// in [`log_reduce`], plus the rounding of `u` as `c / u`, `c = x - (u -
/// 1)` (exact). `u` is 0 or at least 2^-24, never subnormal, so the
/// reduction skips `log_reduce`'s subnormal scaling, and one division
/// serves both quotients: `1 / (m (2 + f))` gives `s = f / (2 + f)` and
/// `c / m` (each two roundings more, on terms that enter at 2^-8 and
/// 2^-24 of the result). The atanh series is fdlibm `logf`'s 4 terms
/// (f32's own fit, where `log` keeps 6). One division is faster than the two
/// of `log(u) + c / u` (Note [log1p one division] in
/// `bench/results/ops-why.md`).
#[inline(always)]
pub(crate) fn log1p<const F: bool>(x: f32) -> f32 {
    const LG: [f32; 4] = [
        6.666_666_865_3e-01,
        3.999_939_918_5e-01,
        2.849_878_668_8e-01,
        2.427_907_884_1e-01,
    ];
    let u = 1.0 + x;
    let c = x - (u - 1.0);
    let ix = (u.to_bits() as i32).wrapping_add(0x3f80_0000 - 0x3f35_04f3);
    let k = (ix >> 23) - 0x7f;
    let m = f32::from_bits(((ix & 0x007f_ffff) + 0x3f35_04f3) as u32);
    let f = m - 1.0;
    let d = 2.0 + f;
    let inv = 1.0 / (d * m);
    let s = (f * m) * inv;
    // 2^-k (k <= 128; at 128, `u` is infinite or `c` is 0).
    let pk = f32::from_bits(((0x7f - k).max(1) as u32) << 23);
    let cu = (c * d) * inv * pk;
    let z = s * s;
    let r = z * horner::<_, F, _>(&LG, z);
    let (kf, hfsq) = (k as f32, 0.5 * f * f);
    let y = kf * LN2_HI + ((((s * (hfsq + r) + kf * LN2_LO) + cu) - hfsq) + f);
    log_specials(u, y)
}

/// `ln(1 + e)` for `e` in `[0, 1]` (NaN passes through), for `softplus`:
/// `2 atanh(s)` with `s = e / (2 + e)` in `[0, 1/3]`, as `q + q z R(z)`
/// with `q = 2s` and `R(z) = 1/3 + z/5 + ... + z^6/15` (`z = s^2 <= 1/9`;
/// truncation below 2e-9 relative). No `log` reduction and one division,
/// where `log1p` has two. `q` is carried as `q0 + ql`: `ql` holds the
/// rounding of `d = 2 + e` (exact by Fast2Sum, `2 >= e`) and of the
/// quotient (exact by [`two_prod`]), to first order, scaled by
/// `1/d ~ 1/2 - e/8` (12% off at worst, on a term below 2^-23
/// relative), so that the sum's error stays near one rounding. A subnormal
/// `e` gives `q0 = e`, not `e / 2` rounded and doubled.
#[inline(always)]
fn ln1p_unit<const F: bool>(e: f32) -> f32 {
    let d = 2.0 + e;
    let c = e - (d - 2.0);
    let q0 = (e + e) / d;
    // 2e - q0 d, exactly (Sterbenz: q0 d is within a factor 2 of 2e).
    let (p, pe) = two_prod::<F>(q0, d);
    let rem = ((e + e) - p) - pe;
    // q = 2e / (d + c) = q0 + (rem - q0 c) / d, to first order.
    let ql = (rem - q0 * c) * (0.5 - 0.125 * e);
    let z = 0.25 * (q0 * q0);
    let r = z * horner::<_, F, _>(
        &[
            1.0 / 3.0,
            1.0 / 5.0,
            1.0 / 7.0,
            1.0 / 9.0,
            1.0 / 11.0,
            1.0 / 13.0,
            1.0 / 15.0,
        ],
        z,
    );
    q0 + q0.madd::<F>(r, ql)
}

/// The odd polynomial of `tanh` below 0.625: `x + x z P(z)`, `z = x^2`.
#[inline(always)]
fn tanh_small<const F: bool>(x: f32, z: f32) -> f32 {
    x + x * z * horner::<_, F, _>(&super::TANH_SMALL_F32, z)
}

derived_kernels!(f32);

/// `erfc(t)` for `t = hi + lo`, and `erf(hi)`, together.
///
/// Below |t| = 1, `erf t = t P(t^2)` (a least-squares fit, 1.2e-9 relative);
/// above, `erf = 1 - erfc`. From |t| = 0.5 up, `erfc |t| = e^(-t^2) Q(2 / (2 + |t|))`
/// (a fit of `e^(t^2) erfc t` on [0.5, 10.5], 2.1e-9 relative), with `t^2`
/// kept as two floats so the tail's relative error does not grow with
/// `t^2`; below 0.5, `erfc = 1 - erf` (erfc > 0.47 there: no cancellation).
#[inline(always)]
fn erf_erfc<const F: bool>(hi: f32, lo: f32) -> (f32, f32) {
    let a = hi.abs();
    let erf_small = hi * horner::<_, F, _>(&ERF_P, hi * hi);
    // Tail: e^(-a^2) Q(w), a^2 = sq + sql.
    let al = if hi < 0.0 { -lo } else { lo };
    let (sq, e) = two_prod::<F>(a, a);
    let sql = if a < 4096.0 { e + 2.0 * a * al } else { 0.0 };
    let w = 2.0 / (2.0 + a);
    let tail = exp_neg::<F>(-sq) * (1.0 - sql) * horner::<_, F, _>(&ERFC_Q, w);
    let tail = if a == f32::INFINITY { 0.0 } else { tail };
    let erf_big = (1.0 - tail).copysign(hi);
    let erfc_big = if hi < 0.0 { 2.0 - tail } else { tail };
    let erf = if a < 1.0 { erf_small } else { erf_big };
    let erfc = if a < 0.5 { 1.0 - erf_small } else { erfc_big };
    (erf, erfc)
}

/// The error function.
#[inline(always)]
pub(crate) fn erf<const F: bool>(x: f32) -> f32 {
    erf_erfc::<F>(x, 0.0).0
}

/// `erfc(-x / sqrt 2)` (twice the normal CDF at `x`) and `e^(-x^2 / 2)`,
/// for `x` in `[-14.8, 14.8]` (the caller clamps: beyond, `gelu` is `x`
/// or underflows to 0, and the CDF is 0 or 2 in f32).
///
/// With `t = |x| / sqrt 2`, `erfc t = e^(-t^2) Q(2 / (2 + t))` (one fit on
/// [0, 10.5], 2.0e-9 relative) and `erfc(-t) = 2 - erfc t`. `t^2 = x^2 / 2`
/// is `two_prod(x, x)` halved: exact, so the exponential's argument
/// carries no rounding for the tail to amplify (its low part enters as
/// `e^(-lo) = 1 - lo`). `t` itself only places `Q`'s argument.
#[inline(always)]
fn normal_cdf2<const F: bool>(x: f32) -> (f32, f32) {
    let t = x.abs() * std::f32::consts::FRAC_1_SQRT_2;
    let (h, l) = two_prod::<F>(x, x);
    let e = exp_neg::<F>(-0.5 * h) * (1.0 - 0.5 * l);
    let tail = e * horner::<_, F, _>(&ERFC_Q_WIDE, 2.0 / (2.0 + t));
    (if x > 0.0 { 2.0 - tail } else { tail }, e)
}

/// Where `gelu`'s CDF is clamped: `gelu(-14.8)` is below f32's smallest
/// subnormal, and `erfc(-14.8 / sqrt 2)` is 2 in f32.
const GELU_CLAMP: f32 = 14.8;

/// GELU, exact form: `x/2 erfc(-x / sqrt 2)` (no cancellation for x < 0).
/// One exponential and one polynomial ([`normal_cdf2`]); the first version
/// evaluated `erf`'s two pieces and a double-float `-x / sqrt 2`, 20%
/// slower in a standalone loop at AVX2.
#[inline(always)]
pub(crate) fn gelu<const F: bool>(x: f32) -> f32 {
    0.5 * x * normal_cdf2::<F>(x.clamp(-GELU_CLAMP, GELU_CLAMP)).0
}

/// gelu'(x) = `erfc(-x/sqrt 2)/2 + x e^(-x^2/2) / sqrt(2 pi)`, both from
/// [`normal_cdf2`]'s one exponential.
#[inline(always)]
pub(crate) fn gelu_grad<const F: bool>(x: f32) -> f32 {
    const INV_SQRT_2PI: f32 = 0.398_942_280_401_432_7;
    let (cdf2, e) = normal_cdf2::<F>(x.clamp(-GELU_CLAMP, GELU_CLAMP));
    0.5 * cdf2 + x * (e * INV_SQRT_2PI)
}

/// `ln a` for [`pow_core`], in f64, for `a` the magnitude of an f32 (so never a
/// subnormal f64): fdlibm's reduction (`float64::log_reduce`, shared with
/// the f64 `log`) and 6 terms of the atanh series,
/// relative error below 2^-39, far more than `pow` needs (2^-33: the
/// rounding of `y ln a`, up to ~104 before the result leaves f32's range,
/// must stay below a quarter of an f32 ulp). `ln 0 = -inf`, `ln inf = inf`,
/// NaN stays NaN.
#[inline(always)]
fn pow_ln<const F: bool>(a: f64) -> f64 {
    const LN2: f64 = std::f64::consts::LN_2;
    // `a` is an f32's magnitude: never subnormal in f64.
    let (k, f, s) = super::float64::log_reduce(a);
    let z = s * s;
    let r = z * horner::<_, F, _>(
        &[
            2.0 / 3.0,
            2.0 / 5.0,
            2.0 / 7.0,
            2.0 / 9.0,
            2.0 / 11.0,
            2.0 / 13.0,
        ],
        z,
    );
    let hfsq = 0.5 * f * f;
    let y = k as f64 * LN2 + (f - (hfsq - s * (hfsq + r)));
    let y = if a == 0.0 { f64::NEG_INFINITY } else { y };
    if a == f64::INFINITY || a.is_nan() {
        a
    } else {
        y
    }
}

/// `e^t` for [`pow_core`], in f64: `t` clamped to [-110, 100] (beyond, the f32
/// result is 0 or infinite anyway), Cody-Waite reduction, the Taylor
/// series of `e^r` to degree 8 (truncation below 2^-32), one scaling by
/// `2^n`. NaN stays NaN.
#[inline(always)]
fn pow_exp<const F: bool>(t: f64) -> f64 {
    const LN2_HI: f64 = 6.931_471_803_691_238_164_90e-01;
    const LN2_LO: f64 = 1.908_214_929_270_587_700_02e-10;
    const MAGIC: f64 = 6_755_399_441_055_744.0; // 1.5 * 2^52
    const INV_FACT: [f64; 9] = [
        1.0,
        1.0,
        1.0 / 2.0,
        1.0 / 6.0,
        1.0 / 24.0,
        1.0 / 120.0,
        1.0 / 720.0,
        1.0 / 5040.0,
        1.0 / 40320.0,
    ];
    let tc = t.clamp(-110.0, 100.0);
    let v = tc * std::f64::consts::LOG2_E + MAGIC;
    let n = v - MAGIC;
    let r = (tc - n * LN2_HI) - n * LN2_LO;
    let p = horner::<_, F, _>(&INV_FACT, r);
    let k = (v.to_bits() as i64).wrapping_sub(MAGIC.to_bits() as i64);
    p * f64::from_bits(((k + 1023) as u64) << 52)
}

/// `x^y` for f32, branch-free: `e^(y ln|x|)` with `ln` and `e^` in f64
/// lanes ([`pow_core`]), then C's special cases ([`pow_fix`]). The CPU
/// kernels run the two parts in one loop or in two (`unary::Pow`); the
/// tests check this composition at every level.
#[cfg(test)]
#[inline(always)]
pub(crate) fn pow<const F: bool>(x: f32, y: f32) -> f32 {
    pow_fix(x, y, pow_core::<F>(x, y))
}

/// `|x|^y` rounded to f32, as `e^(y ln|x|)` with `ln` and `e^` in f64 lanes
/// ([`pow_ln`], [`pow_exp`]: polynomials only as long as f32's precision
/// needs), so the rounding of `y ln|x|` (up to ~104 in magnitude before
/// the result leaves f32's range) costs nothing. It is `x^y` (C's `powf`)
/// for every positive finite `x` and finite `y`; [`pow_fix`] makes it
/// `x^y` everywhere. Infinite and zero `x`, and infinite `y`, fall out of
/// `ln` and `e^` as `powf` has them (`ln 0 = -inf`, `e^inf = inf`, `e^-inf
/// = 0`) except for the cases `pow_fix` selects.
#[inline(always)]
pub(crate) fn pow_core<const F: bool>(x: f32, y: f32) -> f32 {
    let a = (x as f64).abs();
    pow_exp::<F>(y as f64 * pow_ln::<F>(a)) as f32
}

/// [`pow_core`]'s result `r` made C's `powf(x, y)`, by selects in f32
/// (sign changes and constants commute with the rounding to f32): `x^0 =
/// 1` and `1^y = 1` (NaN included), `(-1)^±inf = 1`, a negative finite `x`
/// to a non-integer `y` is NaN, and a negative `x` (`-0` and `-inf`
/// included) to an odd integer `y` keeps its sign. A positive finite `x`
/// with a finite `y` leaves `r` as it is.
#[inline(always)]
pub(crate) fn pow_fix(x: f32, y: f32, r: f32) -> f32 {
    let y_int = y.trunc() == y; // also true for ±inf
    let half = y * 0.5;
    let y_odd = y_int && half.trunc() != half;
    let r = if x.is_sign_negative() && y_odd { -r } else { r };
    let r = if x < 0.0 && x.is_finite() && !y_int {
        f32::NAN
    } else {
        r
    };
    let r = if x.abs() == 1.0 && y.is_infinite() {
        1.0
    } else {
        r
    };
    if y == 0.0 || x == 1.0 {
        1.0
    } else {
        r
    }
}
