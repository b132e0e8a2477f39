//! LayerNorm and RMSNorm on the CPU: one fused kernel forward and one
//! backward, over a dense `[rows, cols]` view (the normalised features are
//! the `cols`).
//!
//! Forward, per row, while the row is in cache: the mean (LayerNorm only),
//! then the variance about it (or the mean square, RMSNorm) in a second sweep
//! over the cached row (and a third for a row whose spread is at most its
//! mean: `row_stats`), then the normalised, scaled and shifted output. The statistics are accumulated in `T::C` (f32
//! for f32, f16 and bf16; f64 for f64) in 32 independent lanes, so the loops
//! vectorise; each row's mean and `rstd = 1 / sqrt(var + eps)` are written for
//! the backward pass, as PyTorch's `native_layer_norm` saves them.
//!
//! Backward, per row: `xhat = (x - mean) * rstd` (`x * rstd` for RMSNorm),
//! `g = dy * w`, then
//! `dx = rstd * (g - mean(g) - xhat * mean(g * xhat))` (no `mean(g)` term for
//! RMSNorm), with `dw = Σ_rows dy * xhat` and `db = Σ_rows dy` accumulated in
//! the same sweep. The rows are split into a fixed number of blocks (it
//! depends on the shape only, so the sums are the same bits whatever the
//! thread count); each block sums its rows' `dw`/`db` into its own partials
//! (`T::C`, on the Rust heap: at most a sixteenth of the input's elements), added in
//! block order at the end.
//!
//! For f32 at AVX2 and AVX-512, the row sums of both passes run as
//! intrinsics (`norm_sums`), with the same lanes, fold and bits.

use super::lanes::fold_lanes_split;
use super::norm_sums::{self, LaneSum, RowSums, Term};
use super::numeric_traits::Flt;
use super::ptr;
use super::simd;
use super::strided::{SendPtr, PAR_CHUNK};
use super::thread_pool::par_for;
use crate::backend::nn::{NormGrads, NormKind};
use crate::backend::Operand;
use crate::with_float_dtype;
use num_traits::{Float, One, Zero};

/// Independent accumulators per sum (vector lanes): four AVX2 vectors of
/// f32, eight of f64. With the fold fixed (`fold_lanes_split`), 16 lanes
/// measured about the same (Note [lane folds] in `bench/results/ops-why.md`):
/// the lane count is not what made the difference, the fold was.
const LANES: usize = 32;

/// Lanes of each of the backward pass's two sums (sixteen: two sums of 32
/// f64 lanes would take all sixteen AVX2 registers as accumulators).
const BACKWARD_LANES: usize = 16;

/// `Σ f(x_i)` over a row in `LANES` lanes (then folded pairwise in a
/// fixed order), in `T::C`.
#[inline(always)]
pub(super) fn lane_sum<T: Flt>(x: &[T], f: impl Fn(T::C) -> T::C) -> T::C {
    let zero = <T::C as Zero>::zero();
    let mut acc = [zero; LANES];
    let mut it = x.chunks_exact(LANES);
    for c in &mut it {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a = *a + f(v.up());
        }
    }
    let mut tail = zero;
    for &v in it.remainder() {
        tail = tail + f(v.up());
    }
    fold_lanes_split(&mut acc) + tail
}

