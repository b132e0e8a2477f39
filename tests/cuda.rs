//! The same test bodies on the CPU and on CUDA device 0.
//!
//! Every body takes a `Device` and checks the results against naive
//! references computed here in f64 (and, on CUDA, against the same op on the
//! CPU). `on_both!` makes a `cpu::<name>` and a `gpu::<name>` test of each;
//! the CUDA ones print a skip line and return when no GPU is usable. A few
//! tests are CUDA-only (streams, events, record_stream, pinned staging) and
//! one runs everywhere to check that a missing GPU is an error, not a panic.
//!
//! Allocator statistics are global per device, so every test here takes
//! `LOCK` (tests of one binary run on parallel threads).
#![cfg(feature = "cuda")]

use std::sync::Mutex;
use tensorscope::backend::cuda;
use tensorscope::{memory, DType, Device, Error, Tensor};

static LOCK: Mutex<()> = Mutex::new(());

fn lock() -> std::sync::MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn gpu() -> Option<Device> {
    if cuda::is_available() {
        Some(Device::Cuda(0))
    } else {
        None
    }
}

macro_rules! on_both {
    ($($name:ident),* $(,)?) => {
        mod cpu {
            $(#[test] fn $name() { let _g = super::lock(); super::$name(tensorscope::Device::Cpu) })*
        }
        mod gpu {
            $(#[test] fn $name() {
                let _g = super::lock();
                match super::gpu() {
                    Some(d) => super::$name(d),
                    None => eprintln!("skipped gpu::{}: no CUDA device ({:?})", stringify!($name), tensorscope::backend::cuda::libraries().error),
                }
            })*
        }
    };
}

on_both!(
    creation,
    copy_and_cast_round_trips,
    unary_ops,
    binary_ops,
    scalar_ops,
    in_place_ops,
    where_and_masked_fill,
    allocator_statistics_are_exact,
);

// ------------------------------------------------------------ helpers ---

const FLOATS: [DType; 4] = [DType::F32, DType::F64, DType::F16, DType::BF16];
const NUMERIC: [DType; 7] = [
    DType::F32,
    DType::F64,
    DType::F16,
    DType::BF16,
    DType::I64,
    DType::I32,
    DType::U8,
];

/// Relative tolerance of one rounding in `dt` (plus slack for the device's
/// transcendental functions).
fn tol(dt: DType) -> f64 {
    match dt {
        DType::F64 => 1e-12,
        DType::F32 => 1e-5,
        DType::F16 => 2e-3,
        DType::BF16 => 1.6e-2,
        _ => 0.0,
    }
}

fn close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= tol * w.abs().max(1.0);
        assert!(ok, "{what}: element {i}: got {g}, want {w}");
    }
}

/// A tensor of `dt` with `v` (converted) on `dev`.
fn tensor(v: &[f64], shape: &[usize], dt: DType, dev: Device) -> Tensor {
    Tensor::from_slice(v, shape, Device::Cpu)
        .unwrap()
        .to_dtype(dt)
        .unwrap()
        .to_device(dev)
        .unwrap()
}

fn vals(t: &Tensor) -> Vec<f64> {
    t.to_vec::<f64>().unwrap()
}

/// Deterministic test values: multiples of 0.25 in [-4, 4) for floats,
/// integers in a small range for the integer types.
fn sample(n: usize, dt: DType, seed: u64) -> Vec<f64> {
    let mut g = tensorscope::Generator::new(seed);
    (0..n)
        .map(|_| {
            let u = g.next_f64();
            match dt {
                DType::U8 => (u * 12.0).floor(),
                DType::Bool => (u < 0.5) as u8 as f64,
                d if d.is_float() => (u * 32.0).floor() / 4.0 - 4.0,
                _ => (u * 13.0).floor() - 6.0,
            }
        })
        .collect()
}

