//! The window kernels on the CPU (see `crate::backend::pool_im2col` for what
//! they compute): max pooling over contiguous `[planes, H, W]` planes, one
//! pass, with the argmax; col2im, a convolution's input gradient summed
//! from its columns' gradient; and im2col, the columns themselves. The
//! work (output rows; one channel, or one tap row, of a block of samples)
//! is split over the kernel pool in units of about [`CHUNK_TAPS`] taps.

use super::ptr;
use super::simd;
use super::strided::SendPtr;
use super::thread_pool::par_for;
use crate::backend::pool_im2col::Windows;
use crate::backend::Operand;
use crate::dtype::{DType, Element};
use crate::with_float_dtype;
use std::ops::Range;

/// Taps (window elements visited) per parallel chunk: one chunk per plane
/// of a small map would cost more in hand-overs than in work.
const CHUNK_TAPS: usize = 1 << 14;

/// `y` (and `idx`) from `x`; the dispatcher checked dtypes and layouts
/// and holds the locks. The units of work are output rows (plane, row),
/// so a few large planes still use every thread. Each output's in-bounds
/// taps along a dim (`lo..hi` of `0..k`) are computed once per call.
pub(crate) fn max_pool2d(x: &Operand, y: &Operand, idx: Option<&Operand>, g: &Windows) {
    let per_row = (g.out[1] * g.kernel[0] * g.kernel[1]).max(1);
    let rows_per_chunk = CHUNK_TAPS.div_ceil(per_row).max(1);
    let rows = g.planes * g.out[0];
    let chunks = rows.div_ceil(rows_per_chunk);
    let (po, pi) = (
        idx.map(|i| SendPtr(ptr::<i64>(i.storage))),
        idx.map_or(0, |i| i.layout.offset()),
    );
    let (row_taps, col_taps) = (in_bounds_taps(g, 0), in_bounds_taps(g, 1));
    let plain = g.kernel == [2, 2]
        && g.stride == [2, 2]
        && g.dilation == [1, 1]
        && row_taps.iter().chain(&col_taps).all(|t| *t == (0..2))
        && g.pad == [0, 0];
    with_float_dtype!(x.dtype, T => {
        let (px, py) = (SendPtr(ptr::<T>(x.storage)), SendPtr(ptr::<T>(y.storage)));
        let (xo, yo) = (x.layout.offset(), y.layout.offset());
        par_for(chunks, |c| {
            let first = c * rows_per_chunk;
            let chunk = first..(first + rows_per_chunk).min(rows);
            if plain {
                // SAFETY: the offsets of the operands' views in their
                // storages (the dispatcher checked the views).
                let (x, y, idx) = unsafe {
                    (px.get().add(xo), py.get().add(yo), po.as_ref().map(|o| o.get().add(pi)))
                };
                simd::run(Plain2x2 { x, y, idx, rows: chunk, g });
                return;
            }
            for u in chunk {
                let (p, oh) = (u / g.out[0], u % g.out[0]);
                let at = p * g.out[0] * g.out[1] + oh * g.out[1];
                // SAFETY: contiguous views of storages of `T` (and i64 for
                // `idx`), checked by the dispatcher, which holds the locks;
                // output row `oh` of plane `p` is written by this call only.
                unsafe {
                    row::<T>(
                        px.get().add(xo + p * g.h * g.w),
                        py.get().add(yo + at),
                        po.as_ref().map(|o| o.get().add(pi + at)),
                        oh,
                        row_taps[oh].clone(),
                        &col_taps,
                        g,
                    );
                }
            }
        });
    }, _ => unreachable!("the dispatcher admits float dtypes only"))
}

/// Per output along dim `d` (rows 0, columns 1), its taps that land inside
/// the input: `lo..hi` of `0..k` (the in-bounds taps of a window are
/// consecutive).
fn in_bounds_taps(g: &Windows, d: usize) -> Vec<Range<usize>> {
    let (k, n) = (g.kernel[d], if d == 0 { g.h } else { g.w });
    (0..g.out[d])
        .map(|o| {
            let lo = (0..k).find(|&i| g.tap(d, o, i) >= 0).unwrap_or(k);
            let hi = (lo..k).find(|&i| g.tap(d, o, i) >= n as isize).unwrap_or(k);
            lo..hi
        })
        .collect()
}

