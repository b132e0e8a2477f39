//! The Winograd F(2x2, 3x3) transforms on the CPU (see
//! `crate::backend::winograd` for what each computes). f32 only; every
//! plane (sample and channel) is a unit of parallel work, and writes only
//! its own elements.
//!
//! The tile transforms work on a whole row of tiles at once, as loops
//! over contiguous runs that the compiler vectorises: a plane's tiles of
//! one transformed element `xi` are contiguous in the `[16, ch, T]`
//! operand (the tile index runs over rows of tiles, then tiles), and the
//! padded input plane is kept as its even and odd columns apart, so that
//! the 4 columns `2j .. 2j + 3` of tile `j` are `even[j], odd[j],
//! even[j + 1], odd[j + 1]`: every step is an add or a subtract of
//! shifted runs. (Tile by tile, with the 16 values of a tile gathered into
//! an array, the transforms took as long as the 16 products.)

use super::pool::par_for;
use super::ptr;
use super::strided::SendPtr;
use crate::backend::winograd::{Step, TileGrid};
use crate::backend::Operand;

/// `G g`: the kernel transform.
#[inline(always)]
fn g(x: [f32; 3]) -> [f32; 4] {
    let (s, d) = (0.5 * (x[0] + x[2]), 0.5 * x[1]);
    [x[0], s + d, s - d, x[2]]
}

/// `G^T u`: the kernel transform's adjoint.
#[inline(always)]
fn gt(u: [f32; 4]) -> [f32; 3] {
    let (s, d) = (0.5 * (u[1] + u[2]), 0.5 * (u[1] - u[2]));
    [u[0] + s, d, s + u[3]]
}

/// `L X L^T` for the 1-d map `f = (v -> L v)`: `f` down every column of
/// `x`, then along every row of the result.
#[inline(always)]
fn sep<const I: usize, const O: usize>(
    x: [[f32; I]; I],
    f: impl Fn([f32; I]) -> [f32; O],
) -> [[f32; O]; O] {
    let mut t = [[0f32; I]; O];
    for j in 0..I {
        let col = f(std::array::from_fn(|i| x[i][j]));
        for (row, v) in t.iter_mut().zip(col) {
            row[j] = v;
        }
    }
    t.map(f)
}

/// `out[k] = f(a[k], b[k], c[k])` over the shortest of the runs.
#[inline(always)]
fn zip3(out: &mut [f32], a: &[f32], b: &[f32], c: &[f32], f: impl Fn(f32, f32, f32) -> f32) {
    for (((o, &a), &b), &c) in out.iter_mut().zip(a).zip(b).zip(c) {
        *o = f(a, b, c);
    }
}

/// `out[k] = f(a[k], b[k])` over the shortest of the runs.
#[inline(always)]
fn zip2(out: &mut [f32], a: &[f32], b: &[f32], f: impl Fn(f32, f32) -> f32) {
    for ((o, &a), &b) in out.iter_mut().zip(a).zip(b) {
        *o = f(a, b);
    }
}

