//! Run-time SIMD dispatch for the CPU kernels.
//!
//! The crate is built for the baseline of its target (x86-64 with SSE2;
//! aarch64 with NEON) and never asks for `-C target-cpu`. A kernel that
//! wants wider vectors is written once, as a plain branch-free loop over a
//! slice, and run through [`run`]: the loop is compiled once per instruction
//! set level inside a `#[target_feature]` function, and the best level this
//! CPU has (detected once, at the first call) runs it. LLVM vectorises each
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
//! Functions called inside [`run`]'s closure must be `#[inline(always)]` (or
//! small enough to inline), or their body is compiled for the baseline only.
//!
//! `TENSORSCOPE_SIMD=scalar|v3|v4|neon` caps the level (read once), for
//! comparing levels on one machine.

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
            .find(|l| l.name().split(' ').next() == Some(want))
            .unwrap_or(best),
        _ => best,
    }
});

/// The level kernels run at in this process.
pub(crate) fn level() -> Level {
    *LEVEL
}

/// Runs `f` compiled for this CPU's best level (see the module docs).
///
/// `f` is a closure, or a type implementing [`pulp::NullaryFnOnce`] whose
/// `call` is `#[inline(always)]`: a closure's body is inlined into the
/// level's `#[target_feature]` function only when LLVM finds it small
/// enough, and a large one (a whole row kernel) stays a baseline function;
/// the trait's `#[inline(always)]` `call` always is inlined.
#[inline(always)]
pub(crate) fn run<F: pulp::NullaryFnOnce>(f: F) -> F::Output {
    // `run_at` refuses only a level the CPU lacks; `LEVEL` is one it has.
    match run_at(level(), f) {
        Ok(r) => r,
        Err(f) => f.call(),
    }
}

/// Runs `f` compiled for `level`, or gives `f` back when this CPU lacks it.
#[inline(always)]
pub(crate) fn run_at<F: pulp::NullaryFnOnce>(
    level: Level,
    f: F,
) -> std::result::Result<F::Output, F> {
    use pulp::Simd;
    match level {
        Level::Scalar => Ok(pulp::Scalar::new().vectorize(f)),
        #[cfg(target_arch = "x86_64")]
        Level::V3 => match pulp::x86::V3::try_new() {
            Some(s) => Ok(s.vectorize(f)),
            None => Err(f),
        },
        #[cfg(target_arch = "x86_64")]
        Level::V4 => match pulp::x86::V4::try_new() {
            Some(s) => Ok(s.vectorize(f)),
            None => Err(f),
        },
        #[cfg(target_arch = "aarch64")]
        Level::Neon => match pulp::aarch64::Neon::try_new() {
            Some(s) => Ok(s.vectorize(f)),
            None => Err(f),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_detected_level_is_available_and_runs() {
        assert!(level().is_available());
        let mut v = [1.0f32; 37];
        run(|| v.iter_mut().for_each(|x| *x *= 3.0));
        assert!(v.iter().all(|&x| x == 3.0));
        println!("SIMD level: {}", level().name());
    }

    #[test]
    fn every_available_level_runs_and_absent_ones_refuse() {
        for &l in Level::all() {
            let r = run_at(l, || 7);
            assert_eq!(r.is_ok(), l.is_available(), "{}", l.name());
            if let Ok(v) = r {
                assert_eq!(v, 7);
            }
        }
    }
}
