//! The softmax and log_softmax CPU kernels along one dimension, forward and
//! backward, with a fast vectorisable `exp` for f32.
//!
//! Forward, per row (one read of the row from memory, then sweeps over it
//! while it is in cache): the maximum, then `exp(x - max)` summed in 8 lanes
//! (softmax stores them and scales by `1 / sum`); log_softmax writes
//! `(x - max) - ln(sum)`. Backward, per row, from the forward's output `y`:
//! `Σ g y` (softmax) or `Σ g` (log_softmax) in 8 lanes, then
//! `dx = y (g - Σ g y)` or `dx = g - exp(y) Σ g` in the same pass. Rows run in
//! parallel chunks on the kernel pool (`pool::kernel_pool`); a softmax along a
//! dimension that is not the innermost does up to 256 neighbouring rows at
//! once, so its loops read adjacent memory.

use super::numeric_traits::{FastExp, Flt};
use super::ptr;
use super::reduce::inner;
use super::row_max::max_nan;
use super::simd;
use super::strided::{Plan, SendPtr, PAR_CHUNK};
use super::thread_pool::par_for;
use crate::backend::Operand;
use crate::with_float_dtype;

/// One row of softmax / log_softmax, computed in `T::C`: `n` elements of `x`
/// at stride `xs`, written to `y` at stride `ys`.
///
/// # Safety
/// Both rows are in bounds; nobody else touches `y` meanwhile.
#[inline(always)]
unsafe fn softmax_row<T: Flt, const F: bool>(
    x: *const T,
    xs: usize,
    y: *mut T,
    ys: usize,
    n: usize,
    log: bool,
) where
    T::C: FastExp,
{
    // Constant strides and flag in each copy, so the dense loops vectorise.
    // SAFETY: the caller's contract, passed on unchanged (only the strides are made constant).
    unsafe {
        match (xs == 1 && ys == 1, log) {
            (true, true) => softmax_row_impl::<T, F>(x, 1, y, 1, n, true),
            (true, false) => softmax_row_impl::<T, F>(x, 1, y, 1, n, false),
            (false, true) => softmax_row_impl::<T, F>(x, xs, y, ys, n, true),
            (false, false) => softmax_row_impl::<T, F>(x, xs, y, ys, n, false),
        }
    }
}

