//! Elementwise ops on the CPU and on CUDA device 0, the same bodies on
//! both (`on_both!`, tests/common/devices.rs): unary, binary (with
//! broadcasting and type promotion), scalar, in-place, `where` and
//! `masked_fill`, over contiguous and strided layouts and every dtype they
//! take, against naive f64 references and, on CUDA, against the CPU.
#![cfg(feature = "cuda")]

use crate::common;

use common::devices::{also_cpu, cast_ref, on_both, sample, tensor, wrap};
use common::{assert_close, read, tol, ALL, FLOATS, NUMERIC};
use tensorscope::{memory, DType, Device, Error, Tensor};

on_both!(
    unary_ops,
    log1p_near_zero_and_in_place,
    binary_ops,
    scalar_ops,
    in_place_ops,
    where_and_masked_fill,
    unary_out_forms,
);

fn unary_ref(name: &str, x: f64) -> f64 {
    match name {
        "neg" => -x,
        "abs" => x.abs(),
        "exp" => x.exp(),
        "log" => x.ln(),
        "log1p" => x.ln_1p(),
        "sqrt" => x.sqrt(),
        "rsqrt" => 1.0 / x.sqrt(),
        "sin" => x.sin(),
        "cos" => x.cos(),
        "tanh" => x.tanh(),
        "sigmoid" => 1.0 / (1.0 + (-x).exp()),
        "relu" => x.max(0.0),
        "gelu" => 0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2)),
        "floor" => x.floor(),
        "round" => x.round_ties_even(),
        "sign" => {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                0.0
            }
        }
        "reciprocal" => 1.0 / x,
        "square" => x * x,
        "ceil" => x.ceil(),
        "trunc" => x.trunc(),
        "tan" => x.tan(),
        "asin" => x.asin(),
        "acos" => x.acos(),
        "atan" => x.atan(),
        "sinh" => x.sinh(),
        "cosh" => x.cosh(),
        "expm1" => x.exp_m1(),
        "exp2" => x.exp2(),
        "log2" => x.log2(),
        _ => unreachable!("{name}"),
    }
}

/// erf to ~1e-15 (Taylor series for |x| < 3, 1 beyond, where |1 - erf| < 2.3e-5
/// matters only at 1e-5 relative for gelu(x) ~ x; inputs stay below 4).
fn erf(x: f64) -> f64 {
    if x.abs() > 5.5 {
        return x.signum();
    }
    // erf(x) = 2/sqrt(pi) * sum (-1)^n x^(2n+1) / (n! (2n+1))
    let mut sum = 0.0f64;
    let mut term = x;
    let mut n = 0.0;
    while term.abs() > 1e-18 * sum.abs().max(1e-300) || n < 3.0 {
        sum += term / (2.0 * n + 1.0);
        n += 1.0;
        term *= -x * x / n;
        if n > 200.0 {
            break;
        }
    }
    sum * 2.0 / std::f64::consts::PI.sqrt()
}

type Unary = fn(&Tensor) -> tensorscope::Result<Tensor>;

/// `log1p` keeps the digits `log(1 + x)` loses near 0 (in f32, 1 + 1e-10 is
/// 1), matches `ln_1p` in f64, and runs in place on floats; in place on an
/// integer tensor it is an error naming the op (the result is a float).
fn log1p_near_zero_and_in_place(dev: Device) {
    let v = [1e-10, -1e-7, 3e-4, 0.0, -0.5, 2.0];
    for dt in [DType::F32, DType::F64] {
        let x = tensor(&v, &[6], dt, dev);
        let y = read(&x.log1p().unwrap());
        let want: Vec<f64> = read(&x).iter().map(|e| e.ln_1p()).collect();
        assert_close(&y, &want, tol(dt), &format!("log1p {dt}"));
        assert!(
            y[0] > 0.0,
            "log1p(1e-10) in {dt} must not round to 0: {}",
            y[0]
        );
        let mut z = x.deep_clone().unwrap();
        z.log1p_().unwrap();
        assert_eq!(read(&z), y, "log1p_ {dt}");
    }
    let mut i = tensor(&[1.0, 2.0], &[2], DType::I64, dev);
    let e = i.log1p_().unwrap_err().to_string();
    assert!(e.contains("log1p"), "{e}");
    assert_eq!(
        read(&i),
        vec![1.0, 2.0],
        "an in-place Err leaves the target untouched"
    );
}

