//! Cross-entropy from logits and class indices on the CPU, forward and
//! backward, one pass per row: log_softmax is never materialised.
//!
//! Forward, per row `i` of the dense logits `x [M, C]` with target `t`: the
//! maximum `m`, then in sweeps over the cached row `s = Σ_c exp(x_c - m)`
//! and (with label smoothing) `a = Σ_c w_c (m - x_c)`. With
//! `ln s >= 0` and every `m - x_c >= 0` the sums do not cancel:
//!
//! * `nll = (m - x_t) + ln s` (that is `-log_softmax(x)_t`),
//! * `smooth = a + W ln s` (`-Σ_c w_c log_softmax(x)_c`, `W = Σ_c w_c`),
//! * `loss_i = (1 - ε) w_t nll + ε / C · smooth`, and 0 for an ignored target,
//!
//! PyTorch's formula (`w_c = 1` without a class weight). The row's
//! `lse = m + ln s` is saved for the backward pass, which writes, per row,
//! `dx_c = k_i ((1 - ε) w_t (p_c - [c = t]) + ε / C (W p_c - w_c))` with
//! `p_c = exp(x_c - lse)` and `k_i` the incoming gradient (times `1 / D` for
//! the mean), 0 for an ignored row. Everything is computed in `T::C` (f32 for
//! f32/f16/bf16, f64 for f64); the per-row losses are added in f64 in a
//! fixed order of fixed row blocks, so the sum does not depend on the
//! thread count.

use super::numeric_traits::{FastExp, Flt};
use super::ptr;
use super::row_max::row_max;
use super::simd;
use super::strided::{SendPtr, PAR_CHUNK};
use super::thread_pool::par_map;
use crate::backend::nn::{BadTarget, CeConfig, CeGrad, CeSums};
use crate::backend::Operand;
use crate::with_float_dtype;
use num_traits::{Float, NumCast, One, Zero};

fn dense_base<T>(o: &Operand) -> SendPtr<T> {
    debug_assert!(o.layout.is_contiguous());
    // SAFETY: a layout's offset lies inside its storage.
    SendPtr(unsafe { ptr::<T>(o.storage).add(o.layout.offset()) })
}

/// The dense row `r` of `len` elements at `base`.
///
/// # Safety
/// In one live allocation of initialised `T`s nobody writes meanwhile.
#[inline(always)]
unsafe fn row<'a, T>(base: SendPtr<T>, r: usize, len: usize) -> &'a [T] {
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(base.get().add(r * len), len) }
}

/// The 8 lanes added pairwise.
#[inline(always)]
fn tree8<C: Float>(l: &[C; 8]) -> C {
    ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]))
}

/// `Σ exp(x - m)` over a row: the exponentials a chunk at a time into a
/// buffer (a plain map, so it vectorises), summed in 8 lanes.
#[inline(always)]
fn exp_sum<T: Flt, const F: bool>(x: &[T], m: T::C) -> T::C
where
    T::C: FastExp,
{
    const CHUNK: usize = 256;
    let zero = <T::C as Zero>::zero();
    let mut buf = [zero; CHUNK];
    let mut sl = [zero; 8];
    for c in x.chunks(CHUNK) {
        for (b, &v) in buf.iter_mut().zip(c) {
            *b = (v.up() - m).fexp_neg::<F>();
        }
        let len = c.len().next_multiple_of(8);
        for b in &mut buf[c.len()..len] {
            *b = zero;
        }
        for ch in buf[..len].chunks_exact(8) {
            for (l, &v) in sl.iter_mut().zip(ch) {
                *l = *l + v;
            }
        }
    }
    tree8(&sl)
}

/// `Σ w_c (m - x_c)` over a row in 8 lanes (`w` is `None` for weight 1).
#[inline(always)]
fn dist_sum<T: Flt>(x: &[T], w: Option<&[T]>, m: T::C) -> T::C {
    let zero = <T::C as Zero>::zero();
    let mut sl = [zero; 8];
    let mut tail = zero;
    match w {
        Some(w) => {
            let (mut ix, mut iw) = (x.chunks_exact(8), w.chunks_exact(8));
            for (cx, cw) in (&mut ix).zip(&mut iw) {
                for j in 0..8 {
                    sl[j] = sl[j] + cw[j].up() * (m - cx[j].up());
                }
            }
            for (&v, &wc) in ix.remainder().iter().zip(iw.remainder()) {
                tail = tail + wc.up() * (m - v.up());
            }
        }
        None => {
            let mut ix = x.chunks_exact(8);
            for cx in &mut ix {
                for (l, &v) in sl.iter_mut().zip(cx) {
                    *l = *l + (m - v.up());
                }
            }
            for &v in ix.remainder() {
                tail = tail + (m - v.up());
            }
        }
    }
    tree8(&sl) + tail
}