/// [`softmax_row`] with its strides and flag fixed by the caller.
///
/// # Safety
/// As for [`softmax_row`].
#[inline(always)]
unsafe fn softmax_row_impl<T: Flt, const F: bool>(
    x: *const T,
    xs: usize,
    y: *mut T,
    ys: usize,
    n: usize,
    log: bool,
) where
    T::C: FastExp,
{
    use num_traits::{Float, Zero};
    const CHUNK: usize = 256;
    // SAFETY: called with `k < n` only: element `k * xs` of the row is in bounds (this fn's
    // contract).
    let rd = |k: usize| unsafe { x.add(k * xs).read() }.up();
    let zero = <T::C as Zero>::zero();
    // Max, in 16 independent lanes: a plain maximum and a NaN flag per lane
    // (which vectorise, unlike a NaN-sticky maximum). `row_max`'s loop,
    // kept inline here: through that module softmax measured slower (its
    // doc has the figures).
    const L: usize = 16;
    let mut ml = [<T::C as Float>::neg_infinity(); L];
    let mut nan = [false; L];
    let body = n / L * L;
    for k in (0..body).step_by(L) {
        for (j, (m, f)) in ml.iter_mut().zip(nan.iter_mut()).enumerate() {
            let v = rd(k + j);
            *m = if v > *m { v } else { *m };
            *f |= v.is_nan();
        }
    }
    let mut m = ml
        .iter()
        .fold(<T::C as Float>::neg_infinity(), |a, &b| max_nan(a, b));
    for k in body..n {
        m = max_nan(m, rd(k));
    }
    if nan.iter().any(|&f| f) {
        m = <T::C as Float>::nan();
    }
    // exp(x - m) a chunk at a time into a buffer (a plain map: it vectorises),
    // summed in 8 lanes; softmax also stores them.
    let mut buf = [zero; CHUNK];
    let mut sl = [zero; 8];
    let mut c0 = 0;
    while c0 < n {
        let len = CHUNK.min(n - c0);
        for (i, b) in buf[..len].iter_mut().enumerate() {
            *b = (rd(c0 + i) - m).fexp_neg::<F>();
        }
        for b in &mut buf[len..len.next_multiple_of(8)] {
            *b = zero;
        }
        for c in buf[..len.next_multiple_of(8)].chunks_exact(8) {
            for (l, &v) in sl.iter_mut().zip(c) {
                *l = *l + v;
            }
        }
        if !log {
            for (i, &b) in buf[..len].iter().enumerate() {
                // SAFETY: `c0 + i < n`: in the output row, which only this call writes (the
                // contract).
                unsafe { y.add((c0 + i) * ys).write(T::down(b)) };
            }
        }
        c0 += len;
    }
    let sum = ((sl[0] + sl[1]) + (sl[2] + sl[3])) + ((sl[4] + sl[5]) + (sl[6] + sl[7]));
    if log {
        // (x - m) - ln(sum), not x - (m + ln(sum)): with |x| large, m + ln(sum)
        // rounds away ln(sum) (v = 1e8 gave 0, not -ln 3).
        let ls = sum.ln();
        for k in 0..n {
            // SAFETY: `k < n`: in the output row, which only this call writes.
            unsafe { y.add(k * ys).write(T::down((rd(k) - m) - ls)) };
        }
    } else {
        let inv = sum.recip();
        if std::mem::size_of::<T>() == std::mem::size_of::<T::C>() {
            // f32 / f64: the stored exponentials are exact; scale them.
            for k in 0..n {
                // SAFETY: `k < n`: in the output row.
                let p = unsafe { y.add(k * ys) };
                // SAFETY: `p` is in the output row, written just above (initialised), by this
                // call alone.
                unsafe { p.write(T::down(p.read().up() * inv)) };
            }
        } else {
            // f16 / bf16: recompute rather than round twice.
            for k in 0..n {
                // SAFETY: `k < n`: in the output row, which only this call writes.
                unsafe {
                    y.add(k * ys)
                        .write(T::down((rd(k) - m).fexp_neg::<F>() * inv))
                };
            }
        }
    }
}

/// Rows folded together when they lie next to each other in memory.
const ROW_LANES: usize = 256;

/// `b <= ROW_LANES` rows at once, row `j` starting at `x + j * xl` (`y + j * yl`),
/// element `k` at `k * xs` (`k * ys`). For softmax along a dimension that is
/// not the innermost: the loops over `j` read adjacent memory.
///
/// # Safety
/// As for [`softmax_row`].
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn softmax_rows<T: Flt, const F: bool>(
    x: *const T,
    xs: usize,
    xl: usize,
    y: *mut T,
    ys: usize,
    yl: usize,
    n: usize,
    b: usize,
    log: bool,
) where
    T::C: FastExp,
{
    // Constant strides and flag in each copy, so the loops over `j` vectorise.
    // SAFETY: the caller's contract, passed on unchanged (only the strides are made constant).
    unsafe {
        match (xl == 1 && yl == 1, log) {
            (true, true) => softmax_rows_impl::<T, F>(x, xs, 1, y, ys, 1, n, b, true),
            (true, false) => softmax_rows_impl::<T, F>(x, xs, 1, y, ys, 1, n, b, false),
            (false, true) => softmax_rows_impl::<T, F>(x, xs, xl, y, ys, yl, n, b, true),
            (false, false) => softmax_rows_impl::<T, F>(x, xs, xl, y, ys, yl, n, b, false),
        }
    }
}

