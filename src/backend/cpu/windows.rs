//! The window kernels on the CPU (see `crate::backend::windows` for what
//! they compute): max pooling over contiguous `[planes, H, W]` planes, one
//! pass, with the argmax; col2im, a convolution's input gradient summed
//! from its columns' gradient; and im2col, the columns themselves. The
//! work (output rows, planes, or tap rows of one sample) is split over
//! the kernel pool in chunks of about [`CHUNK_TAPS`] taps.

use super::pool::par_for;
use super::ptr;
use super::strided::SendPtr;
use crate::backend::windows::Windows;
use crate::backend::Operand;
use crate::dtype::Element;
use crate::with_float_dtype;
use std::ops::Range;

/// Taps (window elements visited) per parallel chunk: one chunk per plane
/// of a small map would cost more in hand-overs than in work.
const CHUNK_TAPS: usize = 1 << 14;

/// `y` (and `idx`) from `x`; the dispatcher checked dtypes and layouts
/// and holds the locks. The units of work are output rows (plane, row),
/// so a few large planes still use every thread.
pub(crate) fn max_pool2d(x: &Operand, y: &Operand, idx: Option<&Operand>, g: &Windows) {
    let per_row = (g.out[1] * g.kernel[0] * g.kernel[1]).max(1);
    let rows_per_chunk = CHUNK_TAPS.div_ceil(per_row).max(1);
    let rows = g.planes * g.out[0];
    let chunks = rows.div_ceil(rows_per_chunk);
    let (po, pi) = (
        idx.map(|i| SendPtr(ptr::<i64>(i.storage))),
        idx.map_or(0, |i| i.layout.offset()),
    );
    with_float_dtype!(x.dtype, T => {
        let (px, py) = (SendPtr(ptr::<T>(x.storage)), SendPtr(ptr::<T>(y.storage)));
        let (xo, yo) = (x.layout.offset(), y.layout.offset());
        par_for(chunks, |c| {
            let first = c * rows_per_chunk;
            for u in first..(first + rows_per_chunk).min(rows) {
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
                        g,
                    );
                }
            }
        });
    }, _ => unreachable!("the dispatcher admits float dtypes only"))
}

