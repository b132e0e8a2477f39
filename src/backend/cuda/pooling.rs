//! Max pooling on CUDA (`max_pool2d_<dt>` in `kernels/nn.cu`): one thread
//! per output, the CPU kernel's rule (`crate::backend::pooling`).

use super::device::gpu_of;
use super::kernels::{self, PoolWindow};
use super::launch::dptr;
use super::stream::current;
use crate::backend::pooling::PoolGeom;
use crate::backend::Operand;
use crate::error::{Error, Result};

/// `y` (and `idx`) from `x` (see [`crate::backend::pooling::max_pool2d`],
/// which checked the operands and holds the locks).
pub(crate) fn max_pool2d(
    op: &'static str,
    x: &Operand,
    y: &Operand,
    idx: Option<&Operand>,
    g: &PoolGeom,
) -> Result<()> {
    let gpu = gpu_of(op, x.storage.device())?;
    let small = |v: usize| {
        i32::try_from(v).map_err(|_| {
            Error::arg(
                op,
                format!("a pooling window parameter {v} is too large for the CUDA kernel"),
            )
        })
    };
    let pair = |v: [usize; 2]| -> Result<[i32; 2]> { Ok([small(v[0])?, small(v[1])?]) };
    let win = PoolWindow {
        kernel: pair(g.kernel)?,
        stride: pair(g.stride)?,
        pad: pair(g.pad)?,
        dilation: pair(g.dilation)?,
    };
    let f = gpu.kernel(op, &kernels::max_pool2d(x.dtype))?;
    let s = current(gpu);
    let n = (g.planes * g.out[0] * g.out[1]) as i64;
    let args = (
        dptr(x),
        dptr(y),
        idx.map_or(0, dptr),
        g.planes as i64,
        g.h as i64,
        g.w as i64,
        g.out[0] as i64,
        g.out[1] as i64,
        win,
    );
    // SAFETY: max_pool2d_<dt>(const T*, T*, i64*, i64 x5, PoolWindow) over
    // contiguous x [planes, h, w] and y, idx [planes, oh, ow] of x's dtype
    // and int64 (checked by the dispatcher, which holds the locks); idx may
    // be null (the kernel tests it); each thread writes only its outputs and
    // reads only in-bounds taps of its plane.
    unsafe { f.launch(op, &s, gpu.grid(n), &args) }
}
