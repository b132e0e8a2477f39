//! Dispatch of the sort kernel: the stable sorting permutation of the rows
//! of a contiguous `[rows, n]` tensor (`cpu::sort`, `cuda::sort`). The op
//! layer moves the sorted dimension last and gathers the values itself.

use super::{cpu, cuda, device_of, Operand};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::storage::lock;

/// Writes into `idx` (i64, contiguous `[rows, n]`) the stable permutation
/// that sorts each row of `x` (contiguous `[rows, n]`): ascending with NaN
/// last, or descending with NaN first; equal elements keep their order.
pub(crate) fn argsort(
    op: &'static str,
    x: &Operand,
    idx: &Operand,
    rows: usize,
    n: usize,
    descending: bool,
) -> Result<()> {
    let d = device_of(op, &[x, idx])?;
    if idx.dtype != DType::I64 {
        return Err(Error::dtype(op, "int64 indices", idx.dtype));
    }
    for o in [x, idx] {
        if !o.layout.is_contiguous() || o.layout.numel() != rows * n {
            return Err(Error::shape(
                op,
                &[rows, n],
                o.layout.shape(),
                "the sort kernel's operands must be contiguous [rows, n]",
            ));
        }
    }
    let _l = lock(&[x.storage], &[idx.storage]);
    match d {
        Device::Cpu => {
            cpu::sort::argsort(x, idx, rows, n, descending);
            Ok(())
        }
        Device::Cuda(_) => cuda::argsort(x, idx, rows, n, descending),
    }
}
