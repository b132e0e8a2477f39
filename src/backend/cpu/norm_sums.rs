//! The two row sums of the LayerNorm / RMSNorm backward pass for f32, with
//! intrinsics: `(Σ dy w, Σ dy w xhat)`, `xhat = (x - mean) * rstd`, in the
//! 16 lanes of `norm::backward_sums` and folded in its order, so that the
//! bits are the generic loop's at every level.
//!
//! Why: LLVM's SLP vectoriser builds the generic loop (16 accumulators per
//! sum, written as plain Rust over arrays) from scalar and 128-bit pieces
//! with `vpermt2pd` shuffles, and stores the accumulators to the stack
//! every iteration (`perf annotate` of `layer_norm_fwd_bwd` at AVX-512); an
//! index-based rewrite vectorised cleanly in a standalone copy but not once
//! inlined into the backward kernel (Note [LayerNorm sums by intrinsics] in
//! `bench/results/ops-why.md`). Here each sum is one AVX-512 register (two
//! AVX2 registers), whatever the surrounding code.

#[cfg(target_arch = "x86_64")]
use super::lanes::fold_lanes;
use super::simd::Level;

/// Lanes of each sum: `norm::BACKWARD_LANES`.
#[cfg(target_arch = "x86_64")]
const L: usize = 16;

/// A row-sums kernel: `(dy, x, w, n, mean, rstd)`, each pointer to `n`
/// f32s.
pub(crate) type RowSums =
    unsafe fn(*const f32, *const f32, *const f32, usize, f32, f32) -> (f32, f32);

/// The kernel for `level`, where one is written (AVX-512 and AVX2).
pub(crate) fn for_level(level: Level) -> Option<RowSums> {
    match level {
        #[cfg(target_arch = "x86_64")]
        Level::V4 => Some(sums_avx512),
        #[cfg(target_arch = "x86_64")]
        Level::V3 => Some(sums_avx2),
        _ => None,
    }
}

/// The lanes' sums folded as `fold_lanes_split` folds them, plus the tail
/// `dy[from..n]` summed in order (the generic loop's remainder).
///
/// # Safety
/// The three pointers hold `n` f32s each.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn finish(
    mut s: [f32; L],
    mut t: [f32; L],
    (dy, x, w): (*const f32, *const f32, *const f32),
    from: usize,
    n: usize,
    (mean, rstd): (f32, f32),
) -> (f32, f32) {
    let (mut su, mut sv) = (0f32, 0f32);
    for k in from..n {
        // SAFETY: `k < n`: inside the three rows (this fn's contract).
        let (g, v, wc) = unsafe { (*dy.add(k), *x.add(k), *w.add(k)) };
        let gw = g * wc;
        su += gw;
        sv += gw * ((v - mean) * rstd);
    }
    (fold_lanes(&mut s) + su, fold_lanes(&mut t) + sv)
}

/// AVX-512: lane `j` of each sum is lane `j` of one register.
///
/// # Safety
/// The CPU has AVX-512 F; the three pointers hold `n` f32s each.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn sums_avx512(
    dy: *const f32,
    x: *const f32,
    w: *const f32,
    n: usize,
    mean: f32,
    rstd: f32,
) -> (f32, f32) {
    use std::arch::x86_64::{
        _mm512_add_ps, _mm512_loadu_ps, _mm512_mul_ps, _mm512_set1_ps, _mm512_setzero_ps,
        _mm512_storeu_ps, _mm512_sub_ps,
    };
    let (vm, vr) = (_mm512_set1_ps(mean), _mm512_set1_ps(rstd));
    let (mut s, mut t) = (_mm512_setzero_ps(), _mm512_setzero_ps());
    let body = n / L * L;
    let mut i = 0;
    while i < body {
        // SAFETY: `i + 16 <= body <= n`: inside the three rows.
        let (g, v, wc) = unsafe {
            (
                _mm512_loadu_ps(dy.add(i)),
                _mm512_loadu_ps(x.add(i)),
                _mm512_loadu_ps(w.add(i)),
            )
        };
        // The generic loop's operations, unfused, in its order.
        let gw = _mm512_mul_ps(g, wc);
        s = _mm512_add_ps(s, gw);
        t = _mm512_add_ps(
            t,
            _mm512_mul_ps(gw, _mm512_mul_ps(_mm512_sub_ps(v, vm), vr)),
        );
        i += L;
    }
    let (mut sl, mut tl) = ([0f32; L], [0f32; L]);
    // SAFETY: each array holds 16 f32s; then the rows' tail from `body`.
    unsafe {
        _mm512_storeu_ps(sl.as_mut_ptr(), s);
        _mm512_storeu_ps(tl.as_mut_ptr(), t);
        finish(sl, tl, (dy, x, w), body, n, (mean, rstd))
    }
}