/// Runs `step` between the spatial operand (`[n, ch, h, w]`, contiguous)
/// and the transformed one (`[16, ch, T]`, rows `rs` elements apart), with
/// the optional bias `[ch]` for `Step::Output`. The dispatcher checked
/// dtypes, shapes and layouts and holds the locks.
pub(crate) fn tiles(
    step: Step,
    spatial: &Operand,
    tiled: &Operand,
    bias: Option<&Operand>,
    grid: &TileGrid,
    rs: usize,
) {
    let TileGrid {
        n,
        ch,
        h,
        w,
        th,
        tw,
        pad,
    } = *grid;
    let (ps, pt) = (
        SendPtr(ptr::<f32>(spatial.storage)),
        SendPtr(ptr::<f32>(tiled.storage)),
    );
    let (so, to) = (spatial.layout.offset(), tiled.layout.offset());
    let pb = bias.map(|b| (SendPtr(ptr::<f32>(b.storage)), b.layout.offset()));
    // One plane's step, with the chunk's scratch.
    let plane_step = |p: usize, b: &mut Bufs| {
        let (ni, ci) = (p / ch, p % ch);
        // Tile row `i`'s run of element `xi` in the [16, ch, T] operand:
        // `tw` elements from here.
        let run = |xi: usize, i: usize| {
            // SAFETY: xi < 16, ci < ch and the tile index (ni th + i) tw
            // + tw <= T <= rs: inside the operand the dispatcher checked.
            unsafe { pt.get().add(to + (xi * ch + ci) * rs + (ni * th + i) * tw) }
        };
        // SAFETY: plane `p` of the contiguous [n, ch, h, w] operand (h w
        // elements), which this task alone touches in this step.
        let plane = unsafe { ps.get().add(so + p * h * w) };
        match step {
            Step::Input => {
                // SAFETY: as `plane`; read-only in this step.
                let x = unsafe { std::slice::from_raw_parts(plane, h * w) };
                input(b, x, h, w, th, pad, |i| {
                    std::array::from_fn(|xi| {
                        // SAFETY: run xi of tile row i: this task's
                        // channel and sample, disjoint from the other 15,
                        // written by this task only.
                        unsafe { std::slice::from_raw_parts_mut(run(xi, i), tw) }
                    })
                });
            }
            Step::InputAdjoint => {
                // SAFETY: as `plane`; written by this task only.
                let dx = unsafe { std::slice::from_raw_parts_mut(plane, h * w) };
                input_adjoint(b, dx, h, w, th, pad, |i| {
                    std::array::from_fn(|xi| {
                        // SAFETY: run xi of tile row i, read-only here.
                        unsafe { std::slice::from_raw_parts(run(xi, i).cast_const(), tw) }
                    })
                });
            }
            Step::Output => {
                // SAFETY: element ci of the [ch] bias.
                let bias = pb.map_or(0.0, |(pb, bo)| unsafe { pb.get().add(bo + ci).read() });
                // SAFETY: as `plane`; written by this task only.
                let y = unsafe { std::slice::from_raw_parts_mut(plane, h * w) };
                output(b, y, h, w, th, bias, |i| {
                    std::array::from_fn(|xi| {
                        // SAFETY: run xi of tile row i, read-only here.
                        unsafe { std::slice::from_raw_parts(run(xi, i).cast_const(), tw) }
                    })
                });
            }
            Step::OutputAdjoint => {
                // SAFETY: as `plane`; read-only in this step.
                let dy = unsafe { std::slice::from_raw_parts(plane, h * w) };
                output_adjoint(b, dy, h, w, th, |i| {
                    std::array::from_fn(|xi| {
                        // SAFETY: run xi of tile row i: this task's
                        // channel and sample, disjoint from the other 15,
                        // written by this task only.
                        unsafe { std::slice::from_raw_parts_mut(run(xi, i), tw) }
                    })
                });
            }
        }
    };
    // Chunks of planes of about CHUNK elements each: a small plane (the
    // CNN example's 8x8) is too little work to be a task of its own, and
    // the scratch is allocated once per chunk.
    let planes = n * ch;
    let per = CHUNK.div_ceil((h * w).max(1)).max(1);
    par_for(planes.div_ceil(per), |chunk| {
        let mut b = Bufs::new(th, tw);
        for p in chunk * per..((chunk + 1) * per).min(planes) {
            plane_step(p, &mut b);
        }
    });
}

/// Elements (of a spatial plane) per parallel task.
const CHUNK: usize = 1 << 14;

/// `N` values of `make` (nest it for the 2-d groups of vectors).
fn vecs<T, const N: usize>(make: impl Fn() -> T) -> [T; N] {
    std::array::from_fn(|_| make())
}