/// Output row `oh` of one plane.
///
/// # Safety
/// `x` holds the plane's `h * w` elements, `y` and `idx` (if any) the
/// row's `ow` outputs, this thread's alone.
unsafe fn row<T: Element>(x: *const T, y: *mut T, idx: Option<*mut i64>, oh: usize, g: &Windows) {
    let w = g.w as isize;
    // The in-bounds taps of output row (column) `o`: `lo..hi` of `0..k`.
    let taps = |d: usize, o: usize, n: usize| {
        let k = g.kernel[d];
        let lo = (0..k).find(|&i| g.tap(d, o, i) >= 0).unwrap_or(k);
        let hi = (lo..k).find(|&i| g.tap(d, o, i) >= n as isize).unwrap_or(k);
        (lo, hi)
    };
    let (i0, i1) = taps(0, oh, g.h);
    for ow in 0..g.out[1] {
        let (j0, j1) = taps(1, ow, g.w);
        // Start from the first in-bounds tap (`ops::pool` refuses a window
        // without one), then let a tap replace the best when it is greater
        // or NaN: selects, not branches (random data mispredicted half the
        // comparisons). The chosen element itself is written (exact, NaN
        // payloads included).
        let mut at = -1isize;
        let mut best = f64::NEG_INFINITY;
        for i in i0..i1 {
            let r = g.tap(0, oh, i) * w;
            for j in j0..j1 {
                let pos = r + g.tap(1, ow, j);
                // SAFETY: 0 <= r / w < h and 0 <= pos - r < w.
                let f = unsafe { x.offset(pos).read() }.to_f64();
                let better = (f > best) | f.is_nan();
                at = if better | (at < 0) { pos } else { at };
                best = if better { f } else { best };
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

/// `dx` `[n, c, h, w]` from `cols` `[c, kh, kw, n, oh, ow]`; the
/// dispatcher checked dtypes and layouts and holds the locks. Each plane
/// `(n, c)` sums its `kh kw` taps' rows into an f64 buffer (only the
/// output ranges whose tap lands inside the plane, computed once for all
/// planes: no per-element test; with a unit column stride a tap's row adds
/// to a contiguous run of the buffer), then writes the plane once.
pub(crate) fn col2im(cols: &Operand, dx: &Operand, n: usize, g: &Windows) {
    let c = g.planes / n;
    let (kh, kw) = (g.kernel[0], g.kernel[1]);
    let (ow, l) = (g.out[1], g.out[0] * g.out[1]);
    let per_plane = (kh * kw * l).max(g.h * g.w).max(1);
    let planes_per_chunk = CHUNK_TAPS.div_ceil(per_plane).max(1);
    let chunks = g.planes.div_ceil(planes_per_chunk);
    let (rows, cols_in) = (tap_ranges(g, 0), tap_ranges(g, 1));
    let unit = g.stride[1] == 1 || ow == 1;
    with_float_dtype!(cols.dtype, T => {
        let (pc, pd) = (SendPtr(ptr::<T>(cols.storage)), SendPtr(ptr::<T>(dx.storage)));
        let (co, dxo) = (cols.layout.offset(), dx.layout.offset());
        par_for(chunks, |ch| {
            let mut acc = vec![0f64; g.h * g.w];
            let first = ch * planes_per_chunk;
            for p in first..(first + planes_per_chunk).min(g.planes) {
                let (ni, ci) = (p / c, p % c);
                acc.fill(0.0);
                for (i, rows) in rows.iter().enumerate() {
                    for (j, cr) in cols_in.iter().enumerate() {
                        if cr.is_empty() {
                            continue;
                        }
                        // SAFETY: `cols` is a contiguous [c, kh, kw, n, oh,
                        // ow] view of a storage of `T` (the dispatcher's
                        // check, under its lock); this tap's block starts
                        // here and holds `l` elements.
                        let tap = unsafe {
                            std::slice::from_raw_parts(
                                pc.get().add(co + (((ci * kh + i) * kw + j) * n + ni) * l),
                                l,
                            )
                        };
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
                // SAFETY: plane `p` of the contiguous [n, c, h, w] `dx`
                // (checked by the dispatcher), written by this call only.
                let out = unsafe {
                    std::slice::from_raw_parts_mut(pd.get().add(dxo + p * g.h * g.w), g.h * g.w)
                };
                for (o, &v) in out.iter_mut().zip(&acc) {
                    *o = T::wrap_from_f64(v);
                }
            }
        });
    }, _ => unreachable!("the dispatcher admits float dtypes only"))
}

/// `cols` (`[c kh kw, n oh ow]`, rows `rs` apart) from `x` `[n, c, h, w]`;
/// the dispatcher checked dtypes and layouts and holds the locks. The unit
/// of work is one tap row of one sample (`oh ow` elements): each output row
/// is zeros where the tap lands in the padding and, between, a copy of a
/// run of the input row (a `memcpy` at unit column stride).
pub(crate) fn im2col(x: &Operand, cols: &Operand, n: usize, g: &Windows) {
    let c = g.planes / n;
    let (kh, kw) = (g.kernel[0], g.kernel[1]);
    let (oh, ow) = (g.out[0], g.out[1]);
    let l = oh * ow;
    let rs = cols.layout.strides()[0];
    let units = c * kh * kw * n;
    let per_chunk = CHUNK_TAPS.div_ceil(l.max(1)).max(1);
    let chunks = units.div_ceil(per_chunk);
    let (rows, cols_in) = (tap_ranges(g, 0), tap_ranges(g, 1));
    let unit = g.stride[1] == 1 || ow == 1;
    with_float_dtype!(x.dtype, T => {
        let (px, pc) = (SendPtr(ptr::<T>(x.storage)), SendPtr(ptr::<T>(cols.storage)));
        let (xo, co) = (x.layout.offset(), cols.layout.offset());
        let zero = T::wrap_from_f64(0.0);
        par_for(chunks, |ch| {
            let first = ch * per_chunk;
            for u in first..(first + per_chunk).min(units) {
                let (r, ni) = (u / n, u % n);
                let (ci, t) = (r / (kh * kw), r % (kh * kw));
                let (i, j) = (t / kw, t % kw);
                let (rr, cr) = (&rows[i], &cols_in[j]);
                // SAFETY: `x` is a contiguous [n, c, h, w] view and `cols` a
                // [c kh kw, n oh ow] view with rows `rs` apart, both of `T`
                // (the dispatcher's checks, under its locks); this unit
                // reads plane (ni, ci) and writes its own `l` elements.
                let (plane, dst) = unsafe {
                    (
                        std::slice::from_raw_parts(px.get().add(xo + (ni * c + ci) * g.h * g.w), g.h * g.w),
                        std::slice::from_raw_parts_mut(pc.get().add(co + r * rs + ni * l), l),
                    )
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