/// Rows per block of the parallel split: a function of the shape only.
fn rows_per_block(cols: usize) -> usize {
    (PAR_CHUNK / cols.max(1)).max(1)
}

/// Runs `f` on each block of `rows_per_block` rows (in parallel on the
/// kernel pool when there is enough work), results in block order.
fn per_block<R: Send>(rows: usize, cols: usize, f: impl Fn(usize, usize) -> R + Sync) -> Vec<R> {
    let per = rows_per_block(cols);
    let nb = rows.div_ceil(per);
    let run = |b: usize| f(b * per, ((b + 1) * per).min(rows));
    if nb < 2 || rows * cols < 2 * PAR_CHUNK {
        (0..nb).map(run).collect()
    } else {
        par_map(nb, run)
    }
}

/// The class weights' sum `W` (`C` without weights), in `T::C`.
fn weight_sum<T: Flt>(w: Option<&[T]>, c: usize) -> T::C {
    match w {
        Some(w) => w.iter().fold(<T::C as Zero>::zero(), |a, &v| a + v.up()),
        None => <T::C as NumCast>::from(c).unwrap_or_else(<T::C as One>::one),
    }
}

fn forward_typed<T: Flt>(
    x: &Operand,
    target: &Operand,
    weight: Option<&Operand>,
    per_row: Option<&Operand>,
    lse: Option<&Operand>,
    cfg: CeConfig,
) -> Result<CeSums, BadTarget>
where
    T::C: FastExp,
{
    let sh = x.layout.shape();
    let (rows, cols) = (sh[0], sh[1]);
    if rows == 0 {
        return Ok(CeSums::default());
    }
    let (px, pt) = (dense_base::<T>(x), dense_base::<i64>(target));
    let pw = weight.map(dense_base::<T>);
    let (pl, pse) = (per_row.map(dense_base::<T>), lse.map(dense_base::<T::C>));
    // SAFETY: the weight is dense `[cols]`, read-locked by the caller.
    let w = pw.map(|p| unsafe { row(p, 0, cols) });
    let eps = <T::C as NumCast>::from(cfg.label_smoothing).unwrap_or_else(T::C::zero);
    let one = <T::C as One>::one();
    let smooth = cfg.label_smoothing > 0.0;
    let ec = eps / <T::C as NumCast>::from(cols).unwrap_or(one);
    let big_w = weight_sum(w, cols);
    let parts = per_block(rows, cols, |start, end| -> Result<CeSums, BadTarget> {
        // The rows' loops compiled for this CPU's SIMD level.
        simd::run(ForwardRows::<T> {
            x: px,
            t: pt,
            w,
            lse: pse,
            per_row: pl,
            rows: start..end,
            cols,
            ignore: cfg.ignore_index,
            smooth,
            eps,
            ec,
            big_w,
        })
    });
    let mut sums = CeSums::default();
    for p in parts {
        let p = p?;
        sums.loss += p.loss;
        sums.weight += p.weight;
    }
    Ok(sums)
}

fn backward_typed<T: Flt>(
    x: &Operand,
    target: &Operand,
    weight: Option<&Operand>,
    lse: &Operand,
    grad: &CeGrad,
    dx: &Operand,
    cfg: CeConfig,
) where
    T::C: FastExp,
{
    let sh = x.layout.shape();
    let (rows, cols) = (sh[0], sh[1]);
    if rows == 0 || cols == 0 {
        return;
    }
    let (px, pt, pd) = (
        dense_base::<T>(x),
        dense_base::<i64>(target),
        dense_base::<T>(dx),
    );
    let pw = weight.map(dense_base::<T>);
    let pse = dense_base::<T::C>(lse);
    // SAFETY: the weight is dense `[cols]`, read-locked by the caller.
    let w = pw.map(|p| unsafe { row(p, 0, cols) });
    let (gs, gp) = match grad {
        CeGrad::Scalar(o, scale) => {
            debug_assert_eq!(o.layout.numel(), 1);
            // SAFETY: a one-element operand of `T`, read-locked by the caller.
            let v = unsafe { ptr::<T>(o.storage).add(o.layout.offset()).read() };
            (<T::C as NumCast>::from(v.up().wide() * scale), None)
        }
        CeGrad::PerRow(o) => (None, Some(dense_base::<T>(o))),
    };
    let zero = <T::C as Zero>::zero();
    let one = <T::C as One>::one();
    let eps = <T::C as NumCast>::from(cfg.label_smoothing).unwrap_or(zero);
    let ec = eps / <T::C as NumCast>::from(cols).unwrap_or(one);
    let big_w = weight_sum(w, cols);
    per_block(rows, cols, |start, end| {
        // The rows' loops compiled for this CPU's SIMD level.
        simd::run(BackwardRows::<T> {
            x: px,
            t: pt,
            w,
            lse: pse,
            k: gs,
            per_row_grad: gp,
            dx: pd,
            rows: start..end,
            cols,
            ignore: cfg.ignore_index,
            eps,
            ec,
            big_w,
        });
    });
}

