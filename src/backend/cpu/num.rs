//! Numeric traits the CPU kernels are written against, so that each kernel is
//! written once for every dtype.

use half::{bf16, f16};

/// Arithmetic on a numeric element type (not bool). Integer arithmetic wraps,
/// as in PyTorch; float `max`/`min` propagate NaN, as `torch.maximum` does.
pub(crate) trait Num: crate::Element + Default {
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn div(self, o: Self) -> Self;
    fn pow(self, o: Self) -> Self;
    fn max(self, o: Self) -> Self;
    fn min(self, o: Self) -> Self;
    fn neg(self) -> Self;
    fn abs(self) -> Self;
    fn is_nan(self) -> bool;
}

macro_rules! num_float {
    ($t:ty) => {
        impl Num for $t {
            #[inline(always)]
            fn add(self, o: Self) -> Self {
                self + o
            }
            #[inline(always)]
            fn sub(self, o: Self) -> Self {
                self - o
            }
            #[inline(always)]
            fn mul(self, o: Self) -> Self {
                self * o
            }
            #[inline(always)]
            fn div(self, o: Self) -> Self {
                self / o
            }
            #[inline(always)]
            fn pow(self, o: Self) -> Self {
                num_traits::Float::powf(self, o)
            }
            #[inline(always)]
            fn max(self, o: Self) -> Self {
                if self.is_nan() || o.is_nan() {
                    <$t as num_traits::Float>::nan()
                } else if self > o {
                    self
                } else {
                    o
                }
            }
            #[inline(always)]
            fn min(self, o: Self) -> Self {
                if self.is_nan() || o.is_nan() {
                    <$t as num_traits::Float>::nan()
                } else if self < o {
                    self
                } else {
                    o
                }
            }
            #[inline(always)]
            fn neg(self) -> Self {
                -self
            }
            #[inline(always)]
            fn abs(self) -> Self {
                num_traits::Float::abs(self)
            }
            #[inline(always)]
            fn is_nan(self) -> bool {
                num_traits::Float::is_nan(self)
            }
        }
    };
}
num_float!(f32);
num_float!(f64);
num_float!(f16);
num_float!(bf16);

macro_rules! num_int {
    ($t:ty) => {
        #[allow(unused_comparisons)]
        impl Num for $t {
            #[inline(always)]
            fn add(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            #[inline(always)]
            fn sub(self, o: Self) -> Self {
                self.wrapping_sub(o)
            }
            #[inline(always)]
            fn mul(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            /// Floor division (PyTorch's `//`); division by zero gives 0
            /// rather than a panic (`div` on integer tensors is promoted to
            /// float by the op layer, so only `floor_divide` reaches this).
            #[inline(always)]
            fn div(self, o: Self) -> Self {
                if o == 0 {
                    0
                } else {
                    let q = self.wrapping_div(o);
                    if (self % o != 0) && ((self < 0) != (o < 0)) {
                        q - 1
                    } else {
                        q
                    }
                }
            }
            #[inline(always)]
            fn pow(self, o: Self) -> Self {
                if o < 0 {
                    return if self == 1 { 1 } else { 0 };
                }
                self.wrapping_pow(o as u32)
            }
            #[inline(always)]
            fn max(self, o: Self) -> Self {
                Ord::max(self, o)
            }
            #[inline(always)]
            fn min(self, o: Self) -> Self {
                Ord::min(self, o)
            }
            #[inline(always)]
            fn neg(self) -> Self {
                self.wrapping_neg()
            }
            #[inline(always)]
            #[allow(unused_comparisons)]
            fn abs(self) -> Self {
                if self < 0 {
                    self.wrapping_neg()
                } else {
                    self
                }
            }
            #[inline(always)]
            fn is_nan(self) -> bool {
                false
            }
        }
    };
}
num_int!(i64);
num_int!(i32);
num_int!(u8);

/// Float element types, computed in `C` (f32 for f32/f16/bf16, f64 for f64).
pub(crate) trait Flt: Num {
    type C: num_traits::Float + Send + Sync;
    fn up(self) -> Self::C;
    fn down(c: Self::C) -> Self;
}

macro_rules! flt {
    ($t:ty, $c:ty, $up:expr, $down:expr) => {
        impl Flt for $t {
            type C = $c;
            #[inline(always)]
            fn up(self) -> $c {
                #[allow(clippy::redundant_closure_call)]
                ($up)(self)
            }
            #[inline(always)]
            fn down(c: $c) -> Self {
                #[allow(clippy::redundant_closure_call)]
                ($down)(c)
            }
        }
    };
}
flt!(f32, f32, |x| x, |c| c);
flt!(f64, f64, |x| x, |c| c);
flt!(f16, f32, |x: f16| x.to_f32(), f16::from_f32);
flt!(bf16, f32, |x: bf16| x.to_f32(), bf16::from_f32);

/// Round half to even (what `torch.round` does).
#[inline(always)]
pub(crate) fn round_even<C: num_traits::Float>(x: C) -> C {
    let r = x.round();
    let two = C::one() + C::one();
    if (x - x.trunc()).abs() == C::one() / two {
        two * (x / two).round()
    } else {
        r
    }
}

/// GELU, exact (erf) form, as `torch.nn.functional.gelu` by default.
#[inline(always)]
pub(crate) fn gelu<C: num_traits::Float>(x: C) -> C {
    let half = C::from(0.5).unwrap();
    let inv_sqrt2 = C::from(std::f64::consts::FRAC_1_SQRT_2).unwrap();
    half * x * (C::one() + erf(x * inv_sqrt2))
}

/// erf, to about 1e-7 relative (W. J. Cody's rational approximations are
/// overkill here; this is Abramowitz-Stegun 7.1.26 refined by one Newton step
/// on f64).
#[inline(always)]
pub(crate) fn erf<C: num_traits::Float>(x: C) -> C {
    let xf = x.to_f64().unwrap();
    C::from(erf_f64(xf)).unwrap()
}

/// erf on f64 with a maximum error below 1.2e-7 (Numerical Recipes' erfc
/// Chebyshev fit).
pub(crate) fn erf_f64(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t
        * (-z * z - 1.26551223
            + t * (1.00002368
                + t * (0.37409196
                    + t * (0.09678418
                        + t * (-0.18628806
                            + t * (0.27886807
                                + t * (-1.13520398
                                    + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))))
            .exp();
    if x >= 0.0 {
        1.0 - r
    } else {
        r - 1.0
    }
}