/// `(Σ dy w, Σ dy w xhat)` over a row, `xhat = (x - mean) * rstd`, in
/// `BACKWARD_LANES` lanes each (fixed-size chunks, so the loop vectorises).
#[inline(always)]
pub(super) fn backward_sums<T: Flt>(
    dy: &[T],
    x: &[T],
    w: &[T],
    mean: T::C,
    rstd: T::C,
) -> (T::C, T::C) {
    let zero = <T::C as Zero>::zero();
    let (mut s, mut t) = ([zero; BACKWARD_LANES], [zero; BACKWARD_LANES]);
    let (mut ig, mut ix, mut iw) = (
        dy.chunks_exact(BACKWARD_LANES),
        x.chunks_exact(BACKWARD_LANES),
        w.chunks_exact(BACKWARD_LANES),
    );
    for ((cg, cx), cw) in (&mut ig).zip(&mut ix).zip(&mut iw) {
        // Chunks of `BACKWARD_LANES` (never taken `else`): fixed-size arrays.
        let (Ok(cg), Ok(cx), Ok(cw)) = (
            <&[T; BACKWARD_LANES]>::try_from(cg),
            <&[T; BACKWARD_LANES]>::try_from(cx),
            <&[T; BACKWARD_LANES]>::try_from(cw),
        ) else {
            continue;
        };
        for j in 0..BACKWARD_LANES {
            let gw = cg[j].up() * cw[j].up();
            s[j] = s[j] + gw;
            t[j] = t[j] + gw * ((cx[j].up() - mean) * rstd);
        }
    }
    let (mut su, mut sv) = (zero, zero);
    for ((&g, &v), &wc) in ig
        .remainder()
        .iter()
        .zip(ix.remainder())
        .zip(iw.remainder())
    {
        let gw = g.up() * wc.up();
        su = su + gw;
        sv = sv + gw * ((v.up() - mean) * rstd);
    }
    (fold_lanes_split(&mut s) + su, fold_lanes_split(&mut t) + sv)
}

/// A compute-type value as the f32 `norm_sums` takes (exact: the fast
/// kernels are used for f32 rows only, whose compute type is f32).
#[inline(always)]
fn to_f32<C: Float>(v: C) -> f32 {
    v.to_f32().unwrap_or(f32::NAN)
}

/// [`to_f32`]'s way back.
#[inline(always)]
fn from_f32<C: Float>(v: f32) -> C {
    C::from(v).unwrap_or_else(C::nan)
}

/// [`backward_sums`] through `fast` (an f32 kernel of `norm_sums`, the
/// same bits) when given.
#[inline(always)]
fn row_sums<T: Flt>(
    fast: Option<RowSums>,
    dy: &[T],
    x: &[T],
    w: &[T],
    mean: T::C,
    rstd: T::C,
) -> (T::C, T::C) {
    let Some(f) = fast else {
        return backward_sums(dy, x, w, mean, rstd);
    };
    let n = dy.len().min(x.len()).min(w.len());
    let (to, back) = (to_f32::<T::C>, from_f32::<T::C>);
    // SAFETY: `backward_typed` sets `fast` only when `T` is f32 (so the
    // slices are f32 rows, `n` elements each) and picks it for the level
    // the process runs at (`norm_sums::for_level(simd::level())`), whose
    // instructions this CPU has.
    let (a, b) = unsafe {
        f(
            dy.as_ptr().cast(),
            x.as_ptr().cast(),
            w.as_ptr().cast(),
            n,
            to(mean),
            to(rstd),
        )
    };
    (back(a), back(b))
}

/// A row's statistics: `(mean, rstd)` (mean 0 for RMSNorm).
///
/// LayerNorm's mean `m` carries the rounding of its sum, which the output
/// meets multiplied by `rstd`: harmless while the row's spread exceeds
/// `|m|` (the error is then below the output's own rounding), but a
/// constant row would get `rstd = 1 / sqrt(eps)` times that error (6e-4 for
/// 16.1 in f32). Such rows (variance at most `m^2`) take a third sweep, the
/// corrected two-pass moments: the residual `r = Σ (x - m)` refines the
/// mean to `m + r / n` and the variance to `(Σ (x - m)^2 - r^2 / n) / n`, so
/// a constant row gets its own value and a variance of 0, as PyTorch's
/// Welford statistics do.
#[inline(always)]
fn row_stats<T: Flt>(x: &[T], eps: T::C, rms: bool, fast: Option<LaneSum>) -> (T::C, T::C) {
    let n = <T::C as num_traits::NumCast>::from(x.len()).unwrap_or_else(T::C::one);
    let zero = <T::C as Zero>::zero();
    let sum = |t: Term, c: T::C| match fast {
        Some(f) => {
            let c = to_f32(c);
            // SAFETY: `forward_typed` sets `fast` only when `T` is f32 (so
            // `x` is an f32 row) and picks it for the level the process
            // runs at, whose instructions this CPU has.
            let s = unsafe { f(x.as_ptr().cast(), x.len(), t, c) };
            from_f32(s)
        }
        None => match t {
            Term::Value => lane_sum(x, |v| v),
            Term::CenteredSquare => lane_sum(x, |v| (v - c) * (v - c)),
            Term::Centered => lane_sum(x, |v| v - c),
            Term::Square => lane_sum(x, |v| v * v),
        },
    };
    if rms {
        return (zero, (sum(Term::Square, zero) / n + eps).sqrt().recip());
    }
    let m = sum(Term::Value, zero) / n;
    let sq = sum(Term::CenteredSquare, m);
    if sq / n > m * m {
        return (m, (sq / n + eps).sqrt().recip());
    }
    let r = sum(Term::Centered, m);
    let var = ((sq - r * r / n) / n).max(zero);
    (m + r / n, (var + eps).sqrt().recip())
}

