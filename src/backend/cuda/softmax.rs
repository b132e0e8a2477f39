//! Softmax and log_softmax along one dim on CUDA, forward and backward
//! (`kernels/softmax.cu`): the entry points behind `backend::softmax`. Each
//! takes operands with any strides.

use super::device::gpu_of;
use super::kernels;
use super::launch::{
    coalesce, dptr, fill_row, group_for, prepare, sub_layout, too_many_dims, MAX_RANK,
};
use crate::backend::Operand;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::layout::Layout;
use cudarc::driver::DeviceRepr;

/// `SGeom<N>` of kernels/softmax.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct SGeom<const N: usize> {
    rank: i32,
    pad: i32,
    shape: [i64; MAX_RANK],
    strides: [[i64; MAX_RANK]; N],
    dim_size: i64,
    dim_stride: [i64; N],
}
// SAFETY: plain old data with the C layout of `SGeom<N>`.
unsafe impl<const N: usize> DeviceRepr for SGeom<N> {}

/// The row geometry of `N` layouts of one shape, rows being every index of
/// the dimensions other than `dim`.
fn rows_geom<const N: usize>(
    op: &'static str,
    layouts: [&Layout; N],
    dim: usize,
) -> Result<(SGeom<N>, i64)> {
    let rank = layouts[0].rank();
    let kept: Vec<usize> = (0..rank).filter(|&d| d != dim).collect();
    let subs: [Layout; N] = std::array::from_fn(|k| sub_layout(layouts[k], &kept));
    let (shape, strides) = coalesce(std::array::from_fn::<&Layout, N, _>(|k| &subs[k]));
    if shape.len() > MAX_RANK {
        return Err(too_many_dims(op, &shape));
    }
    let mut g = SGeom {
        rank: shape.len() as i32,
        pad: 0,
        shape: [1; MAX_RANK],
        strides: [[0; MAX_RANK]; N],
        dim_size: layouts[0].shape()[dim] as i64,
        dim_stride: std::array::from_fn(|k| layouts[k].strides()[dim] as i64),
    };
    fill_row(&mut g.shape, &shape);
    for (row, st) in g.strides.iter_mut().zip(&strides) {
        fill_row(row, st);
    }
    let rows = crate::layout::numel(&shape) as i64;
    Ok((g, rows))
}

fn check_float_same(op: &'static str, ops: &[&Operand]) -> Result<DType> {
    let dt = ops[0].dtype;
    if !dt.is_float() {
        return Err(Error::dtype(op, "a float dtype", dt));
    }
    for o in &ops[1..] {
        if o.dtype != dt {
            return Err(Error::dtype(op, dt.name(), o.dtype));
        }
        if o.layout.shape() != ops[0].layout.shape() {
            return Err(Error::shape(
                op,
                ops[0].layout.shape(),
                o.layout.shape(),
                "operands must have one shape",
            ));
        }
    }
    Ok(dt)
}

/// `dst = softmax(src)` (or `log_softmax` if `log`) along `dim`; float
/// dtypes, computed in f32 (f64 for f64).
pub(crate) fn softmax(src: &Operand, dim: usize, dst: &Operand, log: bool) -> Result<()> {
    let op = if log { "log_softmax" } else { "softmax" };
    let g = gpu_of(op, dst.storage.device())?;
    let dt = check_float_same(op, &[src, dst])?;
    if dim >= src.layout.rank() {
        return Err(Error::DimOutOfRange {
            op,
            dim: dim as isize,
            rank: src.layout.rank(),
        });
    }
    let (geom, rows) = rows_geom(op, [&dst.layout, &src.layout], dim)?;
    if rows == 0 || geom.dim_size == 0 {
        return Ok(());
    }
    let (s, f) = prepare(g, op, &kernels::softmax(dt, log))?;
    let group = group_for(geom.dim_size);
    let cfg = g.groups(rows, group);
    // SAFETY: [log_]softmax_<dt>(SGeom<2>, i64, T*, const T*, i32).
    unsafe { f.launch(op, &s, cfg, &(geom, rows, dptr(dst), dptr(src), group)) }
}

/// The gradient of [`softmax`] (or log_softmax if `log`) along `dim`: from
/// the output gradient `dy` and the forward output `y`, into `dx` (the
/// autograd formula's fused kernel).
pub(crate) fn softmax_backward(
    dy: &Operand,
    y: &Operand,
    dim: usize,
    dx: &Operand,
    log: bool,
) -> Result<()> {
    // The dispatcher's names (backend/softmax.rs), so an error reads the same
    // on both devices.
    let op = if log {
        "log_softmax_backward"
    } else {
        "softmax_backward"
    };
    let g = gpu_of(op, dx.storage.device())?;
    let dt = check_float_same(op, &[dx, dy, y])?;
    if dim >= dx.layout.rank() {
        return Err(Error::DimOutOfRange {
            op,
            dim: dim as isize,
            rank: dx.layout.rank(),
        });
    }
    let (geom, rows) = rows_geom(op, [&dx.layout, &dy.layout, &y.layout], dim)?;
    if rows == 0 || geom.dim_size == 0 {
        return Ok(());
    }
    let (s, f) = prepare(g, op, &kernels::softmax_bwd(dt, log))?;
    let group = group_for(geom.dim_size);
    let args = (geom, rows, dptr(dx), dptr(dy), dptr(y), group);
    // SAFETY: [log_]softmax_bwd_<dt>(SGeom<3>, i64, T*, const T*, const T*, i32).
    unsafe { f.launch(op, &s, g.groups(rows, group), &args) }
}
