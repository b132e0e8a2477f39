//! Matrix multiplication on the CPU.
//!
//! f32, f64 and f16 go straight to the `gemm` crate, which takes row and
//! column strides: transposed, sliced and expanded operands are read in place
//! (it packs what it needs internally). bf16, and f16 on aarch64 (where
//! gemm would accumulate in f16), are converted to f32 per matrix
//! (scratch buffers on the system heap, not tensor memory), multiplied by
//! gemm and rounded back. Integer dtypes use a plain wrapping loop.
//!
//! Batches walk the (broadcast) batch dimensions with a [`Plan`]. Parallel
//! work runs on the CPU backend's one pool ([`super::thread_pool`]), gemm's threads
//! included: see [`batches_in_parallel`] for how a batch is split, and
//! [`Blocks`] for how one product is (the calling thread works on it with
//! the pool's helpers, as it does on every other op; only gemm 0.19's
//! products of at least [`SPLIT_FLOPS`] use its own threads).

use super::gemm::Parallelism;
use super::numeric_traits::{Flt, Num};
use super::ptr;
use super::strided::{Plan, SendPtr};
use super::thread_pool::{install, kernel_pool, par_for};
use crate::backend::Operand;
use crate::dtype::DType;
use crate::layout::Layout;
use half::{bf16, f16};

mod lhs_copy;

/// Total `m * n * k` of a batch at and above which its products are worth
/// spreading over the pool: below it the pool's wake-up costs more than it
/// saves.
const PAR_FLOPS: usize = 1 << 18;

/// `m * n * k` below which a batch of at least `threads` products runs its
/// products in parallel, each on one thread (see [`batches_in_parallel`]).
const BATCH_PAR_FLOPS: usize = 1 << 24;

/// `m * n * k` below which one product that gemm would thread is cut into
/// row or column blocks instead ([`Blocks`]), each a single-threaded gemm,
/// shared by the calling thread and the pool's helpers ([`par_for`]).
/// Larger products keep gemm's own parallelism (its packing of the shared
/// operand, done once, then matters more than a late wake-up).
const SPLIT_FLOPS: usize = 1 << 28;

/// Blocks per thread of a split product: more than one, so that the caller
/// takes a helper's share when the helper wakes late.
const BLOCKS_PER_THREAD: usize = 2;

/// Rows or columns of a block are a multiple of this (a whole number of
/// gemm's register tiles on every dispatch level).
const BLOCK_ALIGN: usize = 16;

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

impl Geom {
    fn flops(&self) -> usize {
        self.m.saturating_mul(self.n).saturating_mul(self.k)
    }

