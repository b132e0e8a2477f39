//! Strided iteration: how every CPU kernel walks N operands of one shape.
//!
//! A [`Plan`] coalesces dimensions that are contiguous in every operand (so a
//! contiguous tensor is one run), then hands out *runs*: a base offset per
//! operand, a length, and an inner stride per operand. Kernels loop over a run
//! with plain pointer arithmetic; the caller never sees multi-indices.
//!
//! Large plans are split into chunks of linear index ranges and run on the
//! CPU backend's thread pool ([`super::thread_pool`]).
//! Plans whose inner dimension is strided in one operand but not in another
//! (a transposed input) walk 2-D tiles instead, so both operands stay in cache
//! and in the TLB.

use super::thread_pool::par_for;
use crate::layout::{Dims, Layout};

/// Elements per parallel chunk; below twice this a plan runs on the caller's thread.
pub(crate) const PAR_CHUNK: usize = 1 << 16;
/// Side of the square tiles used for transposed operands.
const TILE: usize = 32;
/// Rows of one band of the tiled walk (a multiple of `TILE`): a band walks
/// its columns `TILE` at a time, all its rows for each. A transposed operand
/// then visits each of its 4 KiB pages once per band (every row of it is a
/// new page) instead of once per `TILE` rows, while the band's rows of the
/// other operands (`2 * BAND` pages) stay in the TLB.
const BAND: usize = 256;

/// A raw pointer that may cross to the pool's threads. Kernels guarantee that
/// concurrently running chunks touch disjoint output elements.
pub(crate) struct SendPtr<T>(pub *mut T);
impl<T> Clone for SendPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for SendPtr<T> {}
// SAFETY: a `SendPtr` is an address a kernel shares with its worker
// threads; every kernel that sends one gives each thread disjoint elements
// to write (or only reads) and holds the storage locks until all threads
// have joined, so the pointee is never raced on.
unsafe impl<T> Send for SendPtr<T> {}
// SAFETY: see `Send`.
unsafe impl<T> Sync for SendPtr<T> {}
impl<T> SendPtr<T> {
    /// The pointer. (A method, so closures capture the whole `SendPtr`.)
    #[inline(always)]
    pub(crate) fn get(&self) -> *mut T {
        self.0
    }
}

/// Runs `f` over every run of `layouts` (one shape), as
/// [`Plan::par_runs`] does. Small operands that are all contiguous (most
/// tiny ops) skip the plan: one run with unit strides, on this thread.
#[inline]
pub(crate) fn par_runs<const N: usize>(
    layouts: [&Layout; N],
    f: impl Fn([usize; N], usize, [usize; N]) + Sync,
) {
    let n = layouts[0].numel();
    if n < 2 * PAR_CHUNK && layouts.iter().all(|l| l.is_contiguous()) {
        debug_assert!(layouts.iter().all(|l| l.shape() == layouts[0].shape()));
        if n > 0 {
            let mut offsets = [0; N];
            for (o, l) in offsets.iter_mut().zip(&layouts) {
                *o = l.offset();
            }
            f(offsets, n, [1; N]);
        }
        return;
    }
    Plan::new(layouts).par_runs(f)
}

/// A plan of two dims ([`Plan::as_matrix`]): `[rows, cols]`, per operand
/// `[outer stride, inner stride]`, and the operands' offsets.
pub(crate) type Matrix<const N: usize> = ([usize; 2], [[usize; 2]; N], [usize; N]);

#[derive(Clone, Debug)]
pub(crate) struct Plan<const N: usize> {
    shape: Dims,
    strides: [Dims; N],
    offsets: [usize; N],
}

