//! The CPU kernels of the elementwise unary ops (touch point 2 of the op
//! table in `src/unary_table.rs`): one scalar function per op, named as the
//! op, and the dispatch generated from the table.
//!
//! * [`float`]: every op, over the compute type `C` (f32 for f32, f16 and
//!   bf16; f64 for f64); the dispatch converts up and rounds once on the way
//!   down.
//! * [`typed`]: in the storage type itself: the `numeric` ops on integers
//!   (wrapping) and the `exact` ops on every dtype.
//!
//! `clamp` (which takes bounds) is written out below the dispatch.

use super::elementwise::map1;
use super::num::{Flt, Num};
use crate::backend::{Operand, UnaryOp};
use crate::{with_float_dtype, with_numeric_dtype};

/// The float kernels, over the compute type.
pub(crate) mod float {
    use crate::backend::cpu::num::{erf as erf_fast, erf_precise, gelu as gelu_exact, round_even};
    use num_traits::Float;

    #[inline(always)]
    pub(crate) fn exp<C: Float>(x: C) -> C {
        x.exp()
    }
    #[inline(always)]
    pub(crate) fn log<C: Float>(x: C) -> C {
        x.ln()
    }
    #[inline(always)]
    pub(crate) fn log1p<C: Float>(x: C) -> C {
        x.ln_1p()
    }
    #[inline(always)]
    pub(crate) fn sqrt<C: Float>(x: C) -> C {
        x.sqrt()
    }
    #[inline(always)]
    pub(crate) fn rsqrt<C: Float>(x: C) -> C {
        C::one() / x.sqrt()
    }
    #[inline(always)]
    pub(crate) fn sin<C: Float>(x: C) -> C {
        x.sin()
    }
    #[inline(always)]
    pub(crate) fn cos<C: Float>(x: C) -> C {
        x.cos()
    }
    #[inline(always)]
    pub(crate) fn tanh<C: Float>(x: C) -> C {
        x.tanh()
    }
    #[inline(always)]
    pub(crate) fn sigmoid<C: Float>(x: C) -> C {
        C::one() / (C::one() + (-x).exp())
    }
    #[inline(always)]
    pub(crate) fn gelu<C: Float>(x: C) -> C {
        gelu_exact(x)
    }
    /// The fast erf (1.2e-7, below f32 rounding) for f32/f16/bf16; f64 to a
    /// few ulps.
    #[inline(always)]
    pub(crate) fn erf<C: Float>(x: C) -> C {
        if std::mem::size_of::<C>() == 8 {
            let v = x.to_f64().unwrap_or(f64::NAN);
            return C::from(erf_precise(v)).unwrap_or_else(C::nan);
        }
        erf_fast(x)
    }
    #[inline(always)]
    pub(crate) fn floor<C: Float>(x: C) -> C {
        x.floor()
    }
    #[inline(always)]
    pub(crate) fn round<C: Float>(x: C) -> C {
        round_even(x)
    }
    /// `(x > 0) - (x < 0)`, as PyTorch: NaN and -0 give 0.
    #[inline(always)]
    pub(crate) fn sign<C: Float>(x: C) -> C {
        if x > C::zero() {
            C::one()
        } else if x < C::zero() {
            -C::one()
        } else {
            C::zero()
        }
    }
    #[inline(always)]
    pub(crate) fn reciprocal<C: Float>(x: C) -> C {
        C::one() / x
    }
    #[inline(always)]
    pub(crate) fn square<C: Float>(x: C) -> C {
        x * x
    }
}

/// Kernels in the storage type: the `numeric` ops on integers (wrapping
/// arithmetic) and the `exact` ops on every numeric dtype.
pub(crate) mod typed {
    use crate::backend::cpu::num::Num;

