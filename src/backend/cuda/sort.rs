//! Argsort on CUDA (`argsort_<dt>` in `kernels/index.cu`): one thread per
//! row of a contiguous `[rows, n]` input, a heap sort of the row's indices
//! keyed by (value, index), so the result is the CPU's stable order
//! (`cpu::sort`). A first version: a long single row sorts in one thread.

use super::device::gpu_of;
use super::kernels;
use super::launch::dptr;
use super::stream::current;
use crate::backend::Operand;
use crate::error::Result;

/// The stable sorting permutation of each row of `x` into `idx` (i64, both
/// contiguous `[rows, n]`).
pub(crate) fn argsort(
    x: &Operand,
    idx: &Operand,
    rows: usize,
    n: usize,
    descending: bool,
) -> Result<()> {
    const OP: &str = "argsort";
    // `backend::sort::argsort` checked the dtype, the shape and that
    // both operands are contiguous.
    let g = gpu_of(OP, x.storage.device())?;
    if rows == 0 || n == 0 {
        return Ok(());
    }
    let f = g.kernel(OP, &kernels::argsort(x.dtype))?;
    let s = current(g);
    let args = (dptr(x), dptr(idx), rows as i64, n as i64, descending as i32);
    // SAFETY: argsort_<dt>(const T*, i64*, i64, i64, i32) over `rows`
    // contiguous rows of `n` elements of both operands (checked above),
    // whose storages the dispatcher holds locked; each thread writes only
    // its own rows of idx.
    unsafe { f.launch(OP, &s, g.grid(rows as i64), &args) }
}
