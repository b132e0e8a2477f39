//! CPU kernels for indexed reads and writes.
//!
//! * [`gather`] reads `dst[i] = src[base(i) + index[i] * stride]`: it serves
//!   `index_select`, `gather` and integer fancy indexing.
//! * [`scatter`] writes `dst[base(i) + index[i] * stride] (=|+=|*=|max|min)
//!   src[i]`: it serves `scatter_`, `scatter_add_`, `scatter_reduce_`,
//!   `index_fill_`, `index_copy_` and `index_add_`.
//! * [`masked_count`] and [`masked_select`] serve boolean-mask selection.
//!
//! "base(i)" comes from a *walk layout*: the indexed operand's strides with
//! the indexed dimension's stride set to 0 and the shape of the walk, so one
//! [`Plan`] walks the output, the index and the indexed operand together.
//! Every index is checked before anything is written, so a bad index leaves
//! the destination untouched.

use super::numeric_traits::Num;
use super::ptr;
use super::strided::{Plan, SendPtr};
use crate::backend::index::{IndexedDim, ScatterMode, ScatterSrc};
use crate::backend::Operand;
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::{with_dtype, with_numeric_dtype};

/// An integer type an index tensor may hold.
trait IndexElem: Copy + Send + Sync {
    fn get(self) -> i64;
}
impl IndexElem for i64 {
    #[inline(always)]
    fn get(self) -> i64 {
        self
    }
}
impl IndexElem for i32 {
    #[inline(always)]
    fn get(self) -> i64 {
        self as i64
    }
}

/// Runs `$body` with `$I` bound to the index element type.
macro_rules! with_index_dtype {
    ($op:expr, $dt:expr, $I:ident => $body:expr) => {
        match $dt {
            DType::I64 => {
                type $I = i64;
                $body
            }
            DType::I32 => {
                type $I = i32;
                $body
            }
            other => Err(Error::dtype($op, "int64 or int32 (an index tensor)", other)),
        }
    };
}

/// Runs `$body` with `$T` bound to an unsigned integer of `$size` bytes: a
/// pure copy moves bits and needs no dtype.
macro_rules! with_bits {
    ($size:expr, $T:ident => $body:expr) => {
        match $size {
            1 => {
                type $T = u8;
                $body
            }
            2 => {
                type $T = u16;
                $body
            }
            4 => {
                type $T = u32;
                $body
            }
            _ => {
                type $T = u64;
                $body
            }
        }
    };
}

/// Checks every element of `index` (through its own layout) against `d`.
///
/// # Safety
/// `index` is a CPU storage of `I`s, read-locked by the caller, and its
/// layout fits it.
unsafe fn check<I: IndexElem>(index: &Operand, d: &IndexedDim) -> Result<()> {
    let p = ptr::<I>(index.storage) as *const I;
    let plan = Plan::new([&index.layout]);
    let mut bad = None;
    plan.runs(0, plan.numel(), &mut |o, len, s| {
        if bad.is_some() {
            return;
        }
        for i in 0..len {
            // SAFETY: the plan stays inside the index's layout.
            let v = unsafe { p.add(o[0] + i * s[0]).read() }.get();
            if d.resolve(v).is_none() {
                bad = Some(v);
                return;
            }
        }
    });
    match bad {
        None => Ok(()),
        Some(v) => Err(Error::IndexOutOfRange {
            op: d.op,
            index: v,
            dim: d.dim,
            size: d.size,
        }),
    }
}

/// A checked index made into an element offset along the indexed dimension.
#[inline(always)]
fn offset_of(v: i64, size: usize, stride: usize) -> usize {
    let k = if v < 0 { v + size as i64 } else { v };
    k as usize * stride
}

