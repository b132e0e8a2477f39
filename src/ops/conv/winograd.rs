//! A stride-1 3x3 convolution as Winograd's F(2x2, 3x3) (Lavin and Gray,
//! 2016): 16 products `[O, C] x [C, T]` over the `T = N ceil(OH/2)
//! ceil(OW/2)` output tiles instead of one `[O, 9 C] x [9 C, N OH OW]`,
//! 2.25 times fewer multiplications. The transforms are
//! `backend::winograd`'s; the products are this crate's batched matmul
//! (small products run one per thread: `backend::cpu::matmul`).
//!
//! The backward pass is the exact adjoint of the same computation: `dM =
//! A dy A^T` of the output's gradient, then `dV = U^T dM` (the input's
//! gradient through `B dV B^T`) and `dU = dM V^T` (the weight's through
//! `G^T dU G`).
//!
//! When: f32 tensors on the CPU, one group, a 3x3 kernel, stride and
//! dilation 1, at least [`MIN_CHANNELS`] input and output channels and an
//! output at least [`MIN_WIDTH`] wide ([`applies`]), unless
//! `TENSORSCOPE_CONV=im2col`. Elsewhere im2col. CUDA keeps im2col and cuBLAS: no GPU
//! has measured a Winograd path there. f64 keeps im2col too: its users
//! ask for the most accurate sums, and Winograd's transforms round a few
//! more times (F(2x2, 3x3) multiplies by 1/2 and +-1 only, so f32's error
//! stays within a few ulps of the sum's magnitude: the conv tests and the
//! differential suite hold it to the tolerance im2col had).
//!
//! The measurements behind the choice, the thresholds, the chunks of samples,
//! the one transform of `dy` for both gradients and the transforms over whole
//! planes: Note [Winograd] in `bench/results/ops-why.md`.

use super::{workspace, Geometry};
use crate::backend::winograd::{self as wino, Step, TileGrid};
use crate::backend::Operand;
use crate::dtype::DType;
use crate::error::Result;
use crate::tensor::Tensor;
use std::sync::LazyLock;

/// The fewest input and output channels for which Winograd runs: the 16
/// products are `C` deep (im2col's one is `9 C`), and the transforms'
/// cost per tile grows with `C + O` while the products' saving grows
/// with `C O`.
pub(super) const MIN_CHANNELS: usize = 32;

/// The narrowest output for which Winograd runs: the transforms work on
/// rows of `ceil(OW / 2)` tiles, and below 8 a row is too short to
/// vectorise. On the CNN example's 8x8 and 4x4 layers Winograd's transforms
/// and products took longer than im2col's product, and the training step
/// twice as long (Note [Winograd] in `bench/results/ops-why.md`).
pub(super) const MIN_WIDTH: usize = 16;

/// Whether Winograd may run at all: unless `TENSORSCOPE_CONV=im2col`
/// (read once), which keeps every convolution on im2col, to compare the
/// two on one machine or to take im2col's rounding.
static ENABLED: LazyLock<bool> =
    LazyLock::new(|| std::env::var("TENSORSCOPE_CONV").map_or(true, |v| v.trim() != "im2col"));

/// Whether [`forward`], [`input_grad`] and [`weight_grad`] compute the
/// convolution `g` of the tensor `x` (see the module docs).
pub(super) fn applies(g: &Geometry, x: &Tensor) -> bool {
    // The transformed operands' sizes must be representable (an input of
    // zero height can have any batch size): else im2col, which reports
    // the allocation it cannot make.
    let sizes = || -> Option<usize> {
        let t =
            g.n.checked_mul(g.oh.div_ceil(2))?
                .checked_mul(g.ow.div_ceil(2) + 1)?;
        t.checked_mul(g.c.max(g.o))?.checked_mul(16 * 4)
    };
    *ENABLED
        && sizes().is_some_and(|b| b <= isize::MAX as usize)
        && x.device().is_cpu()
        && x.dtype() == DType::F32
        && g.g == 1
        && (g.kh, g.kw) == (3, 3)
        && g.stride == [1, 1]
        && g.dil == [1, 1]
        && g.c >= MIN_CHANNELS
        && g.o >= MIN_CHANNELS
        && g.ow >= MIN_WIDTH
}