/// The dense row `r` of `len` elements at `base`.
///
/// # Safety
/// `base + r * len .. + len` is inside one live allocation of initialised
/// `T`s that nobody writes while the slice lives.
#[inline(always)]
unsafe fn row<'a, T>(base: SendPtr<T>, r: usize, len: usize) -> &'a [T] {
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(base.get().add(r * len), len) }
}

/// The dense row `r` of `len` elements at `base`, to be written.
///
/// # Safety
/// As for [`row`], and nothing else reads or writes those elements while the
/// slice lives.
#[inline(always)]
#[allow(clippy::mut_from_ref)]
unsafe fn row_mut<'a, T>(base: SendPtr<T>, r: usize, len: usize) -> &'a mut [T] {
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts_mut(base.get().add(r * len), len) }
}

/// The typed base pointer of a dense operand (its offset applied).
fn base<T>(o: &Operand) -> SendPtr<T> {
    debug_assert!(o.layout.is_contiguous());
    // SAFETY: the layout's offset lies inside its storage (a layout only
    // describes elements of its storage).
    SendPtr(unsafe { ptr::<T>(o.storage).add(o.layout.offset()) })
}

/// Runs `f(start, end)` over `0..items` in `chunks` contiguous blocks, in
/// parallel on the kernel pool when the work (`items * cost` elements) is
/// large enough.
fn blocks(items: usize, chunks: usize, cost: usize, f: impl Fn(usize, usize) + Sync) {
    let chunks = chunks.clamp(1, items.max(1));
    let per = items.div_ceil(chunks);
    let run = |c: usize| f(c * per, ((c + 1) * per).min(items));
    if items * cost < 2 * PAR_CHUNK || chunks < 2 {
        (0..chunks).for_each(run)
    } else {
        par_for(chunks, run)
    }
}

fn forward_typed<T: Flt>(
    x: &Operand,
    w: Option<&Operand>,
    b: Option<&Operand>,
    y: &Operand,
    stats: Option<(&Operand, Option<&Operand>)>,
    eps: f64,
    kind: NormKind,
) {
    let cols = *x.layout.shape().last().unwrap_or(&1);
    let rows = x.layout.numel().checked_div(cols).unwrap_or(0);
    if rows == 0 {
        return;
    }
    let rms = kind == NormKind::Rms;
    let eps = <T::C as num_traits::NumCast>::from(eps).unwrap_or_else(T::C::zero);
    let (px, py) = (base::<T>(x), base::<T>(y));
    let (pw, pb) = (w.map(base::<T>), b.map(base::<T>));
    let (pr, pm) = match stats {
        Some((r, m)) => (Some(base::<T::C>(r)), m.map(base::<T::C>)),
        None => (None, None),
    };
    let ones = pw.is_none().then(|| vec![T::down(T::C::one()); cols]);
    let stats_sum = if T::DTYPE == crate::dtype::DType::F32 {
        norm_sums::lane_sum_for_level(simd::level())
    } else {
        None
    };
    let per_chunk = (PAR_CHUNK / cols).max(1);
    blocks(rows, rows.div_ceil(per_chunk), cols, |start, end| {
        // SAFETY: `w` and `b` are dense `[cols]` (the op layer checks), read-locked.
        let wr = pw.map_or_else(
            || ones.as_deref().unwrap_or(&[]),
            |p| unsafe { row(p, 0, cols) },
        );
        // SAFETY: as above.
        let br = pb.map(|p| unsafe { row(p, 0, cols) });
        // The rows' loops compiled for this CPU's SIMD level, not capped at
        // AVX2: with `norm_sums`' kernels the AVX-512 build is the faster
        // (Note [AVX2 cap] in bench/results/ops-why.md).
        simd::run(ForwardRows::<T> {
            x: px,
            y: py,
            w: wr,
            b: br,
            rstd: pr,
            mean: pm,
            rows: start..end,
            cols,
            eps,
            rms,
            stats_sum,
        });
    });
}