/// AVX2: lanes 0-7 and 8-15 of each sum in two registers.
///
/// # Safety
/// The CPU has AVX2 and FMA; the three pointers hold `n` f32s each.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn sums_avx2(
    dy: *const f32,
    x: *const f32,
    w: *const f32,
    n: usize,
    mean: f32,
    rstd: f32,
) -> (f32, f32) {
    use std::arch::x86_64::{
        __m256, _mm256_add_ps, _mm256_loadu_ps, _mm256_mul_ps, _mm256_set1_ps, _mm256_setzero_ps,
        _mm256_storeu_ps, _mm256_sub_ps,
    };
    let (vm, vr) = (_mm256_set1_ps(mean), _mm256_set1_ps(rstd));
    let mut s: [__m256; 2] = [_mm256_setzero_ps(); 2];
    let mut t: [__m256; 2] = [_mm256_setzero_ps(); 2];
    let body = n / L * L;
    let mut i = 0;
    while i < body {
        for h in 0..2 {
            let k = i + 8 * h;
            // SAFETY: `k + 8 <= i + 16 <= body <= n`: inside the three rows.
            let (g, v, wc) = unsafe {
                (
                    _mm256_loadu_ps(dy.add(k)),
                    _mm256_loadu_ps(x.add(k)),
                    _mm256_loadu_ps(w.add(k)),
                )
            };
            let gw = _mm256_mul_ps(g, wc);
            s[h] = _mm256_add_ps(s[h], gw);
            let xh = _mm256_mul_ps(_mm256_sub_ps(v, vm), vr);
            t[h] = _mm256_add_ps(t[h], _mm256_mul_ps(gw, xh));
        }
        i += L;
    }
    let (mut sl, mut tl) = ([0f32; L], [0f32; L]);
    // SAFETY: each array holds 16 f32s (two halves of 8); then the rows'
    // tail from `body`.
    unsafe {
        for h in 0..2 {
            _mm256_storeu_ps(sl.as_mut_ptr().add(8 * h), s[h]);
            _mm256_storeu_ps(tl.as_mut_ptr().add(8 * h), t[h]);
        }
        finish(sl, tl, (dy, x, w), body, n, (mean, rstd))
    }
}

/// What [`LaneSum`] sums per element: `v`, `(v - c)^2`, `v - c` or `v^2`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Term {
    /// `v` (LayerNorm's mean).
    Value,
    /// `(v - c)^2` (LayerNorm's variance about the mean `c`).
    CenteredSquare,
    /// `v - c` (the residual that refines LayerNorm's mean `c`).
    Centered,
    /// `v^2` (RMSNorm's mean square).
    Square,
}

/// Lanes of the forward statistics: `norm::LANES`.
#[cfg(target_arch = "x86_64")]
const LANES: usize = 32;

/// A statistics kernel: `(x, n, term, c)` is `Σ term(x_i)` over the `n`
/// f32s at `x`, in `norm::lane_sum`'s 32 lanes, fold and tail (its bits).
pub(crate) type LaneSum = unsafe fn(*const f32, usize, Term, f32) -> f32;