/// `a` or `b`, whichever PyTorch's scan over the taps `a`'s then `b`'s
/// would end on: `b` when it is greater or NaN, else `a` (so the first
/// maximum, or the last NaN, wins: the same as the scan, in a tree).
#[inline(always)]
fn pick<T: Element>(a: (T, i64), b: (T, i64)) -> (T, i64) {
    #[allow(clippy::eq_op)] // `v != v`: NaN, for every float type.
    let better = (b.0 > a.0) | (b.0 != b.0);
    // Two selects (of a tuple, LLVM made a branch).
    (
        if better { b.0 } else { a.0 },
        if better { b.1 } else { a.1 },
    )
}

/// Max pooling with 2x2 windows at stride 2 and no padding, every window
/// inside its plane (PyTorch's default `MaxPool2d(2)` on even or floored
/// maps), over the output rows `rows` (plane-major) of contiguous planes:
/// each output is the tree of [`pick`]s over its two rows' pairs. A unit
/// for [`simd::run`]: at the x86-64 baseline (SSE2, no blend instruction)
/// LLVM compiled the selects to branches, which random data mispredicted (in
/// the general loop of [`row`]: Note [CNN window kernels] in
/// `bench/results/ops-why.md`); at AVX2 they are blends.
struct Plain2x2<'a, T> {
    /// The first plane; `y` and `idx` the first plane's outputs.
    x: *const T,
    y: *mut T,
    idx: Option<*mut i64>,
    rows: Range<usize>,
    g: &'a Windows,
}

impl<T: Element> simd::Kernel for Plain2x2<'_, T> {
    type Output = ();
    const WIDE: bool = <T as simd::Hot>::HOT;

    #[inline(always)]
    fn call<const FMA: bool>(self) {
        let g = self.g;
        let (oh_n, ow) = (g.out[0], g.out[1]);
        for u in self.rows {
            let (p, oh) = (u / oh_n, u % oh_n);
            let top = 2 * oh * g.w;
            // SAFETY: `max_pool2d` sends only geometries whose windows are
            // all inside the planes: rows 2 oh, 2 oh + 1 < h and columns
            // < 2 OW <= w of plane p; `u` is one of this chunk's output
            // rows (`OW` outputs and indices, this thread's alone).
            let (r0, r1, out) = unsafe {
                let plane = self.x.add(p * g.h * g.w);
                (
                    std::slice::from_raw_parts(plane.add(top), 2 * ow),
                    std::slice::from_raw_parts(plane.add(top + g.w), 2 * ow),
                    std::slice::from_raw_parts_mut(self.y.add(u * ow), ow),
                )
            };
            let (p0, p1) = (top as i64, (top + g.w) as i64);
            let windows = r0.chunks_exact(2).zip(r1.chunks_exact(2));
            match self.idx {
                Some(i) => {
                    // SAFETY: as `out`, for the i64 indices.
                    let ids = unsafe { std::slice::from_raw_parts_mut(i.add(u * ow), ow) };
                    for (q, ((v, id), (a, b))) in out.iter_mut().zip(ids).zip(windows).enumerate() {
                        let o = 2 * q as i64;
                        (*v, *id) = max4(a, b, p0 + o, p1 + o);
                    }
                }
                None => {
                    for (v, (a, b)) in out.iter_mut().zip(windows) {
                        *v = max4(a, b, 0, 0).0;
                    }
                }
            }
        }
    }
}

/// The maximum of a 2x2 window (`top` and `bottom` pairs, at flat indices
/// `p0`, `p0 + 1`, `p1`, `p1 + 1`) and its index, in the scan's order.
#[inline(always)]
fn max4<T: Element>(top: &[T], bottom: &[T], p0: i64, p1: i64) -> (T, i64) {
    let t = pick((top[0], p0), (top[1], p0 + 1));
    let b = pick((bottom[0], p1), (bottom[1], p1 + 1));
    pick(t, b)
}