    /// Whether gemm would split this one product over threads: not a
    /// matrix-vector or outer product (its `gemv`/`gevv` paths run on one
    /// thread) and at least gemm's own threshold of work.
    fn splits(&self) -> bool {
        self.m > 1
            && self.n > 1
            && self.k > 2
            && self.flops() >= super::gemm::get_threading_threshold()
    }
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

/// Whether a batch of `nb` products of `flops = m * n * k` each runs its
/// products in parallel (each on one thread, `true`) or one after another
/// with every thread on each (`false`: [`gemm_product`], which cuts a
/// product into [`Blocks`] or, when large, uses gemm's own threads), on a
/// pool of `threads`. `splits`: whether one product can use several threads at
/// all ([`Geom::splits`]).
///
/// gemm splits one product per `kc`-deep step of `k`: a fork-join of the
/// pool and a shared packing of the right operand for every step, and a
/// left operand of at most two cache blocks is packed on one thread first.
/// For a small product that synchronisation is most of the time
/// (`[64,128,64] @ [64,64,128]`, 1M flops a product, ran several times
/// PyTorch's time batch after batch: Note [small batched products] in
/// `bench/results/ops-why.md`). A batch split by products needs one fork-join
/// in all and no sharing, so it is preferred whenever one product cannot
/// split, or is small (`< BATCH_PAR_FLOPS`, e.g. 256^3) and the batch has a
/// product for every thread. Large products are spread over the threads one
/// at a time: each thread then streams its own packed panels through the
/// shared cache, and a batch shorter than the pool would leave threads idle.
fn batches_in_parallel(nb: usize, flops: usize, splits: bool, threads: usize) -> bool {
    threads > 1 && nb > 1 && (!splits || (nb >= threads && flops < BATCH_PAR_FLOPS))
}

/// Calls `f([dst, a, b] offsets, threads)` for every batch element, where
/// `threads` is how many threads that one product may use; batch elements
/// run in parallel or in order as [`batches_in_parallel`] says (each call
/// must touch only its own output matrix). `splits`: whether one product
/// can use more than one thread at all; when neither it nor the batch can,
/// everything runs on the caller's thread (no hand-over to the pool).
///
/// `f` runs on the calling thread or one of [`par_for`]'s; with `threads >
/// 1` it is on the calling thread, outside the pool, and spreads its one
/// product itself ([`gemm_product`], or [`par_for`] over rows).
fn run_batches(
    plan: &Plan<3>,
    g: &Geom,
    splits: bool,
    f: impl Fn([usize; 3], usize) + Sync + Send,
) {
    let nb = plan.numel();
    let each = |start: usize, end: usize, threads: usize| {
        plan.runs(start, end, &mut |o, len, s| {
            for t in 0..len {
                f(std::array::from_fn(|i| o[i] + t * s[i]), threads);
            }
        })
    };
    let worth = (nb > 1 && nb.saturating_mul(g.flops()) >= PAR_FLOPS) || splits;
    let pool = if worth { kernel_pool() } else { None };
    let Some(pool) = pool else {
        return each(0, nb, 1);
    };
    let threads = pool.current_num_threads();
    drop(pool);
    if batches_in_parallel(nb, g.flops(), splits, threads) {
        let per = nb.div_ceil(threads * 4).max(1);
        par_for(nb.div_ceil(per), |c| {
            each(c * per, ((c + 1) * per).min(nb), 1)
        });
    } else {
        each(0, nb, threads);
    }
}

/// How a product is cut for [`gemm_product`]: `count` blocks of `size`
/// rows (`rows`) or columns (the last one shorter).
#[derive(Copy, Clone, Debug, PartialEq)]
struct Blocks {
    rows: bool,
    size: usize,
    count: usize,
}

impl Blocks {
    /// The blocks for `threads` threads, or `None` when the product is
    /// too narrow to cut or (for gemm 0.19, `whole` false) large enough
    /// for its own threads ([`SPLIT_FLOPS`]).
    ///
    /// Why cut at all: gemm splits one product with a fork-join of the pool
    /// per `kc`-deep step of `k`, and its caller sleeps in `install` until
    /// the pool's threads are done, so each step waits for a thread to wake.
    /// Between the ops of a training step those threads have gone to sleep,
    /// and a `linear` after other work took much longer than back to back
    /// (Note [matmul blocks] in `bench/results/ops-why.md`). Blocks start at
    /// once on the calling thread, and a helper that wakes late takes
    /// whatever blocks are left.
    ///
    /// `whole`: the product runs private-gemm-x86 ([`super::gemm::fast_kernels`]),
    /// whose own threads are rayon's, not the team's that ran the op
    /// before, so each product would hand its work from one set of threads
    /// to the other and back. It is always cut instead, into one block per
    /// thread: each block packs the whole smaller operand again, which costs
    /// less than the hand-over (Note [gemm choice] in ARCHITECTURE.md).
    ///
    /// The longer of `m` and `n` is cut, so the operand every block reads
    /// whole (and packs again) is the smaller one.
    fn of(g: &Geom, threads: usize, whole: bool) -> Option<Blocks> {
        if threads <= 1 || (!whole && g.flops() >= SPLIT_FLOPS) {
            return None;
        }
        let per_thread = if whole { 1 } else { BLOCKS_PER_THREAD };
        let rows = g.m >= g.n;
        let len = if rows { g.m } else { g.n };
        let size = len
            .div_ceil(threads * per_thread)
            .next_multiple_of(BLOCK_ALIGN);
        let count = len.div_ceil(size);
        (count > 1).then_some(Blocks { rows, size, count })
    }