fn unary_ops(dev: Device) {
    let ops: [(&str, Unary, bool); 29] = [
        ("neg", Tensor::neg, false),
        ("abs", Tensor::abs, false),
        ("exp", Tensor::exp, true),
        ("log", Tensor::log, true),
        ("log1p", Tensor::log1p, true),
        ("sqrt", Tensor::sqrt, true),
        ("rsqrt", Tensor::rsqrt, true),
        ("sin", Tensor::sin, true),
        ("cos", Tensor::cos, true),
        ("tanh", Tensor::tanh, true),
        ("sigmoid", Tensor::sigmoid, true),
        ("relu", Tensor::relu, false),
        ("gelu", Tensor::gelu, true),
        ("floor", Tensor::floor, false),
        ("round", Tensor::round, false),
        ("sign", Tensor::sign, false),
        ("reciprocal", Tensor::reciprocal, true),
        ("square", Tensor::square, false),
        ("ceil", Tensor::ceil, false),
        ("trunc", Tensor::trunc, false),
        ("tan", Tensor::tan, true),
        ("asin", Tensor::asin, true),
        ("acos", Tensor::acos, true),
        ("atan", Tensor::atan, true),
        ("sinh", Tensor::sinh, true),
        ("cosh", Tensor::cosh, true),
        ("expm1", Tensor::expm1, true),
        ("exp2", Tensor::exp2, true),
        ("log2", Tensor::log2, true),
    ];
    for dt in NUMERIC {
        for (name, f, float_only) in ops {
            // Inputs: a transposed [4, 6] view (the strided kernel path);
            // positive for log/sqrt/rsqrt, non-zero for reciprocal.
            let mut v = sample(24, dt, 3);
            if matches!(
                name,
                "log" | "log1p" | "log2" | "sqrt" | "rsqrt" | "reciprocal"
            ) {
                v.iter_mut()
                    .for_each(|x| *x = x.abs() + if dt.is_float() { 0.25 } else { 1.0 });
            }
            // asin and acos: inside (-1, 1).
            if matches!(name, "asin" | "acos") {
                v.iter_mut().for_each(|x| {
                    *x = if dt.is_float() {
                        *x / (1.0 + x.abs())
                    } else {
                        x.clamp(0.0, 1.0)
                    }
                });
            }
            if name == "neg" && dt == DType::U8 {
                continue; // wrapping negation of u8 is checked below
            }
            let make = |d: Device| tensor(&v, &[6, 4], dt, d).t().unwrap();
            let x = make(dev);
            let y = f(&x).unwrap();
            let out_dt = if float_only && !dt.is_float() {
                DType::F32
            } else {
                dt
            };
            assert_eq!(y.dtype(), out_dt, "{name} {dt}");
            assert_eq!(y.shape(), &[4, 6]);
            let xv = read(&x);
            let want: Vec<f64> = xv
                .iter()
                .map(|&e| cast_ref(unary_ref(name, e), out_dt))
                .collect();
            // The CPU's gelu uses an erf accurate to about 1e-7 (src/backend/cpu/numeric_traits.rs).
            let t = tol(out_dt).max(if name == "gelu" { 1e-6 } else { 0.0 });
            assert_close(&read(&y), &want, t, &format!("{name} {dt}"));
            also_cpu(
                dev,
                |d| f(&make(d)).unwrap(),
                &y,
                t,
                &format!("{name} {dt}"),
            );
        }
        // clamp with both, one, and no bounds.
        let v = sample(24, dt, 4);
        let x = tensor(&v, &[24], dt, dev);
        let xv = read(&x);
        for (lo, hi) in [
            (Some(-1.0), Some(2.0)),
            (None, Some(0.5)),
            (Some(1.0), None),
        ] {
            let y = x.clamp(lo, hi).unwrap();
            // As in PyTorch, an integer tensor clamped to a fractional bound
            // computes (and returns) f32: the bound is not rounded.
            let promoted = !dt.is_float() && [lo, hi].iter().flatten().any(|b| b.fract() != 0.0);
            if promoted {
                assert_eq!(y.dtype(), DType::F32, "clamp({lo:?}, {hi:?}) {dt} promotes");
            }
            // Bounds saturate to the dtype's range (PyTorch: u8 clamp(-1, 2)
            // leaves 0 alone), unlike a cast, which wraps.
            let bound = |b: f64| match dt {
                _ if promoted => b,
                DType::U8 => b as u8 as f64,
                DType::I32 => b as i32 as f64,
                DType::I64 => b as i64 as f64,
                _ => cast_ref(b, dt),
            };
            let want: Vec<f64> = xv
                .iter()
                .map(|&e| {
                    let l = lo.map(bound);
                    let h = hi.map(bound);
                    let e = if l.is_some_and(|l| e < l) {
                        l.unwrap()
                    } else {
                        e
                    };
                    if h.is_some_and(|h| e > h) {
                        h.unwrap()
                    } else {
                        e
                    }
                })
                .collect();
            assert_close(
                &read(&y),
                &want,
                0.0,
                &format!("clamp({lo:?}, {hi:?}) {dt}"),
            );
        }
    }
    // Wrapping integer negation and squares.
    let x = tensor(&[0.0, 1.0, 200.0, 255.0], &[4], DType::U8, dev);
    assert_eq!(read(&x.neg().unwrap()), vec![0.0, 255.0, 56.0, 1.0]);
    assert_eq!(read(&x.square().unwrap()), vec![0.0, 1.0, 64.0, 1.0]);
    let m = Tensor::from_slice(&[i32::MIN, -7, 46341], &[3], dev).unwrap();
    assert_eq!(read(&m.abs().unwrap()), vec![i32::MIN as f64, 7.0, 46341.0]);
    assert_eq!(
        read(&m.square().unwrap())[2],
        wrap(46341i128 * 46341, DType::I32)
    );
    // Special float values.
    let s = tensor(
        &[f64::NAN, f64::INFINITY, -0.0, 2.5, -2.5, 0.5],
        &[6],
        DType::F32,
        dev,
    );
    let r = read(&s.relu().unwrap());
    assert!(r[0].is_nan() && r[1] == f64::INFINITY && r[2] == 0.0);
    assert_eq!(
        read(&s.round().unwrap())[3..],
        [2.0, -2.0, 0.0],
        "round half to even"
    );
    assert_eq!(
        read(&s.sign().unwrap())[0],
        0.0,
        "sign(NaN) is 0, as in PyTorch"
    );
    // bool: floor/round are the identity; other ops are refused.
    let b = Tensor::from_slice(&[true, false], &[2], dev).unwrap();
    assert_eq!(read(&b.floor().unwrap()), vec![1.0, 0.0]);
    let e = b.neg().unwrap_err();
    assert!(matches!(e, Error::DTypeMismatch { op: "neg", .. }), "{e:?}");
}

