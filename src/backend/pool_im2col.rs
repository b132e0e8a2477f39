//! Dispatch of the kernels over sliding windows (`cpu::pool_im2col`,
//! `cuda::{max_pool2d, col2im, im2col}`), one [`Windows`] geometry for both.
//!
//! **Max pooling**: each output is the maximum of its window of a
//! `[planes, H, W]` input,
//! with (optionally) the flat index `row * W + col` in its plane of the
//! element chosen, in PyTorch's order: the window's taps row by row, the
//! first in-bounds tap to start with, a tap replacing the best when it is
//! greater or NaN (so the last NaN of a window wins, as in PyTorch's CPU
//! and CUDA kernels). Taps outside the input (padding, or a `ceil_mode`
//! window's overhang) are skipped. The op layer (`ops::pool`) checked the
//! geometry: every window holds at least one input element (a window with
//! none would give -inf at index 0). The chosen element itself is written.
//!
//! **col2im** (a convolution's input gradient): the adjoint of laying out
//! the columns. `cols` `[C, kh, kw, N, OH, OW]` holds, for every kernel tap
//! and output position, a value for the input element under that tap;
//! `dx[n, c, y, x]` is the sum of the values of every (tap, position) pair
//! over `(y, x)`, taps landing in the padding dropped. Each input element
//! sums its taps in one accumulator (f64 on the CPU, the kernel's `A` on
//! CUDA: f32, f64 for f64) and is written once: no zeroed buffer, no
//! padded copy, no atomics.
//!
//! **im2col** (a convolution's columns): the forward layout that col2im is
//! the adjoint of. `cols[c, i, j, n, oh, ow]` is the element of `x[n, c]`
//! under tap `(i, j)` of output `(oh, ow)`, or 0 where the tap lands in the
//! padding. `cols` is a `[c kh kw, n oh ow]` matrix whose rows may lie
//! further apart than their length (the convolution's row padding, which
//! keeps gemm's reads off aliasing cache sets), so no padded copy of `x`
//! and no strided 7-d copy are made.

use super::{cpu, cuda, device_of, Operand};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::storage::lock;

/// A window geometry over `planes` planes of `h x w`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Windows {
    pub planes: usize,
    pub h: usize,
    pub w: usize,
    /// Output rows and columns.
    pub out: [usize; 2],
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    /// Padding before the rows and columns.
    pub pad: [usize; 2],
    pub dilation: [usize; 2],
}

impl Windows {
    /// The `i`-th tap row (or column, `d = 1`) of output row (column) `o`,
    /// as a signed input position (negative or past the end: padding).
    #[inline(always)]
    pub(crate) fn tap(&self, d: usize, o: usize, i: usize) -> isize {
        (o * self.stride[d] + i * self.dilation[d]) as isize - self.pad[d] as isize
    }

    /// The outputs along dim `d` (rows 0, columns 1) whose tap `i` lands
    /// inside `0..n`: `o` with `0 <= tap(d, o, i) < n`, a range of
    /// `0..out[d]` (empty if there is none).
    pub(crate) fn outputs_in(&self, d: usize, i: usize, n: usize) -> std::ops::Range<usize> {
        // In i128: a stride may be anything up to usize::MAX when there is
        // one output (conv_transpose2d with stride [usize::MAX, 1]).
        let s = self.stride[d] as i128;
        let off = (i as i128) * (self.dilation[d] as i128) - self.pad[d] as i128;
        let first = |t: i128| if t <= 0 { 0 } else { (t + s - 1) / s };
        let out = self.out[d] as i128;
        let lo = first(-off).min(out);
        let hi = first(n as i128 - off).min(out).max(lo);
        lo as usize..hi as usize
    }
}

/// `src` is of a float dtype and `dst` of the same one: every window
/// kernel's dtype rule.
fn same_float(op: &'static str, src: &Operand, dst: &Operand) -> Result<()> {
    if !src.dtype.is_float() {
        return Err(Error::dtype(op, "a float tensor", src.dtype));
    }
    if dst.dtype != src.dtype {
        return Err(Error::dtype(op, src.dtype.name(), dst.dtype));
    }
    Ok(())
}