/// Output row `oh` of one plane, whose in-bounds row taps are `rows`;
/// `cols[ow]` are output column `ow`'s.
///
/// # Safety
/// `x` holds the plane's `h * w` elements, `y` and `idx` (if any) the
/// row's `ow` outputs, this thread's alone.
unsafe fn row<T: Element>(
    x: *const T,
    y: *mut T,
    idx: Option<*mut i64>,
    oh: usize,
    rows: Range<usize>,
    cols: &[Range<usize>],
    g: &Windows,
) {
    let w = g.w as isize;
    // Start from the first in-bounds tap (`ops::pool` refuses a window
    // without one), then let a tap replace the best when it is greater or
    // NaN: selects, not branches (random data mispredicted half the
    // comparisons). The chosen element itself is written (exact, NaN
    // payloads included).
    #[inline(always)]
    fn take(best: &mut f64, at: &mut isize, f: f64, pos: isize) {
        let better = (f > *best) | f.is_nan();
        *at = if better | (*at < 0) { pos } else { *at };
        *best = if better { f } else { *best };
    }
    for (ow, cr) in cols.iter().enumerate() {
        let mut at = -1isize;
        let mut best = f64::NEG_INFINITY;
        for i in rows.clone() {
            let r = g.tap(0, oh, i) * w;
            for j in cr.clone() {
                let pos = r + g.tap(1, ow, j);
                // SAFETY: 0 <= r / w < h and 0 <= pos - r < w.
                take(
                    &mut best,
                    &mut at,
                    unsafe { x.offset(pos).read() }.to_f64(),
                    pos,
                );
            }
        }
        // SAFETY: ow < OW (the function's contract); `at`, when set, is an
        // in-bounds tap of the plane.
        unsafe {
            let v = if at >= 0 {
                x.offset(at).read()
            } else {
                T::wrap_from_f64(f64::NEG_INFINITY)
            };
            y.add(ow).write(v);
            if let Some(i) = idx {
                i.add(ow).write(at.max(0) as i64);
            }
        }
    }
}

/// For each tap index along dim `d` (rows 0, columns 1), the outputs
/// whose tap lands inside the input ([`Windows::outputs_in`]): the same
/// for every plane, so computed once per kernel call.
fn tap_ranges(g: &Windows, d: usize) -> Vec<Range<usize>> {
    let n = if d == 0 { g.h } else { g.w };
    (0..g.kernel[d]).map(|i| g.outputs_in(d, i, n)).collect()
}

/// The flat layout of a unit-stride convolution whose output rows are as
/// long as the input's (`same` padding, or none on the columns): output
/// `k = oh * OW + ow` of tap `(i, j)` reads plane element `k + shift`, so a
/// tap's `OH x OW` block is one run of the plane (one loop), except where
/// the tap lands in the padding. `None` for any other geometry.
struct Flat {
    /// Per column tap `j` and output `k`, whether `k`'s column is inside
    /// `cols_in[j]`: the run's elements that are padding even in a row
    /// that lands inside the plane are those without.
    inside: Vec<Vec<bool>>,
}

impl Flat {
    fn of(g: &Windows, cols_in: &[Range<usize>]) -> Option<Flat> {
        let ow = g.out[1];
        (g.stride == [1, 1] && ow == g.w && ow > 0).then(|| Flat {
            inside: cols_in
                .iter()
                .map(|cr| (0..g.out[0] * ow).map(|k| cr.contains(&(k % ow))).collect())
                .collect(),
        })
    }

