//! Vectorisable transcendental functions for the CPU kernels.
//!
//! Each function is a branch-free polynomial kernel on one element; a loop
//! over a slice of them, run through [`crate::backend::cpu::simd::run`],
//! becomes AVX-512, AVX2+FMA, SSE2 or NEON code (see `simd`). f16 and bf16
//! compute in f32 and round once, so their error is at most half an ulp of
//! their own format plus a tiny fraction of one.
//!
//! Error, in ulps of the result's type, against an f64 (for f32) or the
//! platform libm (for f64) reference, asserted per dispatch level by the
//! tests below over dense sweeps of every range (±0, subnormals, ±inf, NaN
//! and the saturation regions included):
//!
//! | function | f32 | f64 | method |
//! |---|---|---|---|
//! | `exp` | 1 | 1 | Cody-Waite reduction, polynomial, 2^n in one exact scaling and one rounding (f32; f64: two halves) |
//! | `log` | 1 | 1 | fdlibm's reduction, atanh series |
//! | `log1p` | 2 | 2 | `ln(1 + x)` plus the rounding correction of `1 + x` (f32: one division for both, see `float32::log1p`) |
//! | `tanh` | 2 | 2 | odd polynomial below 0.625, `1 - 2/(e^2x + 1)` above |
//! | `sigmoid` | 2 | 4 | `1 / (1 + e^-x)`, `e^x / (1 + e^x)` below 0 (one division) |
//! | `silu` | 2 | 4 | `x / (1 + e^-x)`, `x e^x / (1 + e^x)` below 0 |
//! | `softplus` | 2 | 4 | `max(x, 0) + ln(1 + e^-|x|)`, f32's logarithm `2 atanh(e / (2 + e))` by its series; `x` above 20 (PyTorch's threshold) |
//! | `erf` | 3 | scalar | `t P(t^2)` below 1, `1 - e^(-t^2) Q(2/(2+t))` above; `erfc` from `Q` above 0.5 |
//! | `gelu` | 4.5 (see below) | scalar | `x/2 erfc(-x/sqrt 2)`: `e^(-x^2/2) Q(2 / (2 + |x|/sqrt 2))` with `x^2` exact in two floats |
//! | `gelu`, dense f32 runs at AVX-512 | 2.5 | - | `x Phi(x)` from a table of 32 polynomials of `Phi(-|x|)` on `[0, 6]`, `vpermt2ps` lookups; blocks with an input below -6 take the row above (see `gelu_avx512`) |
//! | `gelu_tanh` | 4 | 4 | `x sigmoid(2u)`, `u = sqrt(2/pi)(x + 0.044715 x^3)` |
//! | `pow` | 1 | libm | `e^(y ln|x|)` in f64 lanes (`float32::pow_core`), C's special cases by selects in f32 (`pow_fix`; a second loop per block in `unary::Pow`) |
//! | `sin`, `cos` | 2 | libm | in f64 lanes: Cody-Waite below 2^20, musl's polynomials; libm above (see `trig`) |
//! | `tan` | 2 | libm | `sin r / cos r` (or `-cos r / sin r`) of `sin`'s reduction, in f64 (see `trig`) |
//! | `exp2` | 2 | libm | nearest-integer reduction (exact), Taylor series of `2^r`, 2^n as `exp`'s |
//! | `log2` | 2 | libm | `log`'s reduction and series, `k + ln m log2 e` fused |
//! | `expm1` | 3 | libm | Taylor series below 1 in magnitude, `e^x - 1` above |
//! | `sinh`, `cosh` | 1 | libm | in f64 lanes from the f64 `exp`, Taylor series near 0 (see `wide`) |
//! | `atan`, `asin`, `acos` | 1 | libm | in f64 lanes: Cephes' reduction, a 14-term series; `asin`, `acos` through `atan` (see `wide`) |
//!
//! The bounds are the tests' thresholds; the tests print the measured
//! worst cases (`cargo test --release --lib vmath -- --nocapture`). At the
//! x86-64 baseline (products and sums apart) and at AVX2+FMA (polynomial
//! steps fused, see [`Madd`]): f32 `exp` 0.95 / 0.995 ulp, `erf` 2.4 / 2.2,
//! `gelu` 5.1 / 3.5; 0.501 for `sin` and `cos` over every f32 up to 2^20 (see
//! `trig`; the machine: Note [vmath ulps] in `bench/results/ops-why.md`).
//! Ulps are counted at the result's own spacing, so a subnormal result is
//! held to a few multiples of the smallest subnormal.
//!
//! For the compositions `silu`, `gelu` and `gelu_tanh` the bound grows by
//! twice the function's condition number `|x f'(x) / f(x)|`: their inner
//! argument (`-x` inside `e^-x`, `sqrt(2/pi)(x + 0.044715 x^3)`) is
//! rounded before the outer function amplifies that rounding, which no
//! evaluation in the same precision avoids (it matters only in the far
//! negative tails, where PyTorch's `0.5 x (1 + tanh u)` returns 0). f32
//! `gelu` keeps its exponential's argument `x^2 / 2` exact, so its tail
//! stays within 4.5 ulps; the allowance covers its polynomial's rounding
//! near 0 at the baseline level (5.1 ulps at `x = 0.0146`, where the
//! condition number is 1), which FMA avoids (3.5).
//!
//! The polynomial coefficients of `erf`, of `tanh`'s small range and of
//! `gelu_avx512`'s table were fitted (least squares on Chebyshev nodes,
//! relative weight, against mpmath at 40 digits) by
//! `tests/fixtures/vmath_fit.py`.

