//! The reduction engine: the three schedules of the module docs (row,
//! lanes, split) over any reducer, on the kernel pool, each unit of work
//! compiled for the CPU's SIMD level.

use super::{Reducer, LANES};
use crate::backend::cpu::simd;
use crate::backend::cpu::strided::{Plan, SendPtr, PAR_CHUNK};
use crate::backend::cpu::thread_pool::{num_threads, par_for, par_map};
use crate::layout::{Dims, Layout};

/// The fewest outputs of one parallel chunk in the lane schedule.
const LANE_CHUNK: usize = 64;

/// Drops size-1 dimensions and merges the ones contiguous in each other (as
/// [`Plan`] does): `(number of dims left, innermost length, innermost stride)`.
pub(in crate::backend::cpu) fn inner(l: &Layout) -> (usize, usize, usize) {
    let mut shape: Dims = Dims::new();
    let mut strides: Dims = Dims::new();
    for (&d, &s) in l.shape().iter().zip(l.strides()) {
        if d == 1 {
            continue;
        }
        if let (Some(ls), Some(lst)) = (shape.last_mut(), strides.last_mut())
            && *lst == s * d
        {
            *ls *= d;
            *lst = s;
            continue;
        }
        shape.push(d);
        strides.push(s);
    }
    match (shape.last(), strides.last()) {
        (Some(&d), Some(&s)) => (shape.len(), d, s),
        _ => (0, 1, 0),
    }
}

/// Splits `src`'s layout into the kept dims (input strides, input offset) and
/// the reduced ones (offset 0). The reduced dims are walked outermost-first
/// by decreasing stride, so that the walk is as dense as it can be.
pub(super) fn split_dims(src: &Layout, dims: &[usize]) -> (Layout, Layout) {
    let (mut ks, mut kst, mut rd): (Dims, Dims, Vec<(usize, usize)>) =
        (Dims::new(), Dims::new(), Vec::new());
    for (i, (&d, &s)) in src.shape().iter().zip(src.strides()).enumerate() {
        if dims.contains(&i) {
            rd.push((d, s));
        } else {
            ks.push(d);
            kst.push(s);
        }
    }
    rd.sort_by_key(|&(_, s)| std::cmp::Reverse(s));
    let kept = Layout::from_parts(ks, kst, src.offset());
    let red = Layout::from_parts(
        rd.iter().map(|p| p.0).collect(),
        rd.iter().map(|p| p.1).collect(),
        0,
    );
    (kept, red)
}

/// Folds reduced elements `start..end` of the output element at input offset `base`.
///
/// # Safety
/// `src` plus every offset the plans give is in bounds.
#[inline(always)]
unsafe fn fold<R: Reducer>(
    r: &R,
    src: *const R::In,
    rp: &Plan<1>,
    base: usize,
    start: usize,
    end: usize,
) -> R::Acc {
    let mut a = r.init();
    let mut i = start;
    rp.runs(start, end, &mut |o, len, s| {
        // SAFETY: the plan's runs of the reduced layout, from `base`, are in bounds (this fn's
        // contract).
        a = unsafe { r.run(a, src.add(base + o[0]), len, s[0], i) };
        i += len;
    });
    a
}

/// One reduction's walk: the reducer, its input and the plans of the kept
/// and reduced layouts (built by [`run_reduction`], inside the storage).
struct Walk<'a, R: Reducer> {
    r: &'a R,
    src: SendPtr<R::In>,
    kp: Plan<1>,
    rp: Plan<1>,
    n_red: usize,
    /// The lane schedule (see the module docs).
    lanes: bool,
    /// The reduced layout is one run (`r_dims <= 1`) of stride `r_stride`.
    r_dims: usize,
    r_stride: usize,
}

/// One run of kept outputs (`len` outputs from offset `off` with stride
/// `s`, numbered from `o`): a unit of work for [`simd::run`], so that the
/// reducer's loops are compiled for the CPU's SIMD level. No closure holds
/// the hot loops (a closure's body stays a baseline function, see
/// [`simd`]); only a reduced layout of several runs walks its plan
/// through one.
struct Run<'a, 'w, R: Reducer> {
    w: &'a Walk<'w, R>,
    off: usize,
    len: usize,
    s: usize,
    o: usize,
}