    /// For tap `(i, j)` with in-plane output rows `rr` and columns `cr`
    /// (both non-empty): the outputs `lo..hi` whose plane element `k +
    /// shift` exists, and `shift`. Every output of the rows `rr` with a
    /// column in `cr` is in `lo..hi`; the others of `lo..hi` are not
    /// [`Flat::inside`].
    fn run(g: &Windows, i: usize, j: usize, rr: &Range<usize>) -> (Range<usize>, isize) {
        let ow = g.out[1];
        // |tap| < max(OH, H) here (a row of `rr` lands inside the plane),
        // so these products stay below the operands' sizes.
        let shift = g.tap(0, 0, i) * g.w as isize + g.tap(1, 0, j);
        let hw = (g.h * g.w) as isize;
        let lo = (rr.start * ow).max((-shift).max(0) as usize);
        let hi = (rr.end * ow).min((hw - shift).max(0) as usize).max(lo);
        (lo..hi, shift)
    }

    /// Per output `k` of a tap with column tap `j` and [`Flat::run`]
    /// `run`: whether it reads the plane (`k` in `run`, its column
    /// [`Flat::inside`]); the others are padding.
    fn keep(&self, j: usize, run: Range<usize>) -> Vec<bool> {
        let inside = &self.inside[j];
        (0..inside.len())
            .map(|k| run.contains(&k) && inside[k])
            .collect()
    }

    /// Per tap `t = i kw + j` (`rows`, `cols_in`: [`tap_ranges`]), its
    /// [`TapRun`] where it lands inside the plane somewhere; `None` where
    /// its outputs are all padding.
    fn taps(
        &self,
        g: &Windows,
        rows: &[Range<usize>],
        cols_in: &[Range<usize>],
    ) -> Vec<Option<TapRun>> {
        let kw = g.kernel[1];
        (0..g.kernel[0] * kw)
            .map(|t| {
                let (i, j) = (t / kw, t % kw);
                (!rows[i].is_empty() && !cols_in[j].is_empty()).then(|| {
                    let (run, shift) = Flat::run(g, i, j, &rows[i]);
                    let keep = self.keep(j, run.clone());
                    TapRun { run, shift, keep }
                })
            })
            .collect()
    }
}

/// One tap in the [`Flat`] layout: its [`Flat::run`] and [`Flat::keep`].
struct TapRun {
    run: Range<usize>,
    shift: isize,
    keep: Vec<bool>,
}

/// The sample blocks of a window kernel over `n` samples whose per-sample
/// work is `per_sample` taps: `(samples per block, blocks)`, a block being
/// about [`CHUNK_TAPS`] taps.
fn sample_blocks(n: usize, per_sample: usize) -> (usize, usize) {
    let nb = CHUNK_TAPS.div_ceil(per_sample.max(1)).clamp(1, n.max(1));
    (nb, n.div_ceil(nb))
}