    /// Block `i`: its geometry and the element offsets of its `[dst, a, b]`
    /// from the whole product's.
    fn block(&self, g: &Geom, i: usize) -> (Geom, [isize; 3]) {
        let start = i * self.size;
        let len = if self.rows { g.m } else { g.n };
        let part = self.size.min(len - start);
        let s = start as isize;
        if self.rows {
            (Geom { m: part, ..*g }, [s * g.d.0, s * g.a.0, 0])
        } else {
            (Geom { n: part, ..*g }, [s * g.d.1, 0, s * g.b.1])
        }
    }
}

/// One product through gemm on up to `threads` threads: on this thread
/// alone, cut into [`Blocks`] shared with the pool's helpers, or (a large
/// gemm 0.19 product) with its own parallelism inside the pool; a
/// column-major left operand copied first where [`lhs_copy::lhs_copy`]
/// says so.
///
/// # Safety
/// As [`gemm_one`].
unsafe fn gemm_product<T: 'static + Copy + Default + Send + Sync>(
    g: &Geom,
    d: SendPtr<T>,
    a: SendPtr<T>,
    b: SendPtr<T>,
    units: (T, T),
    acc: bool,
    threads: usize,
) {
    let fast = super::gemm::fast_kernels::<T>();
    if fast && let Some(copy) = lhs_copy::lhs_copy(g, std::mem::size_of::<T>()) {
        let (len, strides) = copy.layout(g.m, g.k);
        with_scratch(&LHS_SCRATCH, len * std::mem::size_of::<T>(), |buf| {
            let copied = buf as *mut T;
            let ga = Geom { a: strides, ..*g };
            // SAFETY: `a` holds the column-major `[m, k]` at column stride
            // `g.a.1` (the caller's contract, with `g.a.0 == 1`, which
            // `lhs_copy` checked); `buf` holds the `len` elements of `T`
            // the copy writes, is this call's alone and so overlaps no
            // operand; `ga` is `g` with `a` that copy, which `lhs_copy`
            // declines (row-major, or not at an aliasing stride), so the
            // call below multiplies.
            unsafe {
                lhs_copy::copy(
                    copy,
                    (a.get() as *const T, g.a.1 as usize),
                    [g.m, g.k],
                    copied,
                );
                gemm_product(&ga, d, SendPtr(copied), b, units, acc, threads)
            }
        });
        return;
    }
    if threads > 1
        && let Some(blocks) = Blocks::of(g, threads, fast)
    {
        par_for(blocks.count, |i| {
            let (bg, o) = blocks.block(g, i);
            // SAFETY: the block lies inside the product (its rows or
            // columns are a sub-range), so the caller's contract holds
            // for it; blocks write disjoint parts of dst.
            unsafe {
                gemm_one(
                    &bg,
                    d.get().offset(o[0]),
                    a.get().offset(o[1]),
                    b.get().offset(o[2]),
                    units,
                    acc,
                    Parallelism::None,
                )
            }
        });
        return;
    }
    install(threads > 1, |threads| {
        // SAFETY: the caller's contract.
        unsafe {
            gemm_one(
                g,
                d.get(),
                a.get(),
                b.get(),
                units,
                acc,
                parallelism(threads),
            )
        }
    });
}

thread_local! {
    /// [`gemm_product`]'s copy of a left operand, apart from
    /// [`linear`]'s scratch, which the caller may be holding.
    static LHS_SCRATCH: std::cell::Cell<Vec<u64>> = const { std::cell::Cell::new(Vec::new()) };
}

/// gemm's parallelism for one product given `threads` (1: this thread).
fn parallelism(threads: usize) -> Parallelism {
    if threads > 1 {
        Parallelism::Rayon(threads)
    } else {
        Parallelism::None
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
        super::gemm::gemm(
            g.m,
            g.n,
            g.k,
            d,
            (g.d.1, g.d.0),
            acc,
            a,
            (g.a.1, g.a.0),
            b,
            (g.b.1, g.b.0),
            alpha,
            one,
            par,
        )
    }
}

fn gemm_batched<T: 'static + Copy + Default + Send + Sync>(
    g: &Geom,
    plan: &Plan<3>,
    pd: SendPtr<T>,
    pa: SendPtr<T>,
    pb: SendPtr<T>,
    units: (T, T),
    acc: bool,
) {
    run_batches(plan, g, g.splits(), |o, threads| {
        // SAFETY: the offsets come from layouts that fit their storages; the
        // op layer made sure dst does not overlap the inputs; each batch
        // element writes its own output matrix.
        unsafe {
            gemm_product(
                g,
                SendPtr(pd.get().add(o[0])),
                SendPtr(pa.get().add(o[1])),
                SendPtr(pb.get().add(o[2])),
                units,
                acc,
                threads,
            )
        }
    });
}