/// The scratch of one task (a chunk of planes), for a grid of `th x tw`
/// tiles: allocated once per chunk, each step using its own part.
struct Bufs {
    split: Split,
    /// `input`: `B^T` down a tile row's 4 rows, per parity and element.
    t: [[Vec<f32>; 4]; 2],
    /// `input_adjoint`: `B` down the tiles' rows, per row and column.
    p: [[Vec<f32>; 4]; 4],
    /// `input_adjoint`: `B` along a row's middle columns.
    q: [Vec<f32>; 2],
    /// `output`: `A^T` down the tiles' rows; `output_adjoint`: `A` along
    /// the tiles' two rows.
    u: [[Vec<f32>; 4]; 2],
    /// `output`: a row's even and odd outputs.
    eo: [Vec<f32>; 2],
}

impl Bufs {
    fn new(th: usize, tw: usize) -> Self {
        let row = |len: usize| move || vec![0f32; len];
        Bufs {
            split: Split::zeros(2 * th + 2, tw),
            t: vecs(|| vecs(row(tw + 1))),
            p: vecs(|| vecs(row(tw))),
            q: vecs(row(tw)),
            u: vecs(|| vecs(row(tw))),
            eo: vecs(row(tw)),
        }
    }
}

/// A padded plane of `rows` rows kept as its even and odd columns,
/// `half = tw + 1` of each per row: column `2k` is `even[row][k]`, `2k + 1`
/// is `odd[row][k]`.
struct Split {
    even: Vec<f32>,
    odd: Vec<f32>,
    half: usize,
}

impl Split {
    fn zeros(rows: usize, tw: usize) -> Self {
        let half = tw + 1;
        Split {
            even: vec![0.0; rows * half],
            odd: vec![0.0; rows * half],
            half,
        }
    }
    fn clear(&mut self) {
        self.even.fill(0.0);
        self.odd.fill(0.0);
    }
    fn row(&self, parity: usize, r: usize) -> &[f32] {
        let v = if parity == 0 { &self.even } else { &self.odd };
        &v[r * self.half..(r + 1) * self.half]
    }
    fn row_mut(&mut self, parity: usize, r: usize) -> &mut [f32] {
        let v = if parity == 0 {
            &mut self.even
        } else {
            &mut self.odd
        };
        &mut v[r * self.half..(r + 1) * self.half]
    }
}

/// `V = B^T d B` of the tiles of one plane `x` (`h x w`, zero-padded by
/// `pad` before and to `2 th + 2` rows, `2 tw + 2` columns after); `runs(i)`
/// gives tile row `i`'s 16 output runs.
#[allow(clippy::too_many_arguments)]
fn input<'a>(
    b: &mut Bufs,
    x: &[f32],
    h: usize,
    w: usize,
    th: usize,
    pad: [usize; 2],
    runs: impl Fn(usize) -> [&'a mut [f32]; 16],
) {
    let Bufs { split: s, t, .. } = b;
    s.clear();
    for y in 0..h {
        let src = &x[y * w..(y + 1) * w];
        for (parity, start) in [(0, pad[1] % 2), (1, 1 - pad[1] % 2)] {
            // Input column xc lands on padded column xc + pad[1]: those
            // of this parity are xc = start, start + 2, ...
            let first = (start + pad[1]) / 2;
            let dst = s.row_mut(parity, y + pad[0]);
            for (d, v) in dst[first..]
                .iter_mut()
                .zip(src.iter().skip(start).step_by(2))
            {
                *d = *v;
            }
        }
    }
    // t[parity][a]: B^T down the 4 rows of the tile row, per column.
    for i in 0..th {
        for (parity, tp) in t.iter_mut().enumerate() {
            let r: [&[f32]; 4] = std::array::from_fn(|k| s.row(parity, 2 * i + k));
            zip2(&mut tp[0], r[0], r[2], |a, b| a - b);
            zip2(&mut tp[1], r[1], r[2], |a, b| a + b);
            zip2(&mut tp[2], r[2], r[1], |a, b| a - b);
            zip2(&mut tp[3], r[1], r[3], |a, b| a - b);
        }
        let mut out = runs(i);
        for a in 0..4 {
            let (e, o) = (&t[0][a], &t[1][a]);
            let [o0, o1, o2, o3] = &mut out[4 * a..4 * a + 4] else {
                unreachable!("four runs")
            };
            zip2(o0, e, &e[1..], |a, b| a - b);
            zip2(o1, o, &e[1..], |a, b| a + b);
            zip2(o2, &e[1..], o, |a, b| a - b);
            zip2(o3, o, &o[1..], |a, b| a - b);
        }
    }
}

