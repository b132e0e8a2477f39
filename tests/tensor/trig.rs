//! `sin` and `cos` through the public API: the vectorised kernels and the
//! libm fix-up of the inputs they leave out (|x| > 2^20, infinities, NaN;
//! `src/backend/cpu/vmath/trig.rs`), on every float dtype, out of place, in
//! place and through a transposed view, and their gradients.

use crate::common;

use common::*;
use tensorscope::{DType, Tensor};

/// Normal values across [-1e4, 1e4] with the special ones spread over
/// three 1024-element blocks of the kernel (so that some blocks need the
/// fix-up and others do not).
fn inputs() -> Vec<f64> {
    let mut v = uniform(3000, 14, -1e4, 1e4);
    let specials = [
        0.0,
        -0.0,
        1e-45,
        -1e-40,
        1.5,
        -2.0,
        1_048_576.0,       // 2^20: the bound, inside
        1_048_576.125,     // the next f32 above it: libm
        -1_048_576.125,    // likewise
        1e30,              // far beyond
        -1e30,             // likewise
        3.0e38,            // near f32::MAX
        f64::INFINITY,     // sin = cos = NaN
        f64::NEG_INFINITY, // likewise
        f64::NAN,          // NaN
        51_471.855,        // near 32768 pi/2
        102_943.71,        // near 65536 pi/2
    ];
    for (i, &s) in specials.iter().enumerate() {
        v[i * 53 + 2050] = s; // the third block
        v[i * 13] = s; // and the first
    }
    v
}

/// Ulps of `dt` at `want`.
fn ulp(dt: DType, want: f64) -> f64 {
    let a = store(dt, want).abs().max(match dt {
        DType::F16 => 6.1e-5,
        DType::BF16 => 1.2e-38,
        DType::F32 => 1.2e-38,
        _ => 2.3e-308,
    });
    a * eps(dt)
}

/// `got` against `f` of the stored inputs, in ulps of `dt` (NaN only
/// where the reference is NaN; the sign of a zero result checked).
fn check(got: &[f64], xs: &[f64], f: fn(f64) -> f64, dt: DType, bound: f64, what: &str) {
    assert_eq!(got.len(), xs.len(), "{what}");
    for (i, (&g, &x)) in got.iter().zip(xs).enumerate() {
        let want = f(x);
        if want.is_nan() {
            assert!(g.is_nan(), "{what}[{i}]: f({x:e}) = {g:e}, want NaN");
            continue;
        }
        let u = (g - want).abs() / ulp(dt, want);
        assert!(
            u <= bound,
            "{what}[{i}]: f({x:e}) = {g:e}, want {want:e} ({u} ulp)"
        );
        if want == 0.0 {
            assert_eq!(g.to_bits(), want.to_bits(), "{what}[{i}]: sign of zero");
        }
    }
}

fn read(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap()
}

#[test]
fn sin_and_cos_every_dtype_and_layout_with_the_libm_fix_up() {
    let _shared = crate::common::shared();
    let v = inputs();
    for dt in FLOATS {
        let a = Tensor::from_slice(&v, &[60, 50], CPU)
            .unwrap()
            .to_dtype(dt)
            .unwrap();
        let xs = read(&a);
        // f16 and bf16 compute in f32 and round once: at most 1/2 ulp of
        // their format plus a fraction; f32 within the kernel's 2 ulps.
        let bound = if dt == DType::F64 { 1.0 } else { 2.0 };
        for (name, f) in [("sin", f64::sin as fn(f64) -> f64), ("cos", f64::cos)] {
            let op = |t: &Tensor| if name == "sin" { t.sin() } else { t.cos() };
            let ctx = format!("{name} {dt}");
            check(&read(&op(&a).unwrap()), &xs, f, dt, bound, &ctx);
            // In place: the fix-up re-reads the input before the block's
            // output overwrites it.
            let mut c = a.deep_clone().unwrap();
            if name == "sin" {
                c.sin_().unwrap();
            } else {
                c.cos_().unwrap();
            }
            check(&read(&c), &xs, f, dt, bound, &format!("{ctx} in place"));
            // A transposed view: the fix-up walks the input's strides.
            let t = a.t().unwrap();
            let txs = read(&t.contiguous().unwrap());
            check(
                &read(&op(&t).unwrap()),
                &txs,
                f,
                dt,
                bound,
                &format!("{ctx} transposed"),
            );
        }
    }
}

#[test]
fn sin_and_cos_gradients_use_the_same_kernels() {
    let _shared = crate::common::shared();
    // d sin = cos, d cos = -sin, at large and special arguments too.
    let xs = [0.3f32, -2.5, 1e4, 2e6, -1e30, 1_048_576.0];
    for (name, d) in [
        ("sin", (|x: f64| x.cos()) as fn(f64) -> f64),
        ("cos", |x: f64| -x.sin()),
    ] {
        let x = Tensor::from_slice(&xs, &[6], CPU)
            .unwrap()
            .requires_grad_(true)
            .unwrap();
        let y = if name == "sin" { x.sin() } else { x.cos() }.unwrap();
        y.sum_all().unwrap().backward().unwrap();
        let g = read(&x.grad().unwrap());
        let want: Vec<f64> = xs.iter().map(|&x| x as f64).collect();
        check(&g, &want, d, DType::F32, 2.0, &format!("{name}'"));
    }
}