impl<R: Reducer> simd::Kernel for Run<'_, '_, R> {
    type Output = ();
    const WIDE: bool = R::WIDE;
    #[inline(always)]
    fn call<const F: bool>(self) {
        let Run { w, off, len, s, o } = self;
        let (r, src, n_red) = (w.r, w.src.get(), w.n_red);
        if !w.lanes {
            for k in 0..len {
                let base = off + k * s;
                let a = if w.r_dims <= 1 {
                    // One run (the common case): no walk to set up.
                    // SAFETY: `base` is a kept offset and the reduced layout is one run of
                    // `n_red` with `r_stride`: in bounds (`run_reduction`'s contract).
                    unsafe { r.run(r.init(), src.add(base), n_red, w.r_stride, 0) }
                } else {
                    // SAFETY: `base` is a kept offset: the reduced plan's runs from it are
                    // in bounds (`run_reduction`'s contract).
                    unsafe { fold(r, src, &w.rp, base, 0, n_red) }
                };
                // SAFETY: `o + k` indexes this run's output, written once, by this thread.
                unsafe { r.finish(a, n_red, o + k) };
            }
            return;
        }
        let mut b = 0;
        while b < len {
            let blk = LANES.min(len - b);
            let mut acc = [r.init(); LANES];
            let at = off + b * s;
            if w.r_dims <= 1 {
                let rs = w.r_stride;
                let mut t = 0;
                while t + 4 <= n_red {
                    // SAFETY: rows `t..t + 4` of the one reduced run, at the block's kept
                    // offsets: in bounds by the plans (`run_reduction`'s contract).
                    unsafe { lane_step4(r, &mut acc[..blk], src.add(at + t * rs), rs, s, t) };
                    t += 4;
                }
                for t in t..n_red {
                    // SAFETY: row `t` of the one reduced run, at the block's kept offsets:
                    // in bounds by the plans (`run_reduction`'s contract).
                    let p = unsafe { src.add(at + t * rs) };
                    // SAFETY: `p`'s block of `blk` kept elements, as above.
                    unsafe { lane_step(r, &mut acc[..blk], p, s, t) };
                }
            } else {
                let mut i = 0;
                w.rp.runs(0, n_red, &mut |ro, rlen, rs| {
                    for t in 0..rlen {
                        // SAFETY: in bounds by the plans (`run_reduction`'s contract).
                        let p = unsafe { src.add(at + ro[0] + t * rs[0]) };
                        // SAFETY: as above.
                        unsafe { lane_step(r, &mut acc[..blk], p, s, i + t) };
                    }
                    i += rlen;
                });
            }
            for (j, a) in acc[..blk].iter().enumerate() {
                // SAFETY: each output of the block is written once, by the thread that
                // owns the block.
                unsafe { r.finish(*a, n_red, o + b + j) };
            }
            b += blk;
        }
    }
}

/// Folds element `p[j * s]` into `acc[j]` for every lane `j`, as reduced
/// element number `i`.
///
/// # Safety
/// `p[j * s]` is in bounds for `j < acc.len()`.
#[inline(always)]
unsafe fn lane_step<R: Reducer>(r: &R, acc: &mut [R::Acc], p: *const R::In, s: usize, i: usize) {
    if s == 1 {
        for (j, a) in acc.iter_mut().enumerate() {
            // SAFETY: `j < acc.len()` with stride 1 (this fn's contract).
            *a = r.step(*a, unsafe { p.add(j).read() }, i);
        }
    } else {
        for (j, a) in acc.iter_mut().enumerate() {
            // SAFETY: `j < acc.len()` with stride `s` (this fn's contract).
            *a = r.step(*a, unsafe { p.add(j * s).read() }, i);
        }
    }
}

/// [`lane_step`] of the four rows `p`, `p + rs`, `p + 2 rs`, `p + 3 rs`
/// (reduced elements `i..i + 4`) in one pass over `acc`: each lane folds
/// them in the same order as four calls would (bit-identical results), but
/// its accumulator is loaded and stored once, not four times. A sum over
/// dim 0 of `[512, 1024]` spent its time on those loads and stores (the
/// f64 accumulators of a block are 8 KiB).
///
/// # Safety
/// `p[k * rs + j * s]` is in bounds for `k < 4`, `j < acc.len()`.
#[inline(always)]
unsafe fn lane_step4<R: Reducer>(
    r: &R,
    acc: &mut [R::Acc],
    p: *const R::In,
    rs: usize,
    s: usize,
    i: usize,
) {
    // No closure for the fold: a closure's body can stay a baseline (SSE2)
    // function outside the SIMD level's (see `Run`).
    macro_rules! fold {
        ($a:expr, $e:expr) => {{
            let e = $e;
            // SAFETY: element `e` of rows `k * rs`, `k < 4`: in bounds by
            // this fn's contract.
            unsafe {
                let a = r.step($a, p.add(e).read(), i);
                let a = r.step(a, p.add(rs + e).read(), i + 1);
                let a = r.step(a, p.add(2 * rs + e).read(), i + 2);
                r.step(a, p.add(3 * rs + e).read(), i + 3)
            }
        }};
    }
    if s == 1 {
        for (j, a) in acc.iter_mut().enumerate() {
            *a = fold!(*a, j);
        }
    } else {
        for (j, a) in acc.iter_mut().enumerate() {
            *a = fold!(*a, j * s);
        }
    }
}