/// The forward pass over a block of rows: one unit for [`simd::run`],
/// whose `#[inline(always)]` `call` is compiled for the CPU's SIMD level.
/// Built only by `forward_typed`, from dense operands whose locks the
/// caller holds, each block with its own rows.
struct ForwardRows<'a, T: Flt> {
    x: SendPtr<T>,
    y: SendPtr<T>,
    w: &'a [T],
    b: Option<&'a [T]>,
    rstd: Option<SendPtr<T::C>>,
    mean: Option<SendPtr<T::C>>,
    rows: std::ops::Range<usize>,
    cols: usize,
    eps: T::C,
    rms: bool,
    /// The statistics' f32 kernel, for f32 rows (see [`row_stats`]).
    stats_sum: Option<LaneSum>,
}

impl<T: Flt> simd::Kernel for ForwardRows<'_, T> {
    type Output = ();
    const WIDE: bool = <T as simd::Hot>::HOT;

    #[inline(always)]
    fn call<const F: bool>(self) {
        let ForwardRows {
            x,
            y,
            w,
            b,
            rstd: pr,
            mean: pm,
            rows,
            cols,
            eps,
            rms,
            stats_sum,
        } = self;
        for r in rows {
            // SAFETY: `x` is dense `[rows, cols]` and read-locked; `y` is dense
            // `[rows, cols]`, write-locked, and row `r` belongs to this block
            // only (the struct's contract).
            let (xr, yr) = unsafe { (row(x, r, cols), row_mut(y, r, cols)) };
            let (mean, rstd) = row_stats(xr, eps, rms, stats_sum);
            match b {
                Some(b) => {
                    for (((o, &v), &g), &h) in yr.iter_mut().zip(xr).zip(w).zip(b) {
                        *o = T::down((v.up() - mean) * rstd * g.up() + h.up());
                    }
                }
                None => {
                    for ((o, &v), &g) in yr.iter_mut().zip(xr).zip(w) {
                        *o = T::down((v.up() - mean) * rstd * g.up());
                    }
                }
            }
            // SAFETY: the statistics are dense `[rows]` of `T::C`, write-locked;
            // element `r` belongs to this block only.
            unsafe {
                if let Some(p) = pr {
                    p.get().add(r).write(rstd);
                }
                if let Some(p) = pm {
                    p.get().add(r).write(mean);
                }
            }
        }
    }
}

/// Row blocks of the backward pass: a function of the shape only (so the
/// parameter gradients do not depend on the thread count), each of at least
/// 32 rows, at most 16 blocks (their partials are added at the end).
fn backward_blocks(rows: usize) -> usize {
    (rows / 32).clamp(1, 16)
}

