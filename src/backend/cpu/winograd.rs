//! The Winograd F(2x2, 3x3) transforms on the CPU (see
//! `crate::backend::winograd` for what each computes). f32 only; every
//! plane (sample and channel) is a unit of parallel work, and writes only
//! its own elements.
//!
//! The tile transforms work on a whole plane at once, as loops over
//! contiguous runs that the compiler vectorises at the CPU's SIMD level
//! (`simd::run` per chunk of planes): a plane's tiles of one transformed
//! element `xi` are one run of `th (tw + 1)` values in the `[16, ch, T]`
//! operand (rows of tiles `tw + 1` apart, the last of each a dummy), and
//! the padded input plane is kept as four arrays, its even and odd rows
//! and columns apart ([`Split`]), so that the 4 rows and 4 columns of
//! every tile are the same four arrays at offsets 0, 1, `tw + 1` and `tw
//! + 2`: every step is an add or a subtract of shifted runs. (Tile by
//! tile, with the 16 values of a tile gathered into an array, the
//! transforms took as long as the 16 products; row of tiles by row of
//! tiles, the runs were 16-17 values at 32x32 maps and the transforms
//! ran at SSE2, two fifths of `conv2d`'s forward pass: Note [Winograd] in
//! `bench/results/ops-why.md`.)

use super::ptr;
use super::simd;
use super::strided::SendPtr;
use super::thread_pool::par_for;
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
/// and the transformed one (`[16, ch, T]`, rows `rs` elements apart, `T =
/// n th (tw + 1)`: see [`TileGrid::row_stride`]), with the optional bias
/// `[ch]` for `Step::Output`. The dispatcher checked dtypes, shapes and
/// layouts and holds the locks.
pub(crate) fn tiles(
    step: Step,
    spatial: &Operand,
    tiled: &Operand,
    bias: Option<&Operand>,
    grid: &TileGrid,
    rs: usize,
) {
    let job = Planes {
        step,
        ps: SendPtr(ptr::<f32>(spatial.storage)),
        pt: SendPtr(ptr::<f32>(tiled.storage)),
        so: spatial.layout.offset(),
        to: tiled.layout.offset(),
        pb: bias.map(|b| (SendPtr(ptr::<f32>(b.storage)), b.layout.offset())),
        g: *grid,
        rs,
    };
    // Chunks of planes of about CHUNK elements each: a small plane (the
    // CNN example's 8x8) is too little work to be a task of its own, and
    // the scratch is allocated once per chunk. Each chunk runs at the
    // CPU's SIMD level: a plane's tiles of one element are one run of `th
    // (tw + 1)` values, long enough for the widest vectors.
    let planes = grid.n * grid.ch;
    let per = CHUNK.div_ceil((grid.h * grid.w).max(1)).max(1);
    par_for(planes.div_ceil(per), |chunk| {
        let first = chunk * per;
        simd::run(PlaneChunk {
            job: &job,
            planes: first..((chunk + 1) * per).min(planes),
        });
    });
}

/// Elements (of a spatial plane) per parallel task.
const CHUNK: usize = 1 << 14;

/// What every plane of one [`tiles`] call shares.
struct Planes {
    step: Step,
    ps: SendPtr<f32>,
    pt: SendPtr<f32>,
    so: usize,
    to: usize,
    pb: Option<(SendPtr<f32>, usize)>,
    g: TileGrid,
    rs: usize,
}

/// A chunk of planes of one [`tiles`] call, as a [`simd::Kernel`].
struct PlaneChunk<'a> {
    job: &'a Planes,
    planes: std::ops::Range<usize>,
}

impl simd::Kernel for PlaneChunk<'_> {
    type Output = ();
    #[inline(always)]
    fn call<const FMA: bool>(self) {
        let g = &self.job.g;
        let mut b = Bufs::new(g.th, g.row_stride());
        for p in self.planes {
            self.job.plane(p, &mut b);
        }
    }
}