fn binary_ref(name: &str, a: f64, b: f64, dt: DType) -> f64 {
    let int = !dt.is_float() && dt != DType::Bool;
    let (ia, ib) = (a as i128, b as i128);
    match name {
        "div" if dt == DType::Bool => a / b,
        "add" if dt == DType::Bool => ((a != 0.0) | (b != 0.0)) as u8 as f64,
        "mul" | "minimum" if dt == DType::Bool => ((a != 0.0) & (b != 0.0)) as u8 as f64,
        "maximum" if dt == DType::Bool => ((a != 0.0) | (b != 0.0)) as u8 as f64,
        "add" if int => wrap(ia + ib, dt),
        "sub" if int => wrap(ia - ib, dt),
        "mul" if int => wrap(ia * ib, dt),
        "pow" if int => wrap(ia.pow(ib as u32), dt),
        "add" => a + b,
        "sub" => a - b,
        "mul" => a * b,
        "div" => a / b,
        "pow" => a.powf(b),
        "maximum" => a.max(b),
        "minimum" => a.min(b),
        "eq" => (a == b) as u8 as f64,
        "ne" => (a != b) as u8 as f64,
        "lt" => (a < b) as u8 as f64,
        "le" => (a <= b) as u8 as f64,
        "gt" => (a > b) as u8 as f64,
        "ge" => (a >= b) as u8 as f64,
        _ => unreachable!("{name}"),
    }
}

type Binary = fn(&Tensor, &Tensor) -> tensorscope::Result<Tensor>;

const BINARY: [(&str, Binary); 13] = [
    ("add", Tensor::add),
    ("sub", Tensor::sub),
    ("mul", Tensor::mul),
    ("div", Tensor::div),
    ("pow", Tensor::pow),
    ("maximum", Tensor::maximum),
    ("minimum", Tensor::minimum),
    ("eq", Tensor::eq),
    ("ne", Tensor::ne),
    ("lt", Tensor::lt),
    ("le", Tensor::le),
    ("gt", Tensor::gt),
    ("ge", Tensor::ge),
];

