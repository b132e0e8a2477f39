//! Elementwise CPU kernels: copy/cast, fill, binary, where (unary ops are
//! in `unary.rs`).

use super::num::Num;
use super::ptr;
use super::simd;
use super::strided::{par_runs, Plan, SendPtr};
use crate::backend::{BinaryOp, Operand};
use crate::dtype::{DType, Element};
use crate::{with_dtype, with_numeric_dtype};

/// `out[i] = f(a[i])` over any layouts of one shape.
///
/// # Safety
/// Storages are CPU storages of the operands' dtypes, locked by the caller,
/// and every layout fits its storage.
#[inline]
pub(crate) unsafe fn map1<A: Copy, O>(a: &Operand, out: &Operand, f: impl Fn(A) -> O + Sync) {
    let pa = SendPtr(ptr::<A>(a.storage));
    let po = SendPtr(ptr::<O>(out.storage));
    // SAFETY: `par_runs` hands each call a disjoint run of the output: the
    // element offsets `o` and strides `s` it gives stay inside the layouts,
    // which fit the storages (this function's contract), and the storages
    // hold `A` and `O` values; the caller's locks keep other writers out.
    par_runs([&out.layout, &a.layout], |o, len, s| unsafe {
        let (po, pa) = (po.get().add(o[0]), pa.get().add(o[1]) as *const A);
        if s == [1, 1] {
            simd::run(Dense1 { po, pa, len, f: &f });
        } else if s == [1, 0] {
            // A broadcast input (a stride-0 column, as in `expand` of a
            // `[m, 1]` then `contiguous`): read once per run, not per element.
            let av = pa.read();
            for i in 0..len {
                po.add(i).write(f(av));
            }
        } else if s[0] == 1 {
            // A transposed input (the tiled walk's short runs).
            let sa = s[1];
            for i in 0..len {
                po.add(i).write(f(pa.add(i * sa).read()));
            }
        } else {
            for i in 0..len {
                po.add(i * s[0]).write(f(pa.add(i * s[1]).read()));
            }
        }
    });
}

/// `po[i] = f(pa[i])` for `i < len`: the dense run of [`map1`], compiled
/// for the CPU's SIMD level (`f` is small and inlined into `call`).
struct Dense1<'a, A, O, F> {
    po: *mut O,
    pa: *const A,
    len: usize,
    f: &'a F,
}

impl<A: Copy, O, F: Fn(A) -> O> simd::Kernel for Dense1<'_, A, O, F> {
    type Output = ();
    #[inline(always)]
    fn call(self) {
        for i in 0..self.len {
            // SAFETY: built by `map1` / `map2` from a dense run of `len`
            // elements of each operand, inside layouts that fit their
            // storages, the caller's locks held; an input read before the
            // same element of the output is written.
            unsafe { self.po.add(i).write((self.f)(self.pa.add(i).read())) };
        }
    }
}

/// `po[i] = f(pa[i], pb[i])` for `i < len`: the dense run of [`map2`], as
/// [`Dense1`].
struct Dense2<'a, A, B, O, F> {
    po: *mut O,
    pa: *const A,
    pb: *const B,
    len: usize,
    f: &'a F,
}

impl<A: Copy, B: Copy, O, F: Fn(A, B) -> O> simd::Kernel for Dense2<'_, A, B, O, F> {
    type Output = ();
    #[inline(always)]
    fn call(self) {
        for i in 0..self.len {
            // SAFETY: as in `Dense1::call`, for both inputs.
            unsafe {
                self.po
                    .add(i)
                    .write((self.f)(self.pa.add(i).read(), self.pb.add(i).read()))
            };
        }
    }
}