/// A half type (bf16, and f16 on aarch64) as f32: convert one matrix
/// pair to f32 in this thread's reusable scratch, multiply with gemm,
/// round back. A dense operand (row- or column-major) converts as one
/// run and keeps its layout; anything else is gathered row-major.
fn half_batched<T: Flt<C = f32>>(
    g: &Geom,
    plan: &Plan<3>,
    (pd, pa, pb): (SendPtr<T>, SendPtr<T>, SendPtr<T>),
    acc: bool,
) {
    let (m, n, k) = (g.m, g.n, g.k);
    let (la, lb) = (dense_strides(g.a, m, k), dense_strides(g.b, k, n));
    let gf = Geom {
        a: la.unwrap_or((k as isize, 1)),
        b: lb.unwrap_or((n as isize, 1)),
        d: (n as isize, 1),
        ..*g
    };
    let d_dense = g.d == (n as isize, 1);
    run_batches(plan, g, g.splits(), |o, threads| {
        let words = (m * k + k * n + m * n).div_ceil(2);
        with_scratch(&HALF_SCRATCH, words * 8, |buf| {
            // SAFETY: as in `gemm_batched` for the operands; `buf` holds
            // `m*k + k*n + m*n` f32s (u64-aligned), is this call's alone,
            // and its three parts are disjoint.
            unsafe {
                let (pa, pb, pd) = (pa.get().add(o[1]), pb.get().add(o[2]), pd.get().add(o[0]));
                let fa = buf as *mut f32;
                let (fb, fc) = (fa.add(m * k), fa.add(m * k + k * n));
                match la {
                    Some(_) => widen(pa, fa, m * k),
                    None => gather(pa, g.a, m, k, fa),
                }
                match lb {
                    Some(_) => widen(pb, fb, k * n),
                    None => gather(pb, g.b, k, n, fb),
                }
                gemm_product(
                    &gf,
                    SendPtr(fc),
                    SendPtr(fa),
                    SendPtr(fb),
                    (1f32, 0f32),
                    false,
                    threads,
                );
                if d_dense && acc {
                    for i in 0..m * n {
                        let d = pd.add(i);
                        d.write(T::down(d.read().up() + fc.add(i).read()));
                    }
                } else if d_dense {
                    for i in 0..m * n {
                        pd.add(i).write(T::down(fc.add(i).read()));
                    }
                } else {
                    for i in 0..m {
                        for j in 0..n {
                            let d = pd.offset(i as isize * g.d.0 + j as isize * g.d.1);
                            let old = if acc { d.read().up() } else { 0.0 };
                            d.write(T::down(old + fc.add(i * n + j).read()));
                        }
                    }
                }
            }
        })
    });
}

/// The strides an `[r, c]` operand keeps when converted as one dense run:
/// its own if it is dense row- or column-major, else `None`.
fn dense_strides((rs, cs): (isize, isize), r: usize, c: usize) -> Option<(isize, isize)> {
    let (ri, ci) = (r as isize, c as isize);
    let row_major = (cs == 1 || c == 1) && (rs == ci || r == 1);
    let col_major = (rs == 1 || r == 1) && (cs == ri || c == 1);
    if row_major {
        Some((ci, 1))
    } else if col_major {
        Some((1, ri))
    } else {
        None
    }
}

thread_local! {
    /// [`half_batched`]'s f32 copies of one product's operands and result.
    static HALF_SCRATCH: std::cell::Cell<Vec<u64>> = const { std::cell::Cell::new(Vec::new()) };
}

/// `dst[..len] = src[..len]` widened to f32 (one loop the compiler
/// vectorizes).
///
/// # Safety
/// `src` and `dst` hold `len` elements and do not overlap.
unsafe fn widen<T: Flt<C = f32>>(src: *const T, dst: *mut f32, len: usize) {
    // SAFETY: the caller's contract.
    let (s, d) = unsafe {
        (
            std::slice::from_raw_parts(src, len),
            std::slice::from_raw_parts_mut(dst, len),
        )
    };
    for (d, &s) in d.iter_mut().zip(s) {
        *d = s.up();
    }
}