/// The dtype of binary op `name` on two `dt` operands: bool for the
/// comparisons, f32 for `div` of integers, else `dt`.
fn binary_out_dtype(name: &str, dt: DType) -> DType {
    if matches!(name, "eq" | "ne" | "lt" | "le" | "gt" | "ge") {
        DType::Bool
    } else if name == "div" && !dt.is_float() {
        DType::F32
    } else {
        dt
    }
}

fn binary_ops(dev: Device) {
    for dt in ALL {
        for (name, f) in BINARY {
            if dt == DType::Bool && matches!(name, "sub" | "pow") {
                let b = Tensor::from_slice(&[true], &[1], dev).unwrap();
                let e = f(&b, &b).unwrap_err();
                assert!(
                    matches!(e, Error::DTypeMismatch { op, .. } if op == name),
                    "{name} on bool: {e:?}"
                );
                continue;
            }
            // a: [3, 1, 4]; b: a transposed [4, 5] seen as [5, 4]; out [3, 5, 4].
            let av = sample(12, dt, 5);
            let mut bv = sample(20, dt, 6);
            if name == "pow" {
                bv.iter_mut().for_each(|x| *x = (x.abs() % 4.0).floor());
            }
            if name == "div" && !dt.is_float() {
                bv.iter_mut().for_each(|x| {
                    if *x == 0.0 {
                        *x = 3.0
                    }
                });
            }
            let make = |d: Device| {
                (
                    tensor(&av, &[3, 1, 4], dt, d),
                    tensor(&bv, &[4, 5], dt, d).t().unwrap(),
                )
            };
            let (a, b) = make(dev);
            let y = f(&a, &b).unwrap();
            assert_eq!(y.shape(), &[3, 5, 4], "{name} {dt}");
            let out_dt = binary_out_dtype(name, dt);
            assert_eq!(y.dtype(), out_dt, "{name} {dt}");
            let (ah, bh) = (read(&a), read(&b));
            let want: Vec<f64> = (0..60)
                .map(|p| {
                    let (i, j, k) = (p / 20, p / 4 % 5, p % 4);
                    cast_ref(binary_ref(name, ah[i * 4 + k], bh[j * 4 + k], dt), out_dt)
                })
                .collect();
            assert_close(&read(&y), &want, tol(out_dt), &format!("{name} {dt}"));
            also_cpu(
                dev,
                |d| {
                    let (a, b) = make(d);
                    f(&a, &b).unwrap()
                },
                &y,
                tol(out_dt),
                &format!("{name} {dt}"),
            );
        }
    }
    // Promotion: i32 + f16 computes in f16; device mismatch is an error.
    let a = tensor(&[1.0, 2.0], &[2], DType::I32, dev);
    let b = tensor(&[0.5, 0.25], &[2], DType::F16, dev);
    let y = a.add(&b).unwrap();
    assert_eq!((y.dtype(), read(&y)), (DType::F16, vec![1.5, 2.25]));
    if dev.is_cuda() {
        let c = tensor(&[1.0, 2.0], &[2], DType::F16, Device::Cpu);
        let e = b.add(&c).unwrap_err();
        assert!(
            matches!(e, Error::DeviceMismatch { op: "add", .. }),
            "{e:?}"
        );
    }
    let e = a
        .add(&tensor(&[1.0, 2.0, 3.0], &[3], DType::I32, dev))
        .unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { op: "add", .. }), "{e:?}");
}

