//! ULP tests of every kernel at every dispatch level this CPU has.
//!
//! Each kernel runs over its sweep inside `simd::run_at(level, ..)`, as the
//! unary ops run it, so the code under test is the vectorised code of that
//! level. Levels the CPU lacks print a skip line.

use super::{float32 as k32, float64 as k64, VMath};
use crate::backend::cpu::numeric_traits::{erf_precise, gelu_f64};
use crate::backend::cpu::simd::{run_at, Level, MapSlice};

/// Inputs for f32: a stride through every bit pattern (so every binade,
/// both signs, subnormals, infinities and NaNs), a dense linear sweep of
/// [-30, 30], and the special values.
fn sweep32() -> Vec<f32> {
    let mut v: Vec<f32> = (0..=u32::MAX).step_by(32_771).map(f32::from_bits).collect();
    let n = 240_000;
    v.extend((0..n).map(|i| -30.0 + 60.0 * i as f32 / n as f32));
    v.extend([
        0.0,
        -0.0,
        f32::MIN_POSITIVE,
        -f32::MIN_POSITIVE,
        1e-45,
        -1e-45,
        f32::MAX,
        f32::MIN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        0.625,
        -0.625,
        1.0,
        -1.0,
        20.0,
        20.000_002,
        88.72,
        88.73,
        -103.9,
        -104.1,
        4096.0,
        -9.5,
        -13.5,
    ]);
    v.extend(trig_sweep());
    v
}

/// The inputs that stress `sin` and `cos`'s reduction: the f32s nearest to
/// multiples of pi/2 and their neighbours (for small k and up to and
/// beyond the reduction's bound `TRIG_MAX` = 2^20), the bound itself, a
/// dense sweep of [-1e4, 1e4], and huge values (through libm's fix-up).
fn trig_sweep() -> Vec<f32> {
    let mut v = Vec::new();
    let ks = (1..=2_000u64)
        .chain((1..=40).map(|i| i * 16_411))
        .chain(667_000..667_600) // 2^20 * 2/pi = 667_544.2
        .chain([1 << 20, 1 << 21, 10_000_000, 1 << 40, 1 << 60]);
    for k in ks {
        let c = (k as f64 * std::f64::consts::FRAC_PI_2) as f32;
        for d in -3i32..=3 {
            let x = f32::from_bits((c.to_bits() as i32 + d) as u32);
            v.extend([x, -x]);
        }
    }
    let b = super::trig::TRIG_MAX;
    for d in -20i32..=20 {
        let x = f32::from_bits((b.to_bits() as i32 + d) as u32);
        v.extend([x, -x]);
    }
    let n = 100_000;
    v.extend((0..n).map(|i| -1e4 + 2e4 * i as f32 / n as f32));
    v.extend([1e30, -1e30, 3.0e38, -3.0e38, 1e-30, -1e-30, 1e-40, -1e-40]);
    v
}

fn sweep64() -> Vec<f64> {
    let mut v: Vec<f64> = (0..200_000u64)
        .map(|i| f64::from_bits(i.wrapping_mul(0x0001_4f8b_588e_368f)))
        .collect();
    let n = 200_000;
    v.extend((0..n).map(|i| -40.0 + 80.0 * i as f64 / n as f64));
    v.extend([
        0.0,
        -0.0,
        f64::MIN_POSITIVE,
        5e-324,
        -5e-324,
        f64::MAX,
        f64::MIN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        0.625,
        -0.625,
        20.0,
        709.78,
        709.79,
        -745.1,
        -745.3,
    ]);
    v
}

/// A float type under test: its distance measure and tolerances.
trait Probe: Copy + Default + std::fmt::LowerExp + VMath + num_traits::Float {
    /// "f32" or "f64", for messages.
    const LABEL: &'static str;
    /// The absolute tolerance of derivatives (see [`DERIV_ABS_EPS`]).
    const EPS: f64;
    /// The relative step of [`kappa`]'s central difference.
    const KAPPA_H: f64;
    fn wide(self) -> f64;
    /// `want` rounded to this type, and the spacing of this type at it
    /// (at a subnormal, the smallest subnormal).
    fn round_and_spacing(want: f64) -> (f64, f64);
}

