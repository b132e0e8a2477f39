//! Dense float sums accumulated in f64: the inner loops of `sum`, `mean`
//! and `var` over contiguous runs.
//!
//! Every element (for the f32 total, every pair of elements: see
//! [`pair_lanes`]) is widened to f64 before it is added, in independent
//! lanes (lane `j` adds the elements `j mod L`) folded pairwise at the end
//! by [`fold_lanes`], so the result does not depend on the SIMD level: the
//! x86 paths of the f32 total are its plain loop written with intrinsics,
//! bit for bit (tested below at every level this CPU has).

use super::super::lanes::fold_lanes;
#[cfg(target_arch = "x86_64")]
use super::super::simd;
use crate::dtype::Element;
use half::{bf16, f16};

/// How far ahead of a dense reduction's step [`prefetch_ahead`] asks for
/// the data: 4 KiB. The full-tensor sums of a large tensor run at the
/// memory's bandwidth, and a software prefetch this far ahead made a
/// standalone sum of 64 MB faster than none, 2 KiB or 8 KiB
/// (Note [reduction prefetch] in `bench/results/ops-why.md`).
#[cfg(target_arch = "x86_64")]
const PREFETCH_BYTES: usize = 4096;

/// Lanes of the f32 total ([`DenseSum::dense_total`] for f32): eight AVX2
/// accumulators of four f64, or four AVX-512 accumulators of eight. With
/// sixteen lanes at every level, `sum` over rows is slower than PyTorch's at
/// AVX-512 (see [`total32_avx512`]).
const TOTAL_LANES: usize = 32;

/// Elements per step of the f32 total: two per lane ([`pair_lanes`]).
const TOTAL_STEP: usize = 2 * TOTAL_LANES;

/// The f32 total's plain loop: lane `j` of each [`TOTAL_STEP`] elements
/// adds `x[j] + x[j + 32]`, rounded once to f32, widened to f64. The
/// widening (`vcvtps2pd`) bounds the loop, so one widening per pair
/// halves that bound (Note [f32 sum lanes] in `bench/results/ops-why.md`).
/// The pair's rounding
/// is the only f32 one: the total's error is at most `2^-24` of the sum of
/// the pairs' magnitudes, plus the f64 lanes' (tested below), where an f32
/// accumulation grows with the length.
///
/// # Safety
/// `p[0..len]` is in bounds and initialised.
#[inline(always)]
unsafe fn pair_lanes(p: *const f32, len: usize) -> f64 {
    let mut l = [0f64; TOTAL_LANES];
    let body = len / TOTAL_STEP * TOTAL_STEP;
    let mut k = 0;
    while k < body {
        for (j, lj) in l.iter_mut().enumerate() {
            // SAFETY: `k + j + 32 < body <= len`: in bounds and initialised
            // (this fn's contract).
            let (a, b) = unsafe { (p.add(k + j).read(), p.add(k + j + TOTAL_LANES).read()) };
            *lj += (a + b) as f64;
        }
        k += TOTAL_STEP;
    }
    // SAFETY: `body <= len`: the rest of the caller's elements.
    fold_lanes(&mut l) + unsafe { tail(p, body, len) }
}

/// Dense f64 accumulation of `f(p[k])` in `L` independent lanes, folded
/// by [`fold_lanes`] (vectorises: with 16 lanes, four AVX2 accumulators,
/// enough to hide the add's latency).
///
/// # Safety
/// `p[0..len]` is in bounds and initialised.
#[inline(always)]
unsafe fn sum_lanes<T: Copy, const L: usize>(p: *const T, len: usize, f: impl Fn(T) -> f64) -> f64 {
    let mut l = [0f64; L];
    let body = len / L * L;
    let mut k = 0;
    while k < body {
        for (j, lj) in l.iter_mut().enumerate() {
            // SAFETY: `k + j < body <= len`: in bounds and initialised (this fn's contract).
            *lj += f(unsafe { p.add(k + j).read() });
        }
        k += L;
    }
    let mut tail = 0.0;
    for k in body..len {
        // SAFETY: `k < len`: in bounds and initialised (this fn's contract).
        tail += f(unsafe { p.add(k).read() });
    }
    fold_lanes(&mut l) + tail
}

