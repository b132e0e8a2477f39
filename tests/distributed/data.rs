//! Each rank's tensor and the single-process reference of a collective
//! over the ranks: integer values, exact in every dtype, so the reference
//! is exact whatever order an engine reduces in.

use tensorscope::distributed::ReduceOp;
use tensorscope::{DType, Device, Result, Tensor};

/// Rank `r`'s element `i` (of a world of `world`): small integers, some
/// negative, different on every rank; in 0..=1 for bool.
pub fn value(dtype: DType, world: usize, r: usize, i: usize) -> f64 {
    let v = ((i * 7 + r * 3 + world) % 11) as f64;
    match dtype {
        DType::Bool => (i + r).is_multiple_of(3) as u8 as f64,
        DType::U8 => v,
        _ => v - 5.0,
    }
}

/// Rank `r`'s tensor of `shape`.
pub fn tensor(dtype: DType, world: usize, r: usize, shape: &[usize]) -> Result<Tensor> {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n).map(|i| value(dtype, world, r, i)).collect();
    Tensor::from_slice(&v, shape, Device::Cpu)?.to_dtype(dtype)
}

/// The ranks' element `i` combined by `op`.
pub fn reduced(dtype: DType, world: usize, op: ReduceOp, i: usize) -> f64 {
    let vs = (0..world).map(|r| value(dtype, world, r, i));
    let v = match op {
        ReduceOp::Sum | ReduceOp::Avg => vs.sum::<f64>(),
        ReduceOp::Max => vs.fold(f64::MIN, f64::max),
        ReduceOp::Min => vs.fold(f64::MAX, f64::min),
    };
    match (op, dtype) {
        (ReduceOp::Avg, _) => v / world as f64,
        (ReduceOp::Sum, DType::Bool) => (v > 0.0) as u8 as f64,
        (ReduceOp::Sum, DType::U8) => v.rem_euclid(256.0),
        _ => v,
    }
}

/// The ops `dtype` takes (Avg for floats only).
pub fn ops(dtype: DType) -> Vec<ReduceOp> {
    let mut ops = vec![ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min];
    if dtype.is_float() {
        ops.push(ReduceOp::Avg);
    }
    ops
}
