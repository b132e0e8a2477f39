//! Matrix multiplication on the CPU.
//!
//! f32, f64 and f16 go straight to the `gemm` crate, which takes row and
//! column strides: transposed, sliced and expanded operands are read in place
//! (it packs what it needs internally). bf16 is converted to f32 per matrix
//! (scratch buffers on the system heap, not tensor memory), multiplied by
//! gemm and rounded back. Integer dtypes use a plain wrapping loop.
//!
//! Batches walk the (broadcast) batch dimensions with a [`Plan`]: large
//! matrices run one after another with gemm's own rayon parallelism, many
//! small ones run in parallel with a single-threaded gemm each.

use super::num::Num;
use super::ptr;
use super::strided::{Plan, SendPtr};
use crate::backend::Operand;
use crate::dtype::DType;
use crate::layout::Layout;
use gemm::Parallelism;
use half::{bf16, f16};
use rayon::prelude::*;

/// `m * n * k` at and above which one product uses every thread.
const PAR_FLOPS: usize = 1 << 18;

/// The sizes and strides of one product `[m, k] x [k, n] -> [m, n]`.
#[derive(Copy, Clone)]
struct Geom {
    m: usize,
    n: usize,
    k: usize,
    /// Row and column strides of a, b and dst.
    a: (isize, isize),
    b: (isize, isize),
    d: (isize, isize),
}

/// The batch dimensions of a layout (everything but the last two).
fn batch(l: &Layout) -> Layout {
    let r = l.rank();
    Layout::from_parts(
        l.shape()[..r - 2].into(),
        l.strides()[..r - 2].into(),
        l.offset(),
    )
}

/// Calls `f([dst, a, b] offsets)` for every batch element; in parallel when
/// `par` (each call must then touch only its own output matrix).
fn for_each_batch(plan: &Plan<3>, par: bool, f: impl Fn([usize; 3]) + Sync) {
    let nb = plan.numel();
    let each = |start: usize, end: usize| {
        plan.runs(start, end, &mut |o, len, s| {
            for t in 0..len {
                f(std::array::from_fn(|i| o[i] + t * s[i]));
            }
        })
    };
    let threads = rayon::current_num_threads();
    if par && nb > 1 && threads > 1 {
        let per = nb.div_ceil(threads * 4).max(1);
        (0..nb.div_ceil(per))
            .into_par_iter()
            .for_each(|c| each(c * per, ((c + 1) * per).min(nb)));
    } else {
        each(0, nb)
    }
}

/// One product through gemm.
///
/// # Safety
/// Pointers and strides describe in-bounds matrices; `d` does not overlap `a` or `b`.
unsafe fn gemm_one<T: 'static + Copy>(
    g: &Geom,
    d: *mut T,
    a: *const T,
    b: *const T,
    (one, zero): (T, T),
    acc: bool,
    par: Parallelism,
) {
    // dst := alpha * dst + beta * lhs * rhs; dst is read only when `acc`.
    let alpha = if acc { one } else { zero };
    // SAFETY: `g` describes three matrices inside their storages (built by
    // the caller from checked layouts: rows and columns with their strides
    // in elements), `d` does not overlap `a` or `b` (a fresh or exclusively
    // locked output), and `T` is the element type of all three.
    unsafe {
        gemm::gemm(
            g.m, g.n, g.k, d, g.d.1, g.d.0, acc, a, g.a.1, g.a.0, b, g.b.1, g.b.0, alpha, one,
            false, false, false, par,
        )
    }
}

fn gemm_batched<T: 'static + Copy + Send + Sync>(
    g: &Geom,
    plan: &Plan<3>,
    pd: SendPtr<T>,
    pa: SendPtr<T>,
    pb: SendPtr<T>,
    units: (T, T),
    acc: bool,
) {
    let big = g.m * g.n * g.k >= PAR_FLOPS;
    let par = if big {
        Parallelism::Rayon(rayon::current_num_threads())
    } else {
        Parallelism::None
    };
    for_each_batch(plan, !big, |o| {
        // SAFETY: the offsets come from layouts that fit their storages; the
        // op layer made sure dst does not overlap the inputs; each batch
        // element writes its own output matrix.
        unsafe {
            gemm_one(
                g,
                pd.get().add(o[0]),
                pa.get().add(o[1]),
                pb.get().add(o[2]),
                units,
                acc,
                par,
            )
        }
    });
}