impl<const N: usize> Plan<N> {
    /// All layouts must have the same shape (broadcast beforehand).
    pub(crate) fn new(layouts: [&Layout; N]) -> Self {
        let shape0 = layouts[0].shape();
        debug_assert!(layouts.iter().all(|l| l.shape() == shape0));
        let mut shape = Dims::new();
        let mut strides: [Dims; N] = std::array::from_fn(|_| Dims::new());
        // Drop size-1 dims, then merge dim i into i+1 when every operand allows.
        for (d, &size) in shape0.iter().enumerate() {
            if size == 1 {
                continue;
            }
            let can_merge = !shape.is_empty()
                && (0..N).all(|k| *strides[k].last().unwrap() == layouts[k].strides()[d] * size);
            if can_merge {
                *shape.last_mut().unwrap() *= size;
                for k in 0..N {
                    *strides[k].last_mut().unwrap() = layouts[k].strides()[d];
                }
            } else {
                shape.push(size);
                for k in 0..N {
                    strides[k].push(layouts[k].strides()[d]);
                }
            }
        }
        if shape0.contains(&0) {
            shape = smallvec::smallvec![0];
            strides = std::array::from_fn(|_| smallvec::smallvec![1]);
        }
        Plan {
            shape,
            strides,
            offsets: std::array::from_fn(|k| layouts[k].offset()),
        }
    }

    pub(crate) fn numel(&self) -> usize {
        crate::layout::numel(&self.shape)
    }

    /// The plan as a matrix, when it coalesced to exactly two dims.
    pub(crate) fn as_matrix(&self) -> Option<Matrix<N>> {
        (self.shape.len() == 2).then(|| {
            (
                [self.shape[0], self.shape[1]],
                std::array::from_fn(|k| [self.strides[k][0], self.strides[k][1]]),
                self.offsets,
            )
        })
    }

    /// `true` when every operand is one dense run with stride 1.
    #[cfg(test)]
    pub(crate) fn is_dense(&self) -> bool {
        self.shape.len() <= 1 && (0..N).all(|k| self.strides[k].first().is_none_or(|&s| s == 1))
    }

    /// `true` when a tiled walk pays: rank 2 after coalescing, and some
    /// operand is *transposed*: stride 1 along the outer dim and a stride
    /// other than 0 or 1 along the inner one.
    ///
    /// A broadcast column (inner stride 0, e.g. `[1, 0]`: the `[m, 1]`
    /// output of a sum over dim 1 seen with the input's shape, or the `b` of
    /// `a[m, n] + b[m, 1]`) reads one element per row: its rows are already
    /// as local as they can be, so it stays on the row-wise walk with full
    /// rows as runs (where kernels hoist the broadcast value) instead of
    /// `TILE`-element runs.
    fn wants_tiles(&self) -> bool {
        let r = self.shape.len();
        r == 2
            && self.shape[0] >= TILE
            && self.shape[1] >= TILE
            && (0..N).any(|k| self.strides[k][1] > 1 && self.strides[k][0] == 1)
    }

    /// Calls `f(offsets, len, inner_strides)` for every run covering linear
    /// indices `start..end`, in order. Always inlined: kernels run it
    /// inside [`super::simd::run`], compiled for the CPU's SIMD level. Only
    /// the step to the next row is here; finding the start and carrying
    /// into the outer dimensions are [`Plan::cursor`] and [`Plan::carry`],
    /// one copy per operand count instead of one per kernel.
    #[inline(always)]
    pub(crate) fn runs(
        &self,
        start: usize,
        end: usize,
        f: &mut impl FnMut([usize; N], usize, [usize; N]),
    ) {
        if start >= end {
            return;
        }
        let r = self.shape.len();
        if r == 0 {
            f(self.offsets, 1, [0; N]);
            return;
        }
        // Plain locals, read once: indexing the `SmallVec`s themselves
        // tests inline-or-heap at every access, which was most of the time
        // per run of a convolution's column copy (runs of 4 to 8 elements).
        let inner = self.shape[r - 1];
        let mut inner_strides = [0; N];
        let mut row_strides = [0; N];
        for k in 0..N {
            inner_strides[k] = self.strides[k][r - 1];
            if r >= 2 {
                row_strides[k] = self.strides[k][r - 2];
            }
        }
        let rows = if r >= 2 { self.shape[r - 2] } else { 1 };
        let (mut offs, mut i, mut j) = self.cursor(start);
        let mut pos = start;
        loop {
            let len = (inner - i).min(end - pos);
            f(offs, len, inner_strides);
            pos += len;
            if pos >= end {
                return;
            }
            // To the start of the next row.
            for k in 0..N {
                offs[k] -= i * inner_strides[k];
            }
            i = 0;
            j += 1;
            if j < rows {
                for k in 0..N {
                    offs[k] += row_strides[k];
                }
            } else if self.carry(&mut offs, pos) {
                j = 0;
            } else {
                return;
            }
        }
    }