use crate::backend::UnaryGrad;

pub(crate) mod float32;
pub(crate) mod float64;
#[cfg(target_arch = "x86_64")]
pub(crate) mod gelu_avx512;
pub(crate) mod trig;
pub(crate) mod wide;

#[cfg(test)]
pub(crate) mod tests;

/// `a * b + c` in the kernels' polynomials: fused (one rounding, one
/// instruction) when the SIMD level has FMA (`F`, from
/// [`crate::backend::cpu::simd::Kernel::call`]), a product and a sum
/// otherwise. Both are IEEE operations, so the result depends on `F` only,
/// not on the level or the vector width: the tests check both forms.
pub(crate) trait Madd: Copy {
    fn madd<const F: bool>(self, b: Self, c: Self) -> Self;
}

macro_rules! impl_madd {
    ($t:ty) => {
        impl Madd for $t {
            #[inline(always)]
            fn madd<const F: bool>(self, b: Self, c: Self) -> Self {
                if F {
                    self.mul_add(b, c)
                } else {
                    self * b + c
                }
            }
        }
    };
}
impl_madd!(f32);
impl_madd!(f64);

/// `c[0] + x (c[1] + x (c[2] + ...))`, each step a [`Madd`].
#[inline(always)]
pub(crate) fn horner<T: Madd, const F: bool, const N: usize>(c: &[T; N], x: T) -> T {
    let mut y = c[N - 1];
    let mut i = N - 1;
    while i > 0 {
        i -= 1;
        y = y.madd::<F>(x, c[i]);
    }
    y
}

/// `erf(t) / t` on `[0, 1]` as a polynomial in `t^2` (1.2e-9 relative).
#[allow(clippy::excessive_precision)]
pub(crate) const ERF_SMALL_F32: [f32; 7] = [
    1.128_379_165_689_322,
    -0.376_126_255_673_991_94,
    0.112_835_822_479_915_05,
    -0.026_853_691_099_649_357,
    0.005_188_098_889_264_581,
    -0.000_800_818_932_186_739_3,
    7.847_259_122_342_742e-05,
];

/// `e^(t^2) erfc(t)` on `[0.5, 10.5]` as a polynomial in `w = 2 / (2 + t)`
/// (2.1e-9 relative).
#[allow(clippy::excessive_precision)]
pub(crate) const ERFC_Q_F32: [f32; 10] = [
    3.704321040715486e-06,
    0.28197993364108415,
    0.28364830266763663,
    0.2347754924131752,
    0.23565440462674228,
    -0.1088374936232641,
    0.4077874621001518,
    -0.612654312065678,
    0.3523554503526775,
    -0.07472185011239013,
];

