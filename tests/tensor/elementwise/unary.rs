//! unary ops

use super::*;

#[derive(Copy, Clone, Debug, PartialEq)]
pub(super) enum Un {
    Neg,
    Abs,
    Exp,
    Log,
    Sqrt,
    Rsqrt,
    Sin,
    Cos,
    Tanh,
    Sigmoid,
    Relu,
    Gelu,
    Floor,
    Round,
    Sign,
    Recip,
    Square,
    Clamp(Option<f64>, Option<f64>),
}
pub(super) const UNS: [Un; 21] = [
    Un::Neg,
    Un::Abs,
    Un::Exp,
    Un::Log,
    Un::Sqrt,
    Un::Rsqrt,
    Un::Sin,
    Un::Cos,
    Un::Tanh,
    Un::Sigmoid,
    Un::Relu,
    Un::Gelu,
    Un::Floor,
    Un::Round,
    Un::Sign,
    Un::Recip,
    Un::Square,
    Un::Clamp(Some(-1.0), Some(2.0)),
    Un::Clamp(None, Some(0.0)),
    Un::Clamp(Some(1.0), None),
    Un::Clamp(Some(3.0), Some(1.0)),
];

pub(super) fn un(op: Un, a: &Tensor) -> Result<Tensor> {
    match op {
        Un::Neg => a.neg(),
        Un::Abs => a.abs(),
        Un::Exp => a.exp(),
        Un::Log => a.log(),
        Un::Sqrt => a.sqrt(),
        Un::Rsqrt => a.rsqrt(),
        Un::Sin => a.sin(),
        Un::Cos => a.cos(),
        Un::Tanh => a.tanh(),
        Un::Sigmoid => a.sigmoid(),
        Un::Relu => a.relu(),
        Un::Gelu => a.gelu(),
        Un::Floor => a.floor(),
        Un::Round => a.round(),
        Un::Sign => a.sign(),
        Un::Recip => a.reciprocal(),
        Un::Square => a.square(),
        Un::Clamp(lo, hi) => a.clamp(lo, hi),
    }
}
pub(super) fn un_(op: Un, a: &mut Tensor) -> Result<()> {
    match op {
        Un::Neg => a.neg_(),
        Un::Abs => a.abs_(),
        Un::Exp => a.exp_(),
        Un::Log => a.log_(),
        Un::Sqrt => a.sqrt_(),
        Un::Rsqrt => a.rsqrt_(),
        Un::Sin => a.sin_(),
        Un::Cos => a.cos_(),
        Un::Tanh => a.tanh_(),
        Un::Sigmoid => a.sigmoid_(),
        Un::Relu => a.relu_(),
        Un::Gelu => a.gelu_(),
        Un::Floor => a.floor_(),
        Un::Round => a.round_(),
        Un::Sign => a.sign_(),
        Un::Recip => a.reciprocal_(),
        Un::Square => a.square_(),
        Un::Clamp(lo, hi) => a.clamp_(lo, hi),
    }
    .map(|_| ())
}

pub(super) fn float_only(op: Un) -> bool {
    matches!(
        op,
        Un::Exp
            | Un::Log
            | Un::Sqrt
            | Un::Rsqrt
            | Un::Sin
            | Un::Cos
            | Un::Tanh
            | Un::Sigmoid
            | Un::Gelu
            | Un::Recip
    )
}

/// erf by composite Simpson integration of `2/sqrt(pi) e^(-t^2)` (an
/// independent, slow, high-precision reference).
pub(super) fn erf_ref(z: f64) -> f64 {
    let n = 20_000;
    let h = z / n as f64;
    let f = |t: f64| (-t * t).exp();
    let mut s = f(0.0) + f(z);
    for i in 1..n {
        s += f(i as f64 * h) * if i % 2 == 1 { 4.0 } else { 2.0 };
    }
    s * h / 3.0 * 2.0 / std::f64::consts::PI.sqrt()
}

pub(super) fn gelu_ref(x: f64) -> f64 {
    0.5 * x * (1.0 + erf_ref(x / std::f64::consts::SQRT_2))
}