/// `out[i] = f(a[i], b[i])` over any layouts of one shape.
///
/// # Safety
/// As for [`map1`].
#[inline]
pub(crate) unsafe fn map2<A: Copy, B: Copy, O>(
    a: &Operand,
    b: &Operand,
    out: &Operand,
    f: impl Fn(A, B) -> O + Sync,
) {
    let pa = SendPtr(ptr::<A>(a.storage));
    let pb = SendPtr(ptr::<B>(b.storage));
    let po = SendPtr(ptr::<O>(out.storage));
    // SAFETY: as in `map1`: disjoint output runs, offsets within layouts
    // that fit their storages, element types as the contract states.
    par_runs([&out.layout, &a.layout, &b.layout], |o, len, s| unsafe {
        let (po, pa, pb) = (
            po.get().add(o[0]),
            pa.get().add(o[1]) as *const A,
            pb.get().add(o[2]) as *const B,
        );
        if s == [1, 1, 1] {
            simd::run(Dense2 {
                po,
                pa,
                pb,
                len,
                f: &f,
            });
        } else if s == [1, 1, 0] {
            // `f` by reference, `bv` by value: captured by reference, the
            // broadcast value would be re-read after every store (it could
            // alias the output), and the loop would stay scalar.
            let (fr, bv) = (&f, pb.read());
            let g = move |x| fr(x, bv);
            simd::run(Dense1 { po, pa, len, f: &g });
        } else if s == [1, 0, 1] {
            let (fr, av) = (&f, pa.read());
            let g = move |y| fr(av, y);
            simd::run(Dense1 {
                po,
                pa: pb,
                len,
                f: &g,
            });
        } else if s[0] == 1 && s[2] == 1 {
            // A transposed `a` (the tiled walk's short runs).
            let sa = s[1];
            for i in 0..len {
                po.add(i).write(f(pa.add(i * sa).read(), pb.add(i).read()));
            }
        } else if s[0] == 1 && s[1] == 1 {
            let sb = s[2];
            for i in 0..len {
                po.add(i).write(f(pa.add(i).read(), pb.add(i * sb).read()));
            }
        } else {
            for i in 0..len {
                po.add(i * s[0])
                    .write(f(pa.add(i * s[1]).read(), pb.add(i * s[2]).read()));
            }
        }
    });
}

/// Converts one element between dtypes with `as` semantics.
/// PyTorch's casts: between integers (and bool) exactly, wrapping to the
/// destination's width (i64 263 to u8 is 7, i32 -200 is 56; never through
/// f64, so i64 beyond 2^53 keeps its low bits); float to integer truncates
/// toward zero into i64, then wraps (300.7 to u8 is 44, NaN is 0); to a
/// float rounds once; to bool is `!= 0`.
trait CastTo<D> {
    fn cast(self) -> D;
}
impl<S: Element, D: Element> CastTo<D> for S {
    #[inline(always)]
    fn cast(self) -> D {
        if !S::DTYPE.is_float() && !D::DTYPE.is_float() {
            D::wrap_from_i64(self.to_i64())
        } else {
            D::wrap_from_f64(self.to_f64())
        }
    }
}

pub(crate) fn copy(src: &Operand, dst: &Operand) {
    // Same dtype and both dense: one memcpy (memmove: they may overlap).
    let esz = src.dtype.size_in_bytes();
    if src.dtype == dst.dtype && src.layout.is_contiguous() && dst.layout.is_contiguous() {
        let n = dst.layout.numel() * esz;
        // SAFETY: both layouts are dense and fit their storages; locks are held.
        unsafe {
            let s = (src.storage.addr() + src.layout.offset() * esz) as *const u8;
            let d = (dst.storage.addr() + dst.layout.offset() * esz) as *mut u8;
            std::ptr::copy(s, d, n);
        }
        return;
    }
    if src.dtype == dst.dtype {
        // Reinterpret as same-width integers: no conversion, exact bits.
        // SAFETY: as for `map1`; both operands have the element size `esz`.
        unsafe {
            match esz {
                1 => map1::<u8, u8>(src, dst, |x| x),
                2 => map1::<u16, u16>(src, dst, |x| x),
                4 => map1::<u32, u32>(src, dst, |x| x),
                _ => map1::<u64, u64>(src, dst, |x| x),
            }
        }
        return;
    }
    with_dtype!(src.dtype, S => with_dtype!(dst.dtype, D => {
        // SAFETY: dtypes match the operands; the caller holds the locks.
        unsafe { map1::<S, D>(src, dst, CastTo::<D>::cast) }
    }))
}