/// `dst[i] = src[walk(i) + index[i] * stride]` for every `i` of `dst`.
///
/// `src.layout` is the walk layout (shape of `dst`); `index_walk` sees the
/// index with `dst`'s shape. The caller holds the locks.
pub(crate) fn gather(
    src: &Operand,
    index: &Operand,
    index_walk: &Layout,
    d: &IndexedDim,
    dst: &Operand,
) -> Result<()> {
    debug_assert_eq!(src.dtype, dst.dtype);
    with_index_dtype!(d.op, index.dtype, I => {
        // SAFETY: the index has dtype I; the caller holds the locks.
        unsafe { check::<I>(index, d)? };
        with_bits!(dst.dtype.size_in_bytes(), T => {
            // SAFETY: every index is in range, so every read stays inside the
            // indexed dimension of `src`; dtypes match; locks are held.
            unsafe { gather_t::<T, I>(src, index, index_walk, d, dst) };
            Ok(())
        })
    })
}

/// The gather walk: `dst[o] = src[o with dim `d` replaced by index[o]]`.
///
/// # Safety
/// The operands are CPU storages of element types `T` (`src`, `dst`) and `I`
/// (`index`), locked by the caller; their layouts (and `index_walk`) fit
/// their storages; every index is in range for `d` (checked by the op
/// layer).
unsafe fn gather_t<T: Copy, I: IndexElem>(
    src: &Operand,
    index: &Operand,
    index_walk: &Layout,
    d: &IndexedDim,
    dst: &Operand,
) {
    let ps = SendPtr(ptr::<T>(src.storage));
    let pi = SendPtr(ptr::<I>(index.storage));
    let po = SendPtr(ptr::<T>(dst.storage));
    let (size, stride) = (d.size, d.stride);
    let plan = Plan::new([&dst.layout, index_walk, &src.layout]);
    // SAFETY: the plan's runs stay inside the three layouts, which fit their
    // storages (the contract); each index was range-checked by the op layer
    // (`offset_of` maps it into `0..size` of the gathered dim), and parallel
    // runs write disjoint output elements. `dst` is a fresh or exclusively
    // locked output that shares no storage with `src` (the op layer), so a
    // run copied with `copy_nonoverlapping` does not overlap its source.
    plan.par_runs(|o, len, s| unsafe {
        let (po, pi, ps) = (
            po.get().add(o[0]),
            pi.get().add(o[1]) as *const I,
            ps.get().add(o[2]) as *const T,
        );
        if s[1] == 0 {
            // One index for the whole run: a slice along dims after the
            // indexed one (a row of `index_select(0, ..)`, an embedding
            // vector). Dense on both sides: one memcpy.
            let ps = ps.add(offset_of(pi.read().get(), size, stride));
            if s[0] == 1 && s[2] == 1 {
                std::ptr::copy_nonoverlapping(ps, po, len);
            } else {
                for i in 0..len {
                    po.add(i * s[0]).write(ps.add(i * s[2]).read());
                }
            }
            return;
        }
        for i in 0..len {
            let k = offset_of(pi.add(i * s[1]).read().get(), size, stride);
            po.add(i * s[0]).write(ps.add(i * s[2] + k).read());
        }
    });
}