pub(super) fn ref_un(op: Un, x: f64) -> f64 {
    match op {
        Un::Neg => -x,
        Un::Abs => x.abs(),
        Un::Exp => x.exp(),
        Un::Log => x.ln(),
        Un::Sqrt => x.sqrt(),
        Un::Rsqrt => 1.0 / x.sqrt(),
        Un::Sin => x.sin(),
        Un::Cos => x.cos(),
        Un::Tanh => x.tanh(),
        Un::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        Un::Relu => {
            if x > 0.0 || x.is_nan() {
                x
            } else {
                0.0
            }
        }
        Un::Gelu => gelu_ref(x),
        Un::Floor => x.floor(),
        Un::Round => x.round_ties_even(),
        Un::Sign => {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                x
            }
        }
        Un::Recip => 1.0 / x,
        Un::Square => x * x,
        Un::Clamp(lo, hi) => {
            if x.is_nan() {
                return x;
            }
            let mut v = x;
            if let Some(l) = lo {
                v = v.max(l);
            }
            if let Some(h) = hi {
                v = v.min(h);
            }
            v
        }
    }
}

pub(super) fn un_tol(op: Un, dt: DType) -> f64 {
    match op {
        Un::Neg | Un::Abs | Un::Relu | Un::Floor | Un::Round | Un::Sign | Un::Square => 0.0,
        Un::Clamp(..) => 0.0,
        Un::Gelu if dt == DType::F64 => 1e-13,
        Un::Gelu if dt == DType::F32 => 1e-6,
        _ => 4.0 * eps(dt),
    }
}

pub(super) fn un_data(op: Un, dt: DType, n: usize, seed: u64) -> Vec<f64> {
    let v = match op {
        Un::Log | Un::Sqrt | Un::Rsqrt if dt.is_float() => data_for(dt, n, seed, 0.05, 10.0),
        Un::Log | Un::Sqrt | Un::Rsqrt | Un::Recip => data_for(dt, n, seed, 1.0, 9.0),
        Un::Exp => data_for(dt, n, seed, -5.0, 5.0),
        Un::Gelu => data_for(dt, n, seed, -6.0, 6.0),
        _ => data_for(dt, n, seed, -4.0, 4.0),
    };
    v.iter().map(|&x| store(dt, x)).collect()
}

#[test]
fn unary_ops_every_dtype_and_layout() {
    let _g = lock();
    let mut seed = 2000;
    let shape = &[5usize, 6][..];
    for op in UNS {
        for dt in ALL {
            for lay in LAYS {
                seed += 1;
                let va = un_data(op, dt, 30, seed);
                let a = make(&va, shape, dt, lay);
                let ctx = format!("{op:?} {dt}/{lay:?}");
                let r = un(op, &a);
                // Float ops compute in f32 from bool, as from integers
                // (PyTorch: exp(bool) is float32); the others are refused.
                if dt == DType::Bool && !float_only(op) {
                    if !matches!(op, Un::Floor | Un::Round) {
                        let e = r.expect_err(&ctx);
                        assert!(matches!(e, Error::DTypeMismatch { .. }), "{ctx}: {e}");
                    }
                    continue;
                }
                let r = r.expect(&ctx);
                let rdt = if float_only(op) && !dt.is_float() {
                    DType::F32
                } else {
                    dt
                };
                assert_eq!(r.dtype(), rdt, "{ctx}");
                assert_eq!(r.shape(), shape, "{ctx}");
                let want: Vec<f64> = va.iter().map(|&x| store(rdt, ref_un(op, x))).collect();
                assert_close(&read(&r), &want, un_tol(op, rdt), &ctx);
            }
        }
    }
}

#[test]
fn unary_edge_values() {
    let _g = lock();
    let inf = f64::INFINITY;
    let v = [0.0, -1.0, inf, -inf, f64::NAN, 1e-30];
    for dt in FLOATS {
        let a = make(&v, &[6], dt, Lay::Stepped);
        let vs: Vec<f64> = v.iter().map(|&x| store(dt, x)).collect();
        for op in [
            Un::Log,
            Un::Sqrt,
            Un::Rsqrt,
            Un::Exp,
            Un::Sigmoid,
            Un::Relu,
            Un::Tanh,
        ] {
            let want: Vec<f64> = vs.iter().map(|&x| store(dt, ref_un(op, x))).collect();
            assert_close(
                &read(&un(op, &a).unwrap()),
                &want,
                4.0 * eps(dt),
                &format!("{op:?} {dt}"),
            );
        }
    }
}

