//! The maximum of a row, NaN if any element is: cross-entropy's first
//! sweep over a row of logits.
//!
//! In [`LANES`] independent lanes, a plain maximum and a NaN flag per lane
//! (which vectorise, unlike a NaN-sticky maximum), folded in lane order,
//! then the tail in order. A dense f32 row at AVX2 or AVX-512 runs the
//! lanes with intrinsics ([`max_avx512`], [`max_avx2`]): the same lanes,
//! compares and fold, so the same bits. `_mm*_max_ps(v, m)` is `v > m ? v
//! : m`, the plain loop's select, for ±0 and NaN too.
//!
//! Why: LLVM's SLP vectoriser built the plain 16-lane loop from 128 and
//! 256-bit pieces with `vextract`/`vshufpd` (`perf annotate` of softmax at
//! AVX-512); with the intrinsics `cross_entropy` is a few per cent faster
//! (Note [row max by intrinsics] in `bench/results/ops-why.md`).
//!
//! Softmax keeps its own inline loop: it was slower both with these
//! intrinsics and with its plain loop moved here unchanged ([`row_max_with`]
//! with a reader closure). Its maximum is the row's first read from memory,
//! bounded by that, and the rest of its kernel compiled worse around the call
//! (the same Note).

use super::numeric_traits::Flt;
use super::simd::{self, Level};
use num_traits::Float;

/// Lanes of the maximum.
const LANES: usize = 16;

/// `if v > m or v is NaN { v } else { m }`: a max in which NaN sticks.
#[inline(always)]
pub(crate) fn max_nan<C: Float>(m: C, v: C) -> C {
    if v > m || v.is_nan() {
        v
    } else {
        m
    }
}

/// The lanes of a dense f32 row's body: `(x, body)`, `body` a multiple of
/// [`LANES`], gives each lane's plain maximum and whether any element was
/// NaN.
type LaneMax = unsafe fn(*const f32, usize) -> ([f32; LANES], bool);

/// The lanes' kernel for `level`, where one is written (AVX-512, AVX2).
fn for_level(level: Level) -> Option<LaneMax> {
    match level {
        #[cfg(target_arch = "x86_64")]
        Level::V4 => Some(max_avx512),
        #[cfg(target_arch = "x86_64")]
        Level::V3 => Some(max_avx2),
        _ => None,
    }
}

/// The maximum of the `n` elements `rd(0..n)` (NaN if any is NaN), in
/// [`LANES`] lanes.
#[inline(always)]
fn row_max_with<C: Float>(n: usize, rd: impl Fn(usize) -> C) -> C {
    let mut ml = [C::neg_infinity(); LANES];
    let mut nan = [false; LANES];
    let body = n / LANES * LANES;
    for k in (0..body).step_by(LANES) {
        for (j, (m, f)) in ml.iter_mut().zip(nan.iter_mut()).enumerate() {
            let v = rd(k + j);
            *m = if v > *m { v } else { *m };
            *f |= v.is_nan();
        }
    }
    finish(&ml, nan.iter().any(|&f| f), body..n, rd)
}

/// The lanes folded in order, then the tail `rd(tail)` in order; NaN if
/// `nan`.
#[inline(always)]
fn finish<C: Float>(
    ml: &[C; LANES],
    nan: bool,
    tail: std::ops::Range<usize>,
    rd: impl Fn(usize) -> C,
) -> C {
    let mut m = ml.iter().fold(C::neg_infinity(), |a, &b| max_nan(a, b));
    for k in tail {
        m = max_nan(m, rd(k));
    }
    if nan {
        C::nan()
    } else {
        m
    }
}

/// [`row_max_with`] of a dense row: through the intrinsics for f32 at AVX2
/// and AVX-512 (the same bits).
#[inline(always)]
pub(crate) fn row_max<T: Flt>(x: &[T]) -> T::C {
    let rd = |k: usize| x[k].up();
    let fast = if T::DTYPE == crate::dtype::DType::F32 {
        for_level(simd::level())
    } else {
        None
    };
    let Some(f) = fast else {
        return row_max_with(x.len(), rd);
    };
    let body = x.len() / LANES * LANES;
    // SAFETY: `T` is f32 (checked above), so `x` holds `body <= len` f32s;
    // the kernel is the one for the level the process runs at, whose
    // instructions this CPU has.
    let (ml, nan) = unsafe { f(x.as_ptr().cast(), body) };
    // f32 to `T::C`, which is f32 for f32 rows: exact.
    let ml = ml.map(|v| <T::C as num_traits::NumCast>::from(v).unwrap_or_else(T::C::nan));
    finish(&ml, nan, body..x.len(), rd)
}

