//! Stable argsort of the rows of a contiguous `[rows, n]` tensor: each row's
//! element order, NaN after every number ascending and before every number
//! descending (`torch.sort`'s order), equal elements in their original
//! order. Rows are split over the kernel pool.

use std::cmp::Ordering;

use super::ptr;
use super::strided::SendPtr;
use super::thread_pool::par_for;
use crate::backend::Operand;
use crate::dtype::Element;
use crate::with_dtype;

/// `PartialOrd` extended to a total order with NaN greater than every
/// number (integers have no NaN).
#[inline(always)]
fn nan_last<T: Element + PartialOrd>(a: T, b: T) -> Ordering {
    match a.partial_cmp(&b) {
        Some(o) => o,
        // At least one NaN: the NaN orders last.
        None => unordered(a).cmp(&unordered(b)),
    }
}

/// `true` for NaN, the only value not ordered with itself.
#[inline(always)]
fn unordered<T: PartialOrd>(x: T) -> bool {
    x.partial_cmp(&x).is_none()
}

/// Writes into `idx` (i64 `[rows, n]`, contiguous) the stable sorting
/// permutation of each row of `x` (`[rows, n]`, contiguous, numeric or
/// bool).
pub(crate) fn argsort(x: &Operand, idx: &Operand, rows: usize, n: usize, descending: bool) {
    fn go<T: Element + PartialOrd>(x: &Operand, idx: &Operand, rows: usize, n: usize, desc: bool) {
        let px = SendPtr(ptr::<T>(x.storage));
        let pi = SendPtr(ptr::<i64>(idx.storage));
        let (xo, io) = (x.layout.offset(), idx.layout.offset());
        par_for(rows, |r| {
            // SAFETY: the dispatcher checked that both operands are
            // contiguous `[rows, n]` views of storages of their dtypes and
            // holds the locks; row `r` is read from `x` and written to
            // `idx` by this call only.
            let (row, out) = unsafe {
                (
                    std::slice::from_raw_parts(px.get().add(xo + r * n) as *const T, n),
                    std::slice::from_raw_parts_mut(pi.get().add(io + r * n), n),
                )
            };
            // The permutation is sorted in place in the output row (no
            // scratch); `sort_by` is stable: equal elements keep their order.
            for (i, o) in out.iter_mut().enumerate() {
                *o = i as i64;
            }
            let at = |i: &i64| row[*i as usize];
            if desc {
                out.sort_by(|a, b| nan_last(at(b), at(a)));
            } else {
                out.sort_by(|a, b| nan_last(at(a), at(b)));
            }
        });
    }
    with_dtype!(x.dtype, T => go::<T>(x, idx, rows, n, descending))
}