/// The `[r, c]` operand at strides `(rs, cs)` widened into a dense
/// row-major `dst`.
///
/// # Safety
/// The strides address in-bounds elements of `src`; `dst` holds `r * c`.
unsafe fn gather<T: Flt<C = f32>>(
    src: *const T,
    (rs, cs): (isize, isize),
    r: usize,
    c: usize,
    dst: *mut f32,
) {
    for i in 0..r {
        for j in 0..c {
            // SAFETY: the caller's contract.
            unsafe {
                let x = src.offset(i as isize * rs + j as isize * cs).read();
                dst.add(i * c + j).write(x.up());
            }
        }
    }
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
    // Rows of one product in parallel when it is large.
    let splits = g.m > 1 && g.flops() >= PAR_FLOPS;
    run_batches(plan, g, splits, |o, threads| {
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
        if threads > 1 {
            par_for(g.m, row);
        } else {
            (0..g.m).for_each(row);
        }
    });
}

/// Batched `dst = a @ b` (see the dispatch function for the layouts).
pub(crate) fn matmul(a: &Operand, b: &Operand, dst: &Operand) {
    if dst.layout.rank() == 2 {
        // One product: the layout rule of `linear`, so that a transposed
        // weight view, `x.matmul(&w.t())`, is as fast as `linear` (gemm
        // packed the weight on one thread otherwise:
        // Note [matmul layout rule] in bench/results/ops-why.md).
        return linear(a, b, None, dst);
    }
    if batch(&dst.layout).numel() == 1 {
        // A batch of one product (a convolution's single group, a `[1, m,
        // k]` view): the same rule, on the matrices. Through the batched
        // path a transposed right operand went to gemm as it was, several
        // times slower for a convolution's weight gradient
        // (Note [matmul layout rule] in bench/results/ops-why.md).
        return linear(&matrix(a), &matrix(b), None, &matrix(dst));
    }
    matmul_impl(a, b, dst, false)
}

/// The one matrix of an operand whose batch dims all have size 1 (index 0
/// in each, so the offset stays).
fn matrix<'a>(o: &Operand<'a>) -> Operand<'a> {
    let l = &o.layout;
    let r = l.rank();
    Operand {
        storage: o.storage,
        layout: std::borrow::Cow::Owned(Layout::from_parts(
            l.shape()[r - 2..].into(),
            l.strides()[r - 2..].into(),
            l.offset(),
        )),
        dtype: o.dtype,
    }
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
        // gemm's f16 kernels accumulate in f16 where the CPU has f16
        // arithmetic (aarch64's FEAT_FP16): a 512-term sum was 0.04 off
        // f64's there (the conv2d weight gradient of tests/nn/conv.rs under
        // qemu). PyTorch accumulates f16 products in f32 on every CPU, as
        // gemm does on x86-64, so aarch64 multiplies f16 as f32.
        #[cfg(not(target_arch = "aarch64"))]
        DType::F16 => {
            let (d, a, b) = ptrs!(f16);
            gemm_batched(&g, &plan, d, a, b, (f16::ONE, f16::ZERO), acc)
        }
        #[cfg(target_arch = "aarch64")]
        DType::F16 => half_batched(&g, &plan, ptrs!(f16), acc),
        DType::BF16 => half_batched(&g, &plan, ptrs!(bf16), acc),
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

/// Largest scratch buffer, in bytes, that [`with_scratch`] keeps per thread
/// for reuse; a larger one is the call's own, freed after it. (A memory
/// bound, not a speed choice: whether a scratch buffer is used at all comes
/// from [`column_major_product`] and [`lhs_copy::lhs_copy`] alone.)
const SCRATCH_KEEP: usize = 8 << 20;

/// Runs `f` on this thread's buffer in `cell`, grown to at least `bytes`
/// (u64 words: aligned for f32 and f64) and kept for the next call when at
/// most [`SCRATCH_KEEP`]; a larger buffer is the call's own. Workspace,
/// like gemm's packing buffers, not tensor memory. A nested call on the
/// same cell finds it empty and gets a buffer of its own.
fn with_scratch<R>(
    cell: &'static std::thread::LocalKey<std::cell::Cell<Vec<u64>>>,
    bytes: usize,
    f: impl FnOnce(*mut u64) -> R,
) -> R {
    let words = bytes.div_ceil(8);
    let keep = words * 8 <= SCRATCH_KEEP;
    let mut buf = if keep { cell.take() } else { Vec::new() };
    if buf.len() < words {
        buf = vec![0u64; words];
    }
    let r = f(buf.as_mut_ptr());
    if keep {
        cell.set(buf);
    }
    r
}