/// The forward pass over a block of rows: a unit for [`simd::run`], whose
/// `#[inline(always)]` `call` is compiled for the CPU's SIMD level (a
/// closure this large would stay a baseline function). Built only by
/// `forward_typed`, from dense operands whose locks the caller holds, each
/// block with its own rows.
struct ForwardRows<'a, T: Flt> {
    x: SendPtr<T>,
    t: SendPtr<i64>,
    w: Option<&'a [T]>,
    lse: Option<SendPtr<T::C>>,
    per_row: Option<SendPtr<T>>,
    rows: std::ops::Range<usize>,
    cols: usize,
    ignore: Option<i64>,
    smooth: bool,
    eps: T::C,
    ec: T::C,
    big_w: T::C,
}

impl<T: Flt> simd::Kernel for ForwardRows<'_, T>
where
    T::C: FastExp,
{
    type Output = Result<CeSums, BadTarget>;
    const WIDE: bool = <T as simd::Hot>::HOT;

    #[inline(always)]
    fn call<const F: bool>(self) -> Result<CeSums, BadTarget> {
        let ForwardRows {
            x: px,
            t: pt,
            w,
            lse: pse,
            per_row: pl,
            rows,
            cols,
            ignore,
            smooth,
            eps,
            ec,
            big_w,
        } = self;
        let (zero, one) = (<T::C as Zero>::zero(), <T::C as One>::one());
        let mut acc = CeSums::default();

        for r in rows {
            // SAFETY: the targets are dense `[rows]` i64, read-locked.
            let t = unsafe { pt.get().add(r).read() };
            let ignored = ignore == Some(t);
            if !ignored && !(0..cols as i64).contains(&t) {
                return Err(BadTarget(t));
            }
            let loss = if ignored || cols == 0 {
                <T::C as Zero>::zero()
            } else {
                // SAFETY: the logits are dense `[rows, cols]`, read-locked.
                let xr = unsafe { row(px, r, cols) };
                let m = row_max(xr);
                let s = exp_sum::<T, F>(xr, m);
                let a = if smooth { dist_sum(xr, w, m) } else { zero };
                let ls = s.ln();
                if let Some(p) = pse {
                    // SAFETY: `lse` is dense `[rows]` of `T::C`, write-locked;
                    // element `r` belongs to this block only.
                    unsafe { p.get().add(r).write(m + ls) };
                }
                let t = t as usize;
                let wt = w.map_or(one, |w| w[t].up());
                acc.weight += wt.wide();
                let nll = (m - xr[t].up()) + ls;
                if smooth {
                    (one - eps) * wt * nll + ec * (a + big_w * ls)
                } else {
                    wt * nll
                }
            };
            if ignored && let Some(p) = pse {
                // SAFETY: as above.
                unsafe { p.get().add(r).write(<T::C as Zero>::zero()) };
            }
            if let Some(p) = pl {
                // SAFETY: the per-row losses are dense `[rows]`, write-locked;
                // element `r` belongs to this block only.
                unsafe { p.get().add(r).write(T::down(loss)) };
            }
            acc.loss += loss.wide();
        }
        Ok(acc)
    }
}

/// The backward pass over a block of rows, as [`ForwardRows`] (built only
/// by `backward_typed`): the incoming gradient is `k` for every row, or
/// read per row.
struct BackwardRows<'a, T: Flt> {
    x: SendPtr<T>,
    t: SendPtr<i64>,
    w: Option<&'a [T]>,
    lse: SendPtr<T::C>,
    k: Option<T::C>,
    per_row_grad: Option<SendPtr<T>>,
    dx: SendPtr<T>,
    rows: std::ops::Range<usize>,
    cols: usize,
    ignore: Option<i64>,
    eps: T::C,
    ec: T::C,
    big_w: T::C,
}