    #[inline(always)]
    pub(crate) fn neg<T: Num>(x: T) -> T {
        x.neg()
    }
    #[inline(always)]
    pub(crate) fn abs<T: Num>(x: T) -> T {
        x.abs()
    }
    /// One compare and a select (NaN <= 0 is false: NaN passes through).
    #[inline(always)]
    pub(crate) fn relu<T: Num>(x: T) -> T {
        if x <= T::zero() {
            T::zero()
        } else {
            x
        }
    }
    #[inline(always)]
    pub(crate) fn floor<T: Num>(x: T) -> T {
        x
    }
    #[inline(always)]
    pub(crate) fn round<T: Num>(x: T) -> T {
        x
    }
    #[inline(always)]
    pub(crate) fn sign<T: Num>(x: T) -> T {
        let zero = T::zero();
        if x > zero {
            T::one()
        } else if x < zero {
            zero.sub(T::one())
        } else {
            zero
        }
    }
    #[inline(always)]
    pub(crate) fn square<T: Num>(x: T) -> T {
        x.mul(x)
    }
}

macro_rules! cpu_unary_dispatch {
    ($($variant:ident $name:ident $inplace:ident $out:ident $domain:ident $doc:literal
       $node:literal $saves:ident ($($arg:ident),*) $body:block);* $(;)?) => {
        fn float_unary<T: Flt>(op: UnaryOp, src: &Operand, dst: &Operand) {
            // SAFETY: `unary` checked that both operands have dtype `T`; the
            // caller holds the locks and the layouts fit the storages.
            unsafe {
                match op {
                    $(UnaryOp::$variant => cpu_unary_dispatch!(@float $domain $name, T, src, dst),)*
                    UnaryOp::Clamp(lo, hi) => clamp::<T>(src, dst, lo, hi),
                }
            }
        }

        fn int_unary<T: Num>(op: UnaryOp, src: &Operand, dst: &Operand) {
            match op {
                $(UnaryOp::$variant => cpu_unary_dispatch!(@int $domain $name, T, src, dst),)*
                UnaryOp::Clamp(lo, hi) => {
                    // SAFETY: as in `float_unary`.
                    unsafe { clamp::<T>(src, dst, lo, hi) }
                }
            }
        }
    };
    (@float exact $name:ident, $T:ident, $src:ident, $dst:ident) => {
        map1::<$T, $T>($src, $dst, typed::$name)
    };
    (@float $domain:ident $name:ident, $T:ident, $src:ident, $dst:ident) => {
        map1::<$T, $T>($src, $dst, |x| $T::down(float::$name(x.up())))
    };
    (@int float $name:ident, $T:ident, $src:ident, $dst:ident) => {
        unreachable!(
            "float op {} on an integer dtype: the op layer promotes first",
            stringify!($name)
        )
    };
    (@int $domain:ident $name:ident, $T:ident, $src:ident, $dst:ident) => {
        // SAFETY: `unary` checked that both operands have dtype `T`; the
        // caller holds the locks and the layouts fit the storages.
        unsafe { map1::<$T, $T>($src, $dst, typed::$name) }
    };
}
crate::unary_table::unary_table!(cpu_unary_dispatch);

/// Clamp to `[lo, hi]` in the storage type; a NaN bound is absent.
///
/// # Safety
/// As for [`map1`].
unsafe fn clamp<T: Num>(src: &Operand, dst: &Operand, lo: f64, hi: f64) {
    let lo = (!lo.is_nan()).then(|| T::from_f64(lo));
    let hi = (!hi.is_nan()).then(|| T::from_f64(hi));
    // SAFETY: the caller's contract.
    unsafe {
        map1::<T, T>(src, dst, move |x| {
            let mut x = x;
            if let Some(l) = lo {
                if x < l {
                    x = l;
                }
            }
            if let Some(h) = hi {
                if x > h {
                    x = h;
                }
            }
            x
        })
    }
}

/// `dst = op(src)`; both operands have one dtype (the op layer promotes
/// float-only ops on integers to f32 first, and allows only the identity
/// ops on bool).
pub(crate) fn unary(op: UnaryOp, src: &Operand, dst: &Operand) {
    debug_assert_eq!(src.dtype, dst.dtype);
    with_float_dtype!(src.dtype, T => float_unary::<T>(op, src, dst), _ => {
        with_numeric_dtype!(src.dtype, T => int_unary::<T>(op, src, dst), _ => {
            // bool: only the identity-like ops make sense; the op layer refuses the rest.
            // SAFETY: both operands are bool; the caller holds the locks.
            unsafe { map1::<bool, bool>(src, dst, |x| x) }
        })
    })
}
