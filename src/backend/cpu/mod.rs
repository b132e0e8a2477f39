//! The CPU backend.
//!
//! Kernels get raw pointers into storages whose locks the caller holds, and
//! walk them through a [`strided::Plan`]. They read and write through raw
//! pointers (never `&mut [T]`), because an in-place op's input and output may
//! be the same memory.

pub(crate) mod alloc;
pub(crate) mod attention;
pub(crate) mod cross_entropy;
pub(crate) mod elementwise;
pub(crate) mod fused;
pub(crate) mod gemm;
pub(crate) mod index;
pub(crate) mod lanes;
pub(crate) mod mapped;
pub(crate) mod matmul;
pub(crate) mod norm;
pub(crate) mod norm_sums;
pub(crate) mod numeric_traits;
pub(crate) mod optim;
pub(crate) mod pool_im2col;
pub(crate) mod reduce;
pub(crate) mod row_max;
pub(crate) mod scan;
pub(crate) mod simd;
pub(crate) mod softmax;
pub(crate) mod sort;
pub(crate) mod strided;
pub(crate) mod thread_pool;
pub(crate) mod transpose_avx2;
pub(crate) mod unary;
pub(crate) mod vmath;
pub(crate) mod winograd;

pub(crate) use elementwise::{binary, binary_scalar, copy, fill, where_cond};
pub(crate) use unary::unary;

use crate::storage::Storage;

/// A typed pointer to a CPU storage's first element.
#[inline]
pub(crate) fn ptr<T>(s: &Storage) -> *mut T {
    debug_assert!(s.device().is_cpu());
    s.addr() as *mut T
}

/// Views `len` elements of a CPU storage from `offset` as a slice.
///
/// # Safety
/// The caller holds at least a read lock on `s`, nothing writes those elements
/// while the slice lives, and, when `len > 0`, the storage holds `offset +
/// len` elements of `T`, initialised. An empty slice reads nothing, so its
/// offset may lie anywhere (an empty view's may be past the end, as in
/// PyTorch).
pub(crate) unsafe fn slice<T>(s: &Storage, offset: usize, len: usize) -> &[T] {
    if len == 0 {
        return &[];
    }
    debug_assert!(offset
        .checked_add(len)
        .and_then(|e| e.checked_mul(std::mem::size_of::<T>()))
        .is_some_and(|b| b <= s.nbytes()));
    // SAFETY: the contract: `offset + len` elements of `T` lie inside the
    // storage (checked in debug builds above), initialised, not written
    // meanwhile; the storage outlives the returned borrow.
    unsafe { std::slice::from_raw_parts(ptr::<T>(s).add(offset), len) }
}