fn scalar_ops(dev: Device) {
    type S = fn(&Tensor, f64) -> tensorscope::Result<Tensor>;
    let ops: [(&str, S); 13] = [
        ("add", Tensor::add_scalar),
        ("sub", Tensor::sub_scalar),
        ("mul", Tensor::mul_scalar),
        ("div", Tensor::div_scalar),
        ("pow", Tensor::pow_scalar),
        ("maximum", Tensor::maximum_scalar),
        ("minimum", Tensor::minimum_scalar),
        ("eq", Tensor::eq_scalar),
        ("ne", Tensor::ne_scalar),
        ("lt", Tensor::lt_scalar),
        ("le", Tensor::le_scalar),
        ("gt", Tensor::gt_scalar),
        ("ge", Tensor::ge_scalar),
    ];
    for dt in NUMERIC {
        for (name, f) in ops {
            let s = if name == "pow" { 2.0 } else { 3.0 };
            let v = sample(24, dt, 7);
            let make = |d: Device| tensor(&v, &[4, 6], dt, d).slice(1, 1, 6, 2).unwrap(); // [4, 3], stride 2
            let x = make(dev);
            let y = f(&x, s).unwrap();
            let out_dt = binary_out_dtype(name, dt);
            assert_eq!(y.dtype(), out_dt, "{name}_scalar {dt}");
            let want: Vec<f64> = read(&x)
                .iter()
                .map(|&e| cast_ref(binary_ref(name, e, s, dt), out_dt))
                .collect();
            assert_close(
                &read(&y),
                &want,
                tol(out_dt),
                &format!("{name}_scalar {dt}"),
            );
            also_cpu(
                dev,
                |d| f(&make(d), s).unwrap(),
                &y,
                tol(out_dt),
                &format!("{name}_scalar {dt}"),
            );
        }
    }
    // An integer tensor with a fractional scalar computes in f32.
    let x = tensor(&[1.0, 2.0], &[2], DType::I64, dev);
    let y = x.mul_scalar(0.5).unwrap();
    assert_eq!((y.dtype(), read(&y)), (DType::F32, vec![0.5, 1.0]));
    let b = Tensor::from_slice(&[true, false], &[2], dev).unwrap();
    assert_eq!(read(&b.eq_scalar(1.0).unwrap()), vec![1.0, 0.0]);
}

fn in_place_ops(dev: Device) {
    for dt in FLOATS {
        let v = sample(24, dt, 8);
        let mut x = tensor(&v, &[4, 6], dt, dev);
        let xv = read(&x);
        let ver = x.version();
        {
            // add_ into a stepped view, with a broadcast row.
            let mut view = x.slice(1, 0, 6, 2).unwrap();
            let row = tensor(&[1.0, 2.0, 3.0], &[3], dt, dev);
            view.add_(&row).unwrap();
        }
        let want: Vec<f64> = (0..24)
            .map(|i| {
                if i % 2 == 0 {
                    cast_ref(xv[i] + (i % 6 / 2 + 1) as f64, dt)
                } else {
                    xv[i]
                }
            })
            .collect();
        assert_close(&read(&x), &want, tol(dt), &format!("add_ {dt}"));
        assert!(x.version() > ver, "in-place writes bump the version");
        x.mul_scalar_(2.0).unwrap();
        x.exp_().unwrap();
        let want: Vec<f64> = want
            .iter()
            .map(|&e| cast_ref(cast_ref(e * 2.0, dt).exp(), dt))
            .collect();
        assert_close(
            &read(&x),
            &want,
            2.0 * tol(dt),
            &format!("mul_scalar_ then exp_ {dt}"),
        );
        // A write through an expanded view is refused.
        let mut e = tensor(&[1.0], &[1], dt, dev).expand(&[4]).unwrap();
        assert!(matches!(
            e.fill_(0.0).unwrap_err(),
            Error::InvalidInPlace { op: "fill_", .. }
        ));
    }
    // An input overlapping the output with another layout reads the old values.
    let mut x = tensor(&[1.0, 2.0, 3.0, 4.0], &[2, 2], DType::F32, dev);
    let xt = x.t().unwrap();
    x.add_(&xt).unwrap();
    assert_eq!(read(&x), vec![2.0, 5.0, 5.0, 8.0]);
}

