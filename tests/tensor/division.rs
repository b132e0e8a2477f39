//! Issue 17 item 5: `atan2`, `fmod`, `remainder` and `floor_divide`, with
//! their scalar, in-place and `out` forms, on the CPU and on CUDA device 0
//! (`on_both!`). Values against f64 references of ATen's formulas over
//! signs, exact multiples, signed zeros, infinities, NaN and zero divisors
//! in every float dtype, and exactly in every integer dtype (wrapping
//! `MIN % -1`, a zero tensor divisor giving 0, a zero scalar divisor an
//! `Err`); gradients against the closed forms; bool refused. Agreement with
//! PyTorch itself is in the differential suite.

use crate::common;

#[cfg(feature = "cuda")]
use common::devices::on_both;
use common::{assert_close, assert_exact, read, store, tensor, tol, FLOATS};
use tensorscope::{DType, Device, Tensor};

#[cfg(feature = "cuda")]
on_both!(
    float_values_follow_aten,
    integer_values_are_exact,
    scalar_in_place_and_out_forms_agree,
    gradients_follow_the_closed_forms,
);

#[cfg(not(feature = "cuda"))]
common::on_cpu!(
    float_values_follow_aten,
    integer_values_are_exact,
    scalar_in_place_and_out_forms_agree,
    gradients_follow_the_closed_forms,
);

/// ATen's `remainder`: `fmod`, moved to the divisor's sign.
fn remainder_ref(a: f64, b: f64) -> f64 {
    let m = a % b;
    if m != 0.0 && ((b < 0.0) != (m < 0.0)) {
        m + b
    } else {
        m
    }
}

/// ATen's `div_floor_floating`.
fn floor_div_ref(a: f64, b: f64) -> f64 {
    if b == 0.0 {
        return a / b;
    }
    let m = a % b;
    let mut d = (a - m) / b;
    if m != 0.0 && ((b < 0.0) != (m < 0.0)) {
        d -= 1.0;
    }
    if d != 0.0 {
        let f = d.floor();
        if d - f > 0.5 {
            f + 1.0
        } else {
            f
        }
    } else {
        0.0f64.copysign(a / b)
    }
}

type Op = (
    &'static str,
    fn(&Tensor, &Tensor) -> tensorscope::Result<Tensor>,
    fn(f64, f64) -> f64,
);

fn ops() -> [Op; 4] {
    [
        ("atan2", |a, b| a.atan2(b), f64::atan2),
        ("fmod", |a, b| a.fmod(b), |a, b| a % b),
        ("remainder", |a, b| a.remainder(b), remainder_ref),
        ("floor_divide", |a, b| a.floor_divide(b), floor_div_ref),
    ]
}

/// Every pair of a grid of dividends and divisors (exact in every float
/// dtype): signs, exact multiples, fractions, signed zeros, infinities and
/// NaN, the divisor broadcast along rows.
fn float_values_follow_aten(dev: Device) {
    let grid = [
        7.0,
        -7.0,
        6.0,
        -6.0,
        2.5,
        -2.5,
        0.75,
        0.0,
        -0.0,
        1.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
    ];
    let n = grid.len();
    let av: Vec<f64> = (0..n * n).map(|i| grid[i / n]).collect();
    for dt in FLOATS {
        let a = tensor(&av, &[n, n], dt, dev);
        let b = tensor(&grid, &[n], dt, dev);
        for (name, f, r) in ops() {
            let got = read(&f(&a, &b).unwrap());
            let want: Vec<f64> = (0..n * n)
                .map(|i| store(dt, r(grid[i / n], grid[i % n])))
                .collect();
            // Half precision rounds each step of the formula, not only the result.
            assert_close(&got, &want, tol(dt), &format!("{name} {dt} on {dev}"));
        }
    }
    // Half precision computes floor_divide in f32 and rounds once, so the
    // quotient is exact where an f32 formula is (PyTorch's CPU kernels do
    // the same): 2512 // -1.29296875 is -1943 (a per-step f16 formula gave
    // -1942).
    for dt in [DType::F16, DType::BF16] {
        let a = tensor(&[2512.0], &[1], dt, dev);
        let b = tensor(&[-1.29296875], &[1], dt, dev);
        let want = store(dt, floor_div_ref(store(dt, 2512.0), store(dt, -1.29296875)));
        assert_eq!(read(&a.floor_divide(&b).unwrap()), [want], "{dt}");
    }
    // Signed zeros: fmod keeps the dividend's sign, floor_divide of a zero
    // quotient takes the quotient's.
    let a = tensor(&[-0.0, 0.0, -1.0], &[3], DType::F32, dev);
    let b = tensor(&[3.0, -3.0, 1e30], &[3], DType::F32, dev);
    let sign = |t: Tensor| {
        read(&t)
            .iter()
            .map(|v| v.is_sign_negative())
            .collect::<Vec<_>>()
    };
    assert_eq!(sign(a.fmod(&b).unwrap()), [true, false, true]);
    assert_eq!(sign(a.floor_divide(&b).unwrap()), [true, true, true]);
}

