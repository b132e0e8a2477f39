//! Run-time SIMD dispatch for the CPU kernels.
//!
//! The crate is built for the baseline of its target (x86-64 with SSE2;
//! aarch64 with NEON) and never asks for `-C target-cpu`. A kernel that
//! wants wider vectors is written once, as a plain branch-free loop over a
//! slice, and run through [`run`]: the loop is compiled once per instruction
//! set level inside a `#[target_feature]` function (for a hot kernel; a
//! cold one, over f64, an integer type or bool, only at the baseline: Note
//! [cold kernels] in ARCHITECTURE.md), and the best level this CPU has
//! (detected once, at the first call) runs it. LLVM vectorises each
//! copy for its level: 16 f32 lanes with AVX-512, 8 with AVX2+FMA, 4 with
//! SSE2 or NEON.
//!
//! The levels come from `pulp`, the dispatch layer that `gemm` (our matmul)
//! already uses: it is in the dependency tree anyway, it caches the CPU
//! detection, it covers x86-64 v3 (AVX2+FMA) and v4 (AVX-512) and aarch64
//! NEON with one call, and it lets a test force each level
//! ([`run_at`]), which a hand-written `is_x86_feature_detected!` switch would
//! have had to re-implement per kernel.
//!
//! The work is a [`Kernel`]: a struct whose `call` is `#[inline(always)]`,
//! so that its body is compiled inside each level's `#[target_feature]`
//! function (a closure's body is a separate function that LLVM may leave
//! out of line, compiled for the baseline: measured, 4 of 11 kernel loops
//! stayed scalar that way). Functions `call` uses must be
//! `#[inline(always)]` too, or fn items of such functions.
//!
//! `TENSORSCOPE_SIMD=scalar|v3|v4|neon` caps the level (read once), for
//! comparing levels on one machine.

use crate::dtype::DType;
use std::sync::LazyLock;

/// An instruction set level a kernel can be compiled for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Level {
    /// The target's baseline (SSE2 on x86-64).
    Scalar,
    /// x86-64-v3: AVX2, FMA, BMI.
    #[cfg(target_arch = "x86_64")]
    V3,
    /// x86-64-v4: AVX-512 F/BW/CD/DQ/VL.
    #[cfg(target_arch = "x86_64")]
    V4,
    /// aarch64 NEON.
    #[cfg(target_arch = "aarch64")]
    Neon,
}

impl Level {
    /// The name used in `TENSORSCOPE_SIMD` and in test output.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Level::Scalar => "scalar",
            #[cfg(target_arch = "x86_64")]
            Level::V3 => "v3 (AVX2+FMA)",
            #[cfg(target_arch = "x86_64")]
            Level::V4 => "v4 (AVX-512)",
            #[cfg(target_arch = "aarch64")]
            Level::Neon => "neon",
        }
    }

    /// The short name `TENSORSCOPE_SIMD` takes: the first word of
    /// [`Level::name`].
    pub(crate) fn short_name(self) -> &'static str {
        self.name().split(' ').next().unwrap_or("")
    }

    /// Every level this build knows, lowest first.
    pub(crate) fn all() -> &'static [Level] {
        #[cfg(target_arch = "x86_64")]
        {
            &[Level::Scalar, Level::V3, Level::V4]
        }
        #[cfg(target_arch = "aarch64")]
        {
            &[Level::Scalar, Level::Neon]
        }
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        {
            &[Level::Scalar]
        }
    }

    /// Whether kernels at this level fuse `a * b + c` (the `FMA` of
    /// [`Kernel::call`]): every level above the x86-64 baseline has FMA
    /// (x86-64-v3 and v4 by definition), and so has aarch64. (`run_at`
    /// picks the same per arm, as a constant; the tests ask this.)
    #[cfg(test)]
    pub(crate) fn fma(self) -> bool {
        match self {
            Level::Scalar => BASELINE_FMA,
            #[cfg(target_arch = "x86_64")]
            Level::V3 | Level::V4 => true,
            #[cfg(target_arch = "aarch64")]
            Level::Neon => true,
        }
    }

    /// Whether this CPU can run the level.
    pub(crate) fn is_available(self) -> bool {
        match self {
            Level::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Level::V3 => pulp::x86::V3::try_new().is_some(),
            #[cfg(target_arch = "x86_64")]
            Level::V4 => pulp::x86::V4::try_new().is_some(),
            #[cfg(target_arch = "aarch64")]
            Level::Neon => pulp::aarch64::Neon::try_new().is_some(),
        }
    }
}

