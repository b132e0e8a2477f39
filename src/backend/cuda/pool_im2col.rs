//! The window kernels on CUDA (`max_pool2d_<dt>`, `col2im_<dt>` and
//! `im2col_<dt>` in `kernels/nn.cu`): max pooling with one thread per
//! output, the CPU kernel's rule; col2im with one thread per input element;
//! im2col with one thread per column element (see `crate::backend::pool_im2col`).

use super::device::gpu_of;
use super::kernels::{self, PoolWindow};
use super::launch::dptr;
use super::stream::current;
use crate::backend::pool_im2col::Windows;
use crate::backend::Operand;
use crate::error::{Error, Result};

/// The geometry's window as the kernels' `PoolWindow` (each value must
/// fit an i32).
fn window(op: &'static str, g: &Windows) -> Result<PoolWindow> {
    let small = |v: usize| {
        i32::try_from(v).map_err(|_| {
            Error::arg(
                op,
                format!("a window parameter {v} is too large for the CUDA kernel"),
            )
        })
    };
    let pair = |v: [usize; 2]| -> Result<[i32; 2]> { Ok([small(v[0])?, small(v[1])?]) };
    // A dilation with one tap and a stride with one output have no effect:
    // 1, so that a huge one the CPU accepts is accepted here too.
    let dilation = std::array::from_fn(|d| if g.kernel[d] == 1 { 1 } else { g.dilation[d] });
    let stride = std::array::from_fn(|d| if g.out[d] == 1 { 1 } else { g.stride[d] });
    Ok(PoolWindow {
        kernel: pair(g.kernel)?,
        stride: pair(stride)?,
        pad: pair(g.pad)?,
        dilation: pair(dilation)?,
    })
}

/// `y` (and `idx`) from `x` (see [`crate::backend::pool_im2col::max_pool2d`],
/// which checked the operands and holds the locks).
pub(crate) fn max_pool2d(
    op: &'static str,
    x: &Operand,
    y: &Operand,
    idx: Option<&Operand>,
    g: &Windows,
) -> Result<()> {
    let gpu = gpu_of(op, x.storage.device())?;
    let win = window(op, g)?;
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

/// `dx` from `cols` (see [`crate::backend::pool_im2col::col2im`], which
/// checked the operands and holds the locks).
pub(crate) fn col2im(
    op: &'static str,
    cols: &Operand,
    dx: &Operand,
    n: usize,
    g: &Windows,
) -> Result<()> {
    let gpu = gpu_of(op, cols.storage.device())?;
    let win = window(op, g)?;
    let f = gpu.kernel(op, &kernels::col2im(cols.dtype))?;
    let s = current(gpu);
    let c = g.planes / n;
    let total = (g.planes * g.h * g.w) as i64;
    let args = (
        dptr(cols),
        dptr(dx),
        n as i64,
        c as i64,
        g.h as i64,
        g.w as i64,
        g.out[0] as i64,
        g.out[1] as i64,
        win,
    );
    // SAFETY: col2im_<dt>(const T*, T*, i64 x6, PoolWindow) over contiguous
    // cols [c, kh, kw, n, oh, ow] and dx [n, c, h, w] of one float dtype
    // (checked by the dispatcher, which holds the locks); each thread
    // writes only its element of dx and reads cols at indices it bounds by
    // oh and ow.
    unsafe { f.launch(op, &s, gpu.grid(total), &args) }
}

/// `cols` from `x` (see [`crate::backend::pool_im2col::im2col`], which checked
/// the operands and holds the locks).
pub(crate) fn im2col(
    op: &'static str,
    x: &Operand,
    cols: &Operand,
    n: usize,
    g: &Windows,
) -> Result<()> {
    let gpu = gpu_of(op, x.storage.device())?;
    let win = window(op, g)?;
    let f = gpu.kernel(op, &kernels::im2col(x.dtype))?;
    let s = current(gpu);
    let c = g.planes / n;
    let total = (c * g.kernel[0] * g.kernel[1] * n * g.out[0] * g.out[1]) as i64;
    let args = (
        dptr(x),
        dptr(cols),
        n as i64,
        c as i64,
        g.h as i64,
        g.w as i64,
        g.out[0] as i64,
        g.out[1] as i64,
        cols.layout.strides()[0] as i64,
        win,
    );
    // SAFETY: im2col_<dt>(const T*, T*, i64 x7, PoolWindow) over contiguous
    // x [n, c, h, w] and cols [c kh kw, n oh ow] with rows `rs` apart (rs at
    // least n oh ow), one float dtype (checked by the dispatcher, which
    // holds the locks); each thread writes only its element of cols and
    // reads x only inside the plane's bounds it tests.
    unsafe { f.launch(op, &s, gpu.grid(total), &args) }
}