/// [`softmax_rows`] with its row strides and flag fixed by the caller.
///
/// # Safety
/// As for [`softmax_row`], for each of the `b` rows.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn softmax_rows_impl<T: Flt, const F: bool>(
    x: *const T,
    xs: usize,
    xl: usize,
    y: *mut T,
    ys: usize,
    yl: usize,
    n: usize,
    b: usize,
    log: bool,
) where
    T::C: FastExp,
{
    use num_traits::{Float, Zero};
    // SAFETY: called with `k < n` and `j < b` only: in row `j` of the block, in bounds (the
    // contract).
    let rd = |k: usize, j: usize| unsafe { x.add(k * xs + j * xl).read() }.up();
    let mut m = [<T::C as Float>::neg_infinity(); ROW_LANES];
    let mut sum = [<T::C as Zero>::zero(); ROW_LANES];
    let (m, sum) = (&mut m[..b], &mut sum[..b]);
    for k in 0..n {
        for (j, mj) in m.iter_mut().enumerate() {
            *mj = max_nan(*mj, rd(k, j));
        }
    }
    for k in 0..n {
        for (j, sj) in sum.iter_mut().enumerate() {
            let e = (rd(k, j) - m[j]).fexp_neg::<F>();
            *sj = *sj + e;
            if !log {
                // SAFETY: `k < n`, `j < b`: in the block's output rows, which only this call
                // writes.
                unsafe { y.add(k * ys + j * yl).write(T::down(e)) };
            }
        }
    }
    if log {
        // (x - m) - ln(sum), as in `softmax_row_impl`.
        for s in sum.iter_mut() {
            *s = s.ln();
        }
        for k in 0..n {
            for (j, (mj, ls)) in m.iter().zip(sum.iter()).enumerate() {
                // SAFETY: `k < n`, `j < b`: in the block's output rows, which only this call
                // writes.
                unsafe {
                    y.add(k * ys + j * yl)
                        .write(T::down((rd(k, j) - *mj) - *ls))
                };
            }
        }
    } else {
        for s in sum.iter_mut() {
            *s = s.recip();
        }
        let same = std::mem::size_of::<T>() == std::mem::size_of::<T::C>();
        for k in 0..n {
            for (j, inv) in sum.iter().enumerate() {
                // SAFETY: `k < n`, `j < b`: in the block's output rows.
                let p = unsafe { y.add(k * ys + j * yl) };
                let e = if same {
                    // SAFETY: `p` was written above in this call (initialised) and is in
                    // bounds.
                    unsafe { p.read() }.up()
                } else {
                    (rd(k, j) - m[j]).fexp_neg::<F>()
                };
                // SAFETY: `p` is in the block's output rows, written by this call alone.
                unsafe { p.write(T::down(e * *inv)) };
            }
        }
    }
}

fn softmax_typed<T: Flt>(src: &Operand, dim: usize, dst: &Operand, log: bool)
where
    T::C: FastExp,
{
    let n = src.layout.shape()[dim];
    if n == 0 || src.layout.numel() == 0 {
        return;
    }
    let (xs, ys) = (src.layout.strides()[dim], dst.layout.strides()[dim]);
    let (Ok(ol_src), Ok(ol_dst)) = (
        src.layout.select(dim as isize, 0),
        dst.layout.select(dim as isize, 0),
    ) else {
        unreachable!("dim {dim} has size {n} > 0")
    };
    // Rows whose starts are closer together than their elements are done in blocks.
    let (_, _, row_stride) = inner(&ol_src);
    let blocks = n > 1 && row_stride < xs;
    let plan = Plan::new([&ol_dst, &ol_src]);
    let rows = plan.numel();
    let (px, py) = (
        SendPtr(ptr::<T>(src.storage)),
        SendPtr(ptr::<T>(dst.storage)),
    );
    let body = |start: usize, end: usize| {
        plan.runs(start, end, &mut |o, len, s| {
            // Compiled for this CPU's SIMD level.
            simd::run(ForwardRun::<T> {
                px,
                py,
                o,
                s,
                len,
                xs,
                ys,
                n,
                blocks,
                log,
            })
        })
    };
    par_rows(rows, n, blocks, body);
}