/// `v` as Rust's `as` would convert it to `dt`, through f64 (what every
/// cast in tensorscope does), for values exactly representable in the
/// float types or out of range for the integer ones.
fn cast_ref(v: f64, dt: DType) -> f64 {
    match dt {
        DType::Bool => (v != 0.0) as u8 as f64,
        DType::U8 => v as u8 as f64,
        DType::I32 => v as i32 as f64,
        DType::I64 => v as i64 as f64,
        DType::F32 => v as f32 as f64,
        DType::F16 => tensorscope::f16::from_f64(v).to_f64(),
        DType::BF16 => tensorscope::bf16::from_f64(v).to_f64(),
        DType::F64 => v,
    }
}

/// Wraps an exact integer result to `dt`'s width (integer arithmetic wraps).
fn wrap(v: i128, dt: DType) -> f64 {
    match dt {
        DType::U8 => (v as u8) as f64,
        DType::I32 => (v as i32) as f64,
        DType::I64 => (v as i64) as f64,
        _ => v as f64,
    }
}

/// The CPU result of the same computation, when `dev` is not the CPU:
/// CUDA must agree with it as with the naive reference.
fn also_cpu(dev: Device, f: impl Fn(Device) -> Tensor, got: &Tensor, tol: f64, what: &str) {
    if dev.is_cuda() {
        let c = f(Device::Cpu);
        assert_eq!(c.dtype(), got.dtype(), "{what}: dtype");
        assert_eq!(c.shape(), got.shape(), "{what}: shape");
        close(&vals(got), &vals(&c), tol, &format!("{what} (CUDA vs CPU)"));
    }
}

// ------------------------------------------------------------- bodies ---

fn creation(dev: Device) {
    let z = Tensor::zeros(&[3, 4], DType::F32, dev).unwrap();
    assert_eq!(
        (z.shape(), z.dtype(), z.device()),
        (&[3usize, 4][..], DType::F32, dev)
    );
    assert_eq!(vals(&z), vec![0.0; 12]);
    for dt in [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I64,
        DType::I32,
        DType::U8,
        DType::Bool,
    ] {
        let f = Tensor::full(&[2, 5], 3.0, dt, dev).unwrap();
        assert_eq!(vals(&f), vec![cast_ref(3.0, dt); 10], "full {dt}");
        let o = Tensor::ones(&[7], dt, dev).unwrap();
        assert_eq!(vals(&o), vec![1.0; 7], "ones {dt}");
    }
    // A value whose bytes differ (not a memset pattern) in every width.
    let f = Tensor::full(&[1000], -1.5, DType::F32, dev).unwrap();
    assert!(vals(&f).iter().all(|&x| x == -1.5));
    let a = Tensor::arange(0.0, 10.0, 1.5, DType::F32, dev).unwrap();
    assert_eq!(vals(&a), vec![0.0, 1.5, 3.0, 4.5, 6.0, 7.5, 9.0]);
    let e = Tensor::eye(3, 4, DType::I32, dev).unwrap();
    let want: Vec<f64> = (0..12).map(|i| ((i / 4) == (i % 4)) as u8 as f64).collect();
    assert_eq!(vals(&e), want, "eye fills a strided diagonal view");
    let l = Tensor::linspace(-1.0, 1.0, 5, DType::F64, dev).unwrap();
    assert_eq!(vals(&l), vec![-1.0, -0.5, 0.0, 0.5, 1.0]);
    let s = Tensor::scalar(2.5f32, dev).unwrap();
    assert_eq!((s.rank(), s.item::<f64>().unwrap()), (0, 2.5));
    let empty = Tensor::zeros(&[0, 3], DType::F32, dev).unwrap();
    assert_eq!(vals(&empty), Vec::<f64>::new());
    // Random fills are drawn on the host: the same seed gives the same
    // values on every device.
    tensorscope::manual_seed(11);
    let r = Tensor::rand(&[64], DType::F32, dev).unwrap();
    tensorscope::manual_seed(11);
    let rc = Tensor::rand(&[64], DType::F32, Device::Cpu).unwrap();
    assert_eq!(vals(&r), vals(&rc));
    assert!(vals(&r).iter().all(|&x| (0.0..1.0).contains(&x)));
}