impl Probe for f32 {
    const LABEL: &'static str = "f32";
    const EPS: f64 = f32::EPSILON as f64;
    const KAPPA_H: f64 = 1e-6;
    fn wide(self) -> f64 {
        self as f64
    }
    fn round_and_spacing(want: f64) -> (f64, f64) {
        let a = (want as f32).abs();
        let next = if a == f32::MAX {
            a - f32::from_bits(a.to_bits() - 1)
        } else {
            f32::from_bits(a.to_bits() + 1) - a
        };
        (want as f32 as f64, next as f64)
    }
}

impl Probe for f64 {
    const LABEL: &'static str = "f64";
    const EPS: f64 = f64::EPSILON;
    const KAPPA_H: f64 = 1e-7;
    fn wide(self) -> f64 {
        self
    }
    fn round_and_spacing(want: f64) -> (f64, f64) {
        let a = want.abs();
        let next = if a == f64::MAX {
            a - f64::from_bits(a.to_bits() - 1)
        } else {
            f64::from_bits(a.to_bits() + 1) - a
        };
        (want, next)
    }
}

/// Distance of `got` from the exact `want`, in ulps of `want` rounded to
/// `T`. NaN matches NaN only; an infinity matches only itself.
fn ulps<T: Probe>(got: T, want: f64) -> f64 {
    let got = got.wide();
    if want.is_nan() || got.is_nan() {
        return if want.is_nan() && got.is_nan() {
            0.0
        } else {
            f64::INFINITY
        };
    }
    let (rounded, spacing) = T::round_and_spacing(want);
    if rounded.is_infinite() || got.is_infinite() {
        return if got == rounded { 0.0 } else { f64::INFINITY };
    }
    (got - want).abs() / spacing
}