fn backward_typed<T: Flt>(a: &NormGrads) {
    let cols = *a.x.layout.shape().last().unwrap_or(&1);
    let rows = a.x.layout.numel().checked_div(cols).unwrap_or(0);
    let zero = <T::C as Zero>::zero();
    let (dw_on, db_on) = (a.dw.is_some(), a.db.is_some());
    let params = dw_on || db_on;
    let nb = backward_blocks(rows);
    let sums = if T::DTYPE == crate::dtype::DType::F32 {
        norm_sums::for_level(simd::level())
    } else {
        None
    };
    // Per block: dw partials then db partials.
    let mut partials = if params && rows > 0 {
        vec![zero; nb * 2 * cols]
    } else {
        Vec::new()
    };
    if rows > 0 {
        let (pdy, px) = (base::<T>(a.dy), base::<T>(a.x));
        let pw = a.w.map(base::<T>);
        let (pm, pr) = (a.mean.map(base::<T::C>), base::<T::C>(a.rstd));
        let pdx = a.dx.map(base::<T>);
        let ones = pw.is_none().then(|| vec![T::down(T::C::one()); cols]);
        let pp = SendPtr(partials.as_mut_ptr());
        let per = rows.div_ceil(nb);
        blocks(rows, nb, cols, |start, end| {
            let blk = start / per.max(1);
            // SAFETY: `w` is dense `[cols]`, read-locked.
            let wr = pw.map_or_else(
                || ones.as_deref().unwrap_or(&[]),
                |p| unsafe { row(p, 0, cols) },
            );
            let (pdw, pdb) = if params {
                // SAFETY: block `blk`'s `2 * cols` partials are this block's
                // alone, inside the `nb * 2 * cols` vector.
                let p = unsafe { row_mut(pp, blk, 2 * cols) };
                p.split_at_mut(cols)
            } else {
                (&mut [][..], &mut [][..])
            };
            // The rows' loops compiled for this CPU's SIMD level.
            simd::run(BackwardRows::<T> {
                dy: pdy,
                x: px,
                w: wr,
                mean: pm,
                rstd: pr,
                dx: pdx,
                dw: dw_on.then_some(pdw),
                db: db_on.then_some(pdb),
                rows: start..end,
                cols,
                sums,
            });
        });
    }
    // The blocks' partials added into block 0's, in block order.
    if let Some((first, rest)) = partials.split_at_mut_checked(2 * cols) {
        for p in rest.chunks_exact(2 * cols) {
            for (a, &b) in first.iter_mut().zip(p) {
                *a = *a + b;
            }
        }
        for (k, out) in [(0, a.dw), (1, a.db)] {
            let Some(out) = out else { continue };
            // SAFETY: the gradient is dense `[cols]`, write-locked by the caller.
            let o = unsafe { row_mut(base::<T>(out), 0, cols) };
            for (v, &s) in o.iter_mut().zip(&first[k * cols..(k + 1) * cols]) {
                *v = T::down(s);
            }
        }
    } else {
        // No rows: zero gradients.
        for out in [a.dw, a.db].into_iter().flatten() {
            // SAFETY: as above.
            unsafe { row_mut(base::<T>(out), 0, cols) }.fill(T::down(zero));
        }
    }
}

/// The backward pass over a block of rows (see [`ForwardRows`]): `dx` when
/// given, and the block's own `dw` / `db` partials summed over its rows.
/// RMSNorm when `mean` is `None`. Built only by `backward_typed`, from dense
/// operands whose locks the caller holds.
struct BackwardRows<'a, T: Flt> {
    dy: SendPtr<T>,
    x: SendPtr<T>,
    w: &'a [T],
    mean: Option<SendPtr<T::C>>,
    rstd: SendPtr<T::C>,
    dx: Option<SendPtr<T>>,
    dw: Option<&'a mut [T::C]>,
    db: Option<&'a mut [T::C]>,
    rows: std::ops::Range<usize>,
    cols: usize,
    /// The row sums' f32 kernel, for f32 rows (see [`row_sums`]).
    sums: Option<RowSums>,
}