/// `dx` (one `h x w` plane) from `dV`: `B dV B^T` of every tile added into
/// a padded plane, whose inner `h x w` is then `dx`; `runs(i)` gives tile
/// row `i`'s 16 runs of `dV`.
#[allow(clippy::too_many_arguments)]
fn input_adjoint<'a>(
    b: &mut Bufs,
    dx: &mut [f32],
    h: usize,
    w: usize,
    th: usize,
    pad: [usize; 2],
    runs: impl Fn(usize) -> [&'a [f32]; 16],
) {
    // p[r][b]: B down the tile's rows, per column b; q: B along a row's
    // middle columns (the outer two are p[r][0] and -p[r][3]).
    let Bufs { split: s, p, q, .. } = b;
    s.clear();
    for i in 0..th {
        let dv = runs(i);
        for b in 0..4 {
            let (v0, v1, v2, v3) = (dv[b], dv[4 + b], dv[8 + b], dv[12 + b]);
            p[0][b].copy_from_slice(v0);
            zip3(&mut p[1][b], v1, v2, v3, |a, b, c| a - b + c);
            zip3(&mut p[2][b], v1, v2, v0, |a, b, c| a + b - c);
            zip2(&mut p[3][b], v3, v3, |a, _| -a);
        }
        for (r, pr) in p.iter().enumerate() {
            // B along the row: the tile's 4 columns.
            zip3(&mut q[0], &pr[1], &pr[2], &pr[3], |a, b, c| a - b + c);
            zip3(&mut q[1], &pr[1], &pr[2], &pr[0], |a, b, c| a + b - c);
            // The tile's columns 2j, 2j + 1, 2j + 2, 2j + 3 are even[j],
            // odd[j], even[j + 1], odd[j + 1] of padded row 2i + r.
            let y = 2 * i + r;
            let add = |dst: &mut [f32], src: &[f32], sign: f32| {
                for (d, v) in dst.iter_mut().zip(src) {
                    *d += sign * v;
                }
            };
            add(s.row_mut(0, y), &pr[0], 1.0);
            add(s.row_mut(1, y), &q[0], 1.0);
            add(&mut s.row_mut(0, y)[1..], &q[1], 1.0);
            add(&mut s.row_mut(1, y)[1..], &pr[3], -1.0);
        }
    }
    for y in 0..h {
        let dst = &mut dx[y * w..(y + 1) * w];
        for (parity, start) in [(0, pad[1] % 2), (1, 1 - pad[1] % 2)] {
            let first = (start + pad[1]) / 2;
            let src = &s.row(parity, y + pad[0])[first..];
            for (d, v) in dst.iter_mut().skip(start).step_by(2).zip(src) {
                *d = *v;
            }
        }
    }
}

/// One `h x w` output plane: `A^T M A` of every tile plus `bias`, cut to
/// the plane; `runs(i)` gives tile row `i`'s 16 runs of `M`.
#[allow(clippy::too_many_arguments)]
fn output<'a>(
    b: &mut Bufs,
    y: &mut [f32],
    h: usize,
    w: usize,
    th: usize,
    bias: f32,
    runs: impl Fn(usize) -> [&'a [f32]; 16],
) {
    // u[r][b]: A^T down the tile's rows, per column b.
    let Bufs {
        u, eo: [even, odd], ..
    } = b;
    for i in 0..th {
        let m = runs(i);
        for b in 0..4 {
            zip3(&mut u[0][b], m[b], m[4 + b], m[8 + b], |a, b, c| a + b + c);
            zip3(&mut u[1][b], m[4 + b], m[8 + b], m[12 + b], |a, b, c| {
                a - b - c
            });
        }
        for (r, ur) in u.iter().enumerate() {
            let row = 2 * i + r;
            if row >= h {
                break;
            }
            zip3(even, &ur[0], &ur[1], &ur[2], |a, b, c| a + b + c + bias);
            zip3(odd, &ur[1], &ur[2], &ur[3], |a, b, c| a - b - c + bias);
            let dst = &mut y[row * w..(row + 1) * w];
            let mut pairs = dst.chunks_exact_mut(2);
            for ((d, e), o) in (&mut pairs).zip(even.iter()).zip(odd.iter()) {
                d[0] = *e;
                d[1] = *o;
            }
            if let [last] = pairs.into_remainder() {
                *last = even[w / 2];
            }
        }
    }
}