/// `dst[walk(i) + index[i] * stride] = src[i]` (or `+=`, `*=`, the max or
/// the min, or `= value`) for every `i` of the walk, in row-major order (so
/// with repeated indices the last write wins, and the others accumulate).
///
/// `dst.layout` is the walk layout; `index_walk` and a tensor source have its
/// shape. The caller holds the locks.
pub(crate) fn scatter(
    dst: &Operand,
    index: &Operand,
    index_walk: &Layout,
    d: &IndexedDim,
    src: ScatterSrc,
    mode: ScatterMode,
) -> Result<()> {
    with_index_dtype!(d.op, index.dtype, I => {
        // SAFETY: the index has dtype I; the caller holds the locks.
        unsafe { check::<I>(index, d)? };
        match (src, mode) {
            (ScatterSrc::Tensor(src), ScatterMode::Assign) => {
                debug_assert_eq!(src.dtype, dst.dtype);
                with_bits!(dst.dtype.size_in_bytes(), T => {
                    // SAFETY: indices are in range; dtypes match; locks are held.
                    unsafe { scatter_t::<T, I>(dst, index, index_walk, d, Some(src), |_, v| v, T::default()) };
                })
            }
            (ScatterSrc::Value(v), ScatterMode::Assign) => {
                with_dtype!(dst.dtype, T => {
                    let v = T::wrap_from_f64(v);
                    // SAFETY: as above.
                    unsafe { scatter_t::<T, I>(dst, index, index_walk, d, None, |_, v| v, v) };
                })
            }
            (src, mode) => {
                let (src, v) = match src {
                    ScatterSrc::Tensor(t) => (Some(t), 0.0),
                    ScatterSrc::Value(v) => (None, v),
                };
                if let Some(src) = src {
                    debug_assert_eq!(src.dtype, dst.dtype);
                }
                // Each combination gets its own instance of the walk (an
                // inlined closure, not a function pointer: `index_add_` of
                // the embedding gradient goes through here). Max and min
                // are ATen's scatter ones: NaN from either side wins, and a
                // tie keeps the value in place (+0 stays +0 against -0).
                macro_rules! walk {
                    ($T:ty, $f:expr, $v:expr) => {
                        // SAFETY: indices are in range (checked above); the
                        // dtypes match; the caller holds the locks.
                        unsafe { scatter_t::<$T, I>(dst, index, index_walk, d, src, $f, $v) }
                    };
                }
                if dst.dtype == DType::Bool {
                    // bool: max is `or`, min and mul are `and` (as the
                    // binary ops); the op layer refuses an add.
                    let v = v != 0.0;
                    match mode {
                        ScatterMode::Max => walk!(bool, |a, b| a | b, v),
                        ScatterMode::Mul | ScatterMode::Min => walk!(bool, |a, b| a & b, v),
                        _ => return Err(Error::dtype(d.op, "a numeric dtype", dst.dtype)),
                    }
                    return Ok(());
                }
                with_numeric_dtype!(dst.dtype, T => {
                    let v = T::wrap_from_f64(v);
                    match mode {
                        ScatterMode::Mul => walk!(T, |a: T, b: T| a.mul(b), v),
                        ScatterMode::Max => walk!(T, |a: T, b: T| if b.is_nan() || b > a { b } else { a }, v),
                        ScatterMode::Min => walk!(T, |a: T, b: T| if b.is_nan() || b < a { b } else { a }, v),
                        _ => walk!(T, |a: T, b: T| a.add(b), v),
                    }
                }, _ => return Err(Error::dtype(d.op, "a numeric dtype", dst.dtype)))
            }
        }
        Ok(())
    })
}