fn where_and_masked_fill(dev: Device) {
    let cond_v = [1.0, 0.0, 0.0, 1.0];
    let cond = tensor(&cond_v, &[4, 1], DType::Bool, dev); // broadcast along dim 1
    for (da, db) in [
        (DType::F32, DType::F32),
        (DType::I32, DType::F16),
        (DType::U8, DType::I64),
        (DType::Bool, DType::Bool),
    ] {
        let av = sample(12, da, 9);
        let bv = sample(3, db, 10);
        let make = |d: Device| {
            let a = tensor(&av, &[3, 4], da, d).t().unwrap(); // [4, 3] strided
            let b = tensor(&bv, &[3], db, d);
            let c = tensor(&cond_v, &[4, 1], DType::Bool, d);
            Tensor::where_cond(&c, &a, &b).unwrap()
        };
        let y = make(dev);
        let out_dt = da.promote(db);
        assert_eq!((y.shape(), y.dtype()), (&[4usize, 3][..], out_dt));
        let a = tensor(&av, &[3, 4], da, dev);
        let (ah, bh) = (read(&a), read(&tensor(&bv, &[3], db, dev)));
        let want: Vec<f64> = (0..12)
            .map(|p| {
                let (i, j) = (p / 3, p % 3);
                cast_ref(
                    if cond_v[i] != 0.0 {
                        ah[j * 4 + i]
                    } else {
                        bh[j]
                    },
                    out_dt,
                )
            })
            .collect();
        assert_eq!(read(&y), want, "where {da} {db}");
        also_cpu(dev, make, &y, 0.0, &format!("where {da} {db}"));
    }
    let e = Tensor::where_cond(&tensor(&[1.0], &[1], DType::F32, dev), &cond, &cond).unwrap_err();
    assert!(
        matches!(e, Error::DTypeMismatch { op: "where", .. }),
        "{e:?}"
    );
    for dt in NUMERIC {
        let v = sample(12, dt, 11);
        let mut x = tensor(&v, &[4, 3], dt, dev);
        let xv = read(&x);
        x.masked_fill_(&cond, 7.0).unwrap();
        let want: Vec<f64> = (0..12)
            .map(|p| if cond_v[p / 3] != 0.0 { 7.0 } else { xv[p] })
            .collect();
        assert_eq!(read(&x), want, "masked_fill_ {dt}");
    }
}

// ------------------------------------------- kernel review additions ---

/// Cases found reviewing the CUDA kernels, run on both devices.
mod kernel_review {
    use super::common::devices::{also_cpu, on_both, tensor};
    use super::common::read;
    use tensorscope::{DType, Device, Tensor};

    on_both!(integer_scalars_wrap, integer_pow_edges, gelu_f64_tail);

    /// An integral scalar keeps an integer tensor's dtype and is converted
    /// by wrapping through i64 (PyTorch's rule): `u8 + (-2)` subtracts 2
    /// modulo 256, `i32 + (2^32 + 5)` adds 5. (CUDA saturated the scalar:
    /// `u8 + (-2)` added 0.)
    fn integer_scalars_wrap(dev: Device) {
        let v: Vec<f64> = vec![0.0, 1.0, 7.0, 200.0, 255.0, 9.0, 3.0, 128.0];
        // A stepped view: [0, 7, 255, 3].
        let make = |d: Device| tensor(&v, &[8], DType::U8, d).slice(0, 0, 8, 2).unwrap();
        let x = make(dev);
        let xs = read(&x);
        type S = fn(&Tensor, f64) -> tensorscope::Result<Tensor>;
        type Ref = fn(i64, i64) -> i64;
        let cases: [(&str, S, f64, Ref); 4] = [
            ("add", Tensor::add_scalar, -2.0, |a, s| a + s),
            ("sub", Tensor::sub_scalar, 255.0, |a, s| a - s),
            ("mul", Tensor::mul_scalar, -1.0, |a, s| a * s),
            ("maximum", Tensor::maximum_scalar, -1.0, |a, s| {
                a.max(s.rem_euclid(256))
            }),
        ];
        for (name, f, s, r) in cases {
            let y = f(&x, s).unwrap();
            assert_eq!(y.dtype(), DType::U8, "{name}");
            let want: Vec<f64> = xs
                .iter()
                .map(|&a| r(a as i64, s as i64).rem_euclid(256) as f64)
                .collect();
            assert_eq!(read(&y), want, "u8 {name}_scalar({s})");
            also_cpu(dev, |d| f(&make(d), s).unwrap(), &y, 0.0, name);
        }
        // In place, on the same stepped view.
        let base = tensor(&v, &[8], DType::U8, dev);
        let mut view = base.slice(0, 0, 8, 2).unwrap();
        view.add_scalar_(-2.0).unwrap();
        let want: Vec<f64> = v
            .iter()
            .enumerate()
            .map(|(i, &a)| {
                if i % 2 == 0 {
                    (a as i64 - 2).rem_euclid(256) as f64
                } else {
                    a
                }
            })
            .collect();
        assert_eq!(read(&base), want, "u8 add_scalar_(-2) in place");
        // i32: a scalar beyond i32 is refused (GUIDE 10, deviation 30);
        // i64: a negative scalar.
        let w: Vec<f64> = vec![-3.0, 0.0, 5.0, 1000.0];
        let x32 = tensor(&w, &[2, 2], DType::I32, dev).t().unwrap();
        assert!(x32.add_scalar(4294967301.0).is_err(), "i32 + (2^32 + 5)");
        assert!(x32.mul_scalar(-4294967294.0).is_err(), "i32 * (-2^32 + 2)");
        let x64 = tensor(&w, &[4], DType::I64, dev);
        assert_eq!(
            read(&x64.sub_scalar(-7.0).unwrap()),
            vec![4.0, 7.0, 12.0, 1007.0]
        );
    }