/// Integer dtypes compute in their own dtype, exactly: truncated and
/// floored remainders and quotients of every sign, `MIN % -1` (0, no
/// trap) and `MIN // -1` (wraps to MIN), 0 for a zero divisor; integer
/// `atan2` computes in f32.
fn integer_values_are_exact(dev: Device) {
    let grid: [i64; 7] = [7, -7, 6, -6, 1, 0, -1];
    let n = grid.len();
    for dt in [DType::I64, DType::I32, DType::U8] {
        let g: Vec<f64> = grid.iter().map(|&v| store(dt, v as f64)).collect();
        let av: Vec<f64> = (0..n * n).map(|i| g[i / n]).collect();
        let a = tensor(&av, &[n, n], dt, dev);
        let b = tensor(&g, &[n], dt, dev);
        let pairs = |f: &dyn Fn(i64, i64) -> i64| -> Vec<f64> {
            (0..n * n)
                .map(|i| {
                    let (x, y) = (g[i / n] as i64, g[i % n] as i64);
                    if y == 0 {
                        0.0
                    } else {
                        store(dt, f(x, y) as f64)
                    }
                })
                .collect()
        };
        let fmod = a.fmod(&b).unwrap();
        assert_eq!(fmod.dtype(), dt);
        assert_exact(&read(&fmod), &pairs(&|x, y| x % y), &format!("fmod {dt}"));
        assert_exact(
            &read(&a.remainder(&b).unwrap()),
            &pairs(&|x, y| x.rem_euclid(y) + if y < 0 && x.rem_euclid(y) != 0 { y } else { 0 }),
            &format!("remainder {dt}"),
        );
        assert_exact(
            &read(&a.floor_divide(&b).unwrap()),
            &pairs(&|x, y| x.div_euclid(y) - if y < 0 && x.rem_euclid(y) != 0 { 1 } else { 0 }),
            &format!("floor_divide {dt}"),
        );
        let at = a.atan2(&b).unwrap();
        assert_eq!(at.dtype(), DType::F32);
        let want: Vec<f64> = (0..n * n)
            .map(|i| store(DType::F32, g[i / n].atan2(g[i % n])))
            .collect();
        assert_close(&read(&at), &want, tol(DType::F32), &format!("atan2 {dt}"));
    }
    for (dt, min) in [(DType::I64, i64::MIN as f64), (DType::I32, i32::MIN as f64)] {
        let a = tensor(&[min], &[1], dt, dev);
        let m1 = tensor(&[-1.0], &[1], dt, dev);
        assert_eq!(read(&a.fmod(&m1).unwrap()), [0.0], "{dt} MIN fmod -1");
        assert_eq!(
            read(&a.remainder(&m1).unwrap()),
            [0.0],
            "{dt} MIN remainder -1"
        );
        assert_eq!(
            read(&a.floor_divide(&m1).unwrap()),
            [min],
            "{dt} MIN // -1 wraps"
        );
    }
    // bool has no remainder (PyTorch: "not implemented for 'Bool'").
    let t = Tensor::ones(&[2], DType::Bool, dev).unwrap();
    for (name, f, _) in ops().into_iter().skip(1) {
        let e = f(&t, &t).unwrap_err().to_string();
        assert!(e.contains(name) && e.contains("bool"), "{name}: {e}");
    }
    assert_eq!(t.atan2(&t).unwrap().dtype(), DType::F32);
}