fn copy_and_cast_round_trips(dev: Device) {
    let all = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I64,
        DType::I32,
        DType::U8,
        DType::Bool,
    ];
    // Values exact in every float type, some out of range for u8 / i32.
    let v: Vec<f64> = vec![
        0.0, 1.0, -1.0, 2.5, -3.75, 255.0, 256.0, -129.0, 1e6, 0.125, 7.0, -0.5,
    ];
    for s in all {
        let x = tensor(&v, &[3, 4], s, dev);
        let xv = vals(&x);
        for d in all {
            let y = x.to_dtype(d).unwrap();
            assert_eq!(y.dtype(), d);
            let want: Vec<f64> = xv.iter().map(|&e| cast_ref(e, d)).collect();
            assert_eq!(vals(&y), want, "cast {s} -> {d}");
            // Strided sources: transposed, sliced with a step, expanded.
            let t = x.t().unwrap().to_dtype(d).unwrap();
            let want_t: Vec<f64> = (0..12)
                .map(|i| cast_ref(xv[(i % 3) * 4 + i / 3], d))
                .collect();
            assert_eq!(vals(&t), want_t, "cast {s} -> {d}, transposed");
            let st = x.slice(1, 0, 4, 3).unwrap().to_dtype(d).unwrap();
            let want_s: Vec<f64> = [0, 3, 4, 7, 8, 11]
                .iter()
                .map(|&i| cast_ref(xv[i], d))
                .collect();
            assert_eq!(vals(&st), want_s, "cast {s} -> {d}, stepped slice");
        }
        let ex = x
            .slice(0, 1, 2, 1)
            .unwrap()
            .expand(&[3, 4])
            .unwrap()
            .contiguous()
            .unwrap();
        let want_e: Vec<f64> = (0..12).map(|i| xv[4 + i % 4]).collect();
        assert_eq!(vals(&ex), want_e, "expand {s}");
        // Host <-> device round trips of non-contiguous tensors, both ways.
        let back = x.t().unwrap().to_device(Device::Cpu).unwrap();
        assert_eq!(back.shape(), &[4, 3]);
        assert_eq!(
            vals(&back),
            (0..12).map(|i| xv[(i % 3) * 4 + i / 3]).collect::<Vec<_>>()
        );
        let there = back.t().unwrap().to_device(dev).unwrap();
        assert_eq!(vals(&there), xv, "round trip {s}");
    }
    // copy_ with a cast and a broadcast into a strided destination.
    let dst = Tensor::zeros(&[4, 6], DType::F64, dev).unwrap();
    let src = tensor(&[1.0, 2.0, 3.0], &[3], DType::I32, dev);
    {
        let mut view = dst.slice(1, 0, 6, 2).unwrap(); // [4, 3], stride 2
        view.copy_(&src).unwrap();
    }
    let want: Vec<f64> = (0..24)
        .map(|i| {
            if i % 2 == 0 {
                (i % 6 / 2 + 1) as f64
            } else {
                0.0
            }
        })
        .collect();
    assert_eq!(vals(&dst), want, "copy_ into a stepped view");
    // copy_ across devices, from the CPU.
    let host = tensor(&[5.0, 6.0], &[2], DType::F32, Device::Cpu);
    dst.select(0, 3)
        .unwrap()
        .slice(0, 4, 6, 1)
        .unwrap()
        .copy_(&host)
        .unwrap();
    assert_eq!(vals(&dst)[22..], [5.0, 6.0]);
    let big: Vec<f64> = (0..3_000_000).map(|i| (i % 1000) as f64).collect();
    let b = tensor(&big, &[1000, 3000], DType::F32, dev);
    let bt = b.t().unwrap().contiguous().unwrap().t().unwrap(); // same values, column-major
    assert_eq!(vals(&bt), big, "a 12 MB strided round trip");
}