/// bf16: convert one matrix pair to f32, multiply with gemm, round back.
fn bf16_batched(
    g: &Geom,
    plan: &Plan<3>,
    pd: SendPtr<bf16>,
    pa: SendPtr<bf16>,
    pb: SendPtr<bf16>,
    acc: bool,
) {
    let big = g.m * g.n * g.k >= PAR_FLOPS;
    let par = if big {
        Parallelism::Rayon(rayon::current_num_threads())
    } else {
        Parallelism::None
    };
    let (m, n, k) = (g.m, g.n, g.k);
    let gf = Geom {
        a: (k as isize, 1),
        b: (n as isize, 1),
        d: (n as isize, 1),
        ..*g
    };
    for_each_batch(plan, !big, |o| {
        let (mut a, mut b, mut c) = (vec![0f32; m * k], vec![0f32; k * n], vec![0f32; m * n]);
        // SAFETY: as in `gemm_batched`; the f32 buffers are dense and private.
        unsafe {
            let (pa, pb, pd) = (pa.get().add(o[1]), pb.get().add(o[2]), pd.get().add(o[0]));
            for i in 0..m {
                for p in 0..k {
                    a[i * k + p] = pa
                        .offset(i as isize * g.a.0 + p as isize * g.a.1)
                        .read()
                        .to_f32();
                }
            }
            for p in 0..k {
                for j in 0..n {
                    b[p * n + j] = pb
                        .offset(p as isize * g.b.0 + j as isize * g.b.1)
                        .read()
                        .to_f32();
                }
            }
            gemm_one(
                &gf,
                c.as_mut_ptr(),
                a.as_ptr(),
                b.as_ptr(),
                (1f32, 0f32),
                false,
                par,
            );
            for i in 0..m {
                for j in 0..n {
                    let d = pd.offset(i as isize * g.d.0 + j as isize * g.d.1);
                    let old = if acc { d.read().to_f32() } else { 0.0 };
                    d.write(bf16::from_f32(old + c[i * n + j]));
                }
            }
        }
    });
}

/// Integers: a wrapping triple loop (rows of dst in parallel when large).
fn int_batched<T: Num>(
    g: &Geom,
    plan: &Plan<3>,
    pd: SendPtr<T>,
    pa: SendPtr<T>,
    pb: SendPtr<T>,
    acc: bool,
) {
    let big = g.m * g.n * g.k >= PAR_FLOPS;
    for_each_batch(plan, !big, |o| {
        let row = |i: usize| {
            // SAFETY: as in `gemm_batched`; each row is written by one caller.
            unsafe {
                let (pa, pb, pd) = (pa.get().add(o[1]), pb.get().add(o[2]), pd.get().add(o[0]));
                let d = pd.offset(i as isize * g.d.0);
                if !acc {
                    for j in 0..g.n {
                        d.offset(j as isize * g.d.1).write(T::zero());
                    }
                }
                for p in 0..g.k {
                    let aip = pa.offset(i as isize * g.a.0 + p as isize * g.a.1).read();
                    let b = pb.offset(p as isize * g.b.0);
                    for j in 0..g.n {
                        let dj = d.offset(j as isize * g.d.1);
                        dj.write(dj.read().add(aip.mul(b.offset(j as isize * g.b.1).read())));
                    }
                }
            }
        };
        if big {
            (0..g.m).into_par_iter().for_each(row);
        } else {
            (0..g.m).for_each(row);
        }
    });
}

/// Batched `dst = a @ b` (see the dispatch function for the layouts).
pub(crate) fn matmul(a: &Operand, b: &Operand, dst: &Operand) {
    matmul_impl(a, b, dst, false)
}

/// Batched `dst += a @ b`: gemm reads `dst` in its epilogue, so a bias
/// broadcast into `dst` beforehand costs no extra pass (`Linear`).
pub(crate) fn matmul_acc(a: &Operand, b: &Operand, dst: &Operand) {
    matmul_impl(a, b, dst, true)
}