/// Float elements summed densely in f64.
pub(super) trait DenseSum: Element {
    /// `sum(f(p[k]))` over `len` contiguous elements, accumulated in f64.
    ///
    /// # Safety
    /// The elements are in bounds and initialised.
    unsafe fn dense_sum(p: *const Self, len: usize, f: impl Fn(f64) -> f64) -> f64;
    /// `sum(p[k])`: [`DenseSum::dense_sum`] of the identity, unless the type
    /// has a faster way of the same accuracy class.
    ///
    /// # Safety
    /// As for [`DenseSum::dense_sum`].
    #[inline(always)]
    unsafe fn dense_total(p: *const Self, len: usize) -> f64 {
        // SAFETY: this fn's contract is `dense_sum`'s.
        unsafe { Self::dense_sum(p, len, |x| x) }
    }
}
impl DenseSum for f32 {
    #[inline(always)]
    unsafe fn dense_sum(p: *const f32, len: usize, f: impl Fn(f64) -> f64) -> f64 {
        // SAFETY: the caller's `len` contiguous elements from `p` are in bounds and
        // initialised.
        unsafe { sum_lanes::<_, 16>(p, len, |x| f(x as f64)) }
    }
    /// [`pair_lanes`]; on x86-64 above the baseline the same sum (the same
    /// pairs, lanes, order and fold: bit for bit) written with intrinsics
    /// ([`total32_avx2`], [`total32_avx512`]).
    #[inline(always)]
    unsafe fn dense_total(p: *const f32, len: usize) -> f64 {
        #[cfg(target_arch = "x86_64")]
        match simd::level() {
            // SAFETY: the level was detected on this CPU (V4 includes
            // AVX-512 F/VL); the elements are the caller's.
            simd::Level::V4 => return unsafe { total32_avx512(p, len) },
            // SAFETY: V3's detection checked AVX2 and FMA; the elements
            // are the caller's.
            simd::Level::V3 => return unsafe { total32_avx2(p, len) },
            simd::Level::Scalar => {}
        }
        // SAFETY: the caller's `len` contiguous elements from `p` are in bounds and
        // initialised.
        unsafe { pair_lanes(p, len) }
    }
}

/// [`pair_lanes`] with the widening written as `vcvtps2pd` of four pair
/// sums: LLVM's own vectorisation of a plain loop widened two at a time
/// (xmm, seen in `perf annotate`), at twice PyTorch's time (Note [f32 sum
/// lanes] in `bench/results/ops-why.md`). Accumulator `a` holds lanes
/// `4a..4a + 4`.
///
/// # Safety
/// The CPU has AVX2 and FMA; `p[0..len]` is in bounds and initialised.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn total32_avx2(p: *const f32, len: usize) -> f64 {
    use std::arch::x86_64::{
        _mm256_add_pd, _mm256_cvtps_pd, _mm256_setzero_pd, _mm256_storeu_pd, _mm_add_ps,
        _mm_loadu_ps,
    };
    let mut acc = [_mm256_setzero_pd(); TOTAL_LANES / 4];
    let body = len / TOTAL_STEP * TOTAL_STEP;
    let mut k = 0;
    while k < body {
        prefetch_ahead(p.wrapping_add(k).cast(), TOTAL_STEP * size_of::<f32>());
        for (j, a) in acc.iter_mut().enumerate() {
            // SAFETY: `k + 4 j + 36 <= body <= len`: both in bounds (this
            // fn's contract).
            let v = unsafe {
                _mm_add_ps(
                    _mm_loadu_ps(p.add(k + 4 * j)),
                    _mm_loadu_ps(p.add(k + 4 * j + TOTAL_LANES)),
                )
            };
            *a = _mm256_add_pd(*a, _mm256_cvtps_pd(v));
        }
        k += TOTAL_STEP;
    }
    let mut l = [0f64; TOTAL_LANES];
    for (j, a) in acc.iter().enumerate() {
        // SAFETY: `l[4 j..4 j + 4]` is in bounds of `l`.
        unsafe { _mm256_storeu_pd(l.as_mut_ptr().add(4 * j), *a) };
    }
    // SAFETY: `body <= len`: the rest of the caller's elements.
    fold_lanes(&mut l) + unsafe { tail(p, body, len) }
}

