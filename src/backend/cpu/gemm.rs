//! The matrix products of the CPU backend: the `gemm-f32`, `gemm-f64` and
//! `gemm-f16` kernels (the gemm project's, which candle uses), called
//! directly. The `gemm` facade crate would add its complex kernels
//! (`gemm-c32`, `gemm-c64`: seconds of a fresh build's critical path
//! before this crate starts, `bench/results/build.md`) for a type dispatch
//! this file does in a few lines (Note [cold kernels] in ARCHITECTURE.md).

use half::f16;
use std::any::TypeId;

pub(crate) use gemm_common::gemm::get_threading_threshold;
pub(crate) use gemm_common::Parallelism;

/// `dst := alpha * dst + beta * lhs @ rhs` for an `m x k` by `k x n`
/// product, every operand given by its column and row strides in elements;
/// `dst` is read only when `read_dst`. As the gemm facade's `gemm` for real
/// types: a column-major destination is computed as the transposed product,
/// which the kernels prefer. `T` is f32, f64 or f16 (the op layer computes
/// every other float dtype's products in one of them, and has no integer
/// matmul).
///
/// # Safety
/// Every element the strides reach, `m x n` of `dst`, `m x k` of `lhs` and
/// `k x n` of `rhs`, is inside a live allocation of `T`; `dst` overlaps
/// neither input and nothing else accesses it meanwhile; when `read_dst`,
/// `dst`'s elements are initialised.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm<T: Copy + 'static>(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut T,
    (dst_cs, dst_rs): (isize, isize),
    read_dst: bool,
    lhs: *const T,
    (lhs_cs, lhs_rs): (isize, isize),
    rhs: *const T,
    (rhs_cs, rhs_rs): (isize, isize),
    alpha: T,
    beta: T,
    parallelism: Parallelism,
) {
    // (dst = lhs @ rhs) is (dst^T = rhs^T @ lhs^T): the same memory with
    // the roles and the strides swapped.
    let (m, n, dst_cs, dst_rs, lhs, lhs_cs, lhs_rs, rhs, rhs_cs, rhs_rs) =
        if dst_cs.abs() < dst_rs.abs() {
            (
                n, m, dst_rs, dst_cs, rhs, rhs_rs, rhs_cs, lhs, lhs_rs, lhs_cs,
            )
        } else {
            (
                m, n, dst_cs, dst_rs, lhs, lhs_cs, lhs_rs, rhs, rhs_cs, rhs_rs,
            )
        };
    // Calls `$kernel`'s function for `$t`, the pointers and scalars cast
    // from `T` (which is `$t`: the `TypeId` test).
    macro_rules! call {
        ($t:ty, $kernel:path) => {
            // SAFETY: `T` is `$t` (same `TypeId`), so the casts are
            // identities; the operands are as this function's contract
            // states, which is the kernel's contract.
            unsafe {
                $kernel()(
                    m,
                    n,
                    k,
                    dst as *mut $t,
                    dst_cs,
                    dst_rs,
                    read_dst,
                    lhs as *const $t,
                    lhs_cs,
                    lhs_rs,
                    rhs as *const $t,
                    rhs_cs,
                    rhs_rs,
                    *(&alpha as *const T as *const $t),
                    *(&beta as *const T as *const $t),
                    false,
                    false,
                    false,
                    parallelism,
                )
            }
        };
    }
    let t = TypeId::of::<T>();
    if t == TypeId::of::<f32>() {
        call!(f32, gemm_f32::gemm::f32::get_gemm_fn)
    } else if t == TypeId::of::<f64>() {
        call!(f64, gemm_f64::gemm::f64::get_gemm_fn)
    } else if t == TypeId::of::<f16>() {
        call!(f16, gemm_f16::gemm::f16::get_gemm_fn)
    } else {
        unreachable!(
            "gemm of {}: no kernel (the op layer never asks)",
            std::any::type_name::<T>()
        )
    }
}
