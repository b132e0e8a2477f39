//! Numeric traits the CPU kernels are written against, so that each kernel is
//! written once for every dtype.

use half::{bf16, f16};

/// Arithmetic on a numeric element type (not bool). Integer arithmetic wraps,
/// as in PyTorch; float `max`/`min` propagate NaN, as `torch.maximum` does.
pub(crate) trait Num: crate::dtype::Element + Default {
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn div(self, o: Self) -> Self;
    fn pow(self, o: Self) -> Self;
    /// C's `fmod` (the sign of `self`); 0 for an integer zero divisor.
    fn fmod(self, o: Self) -> Self;
    /// Python's `%` (the sign of `o`); 0 for an integer zero divisor.
    fn remainder(self, o: Self) -> Self;
    /// Python's `//`; 0 for an integer zero divisor.
    fn floor_div(self, o: Self) -> Self;
    /// `atan2(self, o)` (integers through f64; the op layer computes
    /// `atan2` in a float dtype).
    fn atan2(self, o: Self) -> Self;
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
            fn fmod(self, o: Self) -> Self {
                self % o
            }
            /// ATen's: `fmod`, moved to the divisor's sign.
            #[inline(always)]
            fn remainder(self, o: Self) -> Self {
                let zero = <$t as num_traits::Zero>::zero();
                let m = self % o;
                if m != zero && ((o < zero) != (m < zero)) {
                    m + o
                } else {
                    m
                }
            }
            /// ATen's `div_floor_floating`, in f32 for f16 and bf16 (as
            /// ATen's reduced-precision kernels), rounded once.
            #[inline(always)]
            fn floor_div(self, o: Self) -> Self {
                <$t as Flt>::down(div_floor_floating(self.up(), o.up()))
            }
            #[inline(always)]
            fn atan2(self, o: Self) -> Self {
                num_traits::Float::atan2(self, o)
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
                    if (self.wrapping_rem(o) != 0) && ((self < 0) != (o < 0)) {
                        q - 1
                    } else {
                        q
                    }
                }
            }
            /// Wrapping power by squaring over the whole exponent range. A
            /// negative exponent gives `1 / self` truncated toward zero, as
            /// PyTorch's integer `pow` does: 1 for 1, +-1 for -1, 0 otherwise
            /// (and 0 for 0, rather than a division by zero).
            #[inline(always)]
            fn pow(self, o: Self) -> Self {
                if o < 0 {
                    let one: Self = 1;
                    return if self == one {
                        one
                    } else if self == one.wrapping_neg() {
                        if o % 2 == 0 {
                            one
                        } else {
                            self
                        }
                    } else {
                        0
                    };
                }
                let (mut base, mut e, mut acc): (Self, u64, Self) = (self, o as u64, 1);
                while e > 0 {
                    if e & 1 == 1 {
                        acc = acc.wrapping_mul(base);
                    }
                    base = base.wrapping_mul(base);
                    e >>= 1;
                }
                acc
            }
            #[inline(always)]
            fn fmod(self, o: Self) -> Self {
                if o == 0 {
                    0
                } else {
                    self.wrapping_rem(o)
                }
            }
            #[inline(always)]
            fn remainder(self, o: Self) -> Self {
                if o == 0 {
                    return 0;
                }
                let r = self.wrapping_rem(o);
                if r != 0 && ((r < 0) != (o < 0)) {
                    r.wrapping_add(o)
                } else {
                    r
                }
            }
            #[inline(always)]
            fn floor_div(self, o: Self) -> Self {
                self.div(o)
            }
            #[inline(always)]
            fn atan2(self, o: Self) -> Self {
                (self as f64).atan2(o as f64) as Self
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

/// ATen's `div_floor_floating`: `(a - fmod(a, b)) / b`, one less when the
/// remainder's sign differs from the divisor's, then rounded to the nearest
/// whole number (it is one up to rounding); a signed zero for a zero
/// quotient; `a / b` for a zero divisor.
#[inline(always)]
fn div_floor_floating<F: num_traits::Float>(a: F, b: F) -> F {
    let (zero, one) = (F::zero(), F::one());
    if b == zero {
        return a / b;
    }
    let m = a % b;
    let mut div = (a - m) / b;
    if m != zero && ((b < zero) != (m < zero)) {
        div = div - one;
    }
    if div != zero {
        let f = div.floor();
        if div - f > one / (one + one) {
            f + one
        } else {
            f
        }
    } else {
        zero.copysign(a / b)
    }
}

/// Float element types, computed in `C` (f32 for f32/f16/bf16, f64 for f64).
pub(crate) trait Flt: Num {
    type C: num_traits::Float + Send + Sync + crate::backend::cpu::vmath::VMath;
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

/// GELU on f64 to full precision: `x/2 * (1 + erf(x/sqrt 2))` for x >= 0 and
/// `x/2 * erfc(-x/sqrt 2)` below 0 (no cancellation in the tail).
pub(crate) fn gelu_f64(x: f64) -> f64 {
    let z = x * std::f64::consts::FRAC_1_SQRT_2;
    if x.is_nan() {
        x
    } else if x >= 0.0 {
        0.5 * x * (1.0 + erf_precise(z))
    } else {
        0.5 * x * erfc_precise(-z)
    }
}

/// erf to a few ulps: the Taylor series `2/sqrt(pi) e^(-z^2) sum 2^n z^(2n+1) / (2n+1)!!`
/// (all terms positive) below 2.5, `1 - erfc` above.
pub(crate) fn erf_precise(z: f64) -> f64 {
    let a = z.abs();
    let r = if a < 2.5 {
        erf_series(a)
    } else {
        1.0 - erfc_precise(a)
    };
    r.copysign(z)
}

/// erf by its positive-term series, for `0 <= z < 2.5` (at most ~45 terms).
fn erf_series(z: f64) -> f64 {
    let z2 = z * z;
    let (mut term, mut sum, mut n) = (z, z, 0.0f64);
    while term > sum * 1e-17 {
        n += 1.0;
        term *= 2.0 * z2 / (2.0 * n + 1.0);
        sum += term;
    }
    std::f64::consts::FRAC_2_SQRT_PI * (-z2).exp() * sum
}

/// erfc for `z >= 0`: `1 - erf` below 2.5 (erfc > 4e-4 there, so little is
/// lost), the continued fraction `e^(-z^2)/sqrt(pi) / (z + (1/2)/(z + 1/(z + (3/2)/(z + ...))))`
/// (Abramowitz-Stegun 7.1.14, evaluated by Lentz's method) above.
pub(crate) fn erfc_precise(z: f64) -> f64 {
    if z < 2.5 {
        return 1.0 - erf_series(z);
    }
    if z > 27.0 {
        return 0.0; // below the smallest subnormal
    }
    let tiny = 1e-300;
    let mut f = z;
    let (mut c, mut d) = (f, 0.0f64);
    for i in 1..500 {
        let a = i as f64 * 0.5;
        d = z + a * d;
        if d.abs() < tiny {
            d = tiny;
        }
        d = 1.0 / d;
        c = z + a / c;
        if c.abs() < tiny {
            c = tiny;
        }
        let delta = c * d;
        f *= delta;
        if (delta - 1.0).abs() < 1e-16 {
            break;
        }
    }
    (-z * z).exp() / (std::f64::consts::PI.sqrt() * f)
}

/// `exp` in the compute type: `vmath`'s branch-free polynomial (so loops
/// over it vectorise inside `simd::run`).
pub(crate) trait FastExp: num_traits::Float {
    /// `F`: fuse the polynomial's products (see `vmath::Madd`).
    fn fexp<const F: bool>(self) -> Self;
    /// `e^self` for `self <= 0` (`vmath`'s `exp_neg`: the same bits,
    /// cheaper), as in `x - max` of a softmax.
    fn fexp_neg<const F: bool>(self) -> Self;
    /// Widened to f64.
    fn wide(self) -> f64;
}
impl FastExp for f64 {
    #[inline(always)]
    fn fexp<const F: bool>(self) -> f64 {
        crate::backend::cpu::vmath::float64::exp::<F>(self)
    }
    #[inline(always)]
    fn fexp_neg<const F: bool>(self) -> f64 {
        crate::backend::cpu::vmath::float64::exp_neg::<F>(self)
    }
    #[inline(always)]
    fn wide(self) -> f64 {
        self
    }
}
impl FastExp for f32 {
    #[inline(always)]
    fn fexp<const F: bool>(self) -> f32 {
        crate::backend::cpu::vmath::float32::exp::<F>(self)
    }
    #[inline(always)]
    fn fexp_neg<const F: bool>(self) -> f32 {
        crate::backend::cpu::vmath::float32::exp_neg::<F>(self)
    }
    #[inline(always)]
    fn wide(self) -> f64 {
        self as f64
    }
}