const OP: &str = "conv2d";

/// The tile grid over `[N, ch, h, w]` for the output `OH x OW` of `g`.
fn grid(g: &Geometry, ch: usize, h: usize, w: usize, pad: [usize; 2]) -> TileGrid {
    TileGrid {
        n: g.n,
        ch,
        h,
        w,
        th: g.oh.div_ceil(2),
        tw: g.ow.div_ceil(2),
        pad,
    }
}

/// An uninitialised `[16, ch, T]` operand (rows padded as the im2col
/// columns' are: `conv::padded_row`).
fn transformed(ch: usize, t: usize, like: &Tensor) -> Result<Tensor> {
    match workspace(16, ch, t, like)? {
        Some((m, _)) => Ok(m),
        None => Tensor::empty(&[16, ch, t], like.dtype(), like.device()),
    }
}

/// The `[16, ch, T]` transform (`step`: `Input` or `OutputAdjoint`) of
/// every tile of the spatial `t` `[N, ch, h, w]` (zero-padded by `pad`).
fn to_tiles(t: &Tensor, step: Step, grid: TileGrid) -> Result<Tensor> {
    let t = t.contiguous()?;
    let tiles = grid
        .tiles()
        .ok_or_else(|| crate::error::Error::arg(OP, "internal: Winograd tile grid overflows"))?;
    let out = transformed(grid.ch, tiles, &t)?;
    wino::tiles(OP, step, &Operand::of(&t), &Operand::of(&out), None, &grid)?;
    Ok(out)
}

/// `V = B^T d B` of every tile of the input `x` `[N, C, H, W]`.
fn input_tiles(x: &Tensor, g: &Geometry) -> Result<Tensor> {
    to_tiles(x, Step::Input, grid(g, g.c, g.h, g.w, g.lo))
}

/// `dM = A dy A^T` of every tile of the output's gradient `dy`.
fn output_grad_tiles(dy: &Tensor, g: &Geometry) -> Result<Tensor> {
    to_tiles(dy, Step::OutputAdjoint, grid(g, g.o, g.oh, g.ow, [0, 0]))
}

/// `U = G w G^T` `[16, O, C]` of the weight `[O, C, 3, 3]`.
fn weight_tiles(w: &Tensor, g: &Geometry) -> Result<Tensor> {
    let w = w.contiguous()?;
    let u = Tensor::empty(&[16, g.o, g.c], w.dtype(), w.device())?;
    wino::weights(OP, true, &Operand::of(&w), &Operand::of(&u))?;
    Ok(u)
}

/// Bytes of one transformed operand (`[16, ch, T]`) per chunk of samples:
/// the passes below run chunk by chunk, so that a chunk's transformed
/// input and products stay in the cores' caches between the transform, the
/// 16 products and the inverse transform. In one piece, `x[8, 64, 32, 32]`
/// (a 2 MiB input) made two 8 MiB operands, each written and read once
/// from the last-level cache or memory, and `perf` put 41% of the forward
/// pass in the transforms, waiting on their loads.
const CHUNK_BYTES: usize = 1 << 20;

/// The samples `n0 .. n0 + nb` of each chunk of `g` (one at least): as
/// many as keep `[16, max(C, O), nb tiles]` within [`CHUNK_BYTES`].
fn chunks(g: &Geometry) -> impl Iterator<Item = (usize, usize)> + use<> {
    let per_sample = 16 * 4 * g.c.max(g.o) * g.oh.div_ceil(2) * (g.ow.div_ceil(2) + 1);
    let per = (CHUNK_BYTES / per_sample.max(1)).clamp(1, g.n.max(1));
    let n = g.n;
    (0..n).step_by(per).map(move |n0| (n0, per.min(n - n0)))
}

/// `g` for the samples of one chunk, and `t` narrowed to them.
fn chunk_of(t: &Tensor, g: &Geometry, (n0, nb): (usize, usize)) -> Result<(Tensor, Geometry)> {
    Ok((t.narrow(0, n0, nb)?, Geometry { n: nb, ..*g }))
}