/// The level [`run`] uses: the best this CPU has, capped by
/// `TENSORSCOPE_SIMD` when set to a level's short name.
static LEVEL: LazyLock<Level> = LazyLock::new(|| {
    let best = Level::all()
        .iter()
        .rev()
        .copied()
        .find(|l| l.is_available())
        .unwrap_or(Level::Scalar);
    let cap = std::env::var("TENSORSCOPE_SIMD").ok();
    match cap.as_deref().map(str::trim) {
        Some(want) if !want.is_empty() => Level::all()
            .iter()
            .copied()
            .filter(|l| l.is_available())
            .find(|l| l.short_name() == want)
            .unwrap_or(best),
        _ => best,
    }
});

/// The level kernels run at in this process.
pub(crate) fn level() -> Level {
    *LEVEL
}

/// Work for [`run`]: implementations mark `call` `#[inline(always)]`.
///
/// `FMA` says whether the level has fused multiply-add instructions, so
/// that `f32::mul_add` is one instruction there (see [`Level::fma`]); the
/// kernels pass it on to `vmath`'s polynomials, which fuse their products
/// only when it is true (at a level without FMA, `mul_add` would be a libm
/// call per element).
pub(crate) trait Kernel {
    type Output;
    /// Whether [`run`] compiles the kernel for the levels above the
    /// baseline; a cold kernel (over f64, an integer type or bool) is one
    /// baseline copy. See Note [cold kernels] in ARCHITECTURE.md.
    const WIDE: bool = true;
    fn call<const FMA: bool>(self) -> Self::Output;
}

/// Whether kernels over this element type are compiled for every SIMD
/// level (f32 and the half types) or for the baseline only: Note [cold
/// kernels] in ARCHITECTURE.md.
pub(crate) trait Hot {
    const HOT: bool;
}

impl<T: crate::dtype::Element> Hot for T {
    const HOT: bool = matches!(T::DTYPE, DType::F32 | DType::F16 | DType::BF16);
}

/// pulp's entry point, forwarding to the kernel with everything inlined.
struct Inline<K, const FMA: bool>(K);

impl<K: Kernel, const FMA: bool> pulp::WithSimd for Inline<K, FMA> {
    type Output = K::Output;
    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) -> K::Output {
        self.0.call::<FMA>()
    }
}

/// Whether the target's baseline has fused multiply-add: aarch64 does
/// (`fmadd` is in the base instruction set), x86-64's SSE2 does not.
pub(crate) const BASELINE_FMA: bool = cfg!(target_arch = "aarch64");

/// `x = f(x)` over a slice: the kernel of the unit tests. `f` should be a
/// fn item of an `#[inline(always)]` function.
#[cfg(test)]
pub(crate) struct MapSlice<'a, T, F>(pub &'a mut [T], pub F);

#[cfg(test)]
impl<T: Copy, F: Fn(T) -> T> Kernel for MapSlice<'_, T, F> {
    type Output = ();
    #[inline(always)]
    fn call<const FMA: bool>(self) {
        for x in self.0.iter_mut() {
            *x = (self.1)(*x);
        }
    }
}

/// Runs `k` compiled for this CPU's best level (see the module docs).
#[inline(always)]
pub(crate) fn run<K: Kernel>(k: K) -> K::Output {
    run_capped(Cap::Widest, k)
}

/// The widest level a kernel may run at, below the CPU's best.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cap {
    /// The CPU's best level ([`run`]).
    Widest,
    /// x86-64-v3 (AVX2+FMA) where the CPU has AVX-512: for the kernels
    /// whose AVX-512 build measured slower than their AVX2 build, each named
    /// at its call (Note [AVX2 cap] in `bench/results/ops-why.md`). For `max`
    /// and `argmax` LLVM builds the NaN-aware compares with mask registers
    /// there, and `argmax`'s search for the found value with gathers.
    /// (LayerNorm's forward is not capped: its statistics' lane loops, which
    /// LLVM's SLP vectoriser built from pieces, are `norm_sums`' intrinsics.)
    NoAvx512,
}

