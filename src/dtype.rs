//! Element types.

use half::{bf16, f16};
use std::fmt;

/// The element type of a tensor.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// 32-bit float (the default float type).
    F32,
    /// 64-bit float.
    F64,
    /// IEEE half precision.
    F16,
    /// bfloat16.
    BF16,
    /// 64-bit signed integer (the default integer type, and the index type).
    I64,
    /// 32-bit signed integer.
    I32,
    /// 8-bit unsigned integer.
    U8,
    /// Boolean, one byte per element (0 or 1).
    Bool,
}

impl DType {
    /// Every dtype, in promotion order within each family.
    pub const ALL: [DType; 8] = [
        DType::Bool,
        DType::U8,
        DType::I32,
        DType::I64,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
    ];

    /// Bytes per element.
    pub const fn size_in_bytes(self) -> usize {
        match self {
            DType::F64 | DType::I64 => 8,
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::U8 | DType::Bool => 1,
        }
    }
    /// `true` for f32, f64, f16 and bf16.
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
    }
    /// `true` if PyTorch stores the number `v` into this dtype without an
    /// overflow error (c10's `checked_convert`): an integral `v` (a Python
    /// int) fits an integer dtype within its range, and u8 also takes
    /// -255..0, which wraps (-1 is 255); a fractional `v` (a Python float)
    /// must lie within the range (NaN does not fit an integer); a float
    /// dtype takes any value within its finite range, and infinities and
    /// NaN; bool takes anything.
    pub(crate) fn scalar_fits(self, v: f64) -> bool {
        let (lo, hi) = match self {
            DType::Bool | DType::F64 => return true,
            DType::F32 => (f32::MIN as f64, f32::MAX as f64),
            DType::F16 => (f16::MIN.to_f64(), f16::MAX.to_f64()),
            DType::BF16 => (bf16::MIN.to_f64(), bf16::MAX.to_f64()),
            DType::I64 => (i64::MIN as f64, i64::MAX as f64),
            DType::I32 => (i32::MIN as f64, i32::MAX as f64),
            DType::U8 => (0.0, 255.0),
        };
        if self.is_float() {
            return !v.is_finite() || (lo..=hi).contains(&v);
        }
        if v.is_nan() {
            return false;
        }
        let integral = v.fract() == 0.0;
        if self == DType::U8 && integral {
            return v.abs() <= 255.0;
        }
        // i64's range ends at 2^63, which f64 represents: it does not fit.
        if self == DType::I64 {
            return v >= lo && v < hi;
        }
        v >= lo && v <= hi
    }
    /// `true` for i64, i32 and u8 (not bool).
    pub const fn is_int(self) -> bool {
        matches!(self, DType::I64 | DType::I32 | DType::U8)
    }
    /// The name PyTorch uses, e.g. `"float32"`.
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::I64 => "int64",
            DType::I32 => "int32",
            DType::U8 => "uint8",
            DType::Bool => "bool",
        }
    }

    /// PyTorch's type promotion for two tensor operands: bool < integers < floats;
    /// within integers the wider wins; f16 with bf16 gives f32.
    pub fn promote(self, other: DType) -> DType {
        use DType::*;
        if self == other {
            return self;
        }
        match (self, other) {
            (F64, _) | (_, F64) => F64,
            (F32, _) | (_, F32) => F32,
            (F16, BF16) | (BF16, F16) => F32,
            (F16, _) | (_, F16) => F16,
            (BF16, _) | (_, BF16) => BF16,
            (I64, _) | (_, I64) => I64,
            (I32, _) | (_, I32) => I32,
            (U8, _) | (_, U8) => U8,
            _ => Bool,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A Rust type that can be a tensor element.
///
/// Implemented for `f32`, `f64`, [`half::f16`], [`half::bf16`], `i64`, `i32`,
/// `u8` and `bool`.
pub trait Element:
    Copy + Send + Sync + PartialOrd + fmt::Debug + 'static + private::Sealed
{
    /// The matching [`DType`].
    const DTYPE: DType;
    /// Converts to f64 (exact for every type but i64 beyond 2^53).
    fn to_f64(self) -> f64;
    /// Converts from f64 as an `as` cast does (saturating for integers, `!= 0` for bool).
    fn from_f64(v: f64) -> Self;
    /// Converts from f64 as PyTorch stores a number into this type: integers
    /// truncate toward zero into i64 (saturating there, NaN to 0), then wrap
    /// to their width (`-1.0` into u8 is 255, `300.7` is 44); floats and bool
    /// as [`from_f64`](Element::from_f64).
    #[doc(hidden)]
    fn wrap_from_f64(v: f64) -> Self;
    /// The value as i64: integers and bool exactly, floats truncated toward
    /// zero (saturating, NaN to 0).
    #[doc(hidden)]
    fn to_i64(self) -> i64;
    /// From i64, wrapping to an integer type's width (two's complement), to
    /// a float by rounding, to bool by `!= 0`.
    #[doc(hidden)]
    fn wrap_from_i64(v: i64) -> Self;
    /// Zero (false).
    fn zero() -> Self;
    /// One (true).
    fn one() -> Self;
}

mod private {
    pub trait Sealed {}
}

macro_rules! impl_element {
    // An integer type: `as` casts (saturating from f64), wrapping through
    // i64 where PyTorch stores a number.
    (int $t:ty, $dt:ident) => {
        impl_element!(
            $t,
            $dt,
            |x: $t| x as f64,
            |v: f64| v as $t,
            0,
            1,
            |v: f64| v as i64 as $t,
            |x: $t| x as i64,
            |v: i64| v as $t
        );
    };
    ($t:ty, $dt:ident, $to:expr, $from:expr, $zero:expr, $one:expr) => {
        impl_element!(
            $t,
            $dt,
            $to,
            $from,
            $zero,
            $one,
            $from,
            |x: $t| ($to)(x) as i64,
            |v: i64| ($from)(v as f64)
        );
    };
    ($t:ty, $dt:ident, $to:expr, $from:expr, $zero:expr, $one:expr, $wrap:expr, $to_i64:expr, $from_i64:expr) => {
        impl private::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = DType::$dt;
            #[inline(always)]
            fn to_f64(self) -> f64 {
                #[allow(clippy::redundant_closure_call)]
                ($to)(self)
            }
            #[inline(always)]
            fn from_f64(v: f64) -> Self {
                #[allow(clippy::redundant_closure_call)]
                ($from)(v)
            }
            #[inline(always)]
            fn wrap_from_f64(v: f64) -> Self {
                #[allow(clippy::redundant_closure_call)]
                ($wrap)(v)
            }
            #[inline(always)]
            fn to_i64(self) -> i64 {
                #[allow(clippy::redundant_closure_call)]
                ($to_i64)(self)
            }
            #[inline(always)]
            fn wrap_from_i64(v: i64) -> Self {
                #[allow(clippy::redundant_closure_call)]
                ($from_i64)(v)
            }
            #[inline(always)]
            fn zero() -> Self {
                $zero
            }
            #[inline(always)]
            fn one() -> Self {
                $one
            }
        }
    };
}

impl_element!(f32, F32, |x: f32| x as f64, |v: f64| v as f32, 0.0, 1.0);
impl_element!(f64, F64, |x: f64| x, |v: f64| v, 0.0, 1.0);
impl_element!(
    f16,
    F16,
    |x: f16| x.to_f64(),
    f16::from_f64,
    f16::ZERO,
    f16::ONE
);
impl_element!(
    bf16,
    BF16,
    |x: bf16| x.to_f64(),
    bf16::from_f64,
    bf16::ZERO,
    bf16::ONE
);
impl_element!(int i64, I64);
impl_element!(int i32, I32);
impl_element!(int u8, U8);
impl_element!(
    bool,
    Bool,
    |x: bool| if x { 1.0 } else { 0.0 },
    |v: f64| v != 0.0,
    false,
    true,
    |v: f64| v != 0.0,
    |x: bool| x as i64,
    |v: i64| v != 0
);

/// Runs `$body` with `$T` bound to the Rust type of a float dtype; `$other`
/// is evaluated for the non-float dtypes.
#[macro_export]
#[doc(hidden)]
macro_rules! with_float_dtype {
    ($dt:expr, $T:ident => $body:expr, _ => $other:expr) => {
        match $dt {
            $crate::DType::F32 => {
                type $T = f32;
                $body
            }
            $crate::DType::F64 => {
                type $T = f64;
                $body
            }
            $crate::DType::F16 => {
                type $T = $crate::half::f16;
                $body
            }
            $crate::DType::BF16 => {
                type $T = $crate::half::bf16;
                $body
            }
            _ => $other,
        }
    };
}

/// Runs `$body` with `$T` bound to the Rust type of a numeric (non-bool) dtype;
/// `$other` is evaluated for bool. (The float arms are `with_float_dtype!`'s.)
#[macro_export]
#[doc(hidden)]
macro_rules! with_numeric_dtype {
    ($dt:expr, $T:ident => $body:expr, _ => $other:expr) => {{
        let dt: $crate::DType = $dt;
        $crate::with_float_dtype!(dt, $T => $body, _ => match dt {
            $crate::DType::I64 => {
                type $T = i64;
                $body
            }
            $crate::DType::I32 => {
                type $T = i32;
                $body
            }
            $crate::DType::U8 => {
                type $T = u8;
                $body
            }
            _ => $other,
        })
    }};
}

/// Runs `$body` with `$T` bound to the Rust type of `$dt`, for every dtype.
/// (The numeric arms are `with_numeric_dtype!`'s; bool is the remaining one.)
#[macro_export]
#[doc(hidden)]
macro_rules! with_dtype {
    ($dt:expr, $T:ident => $body:expr) => {
        $crate::with_numeric_dtype!($dt, $T => $body, _ => {
            type $T = bool;
            $body
        })
    };
}