/// Softmax or log_softmax along `dim` (float dtypes; the op layer checks).
pub(crate) fn softmax(src: &Operand, dim: usize, dst: &Operand, log: bool) {
    debug_assert_eq!(src.dtype, dst.dtype);
    with_float_dtype!(src.dtype, T => softmax_typed::<T>(src, dim, dst, log), _ => {
        unreachable!("softmax on {}: the op layer refuses it", src.dtype)
    })
}

/// One row of the softmax / log_softmax backward, computed in `T::C`, from
/// the forward's output `y` and the incoming gradient `g`:
/// softmax `dx = y * (g - Σ g y)`, log_softmax `dx = g - exp(y) Σ g`.
/// `n` elements at strides `gs`, `ys`, `ds`.
///
/// # Safety
/// The three rows are in bounds; nobody else touches `dx`'s row meanwhile.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn backward_row<T: Flt, const F: bool>(
    g: *const T,
    gs: usize,
    y: *const T,
    ys: usize,
    dx: *mut T,
    ds: usize,
    n: usize,
    log: bool,
) where
    T::C: FastExp,
{
    // Constant strides and flag in each copy, so the dense loops vectorise.
    // SAFETY: the caller's contract, passed on unchanged.
    unsafe {
        match (gs == 1 && ys == 1 && ds == 1, log) {
            (true, true) => backward_row_impl::<T, F>(g, 1, y, 1, dx, 1, n, true),
            (true, false) => backward_row_impl::<T, F>(g, 1, y, 1, dx, 1, n, false),
            (false, true) => backward_row_impl::<T, F>(g, gs, y, ys, dx, ds, n, true),
            (false, false) => backward_row_impl::<T, F>(g, gs, y, ys, dx, ds, n, false),
        }
    }
}

/// [`backward_row`] with its strides and flag fixed by the caller.
///
/// # Safety
/// As for [`backward_row`].
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn backward_row_impl<T: Flt, const F: bool>(
    g: *const T,
    gs: usize,
    y: *const T,
    ys: usize,
    dx: *mut T,
    ds: usize,
    n: usize,
    log: bool,
) where
    T::C: FastExp,
{
    use num_traits::Zero;
    // SAFETY: called with `k < n` only: in bounds (the contract).
    let rg = |k: usize| unsafe { g.add(k * gs).read() }.up();
    // SAFETY: as above.
    let ry = |k: usize| unsafe { y.add(k * ys).read() }.up();
    let zero = <T::C as Zero>::zero();
    let mut sl = [zero; 8];
    let body = n / 8 * 8;
    for k in (0..body).step_by(8) {
        for (j, s) in sl.iter_mut().enumerate() {
            *s = *s
                + if log {
                    rg(k + j)
                } else {
                    rg(k + j) * ry(k + j)
                };
        }
    }
    let mut s = ((sl[0] + sl[1]) + (sl[2] + sl[3])) + ((sl[4] + sl[5]) + (sl[6] + sl[7]));
    for k in body..n {
        s = s + if log { rg(k) } else { rg(k) * ry(k) };
    }
    for k in 0..n {
        let v = if log {
            rg(k) - ry(k).fexp::<F>() * s
        } else {
            ry(k) * (rg(k) - s)
        };
        // SAFETY: `k < n`: in the output row, which only this call writes.
        unsafe { dx.add(k * ds).write(T::down(v)) };
    }
}