/// [`total32_avx2`] with AVX-512: accumulator `a` holds lanes
/// `8a..8a + 8`, each step widens eight pair sums (`vcvtps2pd` to a zmm)
/// (Note [f32 sum lanes] in `bench/results/ops-why.md`).
///
/// # Safety
/// The CPU has AVX-512 F; `p[0..len]` is in bounds and initialised.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn total32_avx512(p: *const f32, len: usize) -> f64 {
    use std::arch::x86_64::{
        _mm256_add_ps, _mm256_loadu_ps, _mm512_add_pd, _mm512_cvtps_pd, _mm512_setzero_pd,
        _mm512_storeu_pd,
    };
    let mut acc = [_mm512_setzero_pd(); TOTAL_LANES / 8];
    let body = len / TOTAL_STEP * TOTAL_STEP;
    let mut k = 0;
    while k < body {
        prefetch_ahead(p.wrapping_add(k).cast(), TOTAL_STEP * size_of::<f32>());
        for (j, a) in acc.iter_mut().enumerate() {
            // SAFETY: `k + 8 j + 40 <= body <= len`: both in bounds (this
            // fn's contract).
            let v = unsafe {
                _mm256_add_ps(
                    _mm256_loadu_ps(p.add(k + 8 * j)),
                    _mm256_loadu_ps(p.add(k + 8 * j + TOTAL_LANES)),
                )
            };
            *a = _mm512_add_pd(*a, _mm512_cvtps_pd(v));
        }
        k += TOTAL_STEP;
    }
    let mut l = [0f64; TOTAL_LANES];
    for (j, a) in acc.iter().enumerate() {
        // SAFETY: `l[8 j..8 j + 8]` is in bounds of `l`.
        unsafe { _mm512_storeu_pd(l.as_mut_ptr().add(8 * j), *a) };
    }
    // SAFETY: `body <= len`: the rest of the caller's elements.
    fold_lanes(&mut l) + unsafe { tail(p, body, len) }
}

