//! Lane folds: the sum of a row's lane accumulators, in one fixed pairwise
//! order (lane `j` with `j + L/2` first), so that a kernel's result does not
//! depend on the thread count or the SIMD level. Two forms, the same bits:
//! [`fold_lanes`] inline, for loops of intrinsics, and [`fold_lanes_split`]
//! for plain-Rust lane loops that LLVM vectorises on its own.

/// The sum of `L` (a power of two) lane accumulators, pairwise in a fixed
/// order (results do not depend on timing or level): lane `j` and
/// `j + L/2` first, and so on down to one.
#[inline(always)]
pub(crate) fn fold_lanes<T: Copy + std::ops::Add<Output = T>, const L: usize>(l: &mut [T; L]) -> T {
    fold_levels(l, 1);
    l[0]
}

/// [`fold_lanes`]'s sum, the same bits, for a lane loop that LLVM
/// vectorises on its own (plain Rust over `[T; L]`, not intrinsics): the
/// levels that add whole vectors (`w >= 8` lanes apart) run here, inline,
/// and the last eight lanes go to [`fold_tail`], out of line on purpose.
/// Inlined after such a loop, the tree down to one value made LLVM's SLP
/// vectoriser build the loop itself from pairs (`vmovsd` loads, two floats
/// per add: seen in `perf annotate` of LayerNorm's statistics), which took
/// half as long again as with the fold split this way. Loops of intrinsics
/// keep [`fold_lanes`]: the call costs about 10% of a 1024-long f32 sum
/// (Note [lane folds] in `bench/results/ops-why.md`).
#[inline(always)]
pub(crate) fn fold_lanes_split<T: Copy + std::ops::Add<Output = T>, const L: usize>(
    l: &mut [T; L],
) -> T {
    let w = fold_levels(l, 8);
    fold_tail(&mut l[..w])
}

/// Adds lane `j + w` into lane `j` for `w = len/2, len/4, ...` down to
/// `w = stop` (`l.len()` and `stop` powers of two); returns the lanes left
/// (`stop`, or `l.len()` when that is not larger).
#[inline(always)]
fn fold_levels<T: Copy + std::ops::Add<Output = T>>(l: &mut [T], stop: usize) -> usize {
    let mut w = l.len();
    while w > stop {
        w /= 2;
        for j in 0..w {
            l[j] = l[j] + l[j + w];
        }
    }
    w
}

/// [`fold_lanes_split`]'s last levels, out of line (see there); compiled at
/// the baseline level it gives the same bits (IEEE adds in the same order).
#[inline(never)]
fn fold_tail<T: Copy + std::ops::Add<Output = T>>(l: &mut [T]) -> T {
    fold_levels(l, 1);
    l[0]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `fold_lanes_split` is `fold_lanes` bit for bit, and both are the
    /// pairwise order (lane `j` with `j + L/2` first), at the lane counts
    /// the kernels use; values of mixed magnitude, so the order shows.
    #[test]
    fn split_fold_is_the_inline_fold_bit_for_bit() {
        /// Checks `L` lanes; returns whether a left-to-right sum would have
        /// given other bits (so that the check can tell orders apart).
        fn check<const L: usize>() -> bool {
            let v: [f32; L] =
                std::array::from_fn(|j| (j as f32 * 0.37).sin() * 10f32.powi(j as i32 % 7 - 3));
            let (mut a, mut b) = (v, v);
            let mut want = v.to_vec();
            while want.len() > 1 {
                let h = want.len() / 2;
                want = (0..h).map(|j| want[j] + want[j + h]).collect();
            }
            let (x, y) = (fold_lanes(&mut a), fold_lanes_split(&mut b));
            assert_eq!(x.to_bits(), want[0].to_bits(), "fold_lanes, {L} lanes");
            assert_eq!(
                y.to_bits(),
                want[0].to_bits(),
                "fold_lanes_split, {L} lanes"
            );
            v.iter().sum::<f32>().to_bits() != want[0].to_bits()
        }
        let differs = [
            check::<4>(),
            check::<8>(),
            check::<16>(),
            check::<32>(),
            check::<64>(),
        ];
        assert!(
            differs.iter().any(|&d| d),
            "the values do not tell orders apart"
        );
    }
}