/// `dx` `[n, c, h, w]` from `cols` `[c, kh, kw, n, oh, ow]`; the
/// dispatcher checked dtypes and layouts and holds the locks. The unit of
/// work is one channel of a block of samples, which reads its part of
/// `cols` in storage order: per tap, one contiguous stretch of the block's
/// `l`-element rows (reading each plane's `kh kw` taps instead, `n l`
/// elements apart, left col2im waiting on memory: 54% of its samples on
/// the load, `perf`, CNN training step). In the [`Flat`] layout, f32 and
/// f64 sum in their own dtype ([`col2im_flat`]). Otherwise each
/// plane sums its taps into an f64 buffer (only the outputs whose tap
/// lands inside the plane, computed once for all planes: no per-element
/// test), then is written once.
pub(crate) fn col2im(cols: &Operand, dx: &Operand, n: usize, g: &Windows) {
    let c = g.planes / n;
    let (kh, kw) = (g.kernel[0], g.kernel[1]);
    let (ow, l, hw) = (g.out[1], g.out[0] * g.out[1], g.h * g.w);
    let (nb, blocks) = sample_blocks(n, (kh * kw * l).max(hw));
    let (rows, cols_in) = (tap_ranges(g, 0), tap_ranges(g, 1));
    let unit = g.stride[1] == 1 || ow == 1;
    let flat = Flat::of(g, &cols_in);
    if let Some(f) = &flat {
        match cols.dtype {
            DType::F32 => return col2im_flat::<f32>(cols, dx, n, g, f, &rows, &cols_in),
            DType::F64 => return col2im_flat::<f64>(cols, dx, n, g, f, &rows, &cols_in),
            _ => {}
        }
    }
    with_float_dtype!(cols.dtype, T => {
        let (pc, pd) = (SendPtr(ptr::<T>(cols.storage)), SendPtr(ptr::<T>(dx.storage)));
        let (co, dxo) = (cols.layout.offset(), dx.layout.offset());
        par_for(c * blocks, |u| {
            let (ci, b) = (u / blocks, u % blocks);
            let samples = b * nb..((b + 1) * nb).min(n);
            let mut acc = vec![0f64; samples.len() * hw];
            for (i, rows) in rows.iter().enumerate() {
                for (j, cr) in cols_in.iter().enumerate() {
                    if cr.is_empty() || rows.is_empty() {
                        continue;
                    }
                    // SAFETY: `cols` is a contiguous [c, kh, kw, n, oh, ow]
                    // view of a storage of `T` (the dispatcher's check,
                    // under its lock); this tap's rows of the block's
                    // samples start here and hold `l` elements each.
                    let taps = unsafe {
                        std::slice::from_raw_parts(
                            pc.get().add(co + (((ci * kh + i) * kw + j) * n + samples.start) * l),
                            samples.len() * l,
                        )
                    };
                    let flat_run = flat.as_ref().map(|f| (f, Flat::run(g, i, j, rows)));
                    for (tap, acc) in taps.chunks_exact(l.max(1)).zip(acc.chunks_exact_mut(hw.max(1))) {
                        if let Some((f, (run, shift))) = &flat_run {
                            // One run per tap, not one loop per row: the
                            // run's padding outputs left out.
                            let at = (run.start as isize + shift) as usize;
                            let taps = tap[run.clone()].iter().zip(&f.inside[j][run.clone()]);
                            for (d, (s, &keep)) in acc[at..at + run.len()].iter_mut().zip(taps) {
                                if keep {
                                    *d += s.to_f64();
                                }
                            }
                            continue;
                        }
                        let x0 = g.tap(1, cr.start, j) as usize;
                        for oh in rows.clone() {
                            let y = g.tap(0, oh, i) as usize;
                            let src = &tap[oh * ow + cr.start..oh * ow + cr.end];
                            // `outputs_in` keeps every tap of the range
                            // inside the row: x0 + (len - 1) stride < w.
                            let dst = &mut acc[y * g.w..(y + 1) * g.w];
                            if unit {
                                for (d, s) in dst[x0..x0 + src.len()].iter_mut().zip(src) {
                                    *d += s.to_f64();
                                }
                            } else {
                                for (d, s) in dst[x0..].iter_mut().step_by(g.stride[1]).zip(src) {
                                    *d += s.to_f64();
                                }
                            }
                        }
                    }
                }
            }
            for (k, ni) in samples.enumerate() {
                // SAFETY: plane (ni, ci) of the contiguous [n, c, h, w] `dx`
                // (checked by the dispatcher), written by this unit only.
                let out = unsafe {
                    std::slice::from_raw_parts_mut(pd.get().add(dxo + (ni * c + ci) * hw), hw)
                };
                for (o, &v) in out.iter_mut().zip(&acc[k * hw..(k + 1) * hw]) {
                    *o = T::wrap_from_f64(v);
                }
            }
        });
    }, _ => unreachable!("the dispatcher admits float dtypes only"))
}