thread_local! {
    /// [`linear`]'s reusable scratch (u64 words: aligned for f32 and f64).
    static LINEAR_SCRATCH: std::cell::Cell<Vec<u64>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Whether [`linear`] computes `x @ w^T` column-major (into a scratch
/// buffer, then one transposing pass into `dst` that also adds the bias) or
/// lets gemm write the row-major `dst` directly. Chosen from the shapes and
/// strides alone: `x: [m, k]` with row stride `x_rs`, `w: [n, k]` with row
/// stride `w_rs` (the column stride of `wt = w^T`).
///
/// gemm computes every product with a column-major destination: asked for a
/// row-major one it computes the transpose, `dst^T = w x^T`, so the operand
/// it calls *left* is `x` for a column-major destination and `w` for a
/// row-major one. It packs its left operand into panels, and one of at most
/// two cache blocks of rows, which is any left operand of a few hundred
/// rows, it packs *before* its parallel section, on one thread, unless that
/// operand is column-major already (row stride 1). The right operand is
/// packed in parallel or read in place. So the rule: the layout whose left
/// operand costs less to pack, `rows * k` element copies on one thread, or
/// nothing for a column-major operand:
///
/// | left operand | column-major dst (scratch) | row-major dst (direct) |
/// |---|---|---|
/// | is | `x`, `m` rows | `w`, `n` rows |
/// | serial packing | `m * k`, 0 if `x_rs == 1` | `n * k`, 0 if `w_rs == 1` |
///
/// and column-major only when it packs at least [`COLUMN_MAJOR_GAIN`] (4)
/// times less: the direct write saves the scratch and the transposing
/// pass (`m * n` elements read and written again), which a smaller saving
/// in serial packing does not repay. A skinny weight
/// (`x[512,1024] w[16,1024]^T`) is thus written directly (only `w`'s 16
/// rows are packed serially; packing all 512 of `x`'s instead takes many
/// times PyTorch's time); a skinny
/// batch (`x[64,1024] w[1024,1024]^T`) or a transposed input goes
/// column-major; a square pair is written directly. A product with one row or
/// one column is a matrix-vector product (gemm's `gemv`, nothing packed) and
/// is written directly.
///
/// With both layouts forced, each of these choices measured faster than the
/// other layout, and so did `x[512,1024] w[1024,1024]^T` written directly
/// (where comparing rows alone would pick column-major); hence the factor: 64 against
/// 1024 rows still goes column-major
/// (Note [matmul layout rule] in `bench/results/ops-why.md`).
fn column_major_product(m: usize, n: usize, x_rs: isize, w_rs: isize) -> bool {
    if m <= 1 || n <= 1 {
        return false;
    }
    let cost_col = if x_rs == 1 { 0 } else { m };
    let cost_row = if w_rs == 1 { 0 } else { n };
    cost_col.saturating_mul(COLUMN_MAJOR_GAIN) <= cost_row && cost_col < cost_row
}

/// How many times less serial packing the column-major layout must cost
/// before [`linear`] pays its scratch and its transposing pass (see
/// [`column_major_product`]).
const COLUMN_MAJOR_GAIN: usize = 4;

/// `dst = x @ w^T (+ bias)` for a 2-D `x: [m, k]`, `wt` = `w^T: [k, n]`
/// (any strides) and a bias already broadcast to `[m, n]` (row stride 0).
///
/// f32/f64 products that [`column_major_product`] sends column-major are
/// computed into a per-thread scratch buffer (like gemm's own packing
/// buffers it is workspace, not tensor memory) and written to `dst` by one
/// tiled transposing pass that also adds the bias. Otherwise, and for other
/// dtypes, the bias is copied into `dst` and the product accumulated onto it
/// by gemm.
pub(crate) fn linear(x: &Operand, wt: &Operand, bias: Option<&Operand>, dst: &Operand) {
    let (m, n) = (dst.layout.shape()[0], dst.layout.shape()[1]);
    let k = x.layout.shape()[1];
    let esz = dst.dtype.size_in_bytes();
    let st = |l: &Layout| (l.strides()[0] as isize, l.strides()[1] as isize);
    let scratch = matches!(dst.dtype, DType::F32 | DType::F64)
        && k > 0
        && column_major_product(m, n, st(&x.layout).0, st(&wt.layout).1);
    if !scratch {
        match bias {
            Some(b) => {
                super::copy(b, dst);
                matmul_acc(x, wt, dst);
            }
            None => matmul_impl(x, wt, dst, false),
        }
        return;
    }
    let g = Geom {
        m,
        n,
        k,
        a: st(&x.layout),
        b: st(&wt.layout),
        d: (1, m as isize),
    };
    let bias = bias.map(|b| (b.storage, b.layout.offset(), b.layout.strides()[1]));
    with_scratch(&LINEAR_SCRATCH, m * n * esz, |buf| {
        let s = SendPtr(buf);
        macro_rules! go {
            ($t:ty, $one:expr, $zero:expr) => {{
                let s = SendPtr(s.get() as *mut $t);
                // SAFETY: the operand layouts fit their storages (the op layer
                // checked them); `s` holds m * n elements; dst does not overlap
                // the inputs (a fresh output); the caller holds the locks.
                let (px, pw) = unsafe {
                    (
                        SendPtr(ptr::<$t>(x.storage).add(x.layout.offset())),
                        SendPtr(ptr::<$t>(wt.storage).add(wt.layout.offset())),
                    )
                };
                // Inside a rayon worker there is no pool: one gemm, not blocks
                // run one after another.
                let threads = match kernel_pool() {
                    Some(p) if g.splits() => p.current_num_threads(),
                    _ => 1,
                };
                // SAFETY: as above.
                unsafe { gemm_product(&g, s, px, pw, ($one, $zero), false, threads) };
                // SAFETY: as above; the bias holds n elements at its increment.
                unsafe {
                    let pb = bias.map(|(st, off, inc)| (ptr::<$t>(st).add(off) as *const $t, inc));
                    let pd = ptr::<$t>(dst.storage).add(dst.layout.offset());
                    transpose_into(s.get(), m, n, pb, pd, st(&dst.layout));
                }
            }};
        }
        match dst.dtype {
            DType::F32 => go!(f32, 1f32, 0f32),
            _ => go!(f64, 1f64, 0f64),
        }
    });
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
    if m * n >= 2 * super::strided::PAR_CHUNK {
        super::thread_pool::par_for(bands, |b| rows(b * TILE, ((b + 1) * TILE).min(m)));
    } else {
        (0..bands).for_each(|b| rows(b * TILE, ((b + 1) * TILE).min(m)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_layout_follows_the_left_operand_gemm_would_pack() {
        // (m, n, x row stride, w row stride): row-major x and w are strided
        // by k = 1024 along their rows.
        let k = 1024;
        // A skinny weight: direct (w's 16 rows packed, not x's 512).
        assert!(!column_major_product(512, 16, k, k));
        // A skinny batch: column-major (x's 64 rows, not w's 1024).
        assert!(column_major_product(64, 1024, k, k));
        assert!(column_major_product(256, 1024, k, k));
        // Half the rows: not enough to repay the scratch, direct.
        assert!(!column_major_product(512, 1024, k, k));
        // Square: a tie, written directly.
        assert!(!column_major_product(1024, 1024, k, k));
        // A transposed (column-major) x needs no packing: column-major.
        assert!(column_major_product(512, 16, 1, k));
        // A column-major w needs none either: direct.
        assert!(!column_major_product(64, 1024, k, 1));
        // Matrix-vector products: direct.
        assert!(!column_major_product(1, 1024, k, k));
        assert!(!column_major_product(1024, 1, k, k));
    }

    #[test]
    fn half_operands_keep_only_a_dense_layout() {
        // [3, 4]: row-major, column-major, then padded or sliced (gathered).
        assert_eq!(dense_strides((4, 1), 3, 4), Some((4, 1)));
        assert_eq!(dense_strides((1, 3), 3, 4), Some((1, 3)));
        assert_eq!(dense_strides((5, 1), 3, 4), None);
        assert_eq!(dense_strides((1, 4), 3, 4), None);
        assert_eq!(dense_strides((8, 2), 3, 4), None);
        // A row or a column ignores the stride of its length-1 side.
        assert_eq!(dense_strides((99, 1), 1, 4), Some((4, 1)));
        assert_eq!(dense_strides((1, 99), 3, 1), Some((1, 1)));
        assert_eq!(
            dense_strides((0, 1), 3, 4),
            None,
            "a broadcast row is gathered"
        );
    }

    #[test]
    fn blocks_tile_the_longer_side_of_a_product_exactly() {
        // Distinct strides everywhere (a row-major a, a column-major b and
        // dst, each padded), so an offset taken from the wrong operand or
        // the wrong axis shows.
        let g = |m: usize, n: usize, k: usize| Geom {
            m,
            n,
            k,
            a: (k as isize + 3, 1),
            b: (1, k as isize + 5),
            d: (1, m as isize + 7),
        };
        for (m, n, k, threads) in [(1024, 384, 128, 2), (70, 1000, 256, 2), (513, 500, 300, 4)] {
            let pg = g(m, n, k);
            let b = Blocks::of(&pg, threads, false).expect("a mid-sized product is cut");
            assert_eq!(b.rows, m >= n);
            assert_eq!(b.size % BLOCK_ALIGN, 0);
            assert!(b.count > 1 && b.count <= threads * BLOCKS_PER_THREAD);
            // The blocks follow one another and end at the product's edge.
            let mut at = 0;
            for i in 0..b.count {
                let (bg, o) = b.block(&pg, i);
                let len = if b.rows { bg.m } else { bg.n };
                let other = if b.rows { (bg.n, pg.n) } else { (bg.m, pg.m) };
                assert_eq!(other.0, other.1, "the other side stays whole");
                assert_eq!(bg.k, k);
                let at_ = at as isize;
                let want = if b.rows {
                    // Rows: dst and a move down `at` rows; b stays.
                    [at_, at_ * (k as isize + 3), 0]
                } else {
                    // Columns: dst and b move right `at` columns; a stays.
                    [at_ * (m as isize + 7), 0, at_ * (k as isize + 5)]
                };
                assert_eq!(o, want, "block {i} of {m}x{n}");
                assert!(len > 0);
                at += len;
            }
            assert_eq!(at, if b.rows { m } else { n });
        }
        // One thread, gemm's own size, or too narrow to cut: not cut.
        assert_eq!(Blocks::of(&g(1024, 384, 128), 1, false), None);
        assert_eq!(Blocks::of(&g(1024, 1024, 1024), 2, false), None);
        assert_eq!(Blocks::of(&g(16, 16, 4096), 2, false), None);
        // private-gemm-x86's products: cut at any size, one block a thread.
        let b = Blocks::of(&g(1024, 1024, 1024), 2, true).expect("cut at any size");
        assert_eq!((b.rows, b.size, b.count), (true, 512, 2));
        let b = Blocks::of(&g(100, 1000, 64), 4, true).expect("cut");
        assert_eq!((b.rows, b.size, b.count), (false, 256, 4));
        assert_eq!(Blocks::of(&g(1024, 1024, 1024), 1, true), None);
        assert_eq!(Blocks::of(&g(16, 16, 4096), 2, true), None);
    }

    #[test]
    fn small_products_of_a_batch_run_in_parallel() {
        let (small, large) = (128 * 128 * 64, 512 * 512 * 512);
        assert!(batches_in_parallel(64, small, true, 2));
        assert!(!batches_in_parallel(8, large, true, 2));
        // Fewer products than threads: gemm's split, unless it cannot split.
        assert!(!batches_in_parallel(3, small, true, 4));
        assert!(batches_in_parallel(3, small, false, 4));
        assert!(batches_in_parallel(8, large, false, 2));
        // One product, or one thread: nothing to spread.
        assert!(!batches_in_parallel(1, small, false, 2));
        assert!(!batches_in_parallel(64, small, true, 1));
    }

    #[test]
    fn gemm_splits_only_products_it_would_thread() {
        let g = |m, n, k| Geom {
            m,
            n,
            k,
            a: (k as isize, 1),
            b: (n as isize, 1),
            d: (n as isize, 1),
        };
        assert!(g(512, 512, 512).splits());
        assert!(!g(1, 4096, 4096).splits()); // gemv
        assert!(!g(4096, 4096, 2).splits()); // gevv
        assert!(!g(32, 32, 32).splits()); // below gemm's threshold
    }
}