/// `y = max over each window of x` and, with `idx`, the argmax's flat
/// in-plane position (int64). Every operand contiguous: `x` `[planes, h,
/// w]`, `y` and `idx` `[planes, oh, ow]`.
pub(crate) fn max_pool2d(
    op: &'static str,
    x: &Operand,
    y: &Operand,
    idx: Option<&Operand>,
    g: &Windows,
) -> Result<()> {
    let all: Vec<&Operand> = [Some(x), Some(y), idx].into_iter().flatten().collect();
    let d = device_of(op, &all)?;
    same_float(op, x, y)?;
    if let Some(i) = idx
        && i.dtype != DType::I64
    {
        return Err(Error::dtype(op, "int64 indices", i.dtype));
    }
    let n_out = g.planes * g.out[0] * g.out[1];
    for (o, n, shape) in [
        (x, g.planes * g.h * g.w, [g.planes, g.h, g.w]),
        (y, n_out, [g.planes, g.out[0], g.out[1]]),
    ]
    .into_iter()
    .chain(idx.map(|i| (i, n_out, [g.planes, g.out[0], g.out[1]])))
    {
        if !o.layout.is_contiguous() || o.layout.numel() != n {
            return Err(Error::shape(
                op,
                &shape,
                o.layout.shape(),
                "the pooling kernel's operands must be contiguous",
            ));
        }
    }
    let writes: Vec<_> = [Some(y), idx]
        .into_iter()
        .flatten()
        .map(|o| o.storage)
        .collect();
    let _l = lock(&[x.storage], &writes);
    if n_out == 0 {
        return Ok(());
    }
    match d {
        Device::Cpu => {
            cpu::pool_im2col::max_pool2d(x, y, idx, g);
            Ok(())
        }
        Device::Cuda(_) => cuda::max_pool2d(op, x, y, idx, g),
    }
}

/// `dx` `[n, c, h, w]` from `cols` `[c, kh, kw, n, oh, ow]` (both
/// contiguous, one float dtype): see the module docs. `g.planes` must be
/// `n * c`.
pub(crate) fn col2im(
    op: &'static str,
    cols: &Operand,
    dx: &Operand,
    n: usize,
    g: &Windows,
) -> Result<()> {
    let d = device_of(op, &[cols, dx])?;
    same_float(op, cols, dx)?;
    let c = g.planes.checked_div(n).unwrap_or(0);
    let taps = g.kernel[0] * g.kernel[1];
    for (o, shape) in [
        (
            cols,
            vec![c, g.kernel[0], g.kernel[1], n, g.out[0], g.out[1]],
        ),
        (dx, vec![n, c, g.h, g.w]),
    ] {
        if !o.layout.is_contiguous() || o.layout.numel() != crate::layout::numel(&shape) {
            return Err(Error::shape(
                op,
                &shape,
                o.layout.shape(),
                "the col2im kernel's operands must be contiguous",
            ));
        }
    }
    if n * c != g.planes || (taps == 0 && g.planes > 0) {
        return Err(Error::arg(op, "internal: col2im geometry"));
    }
    let _l = lock(&[cols.storage], &[dx.storage]);
    if g.planes * g.h * g.w == 0 {
        return Ok(());
    }
    match d {
        Device::Cpu => {
            cpu::pool_im2col::col2im(cols, dx, n, g);
            Ok(())
        }
        Device::Cuda(_) => cuda::col2im(op, cols, dx, n, g),
    }
}

/// `cols` (a `[c kh kw, n oh ow]` matrix, unit column stride, rows at
/// least `n oh ow` apart) from `x` `[n, c, h, w]` (contiguous), one float
/// dtype: see the module docs. `g.planes` must be `n * c`.
pub(crate) fn im2col(
    op: &'static str,
    x: &Operand,
    cols: &Operand,
    n: usize,
    g: &Windows,
) -> Result<()> {
    let d = device_of(op, &[x, cols])?;
    same_float(op, x, cols)?;
    let c = g.planes.checked_div(n).unwrap_or(0);
    let rows = c * g.kernel[0] * g.kernel[1];
    let nl = n * g.out[0] * g.out[1];
    if !x.layout.is_contiguous() || x.layout.numel() != g.planes * g.h * g.w {
        return Err(Error::shape(
            op,
            &[n, c, g.h, g.w],
            x.layout.shape(),
            "the im2col kernel's input must be contiguous",
        ));
    }
    let (shape, strides) = (cols.layout.shape(), cols.layout.strides());
    if shape != [rows, nl] || strides[1] != 1 || (rows > 1 && strides[0] < nl) {
        return Err(Error::shape(
            op,
            &[rows, nl],
            shape,
            "the im2col kernel's columns must be rows of unit stride",
        ));
    }
    if n * c != g.planes {
        return Err(Error::arg(op, "internal: im2col geometry"));
    }
    let _l = lock(&[x.storage], &[cols.storage]);
    if rows * nl == 0 {
        return Ok(());
    }
    match d {
        Device::Cpu => {
            cpu::pool_im2col::im2col(x, cols, n, g);
            Ok(())
        }
        Device::Cuda(_) => cuda::im2col(op, x, cols, n, g),
    }
}