/// Hints the CPU to fetch the `bytes` (one step of a dense loop) that start
/// [`PREFETCH_BYTES`] after `p`, one hint per cache line. A prefetch never
/// faults and changes no result, so the lines past the end of the data
/// cost nothing but the hint. A no-op off x86-64.
#[inline(always)]
pub(super) fn prefetch_ahead(p: *const u8, bytes: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let at = p.wrapping_add(PREFETCH_BYTES) as *const i8;
        for line in (0..bytes).step_by(64) {
            // SAFETY: a prefetch is a hint: it never faults and reads
            // nothing into the program, whatever the address (formed with
            // `wrapping_add`, never dereferenced).
            unsafe { _mm_prefetch(at.wrapping_add(line), _MM_HINT_T0) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, bytes);
}

/// `p[from..len]` summed in order in f64: the tail [`pair_lanes`] adds
/// after its lanes.
///
/// # Safety
/// `p[from..len]` is in bounds and initialised.
#[inline(always)]
unsafe fn tail(p: *const f32, from: usize, len: usize) -> f64 {
    let mut t = 0.0;
    for k in from..len {
        // SAFETY: `k < len`: in bounds (this fn's contract).
        t += unsafe { p.add(k).read() } as f64;
    }
    t
}

impl DenseSum for f64 {
    #[inline(always)]
    unsafe fn dense_sum(p: *const f64, len: usize, f: impl Fn(f64) -> f64) -> f64 {
        // SAFETY: the caller's `len` contiguous elements from `p` are in bounds and
        // initialised.
        unsafe { sum_lanes::<_, 16>(p, len, f) }
    }
}
/// f16 / bf16: widened a chunk at a time by `half`'s slice conversion (F16C
/// instructions when the CPU has them), then summed like f32.
macro_rules! dense_sum_half {
    ($t:ty) => {
        impl DenseSum for $t {
            #[inline(always)]
            unsafe fn dense_sum(p: *const $t, len: usize, f: impl Fn(f64) -> f64) -> f64 {
                use half::slice::HalfFloatSliceExt;
                let mut buf = [0f32; 256];
                let mut acc = 0.0;
                let mut c0 = 0;
                while c0 < len {
                    let n = buf.len().min(len - c0);
                    // SAFETY: `c0 + n <= len`: the caller's contiguous elements, in bounds and
                    // initialised.
                    let src = unsafe { std::slice::from_raw_parts(p.add(c0), n) };
                    src.convert_to_f32_slice(&mut buf[..n]);
                    // SAFETY: `buf` holds `n` initialised f32 values.
                    acc += unsafe { sum_lanes::<_, 16>(buf.as_ptr(), n, |x| f(x as f64)) };
                    c0 += n;
                }
                acc
            }
        }
    };
}
dense_sum_half!(f16);
dense_sum_half!(bf16);

#[cfg(test)]
mod tests {
    use super::*;

    /// Pseudo-random values in [-500, 500).
    fn values(n: usize) -> Vec<f32> {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        (0..n)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 1e3
            })
            .collect()
    }

    /// The intrinsic f32 totals are the plain 32-lane loop bit for bit (so
    /// results do not depend on the level), over lengths with and without
    /// a tail; each runs where this CPU has its level, and says so.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn x86_f32_totals_are_the_plain_loop_bit_for_bit() {
        let xs = values(5000);
        let lens = [0, 1, 15, 31, 32, 33, 63, 64, 65, 255, 1024, 4999, 5000];
        let plain = |len: usize| {
            // SAFETY: every `len` below is at most `xs.len()`.
            unsafe { pair_lanes(xs.as_ptr(), len) }
        };
        let mut ran = 0;
        if simd::Level::V3.is_available() {
            for len in lens {
                // SAFETY: `len <= xs.len()`; this CPU has AVX2 and FMA (checked).
                let b = unsafe { total32_avx2(xs.as_ptr(), len) };
                assert_eq!(plain(len).to_bits(), b.to_bits(), "AVX2, len {len}");
            }
            ran += 1;
        }
        if simd::Level::V4.is_available() {
            for len in lens {
                // SAFETY: `len <= xs.len()`; this CPU has AVX-512 (checked).
                let b = unsafe { total32_avx512(xs.as_ptr(), len) };
                assert_eq!(plain(len).to_bits(), b.to_bits(), "AVX-512, len {len}");
            }
            ran += 1;
        }
        println!("intrinsic totals checked: {ran} of 2 (the others' level is absent here)");
    }

    /// The f32 total errs by at most its pairs' roundings (2^-24 of the sum
    /// of their magnitudes) plus the f64 lanes' own, against a compensated
    /// f64 sum; and it is that bound, not a bit pattern, that the pairs
    /// change: the total of values whose pairs are exact is the f64 sum.
    #[test]
    fn the_f32_total_errs_by_at_most_its_pair_roundings() {
        let compensated = |xs: &[f32]| {
            let (mut s, mut c) = (0f64, 0f64);
            for &x in xs {
                let y = x as f64 - c;
                let t = s + y;
                c = (t - s) - y;
                s = t;
            }
            s
        };
        for n in [64, 5000, 100_000] {
            let xs = values(n);
            // SAFETY: `xs` holds `n` initialised values.
            let got = unsafe { f32::dense_total(xs.as_ptr(), xs.len()) };
            let want = compensated(&xs);
            let body = n / TOTAL_STEP * TOTAL_STEP;
            let pairs: f64 = (0..body / TOTAL_STEP)
                .flat_map(|s| {
                    (0..TOTAL_LANES)
                        .map(move |j| (s * TOTAL_STEP + j, s * TOTAL_STEP + j + TOTAL_LANES))
                })
                .map(|(a, b)| (xs[a] as f64 + xs[b] as f64).abs())
                .sum();
            let bound = pairs * f32::EPSILON as f64 / 2.0 + 1e-12 * want.abs().max(1.0);
            assert!(
                (got - want).abs() <= bound,
                "n = {n}: {got} vs {want} (bound {bound})"
            );
            // A plain f32 accumulation of the same values is further off.
            let naive = xs.iter().fold(0f32, |s, &x| s + x) as f64;
            assert!(
                (naive - want).abs() > (got - want).abs(),
                "n = {n}: the pairs beat f32"
            );
        }
        // Integers below 2^23: every pair sum is exact, so the total is.
        let ints: Vec<f32> = (0..10_000)
            .map(|i| ((i * 7919) % 4001) as f32 - 2000.0)
            .collect();
        // SAFETY: `ints` holds 10,000 initialised values.
        let got = unsafe { f32::dense_total(ints.as_ptr(), ints.len()) };
        assert_eq!(got, ints.iter().map(|&x| x as f64).sum::<f64>());
    }
}