/// The forward pass: `[N, O, OH, OW]`, chunk by chunk ([`chunks`]).
pub(super) fn forward(x: &Tensor, w: &Tensor, b: Option<&Tensor>, g: &Geometry) -> Result<Tensor> {
    let u = weight_tiles(w, g)?;
    let y = Tensor::empty(&[g.n, g.o, g.oh, g.ow], x.dtype(), x.device())?;
    let b = b.map(Tensor::contiguous).transpose()?;
    let bias = b.as_ref().map(Operand::of);
    for c in chunks(g) {
        let (xc, gc) = chunk_of(x, g, c)?;
        let v = input_tiles(&xc, &gc)?;
        let m = u.matmul(&v)?; // [16, O, T]
        drop(v);
        let yc = y.narrow(0, c.0, c.1)?;
        let grid = grid(&gc, g.o, g.oh, g.ow, [0, 0]);
        wino::tiles(
            OP,
            Step::Output,
            &Operand::of(&yc),
            &Operand::of(&m),
            bias.as_ref(),
            &grid,
        )?;
    }
    Ok(y)
}

/// The input's gradient `[N, C, H, W]`: `B (U^T dM) B^T` summed over the
/// tiles covering each element ([`grads`] without the weight's).
pub(super) fn input_grad(dy: &Tensor, w: &Tensor, g: &Geometry) -> Result<Tensor> {
    let (dx, _) = grads(dy, None, Some(w), g)?;
    dx.ok_or_else(|| crate::error::Error::arg(OP, "internal: no input gradient"))
}

/// The weight's gradient `[O, C, 3, 3]`: `G^T (dM V^T) G` ([`grads`]
/// without the input's).
pub(super) fn weight_grad(dy: &Tensor, x: &Tensor, g: &Geometry) -> Result<Tensor> {
    let (_, dw) = grads(dy, Some(x), None, g)?;
    dw.ok_or_else(|| crate::error::Error::arg(OP, "internal: no weight gradient"))
}

/// The input's gradient (when the weight `w` is given) and the weight's
/// (when the input `x` is), chunk by chunk ([`chunks`]), from one `dM = A
/// dy A^T` per chunk: `dx = B (U^T dM) B^T` summed over the tiles covering
/// each element, `dw = G^T (sum of dM V^T) G`.
pub(super) fn grads(
    dy: &Tensor,
    x: Option<&Tensor>,
    w: Option<&Tensor>,
    g: &Geometry,
) -> Result<(Option<Tensor>, Option<Tensor>)> {
    let ut = match w {
        Some(w) => Some(weight_tiles(w, g)?.transpose(1, 2)?),
        None => None,
    };
    let dx = match ut {
        Some(_) => Some(Tensor::empty(
            &[g.n, g.c, g.h, g.w],
            dy.dtype(),
            dy.device(),
        )?),
        None => None,
    };
    let mut du: Option<Tensor> = None;
    for c in chunks(g) {
        let (dyc, gc) = chunk_of(dy, g, c)?;
        let dm = output_grad_tiles(&dyc, &gc)?;
        if let (Some(ut), Some(dx)) = (&ut, &dx) {
            let dv = ut.matmul(&dm)?; // [16, C, T]
            let dxc = dx.narrow(0, c.0, c.1)?;
            let grid = grid(&gc, g.c, g.h, g.w, g.lo);
            wino::tiles(
                OP,
                Step::InputAdjoint,
                &Operand::of(&dxc),
                &Operand::of(&dv),
                None,
                &grid,
            )?;
        }
        if let Some(x) = x {
            let (xc, _) = chunk_of(x, g, c)?;
            let v = input_tiles(&xc, &gc)?;
            let part = dm.matmul(&v.transpose(1, 2)?)?; // [16, O, C]
            drop((dm, v));
            match &mut du {
                None => du = Some(part.contiguous()?),
                Some(acc) => {
                    acc.add_(&part)?;
                }
            }
        }
    }
    let dw = match x {
        Some(_) => {
            let du = match du {
                Some(du) => du,
                None => Tensor::zeros(&[16, g.o, g.c], dy.dtype(), dy.device())?,
            };
            let dw = Tensor::empty(&[g.o, g.c, 3, 3], dy.dtype(), dy.device())?;
            wino::weights(OP, false, &Operand::of(&dw), &Operand::of(&du))?;
            Some(dw)
        }
        None => None,
    };
    Ok((dx, dw))
}