/// `e^(t^2) erfc(t)` on `[0, 10.5]` as a polynomial in `w = 2 / (2 + t)`
/// (2.0e-9 relative with these f32 coefficients: fitted one coefficient
/// at a time, each rounded to f32 before the rest are refitted): `gelu`'s
/// normal CDF in one piece.
#[allow(clippy::excessive_precision)]
pub(crate) const ERFC_Q_WIDE_F32: [f32; 12] = [
    2.8714098334603477e-06,
    0.28200727701187134,
    0.2832527756690979,
    0.23810173571109772,
    0.2175888866186142,
    -0.0423000231385231,
    0.23815974593162537,
    -0.313169926404953,
    -0.006783085875213146,
    0.20414766669273376,
    -0.12633919715881348,
    0.025331275537610054,
];

/// `(tanh(x) - x) / x^3` on `x^2` in `[0, 0.625^2]` (1.4e-7 relative).
#[allow(clippy::excessive_precision)]
pub(crate) const TANH_SMALL_F32: [f32; 5] = [
    -0.333_333_287_875_707,
    0.133_327_573_241_693_17,
    -0.053_849_351_152_101_294,
    0.020_990_876_774_600_774,
    -0.006_088_720_376_741_897,
];

/// The kernels that are the same formula in f32 and f64, written once over
/// the `exp`, `exp_neg`, `log1p`, `ln1p_unit` and `tanh_small` of the file
/// that expands it.
macro_rules! derived_kernels {
    ($t:ident) => {
        /// `tanh x`: a polynomial below 0.625, `1 - 2 / (e^2|x| + 1)` above.
        #[inline(always)]
        pub(crate) fn tanh<const F: bool>(x: $t) -> $t {
            let a = x.abs();
            // tanh is odd: the sign of x, even for -0 (x + x z P(z) gives +0).
            let small = tanh_small::<F>(x, x * x).copysign(x);
            let big = (1.0 - 2.0 / (exp::<F>(a + a) + 1.0)).copysign(x);
            if a < 0.625 {
                small
            } else {
                big
            }
        }

        /// `a sigmoid(x)` in one division: `a / (1 + e^-x)`, and
        /// `a e^x / (1 + e^x)` below 0, so that it falls to the
        /// subnormals with `e^x` instead of to 0 when `e^-x` overflows.
        /// `sigmoid` (`a = 1`) and `silu` (`a = x`) share it.
        #[inline(always)]
        fn times_sigmoid<const F: bool>(x: $t, a: $t) -> $t {
            let e = exp_neg::<F>(-x.abs());
            let n = if x >= 0.0 { a } else { a * e };
            n / (1.0 + e)
        }

        /// `1 / (1 + e^-x)` ([`times_sigmoid`] of 1).
        #[inline(always)]
        pub(crate) fn sigmoid<const F: bool>(x: $t) -> $t {
            times_sigmoid::<F>(x, 1.0)
        }

        /// SiLU (swish), `x sigmoid(x)` as [`times_sigmoid`] of `x`: one
        /// rounding and one product fewer than `x * sigmoid(x)`.
        #[inline(always)]
        pub(crate) fn silu<const F: bool>(x: $t) -> $t {
            times_sigmoid::<F>(x, x)
        }

        /// `ln(1 + e^x)`, and `x` itself above 20 (PyTorch's default
        /// threshold), as `max(x, 0) + ln(1 + e^-|x|)` (the logarithm by
        /// `ln1p_unit`, for arguments in `[0, 1]`): no overflow, no
        /// cancellation.
        #[inline(always)]
        pub(crate) fn softplus<const F: bool>(x: $t) -> $t {
            let y = x.max(0.0) + ln1p_unit::<F>(exp_neg::<F>(-x.abs()));
            if x > 20.0 {
                x
            } else {
                y
            }
        }

        /// GELU, tanh form (`approximate="tanh"`): `x/2 (1 + tanh u)` with
        /// `u = sqrt(2/pi) (x + 0.044715 x^3)`, computed as
        /// `x sigmoid(2u)`: the same value without the cancellation of
        /// `1 + tanh u` for x < 0.
        #[inline(always)]
        pub(crate) fn gelu_tanh<const F: bool>(x: $t) -> $t {
            const K: $t = 0.797_884_560_802_865_4; // sqrt(2 / pi)
            let u = K * (x + 0.044_715 * x * x * x);
            x * sigmoid::<F>(u + u)
        }

        /// tanh' from the output: `1 - y^2`.
        #[inline(always)]
        pub(crate) fn tanh_grad<const F: bool>(y: $t) -> $t {
            1.0 - y * y
        }

        /// sigmoid' from the output: `y (1 - y)`.
        #[inline(always)]
        pub(crate) fn sigmoid_grad<const F: bool>(y: $t) -> $t {
            y * (1.0 - y)
        }

        /// silu'(x) = `s (1 + x (1 - s))`, `s = sigmoid(x)`.
        #[inline(always)]
        pub(crate) fn silu_grad<const F: bool>(x: $t) -> $t {
            let s = sigmoid::<F>(x);
            s * (1.0 + x * (1.0 - s))
        }

        /// softplus'(x) = `sigmoid(x)`, and 1 above the threshold 20.
        #[inline(always)]
        pub(crate) fn softplus_grad<const F: bool>(x: $t) -> $t {
            let s = sigmoid::<F>(x);
            if x > 20.0 {
                1.0
            } else {
                s
            }
        }

        /// gelu_tanh'(x), PyTorch's formula:
        /// `(1 + t)/2 + x/2 (1 - t^2) k (1 + 3c x^2)`, `t = tanh(k (x + c x^3))`.
        #[inline(always)]
        pub(crate) fn gelu_tanh_grad<const F: bool>(x: $t) -> $t {
            const K: $t = 0.797_884_560_802_865_4;
            const C: $t = 0.044_715;
            let x2 = x * x;
            let t = tanh::<F>(K * (x + C * x2 * x));
            // Beyond |x| = 100, 1 - t^2 is exactly 0; clamping keeps
            // 0 * inf (x^2 overflowing) from making NaN.
            let xc = x.clamp(-100.0, 100.0);
            0.5 * (1.0 + t) + 0.5 * xc * (1.0 - t * t) * K * (1.0 + 3.0 * C * xc * xc)
        }

        /// erf'(x) = `2/sqrt(pi) e^(-x^2)`.
        #[inline(always)]
        pub(crate) fn erf_grad<const F: bool>(x: $t) -> $t {
            std::$t::consts::FRAC_2_SQRT_PI * exp_neg::<F>(-(x * x))
        }
    };
}
pub(crate) use derived_kernels;

