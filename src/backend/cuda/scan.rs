//! Scans on CUDA (`scan_<dt>` in `kernels/reduce.cu`): one thread per row
//! of contiguous `[rows, n]` operands, the CPU's order of operations
//! (`cpu::scan`). A first version: a single long row runs in one thread.

use super::device::gpu_of;
use super::kernels;
use super::launch::dptr;
use super::stream::current;
use crate::backend::scan::ScanKind;
use crate::backend::Operand;
use crate::error::Result;

/// `out = scan(x)` (see [`crate::backend::scan::scan`], which checked the
/// operands and holds the locks).
pub(crate) fn scan(
    op: &'static str,
    kind: ScanKind,
    x: &Operand,
    a: Option<&Operand>,
    out: &Operand,
    rows: usize,
    n: usize,
) -> Result<()> {
    let g = gpu_of(op, x.storage.device())?;
    let f = g.kernel(op, &kernels::scan(x.dtype))?;
    let s = current(g);
    let code = match kind {
        ScanKind::Sum => 0,
        ScanKind::Prod => 1,
        ScanKind::Affine => 2,
    };
    let args = (
        dptr(x),
        dptr(a.unwrap_or(x)),
        dptr(out),
        rows as i64,
        n as i64,
        code,
    );
    // SAFETY: scan_<dt>(const T*, const T*, T*, i64, i64, i32) over `rows`
    // contiguous rows of `n` elements of operands of one dtype (checked by
    // the dispatcher, which holds the locks); `a` is read only for kind 2,
    // when it was given; each thread writes only its rows of `out`.
    unsafe { f.launch(op, &s, g.grid(rows as i64), &args) }
}