/// Writes `next()` into every element of `dst` in row-major order of its
/// shape (sequential: `next` is a generator's stream). The caller holds the
/// write lock.
pub(crate) fn fill_seq(dst: &Operand, mut next: impl FnMut() -> f64) {
    with_dtype!(dst.dtype, T => {
        let p = ptr::<T>(dst.storage);
        let plan = Plan::new([&dst.layout]);
        // SAFETY: the plan's runs stay inside the layout, which fits the
        // storage of `T`; the caller holds the write lock; one thread.
        plan.runs(0, plan.numel(), &mut |o, len, s| unsafe {
            for i in 0..len {
                p.add(o[0] + i * s[0]).write(T::wrap_from_f64(next()));
            }
        });
    })
}

pub(crate) fn fill(dst: &Operand, value: f64) {
    with_dtype!(dst.dtype, T => {
        // Wrapped as PyTorch stores a number (-1 into u8 is 255); the op
        // layer has refused values that overflow (`DType::scalar_fits`).
        let v = T::wrap_from_f64(value);
        let p = SendPtr(ptr::<T>(dst.storage));
        // SAFETY: the layout fits the storage; the caller holds the write lock.
        par_runs([&dst.layout], |o, len, s| unsafe {
            let p = p.get().add(o[0]);
            for i in 0..len {
                p.add(i * s[0]).write(v);
            }
        });
    })
}

/// The comparison kernels, for any dtype.
fn compare<T: Element>(op: BinaryOp, a: &Operand, b: &Operand, dst: &Operand) {
    // SAFETY: (every arm) dtypes match; the caller holds the locks.
    unsafe {
        match op {
            BinaryOp::Eq => map2::<T, T, bool>(a, b, dst, |x, y| x == y),
            BinaryOp::Ne => map2::<T, T, bool>(a, b, dst, |x, y| x != y),
            BinaryOp::Lt => map2::<T, T, bool>(a, b, dst, |x, y| x < y),
            BinaryOp::Le => map2::<T, T, bool>(a, b, dst, |x, y| x <= y),
            BinaryOp::Gt => map2::<T, T, bool>(a, b, dst, |x, y| x > y),
            BinaryOp::Ge => map2::<T, T, bool>(a, b, dst, |x, y| x >= y),
            _ => unreachable!(),
        }
    }
}

fn arith<T: Num>(op: BinaryOp, a: &Operand, b: &Operand, dst: &Operand) {
    // SAFETY: (every arm) dtypes match; the caller holds the locks.
    unsafe {
        match op {
            BinaryOp::Add => map2::<T, T, T>(a, b, dst, |x, y| x.add(y)),
            BinaryOp::Sub => map2::<T, T, T>(a, b, dst, |x, y| x.sub(y)),
            BinaryOp::Mul => map2::<T, T, T>(a, b, dst, |x, y| x.mul(y)),
            BinaryOp::Div => map2::<T, T, T>(a, b, dst, |x, y| x.div(y)),
            BinaryOp::Pow => map2::<T, T, T>(a, b, dst, |x, y| x.pow(y)),
            BinaryOp::Maximum => map2::<T, T, T>(a, b, dst, |x, y| x.max(y)),
            BinaryOp::Minimum => map2::<T, T, T>(a, b, dst, |x, y| x.min(y)),
            _ => compare::<T>(op, a, b, dst),
        }
    }
}

pub(crate) fn binary(op: BinaryOp, a: &Operand, b: &Operand, dst: &Operand) {
    debug_assert_eq!(a.dtype, b.dtype);
    if op.is_comparison() {
        return with_dtype!(a.dtype, T => compare::<T>(op, a, b, dst));
    }
    with_numeric_dtype!(a.dtype, T => arith::<T>(op, a, b, dst), _ => {
        // bool arithmetic: maximum is `or`, minimum and mul are `and` (the op layer refuses the rest).
        // SAFETY: dtypes match; the caller holds the locks.
        unsafe {
            match op {
                BinaryOp::Maximum | BinaryOp::Add => map2::<bool, bool, bool>(a, b, dst, |x, y| x | y),
                _ => map2::<bool, bool, bool>(a, b, dst, |x, y| x & y),
            }
        }
    })
}