/// `b <= ROW_LANES` rows of the backward at once, row `j` of each operand
/// at `j * gl` (`yl`, `dl`), element `k` at `k * gs` (`ys`, `ds`): for a
/// softmax along a dimension that is not the innermost.
///
/// # Safety
/// As for [`backward_row`], for each of the `b` rows.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn backward_rows<T: Flt, const F: bool>(
    g: (*const T, usize, usize),
    y: (*const T, usize, usize),
    dx: (*mut T, usize, usize),
    n: usize,
    b: usize,
    log: bool,
) where
    T::C: FastExp,
{
    use num_traits::Zero;
    let ((pg, gs, gl), (py, ys, yl), (pd, ds, dl)) = (g, y, dx);
    // SAFETY: called with `k < n`, `j < b` only: in the block's rows (the contract).
    let rg = |k: usize, j: usize| unsafe { pg.add(k * gs + j * gl).read() }.up();
    // SAFETY: as above.
    let ry = |k: usize, j: usize| unsafe { py.add(k * ys + j * yl).read() }.up();
    let mut sum = [<T::C as Zero>::zero(); ROW_LANES];
    let sum = &mut sum[..b];
    for k in 0..n {
        for (j, s) in sum.iter_mut().enumerate() {
            *s = *s + if log { rg(k, j) } else { rg(k, j) * ry(k, j) };
        }
    }
    for k in 0..n {
        for (j, s) in sum.iter().enumerate() {
            let v = if log {
                rg(k, j) - ry(k, j).fexp::<F>() * *s
            } else {
                ry(k, j) * (rg(k, j) - *s)
            };
            // SAFETY: `k < n`, `j < b`: in the block's output rows, which only this call writes.
            unsafe { pd.add(k * ds + j * dl).write(T::down(v)) };
        }
    }
}

fn backward_typed<T: Flt>(g: &Operand, y: &Operand, dim: usize, dx: &Operand, log: bool)
where
    T::C: FastExp,
{
    let n = y.layout.shape()[dim];
    if n == 0 || y.layout.numel() == 0 {
        return;
    }
    let (gs, ys, ds) = (
        g.layout.strides()[dim],
        y.layout.strides()[dim],
        dx.layout.strides()[dim],
    );
    let (Ok(ol_g), Ok(ol_y), Ok(ol_d)) = (
        g.layout.select(dim as isize, 0),
        y.layout.select(dim as isize, 0),
        dx.layout.select(dim as isize, 0),
    ) else {
        unreachable!("dim {dim} has size {n} > 0")
    };
    let (_, _, row_stride) = inner(&ol_y);
    let blocks = n > 1 && row_stride < ys;
    let plan = Plan::new([&ol_d, &ol_y, &ol_g]);
    let rows = plan.numel();
    let (pg, py, pd) = (
        SendPtr(ptr::<T>(g.storage)),
        SendPtr(ptr::<T>(y.storage)),
        SendPtr(ptr::<T>(dx.storage)),
    );
    let body = |start: usize, end: usize| {
        plan.runs(start, end, &mut |o, len, s| {
            // Compiled for this CPU's SIMD level.
            simd::run(BackwardRun::<T> {
                pg,
                py,
                pd,
                o,
                s,
                len,
                gs,
                ys,
                ds,
                n,
                blocks,
                log,
            })
        })
    };
    par_rows(rows, n, blocks, body);
}

/// One run of the plan (`len` rows at offsets `o`, row strides `s`) of the
/// softmax forward: a unit for [`simd::run`], whose `#[inline(always)]`
/// `call` is compiled for the CPU's SIMD level (a closure this large would
/// stay a baseline function). Built only by `softmax_typed`, from a plan
/// inside the operands' layouts, with the caller's locks held.
struct ForwardRun<T> {
    px: SendPtr<T>,
    py: SendPtr<T>,
    o: [usize; 2],
    s: [usize; 2],
    len: usize,
    xs: usize,
    ys: usize,
    n: usize,
    blocks: bool,
    log: bool,
}