    /// `a.wrapping_pow(e)` for a u64 exponent, by repeated squaring.
    fn wpow(a: i64, mut e: u64) -> i64 {
        let (mut base, mut acc) = (a, 1i64);
        while e > 0 {
            if e & 1 == 1 {
                acc = acc.wrapping_mul(base);
            }
            base = base.wrapping_mul(base);
            e >>= 1;
        }
        acc
    }

    /// Integer `pow` of two tensors: a negative exponent gives 1/a truncated
    /// (1 for 1, +-1 for -1 by parity, 0 otherwise) and an i64 exponent of
    /// 2^32 or more counts in full. (CUDA gave 0 for (-1)^-1 and truncated
    /// the exponent to 32 bits: 2^(2^32) was 1.)
    fn integer_pow_edges(dev: Device) {
        let a = [-1i64, -1, 1, 2, 0, 3, -2, -1];
        let b = [-1i64, -2, -3, -1, -1, 0, -1, -7];
        let want = [-1i64, 1, 1, 0, 0, 1, 0, -1];
        for dt in [DType::I64, DType::I32] {
            // a: [2, 4]; b: the transpose of a [4, 2] storage (strides [1, 2]).
            let bt: Vec<i64> = (0..8).map(|p| b[(p % 2) * 4 + p / 2]).collect();
            let make = |d: Device| {
                let ta = Tensor::from_slice(&a, &[2, 4], d)
                    .unwrap()
                    .to_dtype(dt)
                    .unwrap();
                let tb = Tensor::from_slice(&bt, &[4, 2], d)
                    .unwrap()
                    .to_dtype(dt)
                    .unwrap();
                (ta, tb.t().unwrap())
            };
            let (ta, tb) = make(dev);
            let y = ta.pow(&tb).unwrap();
            assert_eq!(y.dtype(), dt);
            assert_eq!(
                y.to_vec::<i64>().unwrap(),
                want,
                "{dt} pow, negative exponents"
            );
            also_cpu(
                dev,
                |d| {
                    let (ta, tb) = make(d);
                    ta.pow(&tb).unwrap()
                },
                &y,
                0.0,
                "pow negative exponents",
            );
        }
        let a = [2i64, -1, 3, 1, 3, 5];
        let e: [u64; 6] = [
            1 << 32,
            (1 << 32) + 1,
            (1 << 32) + 3,
            1 << 40,
            40,
            (1 << 33) + 7,
        ];
        let b: Vec<i64> = e.iter().map(|&x| x as i64).collect();
        let want: Vec<i64> = a.iter().zip(&e).map(|(&x, &k)| wpow(x, k)).collect();
        let ta = Tensor::from_slice(&a, &[6], dev).unwrap();
        let tb = Tensor::from_slice(&b, &[6], dev).unwrap();
        let y = ta.pow(&tb).unwrap();
        assert_eq!(
            y.to_vec::<i64>().unwrap(),
            want,
            "i64 pow, exponents >= 2^32"
        );
        assert_eq!(want[0], 0, "2^(2^32) wraps to 0");
    }

    /// erfc(z) = 2/sqrt(pi) * integral of exp(-t^2) from z to z + 8
    /// (Simpson, step 1e-4): independent of the library's erfc.
    fn erfc_ref(z: f64) -> f64 {
        let n = 80_000;
        let h = 8.0 / n as f64;
        let f = |t: f64| (-t * t).exp();
        let mut s = f(z) + f(z + 8.0);
        for i in 1..n {
            s += f(z + i as f64 * h) * if i % 2 == 1 { 4.0 } else { 2.0 };
        }
        s * h / 3.0 * 2.0 / std::f64::consts::PI.sqrt()
    }