/// The scalar forms equal the tensor forms with a broadcast 0-d divisor;
/// the in-place and `out` forms equal the plain ones; an integer tensor
/// with the scalar 0 is an `Err` naming the op (a float one gives NaN and
/// infinities); an integer tensor with a fractional scalar computes in f32.
fn scalar_in_place_and_out_forms_agree(dev: Device) {
    let av: Vec<f64> = (0..12).map(|i| (i as f64 - 5.5) * 1.25).collect();
    for dt in [DType::F32, DType::F64, DType::I64, DType::I32] {
        let a = tensor(&av, &[3, 4], dt, dev).t().unwrap();
        for s in [2.0f64, -1.5, 3.0, -2.0] {
            let sb = tensor(
                &[s],
                &[],
                if s.fract() == 0.0 { dt } else { DType::F32 },
                dev,
            );
            let ctx = format!("{dt} scalar {s}");
            let pairs: [(&str, Tensor, Tensor); 3] = [
                ("fmod", a.fmod_scalar(s).unwrap(), a.fmod(&sb).unwrap()),
                (
                    "remainder",
                    a.remainder_scalar(s).unwrap(),
                    a.remainder(&sb).unwrap(),
                ),
                (
                    "floor_divide",
                    a.floor_divide_scalar(s).unwrap(),
                    a.floor_divide(&sb).unwrap(),
                ),
            ];
            for (name, x, y) in pairs {
                assert_eq!(x.dtype(), y.dtype(), "{name} {ctx}");
                assert_exact(&read(&x), &read(&y), &format!("{name} {ctx}"));
            }
        }
        let b = tensor(&[4.0, -3.0, 2.0], &[1, 3], dt, dev);
        let want = read(&a.remainder(&b).unwrap());
        let mut x = a.contiguous().unwrap();
        x.remainder_(&b).unwrap();
        assert_exact(&read(&x), &want, &format!("remainder_ {dt}"));
        let mut out = Tensor::zeros(&[4, 3], dt, dev).unwrap();
        a.fmod_out(&b, &mut out).unwrap();
        assert_exact(
            &read(&out),
            &read(&a.fmod(&b).unwrap()),
            &format!("fmod_out {dt}"),
        );
        if dt.is_float() {
            let q = read(&a.floor_divide_scalar(0.0).unwrap());
            assert!(
                q.iter().all(|v| v.is_infinite() || v.is_nan()),
                "{dt}: {q:?}"
            );
            assert!(read(&a.fmod_scalar(0.0).unwrap())
                .iter()
                .all(|v| v.is_nan()));
        } else {
            for e in [
                a.fmod_scalar(0.0),
                a.remainder_scalar(0.0),
                a.floor_divide_scalar(0.0),
            ] {
                let e = e.unwrap_err().to_string();
                assert!(e.contains("integer division by zero"), "{e}");
            }
            // A scalar that would wrap to 0 in the tensor's dtype is out of
            // its range: refused too (GUIDE 10, deviation 30).
            if dt == DType::I32 {
                let e = a.fmod_scalar(4294967296.0).unwrap_err().to_string();
                assert!(e.contains("without overflow"), "{e}");
            }
            let mut y = a.contiguous().unwrap();
            let e = y.floor_divide_scalar_(0.0).unwrap_err().to_string();
            assert!(e.contains("floor_divide"), "{e}");
            assert_eq!(a.fmod_scalar(0.5).unwrap().dtype(), DType::F32);
        }
    }
}

/// `atan2`: `(b, -a) / (a^2 + b^2)`; `fmod` and `remainder`: 1 for the
/// dividend, `-trunc(a / b)` and `-(a // b)` for the divisor (summed
/// over a broadcast); `floor_divide`: zeros (GUIDE 10, deviation 24); the
/// scalar forms likewise.
fn gradients_follow_the_closed_forms(dev: Device) {
    let av = [1.5, -2.0, 0.5, -3.25, 4.0, 0.75];
    let bv = [0.7, -1.3];
    let leaf = |v: &[f64], s: &[usize]| tensor(v, s, DType::F64, dev).requires_grad_(true).unwrap();
    for (name, f, _) in ops() {
        let (a, b) = (leaf(&av, &[3, 2]), leaf(&bv, &[2]));
        f(&a, &b).unwrap().sum_all().unwrap().backward().unwrap();
        let (ga, gb) = (read(&a.grad().unwrap()), read(&b.grad().unwrap()));
        let mut wa = vec![0.0; 6];
        let mut wb = vec![0.0; 2];
        for i in 0..6 {
            let (x, y) = (av[i], bv[i % 2]);
            let (da, db) = match name {
                "atan2" => (y / (x * x + y * y), -x / (x * x + y * y)),
                "fmod" => (1.0, -(x / y).trunc()),
                "remainder" => (1.0, -floor_div_ref(x, y)),
                _ => (0.0, 0.0),
            };
            wa[i] = da;
            wb[i % 2] += db;
        }
        assert_close(&ga, &wa, 1e-12, &format!("{name} d/da"));
        assert_close(&gb, &wb, 1e-12, &format!("{name} d/db"));
    }
    // 1 // 0.1 is 9 (fmod(1, 0.1) = 0.0999..), though 1 / 0.1 rounds to 10:
    // remainder's gradient uses the former, as PyTorch's.
    let (a, b) = (leaf(&[1.0], &[1]), leaf(&[0.1], &[1]));
    a.remainder(&b)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(read(&b.grad().unwrap()), [-9.0]);
    let a = leaf(&av, &[6]);
    a.atan2_scalar(-0.5)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    let want: Vec<f64> = av.iter().map(|x| -0.5 / (x * x + 0.25)).collect();
    assert_close(&read(&a.grad().unwrap()), &want, 1e-12, "atan2_scalar");
    for (name, s) in [("fmod", 1.0), ("remainder", 1.0), ("floor_divide", 0.0)] {
        let a = leaf(&av, &[6]);
        let y = match name {
            "fmod" => a.fmod_scalar(0.9),
            "remainder" => a.remainder_scalar(0.9),
            _ => a.floor_divide_scalar(0.9),
        };
        y.unwrap().sum_all().unwrap().backward().unwrap();
        assert_exact(
            &read(&a.grad().unwrap()),
            &[s; 6],
            &format!("{name}_scalar"),
        );
    }
}