pub(crate) fn binary_scalar(op: BinaryOp, a: &Operand, scalar: f64, dst: &Operand) {
    // A scalar is a broadcast operand with stride 0: reuse `binary` through a
    // one-element stack buffer seen as a storage would need an allocation, so
    // instead the closures capture the converted value.
    fn go<T: Num>(op: BinaryOp, a: &Operand, s: T, dst: &Operand) {
        // SAFETY: (every arm) dtypes match; the caller holds the locks.
        unsafe {
            match op {
                BinaryOp::Add => map1::<T, T>(a, dst, move |x| x.add(s)),
                BinaryOp::Sub => map1::<T, T>(a, dst, move |x| x.sub(s)),
                BinaryOp::Mul => map1::<T, T>(a, dst, move |x| x.mul(s)),
                BinaryOp::Div => map1::<T, T>(a, dst, move |x| x.div(s)),
                BinaryOp::Pow => map1::<T, T>(a, dst, move |x| x.pow(s)),
                BinaryOp::Maximum => map1::<T, T>(a, dst, move |x| x.max(s)),
                BinaryOp::Minimum => map1::<T, T>(a, dst, move |x| x.min(s)),
                BinaryOp::Eq => map1::<T, bool>(a, dst, move |x| x == s),
                BinaryOp::Ne => map1::<T, bool>(a, dst, move |x| x != s),
                BinaryOp::Lt => map1::<T, bool>(a, dst, move |x| x < s),
                BinaryOp::Le => map1::<T, bool>(a, dst, move |x| x <= s),
                BinaryOp::Gt => map1::<T, bool>(a, dst, move |x| x > s),
                BinaryOp::Ge => map1::<T, bool>(a, dst, move |x| x >= s),
            }
        }
    }
    with_numeric_dtype!(a.dtype, T => go::<T>(op, a, T::wrap_from_f64(scalar), dst), _ => {
        let s = scalar != 0.0;
        // SAFETY: dtypes match; the caller holds the locks.
        unsafe {
            match op {
                BinaryOp::Eq => map1::<bool, bool>(a, dst, |x| x == s),
                BinaryOp::Ne => map1::<bool, bool>(a, dst, |x| x != s),
                BinaryOp::Lt => map1::<bool, bool>(a, dst, |x| !x & s),
                BinaryOp::Le => map1::<bool, bool>(a, dst, |x| x <= s),
                BinaryOp::Gt => map1::<bool, bool>(a, dst, |x| x & !s),
                BinaryOp::Ge => map1::<bool, bool>(a, dst, |x| x >= s),
                BinaryOp::Maximum | BinaryOp::Add => map1::<bool, bool>(a, dst, |x| x | s),
                _ => map1::<bool, bool>(a, dst, |x| x & s),
            }
        }
    })
}

pub(crate) fn where_cond(cond: &Operand, a: &Operand, b: &Operand, dst: &Operand) {
    debug_assert_eq!(cond.dtype, DType::Bool);
    with_dtype!(a.dtype, T => {
        // Read as bytes: any non-zero byte is true.
        let pc = SendPtr(ptr::<u8>(cond.storage));
        let pa = SendPtr(ptr::<T>(a.storage));
        let pb = SendPtr(ptr::<T>(b.storage));
        let po = SendPtr(ptr::<T>(dst.storage));
        // SAFETY: dtypes match; the caller holds the locks.
        par_runs([&dst.layout, &cond.layout, &a.layout, &b.layout], |o, len, s| unsafe {
            for i in 0..len {
                let c = pc.get().add(o[1] + i * s[1]).read() != 0;
                let v = if c { pa.get().add(o[2] + i * s[2]).read() } else { pb.get().add(o[3] + i * s[3]).read() };
                po.get().add(o[0] + i * s[0]).write(v);
            }
        });
    })
}