impl<T: Flt> simd::Kernel for BackwardRows<'_, T> {
    type Output = ();
    const WIDE: bool = <T as simd::Hot>::HOT;

    #[inline(always)]
    fn call<const F: bool>(self) {
        let BackwardRows {
            dy,
            x,
            w,
            mean: pm,
            rstd: pr,
            dx,
            mut dw,
            mut db,
            rows,
            cols,
            sums,
        } = self;
        let zero = <T::C as Zero>::zero();
        let n = <T::C as num_traits::NumCast>::from(cols).unwrap_or_else(T::C::one);
        for r in rows {
            // SAFETY: `dy` and `x` are dense `[rows, cols]`, read-locked;
            // `mean` and `rstd` dense `[rows]` of `T::C`, read-locked (the
            // struct's contract).
            let (dyr, xr, rstd, mean) = unsafe {
                (
                    row(dy, r, cols),
                    row(x, r, cols),
                    pr.get().add(r).read(),
                    pm.map_or(zero, |p| p.get().add(r).read()),
                )
            };
            let xh = |x: T::C| (x - mean) * rstd;
            if let (Some(pdx), Some(pdw), Some(pdb)) = (dx, dw.as_deref_mut(), db.as_deref_mut()) {
                // All three (a LayerNorm with affine parameters in
                // training): one pass after the sums, reading `dy` and `x`
                // once for `dx` and both partials (the same operations in
                // the same order as the separate loops below). Not measurably
                // faster than the separate loops; kept for the single read
                // (Note [LayerNorm sums by intrinsics] in
                // bench/results/ops-why.md).
                let (s1, s2) = row_sums(sums, dyr, xr, w, mean, rstd);
                let (m1, m2) = (if pm.is_none() { zero } else { s1 / n }, s2 / n);
                // SAFETY: as for `dx` below.
                let dxr = unsafe { row_mut(pdx, r, cols) };
                let rows = dxr.iter_mut().zip(pdw.iter_mut()).zip(pdb.iter_mut());
                for ((((o, p), q), &g), (&x, &w)) in rows.zip(dyr).zip(xr.iter().zip(w)) {
                    let (g, h) = (g.up(), xh(x.up()));
                    *o = T::down(rstd * (g * w.up() - m1 - h * m2));
                    *p = *p + g * h;
                    *q = *q + g;
                }
                continue;
            }
            if let Some(pdx) = dx {
                let (s1, s2) = row_sums(sums, dyr, xr, w, mean, rstd);
                let (m1, m2) = (if pm.is_none() { zero } else { s1 / n }, s2 / n);
                // SAFETY: `dx` is dense `[rows, cols]`, write-locked; row `r`
                // belongs to this block only.
                let dxr = unsafe { row_mut(pdx, r, cols) };
                for (((o, &g), &x), &w) in dxr.iter_mut().zip(dyr).zip(xr).zip(w) {
                    *o = T::down(rstd * (g.up() * w.up() - m1 - xh(x.up()) * m2));
                }
            }
            if let Some(pdw) = dw.as_deref_mut() {
                for ((p, &g), &x) in pdw.iter_mut().zip(dyr).zip(xr) {
                    *p = *p + g.up() * xh(x.up());
                }
            }
            if let Some(pdb) = db.as_deref_mut() {
                for (p, &g) in pdb.iter_mut().zip(dyr) {
                    *p = *p + g.up();
                }
            }
        }
    }
}

/// Fused forward of LayerNorm or RMSNorm over the last dimension of dense
/// `x` into dense `y`: `y = (x - mean) * rstd * w + b` (RMSNorm:
/// `y = x * rstd * w`). `stats` (`rstd`, and `mean` for LayerNorm: dense
/// `[rows]` of the compute dtype, f32 or f64) are written when given. `w`,
/// `b` are dense `[cols]` of `x`'s dtype (RMSNorm takes no `b`). The caller
/// holds the locks.
pub(crate) fn norm_forward(
    x: &Operand,
    w: Option<&Operand>,
    b: Option<&Operand>,
    y: &Operand,
    stats: Option<(&Operand, Option<&Operand>)>,
    eps: f64,
    kind: NormKind,
) {
    with_float_dtype!(x.dtype, T => forward_typed::<T>(x, w, b, y, stats, eps, kind), _ => {
        unreachable!("norm on {}: the op layer refuses it", x.dtype)
    })
}

/// Fused backward of [`norm_forward`]; see [`NormGrads`]. Outputs that are
/// `None` are not computed. The caller holds the locks.
pub(crate) fn norm_backward(a: &NormGrads) {
    with_float_dtype!(a.x.dtype, T => backward_typed::<T>(a), _ => {
        unreachable!("norm backward on {}: the op layer refuses it", a.x.dtype)
    })
}