/// `cols` (`[c kh kw, n oh ow]`, rows `rs` apart) from `x` `[n, c, h, w]`;
/// the dispatcher checked dtypes and layouts and holds the locks. The unit
/// of work is one tap row of a block of samples, written in storage order.
/// In the [`Flat`] layout each sample's part is one copy of a run of its
/// plane, its padding outputs then zeroed; otherwise each output row is
/// zeros where the tap lands in the padding and, between, a copy of a run
/// of the input row.
pub(crate) fn im2col(x: &Operand, cols: &Operand, n: usize, g: &Windows) {
    let c = g.planes / n;
    let (kh, kw) = (g.kernel[0], g.kernel[1]);
    let (oh, ow) = (g.out[0], g.out[1]);
    let (l, hw) = (oh * ow, g.h * g.w);
    let rs = cols.layout.strides()[0];
    let (nb, blocks) = sample_blocks(n, l);
    let (rows, cols_in) = (tap_ranges(g, 0), tap_ranges(g, 1));
    let unit = g.stride[1] == 1 || ow == 1;
    let flat = Flat::of(g, &cols_in);
    // In the flat layout, per tap: `None` where the tap row is zeros.
    let flat_taps = flat
        .as_ref()
        .map_or(Vec::new(), |f| f.taps(g, &rows, &cols_in));
    with_float_dtype!(x.dtype, T => {
        let (px, pc) = (SendPtr(ptr::<T>(x.storage)), SendPtr(ptr::<T>(cols.storage)));
        let (xo, co) = (x.layout.offset(), cols.layout.offset());
        let zero = T::wrap_from_f64(0.0);
        par_for(c * kh * kw * blocks, |u| {
            let (r, b) = (u / blocks, u % blocks);
            let samples = b * nb..((b + 1) * nb).min(n);
            let (ci, t) = (r / (kh * kw), r % (kh * kw));
            let (i, j) = (t / kw, t % kw);
            let (rr, cr) = (&rows[i], &cols_in[j]);
            // SAFETY: `cols` is a [c kh kw, n oh ow] view of a storage of
            // `T` with rows `rs` apart (the dispatcher's check, under its
            // lock); this unit writes the block's `l` elements per sample
            // of row `r`, and no other unit does.
            let block = unsafe {
                std::slice::from_raw_parts_mut(pc.get().add(co + r * rs + samples.start * l), samples.len() * l)
            };
            if let Some(Some(tap)) = flat_taps.get(t) {
                // One pass per sample over a run of its plane (the maps of
                // a small CNN have rows of 4 or 8: a copy per row was a
                // `memcpy` call per 4 elements), the block in one call.
                simd::run(FlatTaps {
                    block,
                    x: px.get() as *const T,
                    x_len: x.storage.nbytes() / std::mem::size_of::<T>(),
                    first: xo + (samples.start * c + ci) * hw,
                    plane_stride: c * hw,
                    l,
                    run: tap.run.clone(),
                    shift: tap.shift,
                    keep: &tap.keep,
                    zero,
                });
                return;
            }
            for (ni, dst) in samples.zip(block.chunks_exact_mut(l.max(1))) {
                // SAFETY: `x` is a contiguous [n, c, h, w] view of a
                // storage of `T` (the dispatcher's check, under its lock).
                let plane = unsafe {
                    std::slice::from_raw_parts(px.get().add(xo + (ni * c + ci) * hw), hw)
                };
                for (o_h, out) in dst.chunks_exact_mut(ow.max(1)).enumerate() {
                    if !rr.contains(&o_h) || cr.is_empty() {
                        out.fill(zero);
                        continue;
                    }
                    let y = g.tap(0, o_h, i) as usize;
                    let src = &plane[y * g.w..(y + 1) * g.w];
                    out[..cr.start].fill(zero);
                    out[cr.end..].fill(zero);
                    let x0 = g.tap(1, cr.start, j) as usize;
                    if unit {
                        out[cr.clone()].copy_from_slice(&src[x0..x0 + cr.len()]);
                    } else {
                        for (d, s) in out[cr.clone()].iter_mut().zip(src[x0..].iter().step_by(g.stride[1])) {
                            *d = *s;
                        }
                    }
                }
            }
        });
    }, _ => unreachable!("the dispatcher admits float dtypes only"))
}

/// A block of samples' part of an im2col tap row in the [`Flat`]
/// layout: each sample's `OH OW` outputs in `block` are its plane's
/// elements (shifted by `shift`) where [`Flat::keep`] says so, zero
/// elsewhere. One select per element (the first
/// version copied the run and then zeroed the padding columns one by one,
/// a `memcpy` call and scattered writes per sample), and one dispatch per
/// block, not per sample.
struct FlatTaps<'a, T> {
    block: &'a mut [T],
    /// `x`'s storage, `x_len` elements; the block's first plane of the
    /// channel starts at element `first`, the others `plane_stride` apart.
    x: *const T,
    x_len: usize,
    first: usize,
    plane_stride: usize,
    l: usize,
    run: Range<usize>,
    shift: isize,
    /// [`Flat::keep`] of this tap.
    keep: &'a [bool],
    zero: T,
}

