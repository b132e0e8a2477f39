//! Dispatch of the Winograd F(2x2, 3x3) transforms (`cpu::winograd`), the
//! pieces of a stride-1 3x3 convolution that `ops::conv` runs as 16
//! products of channels instead of one product of `9 C` taps.
//!
//! A convolution's output is cut into 2x2 tiles; tile `(i, j)` of a plane
//! reads the 4x4 patch of the padded input at `(2i, 2j)`. With the
//! constant matrices of Lavin and Gray (2016),
//!
//! ```text
//! B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]
//! G   = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1]
//! A^T = [1 1 1 0; 0 1 -1 -1]
//! ```
//!
//! `y_tile = A^T [ sum_c (G g_oc G^T) * (B^T d_c B) ] A` (`*` elementwise):
//! the sum over channels of each of the 16 elements is a matrix product.
//! The transformed operands are `[16, ch, T]`, `T = n th (tw + 1)` tiles
//! (the tile index runs over samples, rows of tiles, tiles), for the 16
//! elements `xi = 4 r + c` of a tile. Each row of tiles has one dummy tile
//! past its end ([`TileGrid::row_stride`]), so that a plane's tiles of one
//! element are one contiguous run and every transform is a few vector
//! operations over whole planes (per row of tiles, the runs were 16-17
//! values long at a ResNet stage's 32x32 maps: shorter than one AVX-512
//! loop iteration, and the transforms ran at SSE2). The dummy tiles cost
//! `1 / (tw + 1)` more product columns; `V`'s are finite, `dM`'s are zero,
//! so they add nothing to `dU = dM V^T` or to `dx`, and `y` ignores `M`'s.
//!
//! The steps ([`Step`]) and their adjoints, which give the gradients of
//! that same computation (so the backward pass is the exact adjoint of the
//! forward one, not a separately rounded convolution):
//!
//! - `Input`: `V = B^T d B` of every tile of `x` `[n, ch, h, w]` zero-padded
//!   by `pad` before each dimension (and as far as the tiles reach after).
//! - `InputAdjoint`: `dx`, the sum over the tiles covering each input
//!   element of `B dV B^T` (padding dropped); every element written.
//! - `Output`: `y = A^T M A` of every tile, plus the bias, cut to `h x w`.
//! - `OutputAdjoint`: `dM = A dy A^T` of every tile of `dy` (zero past the
//!   edge).
//! - [`weights`]: `U = G g G^T` and its adjoint `dg = G^T dU G`.

use super::{cpu, device_of, Operand};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::storage::lock;

/// One of the tile transforms (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// `x` to `V`.
    Input,
    /// `dV` to `dx`.
    InputAdjoint,
    /// `M` (and the bias) to `y`.
    Output,
    /// `dy` to `dM`.
    OutputAdjoint,
}

/// The tiles over a spatial operand `[n, ch, h, w]`: `th x tw` per plane,
/// tile `(i, j)` at row `2 i - pad[0]`, column `2 j - pad[1]` of it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TileGrid {
    pub n: usize,
    pub ch: usize,
    pub h: usize,
    pub w: usize,
    pub th: usize,
    pub tw: usize,
    /// Zeros before the rows and columns (the input side only).
    pub pad: [usize; 2],
}

impl TileGrid {
    /// Tiles per row of tiles in the transformed operands: `tw` and one
    /// dummy (see the module docs).
    pub(crate) fn row_stride(&self) -> usize {
        self.tw + 1
    }

    /// `T`, the tiles of all planes of one channel: `n th (tw + 1)`, or
    /// `None` past `usize`.
    pub(crate) fn tiles(&self) -> Option<usize> {
        self.n
            .checked_mul(self.th)?
            .checked_mul(self.tw.checked_add(1)?)
    }
}

/// Checks `ops` are f32 and on the CPU (the only backend with the
/// transforms: `ops::conv` picks them for CPU tensors only).
fn f32_on_cpu(op: &'static str, ops: &[&Operand]) -> Result<()> {
    if device_of(op, ops)? != Device::Cpu {
        return Err(Error::arg(
            op,
            "internal: the Winograd transforms run on the CPU only",
        ));
    }
    match ops.iter().find(|o| o.dtype != DType::F32) {
        Some(o) => Err(Error::dtype(op, "float32", o.dtype)),
        None => Ok(()),
    }
}