fn matmul_impl(a: &Operand, b: &Operand, dst: &Operand, acc: bool) {
    let r = dst.layout.rank();
    debug_assert!(r >= 2 && a.layout.rank() == r && b.layout.rank() == r);
    let st = |l: &Layout| (l.strides()[r - 2] as isize, l.strides()[r - 1] as isize);
    let g = Geom {
        m: dst.layout.shape()[r - 2],
        n: dst.layout.shape()[r - 1],
        k: a.layout.shape()[r - 1],
        a: st(&a.layout),
        b: st(&b.layout),
        d: st(&dst.layout),
    };
    let plan = Plan::new([&batch(&dst.layout), &batch(&a.layout), &batch(&b.layout)]);
    if g.m == 0 || g.n == 0 || plan.numel() == 0 {
        return;
    }
    if g.k == 0 {
        if !acc {
            super::fill(dst, 0.0);
        }
        return;
    }
    macro_rules! ptrs {
        ($t:ty) => {
            (
                SendPtr(ptr::<$t>(dst.storage)),
                SendPtr(ptr::<$t>(a.storage)),
                SendPtr(ptr::<$t>(b.storage)),
            )
        };
    }
    match dst.dtype {
        DType::F32 => {
            let (d, a, b) = ptrs!(f32);
            gemm_batched(&g, &plan, d, a, b, (1f32, 0f32), acc)
        }
        DType::F64 => {
            let (d, a, b) = ptrs!(f64);
            gemm_batched(&g, &plan, d, a, b, (1f64, 0f64), acc)
        }
        DType::F16 => {
            let (d, a, b) = ptrs!(f16);
            gemm_batched(&g, &plan, d, a, b, (f16::ONE, f16::ZERO), acc)
        }
        DType::BF16 => {
            let (d, a, b) = ptrs!(bf16);
            bf16_batched(&g, &plan, d, a, b, acc)
        }
        DType::I64 => {
            let (d, a, b) = ptrs!(i64);
            int_batched(&g, &plan, d, a, b, acc)
        }
        DType::I32 => {
            let (d, a, b) = ptrs!(i32);
            int_batched(&g, &plan, d, a, b, acc)
        }
        DType::U8 => {
            let (d, a, b) = ptrs!(u8);
            int_batched(&g, &plan, d, a, b, acc)
        }
        DType::Bool => unreachable!("matmul on bool: the op layer refuses it"),
    }
}

/// Largest column-major product, in bytes, that [`linear`] routes through
/// its per-thread scratch buffer (which it keeps for reuse).
const LINEAR_SCRATCH_MAX: usize = 8 << 20;

thread_local! {
    /// [`linear`]'s reusable scratch (u64 words: aligned for f32 and f64).
    static SCRATCH: std::cell::Cell<Vec<u64>> = const { std::cell::Cell::new(Vec::new()) };
}