    /// f64 gelu in its negative tail is x/2 * erfc(-x/sqrt 2), to f64
    /// accuracy relative to the (tiny) value: 1 + erf(x/sqrt 2) cancels
    /// (CUDA gave 0 for gelu(-10) = -7.6e-23).
    fn gelu_f64_tail(dev: Device) {
        let xs = [-12.0, -10.0, -8.0, -6.0, -4.5];
        let x = tensor(&xs, &[5], DType::F64, dev);
        let y = read(&x.gelu().unwrap());
        for (i, &v) in xs.iter().enumerate() {
            let want = 0.5 * v * erfc_ref(-v / std::f64::consts::SQRT_2);
            assert!(want < 0.0 && want > -1e-3, "reference gelu({v}) = {want}");
            let rel = ((y[i] - want) / want).abs();
            assert!(
                rel < 1e-9,
                "gelu({v}): got {}, want {want} (rel {rel:e})",
                y[i]
            );
        }
    }
}

/// `NAME_out` (PyTorch's `out=`): the values of `NAME`, written into a
/// tensor the caller owns with no allocation when its dtype is the
/// result's; casts into a wider dtype; refuses a wrong shape, a float
/// result into an integer `out`, another device, and an input that
/// requires grad in grad mode; an `out` that overlaps the input with
/// another layout reads the input first.
fn unary_out_forms(dev: Device) {
    let v = sample(12, DType::F32, 41);
    let x = tensor(&v, &[3, 4], DType::F32, dev);
    let mut out = Tensor::empty(&[3, 4], DType::F32, dev).unwrap();
    let before = memory::memory_allocated(dev);
    x.neg_out(&mut out).unwrap();
    assert_eq!(
        memory::memory_allocated(dev),
        before,
        "neg_out allocates nothing"
    );
    assert_eq!(read(&out), read(&x.neg().unwrap()));
    let xp = x.abs().unwrap().add_scalar(0.5).unwrap();
    let before = memory::memory_allocated(dev);
    xp.sqrt_out(&mut out).unwrap();
    xp.exp_out(&mut out).unwrap();
    assert_eq!(
        memory::memory_allocated(dev),
        before,
        "exp_out allocates nothing"
    );
    assert_eq!(read(&out), read(&xp.exp().unwrap()));
    // Into f64: computed in f32, then cast (as PyTorch).
    let mut wide = Tensor::empty(&[3, 4], DType::F64, dev).unwrap();
    xp.sqrt_out(&mut wide).unwrap();
    assert_eq!(read(&wide), read(&xp.sqrt().unwrap()));
    // An integer input of a float op computes in f32.
    let xi = tensor(&[1.0, 4.0, 9.0], &[3], DType::I64, dev);
    let mut fo = Tensor::empty(&[3], DType::F32, dev).unwrap();
    xi.sqrt_out(&mut fo).unwrap();
    assert_eq!(read(&fo), vec![1.0, 2.0, 3.0]);
    let mut io = Tensor::empty(&[3], DType::I64, dev).unwrap();
    let e = xi.sqrt_out(&mut io).unwrap_err();
    assert!(
        matches!(e, Error::DTypeMismatch { op: "sqrt", .. }),
        "{e:?}"
    );
    xi.neg_out(&mut io).unwrap();
    assert_eq!(read(&io), vec![-1.0, -4.0, -9.0]);
    // Wrong shape: an Err naming the op and both shapes; out untouched.
    let mut small = Tensor::zeros(&[4], DType::F32, dev).unwrap();
    let e = x.relu_out(&mut small).unwrap_err();
    assert!(
        e.to_string().contains("relu") && e.to_string().contains("[3, 4]"),
        "{e}"
    );
    assert_eq!(read(&small), vec![0.0; 4]);
    // Out overlapping the input with another layout: the input is read first.
    let sq = tensor(&[1.0, 2.0, 3.0, 4.0], &[2, 2], DType::F32, dev);
    let mut view = sq.t().unwrap();
    sq.neg_out(&mut view).unwrap();
    assert_eq!(read(&sq), vec![-1.0, -3.0, -2.0, -4.0]);
    // Requires grad: refused in grad mode, allowed under no_grad.
    let g = x.deep_clone().unwrap().requires_grad_(true).unwrap();
    let e = g.tanh_out(&mut out).unwrap_err();
    assert!(matches!(e, Error::Autograd { op: "tanh", .. }), "{e:?}");
    tensorscope::autograd::no_grad(|| g.tanh_out(&mut out)).unwrap();
    assert_eq!(read(&out), read(&x.tanh().unwrap()));
    // Another device.
    if dev.is_cuda() {
        let mut host = Tensor::empty(&[3, 4], DType::F32, Device::Cpu).unwrap();
        assert!(x.neg_out(&mut host).is_err());
    }
}
