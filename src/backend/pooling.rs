//! Dispatch of the max-pooling kernel (`cpu::pooling`, `cuda::max_pool2d`):
//! each output is the maximum of its window of a `[planes, H, W]` input,
//! with (optionally) the flat index `row * W + col` in its plane of the
//! element chosen, in PyTorch's order: the window's taps row by row, the
//! first in-bounds tap to start with, a tap replacing the best when it is
//! greater or NaN (so the last NaN of a window wins, as in PyTorch's CPU
//! and CUDA kernels). Taps outside the input (padding, or a `ceil_mode`
//! window's overhang) are skipped. The op layer (`ops::pool`) checked the
//! geometry: every window holds at least one input element.

use super::{cpu, cuda, device_of, Operand};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::storage::lock;

/// A max pooling's geometry over `planes` planes of `h x w`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PoolGeom {
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

impl PoolGeom {
    /// The `i`-th tap row (or column, `d = 1`) of output row (column) `o`,
    /// as a signed input position (negative or past the end: padding).
    #[inline(always)]
    pub(crate) fn tap(&self, d: usize, o: usize, i: usize) -> isize {
        (o * self.stride[d] + i * self.dilation[d]) as isize - self.pad[d] as isize
    }
}

/// `y = max over each window of x` and, with `idx`, the argmax's flat
/// in-plane position (int64). Every operand contiguous: `x` `[planes, h,
/// w]`, `y` and `idx` `[planes, oh, ow]`.
pub(crate) fn max_pool2d(
    op: &'static str,
    x: &Operand,
    y: &Operand,
    idx: Option<&Operand>,
    g: &PoolGeom,
) -> Result<()> {
    let all: Vec<&Operand> = [Some(x), Some(y), idx].into_iter().flatten().collect();
    let d = device_of(op, &all)?;
    if !x.dtype.is_float() {
        return Err(Error::dtype(op, "a float tensor", x.dtype));
    }
    if y.dtype != x.dtype {
        return Err(Error::dtype(op, x.dtype.name(), y.dtype));
    }
    if let Some(i) = idx {
        if i.dtype != DType::I64 {
            return Err(Error::dtype(op, "int64 indices", i.dtype));
        }
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
            cpu::pooling::max_pool2d(x, y, idx, g);
            Ok(())
        }
        Device::Cuda(_) => cuda::max_pool2d(op, x, y, idx, g),
    }
}
