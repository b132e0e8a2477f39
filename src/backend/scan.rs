//! Dispatch of the scan kernels (`cpu::scan`, `cuda::scan`): cumulative
//! sums and products along the rows of contiguous `[rows, n]` tensors, and
//! the recurrence `y_i = a_i * y_{i-1} + x_i` behind `cumprod`'s backward.
//! The op layer moves the scanned dimension last and converts integer
//! inputs to int64.

use super::{cpu, cuda, device_of, Operand};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::storage::lock;

/// What a scan accumulates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ScanKind {
    /// `y_i = y_{i-1} + x_i`, from 0.
    Sum,
    /// `y_i = y_{i-1} * x_i`, from 1.
    Prod,
    /// `y_i = a_i * y_{i-1} + x_i`, from 0 (floats only).
    Affine,
}

/// `out = scan(x)` along each row; `a` for [`ScanKind::Affine`] only.
pub(crate) fn scan(
    op: &'static str,
    kind: ScanKind,
    x: &Operand,
    a: Option<&Operand>,
    out: &Operand,
    rows: usize,
    n: usize,
) -> Result<()> {
    let all: Vec<&Operand> = [Some(x), a, Some(out)].into_iter().flatten().collect();
    let d = device_of(op, &all)?;
    if !(x.dtype.is_float() || (x.dtype == DType::I64 && kind != ScanKind::Affine)) {
        return Err(Error::dtype(op, "a float or int64 tensor", x.dtype));
    }
    if (kind == ScanKind::Affine) != a.is_some() {
        return Err(Error::arg(
            op,
            "the recurrence's coefficients go with Affine only",
        ));
    }
    for o in &all {
        if o.dtype != x.dtype {
            return Err(Error::dtype(op, x.dtype.name(), o.dtype));
        }
        if !o.layout.is_contiguous() || o.layout.numel() != rows * n {
            return Err(Error::shape(
                op,
                &[rows, n],
                o.layout.shape(),
                "the scan kernel's operands must be contiguous [rows, n]",
            ));
        }
    }
    let reads: Vec<_> = [Some(x), a]
        .into_iter()
        .flatten()
        .map(|o| o.storage)
        .collect();
    let _l = lock(&reads, &[out.storage]);
    if rows == 0 || n == 0 {
        return Ok(());
    }
    match d {
        Device::Cpu => {
            cpu::scan::scan(kind, x, a, out, rows, n);
            Ok(())
        }
        Device::Cuda(_) => cuda::scan(op, kind, x, a, out, rows, n),
    }
}