/// A contiguous operand of exactly `shape`.
fn dense(op: &'static str, o: &Operand, shape: &[usize]) -> Result<()> {
    if o.layout.is_contiguous() && o.layout.shape() == shape {
        Ok(())
    } else {
        Err(Error::shape(
            op,
            shape,
            o.layout.shape(),
            "the Winograd transforms' operands must be contiguous",
        ))
    }
}

/// Runs `step` between `spatial` (`[n, ch, h, w]`, contiguous) and `tiled`
/// (`[16, ch, n th (tw + 1)]`, unit column stride, rows at least a row apart),
/// with `bias` `[ch]` for `Step::Output` only.
pub(crate) fn tiles(
    op: &'static str,
    step: Step,
    spatial: &Operand,
    tiled: &Operand,
    bias: Option<&Operand>,
    g: &TileGrid,
) -> Result<()> {
    let all: Vec<&Operand> = [Some(spatial), Some(tiled), bias]
        .into_iter()
        .flatten()
        .collect();
    f32_on_cpu(op, &all)?;
    dense(op, spatial, &[g.n, g.ch, g.h, g.w])?;
    let overflow = || Error::arg(op, "internal: Winograd tile grid overflows");
    let t = g.tiles().ok_or_else(overflow)?;
    let [rows, cols] = [g.th, g.tw].map(|v| v.checked_mul(2).and_then(|v| v.checked_add(2)));
    let (rows, cols) = (rows.ok_or_else(overflow)?, cols.ok_or_else(overflow)?);
    let shape = [16, g.ch, t];
    let s = tiled.layout.strides();
    let rs = s.get(1).copied().unwrap_or(0);
    if tiled.layout.shape() != shape || s[2] != 1 || rs < t || s[0] != g.ch * rs {
        return Err(Error::shape(
            op,
            &shape,
            tiled.layout.shape(),
            "internal: the transformed operand's layout",
        ));
    }
    let input_side = matches!(step, Step::Input | Step::InputAdjoint);
    let covers = if input_side {
        rows >= g.h.saturating_add(g.pad[0]) && cols >= g.w.saturating_add(g.pad[1])
    } else {
        g.pad == [0, 0] && rows - 2 >= g.h && cols - 2 >= g.w
    };
    if !covers || g.th == 0 || g.tw == 0 || (bias.is_some() && step != Step::Output) {
        return Err(Error::arg(op, "internal: Winograd tile grid"));
    }
    if let Some(b) = bias {
        dense(op, b, &[g.ch])?;
    }
    let (reads, writes): (Vec<_>, Vec<_>) = match step {
        Step::Input | Step::OutputAdjoint => (vec![spatial.storage], vec![tiled.storage]),
        Step::InputAdjoint | Step::Output => {
            let mut r = vec![tiled.storage];
            r.extend(bias.map(|b| b.storage));
            (r, vec![spatial.storage])
        }
    };
    let _l = lock(&reads, &writes);
    if g.n * g.ch == 0 {
        return Ok(());
    }
    cpu::winograd::tiles(step, spatial, tiled, bias, g, rs);
    Ok(())
}

/// The kernel transform (`forward`: `w` `[o, c, 3, 3]` to `u` `[16, o, c]`)
/// or its adjoint (`u` to `w`); both contiguous.
pub(crate) fn weights(op: &'static str, forward: bool, w: &Operand, u: &Operand) -> Result<()> {
    f32_on_cpu(op, &[w, u])?;
    let ws = w.layout.shape();
    let (o, c) = (
        ws.first().copied().unwrap_or(0),
        ws.get(1).copied().unwrap_or(0),
    );
    dense(op, w, &[o, c, 3, 3])?;
    dense(op, u, &[16, o, c])?;
    let (reads, writes) = if forward { (w, u) } else { (u, w) };
    let _l = lock(&[reads.storage], &[writes.storage]);
    cpu::winograd::weights(forward, w, u, o, c);
    Ok(())
}