impl<T: Flt> simd::Kernel for BackwardRows<'_, T>
where
    T::C: FastExp,
{
    type Output = ();
    const WIDE: bool = <T as simd::Hot>::HOT;

    #[inline(always)]
    fn call<const F: bool>(self) {
        let BackwardRows {
            x: px,
            t: pt,
            w,
            lse: pse,
            k: gs,
            per_row_grad: gp,
            dx: pd,
            rows,
            cols,
            ignore,
            eps,
            ec,
            big_w,
        } = self;
        let (zero, one) = (<T::C as Zero>::zero(), <T::C as One>::one());

        for r in rows {
            // SAFETY: `dx` is dense `[rows, cols]`, write-locked; row `r`
            // belongs to this block only.
            let dr = unsafe { std::slice::from_raw_parts_mut(pd.get().add(r * cols), cols) };
            // SAFETY: the targets are dense `[rows]` i64, read-locked (checked
            // in range by the forward pass).
            let t = unsafe { pt.get().add(r).read() };
            // SAFETY: the per-row gradient is dense `[rows]`, read-locked.
            let k =
                gs.unwrap_or_else(|| gp.map_or(zero, |p| unsafe { p.get().add(r).read() }.up()));
            if ignore == Some(t) || !(0..cols as i64).contains(&t) {
                dr.fill(T::down(zero));
                continue;
            }
            let t = t as usize;
            // SAFETY: the logits are dense `[rows, cols]` and `lse` dense
            // `[rows]`, read-locked.
            let (xr, l) = unsafe { (row(px, r, cols), pse.get().add(r).read()) };
            let wt = w.map_or(one, |w| w[t].up());
            // dx_c = a p_c - b_c, with a = k ((1 - ε) w_t + ε/C W) and
            // b_c = k (ε/C w_c + (1 - ε) w_t [c = t]).
            let a = k * ((one - eps) * wt + ec * big_w);
            match w {
                Some(w) if eps > zero => {
                    let kb = k * ec;
                    for ((o, &v), &wc) in dr.iter_mut().zip(xr).zip(w) {
                        *o = T::down(a * (v.up() - l).fexp_neg::<F>() - kb * wc.up());
                    }
                }
                _ => {
                    let b = k * ec;
                    for (o, &v) in dr.iter_mut().zip(xr) {
                        *o = T::down(a * (v.up() - l).fexp_neg::<F>() - b);
                    }
                }
            }
            let p = (xr[t].up() - l).fexp_neg::<F>();
            dr[t] = T::down(a * p - k * wt * (ec + (one - eps)));
        }
    }
}

/// Fused cross-entropy forward over dense logits `x [rows, C]` and dense i64
/// targets `[rows]`: writes each row's loss into `per_row` (dense `[rows]`
/// of `x`'s dtype) and each row's `logsumexp` into `lse` (dense `[rows]` of
/// the compute dtype) when given, and returns the sums. `weight` is dense
/// `[C]` of `x`'s dtype. The caller holds the locks.
pub(crate) fn cross_entropy(
    x: &Operand,
    target: &Operand,
    weight: Option<&Operand>,
    per_row: Option<&Operand>,
    lse: Option<&Operand>,
    cfg: CeConfig,
) -> Result<CeSums, BadTarget> {
    with_float_dtype!(x.dtype, T => forward_typed::<T>(x, target, weight, per_row, lse, cfg), _ => {
        unreachable!("cross_entropy on {}: the op layer refuses it", x.dtype)
    })
}

/// Fused cross-entropy backward: `dx` (dense, `x`'s shape and dtype) from
/// the forward's `lse` and the incoming gradient. The caller holds the locks.
pub(crate) fn cross_entropy_backward(
    x: &Operand,
    target: &Operand,
    weight: Option<&Operand>,
    lse: &Operand,
    grad: &CeGrad,
    dx: &Operand,
    cfg: CeConfig,
) {
    with_float_dtype!(x.dtype, T => backward_typed::<T>(x, target, weight, lse, grad, dx, cfg), _ => {
        unreachable!("cross_entropy backward on {}: the op layer refuses it", x.dtype)
    })
}
