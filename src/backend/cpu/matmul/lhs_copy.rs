//! The copy a product makes of a column-major left operand before
//! private-gemm-x86 multiplies (Note [lhs stride] in
//! `bench/results/ops-why.md`).

use super::Geom;
use crate::backend::cpu::strided::SendPtr;
use crate::backend::cpu::thread_pool::par_for;

/// How [`gemm_product`](super::gemm_product) copies a column-major left operand (a transposed
/// one, as the weight gradient's `g^T` of a Linear) before
/// private-gemm-x86 multiplies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum LhsCopy {
    /// Transposed to row-major, `[m, k]` at row stride `k`.
    RowMajor,
    /// Kept column-major, `k` contiguous runs of `m` elements, at this
    /// column stride (in elements).
    Padded(usize),
}

impl LhsCopy {
    /// The copy of a column-major `[m, k]`: how many elements it takes, and
    /// its row and column strides.
    pub(super) fn layout(self, m: usize, k: usize) -> (usize, (isize, isize)) {
        match self {
            LhsCopy::RowMajor => (m * k, (k as isize, 1)),
            LhsCopy::Padded(ld) => (ld * k, (1, ld as isize)),
        }
    }
}

/// The copy [`gemm_product`](super::gemm_product) makes of a column-major left operand, or
/// `None` to read it in place (Note [lhs stride] in
/// `bench/results/ops-why.md`). From [`ROW_MAJOR_MIN_N`] columns of the
/// product it is transposed to row-major: the copy moves `m k` elements
/// for `2 m k n` flops, and on Zen 3 the library reads a row-major left
/// operand 10-30% faster. Below, only an operand whose column stride is a
/// multiple of 4 KiB is copied, at a padded stride: such a stride maps
/// every column's start to the same cache sets, and the library's
/// packing then reads it far slower.
pub(super) fn lhs_copy(g: &Geom, elem: usize) -> Option<LhsCopy> {
    let aliased = |ld: usize| (ld * elem).is_multiple_of(ALIAS_BYTES);
    let column_major = g.a.0 == 1 && g.a.1 > 1 && g.m > 1 && g.k > 1;
    if !column_major || g.flops() < LHS_COPY_FLOPS {
        return None;
    }
    if g.n >= ROW_MAJOR_MIN_N {
        return Some(LhsCopy::RowMajor);
    }
    if !aliased(g.a.1 as usize) {
        return None;
    }
    let ld = g.m.next_multiple_of(LHS_PAD);
    Some(LhsCopy::Padded(if aliased(ld) { ld + LHS_PAD } else { ld }))
}

/// The fewest product columns at which [`lhs_copy`] transposes a
/// column-major left operand to row-major.
const ROW_MAJOR_MIN_N: usize = 512;

/// The stride period (bytes) whose multiples [`lhs_copy`] avoids.
const ALIAS_BYTES: usize = 4096;

/// The padded stride's granule, in elements (64 bytes of f32).
const LHS_PAD: usize = 16;

/// The smallest `m * n * k` ([`lhs_copy`]) whose left operand is copied.
const LHS_COPY_FLOPS: usize = 1 << 22;

/// About how many bytes of columns one task of the copy moves.
const LHS_COPY_COLUMNS_BYTES: usize = 256 << 10;

/// Writes the copy `how` of the column-major `[m, k]` at `src` (column
/// stride `s1`) to `dst`: row-major at row stride `k`, or column by column
/// at the padded stride.
///
/// # Safety
/// `src` holds the `[m, k]` at column stride `s1` (so each column is `m`
/// contiguous elements); `dst` holds the elements [`LhsCopy::layout`]
/// counts, is the caller's alone and overlaps nothing `src` reaches.
pub(super) unsafe fn copy<T: Copy + Default + Send + Sync>(
    how: LhsCopy,
    (src, s1): (*const T, usize),
    [m, k]: [usize; 2],
    dst: *mut T,
) {
    match how {
        // SAFETY: the caller's contract is `transpose_rows`'s for a
        // `[m, k]` row-major destination at row stride `k`.
        LhsCopy::RowMajor => unsafe {
            crate::backend::cpu::elementwise::transpose_rows((src, s1), [m, k], (dst, k))
        },
        LhsCopy::Padded(ld) => {
            let (src, dst) = (SendPtr(src as *mut T), SendPtr(dst));
            let cols = (LHS_COPY_COLUMNS_BYTES / (m * std::mem::size_of::<T>())).max(1);
            par_for(k.div_ceil(cols), |i| {
                for c in i * cols..((i + 1) * cols).min(k) {
                    // SAFETY: column `c < k` of `src` is `m` elements at
                    // `c s1`, and of `dst` at `c ld` (`ld >= m`, inside its
                    // `ld k`); each task writes its own columns.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            src.get().add(c * s1) as *const T,
                            dst.get().add(c * ld),
                            m,
                        )
                    };
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_column_major_left_operand_is_transposed_for_wide_products_and_padded_at_4k_strides() {
        // A column-major `[m, k]` (column stride `m`), as `g^T`.
        let g = |m: usize, k: usize, n: usize| Geom {
            m,
            n,
            k,
            a: (1, m as isize),
            b: (n as isize, 1),
            d: (n as isize, 1),
        };
        // f32 at 1024 and 2048 rows: padded by one granule.
        assert_eq!(lhs_copy(&g(1024, 512, 128), 4), Some(LhsCopy::Padded(1040)));
        assert_eq!(lhs_copy(&g(2048, 512, 16), 4), Some(LhsCopy::Padded(2064)));
        // f64 at 512 rows is the same 4 KiB.
        assert_eq!(lhs_copy(&g(512, 512, 128), 8), Some(LhsCopy::Padded(528)));
        // Strides off the period, as the transformer's weight gradients:
        // read in place.
        for m in [1000, 1152, 384, 512, 128] {
            assert_eq!(lhs_copy(&g(m, 1024, 128), 4), None, "m = {m}");
        }
        // A padded stride that would land on the period again skips it:
        // 4090 rows round up to 4096.
        assert_eq!(
            lhs_copy(
                &Geom {
                    a: (1, 4096),
                    ..g(4090, 64, 64)
                },
                4
            ),
            Some(LhsCopy::Padded(4112))
        );
        // Row-major, too small, or a vector: no copy.
        assert_eq!(
            lhs_copy(
                &Geom {
                    a: (1024, 1),
                    ..g(1024, 1024, 64)
                },
                4
            ),
            None
        );
        // From 512 product columns, transposed, aliased or not (the
        // Linear's weight gradient at 1024 and 1000 outputs).
        for m in [1024, 1000, 128] {
            assert_eq!(
                lhs_copy(&g(m, 512, 1024), 4),
                Some(LhsCopy::RowMajor),
                "m = {m}"
            );
        }
        assert_eq!(lhs_copy(&g(128, 1024, 512), 8), Some(LhsCopy::RowMajor));
        assert_eq!(lhs_copy(&g(1024, 512, 511), 4), Some(LhsCopy::Padded(1040)));
        assert_eq!(lhs_copy(&g(32, 64, 1024), 4), None);
        assert_eq!(lhs_copy(&g(1024, 2, 2), 4), None);
        assert_eq!(lhs_copy(&g(1024, 1, 4096), 4), None);
    }
}