/// `dst = x @ w^T (+ bias)` for a 2-D `x: [m, k]`, `wt` = `w^T: [k, n]`
/// (any strides) and a bias already broadcast to `[m, n]` (row stride 0).
///
/// gemm packs a row-major `w` (the usual `[out, in]` weight) slowly when its
/// row stride is a multiple of 4 KiB (cache-set and TLB conflicts: 2.4x the
/// time of the same product at 1024 x 1024 on an AVX-512 EPYC), and it
/// computes a row-major result as the transposed problem with `w` as its
/// packed operand. So f32/f64 products of some size are computed column-major
/// into a per-thread scratch buffer (like gemm's own packing buffers it is
/// workspace, not tensor memory, and is kept for reuse) and written to `dst`
/// by one tiled transposing pass that also adds the bias. Other dtypes and
/// small products: the bias is copied into `dst` and the product accumulated
/// onto it by gemm.
pub(crate) fn linear(x: &Operand, wt: &Operand, bias: Option<&Operand>, dst: &Operand) {
    let (m, n) = (dst.layout.shape()[0], dst.layout.shape()[1]);
    let k = x.layout.shape()[1];
    let esz = dst.dtype.size_in_bytes();
    let scratch = matches!(dst.dtype, DType::F32 | DType::F64)
        && m >= 16
        && n >= 16
        && k > 0
        && m * n * esz <= LINEAR_SCRATCH_MAX;
    if !scratch {
        match bias {
            Some(b) => {
                super::copy(b, dst);
                matmul_acc(x, wt, dst);
            }
            None => matmul(x, wt, dst),
        }
        return;
    }
    let mut buf = SCRATCH.take();
    let words = (m * n * esz).div_ceil(8);
    if buf.len() < words {
        buf = vec![0u64; words];
    }
    let st = |l: &Layout| (l.strides()[0] as isize, l.strides()[1] as isize);
    let g = Geom {
        m,
        n,
        k,
        a: st(&x.layout),
        b: st(&wt.layout),
        d: (1, m as isize),
    };
    let big = m * n * k >= PAR_FLOPS;
    let par = if big {
        Parallelism::Rayon(rayon::current_num_threads())
    } else {
        Parallelism::None
    };
    let bias = bias.map(|b| (b.storage, b.layout.offset(), b.layout.strides()[1]));
    macro_rules! go {
        ($t:ty, $one:expr, $zero:expr) => {{
            let s = buf.as_mut_ptr() as *mut $t;
            // SAFETY: the operand layouts fit their storages (the op layer
            // checked them); `s` holds m * n elements; dst does not overlap
            // the inputs (a fresh output); the caller holds the locks.
            unsafe {
                let px = ptr::<$t>(x.storage).add(x.layout.offset());
                let pw = ptr::<$t>(wt.storage).add(wt.layout.offset());
                gemm_one(&g, s, px, pw, ($one, $zero), false, par);
                let pb = bias.map(|(st, off, inc)| (ptr::<$t>(st).add(off) as *const $t, inc));
                let pd = ptr::<$t>(dst.storage).add(dst.layout.offset());
                transpose_into(s, m, n, pb, pd, st(&dst.layout));
            }
        }};
    }
    match dst.dtype {
        DType::F32 => go!(f32, 1f32, 0f32),
        _ => go!(f64, 1f64, 0f64),
    }
    SCRATCH.set(buf);
}

/// `dst[i, j] = src[i + j m] (+ bias[j])`: a column-major `[m, n]` written
/// through `dst`'s strides, in 32 x 32 tiles, bands of rows in parallel.
///
/// # Safety
/// `src` holds `m * n` elements; `bias` (if any) `n` elements at its
/// increment; `dst` fits `[m, n]` at its strides and overlaps neither.
unsafe fn transpose_into<T: Num>(
    src: *const T,
    m: usize,
    n: usize,
    bias: Option<(*const T, usize)>,
    dst: *mut T,
    d: (isize, isize),
) {
    const TILE: usize = 32;
    let (src, dst) = (SendPtr(src as *mut T), SendPtr(dst));
    let bias = bias.map(|(p, inc)| (SendPtr(p as *mut T), inc));
    let rows = |r0: usize, r1: usize| {
        let mut j0 = 0;
        while j0 < n {
            let j1 = (j0 + TILE).min(n);
            for i in r0..r1 {
                // SAFETY: in bounds by the function's contract; each band
                // writes its own rows of dst.
                unsafe {
                    let drow = dst.get().offset(i as isize * d.0);
                    let s = src.get().add(i);
                    for j in j0..j1 {
                        let mut v = s.add(j * m).read();
                        if let Some((b, inc)) = bias {
                            v = v.add(b.get().add(j * inc).read());
                        }
                        drow.offset(j as isize * d.1).write(v);
                    }
                }
            }
            j0 = j1;
        }
    };
    let bands = m.div_ceil(TILE);
    match super::strided::kernel_pool() {
        Some(pool) if m * n >= 2 * super::strided::PAR_CHUNK => pool.install(|| {
            (0..bands)
                .into_par_iter()
                .for_each(|b| rows(b * TILE, ((b + 1) * TILE).min(m)))
        }),
        _ => (0..bands).for_each(|b| rows(b * TILE, ((b + 1) * TILE).min(m))),
    }
}
