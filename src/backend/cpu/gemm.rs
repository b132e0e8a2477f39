//! The matrix products of the CPU backend.
//!
//! On x86-64 at AVX2 or AVX-512, f32 and f64 go to `private-gemm-x86` (the
//! kernels faer's matmul uses there) at the level [`super::simd::level`]
//! runs, so `TENSORSCOPE_SIMD` caps matmul as it caps every other kernel:
//! Note [gemm choice] in ARCHITECTURE.md has the race that chose it. Every
//! other product (f16, the baseline level, aarch64, and the few argument
//! forms listed at [`fast`]) goes to the `gemm-f32`, `gemm-f64` and
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
    #[cfg(target_arch = "x86_64")]
    if let Some(instr) = fast::<T>(
        [m, n, k],
        read_dst,
        alpha,
        [dst_cs, dst_rs, lhs_cs, lhs_rs, rhs_cs, rhs_rs],
    ) {
        let threads = match parallelism {
            Parallelism::None => 1,
            Parallelism::Rayon(0) => rayon::current_num_threads(),
            Parallelism::Rayon(n) => n,
        };
        let (d, l, r) = ((dst_rs, dst_cs), (lhs_rs, lhs_cs), (rhs_rs, rhs_cs));
        // SAFETY: `fast` admitted the arguments; the operands are this
        // function's, under its contract.
        unsafe {
            fast_gemm(
                instr,
                [m, n, k],
                (dst, d),
                read_dst,
                (lhs, l),
                (rhs, r),
                beta,
                threads,
            )
        };
        return;
    }
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

/// `dst := [dst +] beta * lhs @ rhs` through `private-gemm-x86` at `instr`,
/// every operand with its (row, column) strides in elements, on `threads`
/// threads (of the current rayon pool).
///
/// # Safety
/// As [`gemm`], and the arguments are ones [`fast`] admits (f32 or f64,
/// `k > 0`, positive strides), and the CPU has `instr`.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
unsafe fn fast_gemm<T: Copy + 'static>(
    instr: private_gemm_x86::InstrSet,
    [m, n, k]: [usize; 3],
    (dst, (dst_rs, dst_cs)): (*mut T, (isize, isize)),
    read_dst: bool,
    (lhs, (lhs_rs, lhs_cs)): (*const T, (isize, isize)),
    (rhs, (rhs_rs, rhs_cs)): (*const T, (isize, isize)),
    beta: T,
    threads: usize,
) {
    use private_gemm_x86 as pgx;
    let dtype = if TypeId::of::<T>() == TypeId::of::<f32>() {
        pgx::DType::F32
    } else {
        pgx::DType::F64
    };
    let accum = if read_dst {
        pgx::Accum::Add
    } else {
        pgx::Accum::Replace
    };
    // SAFETY: `T` is the dtype given and `beta` a live `T`; with `k > 0`
    // and positive strides the call computes `dst := [dst +] beta * lhs @
    // rhs` over exactly the elements the caller vouches for (the crate
    // takes the same element strides, row stride first); the CPU has
    // `instr` (the caller's contract).
    unsafe {
        pgx::gemm(
            dtype,
            pgx::IType::U64,
            instr,
            m,
            n,
            k,
            dst as *mut (),
            dst_rs,
            dst_cs,
            std::ptr::null(),
            std::ptr::null(),
            pgx::DstKind::Full,
            accum,
            lhs as *const (),
            lhs_rs,
            lhs_cs,
            false,
            std::ptr::null(),
            0,
            rhs as *const (),
            rhs_rs,
            rhs_cs,
            false,
            &raw const beta as *const (),
            threads,
        )
    }
}

/// Whether products of `T` run private-gemm-x86 at this level ([`fast`]
/// with the shape and strides aside), so that the caller cuts them into
/// blocks itself (see `matmul::Blocks::of`).
pub(super) fn fast_kernels<T: 'static>() -> bool {
    let t = TypeId::of::<T>();
    cfg!(target_arch = "x86_64")
        && (t == TypeId::of::<f32>() || t == TypeId::of::<f64>())
        && super::simd::level() != super::simd::Level::Scalar
}

/// The instruction set private-gemm-x86 runs products of `T` at here (the
/// level every other kernel runs), when [`fast_kernels`] says it runs them.
#[cfg(target_arch = "x86_64")]
fn instr_set<T: 'static>() -> Option<private_gemm_x86::InstrSet> {
    use super::simd::{level, Level};
    use private_gemm_x86::InstrSet;
    if !fast_kernels::<T>() {
        return None;
    }
    match level() {
        Level::V4 => Some(InstrSet::Avx512),
        Level::V3 => Some(InstrSet::Avx256),
        Level::Scalar => None,
    }
}