#[test]
fn round_is_half_to_even_and_floor_goes_down() {
    let _g = lock();
    let v = [
        -2.5,
        -1.5,
        -0.5,
        0.5,
        1.5,
        2.5,
        3.5,
        2.4,
        2.6,
        -2.6,
        1e7 + 0.5,
    ];
    for dt in FLOATS {
        let vs: Vec<f64> = v.iter().map(|&x| store(dt, x)).collect();
        let a = make(&vs, &[11], dt, Lay::Stepped);
        let want: Vec<f64> = vs.iter().map(|&x| store(dt, x.round_ties_even())).collect();
        assert_exact(&read(&a.round().unwrap()), &want, &format!("round {dt}"));
        let want: Vec<f64> = vs.iter().map(|&x| store(dt, x.floor())).collect();
        assert_exact(&read(&a.floor().unwrap()), &want, &format!("floor {dt}"));
    }
    let f = Tensor::from_slice(&[0.5f32, 1.5, 2.5, -0.5], &[4], CPU).unwrap();
    assert_eq!(
        f.round().unwrap().to_vec::<f32>().unwrap(),
        vec![0.0, 2.0, 2.0, -0.0]
    );
}

#[test]
fn gelu_matches_a_high_precision_reference() {
    let _g = lock();
    let xs: Vec<f64> = (0..=240).map(|i| -6.0 + i as f64 * 0.05).collect();
    for (dt, tol) in [(DType::F64, 1e-13), (DType::F32, 1e-6)] {
        let vs: Vec<f64> = xs.iter().map(|&x| store(dt, x)).collect();
        let a = make(&vs, &[241], dt, Lay::Stepped);
        let want: Vec<f64> = vs.iter().map(|&x| gelu_ref(x)).collect();
        let got = read(&a.gelu().unwrap());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            // absolute + relative, ~1e-6 for f32
            assert!(
                (g - w).abs() <= tol * (1.0 + w.abs()),
                "gelu {dt} at {}: got {g}, want {w}",
                vs[i]
            );
        }
    }
    // Deep in the negative tail f64 keeps its relative accuracy.
    let x = Tensor::from_slice(&[-10.0f64, -20.0], &[2], CPU).unwrap();
    let g = read(&x.gelu().unwrap());
    // -x/2 * erfc(|x|/sqrt 2): erfc(7.0710678) = 1.5239706e-23, erfc(14.142136) = 5.5072482e-89
    assert!(
        (g[0] / (-5.0 * 1.523_970_604_832_105e-23) - 1.0).abs() < 1e-9,
        "{}",
        g[0]
    );
    assert!(g[1] < 0.0 && g[1] > -1e-86, "{}", g[1]);
}

#[test]
fn clamp_integer_tensors_with_float_bounds_compute_in_f32() {
    let _g = lock();
    let i = Tensor::from_slice(&[0i64, 1, 2, 3], &[4], CPU).unwrap();
    let r = i.clamp(Some(0.5), Some(2.5)).unwrap();
    assert_eq!(r.dtype(), DType::F32);
    assert_eq!(r.to_vec::<f32>().unwrap(), vec![0.5, 1.0, 2.0, 2.5]);
    let r = i.clamp(Some(1.0), Some(2.0)).unwrap();
    assert_eq!(r.dtype(), DType::I64);
    assert_eq!(r.to_vec::<i64>().unwrap(), vec![1, 1, 2, 2]);
    let mut j = i.deep_clone().unwrap();
    let e = j.clamp_(Some(0.5), None).unwrap_err();
    assert!(matches!(e, Error::DTypeMismatch { op: "clamp", .. }), "{e}");
    j.clamp_(None, Some(1.0)).unwrap();
    assert_eq!(j.to_vec::<i64>().unwrap(), vec![0, 1, 1, 1]);
}