impl<T: Element> simd::Kernel for FlatTaps<'_, T> {
    type Output = ();
    const WIDE: bool = <T as simd::Hot>::HOT;

    #[inline(always)]
    fn call<const FMA: bool>(self) {
        let (run, zero) = (self.run, self.zero);
        let keep_run = &self.keep[run.clone()];
        for (s, dst) in self.block.chunks_exact_mut(self.l).enumerate() {
            let at = (self.first + s * self.plane_stride) as isize + self.shift;
            if at >= 0 && at as usize + self.l <= self.x_len {
                // The whole shifted plane lies in the storage: one select
                // per output, the padding's lanes reading a neighbouring
                // plane's (initialised, read-locked) elements and dropping
                // them, with no ragged ends (a 4x4 map has runs of 12).
                // SAFETY: `x_len` elements of `T` from `x` are the
                // storage's (the dispatcher holds its read lock; storages
                // are initialised when allocated), and `at..at + l` is
                // inside them.
                let src = unsafe { std::slice::from_raw_parts(self.x.add(at as usize), self.l) };
                for (d, (&v, &keep)) in dst.iter_mut().zip(src.iter().zip(self.keep)) {
                    *d = if keep { v } else { zero };
                }
                continue;
            }
            // SAFETY: sample `s`'s plane of the channel is inside the
            // storage (the dispatcher checked `x`'s view), and `Flat::run`
            // keeps `run` shifted by `shift` inside the plane.
            let src = unsafe {
                std::slice::from_raw_parts(self.x.offset(at + run.start as isize), run.len())
            };
            dst[..run.start].fill(zero);
            dst[run.end..].fill(zero);
            for (d, (&v, &keep)) in dst[run.clone()].iter_mut().zip(src.iter().zip(keep_run)) {
                *d = if keep { v } else { zero };
            }
        }
    }
}

/// col2im in the [`Flat`] layout for f32 and f64 (`rows` and `cols_in`
/// are [`tap_ranges`]): each unit (a channel of a block of samples) adds
/// every tap's outputs into one zeroed buffer for its planes, then copies
/// the planes into `dx` ([`FlatAdd`]), in the tensor's own dtype and in
/// tap order, as PyTorch's col2im does (it sums in `scalar_t`). The general
/// path's f64 buffer, a conversion per element and a copy per tap and sample
/// made col2im a seventh of the CNN example's training step
/// (Note [CNN window kernels] in `bench/results/ops-why.md`).
fn col2im_flat<T: Element + std::ops::Add<Output = T>>(
    cols: &Operand,
    dx: &Operand,
    n: usize,
    g: &Windows,
    f: &Flat,
    rows: &[Range<usize>],
    cols_in: &[Range<usize>],
) {
    let c = g.planes / n;
    let (kh, kw) = (g.kernel[0], g.kernel[1]);
    let (l, hw) = (g.out[0] * g.out[1], g.h * g.w);
    let (nb, blocks) = sample_blocks(n, (kh * kw * l).max(hw));
    // The taps that land inside the plane somewhere.
    let taps: Vec<(usize, TapRun)> = f
        .taps(g, rows, cols_in)
        .into_iter()
        .enumerate()
        .filter_map(|(t, tap)| Some((t, tap?)))
        .collect();
    // The sums' margins before the first plane and after the last, so
    // that every tap's `l` outputs land inside the buffer.
    let lead = taps
        .iter()
        .map(|(_, t)| (-t.shift).max(0) as usize)
        .max()
        .unwrap_or(0);
    let tail = taps
        .iter()
        .map(|(_, t)| (t.shift + l as isize - hw as isize).max(0) as usize)
        .max()
        .unwrap_or(0);
    let (pc, pd) = (
        SendPtr(ptr::<T>(cols.storage)),
        SendPtr(ptr::<T>(dx.storage)),
    );
    let (co, dxo) = (cols.layout.offset(), dx.layout.offset());
    par_for(c * blocks, |u| {
        let (ci, b) = (u / blocks, u % blocks);
        let samples = b * nb..((b + 1) * nb).min(n);
        simd::run(FlatAdd {
            // SAFETY: `cols` is a contiguous [c, kh, kw, n, oh, ow] view of
            // a storage of `T` (the dispatcher's check, under its lock):
            // channel `ci`'s first tap row at the block's first sample is
            // inside it.
            taps: unsafe { pc.get().add(co + ci * kh * kw * n * l + samples.start * l) },
            // SAFETY: `dx` is a contiguous [n, c, h, w] view of a storage
            // of `T` (the dispatcher's check, under its lock): plane (the
            // block's first sample, ci) is inside it.
            dx: unsafe { pd.get().add(dxo + (samples.start * c + ci) * hw) },
            tap_stride: n * l,
            plane_stride: c * hw,
            samples: samples.len(),
            l,
            hw,
            lead,
            tail,
            list: &taps,
        });
    });
}