/// The statistics kernel for `level`, where one is written (AVX-512 and
/// AVX2).
pub(crate) fn lane_sum_for_level(level: Level) -> Option<LaneSum> {
    match level {
        #[cfg(target_arch = "x86_64")]
        Level::V4 => Some(lane_sum_avx512),
        #[cfg(target_arch = "x86_64")]
        Level::V3 => Some(lane_sum_avx2),
        _ => None,
    }
}

/// `term(v)` as `norm::lane_sum`'s closures compute it.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn term(t: Term, v: f32, c: f32) -> f32 {
    match t {
        Term::Value => v,
        Term::CenteredSquare => (v - c) * (v - c),
        Term::Centered => v - c,
        Term::Square => v * v,
    }
}

/// The 32 lanes folded, plus `x[from..n]`'s terms summed in order.
///
/// # Safety
/// `x` holds `n` f32s.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn finish_lanes(
    mut acc: [f32; LANES],
    x: *const f32,
    from: usize,
    n: usize,
    t: Term,
    c: f32,
) -> f32 {
    let mut tail = 0f32;
    for k in from..n {
        // SAFETY: `k < n` (this fn's contract).
        tail += term(t, unsafe { *x.add(k) }, c);
    }
    fold_lanes(&mut acc) + tail
}

/// AVX-512: lanes 0-15 and 16-31 in two registers.
///
/// # Safety
/// The CPU has AVX-512 F; `x` holds `n` f32s.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn lane_sum_avx512(x: *const f32, n: usize, t: Term, c: f32) -> f32 {
    use std::arch::x86_64::{
        _mm512_add_ps, _mm512_loadu_ps, _mm512_mul_ps, _mm512_set1_ps, _mm512_setzero_ps,
        _mm512_storeu_ps, _mm512_sub_ps,
    };
    let vc = _mm512_set1_ps(c);
    let mut acc = [_mm512_setzero_ps(); 2];
    let body = n / LANES * LANES;
    let mut i = 0;
    while i < body {
        for (h, a) in acc.iter_mut().enumerate() {
            // SAFETY: `i + 16 h + 16 <= i + 32 <= body <= n`.
            let v = unsafe { _mm512_loadu_ps(x.add(i + 16 * h)) };
            let f = match t {
                Term::Value => v,
                Term::CenteredSquare => {
                    let d = _mm512_sub_ps(v, vc);
                    _mm512_mul_ps(d, d)
                }
                Term::Centered => _mm512_sub_ps(v, vc),
                Term::Square => _mm512_mul_ps(v, v),
            };
            *a = _mm512_add_ps(*a, f);
        }
        i += LANES;
    }
    let mut l = [0f32; LANES];
    // SAFETY: `l` holds 32 f32s; then `x`'s tail from `body`.
    unsafe {
        for (h, a) in acc.iter().enumerate() {
            _mm512_storeu_ps(l.as_mut_ptr().add(16 * h), *a);
        }
        finish_lanes(l, x, body, n, t, c)
    }
}