impl<T: Flt> simd::Kernel for ForwardRun<T>
where
    T::C: FastExp,
{
    type Output = ();
    const WIDE: bool = <T as simd::Hot>::HOT;

    #[inline(always)]
    fn call<const F: bool>(self) {
        let ForwardRun {
            px,
            py,
            o,
            s,
            len,
            xs,
            ys,
            n,
            blocks,
            log,
        } = self;
        if blocks && s[1] < xs && len > 1 {
            let mut r = 0;
            while r < len {
                let b = ROW_LANES.min(len - r);
                // SAFETY: the plan's offsets `o` and strides `s` stay inside the layouts,
                // which fit their storages; the `b` rows of each block are disjoint from
                // other blocks' rows; the caller holds the locks.
                unsafe {
                    softmax_rows::<T, F>(
                        px.get().add(o[1] + r * s[1]),
                        xs,
                        s[1],
                        py.get().add(o[0] + r * s[0]),
                        ys,
                        s[0],
                        n,
                        b,
                        log,
                    )
                }
                r += b;
            }
        } else {
            for r in 0..len {
                // SAFETY: as above, one row at a time.
                unsafe {
                    softmax_row::<T, F>(
                        px.get().add(o[1] + r * s[1]),
                        xs,
                        py.get().add(o[0] + r * s[0]),
                        ys,
                        n,
                        log,
                    )
                }
            }
        }
    }
}

/// One run of the plan of the softmax backward, as [`ForwardRun`] (built
/// only by `backward_typed`).
struct BackwardRun<T> {
    pg: SendPtr<T>,
    py: SendPtr<T>,
    pd: SendPtr<T>,
    o: [usize; 3],
    s: [usize; 3],
    len: usize,
    gs: usize,
    ys: usize,
    ds: usize,
    n: usize,
    blocks: bool,
    log: bool,
}

impl<T: Flt> simd::Kernel for BackwardRun<T>
where
    T::C: FastExp,
{
    type Output = ();
    const WIDE: bool = <T as simd::Hot>::HOT;

    #[inline(always)]
    fn call<const F: bool>(self) {
        let BackwardRun {
            pg,
            py,
            pd,
            o,
            s,
            len,
            gs,
            ys,
            ds,
            n,
            blocks,
            log,
        } = self;
        if blocks && s[1] < ys && len > 1 {
            let mut r = 0;
            while r < len {
                let b = ROW_LANES.min(len - r);
                // SAFETY: the plan's offsets and strides stay inside the layouts,
                // which fit their storages; the blocks' output rows are disjoint;
                // the caller holds the locks.
                unsafe {
                    backward_rows::<T, F>(
                        (pg.get().add(o[2] + r * s[2]), gs, s[2]),
                        (py.get().add(o[1] + r * s[1]), ys, s[1]),
                        (pd.get().add(o[0] + r * s[0]), ds, s[0]),
                        n,
                        b,
                        log,
                    )
                }
                r += b;
            }
        } else {
            for r in 0..len {
                // SAFETY: as above, one row at a time.
                unsafe {
                    backward_row::<T, F>(
                        pg.get().add(o[2] + r * s[2]),
                        gs,
                        py.get().add(o[1] + r * s[1]),
                        ys,
                        pd.get().add(o[0] + r * s[0]),
                        ds,
                        n,
                        log,
                    )
                }
            }
        }
    }
}

/// Runs `body(start, end)` over `rows` rows of `n` elements, in parallel
/// chunks on the kernel pool when there is enough work.
fn par_rows(rows: usize, n: usize, blocks: bool, body: impl Fn(usize, usize) + Sync) {
    let per = (PAR_CHUNK / n).max(if blocks { ROW_LANES } else { 1 });
    let chunks = rows.div_ceil(per);
    if chunks < 2 || rows * n < 2 * PAR_CHUNK {
        body(0, rows)
    } else {
        par_for(chunks, |c| body(c * per, ((c + 1) * per).min(rows)))
    }
}

/// The backward of softmax (or log_softmax when `log`) along `dim`: `dx`
/// from the forward's output `y` and the gradient `g` (one float dtype and
/// shape; any layouts, `g` may be broadcast). The caller holds the locks.
pub(crate) fn softmax_backward(g: &Operand, y: &Operand, dim: usize, dx: &Operand, log: bool) {
    debug_assert!(g.dtype == y.dtype && y.dtype == dx.dtype);
    with_float_dtype!(y.dtype, T => backward_typed::<T>(g, y, dim, dx, log), _ => {
        unreachable!("softmax backward on {}: the op layer refuses it", y.dtype)
    })
}