/// The scatter walk. Sequential: two positions of the walk may write the
/// same element. `f(old, new)` combines; without a source tensor `value` is
/// written.
///
/// # Safety
/// As for [`gather_t`], with `dst` written (exclusively locked) and `src`,
/// if any, read.
#[allow(clippy::too_many_arguments)]
unsafe fn scatter_t<T: Copy, I: IndexElem>(
    dst: &Operand,
    index: &Operand,
    index_walk: &Layout,
    d: &IndexedDim,
    src: Option<&Operand>,
    f: impl Fn(T, T) -> T,
    value: T,
) {
    let pd = ptr::<T>(dst.storage);
    let pi = ptr::<I>(index.storage) as *const I;
    let (size, stride) = (d.size, d.stride);
    match src {
        Some(src) => {
            let ps = ptr::<T>(src.storage) as *const T;
            let plan = Plan::new([&dst.layout, index_walk, &src.layout]);
            // SAFETY: runs in the layouts (which fit the storages); the
            // index is in range (checked by the op layer, mapped by
            // `offset_of`); sequential, so repeated indices cannot race.
            plan.runs(0, plan.numel(), &mut |o, len, s| unsafe {
                if s[1] == 0 {
                    // One index for the whole run: a whole slice (a row of
                    // `index_add_(0, ..)`, an embedding gradient) combined
                    // at once, a vectorisable loop when both are dense.
                    let k = offset_of(pi.add(o[1]).read().get(), size, stride);
                    let (pd, ps) = (pd.add(o[0] + k), ps.add(o[2]));
                    if s[0] == 1 && s[2] == 1 {
                        for i in 0..len {
                            pd.add(i).write(f(pd.add(i).read(), ps.add(i).read()));
                        }
                    } else {
                        for i in 0..len {
                            let p = pd.add(i * s[0]);
                            p.write(f(p.read(), ps.add(i * s[2]).read()));
                        }
                    }
                    return;
                }
                for i in 0..len {
                    let k = offset_of(pi.add(o[1] + i * s[1]).read().get(), size, stride);
                    let p = pd.add(o[0] + i * s[0] + k);
                    p.write(f(p.read(), ps.add(o[2] + i * s[2]).read()));
                }
            });
        }
        None => {
            let plan = Plan::new([&dst.layout, index_walk]);
            // SAFETY: as above, without a source.
            plan.runs(0, plan.numel(), &mut |o, len, s| unsafe {
                for i in 0..len {
                    let k = offset_of(pi.add(o[1] + i * s[1]).read().get(), size, stride);
                    let p = pd.add(o[0] + i * s[0] + k);
                    p.write(f(p.read(), value));
                }
            });
        }
    }
}

/// The number of true elements of a bool tensor (seen through any layout).
pub(crate) fn masked_count(mask: &Operand) -> usize {
    let p = ptr::<u8>(mask.storage) as *const u8;
    let plan = Plan::new([&mask.layout]);
    let mut n = 0usize;
    plan.runs(0, plan.numel(), &mut |o, len, s| {
        for i in 0..len {
            // SAFETY: the plan stays inside the mask's layout; the caller
            // holds the read lock.
            n += usize::from(unsafe { p.add(o[0] + i * s[0]).read() } != 0);
        }
    });
    n
}

/// Writes the elements of `src` where `mask` is true, in row-major order,
/// into the contiguous 1-D `dst`. `src` and `mask` have one shape. Fails
/// (having written at most `dst`'s elements) if the mask does not hold
/// exactly `dst.numel()` true elements.
pub(crate) fn masked_select(src: &Operand, mask: &Operand, dst: &Operand) -> Result<()> {
    debug_assert!(dst.layout.is_contiguous() && dst.layout.rank() == 1);
    with_bits!(src.dtype.size_in_bytes(), T => {
        let ps = ptr::<T>(src.storage) as *const T;
        let pm = ptr::<u8>(mask.storage) as *const u8;
        let pd = ptr::<T>(dst.storage).wrapping_add(dst.layout.offset());
        let cap = dst.layout.numel();
        let plan = Plan::new([&src.layout, &mask.layout]);
        let mut n = 0usize;
        let mut overflow = false;
        plan.runs(0, plan.numel(), &mut |o, len, s| {
            for i in 0..len {
                // SAFETY: the plan stays inside both layouts; writes stop at
                // `cap`, the destination's length; the caller holds the locks.
                unsafe {
                    if pm.add(o[1] + i * s[1]).read() != 0 {
                        if n == cap {
                            overflow = true;
                            return;
                        }
                        pd.add(n).write(ps.add(o[0] + i * s[0]).read());
                        n += 1;
                    }
                }
            }
        });
        if overflow || n != cap {
            return Err(Error::Backend {
                op: "masked_select",
                msg: format!("the mask changed while it was read: {cap} true elements counted, then {}", if overflow { format!("more than {cap}") } else { n.to_string() }),
            });
        }
        Ok(())
    })
}