/// AVX-512: lane `j` is lane `j` of one register.
///
/// # Safety
/// The CPU has AVX-512 F; `x` holds `body` f32s, a multiple of [`LANES`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn max_avx512(x: *const f32, body: usize) -> ([f32; LANES], bool) {
    use std::arch::x86_64::{
        _mm512_cmp_ps_mask, _mm512_loadu_ps, _mm512_max_ps, _mm512_set1_ps, _mm512_storeu_ps,
        _CMP_UNORD_Q,
    };
    let mut m = _mm512_set1_ps(f32::NEG_INFINITY);
    let mut nan = 0u16;
    for k in (0..body).step_by(LANES) {
        // SAFETY: `k + 16 <= body`: inside the row (this fn's contract).
        let v = unsafe { _mm512_loadu_ps(x.add(k)) };
        m = _mm512_max_ps(v, m);
        nan |= _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v);
    }
    let mut out = [0f32; LANES];
    // SAFETY: `out` holds 16 f32s.
    unsafe { _mm512_storeu_ps(out.as_mut_ptr(), m) };
    (out, nan != 0)
}

/// AVX2: lanes 0-7 and 8-15 in two registers.
///
/// # Safety
/// The CPU has AVX2; `x` holds `body` f32s, a multiple of [`LANES`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn max_avx2(x: *const f32, body: usize) -> ([f32; LANES], bool) {
    use std::arch::x86_64::{
        _mm256_cmp_ps, _mm256_loadu_ps, _mm256_max_ps, _mm256_movemask_ps, _mm256_or_ps,
        _mm256_set1_ps, _mm256_setzero_ps, _mm256_storeu_ps, _CMP_UNORD_Q,
    };
    let (mut m0, mut m1) = (
        _mm256_set1_ps(f32::NEG_INFINITY),
        _mm256_set1_ps(f32::NEG_INFINITY),
    );
    let mut nan = _mm256_setzero_ps();
    for k in (0..body).step_by(LANES) {
        // SAFETY: `k + 16 <= body`: inside the row (this fn's contract).
        let (v0, v1) = unsafe { (_mm256_loadu_ps(x.add(k)), _mm256_loadu_ps(x.add(k + 8))) };
        m0 = _mm256_max_ps(v0, m0);
        m1 = _mm256_max_ps(v1, m1);
        nan = _mm256_or_ps(nan, _mm256_cmp_ps::<_CMP_UNORD_Q>(v0, v0));
        nan = _mm256_or_ps(nan, _mm256_cmp_ps::<_CMP_UNORD_Q>(v1, v1));
    }
    let mut out = [0f32; LANES];
    // SAFETY: `out` holds 16 f32s: two stores of 8.
    unsafe {
        _mm256_storeu_ps(out.as_mut_ptr(), m0);
        _mm256_storeu_ps(out.as_mut_ptr().add(8), m1);
    }
    (out, _mm256_movemask_ps(nan) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows with ±0 ties, NaN, ±inf and ragged tails: the intrinsics give
    /// the plain loop's bits at every level this CPU has.
    #[test]
    fn every_level_gives_the_plain_loops_bits() {
        let mut rows: Vec<Vec<f32>> = Vec::new();
        for n in [0usize, 1, 15, 16, 17, 31, 32, 33, 100, 1024, 1037] {
            let mut s = 0x9e37_79b9u32 ^ n as u32;
            let row: Vec<f32> = (0..n)
                .map(|_| {
                    s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    (s >> 8) as f32 / (1 << 24) as f32 * 20.0 - 10.0
                })
                .collect();
            rows.push(row.clone());
            let mut r = row.clone();
            if n > 3 {
                r[n / 2] = f32::NAN;
                rows.push(r);
            }
            let mut z: Vec<f32> = (0..n)
                .map(|k| if k % 3 == 0 { -0.0 } else { -1.0 })
                .collect();
            rows.push(z.clone());
            if n > 5 {
                z[5] = 0.0;
                rows.push(z);
                let mut i = vec![f32::NEG_INFINITY; n];
                rows.push(i.clone());
                i[n - 1] = f32::INFINITY;
                rows.push(i);
            }
        }
        for row in &rows {
            let plain = row_max_with(row.len(), |k| row[k]);
            for &l in Level::all() {
                let Some(f) = for_level(l).filter(|_| l.is_available()) else {
                    continue;
                };
                let body = row.len() / LANES * LANES;
                // SAFETY: the level is available; `row` holds `body` f32s.
                let (ml, nan) = unsafe { f(row.as_ptr(), body) };
                let got = finish(&ml, nan, body..row.len(), |k| row[k]);
                assert_eq!(
                    got.to_bits(),
                    plain.to_bits(),
                    "{} n={}",
                    l.name(),
                    row.len()
                );
            }
            assert_eq!(row_max(row).to_bits(), plain.to_bits());
        }
        // The NaN and the signed-zero rows mean what they should.
        assert!(row_max(&[1.0f32, f32::NAN, 2.0]).is_nan());
        let zeros = [-0.0f32; 40];
        assert!(row_max(&zeros).is_sign_negative());
    }
}