/// AVX2: lanes in four registers of 8.
///
/// # Safety
/// The CPU has AVX2 and FMA; `x` holds `n` f32s.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn lane_sum_avx2(x: *const f32, n: usize, t: Term, c: f32) -> f32 {
    use std::arch::x86_64::{
        _mm256_add_ps, _mm256_loadu_ps, _mm256_mul_ps, _mm256_set1_ps, _mm256_setzero_ps,
        _mm256_storeu_ps, _mm256_sub_ps,
    };
    let vc = _mm256_set1_ps(c);
    let mut acc = [_mm256_setzero_ps(); 4];
    let body = n / LANES * LANES;
    let mut i = 0;
    while i < body {
        for (h, a) in acc.iter_mut().enumerate() {
            // SAFETY: `i + 8 h + 8 <= i + 32 <= body <= n`.
            let v = unsafe { _mm256_loadu_ps(x.add(i + 8 * h)) };
            let f = match t {
                Term::Value => v,
                Term::CenteredSquare => {
                    let d = _mm256_sub_ps(v, vc);
                    _mm256_mul_ps(d, d)
                }
                Term::Centered => _mm256_sub_ps(v, vc),
                Term::Square => _mm256_mul_ps(v, v),
            };
            *a = _mm256_add_ps(*a, f);
        }
        i += LANES;
    }
    let mut l = [0f32; LANES];
    // SAFETY: `l` holds 32 f32s; then `x`'s tail from `body`.
    unsafe {
        for (h, a) in acc.iter().enumerate() {
            _mm256_storeu_ps(l.as_mut_ptr().add(8 * h), *a);
        }
        finish_lanes(l, x, body, n, t, c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kernel this CPU can run gives `norm::backward_sums`'s bits, for
    /// row lengths around the 16 lanes and values of mixed magnitude.
    #[test]
    fn the_intrinsic_row_sums_are_the_generic_loops_bits() {
        let mut ran = 0;
        for &level in Level::all() {
            let Some(f) = for_level(level).filter(|_| level.is_available()) else {
                println!("no row-sums kernel at {} on this CPU", level.name());
                continue;
            };
            for n in [0, 1, 15, 16, 17, 31, 33, 100, 1024, 1031] {
                let v = |k: usize, s: f32| (k as f32 * s).sin() * 10f32.powi(k as i32 % 5 - 2);
                let dy: Vec<f32> = (0..n).map(|k| v(k, 0.37)).collect();
                let x: Vec<f32> = (0..n).map(|k| v(k, 1.91) + 0.25).collect();
                let w: Vec<f32> = (0..n).map(|k| 1.0 + v(k, 0.11) / 8.0).collect();
                let (mean, rstd) = (0.125f32, 1.75f32);
                let want = crate::backend::cpu::norm::backward_sums(&dy, &x, &w, mean, rstd);
                // SAFETY: the level is available; three rows of `n` f32s.
                let got = unsafe { f(dy.as_ptr(), x.as_ptr(), w.as_ptr(), n, mean, rstd) };
                assert_eq!(
                    (got.0.to_bits(), got.1.to_bits()),
                    (want.0.to_bits(), want.1.to_bits()),
                    "{} at n = {n}: {got:?} against {want:?}",
                    level.name()
                );
            }
            ran += 1;
        }
        println!("checked {ran} kernels");
    }

    /// Every statistics kernel this CPU can run gives `norm::lane_sum`'s
    /// bits for each term.
    #[test]
    fn the_intrinsic_lane_sums_are_the_generic_loops_bits() {
        use crate::backend::cpu::norm::lane_sum;
        let mut ran = 0;
        for &level in Level::all() {
            let Some(f) = lane_sum_for_level(level).filter(|_| level.is_available()) else {
                continue;
            };
            for n in [0, 1, 31, 32, 33, 63, 100, 1024, 1061] {
                let x: Vec<f32> = (0..n)
                    .map(|k| (k as f32 * 0.73).sin() * 10f32.powi(k as i32 % 5 - 2) + 0.5)
                    .collect();
                let c = 0.375f32;
                for (t, want) in [
                    (Term::Value, lane_sum(&x, |v| v)),
                    (Term::CenteredSquare, lane_sum(&x, |v| (v - c) * (v - c))),
                    (Term::Centered, lane_sum(&x, |v| v - c)),
                    (Term::Square, lane_sum(&x, |v| v * v)),
                ] {
                    // SAFETY: the level is available; `x` holds `n` f32s.
                    let got = unsafe { f(x.as_ptr(), n, t, c) };
                    assert_eq!(
                        got.to_bits(),
                        want.to_bits(),
                        "{} {t:?} at n = {n}",
                        level.name()
                    );
                }
            }
            ran += 1;
        }
        println!("checked {ran} kernels");
    }
}