/// The vectorisable kernels on a compute type (f32 or f64), so that
/// generic CPU code (`unary::float`, the fused kernels) calls one name.
pub(crate) trait VMath: Copy {
    fn v_exp<const F: bool>(self) -> Self;
    fn v_log<const F: bool>(self) -> Self;
    fn v_log1p<const F: bool>(self) -> Self;
    fn v_tanh<const F: bool>(self) -> Self;
    fn v_sigmoid<const F: bool>(self) -> Self;
    fn v_silu<const F: bool>(self) -> Self;
    fn v_softplus<const F: bool>(self) -> Self;
    fn v_erf<const F: bool>(self) -> Self;
    fn v_gelu<const F: bool>(self) -> Self;
    fn v_gelu_tanh<const F: bool>(self) -> Self;
    /// `sin`, exact to the table's bound where [`VMath::v_trig_outside`]
    /// is false (elsewhere the caller recomputes with libm).
    fn v_sin<const F: bool>(self) -> Self;
    /// `cos`, as [`VMath::v_sin`].
    fn v_cos<const F: bool>(self) -> Self;
    /// `tan`, as [`VMath::v_sin`].
    fn v_tan<const F: bool>(self) -> Self;
    fn v_atan<const F: bool>(self) -> Self;
    fn v_asin<const F: bool>(self) -> Self;
    fn v_acos<const F: bool>(self) -> Self;
    fn v_sinh<const F: bool>(self) -> Self;
    fn v_cosh<const F: bool>(self) -> Self;
    fn v_expm1<const F: bool>(self) -> Self;
    fn v_exp2<const F: bool>(self) -> Self;
    fn v_log2<const F: bool>(self) -> Self;
    /// Whether `v_sin`, `v_cos` and `v_tan` leave `self` to libm (`trig`'s
    /// fix-up pass): always false for f64, which calls libm itself.
    fn v_trig_outside(self) -> bool;
    /// Round half to even (`torch.round`): one instruction from SSE4.1 on.
    fn v_round_even(self) -> Self;
    /// The derivative `which` at `self` (the saved input or output).
    fn v_grad<const F: bool>(self, which: UnaryGrad) -> Self;
}