/// One unit of [`col2im_flat`]: the planes `(s, ci)` of a block of
/// `samples` samples (`dx`, `plane_stride` apart, this unit's alone) from
/// channel `ci`'s tap rows (`taps`, `tap_stride` apart, each the block's
/// `l`-element runs).
struct FlatAdd<'a, T> {
    taps: *const T,
    dx: *mut T,
    tap_stride: usize,
    plane_stride: usize,
    samples: usize,
    l: usize,
    hw: usize,
    /// The sums' margins ([`col2im_flat`]).
    lead: usize,
    tail: usize,
    list: &'a [(usize, TapRun)],
}

impl<T: Element + std::ops::Add<Output = T>> simd::Kernel for FlatAdd<'_, T> {
    type Output = ();
    const WIDE: bool = <T as simd::Hot>::HOT;

    #[inline(always)]
    fn call<const FMA: bool>(self) {
        let zero = T::wrap_from_f64(0.0);
        // The sums in one contiguous buffer, copied out at the end: the
        // planes themselves lie `c h w` elements apart, often a multiple
        // of 4 KiB, and adding into 64 of them in turn thrashed a few L1
        // sets (`perf`: half the unit's samples on the add's load).
        let mut acc = vec![zero; self.lead + self.samples * self.hw + self.tail];
        for (t, TapRun { shift, keep, .. }) in self.list {
            // SAFETY: `col2im_flat`'s pointer: tap `t`'s runs of the
            // block's samples, `samples * l` elements at `t * tap_stride`.
            let row = unsafe {
                std::slice::from_raw_parts(
                    self.taps.add(t * self.tap_stride),
                    self.samples * self.l,
                )
            };
            for (s, src) in row.chunks_exact(self.l).enumerate() {
                // All `l` outputs, the padding's with `+ 0` (the sum
                // starts at +0, so it is never -0 and `+ 0` leaves it as
                // it is; a padding output of the first or last sample
                // lands in a margin): no ragged ends (a 4x4 map has runs
                // of 12).
                let at = (self.lead + s * self.hw) as isize + shift;
                let sums = &mut acc[at as usize..at as usize + self.l];
                for (d, (&v, &keep)) in sums.iter_mut().zip(src.iter().zip(keep)) {
                    *d = *d + if keep { v } else { zero };
                }
            }
        }
        let acc = &acc[self.lead..self.lead + self.samples * self.hw];
        for (s, sums) in acc.chunks_exact(self.hw).enumerate() {
            // SAFETY: `col2im_flat`'s pointer: plane `s` of the block,
            // `hw` elements at `s * plane_stride`, this unit's alone.
            let plane = unsafe {
                std::slice::from_raw_parts_mut(self.dx.add(s * self.plane_stride), self.hw)
            };
            plane.copy_from_slice(sums);
        }
    }
}
