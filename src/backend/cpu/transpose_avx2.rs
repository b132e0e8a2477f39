//! A 16 x 16 block of 4-byte elements transposed in AVX2 registers, for
//! `elementwise::transpose_copy` (the `contiguous` of a `.t()`).
//!
//! The generic block (16 source columns read into a stack array, the
//! array transposed by `std::array::from_fn`, 16 destination rows written)
//! is left to LLVM at the x86-64 baseline, and its speed moved with the
//! binary, not the source: builds that changed no code on this path ran it at
//! up to twice the time of others (Note [transposing copy] in
//! `bench/results/ops-why.md`). Here each 8 x 8 quarter is eight loads, the
//! classic unpack / shuffle / lane-permute network and eight stores: no stack
//! buffer. The elements move as bits (`ps` moves and shuffles do no
//! arithmetic), so NaN payloads and integers survive.

#[cfg(target_arch = "x86_64")]
use super::simd::{level, Level};

/// Whether this process may use [`block16`]: it runs at AVX2 or above.
pub(crate) fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        matches!(level(), Level::V3 | Level::V4)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `d[r * d0 + c] = s[c * s1 + r]` for `r, c < 16` (4-byte elements).
///
/// # Safety
/// The CPU has AVX2 ([`available`]); the 16 runs `s + c * s1 .. + 16` are
/// readable and the 16 runs `d + r * d0 .. + 16` writable, and no read run
/// overlaps a written one.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn block16(s: *const f32, s1: usize, d: *mut f32, d0: usize) {
    for (bc, br) in [(0, 0), (0, 8), (8, 0), (8, 8)] {
        // SAFETY: columns `bc..bc + 8` and rows `br..br + 8` are inside
        // the 16 x 16 block of this fn's contract.
        unsafe { block8(s.add(bc * s1 + br), s1, d.add(br * d0 + bc), d0) };
    }
}

/// The 8 x 8 quarter of [`block16`] at `s`, `d`.
///
/// # Safety
/// As for [`block16`], with 8 runs of 8 on each side.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn block8(s: *const f32, s1: usize, d: *mut f32, d0: usize) {
    use std::arch::x86_64::{
        _mm256_loadu_ps, _mm256_permute2f128_ps, _mm256_shuffle_ps, _mm256_storeu_ps,
        _mm256_unpackhi_ps, _mm256_unpacklo_ps,
    };
    // SAFETY: source column `c < 8` holds 8 readable elements at `s + c s1`.
    let r: [_; 8] = std::array::from_fn(|c| unsafe { _mm256_loadu_ps(s.add(c * s1)) });
    let t: [_; 8] = std::array::from_fn(|k| {
        let (a, b) = (r[k / 2 * 2], r[k / 2 * 2 + 1]);
        if k % 2 == 0 {
            _mm256_unpacklo_ps(a, b)
        } else {
            _mm256_unpackhi_ps(a, b)
        }
    });
    // u[0..4] from rows 0-3, u[4..8] from rows 4-7: elements 0,4 / 1,5 /
    // 2,6 / 3,7 of each 128-bit lane, in lane order.
    let u: [_; 8] = std::array::from_fn(|k| {
        let base = if k < 4 { 0 } else { 4 };
        let (a, b) = (t[base + (k % 4) / 2], t[base + 2 + (k % 4) / 2]);
        if k % 2 == 0 {
            _mm256_shuffle_ps::<0x44>(a, b)
        } else {
            _mm256_shuffle_ps::<0xEE>(a, b)
        }
    });
    for j in 0..8 {
        let o = if j < 4 {
            _mm256_permute2f128_ps::<0x20>(u[j], u[j + 4])
        } else {
            _mm256_permute2f128_ps::<0x31>(u[j - 4], u[j])
        };
        // SAFETY: destination row `j < 8` holds 8 writable elements.
        unsafe { _mm256_storeu_ps(d.add(j * d0), o) };
    }
}