macro_rules! impl_vmath {
    ($t:ident, $m:ident) => {
        impl VMath for $t {
            #[inline(always)]
            fn v_exp<const F: bool>(self) -> Self {
                $m::exp::<F>(self)
            }
            #[inline(always)]
            fn v_log<const F: bool>(self) -> Self {
                $m::log::<F>(self)
            }
            #[inline(always)]
            fn v_log1p<const F: bool>(self) -> Self {
                $m::log1p::<F>(self)
            }
            #[inline(always)]
            fn v_tanh<const F: bool>(self) -> Self {
                $m::tanh::<F>(self)
            }
            #[inline(always)]
            fn v_sigmoid<const F: bool>(self) -> Self {
                $m::sigmoid::<F>(self)
            }
            #[inline(always)]
            fn v_silu<const F: bool>(self) -> Self {
                $m::silu::<F>(self)
            }
            #[inline(always)]
            fn v_softplus<const F: bool>(self) -> Self {
                $m::softplus::<F>(self)
            }
            #[inline(always)]
            fn v_erf<const F: bool>(self) -> Self {
                $m::erf::<F>(self)
            }
            #[inline(always)]
            fn v_gelu<const F: bool>(self) -> Self {
                $m::gelu::<F>(self)
            }
            #[inline(always)]
            fn v_gelu_tanh<const F: bool>(self) -> Self {
                $m::gelu_tanh::<F>(self)
            }
            #[inline(always)]
            fn v_sin<const F: bool>(self) -> Self {
                $m::sin::<F>(self)
            }
            #[inline(always)]
            fn v_cos<const F: bool>(self) -> Self {
                $m::cos::<F>(self)
            }
            #[inline(always)]
            fn v_tan<const F: bool>(self) -> Self {
                $m::tan::<F>(self)
            }
            #[inline(always)]
            fn v_atan<const F: bool>(self) -> Self {
                $m::atan::<F>(self)
            }
            #[inline(always)]
            fn v_asin<const F: bool>(self) -> Self {
                $m::asin::<F>(self)
            }
            #[inline(always)]
            fn v_acos<const F: bool>(self) -> Self {
                $m::acos::<F>(self)
            }
            #[inline(always)]
            fn v_sinh<const F: bool>(self) -> Self {
                $m::sinh::<F>(self)
            }
            #[inline(always)]
            fn v_cosh<const F: bool>(self) -> Self {
                $m::cosh::<F>(self)
            }
            #[inline(always)]
            fn v_expm1<const F: bool>(self) -> Self {
                $m::expm1::<F>(self)
            }
            #[inline(always)]
            fn v_exp2<const F: bool>(self) -> Self {
                $m::exp2::<F>(self)
            }
            #[inline(always)]
            fn v_log2<const F: bool>(self) -> Self {
                $m::log2::<F>(self)
            }
            #[inline(always)]
            fn v_trig_outside(self) -> bool {
                $m::trig_outside(self)
            }
            #[inline(always)]
            fn v_round_even(self) -> Self {
                self.round_ties_even()
            }
            #[inline(always)]
            fn v_grad<const F: bool>(self, which: UnaryGrad) -> Self {
                match which {
                    UnaryGrad::Tanh => $m::tanh_grad::<F>(self),
                    UnaryGrad::Sigmoid => $m::sigmoid_grad::<F>(self),
                    UnaryGrad::Silu => $m::silu_grad::<F>(self),
                    UnaryGrad::Softplus => $m::softplus_grad::<F>(self),
                    UnaryGrad::Gelu => $m::gelu_grad::<F>(self),
                    UnaryGrad::GeluTanh => $m::gelu_tanh_grad::<F>(self),
                    UnaryGrad::Erf => $m::erf_grad::<F>(self),
                }
            }
        }
    };
}
impl_vmath!(f32, float32);
impl_vmath!(f64, float64);