/// The instruction set `private-gemm-x86` runs a product at, or `None` for
/// gemm 0.19: only f32 and f64 at AVX2 or AVX-512, and only the argument
/// forms it computes as [`gemm`] means them. It leaves `dst` unwritten for
/// `k == 0`; it only adds to the destination (`alpha == 1`) or replaces it
/// (unread), with no other `alpha`; and a stride of 0 (an expanded
/// operand, rare in a product) or less is left to gemm 0.19, whose packing
/// handles every stride. A matrix-vector product (`m` or `n`
/// of 1, a batch-1 request) goes to gemm 0.19's `gemv`, which streams the
/// matrix once where private-gemm-x86 packs it first.
#[cfg(target_arch = "x86_64")]
fn fast<T: Copy + 'static>(
    [m, n, k]: [usize; 3],
    read_dst: bool,
    alpha: T,
    strides: [isize; 6],
) -> Option<private_gemm_x86::InstrSet> {
    let instr = instr_set::<T>()?;
    let unit_alpha = || {
        if TypeId::of::<T>() == TypeId::of::<f32>() {
            // SAFETY: `T` is f32 (same `TypeId`).
            unsafe { *(&alpha as *const T as *const f32) == 1.0 }
        } else {
            // SAFETY: `T` is f64 (`instr_set` admits only f32 and f64).
            unsafe { *(&alpha as *const T as *const f64) == 1.0 }
        }
    };
    let admitted = m > 1 && n > 1 && k > 0 && strides.iter().all(|&s| s > 0);
    (admitted && (!read_dst || unit_alpha())).then_some(instr)
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;
    use private_gemm_x86::InstrSet;

    #[test]
    fn fast_takes_only_the_forms_it_computes_as_gemm_means_them() {
        let pos = [1, 4, 1, 4, 1, 4];
        let want = super::super::simd::level() != super::super::simd::Level::Scalar;
        assert_eq!(fast::<f32>([2, 2, 3], false, 0.0, pos).is_some(), want);
        assert_eq!(fast::<f64>([2, 2, 3], true, 1.0, pos).is_some(), want);
        assert!(
            fast::<f32>([2, 2, 0], false, 0.0, pos).is_none(),
            "k == 0 leaves dst unwritten"
        );
        assert!(
            fast::<f32>([2, 2, 3], true, 2.0, pos).is_none(),
            "no alpha but 1 for a read dst"
        );
        assert!(
            fast::<f32>([2, 2, 3], false, 0.0, [1, 4, 0, 4, 1, 4]).is_none(),
            "an expanded operand"
        );
        assert!(
            fast::<f32>([2, 2, 3], false, 0.0, [1, -4, 1, 4, 1, 4]).is_none(),
            "a negative stride"
        );
        assert!(
            fast::<f16>([2, 2, 3], false, f16::ZERO, pos).is_none(),
            "f16 stays with gemm-f16"
        );
        assert!(
            fast::<f32>([1, 1024, 784], false, 0.0, pos).is_none()
                && fast::<f32>([1024, 1, 784], false, 0.0, pos).is_none(),
            "a matrix-vector product stays with gemm 0.19's gemv"
        );
    }

    /// Both instruction sets this CPU has, against an f64 triple loop:
    /// row- and column-major operands, a transposed right operand, a
    /// destination read or not, one and two threads, ragged sizes.
    #[test]
    fn both_instruction_sets_agree_with_a_reference_product() {
        let mut sets = Vec::new();
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            sets.push(InstrSet::Avx256);
        }
        if is_x86_feature_detected!("avx512f") {
            sets.push(InstrSet::Avx512);
        }
        let val = |i: usize| ((i * 7919) % 17) as f32 / 8.0 - 1.0;
        for instr in sets {
            for &(m, n, k) in &[
                (1, 1, 1),
                (5, 3, 7),
                (33, 65, 17),
                (97, 40, 300),
                (130, 129, 64),
            ] {
                for (trans_a, trans_b, read, threads) in [
                    (false, false, false, 1),
                    (true, false, true, 1),
                    (false, true, false, 2),
                    (true, true, true, 2),
                ] {
                    let a: Vec<f32> = (0..m * k).map(val).collect();
                    let b: Vec<f32> = (0..k * n).map(|i| val(i + 3)).collect();
                    let a_st = if trans_a {
                        (1, m as isize)
                    } else {
                        (k as isize, 1)
                    };
                    let b_st = if trans_b {
                        (1, k as isize)
                    } else {
                        (n as isize, 1)
                    };
                    let mut d: Vec<f32> = (0..m * n).map(|i| val(i + 5)).collect();
                    let old = d.clone();
                    let at = |i: usize, p: usize| {
                        a[(i as isize * a_st.0 + p as isize * a_st.1) as usize]
                    };
                    let bt = |p: usize, j: usize| {
                        b[(p as isize * b_st.0 + j as isize * b_st.1) as usize]
                    };
                    let pool = rayon::ThreadPoolBuilder::new()
                        .num_threads(threads)
                        .build()
                        .unwrap();
                    // SAFETY: the buffers hold the matrices at the strides
                    // given; `d` is separate from `a` and `b`; the CPU has
                    // `instr` (detected above).
                    pool.install(|| unsafe {
                        fast_gemm(
                            instr,
                            [m, n, k],
                            (d.as_mut_ptr(), (n as isize, 1)),
                            read,
                            (a.as_ptr(), a_st),
                            (b.as_ptr(), b_st),
                            0.5f32,
                            threads,
                        )
                    });
                    for i in 0..m {
                        for j in 0..n {
                            let sum: f64 = (0..k).map(|p| at(i, p) as f64 * bt(p, j) as f64).sum();
                            let want = if read { old[i * n + j] as f64 } else { 0.0 } + 0.5 * sum;
                            let got = d[i * n + j] as f64;
                            assert!(
                                (got - want).abs() <= 1e-5 * (1.0 + want.abs()) * k as f64,
                                "{instr:?} {m}x{n}x{k} {trans_a} {trans_b} {read}: [{i},{j}] {got} vs {want}"
                            );
                        }
                    }
                }
            }
        }
    }
}