    /// The offsets of linear index `start` in each operand, and its index
    /// in the last two dims (rank >= 1; the second is 0 for rank 1).
    #[inline(never)]
    fn cursor(&self, start: usize) -> ([usize; N], usize, usize) {
        let r = self.shape.len();
        let mut offs = self.offsets;
        let mut rem = start;
        let (mut i, mut j) = (0, 0);
        for d in (0..r).rev() {
            let x = rem % self.shape[d];
            rem /= self.shape[d];
            for (o, s) in offs.iter_mut().zip(&self.strides) {
                *o += x * s[d];
            }
            if d == r - 1 {
                i = x;
            } else if d == r - 2 {
                j = x;
            }
        }
        (offs, i, j)
    }

    /// `offs` at the start of the last row of a block of the last two dims
    /// (rank >= 2): moves it to the start of the next block, at linear
    /// index `pos`; false past the end of the plan.
    #[inline(never)]
    fn carry(&self, offs: &mut [usize; N], pos: usize) -> bool {
        let r = self.shape.len();
        if r < 2 {
            return false;
        }
        // Back to row 0 of the block, then one step in the first dim
        // (from the end) that does not wrap; the dims it passes wrap to 0.
        for (o, s) in offs.iter_mut().zip(&self.strides) {
            *o -= (self.shape[r - 2] - 1) * s[r - 2];
        }
        let mut rem = pos / (self.shape[r - 1] * self.shape[r - 2]);
        for d in (0..r - 2).rev() {
            let x = rem % self.shape[d];
            rem /= self.shape[d];
            if x != 0 {
                for (o, s) in offs.iter_mut().zip(&self.strides) {
                    *o += s[d];
                }
                return true;
            }
            for (o, s) in offs.iter_mut().zip(&self.strides) {
                *o -= (self.shape[d] - 1) * s[d];
            }
        }
        false
    }

    /// Runs `f` over every run, in parallel chunks when the plan is large.
    /// `f` must only write output elements of the runs it is given.
    pub(crate) fn par_runs(&self, f: impl Fn([usize; N], usize, [usize; N]) + Sync) {
        let n = self.numel();
        if self.wants_tiles() {
            return self.tiled(f);
        }
        if n < 2 * PAR_CHUNK {
            self.runs(0, n, &mut |o, l, s| f(o, l, s));
            return;
        }
        par_for(n.div_ceil(PAR_CHUNK), |c| {
            let start = c * PAR_CHUNK;
            self.runs(start, (start + PAR_CHUNK).min(n), &mut |o, l, s| f(o, l, s));
        });
    }