impl Planes {
    /// Plane `p` (sample `p / ch`, channel `p % ch`) of the step.
    #[inline(always)]
    fn plane(&self, p: usize, b: &mut Bufs) {
        let TileGrid {
            ch, h, w, th, pad, ..
        } = self.g;
        let (ni, ci) = (p / ch, p % ch);
        let len = th * self.g.row_stride();
        // Element `xi` of every tile of the plane: one run of `len`.
        let run = |xi: usize| {
            // SAFETY: xi < 16, ci < ch, and the plane's tiles ni len ..
            // (ni + 1) len lie within T = n len <= rs: inside the operand
            // the dispatcher checked.
            unsafe {
                self.pt
                    .get()
                    .add(self.to + (xi * ch + ci) * self.rs + ni * len)
            }
        };
        // SAFETY: plane `p` of the contiguous [n, ch, h, w] operand (h w
        // elements), which this task alone touches in this step.
        let plane = unsafe { self.ps.get().add(self.so + p * h * w) };
        match self.step {
            Step::Input => {
                // SAFETY: as `plane`; read-only in this step.
                let x = unsafe { std::slice::from_raw_parts(plane, h * w) };
                let out = std::array::from_fn(|xi| {
                    // SAFETY: run xi of this task's plane, disjoint from
                    // the other 15 and from every other task's, written by
                    // this task only.
                    unsafe { std::slice::from_raw_parts_mut(run(xi), len) }
                });
                input(b, x, h, w, pad, out);
            }
            Step::InputAdjoint => {
                // SAFETY: as `plane`; written by this task only.
                let dx = unsafe { std::slice::from_raw_parts_mut(plane, h * w) };
                // SAFETY: run xi of this task's plane, read-only here.
                let dv = std::array::from_fn(|xi| unsafe {
                    std::slice::from_raw_parts(run(xi).cast_const(), len)
                });
                input_adjoint(b, dx, h, w, pad, dv);
            }
            Step::Output => {
                // SAFETY: element ci of the [ch] bias.
                let bias = self
                    .pb
                    .map_or(0.0, |(pb, bo)| unsafe { pb.get().add(bo + ci).read() });
                // SAFETY: as `plane`; written by this task only.
                let y = unsafe { std::slice::from_raw_parts_mut(plane, h * w) };
                // SAFETY: run xi of this task's plane, read-only here.
                let m = std::array::from_fn(|xi| unsafe {
                    std::slice::from_raw_parts(run(xi).cast_const(), len)
                });
                output(b, y, h, w, bias, m);
            }
            Step::OutputAdjoint => {
                // SAFETY: as `plane`; read-only in this step.
                let dy = unsafe { std::slice::from_raw_parts(plane, h * w) };
                let out = std::array::from_fn(|xi| {
                    // SAFETY: as for `Step::Input`.
                    unsafe { std::slice::from_raw_parts_mut(run(xi), len) }
                });
                output_adjoint(b, dy, h, w, out);
            }
        }
    }
}

/// `N` values of `make` (nest it for the 2-d groups of vectors).
fn vecs<T, const N: usize>(make: impl Fn() -> T) -> [T; N] {
    std::array::from_fn(|_| make())
}

/// The scratch of one task (a chunk of planes) for a grid of `th` rows of
/// tiles, `half = tw + 1` apart: allocated once per chunk. Every vector
/// is one value per tile of the plane (`th half`), plus one (the last
/// tile's right neighbour, read by the shifted runs).
struct Bufs {
    split: Split,
    /// `B^T` (`input`) or `B` (`input_adjoint`) down the tiles' rows, or
    /// `A^T` / `A` (`output`, `output_adjoint`): per parity or row, per
    /// element.
    t: [[Vec<f32>; 4]; 4],
    /// `input_adjoint`: `B` along the tiles' middle columns.
    q: [Vec<f32>; 2],
}

impl Bufs {
    fn new(th: usize, half: usize) -> Self {
        let run = move || vec![0f32; th * half + 1];
        Bufs {
            split: Split::zeros(th, half),
            t: vecs(|| vecs(run)),
            q: vecs(run),
        }
    }
}

/// A padded plane of `2 th + 2` rows kept as four arrays: padded row `2 d +
/// q` (`q` its phase) and column `2 k + p` (`p` its parity) is element `d
/// half + k` of `v[q][p]`, `half = tw + 1` columns of each parity per row.
/// Tile `(i, j)` reads rows `2 i .. 2 i + 3`, that is phases 0 and 1 at `d =
/// i` and `d = i + 1`, and columns `2 j .. 2 j + 3`, that is parities 0
/// and 1 at `k = j` and `k = j + 1`: for every tile of the plane at once,
/// runs of `th half` values at offsets 0, 1, `half` and `half + 1`.
struct Split {
    v: [[Vec<f32>; 2]; 2],
    half: usize,
}