/// `dM = A dy A^T` of every tile of one `h x w` plane `dy` (zero past its
/// edges); `runs(i)` gives tile row `i`'s 16 output runs.
fn output_adjoint<'a>(
    b: &mut Bufs,
    dy: &[f32],
    h: usize,
    w: usize,
    th: usize,
    runs: impl Fn(usize) -> [&'a mut [f32]; 16],
) {
    // c[r][b]: A along the tile's two rows r, per column b of its 4.
    let Bufs { u: c, .. } = b;
    for i in 0..th {
        for (r, cr) in c.iter_mut().enumerate() {
            let row = 2 * i + r;
            let [c0, c1, c2, c3] = cr;
            c0.fill(0.0);
            c3.fill(0.0);
            if row < h {
                let src = &dy[row * w..(row + 1) * w];
                for (e, v) in c0.iter_mut().zip(src.iter().step_by(2)) {
                    *e = *v;
                }
                for (o, v) in c3.iter_mut().zip(src.iter().skip(1).step_by(2)) {
                    *o = *v;
                }
            }
            // c0 = even, c3 = odd so far: [e, e + o, e - o, -o].
            zip2(c1, c0, c3, |e, o| e + o);
            zip2(c2, c0, c3, |e, o| e - o);
            for v in c3.iter_mut() {
                *v = -*v;
            }
        }
        let out = runs(i);
        for b in 0..4 {
            let (c0, c1) = (&c[0][b], &c[1][b]);
            out[b].copy_from_slice(c0);
            zip2(out[4 + b], c0, c1, |a, b| a + b);
            zip2(out[8 + b], c0, c1, |a, b| a - b);
            zip2(out[12 + b], c1, c1, |a, _| -a);
        }
    }
}

/// The kernel transform `U = G g G^T` (`forward`: `w` `[o, c, 3, 3]` to
/// `u` `[16, o, c]`) or its adjoint `dg = G^T dU G` (`u` to `w`). Both
/// contiguous; the dispatcher checked them.
pub(crate) fn weights(forward: bool, w: &Operand, u: &Operand, o: usize, c: usize) {
    let (pw, pu) = (
        SendPtr(ptr::<f32>(w.storage)),
        SendPtr(ptr::<f32>(u.storage)),
    );
    let (wo, uo) = (w.layout.offset(), u.layout.offset());
    let oc = o * c;
    par_for(o, |oi| {
        for ci in 0..c {
            let k = oi * c + ci;
            // SAFETY: kernel (oi, ci) of the contiguous [o, c, 3, 3]
            // weight and its 16 elements at stride o c in the contiguous
            // [16, o, c] transform: this task's `oi` only writes them.
            unsafe {
                let wk = pw.get().add(wo + k * 9);
                let uk = pu.get().add(uo + k);
                if forward {
                    let gk =
                        std::array::from_fn(|r| std::array::from_fn(|s| wk.add(r * 3 + s).read()));
                    for (xi, v) in sep(gk, g).iter().flatten().enumerate() {
                        uk.add(xi * oc).write(*v);
                    }
                } else {
                    let du = std::array::from_fn(|r| {
                        std::array::from_fn(|s| uk.add((r * 4 + s) * oc).read())
                    });
                    for (j, v) in sep(du, gt).iter().flatten().enumerate() {
                        wk.add(j).write(*v);
                    }
                }
            }
        }
    });
}