/// The naive f64 value of a unary op (with the CPU's conventions).
fn unary_ref(name: &str, x: f64) -> f64 {
    match name {
        "neg" => -x,
        "abs" => x.abs(),
        "exp" => x.exp(),
        "log" => x.ln(),
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

fn unary_ops(dev: Device) {
    let ops: [(&str, Unary, bool); 17] = [
        ("neg", Tensor::neg, false),
        ("abs", Tensor::abs, false),
        ("exp", Tensor::exp, true),
        ("log", Tensor::log, true),
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
    ];
    for dt in NUMERIC {
        for (name, f, float_only) in ops {
            // Inputs: a transposed [4, 6] view (the strided kernel path);
            // positive for log/sqrt/rsqrt, non-zero for reciprocal.
            let mut v = sample(24, dt, 3);
            if matches!(name, "log" | "sqrt" | "rsqrt" | "reciprocal") {
                v.iter_mut()
                    .for_each(|x| *x = x.abs() + if dt.is_float() { 0.25 } else { 1.0 });
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
            let xv = vals(&x);
            let want: Vec<f64> = xv
                .iter()
                .map(|&e| cast_ref(unary_ref(name, e), out_dt))
                .collect();
            // The CPU's gelu uses an erf accurate to about 1e-7 (src/backend/cpu/num.rs).
            let t = tol(out_dt).max(if name == "gelu" { 1e-6 } else { 0.0 });
            close(&vals(&y), &want, t, &format!("{name} {dt}"));
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
        let xv = vals(&x);
        for (lo, hi) in [
            (Some(-1.0), Some(2.0)),
            (None, Some(0.5)),
            (Some(1.0), None),
        ] {
            let y = x.clamp(lo, hi).unwrap();
            let want: Vec<f64> = xv
                .iter()
                .map(|&e| {
                    let l = lo.map(|l| cast_ref(l, dt));
                    let h = hi.map(|h| cast_ref(h, dt));
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
            close(
                &vals(&y),
                &want,
                0.0,
                &format!("clamp({lo:?}, {hi:?}) {dt}"),
            );
        }
    }
    // Wrapping integer negation and squares.
    let x = tensor(&[0.0, 1.0, 200.0, 255.0], &[4], DType::U8, dev);
    assert_eq!(vals(&x.neg().unwrap()), vec![0.0, 255.0, 56.0, 1.0]);
    assert_eq!(vals(&x.square().unwrap()), vec![0.0, 1.0, 64.0, 1.0]);
    let m = Tensor::from_slice(&[i32::MIN, -7, 46341], &[3], dev).unwrap();
    assert_eq!(vals(&m.abs().unwrap()), vec![i32::MIN as f64, 7.0, 46341.0]);
    assert_eq!(
        vals(&m.square().unwrap())[2],
        wrap(46341i128 * 46341, DType::I32)
    );
    // Special float values.
    let s = tensor(
        &[f64::NAN, f64::INFINITY, -0.0, 2.5, -2.5, 0.5],
        &[6],
        DType::F32,
        dev,
    );
    let r = vals(&s.relu().unwrap());
    assert!(r[0].is_nan() && r[1] == f64::INFINITY && r[2] == 0.0);
    assert_eq!(
        vals(&s.round().unwrap())[3..],
        [2.0, -2.0, 0.0],
        "round half to even"
    );
    assert!(vals(&s.sign().unwrap())[0].is_nan());
    // bool: floor/round are the identity; other ops are refused.
    let b = Tensor::from_slice(&[true, false], &[2], dev).unwrap();
    assert_eq!(vals(&b.floor().unwrap()), vec![1.0, 0.0]);
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

fn binary_ops(dev: Device) {
    let all = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I64,
        DType::I32,
        DType::U8,
        DType::Bool,
    ];
    for dt in all {
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
            let cmp = matches!(name, "eq" | "ne" | "lt" | "le" | "gt" | "ge");
            let out_dt = if cmp {
                DType::Bool
            } else if name == "div" && !dt.is_float() {
                DType::F32
            } else {
                dt
            };
            assert_eq!(y.dtype(), out_dt, "{name} {dt}");
            let (ah, bh) = (vals(&a), vals(&b));
            let want: Vec<f64> = (0..60)
                .map(|p| {
                    let (i, j, k) = (p / 20, p / 4 % 5, p % 4);
                    cast_ref(binary_ref(name, ah[i * 4 + k], bh[j * 4 + k], dt), out_dt)
                })
                .collect();
            close(&vals(&y), &want, tol(out_dt), &format!("{name} {dt}"));
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
    assert_eq!((y.dtype(), vals(&y)), (DType::F16, vec![1.5, 2.25]));
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
            let cmp = matches!(name, "eq" | "ne" | "lt" | "le" | "gt" | "ge");
            let out_dt = if cmp {
                DType::Bool
            } else if name == "div" && !dt.is_float() {
                DType::F32
            } else {
                dt
            };
            assert_eq!(y.dtype(), out_dt, "{name}_scalar {dt}");
            let want: Vec<f64> = vals(&x)
                .iter()
                .map(|&e| cast_ref(binary_ref(name, e, s, dt), out_dt))
                .collect();
            close(
                &vals(&y),
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
    assert_eq!((y.dtype(), vals(&y)), (DType::F32, vec![0.5, 1.0]));
    let b = Tensor::from_slice(&[true, false], &[2], dev).unwrap();
    assert_eq!(vals(&b.eq_scalar(1.0).unwrap()), vec![1.0, 0.0]);
}

fn in_place_ops(dev: Device) {
    for dt in FLOATS {
        let v = sample(24, dt, 8);
        let mut x = tensor(&v, &[4, 6], dt, dev);
        let xv = vals(&x);
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
        close(&vals(&x), &want, tol(dt), &format!("add_ {dt}"));
        assert!(x.version() > ver, "in-place writes bump the version");
        x.mul_scalar_(2.0).unwrap();
        x.exp_().unwrap();
        let want: Vec<f64> = want
            .iter()
            .map(|&e| cast_ref(cast_ref(e * 2.0, dt).exp(), dt))
            .collect();
        close(
            &vals(&x),
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
    assert_eq!(vals(&x), vec![2.0, 5.0, 5.0, 8.0]);
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
        let (ah, bh) = (vals(&a), vals(&tensor(&bv, &[3], db, dev)));
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
        assert_eq!(vals(&y), want, "where {da} {db}");
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
        let xv = vals(&x);
        x.masked_fill_(&cond, 7.0).unwrap();
        let want: Vec<f64> = (0..12)
            .map(|p| if cond_v[p / 3] != 0.0 { 7.0 } else { xv[p] })
            .collect();
        assert_eq!(vals(&x), want, "masked_fill_ {dt}");
    }
}

fn allocator_statistics_are_exact(dev: Device) {
    // Settle anything cached by earlier tests, then measure deltas.
    memory::empty_cache(dev);
    let base = memory::memory_allocated(dev);
    let base_stats = memory::memory_stats(dev);
    let a = Tensor::zeros(&[1000], DType::F32, dev).unwrap(); // 4000 B -> 4096
    let b = Tensor::zeros(&[3], DType::U8, dev).unwrap(); // 3 B -> 512
    assert_eq!(memory::memory_allocated(dev), base + 4096 + 512);
    let s = memory::memory_stats(dev);
    assert_eq!(
        s.allocation.all.current,
        base_stats.allocation.all.current + 2
    );
    assert_eq!(
        s.requested_bytes.all.current,
        base_stats.requested_bytes.all.current + 4003
    );
    assert!(memory::memory_reserved(dev) >= memory::memory_allocated(dev));
    // A view allocates nothing; a copy allocates its rounded size.
    let v = a.view(&[10, 100]).unwrap().t().unwrap();
    assert_eq!(memory::memory_allocated(dev), base + 4608);
    let c = v.contiguous().unwrap();
    assert_eq!(memory::memory_allocated(dev), base + 4608 + 4096);
    drop((v, c));
    // Large pool: 3 MiB + 1 byte rounds to 3 MiB + 512 in a 20 MiB segment.
    let big = Tensor::zeros(&[(3 << 20) + 1], DType::U8, dev).unwrap();
    assert_eq!(memory::memory_allocated(dev), base + 4608 + (3 << 20) + 512);
    let s = memory::memory_stats(dev);
    assert!(s.allocated_bytes.large.current >= ((3 << 20) + 512) as i64);
    memory::reset_peak_memory_stats(dev);
    drop(big);
    assert_eq!(memory::memory_allocated(dev), base + 4608);
    assert_eq!(
        memory::max_memory_allocated(dev),
        base + 4608 + (3 << 20) + 512,
        "the peak survives the drop"
    );
    drop((a, b));
    assert_eq!(memory::memory_allocated(dev), base, "every byte is back");
    // Cached memory goes back to the system on empty_cache.
    let reserved = memory::memory_reserved(dev);
    assert!(reserved > 0);
    memory::empty_cache(dev);
    assert!(memory::memory_reserved(dev) <= reserved);
    assert!(memory::memory_summary(dev).contains("Allocated memory"));
    // A limit below what a request needs is an OutOfMemory error with the figures.
    memory::set_memory_limit(
        dev,
        memory::MemoryLimit::Bytes(memory::memory_reserved(dev) + (4 << 20)),
    )
    .unwrap();
    let e = Tensor::zeros(&[64 << 20], DType::U8, dev).unwrap_err();
    memory::set_memory_limit(dev, memory::MemoryLimit::Unlimited).unwrap();
    assert!(
        matches!(e, Error::OutOfMemory { device, requested, limit: Some(_), .. } if device == dev && requested == 64 << 20),
        "{e:?}"
    );
    assert!(e.to_string().contains("out of memory"), "{e}");
}

// ------------------------------------------------------- CUDA only ---

#[test]
fn without_a_gpu_cuda_is_an_error_not_a_panic() {
    let _g = lock();
    let n = cuda::device_count();
    if n > 0 {
        eprintln!("skipped: this machine has {n} CUDA device(s)");
        return;
    }
    assert!(!cuda::is_available());
    assert_eq!(Device::cuda_if_available(), Device::Cpu);
    let e = Tensor::zeros(&[2], DType::F32, Device::Cuda(0)).unwrap_err();
    assert!(
        matches!(
            e,
            Error::DeviceUnavailable {
                device: Device::Cuda(0),
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("cuda:0"), "{e}");
    let cpu = Tensor::ones(&[2], DType::F32, Device::Cpu).unwrap();
    assert!(matches!(
        cpu.to_device(Device::Cuda(3)).unwrap_err(),
        Error::DeviceUnavailable { .. }
    ));
    assert_eq!(memory::memory_allocated(Device::Cuda(0)), 0);
    assert!(cuda::Stream::new(Device::Cuda(0)).is_err());
    assert!(cuda::device_name(Device::Cuda(0)).is_err());
}

fn cuda_or_skip(test: &str) -> Option<Device> {
    let d = gpu();
    if d.is_none() {
        eprintln!("skipped {test}: no CUDA device");
    }
    d
}

#[test]
fn streams_events_and_wait_stream() {
    let _g = lock();
    let Some(dev) = cuda_or_skip("streams_events_and_wait_stream") else {
        return;
    };
    let main = cuda::current_stream(dev).unwrap();
    assert_eq!(main.id(), 0, "the default stream");
    let side = cuda::Stream::new(dev).unwrap();
    assert_ne!(side.id(), 0);
    let x = Tensor::full(&[1 << 20], 2.0, DType::F32, dev).unwrap();
    side.wait_stream(&main).unwrap();
    let (start, end) = (
        cuda::Event::new(dev, true).unwrap(),
        cuda::Event::new(dev, true).unwrap(),
    );
    let y = cuda::with_stream(&side, || {
        assert_eq!(cuda::current_stream(dev).unwrap(), side);
        start.record(&side).unwrap();
        let y = x.mul_scalar(3.0).unwrap();
        end.record(&side).unwrap();
        y
    });
    assert_eq!(cuda::current_stream(dev).unwrap(), main, "restored");
    main.wait_stream(&side).unwrap();
    assert!(vals(&y).iter().all(|&v| v == 6.0));
    end.synchronize().unwrap();
    assert!(end.query().unwrap());
    assert!(start.elapsed_ms(&end).unwrap() >= 0.0);
    {
        let _guard = cuda::StreamGuard::new(&side);
        assert_eq!(cuda::current_stream(dev).unwrap(), side);
    }
    assert_eq!(cuda::current_stream(dev).unwrap(), main);
    side.synchronize().unwrap();
    assert!(side.query().unwrap());
}

#[test]
fn blocks_are_pooled_per_stream_and_record_stream_defers_reuse() {
    let _g = lock();
    let Some(dev) = cuda_or_skip("blocks_are_pooled_per_stream_and_record_stream_defers_reuse")
    else {
        return;
    };
    // A fresh stream's pool holds one segment: a freed block is reused.
    let s2 = cuda::Stream::new(dev).unwrap();
    let a = cuda::with_stream(&s2, || Tensor::zeros(&[1000], DType::F32, dev).unwrap());
    let addr = a.data_ptr();
    drop(a);
    let b = cuda::with_stream(&s2, || Tensor::zeros(&[1000], DType::F32, dev).unwrap());
    assert_eq!(b.data_ptr(), addr, "same stream: the freed block is reused");
    drop(b);
    // Another stream never gets it.
    let side = cuda::Stream::new(dev).unwrap();
    let c = cuda::with_stream(&side, || Tensor::zeros(&[1000], DType::F32, dev).unwrap());
    assert_ne!(c.data_ptr(), addr, "another stream has its own pool");
    drop(c);
    // record_stream: the block leaves `allocated` at the drop but stays
    // active (pending) until an allocation finds the event completed.
    let pending = || {
        let s = memory::memory_stats(dev);
        s.active_bytes.all.current - s.allocated_bytes.all.current
    };
    let base = memory::memory_allocated(dev);
    let d0 = pending();
    let x = Tensor::zeros(&[1000], DType::F32, dev).unwrap();
    cuda::record_stream(&x, &side).unwrap();
    drop(x);
    assert_eq!(
        memory::memory_allocated(dev),
        base,
        "not allocated after the drop"
    );
    assert_eq!(
        pending(),
        d0 + 4096,
        "still active: waiting for the other stream"
    );
    side.synchronize().unwrap();
    let y = Tensor::zeros(&[1000], DType::F32, dev).unwrap();
    assert_eq!(pending(), d0, "released once the event completed");
    drop(y);
    let e = cuda::record_stream(
        &Tensor::zeros(&[1], DType::F32, Device::Cpu).unwrap(),
        &side,
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            Error::DeviceMismatch {
                op: "record_stream",
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn large_copies_are_staged_through_pinned_memory() {
    let _g = lock();
    let Some(dev) = cuda_or_skip("large_copies_are_staged_through_pinned_memory") else {
        return;
    };
    // 40 MB: three 16 MiB staging chunks each way.
    let n = 10_000_000;
    let v: Vec<f32> = (0..n).map(|i| (i % 65_536) as f32).collect();
    let t = Tensor::from_slice(&v, &[n], dev).unwrap();
    let s = cuda::pinned_memory_stats();
    assert!(s.reserved_bytes >= 16 << 20, "{s:?}");
    assert_eq!(
        s.allocated_bytes, 0,
        "staging buffers are back in the cache"
    );
    assert_eq!(t.to_vec::<f32>().unwrap(), v);
    let calls = cuda::pinned_memory_stats().num_host_alloc;
    let _t2 = Tensor::from_slice(&v, &[n], dev).unwrap();
    assert_eq!(
        cuda::pinned_memory_stats().num_host_alloc,
        calls,
        "cached pinned buffers are reused"
    );
    cuda::empty_pinned_cache();
    assert_eq!(cuda::pinned_memory_stats().reserved_bytes, 0);
}

#[test]
fn device_information() {
    let _g = lock();
    let Some(dev) = cuda_or_skip("device_information") else {
        return;
    };
    assert!(!cuda::device_name(dev).unwrap().is_empty());
    let (major, _) = cuda::compute_capability(dev).unwrap();
    assert!(major >= 7);
    cuda::synchronize(dev).unwrap();
    let libs = cuda::libraries();
    assert!(libs.driver && libs.nvrtc && libs.devices >= 1);
    let e = Tensor::zeros(&[1], DType::F32, Device::Cuda(libs.devices)).unwrap_err();
    assert!(matches!(e, Error::DeviceUnavailable { .. }), "{e:?}");
}