impl Split {
    fn zeros(th: usize, half: usize) -> Self {
        let len = (th + 1) * half + 1;
        Split {
            v: vecs(|| vecs(|| vec![0.0; len])),
            half,
        }
    }
    #[inline(always)]
    fn clear(&mut self) {
        for v in self.v.iter_mut().flatten() {
            v.fill(0.0);
        }
    }
    /// Padded row `r`'s values of parity `p` (`half` of them).
    #[inline(always)]
    fn row_mut(&mut self, p: usize, r: usize) -> &mut [f32] {
        let d = r / 2;
        &mut self.v[r % 2][p][d * self.half..(d + 1) * self.half]
    }
    #[inline(always)]
    fn row(&self, p: usize, r: usize) -> &[f32] {
        let d = r / 2;
        &self.v[r % 2][p][d * self.half..(d + 1) * self.half]
    }
}

/// `V = B^T d B` of the tiles of one plane `x` (`h x w`, zero-padded by
/// `pad` before and as far as the tiles reach after); `out[xi]` is element
/// `xi` of every tile (the dummy tile past each row's end too: finite, as
/// it reads the padded plane only).
#[inline(always)]
fn input(b: &mut Bufs, x: &[f32], h: usize, w: usize, pad: [usize; 2], out: [&mut [f32]; 16]) {
    let Bufs { split: s, t, .. } = b;
    let half = s.half;
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
    let len = out[0].len();
    // t[parity][a]: B^T down the 4 rows of every tile, per column.
    for (parity, tp) in t.iter_mut().take(2).enumerate() {
        let (e, o) = (&s.v[0][parity], &s.v[1][parity]);
        let (r0, r1, r2, r3) = (
            &e[..len],
            &o[..len],
            &e[half..half + len],
            &o[half..half + len],
        );
        zip2(&mut tp[0], r0, r2, |a, b| a - b);
        zip2(&mut tp[1], r1, r2, |a, b| a + b);
        zip2(&mut tp[2], r2, r1, |a, b| a - b);
        zip2(&mut tp[3], r1, r3, |a, b| a - b);
    }
    let mut out = out;
    for a in 0..4 {
        let (e, o) = (&t[0][a][..len + 1], &t[1][a][..len + 1]);
        let [o0, o1, o2, o3] = &mut out[4 * a..4 * a + 4] else {
            unreachable!("four runs")
        };
        zip2(o0, e, &e[1..], |a, b| a - b);
        zip2(o1, o, &e[1..], |a, b| a + b);
        zip2(o2, &e[1..], o, |a, b| a - b);
        zip2(o3, o, &o[1..], |a, b| a - b);
    }
}