/// (name, kernel, f64 reference, ulps, cond): the bound at `x` is
/// `ulps + cond * kappa(x)`, with `kappa` the condition number
/// `|x f'(x) / f(x)|` of the function. `cond` is 0 for the kernels that
/// reduce their argument exactly (exp, log, ...) and 2 for the compositions
/// (silu, gelu, gelu_tanh) whose inner argument (`-x`, `x/sqrt 2`,
/// `sqrt(2/pi)(x + 0.044715 x^3)`) is itself rounded before the outer
/// function amplifies that rounding: no implementation in the same
/// precision avoids it.
/// (name, the kernel without and with fused products (`Madd`), the
/// reference, the ulp bound, the condition-number factor).
type Case<T> = (&'static str, [fn(T) -> T; 2], fn(f64) -> f64, f64, f64);

/// Both forms of a kernel, indexed by `Level::fma`.
macro_rules! both {
    ($m:ident :: $f:ident) => {
        [$m::$f::<false> as fn(_) -> _, $m::$f::<true> as fn(_) -> _]
    };
}

/// Derivatives (names ending in `'`) are sums of O(1) terms that cancel
/// near the roots of the derivative (gelu' at -0.75) and where a factor
/// saturates (silu' far right): there they are held to an absolute 16 eps
/// instead of ulps of the (small) result, as `torch.autograd.gradcheck`
/// holds gradients to an absolute tolerance.
const DERIV_ABS_EPS: f64 = 16.0;

/// `|x f'(x) / f(x)|` by a central difference of the reference.
fn kappa(r: fn(f64) -> f64, x: f64, h: f64) -> f64 {
    let y = r(x);
    if x == 0.0 || y == 0.0 || !y.is_finite() || !x.is_finite() {
        return 0.0;
    }
    let d = (r(x * (1.0 + h)) - r(x * (1.0 - h))) / (2.0 * h);
    (d / y).abs()
}

fn sigmoid_ref(x: f64) -> f64 {
    let e = (-x.abs()).exp();
    if x >= 0.0 {
        1.0 / (1.0 + e)
    } else {
        e / (1.0 + e)
    }
}
fn softplus_ref(x: f64) -> f64 {
    if x > 20.0 {
        x
    } else {
        x.max(0.0) + (-x.abs()).exp().ln_1p()
    }
}
fn gelu_tanh_ref(x: f64) -> f64 {
    let u = 0.797_884_560_802_865_4 * (x + 0.044_715 * x * x * x);
    x * sigmoid_ref(2.0 * u)
}

fn silu_grad_ref(x: f64) -> f64 {
    let s = sigmoid_ref(x);
    s * (1.0 + x * (1.0 - s))
}
fn softplus_grad_ref(x: f64) -> f64 {
    if x > 20.0 {
        1.0
    } else {
        sigmoid_ref(x)
    }
}
fn gelu_grad_ref(x: f64) -> f64 {
    use crate::backend::cpu::numeric_traits::erfc_precise;
    let z = x * std::f64::consts::FRAC_1_SQRT_2;
    let cdf = if x >= 0.0 {
        0.5 * (1.0 + erf_precise(z))
    } else {
        0.5 * erfc_precise(-z)
    };
    cdf + x * (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt()
}
fn gelu_tanh_grad_ref(x: f64) -> f64 {
    let (k, c) = (0.797_884_560_802_865_4, 0.044_715);
    let t = (k * (x + c * x * x * x)).tanh();
    // 1 - t^2 is 0 beyond |x| = 30: the clamp avoids 0 * inf only.
    let x = x.clamp(-30.0, 30.0);
    0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * c * x * x)
}
fn erf_grad_ref(x: f64) -> f64 {
    std::f64::consts::FRAC_2_SQRT_PI * (-x * x).exp()
}

fn cases32() -> Vec<Case<f32>> {
    vec![
        ("exp", both!(k32::exp), f64::exp, 1.0, 0.0),
        ("log", both!(k32::log), f64::ln, 1.0, 0.0),
        ("log1p", both!(k32::log1p), f64::ln_1p, 2.0, 0.0),
        ("tanh", both!(k32::tanh), f64::tanh, 2.0, 0.0),
        ("sigmoid", both!(k32::sigmoid), sigmoid_ref, 3.0, 0.0),
        ("silu", both!(k32::silu), |x| x * sigmoid_ref(x), 2.0, 2.0),
        ("softplus", both!(k32::softplus), softplus_ref, 2.0, 0.0),
        ("erf", both!(k32::erf), erf_precise, 3.0, 0.0),
        ("gelu", both!(k32::gelu), gelu_f64, 4.5, 2.0),
        ("gelu_tanh", both!(k32::gelu_tanh), gelu_tanh_ref, 4.0, 2.0),
        ("tanh'", both!(k32::tanh_grad), |y| 1.0 - y * y, 4.0, 2.0),
        (
            "sigmoid'",
            both!(k32::sigmoid_grad),
            |y| y * (1.0 - y),
            4.0,
            2.0,
        ),
        ("silu'", both!(k32::silu_grad), silu_grad_ref, 4.0, 2.0),
        (
            "softplus'",
            both!(k32::softplus_grad),
            softplus_grad_ref,
            4.0,
            2.0,
        ),
        ("gelu'", both!(k32::gelu_grad), gelu_grad_ref, 4.0, 2.0),
        (
            "gelu_tanh'",
            both!(k32::gelu_tanh_grad),
            gelu_tanh_grad_ref,
            4.0,
            2.0,
        ),
        ("erf'", both!(k32::erf_grad), erf_grad_ref, 4.0, 2.0),
        ("sin", both!(k32::sin), f64::sin, 2.0, 0.0),
        ("cos", both!(k32::cos), f64::cos, 2.0, 0.0),
        ("tan", both!(k32::tan), f64::tan, 2.0, 0.0),
        ("atan", both!(k32::atan), f64::atan, 1.0, 0.0),
        ("asin", both!(k32::asin), f64::asin, 1.0, 0.0),
        ("acos", both!(k32::acos), f64::acos, 1.0, 0.0),
        ("sinh", both!(k32::sinh), f64::sinh, 1.0, 0.0),
        ("cosh", both!(k32::cosh), f64::cosh, 1.0, 0.0),
        ("expm1", both!(k32::expm1), f64::exp_m1, 3.0, 0.0),
        ("exp2", both!(k32::exp2), f64::exp2, 2.0, 0.0),
        ("log2", both!(k32::log2), f64::log2, 2.0, 0.0),
    ]
}

fn cases64() -> Vec<Case<f64>> {
    vec![
        ("exp", both!(k64::exp), f64::exp, 1.0, 0.0),
        ("log", both!(k64::log), f64::ln, 1.0, 0.0),
        ("log1p", both!(k64::log1p), f64::ln_1p, 2.0, 0.0),
        ("tanh", both!(k64::tanh), f64::tanh, 2.0, 0.0),
        ("sigmoid", both!(k64::sigmoid), sigmoid_ref, 4.0, 0.0),
        ("silu", both!(k64::silu), |x| x * sigmoid_ref(x), 4.0, 2.0),
        ("softplus", both!(k64::softplus), softplus_ref, 4.0, 0.0),
        ("gelu_tanh", both!(k64::gelu_tanh), gelu_tanh_ref, 4.0, 2.0),
        ("tanh'", both!(k64::tanh_grad), |y| 1.0 - y * y, 4.0, 2.0),
        (
            "sigmoid'",
            both!(k64::sigmoid_grad),
            |y| y * (1.0 - y),
            4.0,
            2.0,
        ),
        ("silu'", both!(k64::silu_grad), silu_grad_ref, 4.0, 2.0),
        (
            "softplus'",
            both!(k64::softplus_grad),
            softplus_grad_ref,
            4.0,
            2.0,
        ),
        ("gelu'", both!(k64::gelu_grad), gelu_grad_ref, 4.0, 2.0),
        (
            "gelu_tanh'",
            both!(k64::gelu_tanh_grad),
            gelu_tanh_grad_ref,
            4.0,
            2.0,
        ),
        ("erf'", both!(k64::erf_grad), erf_grad_ref, 4.0, 2.0),
    ]
}

/// The worst case of one kernel at one level: (ulps, the input, the
/// ratio of the error to its bound), maximised over the ratio.
fn worst<T: Probe>(level: Level, case: &Case<T>, xs: &[T]) -> (f64, T, f64) {
    let &(name, fs, r, ulps_bound, cond) = case;
    // The form the level's kernels run (fused or not); through a fn
    // pointer both are IEEE operations, so the values are the level's.
    let f = fs[level.fma() as usize];
    let mut out = xs.to_vec();
    assert!(run_at(level, MapSlice(&mut out, f)).is_ok(), "level");
    if matches!(name, "sin" | "cos" | "tan") {
        // The unary op's fix-up pass (`unary::Trig`): libm for the
        // inputs the vector kernel leaves out.
        for (x, y) in xs.iter().zip(out.iter_mut()) {
            if x.v_trig_outside() {
                *y = match name {
                    "sin" => num_traits::Float::sin(*x),
                    "cos" => num_traits::Float::cos(*x),
                    _ => num_traits::Float::tan(*x),
                };
            }
        }
    }
    let mut worst = (0.0f64, T::default(), 0.0f64);
    for (&x, &y) in xs.iter().zip(&out) {
        let want = r(x.wide());
        let u = if name.ends_with('\'') && (y.wide() - want).abs() <= DERIV_ABS_EPS * T::EPS {
            0.0
        } else {
            ulps(y, want)
        };
        let bound = ulps_bound
            + if cond > 0.0 {
                cond * kappa(r, x.wide(), T::KAPPA_H)
            } else {
                0.0
            };
        let ratio = u / bound;
        if ratio > worst.2 || u.is_nan() {
            worst = (u, x, ratio);
        }
    }
    worst
}

/// Every case at every level this CPU has; a skip line for the others.
fn check_every_level<T: Probe>(xs: &[T], cases: &[Case<T>]) {
    let mut bad = Vec::new();
    for &level in Level::all() {
        if !level.is_available() {
            println!("skip: this CPU has no {}", level.name());
            continue;
        }
        for case in cases {
            let (u, x, ratio) = worst(level, case, xs);
            let (t, name, at) = (T::LABEL, case.0, level.name());
            println!(
                "{t} {name:>10} at {at}: worst {u:.3} ulp at x = {x:e}, {:.0}% of its bound",
                ratio * 100.0
            );
            if ratio > 1.0 {
                bad.push(format!("{t} {name} at {at}: {u} ulp at x = {x:e}"));
            }
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
}

#[test]
fn f32_kernels_are_within_their_ulp_bounds_at_every_level() {
    check_every_level(&sweep32(), &cases32());
}

#[test]
fn f64_kernels_are_within_their_ulp_bounds_at_every_level() {
    check_every_level(&sweep64(), &cases64());
}

/// `exp_neg` (the one-step scaling of the kernels whose argument is never
/// positive) gives `exp`'s bits wherever it promises to (f32 up to 43, f64
/// up to 293: every binade of the sweeps below those, subnormal results,
/// -inf and NaN included), at every level.
#[test]
fn exp_neg_gives_the_bits_of_exp_up_to_its_bound() {
    /// `exp` and `exp_neg`, each without and with fused products.
    type Pair<T> = [[fn(T) -> T; 2]; 2];
    fn check<T: Probe>(xs: Vec<T>, bound: f64, fs: Pair<T>) {
        let xs: Vec<T> = xs
            .into_iter()
            .filter(|x| x.is_nan() || x.wide() <= bound)
            .collect();
        for &level in Level::all().iter().filter(|l| l.is_available()) {
            let [exp, neg] = fs.map(|f| f[level.fma() as usize]);
            let (mut a, mut b) = (xs.clone(), xs.clone());
            assert!(run_at(level, MapSlice(&mut a, exp)).is_ok());
            assert!(run_at(level, MapSlice(&mut b, neg)).is_ok());
            let mut checked = 0;
            for ((x, a), b) in xs.iter().zip(&a).zip(&b) {
                assert!(
                    a.wide().to_bits() == b.wide().to_bits() || (a.is_nan() && b.is_nan()),
                    "{} exp_neg({x:e}) = {b:e}, exp = {a:e} at {}",
                    T::LABEL,
                    level.name()
                );
                checked += 1;
            }
            // Both sides of the subnormal edge and the bound are in the sweep.
            assert!(checked > 100_000, "{checked}");
        }
    }
    let mut x32 = sweep32();
    x32.extend([-87.3, -87.4, -100.0, -103.97, 42.9, 43.0, 1e-30, -1e-30]);
    check(x32, 43.0, [both!(k32::exp), both!(k32::exp_neg)]);
    let mut x64 = sweep64();
    x64.extend([-708.4, -708.5, -744.0, 292.9, 293.0]);
    check(x64, 293.0, [both!(k64::exp), both!(k64::exp_neg)]);
}

#[test]
fn special_values_follow_ieee_and_pytorch() {
    special_values::<false>();
    special_values::<true>();
}

fn special_values<const F: bool>() {
    let inf = f32::INFINITY;
    assert_eq!(k32::exp::<F>(-inf), 0.0);
    assert_eq!(k32::exp::<F>(inf), inf);
    assert_eq!(k32::log::<F>(0.0), -inf);
    assert_eq!(k32::log::<F>(-0.0), -inf);
    assert!(k32::log::<F>(-1.0).is_nan());
    assert_eq!(k32::log::<F>(inf), inf);
    assert_eq!(k32::log1p::<F>(-1.0), -inf);
    assert_eq!(k32::tanh::<F>(inf), 1.0);
    assert_eq!(k32::tanh::<F>(-inf), -1.0);
    assert!(k32::tanh::<F>(-0.0).is_sign_negative());
    assert_eq!(k32::sigmoid::<F>(-inf), 0.0);
    assert_eq!(k32::sigmoid::<F>(inf), 1.0);
    assert_eq!(k32::erf::<F>(inf), 1.0);
    assert_eq!(k32::erf::<F>(-inf), -1.0);
    assert_eq!(k32::gelu::<F>(inf), inf);
    assert_eq!(k32::softplus::<F>(inf), inf);
    assert_eq!(k32::softplus::<F>(-inf), 0.0);
    assert_eq!(k32::exp_neg::<F>(-inf), 0.0);
    assert_eq!(k64::exp_neg::<F>(f64::NEG_INFINITY), 0.0);
    assert_eq!(k32::softplus::<F>(25.0), 25.0);
    for f in [
        k32::exp::<F>,
        k32::log::<F>,
        k32::tanh::<F>,
        k32::sigmoid::<F>,
        k32::erf::<F>,
        k32::gelu::<F>,
        k32::silu::<F>,
        k32::softplus::<F>,
        k32::exp_neg::<F>,
    ] {
        assert!(f(f32::NAN).is_nan());
    }
    assert_eq!(k64::exp::<F>(f64::NEG_INFINITY), 0.0);
    assert_eq!(k64::log::<F>(0.0), f64::NEG_INFINITY);
    assert!(k64::log::<F>(-1.0).is_nan());
    assert_eq!(k64::tanh::<F>(f64::INFINITY), 1.0);
    // The f64-lane kernels (`wide`, `trig::tan`): signs of zero, the
    // ends of the domains, exact powers of two.
    let pi = std::f32::consts::PI;
    let half_pi = std::f32::consts::FRAC_PI_2;
    for (f, x) in [
        (k32::tan::<F> as fn(f32) -> f32, -0.0f32),
        (k32::atan::<F>, -0.0),
        (k32::asin::<F>, -0.0),
        (k32::sinh::<F>, -0.0),
        (k32::expm1::<F>, -0.0),
    ] {
        assert_eq!(f(x).to_bits(), (-0.0f32).to_bits());
    }
    assert_eq!(k32::atan::<F>(f32::INFINITY), half_pi);
    assert_eq!(k32::atan::<F>(f32::NEG_INFINITY), -half_pi);
    assert_eq!(k32::asin::<F>(1.0), half_pi);
    assert_eq!(k32::asin::<F>(-1.0), -half_pi);
    assert_eq!(k32::acos::<F>(-1.0), pi);
    assert_eq!(k32::acos::<F>(1.0).to_bits(), 0.0f32.to_bits());
    for f in [k32::asin::<F> as fn(f32) -> f32, k32::acos::<F>] {
        assert!(f(1.000_000_1).is_nan() && f(-1.000_000_1).is_nan() && f(f32::NAN).is_nan());
    }
    assert_eq!(k32::expm1::<F>(f32::NEG_INFINITY), -1.0);
    assert_eq!(k32::expm1::<F>(89.0), f32::INFINITY);
    assert_eq!(k32::sinh::<F>(f32::NEG_INFINITY), f32::NEG_INFINITY);
    assert_eq!(k32::cosh::<F>(f32::NEG_INFINITY), f32::INFINITY);
    assert_eq!(k32::cosh::<F>(-0.0), 1.0);
    for k in -149..128 {
        let p = (k as f32).exp2();
        assert_eq!(k32::exp2::<F>(k as f32), p, "2^{k}");
        assert_eq!(k32::log2::<F>(p), k as f32, "log2 2^{k}");
    }
    assert_eq!(k32::exp2::<F>(128.0), f32::INFINITY);
    assert_eq!(k32::exp2::<F>(f32::NEG_INFINITY), 0.0);
    assert_eq!(k32::log2::<F>(0.0), f32::NEG_INFINITY);
    assert!(k32::log2::<F>(-1.0).is_nan());

    // sin and cos: the vector path keeps -0 and tiny arguments; the rest
    // of the specials are the fix-up's (`trig_outside`).
    assert_eq!(k32::sin::<F>(-0.0).to_bits(), (-0.0f32).to_bits());
    assert_eq!(k32::sin::<F>(0.0).to_bits(), 0.0f32.to_bits());
    assert_eq!(k32::cos::<F>(-0.0), 1.0);
    assert_eq!(k32::sin::<F>(-1e-45), -1e-45);
    assert_eq!(k32::sin::<F>(1e-20), 1e-20);
    for x in [inf, -inf, f32::NAN, 1.1e6, -1e30] {
        assert!(k32::trig_outside(x), "{x}");
    }
    for x in [0.0, -1e-45, 1e6, -1_048_576.0] {
        assert!(!k32::trig_outside(x), "{x}");
    }
}

/// Every f32 in `[0, TRIG_MAX]` through `sin` and `cos` at the best level
/// (by symmetry of every step of the kernel, the negatives give the
/// negated sine and the same cosine): the worst ulp and where. Ignored
/// (about a minute per function on one core); run with
/// `cargo test --release --lib trig_exhaustive -- --ignored --nocapture`.
#[test]
#[ignore]
fn trig_exhaustive() {
    let level = crate::backend::cpu::simd::level();
    let top = super::trig::TRIG_MAX.to_bits();
    for (name, fs, r) in [
        ("sin", both!(k32::sin), f64::sin as fn(f64) -> f64),
        ("cos", both!(k32::cos), f64::cos),
    ] {
        let f = fs[level.fma() as usize];
        let mut worst = (0.0f64, 0.0f32);
        let mut buf = vec![0.0f32; 1 << 16];
        let mut bits = 0u32;
        while bits <= top {
            let n = ((top - bits) as usize + 1).min(buf.len());
            for (i, v) in buf[..n].iter_mut().enumerate() {
                *v = f32::from_bits(bits + i as u32);
            }
            let xs = buf[..n].to_vec();
            assert!(run_at(level, MapSlice(&mut buf[..n], f)).is_ok());
            for (&x, &y) in xs.iter().zip(&buf[..n]) {
                let u = ulps(y, r(x as f64));
                if u > worst.0 {
                    worst = (u, x);
                }
            }
            bits += n as u32;
        }
        println!(
            "{name} exhaustive over [0, 2^20] at {}: worst {:.4} ulp at x = {:e}",
            level.name(),
            worst.0,
            worst.1
        );
        assert!(worst.0 <= 2.0, "{name}: {worst:?}");
    }
}

/// `x^y` (f32) at every level: within 1 ulp of f64 libm's `pow` over a
/// spread of bases (every binade of both signs, a dense sweep of [-30,
/// 30], the special values) and exponents (small and large integers, odd
/// and even, halves, fractions, huge and tiny), and equal to f32 libm's
/// `powf` wherever a special value decides the result (a base of ±0, ±1,
/// ±inf or NaN, an exponent of ±0, ±inf or NaN, an overflow).
#[test]
fn pow_is_within_one_ulp_and_follows_c_at_every_level() {
    let mut xs: Vec<f32> = (0..=u32::MAX)
        .step_by(1_000_003)
        .map(f32::from_bits)
        .collect();
    xs.extend((0..20_000).map(|i| -30.0 + 60.0 * i as f32 / 20_000.0));
    let specials = [
        0.0f32,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -0.5,
        2.0,
        -2.0,
        3.0,
        -3.0,
        1e-45,
        -1e-45,
        f32::MAX,
        f32::MIN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ];
    xs.extend(specials);
    let ys = [
        0.0f32,
        -0.0,
        1.0,
        -1.0,
        2.0,
        -2.0,
        3.0,
        -3.0,
        0.5,
        -0.5,
        1.5,
        2.5,
        0.1,
        -0.7,
        7.0,
        16.0,
        -31.0,
        100.0,
        1e6,
        1e7 + 1.0,
        -1e7 - 1.0,
        3e9,
        1e-30,
        -1e-30,
        123.456,
    ];
    'levels: for &level in Level::all() {
        let mut worst = (0.0f64, 0.0f32, 0.0f32);
        for &y in ys.iter().chain(&specials) {
            let mut out = xs.clone();
            let ran = if level.fma() {
                run_at(level, MapSlice(&mut out, |x| k32::pow::<true>(x, y))).is_ok()
            } else {
                run_at(level, MapSlice(&mut out, |x| k32::pow::<false>(x, y))).is_ok()
            };
            if !ran {
                println!("skipped pow at {}: this CPU lacks it", level.name());
                continue 'levels;
            }
            for (&x, &got) in xs.iter().zip(&out) {
                // C99: x^0 = 1 for every NaN (glibc gives NaN for a
                // signalling one, which the bit stride includes).
                let libm = if y == 0.0 { 1.0 } else { x.powf(y) };
                let special_x = x.is_nan() || x.is_infinite() || x == 0.0 || x.abs() == 1.0;
                let special_y = y.is_nan() || y.is_infinite() || y == 0.0;
                if special_x || special_y || !libm.is_finite() {
                    let same = got.to_bits() == libm.to_bits() || (got.is_nan() && libm.is_nan());
                    assert!(
                        same,
                        "{}: pow({x:e}, {y:e}) = {got:e}, libm {libm:e}",
                        level.name()
                    );
                }
                let e = ulps(got, (x as f64).powf(y as f64));
                assert!(
                    e <= 1.0,
                    "{}: pow({x:e}, {y:e}) = {got:e}: {e} ulps",
                    level.name()
                );
                if e > worst.0 {
                    worst = (e, x, y);
                }
            }
        }
        println!(
            "pow f32 at {}: worst {:.3} ulp at pow({:e}, {:e})",
            level.name(),
            worst.0,
            worst.1,
            worst.2
        );
    }
}

/// [`gelu_f32`](super::gelu_avx512::gelu_f32) over `xs`, out of place.
#[cfg(target_arch = "x86_64")]
pub(crate) fn gelu_table(xs: &[f32]) -> Vec<f32> {
    let mut out = vec![0f32; xs.len()];
    // SAFETY: the callers run this only where the CPU has AVX-512 F; both
    // runs hold `xs.len()` elements and are distinct vectors.
    unsafe { super::gelu_avx512::gelu_f32(xs.as_ptr(), out.as_mut_ptr(), xs.len()) };
    out
}

/// The AVX-512 table of exact GELU (`gelu_avx512`) is within 2.5 ulps of
/// the f64 reference wherever it answers from its table (every input from
/// -6 up: a stride through the bit patterns of [-6, 8], the f32 sweep's
/// values above -6, NaN and +inf), against 4.5 for the vector kernel.
#[cfg(target_arch = "x86_64")]
#[test]
fn the_avx512_gelu_table_is_within_2_5_ulps() {
    if !Level::V4.is_available() {
        println!("skip: this CPU has no {}", Level::V4.name());
        return;
    }
    let mut xs: Vec<f32> = (0..=8f32.to_bits())
        .step_by(2039)
        .flat_map(|b| [f32::from_bits(b), -f32::from_bits(b)])
        .filter(|&x| x >= -5.99)
        .collect();
    xs.extend(sweep32().into_iter().filter(|&x| x.is_nan() || x >= -5.99));
    // Whole blocks of 64 only: the tail after the last one takes the
    // vector kernel (tested below).
    xs.resize(xs.len().div_ceil(64) * 64, 1.0);
    let out = gelu_table(&xs);
    let mut worst = (0.0f64, 0.0f32);
    for (&x, &y) in xs.iter().zip(&out) {
        let u = ulps(y, gelu_f64(x as f64));
        assert!(u <= 2.5, "gelu({x:e}) = {y:e}: {u} ulps");
        if u > worst.0 {
            worst = (u, x);
        }
    }
    assert!(out.iter().zip(&xs).all(|(y, x)| y.is_nan() == x.is_nan()));
    println!(
        "gelu table at {}: worst {:.3} ulp at x = {:e} ({} inputs)",
        Level::V4.name(),
        worst.0,
        worst.1,
        xs.len()
    );
}

/// A block of 64 inputs holding one below -6 (or -inf), and the tail after
/// the last whole block, take the vector kernel (`float32::gelu`, fused):
/// bit for bit its results; the other blocks stay within the table's
/// bound; in place gives the out-of-place bits at every length.
#[cfg(target_arch = "x86_64")]
#[test]
fn the_avx512_gelu_table_leaves_the_far_tail_to_the_vector_kernel() {
    if !Level::V4.is_available() {
        println!("skip: this CPU has no {}", Level::V4.name());
        return;
    }
    let n = 64 * 5 + 37;
    let mut xs: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin() * 5.5).collect();
    xs[64 + 10] = -6.5;
    xs[3 * 64 + 63] = f32::NEG_INFINITY;
    xs[n - 1] = -20.0;
    let out = gelu_table(&xs);
    for (i, (&x, &y)) in xs.iter().zip(&out).enumerate() {
        let block = i / 64;
        if block == 1 || block == 3 || block == 5 {
            let want = k32::gelu::<true>(x);
            assert!(
                y.to_bits() == want.to_bits() || (y.is_nan() && want.is_nan()),
                "gelu({x:e}) in block {block} = {y:e}, the vector kernel's {want:e}"
            );
        } else {
            let u = ulps(y, gelu_f64(x as f64));
            assert!(u <= 2.5, "gelu({x:e}) in block {block} = {y:e}: {u} ulps");
        }
    }
    for len in 0..=n {
        let want = gelu_table(&xs[..len]);
        let mut got = xs[..len].to_vec();
        // SAFETY: AVX-512 F is there (checked above); one run of `len`
        // elements, in place.
        unsafe { super::gelu_avx512::gelu_f32(got.as_ptr(), got.as_mut_ptr(), len) };
        assert!(
            got.iter()
                .zip(&want)
                .all(|(g, w)| g.to_bits() == w.to_bits()),
            "in place differs at length {len}"
        );
    }
}
