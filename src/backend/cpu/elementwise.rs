//! Elementwise CPU kernels: copy/cast, fill, binary, where (unary ops are
//! in `unary.rs`).

use super::numeric_traits::Num;
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
pub(crate) unsafe fn map1<A: Copy + simd::Hot, O: simd::Hot>(
    a: &Operand,
    out: &Operand,
    f: impl Fn(A) -> O + Sync,
) {
    // SAFETY: this function's contract.
    unsafe { map1_at::<A, O, true>(a, out, f) }
}

/// [`map1`], its dense runs wide (`Dense1::WIDE`) only when `W` allows.
///
/// # Safety
/// As for [`map1`].
#[inline]
unsafe fn map1_at<A: Copy + simd::Hot, O: simd::Hot, const W: bool>(
    a: &Operand,
    out: &Operand,
    f: impl Fn(A) -> O + Sync,
) {
    let pa = SendPtr(ptr::<A>(a.storage));
    let po = SendPtr(ptr::<O>(out.storage));
    // SAFETY: `par_runs` hands each call a disjoint run of the output: the
    // element offsets `o` and strides `s` it gives stay inside the layouts,
    // which fit the storages (this function's contract), and the storages
    // hold `A` and `O` values; the caller's locks keep other writers out.
    par_runs([&out.layout, &a.layout], |o, len, s| unsafe {
        let (po, pa) = (po.get().add(o[0]), pa.get().add(o[1]) as *const A);
        if s == [1, 1] {
            simd::run_map(Dense1::<_, _, _, W> { po, pa, len, f: &f }, len);
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

/// How an output run of `len` elements at `po` lies against an input run
/// at `pa` (bytes `len * size_of` each).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Overlap {
    /// No byte in common: both can be slices.
    Disjoint,
    /// The same elements (an in-place op): one `&mut` slice, each input
    /// element read through it just before it is overwritten.
    Same,
    /// Anything else (a shifted `_out` view): element by element.
    Partial,
}

impl Overlap {
    /// Classifies the runs `po[..len]` and `pa[..len]`.
    #[inline(always)]
    pub(crate) fn of<A, O>(po: *const O, pa: *const A, len: usize) -> Overlap {
        let (o0, a0) = (po as usize, pa as usize);
        let (o1, a1) = (
            o0 + len * std::mem::size_of::<O>(),
            a0 + len * std::mem::size_of::<A>(),
        );
        if o1 <= a0 || a1 <= o0 {
            Overlap::Disjoint
        } else if o0 == a0
            && std::mem::size_of::<A>() == std::mem::size_of::<O>()
            && std::mem::align_of::<A>() <= std::mem::align_of::<O>()
        {
            Overlap::Same
        } else {
            Overlap::Partial
        }
    }
}

/// `out[i] = body(x)` with `x = in[i]`, for `i < len`, written so that LLVM
/// vectorises it whatever the overlap: a pointer loop gets a run-time alias
/// check that an in-place op (output = input) fails, and then runs scalar
/// (what `relu_`, `add_` and every unary op did before). Disjoint runs are
/// two slices; the same run is one `&mut` slice, each input read through
/// it; a partial overlap keeps the element-by-element pointer loop.
///
/// `$po: *mut O`, `$pa: *const A`; the caller's `unsafe` block states that
/// both runs of `$len` elements are valid, the output run exclusively its.
macro_rules! dense_map1 {
    ($po:expr, $pa:expr, $len:expr, |$x:ident| $body:expr) => {{
        let (po, pa, len) = ($po, $pa, $len);
        match $crate::backend::cpu::elementwise::Overlap::of(po, pa, len) {
            $crate::backend::cpu::elementwise::Overlap::Disjoint => {
                let a = std::slice::from_raw_parts(pa, len);
                let out = std::slice::from_raw_parts_mut(po, len);
                for (o, &$x) in out.iter_mut().zip(a) {
                    *o = $body;
                }
            }
            $crate::backend::cpu::elementwise::Overlap::Same => {
                let out = std::slice::from_raw_parts_mut(po, len);
                for o in out.iter_mut() {
                    // Same address, size and (at most) alignment: the
                    // output element holds the input's bits.
                    let $x = $crate::backend::cpu::elementwise::read_as(o, pa);
                    *o = $body;
                }
            }
            $crate::backend::cpu::elementwise::Overlap::Partial => {
                for i in 0..len {
                    let $x = pa.add(i).read();
                    po.add(i).write($body);
                }
            }
        }
    }};
}
pub(crate) use dense_map1;

/// As [`dense_map1`] with two inputs (`$pa: *const A`, `$pb: *const B`);
/// the output may be either input, or both.
macro_rules! dense_map2 {
    ($po:expr, $pa:expr, $pb:expr, $len:expr, |$x:ident, $y:ident| $body:expr) => {{
        use $crate::backend::cpu::elementwise::{read_as, Overlap};
        let (po, pa, pb, len) = ($po, $pa, $pb, $len);
        match (Overlap::of(po, pa, len), Overlap::of(po, pb, len)) {
            (Overlap::Disjoint, Overlap::Disjoint) => {
                let a = std::slice::from_raw_parts(pa, len);
                let b = std::slice::from_raw_parts(pb, len);
                let out = std::slice::from_raw_parts_mut(po, len);
                for ((o, &$x), &$y) in out.iter_mut().zip(a).zip(b) {
                    *o = $body;
                }
            }
            (Overlap::Same, Overlap::Disjoint) => {
                let b = std::slice::from_raw_parts(pb, len);
                let out = std::slice::from_raw_parts_mut(po, len);
                for (o, &$y) in out.iter_mut().zip(b) {
                    let $x = read_as(o, pa);
                    *o = $body;
                }
            }
            (Overlap::Disjoint, Overlap::Same) => {
                let a = std::slice::from_raw_parts(pa, len);
                let out = std::slice::from_raw_parts_mut(po, len);
                for (o, &$x) in out.iter_mut().zip(a) {
                    let $y = read_as(o, pb);
                    *o = $body;
                }
            }
            (Overlap::Same, Overlap::Same) => {
                let out = std::slice::from_raw_parts_mut(po, len);
                for o in out.iter_mut() {
                    let ($x, $y) = (read_as(o, pa), read_as(o, pb));
                    *o = $body;
                }
            }
            _ => {
                for i in 0..len {
                    let ($x, $y) = (pa.add(i).read(), pb.add(i).read());
                    po.add(i).write($body);
                }
            }
        }
    }};
}
pub(crate) use dense_map2;

/// The value of type `A` whose bits `o` holds (`Overlap::Same`: the output
/// run is the input run; `_like` only names `A`).
///
/// # Safety
/// `A` is no larger and no more aligned than `O`, and `o`'s bytes are a
/// valid `A` (they are the input element not yet overwritten).
#[inline(always)]
pub(crate) unsafe fn read_as<A, O>(o: &mut O, _like: *const A) -> A {
    // SAFETY: the caller's contract; the pointer is derived from `o`.
    unsafe { (o as *mut O).cast::<A>().read() }
}

/// `po[i] = f(pa[i])` for `i < len`: the dense run of [`map1`], compiled
/// for the CPU's SIMD level (`f` is small and inlined into `call`) when an
/// operand type is hot and `W` allows (false: the cold casts).
struct Dense1<'a, A, O, F, const W: bool> {
    po: *mut O,
    pa: *const A,
    len: usize,
    f: &'a F,
}

impl<A: Copy + simd::Hot, O: simd::Hot, F: Fn(A) -> O, const W: bool> simd::Kernel
    for Dense1<'_, A, O, F, W>
{
    type Output = ();
    const WIDE: bool = W && (<A as simd::Hot>::HOT || <O as simd::Hot>::HOT);
    #[inline(always)]
    fn call<const FMA: bool>(self) {
        let f = self.f;
        // SAFETY: built by `map1` / `map2` from a dense run of `len`
        // elements of each operand, inside layouts that fit their
        // storages, the caller's locks held; the output run is this
        // thread's alone.
        unsafe { dense_map1!(self.po, self.pa, self.len, |x| f(x)) }
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

impl<A: Copy + simd::Hot, B: Copy + simd::Hot, O: simd::Hot, F: Fn(A, B) -> O> simd::Kernel
    for Dense2<'_, A, B, O, F>
{
    type Output = ();
    const WIDE: bool = <A as simd::Hot>::HOT || <B as simd::Hot>::HOT || <O as simd::Hot>::HOT;
    #[inline(always)]
    fn call<const FMA: bool>(self) {
        let f = self.f;
        // SAFETY: as in `Dense1::call`, for both inputs.
        unsafe { dense_map2!(self.po, self.pa, self.pb, self.len, |x, y| f(x, y)) }
    }
}

/// `out[i] = f(a[i], b[i])` over any layouts of one shape.
///
/// # Safety
/// As for [`map1`].
#[inline]
pub(crate) unsafe fn map2<A: Copy + simd::Hot, B: Copy + simd::Hot, O: simd::Hot>(
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
            simd::run_map(
                Dense2 {
                    po,
                    pa,
                    pb,
                    len,
                    f: &f,
                },
                len,
            );
        } else if s == [1, 1, 0] {
            // `f` by reference, `bv` by value: captured by reference, the
            // broadcast value would be re-read after every store (it could
            // alias the output), and the loop would stay scalar.
            let (fr, bv) = (&f, pb.read());
            let g = move |x| fr(x, bv);
            simd::run_map(Dense1::<_, _, _, true> { po, pa, len, f: &g }, len);
        } else if s == [1, 0, 1] {
            let (fr, av) = (&f, pa.read());
            let g = move |y| fr(av, y);
            simd::run_map(
                Dense1::<_, _, _, true> {
                    po,
                    pa: pb,
                    len,
                    f: &g,
                },
                len,
            );
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
///
/// Only the casts among f32, f16 and bf16 (mixed precision's) get the wide
/// SIMD levels; every other pair is one baseline copy (Note [cold
/// kernels]): 9 wide pairs instead of the 39 with a hot side.
trait CastTo<D> {
    /// Tested alone in an `if`, so that rustc skips the other arm's copy.
    const WIDE: bool;
    fn cast(self) -> D;
}
impl<S: Element, D: Element> CastTo<D> for S {
    const WIDE: bool = <S as simd::Hot>::HOT && <D as simd::Hot>::HOT;
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
            let done = match esz {
                1 => transpose_copy::<u8>(src, dst),
                2 => transpose_copy::<u16>(src, dst),
                4 => transpose_copy::<u32>(src, dst),
                _ => transpose_copy::<u64>(src, dst),
            };
            if done {
                return;
            }
            match esz {
                1 => copy_runs::<u8>(src, dst),
                2 => copy_runs::<u16>(src, dst),
                4 => copy_runs::<u32>(src, dst),
                _ => copy_runs::<u64>(src, dst),
            }
        }
        return;
    }
    with_dtype!(src.dtype, S => with_dtype!(dst.dtype, D => {
        // SAFETY: dtypes match the operands; the caller holds the locks.
        unsafe {
            if <S as CastTo<D>>::WIDE {
                map1::<S, D>(src, dst, CastTo::<D>::cast)
            } else {
                map1_at::<S, D, false>(src, dst, CastTo::<D>::cast)
            }
        }
    }))
}

/// `dst = src` for one element type, any layouts of one shape: a dense run
/// is a `memmove` (or, short and disjoint, a plain loop), a strided one an
/// element loop. Only disjoint or identical runs arrive here: `copy_`
/// copies a source that overlaps its destination with another layout
/// first (`Tensor::detangle`). The runs of a convolution's
/// columns or a pooling window view are 4 to 8 elements: no SIMD dispatch
/// per run, which cost more than the copy (`simd::run_map`).
///
/// # Safety
/// As [`map1`], with `T` of the operands' element size.
unsafe fn copy_runs<T: Copy>(src: &Operand, dst: &Operand) {
    let ps = SendPtr(ptr::<T>(src.storage));
    let pd = SendPtr(ptr::<T>(dst.storage));
    // SAFETY: as in `map1`: each call gets a disjoint output run inside
    // `dst`'s layout and an input run inside `src`'s, which fit their
    // storages; the caller holds the locks.
    par_runs([&dst.layout, &src.layout], |o, len, s| unsafe {
        let (pd, ps) = (pd.get().add(o[0]), ps.get().add(o[1]) as *const T);
        if s == [1, 1] {
            if len <= 16 && Overlap::of(pd, ps, len) == Overlap::Disjoint {
                for i in 0..len {
                    pd.add(i).write(ps.add(i).read());
                }
            } else {
                std::ptr::copy(ps, pd, len);
            }
        } else {
            for i in 0..len {
                pd.add(i * s[0]).write(ps.add(i * s[1]).read());
            }
        }
    });
}

/// Side of the square blocks of [`transpose_copy`].
const TBLOCK: usize = 16;

/// `dst = src` when the plan is a matrix, `dst` row-major (inner stride 1)
/// and `src` transposed (outer stride 1, inner stride > 1): the `contiguous`
/// of a `.t()`. Copies `TBLOCK x TBLOCK` blocks through a stack buffer:
/// each block reads `TBLOCK` source columns of `TBLOCK` adjacent elements
/// and writes `TBLOCK` destination rows, so every cache line is read and
/// written whole once. (The row-wise walk read `TILE` elements a page
/// apart per run: with a 4 KiB row pitch they all fall in one L1 set of 8
/// ways and evict each other, which made it several times slower than
/// PyTorch: Note [transposing copy] in `bench/results/ops-why.md`.) Returns
/// `false`, having done nothing, for any other plan, or when the operands
/// share a storage (the order of a blocked copy would differ from the element
/// order an overlapping copy depends on).
///
/// # Safety
/// As for [`map1`], both operands of element type `T`.
unsafe fn transpose_copy<T: Copy + Default + Send + Sync>(src: &Operand, dst: &Operand) -> bool {
    // Cheap necessary conditions first: most same-dtype copies that reach
    // here (a broadcast bias, a strided slice) are not transposes, and
    // `map1` builds its own plan after a `false`.
    let transposed = |l: &crate::layout::Layout| {
        l.strides().last().is_some_and(|&s| s != 1) && l.strides().contains(&1)
    };
    if src.storage.addr() == dst.storage.addr()
        || !dst.layout.is_contiguous()
        || !transposed(&src.layout)
    {
        return false;
    }
    let plan = Plan::new([&dst.layout, &src.layout]);
    let Some(([rows, cols], [[d0, d1], [s0, s1]], [od, os])) = plan.as_matrix() else {
        return false;
    };
    if d1 != 1 || s0 != 1 || s1 <= 1 || rows < TBLOCK || cols < TBLOCK {
        return false;
    }
    // SAFETY: the plan's matrix is inside both layouts, which fit their
    // storages (the caller's contract), and the storages differ.
    unsafe {
        transpose_rows::<T>(
            (ptr::<T>(src.storage).add(os), s1),
            [rows, cols],
            (ptr::<T>(dst.storage).add(od), d0),
        )
    };
    true
}

/// `dst[r, c] = src[r + c s1]` for a `[rows, cols]` matrix: a column-major
/// source (column stride `s1`) copied into a row-major destination (row
/// stride `d0`), in [`TBLOCK`] blocks (see [`transpose_copy`]), column
/// bands in parallel when large.
///
/// # Safety
/// Both pointers hold the `[rows, cols]` at their strides, and the two do
/// not overlap.
pub(super) unsafe fn transpose_rows<T: Copy + Default + Send + Sync>(
    (src, s1): (*const T, usize),
    [rows, cols]: [usize; 2],
    (dst, d0): (*mut T, usize),
) {
    let pd = SendPtr(dst);
    let ps = SendPtr(src as *mut T);
    // 4-byte elements at AVX2 or above: each full block in registers
    // (`transpose_avx2`).
    let fast4 = std::mem::size_of::<T>() == 4 && TBLOCK == 16 && super::transpose_avx2::available();
    // One column band (TBLOCK destination columns, all rows) per index.
    let band = |cb: usize| {
        let c0 = cb * TBLOCK;
        let bc = TBLOCK.min(cols - c0);
        let mut t = [[T::default(); TBLOCK]; TBLOCK];
        let mut r0 = 0;
        while r0 < rows {
            let br = TBLOCK.min(rows - r0);
            // SAFETY: rows `r0..r0 + br` and columns `c0..c0 + bc` are in
            // the `[rows, cols]` both pointers hold at their strides (the
            // caller's contract), and the two do not overlap; destination
            // columns `c0..c0 + bc` are this band's alone. `fast4`: the
            // process runs at AVX2 or above, so the CPU has it, and `T` is
            // 4 bytes wide.
            unsafe {
                let (s, d) = (ps.get().add(c0 * s1 + r0), pd.get().add(r0 * d0 + c0));
                if br == TBLOCK && bc == TBLOCK && fast4 {
                    #[cfg(target_arch = "x86_64")]
                    super::transpose_avx2::block16(s.cast(), s1, d.cast(), d0);
                } else if br == TBLOCK && bc == TBLOCK {
                    for (c, tc) in t.iter_mut().enumerate() {
                        *tc = s.add(c * s1).cast::<[T; TBLOCK]>().read_unaligned();
                    }
                    let rows: [[T; TBLOCK]; TBLOCK] =
                        std::array::from_fn(|r| std::array::from_fn(|c| t[c][r]));
                    for (r, row) in rows.iter().enumerate() {
                        d.add(r * d0).cast::<[T; TBLOCK]>().write_unaligned(*row);
                    }
                } else {
                    for (c, tc) in t.iter_mut().enumerate().take(bc) {
                        for (r, v) in tc.iter_mut().enumerate().take(br) {
                            *v = s.add(c * s1 + r).read();
                        }
                    }
                    for r in 0..br {
                        for (c, tc) in t.iter().enumerate().take(bc) {
                            d.add(r * d0 + c).write(tc[r]);
                        }
                    }
                }
            }
            r0 += br;
        }
    };
    let bands = cols.div_ceil(TBLOCK);
    if rows * cols < 2 * super::strided::PAR_CHUNK {
        (0..bands).for_each(band);
    } else {
        super::thread_pool::par_for(bands, band);
    }
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
            BinaryOp::Atan2 => map2::<T, T, T>(a, b, dst, |x, y| x.atan2(y)),
            BinaryOp::Fmod => map2::<T, T, T>(a, b, dst, |x, y| x.fmod(y)),
            BinaryOp::Remainder => map2::<T, T, T>(a, b, dst, |x, y| x.remainder(y)),
            BinaryOp::FloorDivide => map2::<T, T, T>(a, b, dst, |x, y| x.floor_div(y)),
            _ => compare::<T>(op, a, b, dst),
        }
    }
}

pub(crate) fn binary(op: BinaryOp, a: &Operand, b: &Operand, dst: &Operand) {
    debug_assert_eq!(a.dtype, b.dtype);
    debug_assert!(op.computes_in(a.dtype), "{} in {}", op.name(), a.dtype);
    if op.is_comparison() {
        return with_dtype!(a.dtype, T => compare::<T>(op, a, b, dst));
    }
    if matches!(op, BinaryOp::Pow) && super::unary::pow(a, Ok(b), dst) {
        return;
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
    debug_assert!(op.computes_in(a.dtype), "{} in {}", op.name(), a.dtype);
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
                BinaryOp::Atan2 => map1::<T, T>(a, dst, move |x| x.atan2(s)),
                BinaryOp::Fmod => map1::<T, T>(a, dst, move |x| x.fmod(s)),
                BinaryOp::Remainder => map1::<T, T>(a, dst, move |x| x.remainder(s)),
                BinaryOp::FloorDivide => map1::<T, T>(a, dst, move |x| x.floor_div(s)),
                BinaryOp::Eq => map1::<T, bool>(a, dst, move |x| x == s),
                BinaryOp::Ne => map1::<T, bool>(a, dst, move |x| x != s),
                BinaryOp::Lt => map1::<T, bool>(a, dst, move |x| x < s),
                BinaryOp::Le => map1::<T, bool>(a, dst, move |x| x <= s),
                BinaryOp::Gt => map1::<T, bool>(a, dst, move |x| x > s),
                BinaryOp::Ge => map1::<T, bool>(a, dst, move |x| x >= s),
            }
        }
    }
    if matches!(op, BinaryOp::Pow) && super::unary::pow(a, Err(scalar), dst) {
        return;
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
            let (po, pc) = (po.get().add(o[0]), pc.get().add(o[1]) as *const u8);
            let (pa, pb) = (pa.get().add(o[2]) as *const T, pb.get().add(o[3]) as *const T);
            // Dense runs as one select loop (vectorised, in place too):
            // `masked_fill` (a broadcast value `a`), `where` of two tensors.
            if s == [1, 1, 0, 1] {
                let av = pa.read();
                simd::run_map(Dense2 { po, pa: pc, pb, len, f: &move |c: u8, y: T| if c != 0 { av } else { y } }, len);
                return;
            }
            if s == [1, 1, 1, 0] {
                let bv = pb.read();
                simd::run_map(Dense2 { po, pa: pc, pb: pa, len, f: &move |c: u8, x: T| if c != 0 { x } else { bv } }, len);
                return;
            }
            for i in 0..len {
                let c = pc.add(i * s[1]).read() != 0;
                let v = if c { pa.add(i * s[2]).read() } else { pb.add(i * s[3]).read() };
                po.add(i * s[0]).write(v);
            }
        });
    })
}