/// Reduced elements `start..end` of the output at kept offset `base`: the
/// split schedule's unit for [`simd::run`].
struct Part<'a, 'w, R: Reducer> {
    w: &'a Walk<'w, R>,
    base: usize,
    start: usize,
    end: usize,
}

impl<R: Reducer> simd::Kernel for Part<'_, '_, R> {
    type Output = R::Acc;
    const WIDE: bool = R::WIDE;
    #[inline(always)]
    fn call<const F: bool>(self) -> R::Acc {
        let (w, base, start, end) = (self.w, self.base, self.start, self.end);
        if w.r_dims <= 1 {
            // One reduced run (no closure: see [`Run`]).
            // SAFETY: `base` is an offset of the kept layout and `start..end` a range of the
            // one reduced run: in bounds (`run_reduction`'s contract).
            return unsafe {
                let p = w.src.get().add(base + start * w.r_stride);
                w.r.run(w.r.init(), p, end - start, w.r_stride, start)
            };
        }
        // SAFETY: `base` is an offset of the kept layout and `start..end` a range of the
        // reduced one: in bounds (`run_reduction`'s contract).
        unsafe { fold(w.r, w.src.get(), &w.rp, base, start, end) }
    }
}

/// Runs reducer `r` over `src` seen through `kept` (one output per element,
/// row-major) and `red` (the elements folded into each).
///
/// # Safety
/// The layouts fit `src`'s storage; `r`'s outputs hold `kept.numel()` elements.
pub(super) unsafe fn run_reduction<R: Reducer>(
    r: &R,
    src: *const R::In,
    kept: &Layout,
    red: &Layout,
) {
    let (n_out, n_red) = (kept.numel(), red.numel());
    if n_out == 0 {
        return;
    }
    if n_red == 0 {
        for o in 0..n_out {
            // SAFETY: `o < n_out`, the number of outputs, written by this thread alone.
            unsafe { r.finish(r.init(), 0, o) };
        }
        return;
    }
    let (_, k_len, k_stride) = inner(kept);
    let (r_dims, _, r_stride) = inner(red);
    let w = Walk {
        r,
        src: SendPtr(src as *mut R::In),
        kp: Plan::new([kept]),
        rp: Plan::new([red]),
        n_red,
        lanes: k_len >= 4 && (n_red == 1 || k_stride < r_stride),
        r_dims,
        r_stride,
    };
    // Work worth splitting over the pool's threads.
    let parallel = n_out.saturating_mul(n_red) >= 2 * PAR_CHUNK;

    // Few outputs, many inputs each: split every output's range.
    if parallel && n_out <= 16 && n_red >= 2 * PAR_CHUNK {
        let mut o = 0;
        w.kp.runs(0, n_out, &mut |off, len, s| {
            for k in 0..len {
                let base = off[0] + k * s[0];
                let parts = par_map(n_red.div_ceil(PAR_CHUNK), |c| {
                    let start = c * PAR_CHUNK;
                    let end = (start + PAR_CHUNK).min(n_red);
                    simd::run_capped(
                        R::CAP,
                        Part {
                            w: &w,
                            base,
                            start,
                            end,
                        },
                    )
                });
                // Merged in chunk order: the result does not depend on timing.
                let a = parts.into_iter().fold(r.init(), |a, b| r.merge(a, b));
                // SAFETY: `o + k` indexes this run's output, written once, by this thread.
                unsafe { r.finish(a, n_red, o + k) };
            }
            o += len;
        });
        return;
    }

    // Outputs per parallel chunk: about PAR_CHUNK inputs; in the lane
    // schedule one share per thread (a whole number of LANE_CHUNK vectors,
    // at most a block of LANES). A whole block each made a sum over dim 0 of
    // `[512, 1024]` one chunk on one thread; shares of one LANE_CHUNK read
    // its rows 256 bytes at a time, also slower (Note [lane schedule shares]
    // in bench/results/ops-why.md).
    let lanes_per = n_out
        .div_ceil(num_threads())
        .next_multiple_of(LANE_CHUNK)
        .min(LANES);
    let per = (PAR_CHUNK / n_red).max(if w.lanes { lanes_per } else { 1 });
    let chunks = n_out.div_ceil(per);
    let chunk = |c: usize| {
        let (start, end) = (c * per, ((c + 1) * per).min(n_out));
        let mut o = start;
        w.kp.runs(start, end, &mut |off, len, s| {
            let (off, s) = (off[0], s[0]);
            simd::run_capped(
                R::CAP,
                Run {
                    w: &w,
                    off,
                    len,
                    s,
                    o,
                },
            );
            o += len;
        });
    };
    if parallel && chunks >= 2 {
        par_for(chunks, chunk)
    } else {
        (0..chunks).for_each(chunk)
    }
}