/// `dx` (one `h x w` plane) from `dV`: `B dV B^T` of every tile added into
/// a padded plane, whose inner `h x w` is then `dx`; `dv[xi]` is element
/// `xi` of every tile (the dummy tiles' must be zero: they are added into
/// the first column of the next row of tiles, `weight_tiles`' products of
/// a zero `dM` column).
#[inline(always)]
fn input_adjoint(
    b: &mut Bufs,
    dx: &mut [f32],
    h: usize,
    w: usize,
    pad: [usize; 2],
    dv: [&[f32]; 16],
) {
    // p[r][b]: B down the tile's rows, per column b; q: B along the
    // tiles' middle columns (the outer two are p[r][0] and -p[r][3]).
    let Bufs { split: s, t: p, q } = b;
    let half = s.half;
    let len = dv[0].len();
    s.clear();
    for b in 0..4 {
        let (v0, v1, v2, v3) = (dv[b], dv[4 + b], dv[8 + b], dv[12 + b]);
        p[0][b][..len].copy_from_slice(v0);
        zip3(&mut p[1][b], v1, v2, v3, |a, b, c| a - b + c);
        zip3(&mut p[2][b], v1, v2, v0, |a, b, c| a + b - c);
        zip2(&mut p[3][b], v3, v3, |a, _| -a);
    }
    let add = |dst: &mut [f32], src: &[f32], sign: f32| {
        for (d, v) in dst.iter_mut().zip(src) {
            *d += sign * v;
        }
    };
    for (r, pr) in p.iter().enumerate() {
        // B along the row: the tile's 4 columns.
        zip3(&mut q[0], &pr[1], &pr[2], &pr[3], |a, b, c| a - b + c);
        zip3(&mut q[1], &pr[1], &pr[2], &pr[0], |a, b, c| a + b - c);
        // Row r of tile (i, j) is padded row 2 i + r: phase r % 2 at d =
        // i + r / 2. Its columns 2j, 2j + 1, 2j + 2, 2j + 3 are parities
        // 0, 1, 0, 1 at k = j, j, j + 1, j + 1.
        let off = (r / 2) * half;
        let [even, odd] = &mut s.v[r % 2];
        add(&mut even[off..off + len], &pr[0][..len], 1.0);
        add(&mut odd[off..off + len], &q[0][..len], 1.0);
        add(&mut even[off + 1..off + 1 + len], &q[1][..len], 1.0);
        add(&mut odd[off + 1..off + 1 + len], &pr[3][..len], -1.0);
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
/// the plane; `m[xi]` is element `xi` of every tile (the dummy tiles'
/// ignored).
#[inline(always)]
fn output(b: &mut Bufs, y: &mut [f32], h: usize, w: usize, bias: f32, m: [&[f32]; 16]) {
    // u[r][b]: A^T down the tile's rows, per column b; then each row's
    // even and odd outputs (t[2 + r][0], t[2 + r][1]).
    let Bufs { t, split, .. } = b;
    let half = split.half;
    let len = m[0].len();
    let [u0, u1, eo0, eo1] = t;
    for b in 0..4 {
        zip3(&mut u0[b], m[b], m[4 + b], m[8 + b], |a, b, c| a + b + c);
        zip3(&mut u1[b], m[4 + b], m[8 + b], m[12 + b], |a, b, c| {
            a - b - c
        });
    }
    for (u, eo) in [(&*u0, &mut *eo0), (&*u1, &mut *eo1)] {
        let [even, odd, ..] = eo;
        zip3(&mut even[..len], &u[0], &u[1], &u[2], |a, b, c| {
            a + b + c + bias
        });
        zip3(&mut odd[..len], &u[1], &u[2], &u[3], |a, b, c| {
            a - b - c + bias
        });
    }
    for row in 0..h {
        let eo = if row % 2 == 0 { &*eo0 } else { &*eo1 };
        let base = (row / 2) * half;
        let (even, odd) = (&eo[0][base..base + half], &eo[1][base..base + half]);
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

/// `dM = A dy A^T` of every tile of one `h x w` plane `dy` (zero past its
/// edges); `out[xi]` is element `xi` of every tile, zero in the dummy
/// tiles (so that `dU = dM V^T` gets nothing from them).
#[inline(always)]
fn output_adjoint(b: &mut Bufs, dy: &[f32], h: usize, w: usize, out: [&mut [f32]; 16]) {
    // c[r][b]: A along the tile's two rows r, per column b of its 4.
    let Bufs { t: c, split, .. } = b;
    let half = split.half;
    let len = out[0].len();
    let th = len / half;
    for (r, cr) in c.iter_mut().take(2).enumerate() {
        let [c0, c1, c2, c3] = cr;
        c0.fill(0.0);
        c3.fill(0.0);
        for i in 0..th {
            let row = 2 * i + r;
            if row >= h {
                break;
            }
            let src = &dy[row * w..(row + 1) * w];
            let base = i * half;
            for (e, v) in c0[base..base + half].iter_mut().zip(src.iter().step_by(2)) {
                *e = *v;
            }
            for (o, v) in c3[base..base + half]
                .iter_mut()
                .zip(src.iter().skip(1).step_by(2))
            {
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
    for (b, (c0, c1)) in c[0].iter().zip(&c[1]).enumerate() {
        let (c0, c1) = (&c0[..len], &c1[..len]);
        let [o0, o1, o2, o3] = [0, 4, 8, 12].map(|k| k + b);
        out[o0].copy_from_slice(c0);
        zip2(out[o1], c0, c1, |a, b| a + b);
        zip2(out[o2], c0, c1, |a, b| a - b);
        zip2(out[o3], c1, c1, |a, _| -a);
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