/// The level [`run_capped`] runs `cap`'s kernels at: the CPU's best
/// level, or `cap`, whichever is lower.
#[inline]
pub(crate) fn capped_level(cap: Cap) -> Level {
    let l = level();
    #[cfg(target_arch = "x86_64")]
    if cap == Cap::NoAvx512 && l == Level::V4 {
        return Level::V3;
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = cap;
    l
}

/// [`run`] at [`capped_level`].
#[inline(always)]
pub(crate) fn run_capped<K: Kernel>(cap: Cap, k: K) -> K::Output {
    // `if K::WIDE` on the constant itself: rustc then instantiates no
    // level function for a cold kernel (the mono collector skips a
    // `switchInt` on a constant's dead arm).
    if K::WIDE {
        match run_wide(capped_level(cap), k) {
            Ok(r) => r,
            Err(k) => baseline(k),
        }
    } else {
        baseline(k)
    }
}

/// The kernel compiled at the target's baseline: one copy, shared by the
/// baseline level, short runs ([`run_map`]) and cold kernels.
#[inline(never)]
fn baseline<K: Kernel>(k: K) -> K::Output {
    k.call::<BASELINE_FMA>()
}

/// Runs shorter than this many elements skip [`run`]'s dispatch in
/// [`run_map`].
pub(crate) const SHORT_RUN: usize = 32;

/// [`run`] for an elementwise kernel over `len` elements whose result does
/// not depend on `FMA` (it applies a closure, which cannot see the level):
/// a run shorter than [`SHORT_RUN`] calls the baseline copy directly,
/// because the dispatch (a call through `pulp`'s target-feature entry
/// point) costs more than such a run's work. The strided copies of im2col
/// and pooling hand out runs of 4 to 8 elements (a convolution's output
/// row).
#[inline(always)]
pub(crate) fn run_map<K: Kernel>(k: K, len: usize) -> K::Output {
    if len < SHORT_RUN {
        baseline(k)
    } else {
        run(k)
    }
}

/// Runs `k` compiled for `level`, a level above the baseline, or gives `k`
/// back when `level` is the baseline or this CPU lacks it.
#[inline(always)]
fn run_wide<K: Kernel>(level: Level, k: K) -> std::result::Result<K::Output, K> {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    use pulp::Simd;
    match level {
        Level::Scalar => Err(k),
        #[cfg(target_arch = "x86_64")]
        Level::V3 => match pulp::x86::V3::try_new() {
            Some(s) => Ok(Simd::vectorize(s, Inline::<K, true>(k))),
            None => Err(k),
        },
        #[cfg(target_arch = "x86_64")]
        Level::V4 => match pulp::x86::V4::try_new() {
            Some(s) => Ok(Simd::vectorize(s, Inline::<K, true>(k))),
            None => Err(k),
        },
        #[cfg(target_arch = "aarch64")]
        Level::Neon => match pulp::aarch64::Neon::try_new() {
            Some(s) => Ok(Simd::vectorize(s, Inline::<K, true>(k))),
            None => Err(k),
        },
    }
}

/// Runs `k` compiled for `level` whether or not it is [`Kernel::WIDE`]
/// (the per-level tests), or gives `k` back when this CPU lacks it.
#[cfg(test)]
pub(crate) fn run_at<K: Kernel>(level: Level, k: K) -> std::result::Result<K::Output, K> {
    if level == Level::Scalar {
        return Ok(baseline(k));
    }
    run_wide(level, k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_detected_level_is_available_and_runs() {
        assert!(level().is_available());
        let mut v = [1.0f32; 37];
        run(MapSlice(&mut v, |x| x * 3.0));
        assert!(v.iter().all(|&x| x == 3.0));
        println!("SIMD level: {}", level().name());
    }

    /// A capped kernel runs at V3 where the best level is V4, else at the
    /// best level; an uncapped one always at the best.
    #[test]
    fn a_capped_kernel_runs_below_avx512_only() {
        assert_eq!(capped_level(Cap::Widest), level());
        #[cfg(target_arch = "x86_64")]
        let want = if level() == Level::V4 {
            Level::V3
        } else {
            level()
        };
        #[cfg(not(target_arch = "x86_64"))]
        let want = level();
        assert_eq!(capped_level(Cap::NoAvx512), want);
        assert!(capped_level(Cap::NoAvx512).is_available());
        let mut v = [1.0f32; 40];
        run_capped(Cap::NoAvx512, MapSlice(&mut v, |x| x + 1.0));
        assert!(v.iter().all(|&x| x == 2.0));
        println!("capped level: {}", capped_level(Cap::NoAvx512).name());
    }

    /// NEON is in aarch64's baseline, so every aarch64 CPU runs the NEON
    /// level and the per-level tests (the vmath ULP sweeps among them)
    /// cover it: `.ci/aarch64.sh` runs them under qemu-user.
    #[cfg(target_arch = "aarch64")]
    #[test]
    fn aarch64_has_the_neon_level() {
        assert!(Level::Neon.is_available());
        assert!(std::env::var_os("TENSORSCOPE_SIMD").is_some() || level() == Level::Neon);
    }

    #[test]
    fn every_available_level_runs_and_absent_ones_refuse() {
        for &l in Level::all() {
            let mut v = [2.0f64; 5];
            let r = run_at(l, MapSlice(&mut v, |x| x + 5.0));
            assert_eq!(r.is_ok(), l.is_available(), "{}", l.name());
            if r.is_ok() {
                assert_eq!(v, [7.0; 5]);
            }
        }
    }
}