    /// 2-D tiled walk: TILE x TILE blocks, each walked as TILE short runs
    /// along dim 1, blocks of rows in parallel.
    fn tiled(&self, f: impl Fn([usize; N], usize, [usize; N]) + Sync) {
        let (rows, cols) = (self.shape[0], self.shape[1]);
        let (mut s0, mut s1) = ([0; N], [0; N]);
        for k in 0..N {
            s0[k] = self.strides[k][0];
            s1[k] = self.strides[k][1];
        }
        let band = |rb: usize| {
            let r0 = rb * BAND;
            let r1 = (r0 + BAND).min(rows);
            let mut c0 = 0;
            while c0 < cols {
                let len = TILE.min(cols - c0);
                for r in r0..r1 {
                    let mut o = self.offsets;
                    for k in 0..N {
                        o[k] += r * s0[k] + c0 * s1[k];
                    }
                    f(o, len, s1);
                }
                c0 += TILE;
            }
        };
        let bands = rows.div_ceil(BAND);
        if rows * cols < 2 * PAR_CHUNK {
            (0..bands).for_each(band);
        } else {
            par_for(bands, band);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect<const N: usize>(p: &Plan<N>) -> Vec<[usize; N]> {
        let mut v = Vec::new();
        p.runs(0, p.numel(), &mut |o, l, s| {
            for i in 0..l {
                v.push(std::array::from_fn(|k| o[k] + i * s[k]));
            }
        });
        v
    }

    /// Rank 4 with a transposed operand (no dims coalesce): runs over any
    /// split of the linear range carry through every outer dim and give
    /// each element once, in order, at its offset in both operands.
    #[test]
    fn runs_carry_through_outer_dims() {
        let out = Layout::contiguous(&[3, 4, 5, 6]);
        // Shape [3, 4, 5, 6], strides [1, 3, 12, 60], offset 60.
        let t = Layout::contiguous(&[7, 5, 4, 3])
            .narrow(0, 1, 6)
            .unwrap()
            .permute(&[3, 2, 1, 0])
            .unwrap();
        let p = Plan::new([&out, &t]);
        assert_eq!(p.shape.len(), 4);
        let want: Vec<[usize; 2]> = (0..360)
            .map(|n| {
                let (a, b, c, d) = (n / 120, n / 30 % 4, n / 6 % 5, n % 6);
                [n, 60 + a + 3 * b + 12 * c + 60 * d]
            })
            .collect();
        assert_eq!(collect(&p), want);
        for cuts in [
            &[0, 1, 359, 360][..],
            &[0, 7, 8, 29, 30, 31, 119, 121, 240, 360],
        ] {
            let mut got = Vec::new();
            for w in cuts.windows(2) {
                p.runs(w[0], w[1], &mut |o, l, s| {
                    assert!(l > 0);
                    got.extend((0..l).map(|i| [o[0] + i * s[0], o[1] + i * s[1]]));
                });
            }
            assert_eq!(got, want, "{cuts:?}");
        }
    }

    #[test]
    fn coalesces_contiguous() {
        let l = Layout::contiguous(&[2, 3, 4]);
        let p = Plan::new([&l, &l]);
        assert!(p.is_dense());
        assert_eq!(collect(&p).len(), 24);
    }

    #[test]
    fn transposed_offsets_in_logical_order() {
        let base = Layout::contiguous(&[2, 3]);
        let t = base.transpose(0, 1).unwrap(); // shape [3, 2], strides [1, 3]
        let out = Layout::contiguous(&[3, 2]);
        let p = Plan::new([&out, &t]);
        let v: Vec<usize> = collect(&p).iter().map(|o| o[1]).collect();
        assert_eq!(v, vec![0, 3, 1, 4, 2, 5]);
        // Ranges split anywhere give the same sequence.
        let mut w = Vec::new();
        for (a, b) in [(0, 1), (1, 4), (4, 6)] {
            p.runs(a, b, &mut |o, l, s| {
                (0..l).for_each(|i| w.push(o[1] + i * s[1]))
            });
        }
        assert_eq!(v, w);
    }

    /// Several bands of `BAND` rows (the last one partial) and a partial
    /// last column tile: every element once, at the right offsets.
    #[test]
    fn tiles_cover_several_bands() {
        let (rows, cols) = (2 * BAND + 88, TILE + 8);
        let base = Layout::contiguous(&[cols, rows]);
        let t = base.transpose(0, 1).unwrap(); // shape [rows, cols], strides [1, rows]
        let out = Layout::contiguous(&[rows, cols]);
        let p = Plan::new([&out, &t]);
        assert!(p.wants_tiles());
        let seen = std::sync::Mutex::new(vec![0u8; rows * cols]);
        p.par_runs(|o, l, s| {
            let mut g = seen.lock().unwrap();
            for i in 0..l {
                let (oi, ti) = (o[0] + i * s[0], o[1] + i * s[1]);
                assert_eq!(ti, (oi % cols) * rows + oi / cols);
                g[oi] += 1;
            }
        });
        assert!(seen.into_inner().unwrap().iter().all(|&c| c == 1));
    }

    /// Every element of a `rows x cols` plan visited once, through
    /// `par_runs`: returns the run lengths seen and checks operand 1's
    /// offset against `want(row, col)` for each element.
    fn visit_once<const N: usize>(
        p: &Plan<N>,
        rows: usize,
        cols: usize,
        want: impl Fn(usize, usize) -> [usize; N] + Sync,
    ) -> Vec<usize> {
        let seen = std::sync::Mutex::new((vec![0u8; rows * cols], Vec::new()));
        p.par_runs(|o, l, s| {
            let mut g = seen.lock().unwrap();
            g.1.push(l);
            for i in 0..l {
                let oi = o[0] + i * s[0];
                let got: [usize; N] = std::array::from_fn(|k| o[k] + i * s[k]);
                assert_eq!(got, want(oi / cols, oi % cols));
                g.0[oi] += 1;
            }
        });
        let (count, lens) = seen.into_inner().unwrap();
        assert!(
            count.iter().all(|&c| c == 1),
            "some element missed or repeated"
        );
        lens
    }

    /// A broadcast column (`[m, 1]` seen as `[m, n]`: strides `[1, 0]`, as
    /// in a sum over dim 1 or `a + b[m, 1]`) stays on the row-wise walk,
    /// with whole rows as runs, in parallel chunks when large.
    #[test]
    fn broadcast_column_is_not_tiled() {
        for (rows, cols) in [(512, 1024), (64, 40), (3, 70_000)] {
            let out = Layout::contiguous(&[rows, cols]);
            let col = Layout::contiguous(&[rows, 1])
                .broadcast_to(&[rows, cols])
                .unwrap();
            assert_eq!(col.strides(), &[1, 0]);
            for p in [Plan::new([&out, &col]), Plan::new([&col, &out])] {
                assert!(!p.wants_tiles(), "{rows}x{cols}");
            }
            let p = Plan::new([&out, &col, &out]);
            assert!(!p.wants_tiles());
            let lens = visit_once(&p, rows, cols, |r, c| [r * cols + c, r, r * cols + c]);
            // Whole rows as runs (a row longer than a parallel chunk is cut
            // at chunk boundaries).
            if cols <= PAR_CHUNK {
                assert!(lens.iter().all(|&l| l == cols), "{rows}x{cols}: {lens:?}");
            }
        }
    }

    /// A broadcast row (`[1, n]` seen as `[m, n]`: strides `[0, 1]`) was and
    /// is row-wise; a transposed operand next to a broadcast column still
    /// takes the tiles.
    #[test]
    fn broadcast_row_walks_rows_and_transposes_still_tile() {
        let (rows, cols) = (300, 200);
        let out = Layout::contiguous(&[rows, cols]);
        let row = Layout::contiguous(&[1, cols])
            .broadcast_to(&[rows, cols])
            .unwrap();
        let p = Plan::new([&out, &row]);
        assert!(!p.wants_tiles());
        visit_once(&p, rows, cols, |r, c| [r * cols + c, c]);

        let t = Layout::contiguous(&[cols, rows]).transpose(0, 1).unwrap();
        let col = Layout::contiguous(&[rows, 1])
            .broadcast_to(&[rows, cols])
            .unwrap();
        let p = Plan::new([&out, &t, &col]);
        assert!(p.wants_tiles());
        let lens = visit_once(&p, rows, cols, |r, c| [r * cols + c, c * rows + r, r]);
        assert!(lens.iter().all(|&l| l <= TILE));
    }

    #[test]
    fn tiles_cover_everything_once() {
        let base = Layout::contiguous(&[70, 45]);
        let t = base.transpose(0, 1).unwrap();
        let out = Layout::contiguous(&[45, 70]);
        let p = Plan::new([&out, &t]);
        assert!(p.wants_tiles());
        let seen = std::sync::Mutex::new(vec![0u8; 45 * 70]);
        p.par_runs(|o, l, s| {
            let mut g = seen.lock().unwrap();
            for i in 0..l {
                let (oi, ti) = (o[0] + i * s[0], o[1] + i * s[1]);
                assert_eq!(ti, (oi % 70) * 45 + oi / 70);
                g[oi] += 1;
            }
        });
        assert!(seen.into_inner().unwrap().iter().all(|&c| c == 1));
    }
}
