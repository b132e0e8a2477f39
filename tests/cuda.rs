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
    reductions,
    arg_reductions,
    softmax_family,
    matmul_ranks,
    index_ops,
    random_fills,
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
            // As in PyTorch, an integer tensor clamped to a fractional bound
            // computes (and returns) f32: the bound is not rounded.
            let promoted = !dt.is_float() && [lo, hi].iter().flatten().any(|b| b.fract() != 0.0);
            if promoted {
                assert_eq!(y.dtype(), DType::F32, "clamp({lo:?}, {hi:?}) {dt} promotes");
            }
            let bound = |b: f64| if promoted { b } else { cast_ref(b, dt) };
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

// ------------------------------------------- reductions and softmax ---

/// The layouts a reduction, softmax or index test runs on, all of shape
/// `[4, 5, 6]` over `v` (120 values, or 24 for "expanded"): contiguous,
/// permuted (transposed), sliced with a step, and expanded (a stride 0).
fn layout_456(v: &[f64], dt: DType, dev: Device, which: usize) -> (&'static str, Tensor) {
    layouts_456(v, dt, dev).swap_remove(which)
}

fn layouts_456(v: &[f64], dt: DType, dev: Device) -> Vec<(&'static str, Tensor)> {
    let base = tensor(&v[..120], &[4, 5, 6], dt, dev);
    let perm = tensor(&v[..120], &[6, 4, 5], dt, dev)
        .permute(&[1, 2, 0])
        .unwrap();
    let wide: Vec<f64> = (0..240).map(|i| v[i % v.len()]).collect();
    let stepped = tensor(&wide, &[4, 10, 6], dt, dev)
        .slice(1, 1, 10, 2)
        .unwrap();
    let expanded = tensor(&v[..24], &[4, 1, 6], dt, dev)
        .expand(&[4, 5, 6])
        .unwrap();
    vec![
        ("contiguous", base),
        ("permuted", perm),
        ("stepped", stepped),
        ("expanded", expanded),
    ]
}

/// `f` over the elements of each output of a reduction of the row-major
/// values `v` of `shape` over `dims` (the elements in row-major order of
/// the reduced dimensions).
fn reduce_ref(v: &[f64], shape: &[usize], dims: &[usize], f: impl Fn(&[f64]) -> f64) -> Vec<f64> {
    let kept: Vec<usize> = (0..shape.len()).filter(|d| !dims.contains(d)).collect();
    let n_out: usize = kept.iter().map(|&d| shape[d]).product();
    let mut groups = vec![Vec::new(); n_out];
    for (i, &x) in v.iter().enumerate() {
        let mut rem = i;
        let mut idx = vec![0; shape.len()];
        for d in (0..shape.len()).rev() {
            idx[d] = rem % shape[d];
            rem /= shape[d];
        }
        let o = kept.iter().fold(0, |a, &d| a * shape[d] + idx[d]);
        groups[o].push(x);
    }
    groups.iter().map(|g| f(g)).collect()
}

fn nan_max(g: &[f64], max: bool) -> f64 {
    if g.iter().any(|x| x.is_nan()) {
        return f64::NAN;
    }
    let it = g.iter().cloned();
    if max {
        it.fold(f64::NEG_INFINITY, f64::max)
    } else {
        it.fold(f64::INFINITY, f64::min)
    }
}

/// Index of the first NaN, else of the first extreme value.
fn arg_ref(g: &[f64], max: bool) -> f64 {
    if let Some(i) = g.iter().position(|x| x.is_nan()) {
        return i as f64;
    }
    let m = nan_max(g, max);
    g.iter().position(|&x| x == m).unwrap() as f64
}

fn var_ref(g: &[f64], correction: usize) -> f64 {
    let n = g.len() as f64;
    let mean = g.iter().sum::<f64>() / n;
    let m2: f64 = g.iter().map(|x| (x - mean) * (x - mean)).sum();
    m2 / (n - correction as f64).max(0.0)
}

fn lse_ref(g: &[f64]) -> f64 {
    let m = g.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    if m == f64::NEG_INFINITY {
        return m;
    }
    m + g.iter().map(|x| (x - m).exp()).sum::<f64>().ln()
}

fn reductions(dev: Device) {
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
        let v = sample(240, dt, 21);
        for li in 0..4 {
            let (lname, x) = layout_456(&v, dt, dev, li);
            let xv = vals(&x);
            let shape = x.shape().to_vec();
            for dims in [vec![], vec![1], vec![0, 2], vec![2]] {
                let idims: Vec<isize> = dims.iter().map(|&d| d as isize).collect();
                let full: Vec<usize> = if dims.is_empty() {
                    vec![0, 1, 2]
                } else {
                    dims.clone()
                };
                for keepdim in [false, true] {
                    let what =
                        |op: &str| format!("{op} {dt} {lname} dims {dims:?} keepdim {keepdim}");
                    let check = |op: &str,
                                 f: &dyn Fn(&Tensor) -> tensorscope::Result<Tensor>,
                                 want: Vec<f64>,
                                 want_dt: DType,
                                 tol: f64| {
                        let got = f(&x).unwrap();
                        let mut want_shape: Vec<usize> = Vec::new();
                        for (d, &s) in shape.iter().enumerate() {
                            if !full.contains(&d) {
                                want_shape.push(s);
                            } else if keepdim {
                                want_shape.push(1);
                            }
                        }
                        assert_eq!(got.shape(), want_shape.as_slice(), "{}", what(op));
                        assert_eq!(got.dtype(), want_dt, "{}", what(op));
                        assert_eq!(got.device(), dev);
                        close(&vals(&got), &want, tol, &what(op));
                        also_cpu(
                            dev,
                            |d| f(&layout_456(&v, dt, d, li).1).unwrap(),
                            &got,
                            tol,
                            &what(op),
                        );
                    };
                    let int_out = if dt.is_float() { dt } else { DType::I64 };
                    let sum: Vec<f64> = reduce_ref(&xv, &shape, &full, |g| g.iter().sum())
                        .into_iter()
                        .map(|s| if dt.is_float() { cast_ref(s, dt) } else { s })
                        .collect();
                    check("sum", &|t| t.sum(&idims, keepdim), sum, int_out, tol(dt));
                    for max in [true, false] {
                        let want = reduce_ref(&xv, &shape, &full, |g| nan_max(g, max));
                        let f = |t: &Tensor| {
                            if max {
                                t.max(&idims, keepdim)
                            } else {
                                t.min(&idims, keepdim)
                            }
                        };
                        check(if max { "max" } else { "min" }, &f, want, dt, 0.0);
                    }
                    if full == [1] {
                        // Products of 5 elements: no overflow anywhere.
                        let p: Vec<f64> = reduce_ref(&xv, &shape, &full, |g| g.iter().product())
                            .into_iter()
                            .map(|s| if dt.is_float() { cast_ref(s, dt) } else { s })
                            .collect();
                        check("prod", &|t| t.prod(&idims, keepdim), p, int_out, tol(dt));
                    }
                    if !dt.is_float() {
                        continue;
                    }
                    let r = |f: &dyn Fn(&[f64]) -> f64| -> Vec<f64> {
                        reduce_ref(&xv, &shape, &full, f)
                            .into_iter()
                            .map(|s| cast_ref(s, dt))
                            .collect()
                    };
                    let n = full.iter().map(|&d| shape[d]).product::<usize>() as f64;
                    check(
                        "mean",
                        &|t| t.mean(&idims, keepdim),
                        r(&|g| g.iter().sum::<f64>() / n),
                        dt,
                        tol(dt),
                    );
                    for c in [0, 1] {
                        check(
                            "var",
                            &|t| t.var(&idims, c, keepdim),
                            r(&|g| var_ref(g, c)),
                            dt,
                            4.0 * tol(dt),
                        );
                        check(
                            "std",
                            &|t| t.std(&idims, c, keepdim),
                            r(&|g| var_ref(g, c).sqrt()),
                            dt,
                            4.0 * tol(dt),
                        );
                    }
                    check(
                        "logsumexp",
                        &|t| t.logsumexp(&idims, keepdim),
                        r(&lse_ref),
                        dt,
                        2.0 * tol(dt),
                    );
                }
            }
        }
    }
    // Special values: NaN propagates through max/min/sum, logsumexp of
    // -inf rows is -inf and of +inf is +inf; empty reductions.
    let inf = f64::INFINITY;
    let sv = [1.0, f64::NAN, 3.0, -inf, -inf, -inf, 2.0, inf, 5.0];
    for dt in FLOATS {
        let x = tensor(&sv, &[3, 3], dt, dev);
        let got = vals(&x.max(&[1], false).unwrap());
        assert!(
            got[0].is_nan() && got[1] == -inf && got[2] == inf,
            "max {dt}: {got:?}"
        );
        let got = vals(&x.logsumexp(&[1], false).unwrap());
        assert!(
            got[0].is_nan() && got[1] == -inf && got[2] == inf,
            "lse {dt}: {got:?}"
        );
        let e = tensor(&[], &[0, 3], dt, dev);
        assert_eq!(vals(&e.sum(&[0], false).unwrap()), vec![0.0; 3]);
        assert_eq!(vals(&e.prod(&[0], false).unwrap()), vec![1.0; 3]);
        assert!(vals(&e.mean(&[0], false).unwrap())
            .iter()
            .all(|x| x.is_nan()));
        assert_eq!(vals(&e.logsumexp(&[0], false).unwrap()), vec![-inf; 3]);
        let err = e.max(&[0], false).unwrap_err();
        assert!(
            matches!(err, Error::InvalidArgument { op: "max", .. }),
            "{err:?}"
        );
        let err = x.var(&[5], 1, false).unwrap_err();
        assert!(
            matches!(err, Error::DimOutOfRange { op: "var", .. }),
            "{err:?}"
        );
    }
    // A long reduction (one block per output) and a large one (many outputs).
    let n = 100_000;
    let big: Vec<f64> = (0..n)
        .map(|i| ((i * 7919) % 1000) as f64 / 8.0 - 60.0)
        .collect();
    let x = tensor(&big, &[n], DType::F32, dev);
    let s = x.sum_all().unwrap().item::<f64>().unwrap();
    let want: f64 = big.iter().sum();
    assert!(
        (s - want).abs() <= 1e-5 * want.abs().max(1.0),
        "sum of {n}: {s} vs {want}"
    );
    let xv = x.var(&[0], 1, false).unwrap().item::<f64>().unwrap();
    let wv = var_ref(&big, 1);
    assert!((xv - wv).abs() <= 1e-4 * wv, "var of {n}: {xv} vs {wv}");
    let m = tensor(&big, &[1000, 100], DType::F64, dev);
    let got = vals(&m.sum(&[0], false).unwrap());
    let want: Vec<f64> = (0..100)
        .map(|j| (0..1000).map(|i| big[i * 100 + j]).sum())
        .collect();
    close(&got, &want, 1e-12, "sum over dim 0 of [1000, 100]");
    // Integer wrapping: a sum of i64 that overflows wraps as on the CPU.
    let w = Tensor::from_slice(&[i64::MAX, 1, 1], &[3], dev).unwrap();
    assert_eq!(w.sum_all().unwrap().item::<i64>().unwrap(), i64::MIN + 1);
    // Integers cannot take a mean.
    let e = tensor(&[1.0], &[1], DType::I32, dev)
        .mean(&[], false)
        .unwrap_err();
    assert!(
        matches!(e, Error::DTypeMismatch { op: "mean", .. }),
        "{e:?}"
    );
}

fn arg_reductions(dev: Device) {
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
        // Few distinct values: many ties, the first must win.
        let mut v = sample(240, dt, 22);
        if dt.is_float() {
            v[7] = f64::NAN;
            v[50] = f64::NAN;
            v[53] = f64::NAN;
        }
        for li in 0..4 {
            let (lname, x) = layout_456(&v, dt, dev, li);
            let xv = vals(&x);
            let shape = x.shape().to_vec();
            for dim in 0..3 {
                for keepdim in [false, true] {
                    for max in [true, false] {
                        let what = format!(
                            "arg{} {dt} {lname} dim {dim} keepdim {keepdim}",
                            if max { "max" } else { "min" }
                        );
                        let want_i = reduce_ref(&xv, &shape, &[dim], |g| arg_ref(g, max));
                        let want_v = reduce_ref(&xv, &shape, &[dim], |g| nan_max(g, max));
                        let f = |t: &Tensor| {
                            if max {
                                t.argmax(dim as isize, keepdim).unwrap()
                            } else {
                                t.argmin(dim as isize, keepdim).unwrap()
                            }
                        };
                        let i = f(&x);
                        assert_eq!(i.dtype(), DType::I64);
                        assert_eq!(i.rank(), if keepdim { 3 } else { 2 });
                        assert_eq!(vals(&i), want_i, "{what}");
                        also_cpu(dev, |d| f(&layout_456(&v, dt, d, li).1), &i, 0.0, &what);
                        let g = |t: &Tensor| {
                            if max {
                                t.max_dim(dim as isize, keepdim).unwrap()
                            } else {
                                t.min_dim(dim as isize, keepdim).unwrap()
                            }
                        };
                        let (mv, mi) = g(&x);
                        assert_eq!(mv.dtype(), dt);
                        assert_eq!(mv.shape(), mi.shape());
                        assert_eq!(vals(&mi), want_i, "{what} (max_dim indices)");
                        close(&vals(&mv), &want_v, 0.0, &format!("{what} (values)"));
                        also_cpu(dev, |d| g(&layout_456(&v, dt, d, li).1).0, &mv, 0.0, &what);
                    }
                }
            }
        }
    }
    let e = tensor(&[], &[2, 0], DType::F32, dev)
        .argmax(1, false)
        .unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { op: "argmax", .. }),
        "{e:?}"
    );
    // A long row (a whole block per output).
    let n = 5000;
    let v: Vec<f64> = (0..n).map(|i| ((i * 37) % 1001) as f64).collect();
    let x = tensor(&v, &[1, n], DType::F32, dev);
    let want = v.iter().position(|&e| e == 1000.0).unwrap() as i64;
    assert_eq!(
        x.argmax(1, false).unwrap().to_vec::<i64>().unwrap(),
        vec![want]
    );
}

fn softmax_family(dev: Device) {
    for dt in FLOATS {
        let v = sample(240, dt, 23);
        for li in 0..4 {
            let (lname, x) = layout_456(&v, dt, dev, li);
            let xv = vals(&x);
            let shape = x.shape().to_vec();
            for dim in 0..3 {
                for log in [false, true] {
                    let what = format!(
                        "{} {dt} {lname} dim {dim}",
                        if log { "log_softmax" } else { "softmax" }
                    );
                    let f = |t: &Tensor| {
                        if log {
                            t.log_softmax(dim as isize).unwrap()
                        } else {
                            t.softmax(dim as isize).unwrap()
                        }
                    };
                    let y = f(&x);
                    assert_eq!((y.shape(), y.dtype()), (shape.as_slice(), dt));
                    // The reference, element by element in row-major order.
                    let lse = reduce_ref(&xv, &shape, &[dim], lse_ref);
                    let want: Vec<f64> = (0..xv.len())
                        .map(|i| {
                            let mut rem = i;
                            let mut idx = [0usize; 3];
                            for d in (0..3).rev() {
                                idx[d] = rem % shape[d];
                                rem /= shape[d];
                            }
                            let o = (0..3)
                                .filter(|&d| d != dim)
                                .fold(0, |a, d| a * shape[d] + idx[d]);
                            let l = xv[i] - lse[o];
                            cast_ref(if log { l } else { l.exp() }, dt)
                        })
                        .collect();
                    close(&vals(&y), &want, 4.0 * tol(dt), &what);
                    also_cpu(
                        dev,
                        |d| f(&layout_456(&v, dt, d, li).1),
                        &y,
                        4.0 * tol(dt),
                        &what,
                    );
                }
            }
        }
        // A long row (block-wide groups), with -inf entries and huge values.
        let n = 3000;
        let mut v: Vec<f64> = (0..n).map(|i| (i % 17) as f64 / 4.0 + 1000.0).collect();
        v[5] = f64::NEG_INFINITY;
        let x = tensor(&v, &[1, n], dt, dev);
        let y = x.softmax(1).unwrap();
        let yv = vals(&y);
        assert_eq!(yv[5], 0.0);
        let s: f64 = yv.iter().sum();
        assert!(
            (s - 1.0).abs() < 100.0 * tol(dt),
            "softmax {dt} of a long row sums to {s}"
        );
        also_cpu(
            dev,
            |d| x.to_device(d).unwrap().softmax(1).unwrap(),
            &y,
            4.0 * tol(dt),
            &format!("long softmax {dt}"),
        );
    }
    let e = tensor(&[1.0], &[1], DType::I64, dev)
        .softmax(0)
        .unwrap_err();
    assert!(
        matches!(e, Error::DTypeMismatch { op: "softmax", .. }),
        "{e:?}"
    );
}

// --------------------------------------------------------------- matmul ---

/// The naive batched product of row-major `a` `[.., m, k]` and `b`
/// `[.., k, n]` (batches already equal), in f64 or wrapped to `dt`.
fn matmul_ref(
    a: &[f64],
    b: &[f64],
    batch: usize,
    m: usize,
    k: usize,
    n: usize,
    dt: DType,
) -> Vec<f64> {
    let mut out = Vec::with_capacity(batch * m * n);
    for p in 0..batch {
        for i in 0..m {
            for j in 0..n {
                if dt.is_float() {
                    let s: f64 = (0..k)
                        .map(|l| a[(p * m + i) * k + l] * b[(p * k + l) * n + j])
                        .sum();
                    out.push(cast_ref(s, dt));
                } else {
                    let s: i128 = (0..k)
                        .map(|l| a[(p * m + i) * k + l] as i128 * b[(p * k + l) * n + j] as i128)
                        .sum();
                    out.push(wrap(s, dt));
                }
            }
        }
    }
    out
}

fn matmul_ranks(dev: Device) {
    let (m, k, n) = (5, 7, 3);
    for dt in NUMERIC {
        // Products of sample values are exact in every float type; the
        // sums are rounded once in the dtype (f16/bf16 accumulate in f32).
        let tl = 2.0 * tol(dt);
        let av = sample(4 * m * k, dt, 24);
        let bv = sample(4 * k * n, dt, 25);
        let run = |what: &str, f: &dyn Fn(Device) -> Tensor, want: Vec<f64>, shape: &[usize]| {
            let got = f(dev);
            assert_eq!(got.shape(), shape, "{what} {dt}");
            assert_eq!(got.dtype(), dt);
            close(&vals(&got), &want, tl, &format!("{what} {dt}"));
            also_cpu(dev, f, &got, tl, &format!("{what} {dt}"));
        };
        // [k] x [k]: a dot product.
        run(
            "dot",
            &|d| {
                tensor(&av[..k], &[k], dt, d)
                    .matmul(&tensor(&bv[..k], &[k], dt, d))
                    .unwrap()
            },
            matmul_ref(&av[..k], &bv[..k], 1, 1, k, 1, dt),
            &[],
        );
        // [m, k] x [k, n], with a transposed A and a stepped B.
        let want = matmul_ref(&av, &bv, 1, m, k, n, dt);
        run(
            "2-D",
            &|d| {
                tensor(&av[..m * k], &[m, k], dt, d)
                    .matmul(&tensor(&bv[..k * n], &[k, n], dt, d))
                    .unwrap()
            },
            want.clone(),
            &[m, n],
        );
        let at: Vec<f64> = (0..m * k).map(|p| av[(p % m) * k + p / m]).collect(); // [k, m]
        let b2: Vec<f64> = bv[..k * n].iter().flat_map(|&x| [x, 9.0]).collect(); // [k, n, 2]
        run(
            "2-D transposed and stepped",
            &|d| {
                let a = tensor(&at, &[k, m], dt, d).t().unwrap();
                let b = tensor(&b2, &[k, n, 2], dt, d).select(2, 0).unwrap();
                a.matmul(&b).unwrap()
            },
            want.clone(),
            &[m, n],
        );
        // [k] x [2, k, n] and [2, m, k] x [k].
        let want_vb: Vec<f64> = (0..2)
            .flat_map(|p| matmul_ref(&av[..k], &bv[p * k * n..], 1, 1, k, n, dt))
            .collect();
        run(
            "vector x batch",
            &|d| {
                tensor(&av[..k], &[k], dt, d)
                    .matmul(&tensor(&bv[..2 * k * n], &[2, k, n], dt, d))
                    .unwrap()
            },
            want_vb,
            &[2, n],
        );
        let want_bv: Vec<f64> = (0..2)
            .flat_map(|p| matmul_ref(&av[p * m * k..], &bv[..k], 1, m, k, 1, dt))
            .collect();
        run(
            "batch x vector",
            &|d| {
                tensor(&av[..2 * m * k], &[2, m, k], dt, d)
                    .matmul(&tensor(&bv[..k], &[k], dt, d))
                    .unwrap()
            },
            want_bv,
            &[2, m],
        );
        // [2, 1, m, k] x [3, k, n] -> [2, 3, m, n]: broadcast batch dims.
        let want_bc: Vec<f64> = (0..2)
            .flat_map(|p| (0..3).map(move |q| (p, q)))
            .flat_map(|(p, q)| matmul_ref(&av[p * m * k..], &bv[q * k * n..], 1, m, k, n, dt))
            .collect();
        run(
            "broadcast batches",
            &|d| {
                let a = tensor(&av[..2 * m * k], &[2, 1, m, k], dt, d);
                let b = tensor(&bv[..3 * k * n], &[3, k, n], dt, d);
                a.matmul(&b).unwrap()
            },
            want_bc,
            &[2, 3, m, n],
        );
        // matmul_out into a transposed output.
        let out_t = Tensor::zeros(&[n, m], dt, dev).unwrap();
        let mut out = out_t.t().unwrap();
        tensor(&av[..m * k], &[m, k], dt, dev)
            .matmul_out(&tensor(&bv[..k * n], &[k, n], dt, dev), &mut out)
            .unwrap();
        close(
            &vals(&out),
            &want,
            tl,
            &format!("matmul_out transposed {dt}"),
        );
        assert_eq!(
            vals(&out_t)[1],
            vals(&out)[n],
            "the output's storage is column-major"
        );
    }
    // Batch dimensions that do not merge into one stride: a permuted [3, 2, m, k].
    let dt = DType::F32;
    let av = sample(6 * m * k, dt, 26);
    let bv = sample(k * n, dt, 27);
    let f = |d: Device| {
        let a = tensor(&av, &[2, 3, m, k], dt, d)
            .permute(&[1, 0, 2, 3])
            .unwrap();
        a.matmul(&tensor(&bv, &[k, n], dt, d)).unwrap()
    };
    let got = f(dev);
    let want: Vec<f64> = (0..3)
        .flat_map(|p| (0..2).map(move |q| (p, q)))
        .flat_map(|(p, q)| matmul_ref(&av[(q * 3 + p) * m * k..], &bv, 1, m, k, n, dt))
        .collect();
    close(&vals(&got), &want, tol(dt), "matmul of a permuted batch");
    also_cpu(dev, f, &got, tol(dt), "matmul of a permuted batch");
    // A larger product.
    let (m, k, n) = (64, 300, 48);
    let av = sample(m * k, dt, 28);
    let bv = sample(k * n, dt, 29);
    let f = |d: Device| {
        tensor(&av, &[m, k], dt, d)
            .matmul(&tensor(&bv, &[k, n], dt, d))
            .unwrap()
    };
    let got = f(dev);
    close(
        &vals(&got),
        &matmul_ref(&av, &bv, 1, m, k, n, dt),
        1e-5,
        "matmul 64x300x48",
    );
    let e = tensor(&[1.0; 6], &[2, 3], dt, dev)
        .matmul(&tensor(&[1.0; 6], &[2, 3], dt, dev))
        .unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { op: "matmul", .. }),
        "{e:?}"
    );
}

// ---------------------------------------------------------------- index ---

fn index_tensor(v: &[i64], shape: &[usize], dt: DType, dev: Device) -> Tensor {
    Tensor::from_slice(v, shape, Device::Cpu)
        .unwrap()
        .to_dtype(dt)
        .unwrap()
        .to_device(dev)
        .unwrap()
}

fn index_ops(dev: Device) {
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
        let v = sample(240, dt, 31);
        for it in [DType::I64, DType::I32] {
            for li in 0..4 {
                let (lname, x) = layout_456(&v, dt, dev, li);
                let xv = vals(&x);
                let at = |i: usize, j: usize, k: usize| xv[(i * 5 + j) * 6 + k];
                let what = |op: &str| format!("{op} {dt} index {it} {lname}");
                // index_select along each dim, with repeats.
                let sel = [3i64, 0, 3, 1];
                for dim in 0..3 {
                    let f = |d: Device| {
                        layout_456(&v, dt, d, li)
                            .1
                            .index_select(dim, &index_tensor(&sel, &[4], it, d))
                            .unwrap()
                    };
                    let y = f(dev);
                    let mut shape = [4usize, 5, 6];
                    shape[dim as usize] = 4;
                    let want: Vec<f64> = (0..shape.iter().product::<usize>())
                        .map(|p| {
                            let (i, j, k) = (
                                p / (shape[1] * shape[2]),
                                p / shape[2] % shape[1],
                                p % shape[2],
                            );
                            match dim {
                                0 => at(sel[i] as usize, j, k),
                                1 => at(i, sel[j] as usize, k),
                                _ => at(i, j, sel[k] as usize),
                            }
                        })
                        .collect();
                    assert_eq!(vals(&y), want, "{} dim {dim}", what("index_select"));
                    also_cpu(dev, f, &y, 0.0, &what("index_select"));
                }
                // gather along dim 1 with a [4, 3, 6] index, read transposed.
                let gi: Vec<i64> = (0..72).map(|p| ((p * 7) % 5) as i64).collect();
                let f = |d: Device| {
                    let i = index_tensor(&gi, &[6, 3, 4], it, d)
                        .permute(&[2, 1, 0])
                        .unwrap();
                    layout_456(&v, dt, d, li).1.gather(1, &i).unwrap()
                };
                let y = f(dev);
                let want: Vec<f64> = (0..72)
                    .map(|p| {
                        let (i, j, k) = (p / 18, p / 6 % 3, p % 6);
                        at(i, gi[(k * 3 + j) * 4 + i] as usize, k)
                    })
                    .collect();
                assert_eq!(vals(&y), want, "{}", what("gather"));
                also_cpu(dev, f, &y, 0.0, &what("gather"));
                // Fancy indexing with a 2-D index and negative entries.
                let fi = [-1i64, 0, 2, -4];
                let f = |d: Device| {
                    layout_456(&v, dt, d, li)
                        .1
                        .index(&index_tensor(&fi, &[2, 2], it, d))
                        .unwrap()
                };
                let y = f(dev);
                assert_eq!(y.shape(), &[2, 2, 5, 6]);
                let want: Vec<f64> = (0..120)
                    .map(|p| at(fi[p / 30].rem_euclid(4) as usize, p / 6 % 5, p % 6))
                    .collect();
                assert_eq!(vals(&y), want, "{}", what("index"));
                also_cpu(dev, f, &y, 0.0, &what("index"));
            }
            // In place: scatter_ (distinct targets), scatter_value_,
            // scatter_add_ (repeats), index_copy_, index_add_, index_fill_,
            // each into a stepped view of a [4, 10, 6] tensor.
            let base: Vec<f64> = sample(240, dt, 32);
            let wrapped = |x: f64| {
                if dt.is_float() {
                    cast_ref(x, dt)
                } else {
                    cast_ref(wrap(x as i128, dt), dt)
                }
            };
            let dst = |d: Device| tensor(&base, &[4, 10, 6], dt, d);
            let view_at = |b: &[f64], i: usize, j: usize, k: usize| b[(i * 10 + 2 * j + 1) * 6 + k];
            let src_v = sample(120, dt, 33);
            let src = |d: Device| {
                tensor(&src_v, &[5, 4, 6], dt, d)
                    .permute(&[1, 0, 2])
                    .unwrap()
            }; // [4, 5, 6]
            let sv = |i: usize, j: usize, k: usize| {
                vals(&tensor(&src_v, &[5, 4, 6], dt, Device::Cpu))[(j * 4 + i) * 6 + k]
            };
            let srch: Vec<f64> = (0..120).map(|p| sv(p / 30, p / 6 % 5, p % 6)).collect();
            let bh = vals(&tensor(&base, &[4, 10, 6], dt, Device::Cpu));
            type Body<'a> = &'a dyn Fn(&mut Tensor, Device);
            let run = |op: &str, body: Body, want: &dyn Fn(usize, usize, usize) -> f64| {
                let go = |d: Device| {
                    let full = dst(d);
                    let mut view = full.slice(1, 1, 10, 2).unwrap();
                    body(&mut view, d);
                    full
                };
                let got = go(dev);
                let want: Vec<f64> = (0..240)
                    .map(|p| {
                        let (i, r, k) = (p / 60, p / 6 % 10, p % 6);
                        if r % 2 == 1 {
                            want(i, r / 2, k)
                        } else {
                            bh[p]
                        }
                    })
                    .collect();
                close(
                    &vals(&got),
                    &want,
                    tol(dt),
                    &format!("{op} {dt} index {it}"),
                );
                also_cpu(dev, go, &got, tol(dt), &format!("{op} {dt} index {it}"));
            };
            // scatter_ along dim 1: a permutation per (i, k) column.
            let perm = |i: usize, k: usize, j: usize| (j + i + k) % 5;
            let si: Vec<i64> = (0..120)
                .map(|p| perm(p / 30, p % 6, p / 6 % 5) as i64)
                .collect();
            run(
                "scatter_",
                &|t, d| {
                    t.scatter_(1, &index_tensor(&si, &[4, 5, 6], it, d), &src(d))
                        .unwrap();
                },
                &|i, j, k| {
                    let jj = (0..5).find(|&jj| perm(i, k, jj) == j).unwrap();
                    srch[(i * 5 + jj) * 6 + k]
                },
            );
            // scatter_value_ along dim 2 with a [4, 5, 2] index.
            let vi: Vec<i64> = (0..40).map(|p| [1, 4][p % 2]).collect();
            run(
                "scatter_value_",
                &|t, d| {
                    t.scatter_value_(2, &index_tensor(&vi, &[4, 5, 2], it, d), 3.0)
                        .unwrap();
                },
                &|i, j, k| {
                    if k == 1 || k == 4 {
                        cast_ref(3.0, dt)
                    } else {
                        view_at(&bh, i, j, k)
                    }
                },
            );
            // index_fill_ along dim 0 with a negative index.
            let fill = [-1i64, 1];
            run(
                "index_fill_",
                &|t, d| {
                    t.index_fill_(0, &index_tensor(&fill, &[2], it, d), -2.0)
                        .unwrap();
                },
                &|i, j, k| {
                    if i == 3 || i == 1 {
                        cast_ref(-2.0, dt)
                    } else {
                        view_at(&bh, i, j, k)
                    }
                },
            );
            // index_copy_ along dim 1: rows 4, 0, 2 get rows 0, 1, 2 of a [4, 3, 6] source.
            let ci = [4i64, 0, 2];
            run(
                "index_copy_",
                &|t, d| {
                    let s = src(d).narrow(1, 0, 3).unwrap();
                    t.index_copy_(1, &index_tensor(&ci, &[3], it, d), &s)
                        .unwrap();
                },
                &|i, j, k| match ci.iter().position(|&c| c as usize == j) {
                    Some(r) => srch[(i * 5 + r) * 6 + k],
                    None => view_at(&bh, i, j, k),
                },
            );
            if dt == DType::Bool {
                let mut t = dst(dev);
                let e = t
                    .scatter_add_(
                        1,
                        &index_tensor(&[0], &[1, 1, 1], it, dev),
                        &tensor(&[1.0], &[1, 1, 1], dt, dev),
                    )
                    .unwrap_err();
                assert!(
                    matches!(
                        e,
                        Error::DTypeMismatch {
                            op: "scatter_add_",
                            ..
                        }
                    ),
                    "{e:?}"
                );
                continue;
            }
            // scatter_add_ along dim 1 with repeated targets, index_add_ along dim 2.
            let ai: Vec<i64> = (0..120).map(|p| ((p / 6 % 5) % 2) as i64 * 3).collect();
            run(
                "scatter_add_",
                &|t, d| {
                    t.scatter_add_(1, &index_tensor(&ai, &[4, 5, 6], it, d), &src(d))
                        .unwrap();
                },
                &|i, j, k| {
                    let add: f64 = (0..5)
                        .filter(|&jj| (jj % 2) * 3 == j)
                        .map(|jj| srch[(i * 5 + jj) * 6 + k])
                        .sum();
                    wrapped(view_at(&bh, i, j, k) + add)
                },
            );
            let xi = [5i64, 0, 5];
            run(
                "index_add_",
                &|t, d| {
                    let s = src(d).narrow(2, 0, 3).unwrap();
                    t.index_add_(2, &index_tensor(&xi, &[3], it, d), &s)
                        .unwrap();
                },
                &|i, j, k| {
                    let add: f64 = (0..3)
                        .filter(|&c| xi[c] as usize == k)
                        .map(|c| srch[(i * 5 + j) * 6 + c])
                        .sum();
                    wrapped(view_at(&bh, i, j, k) + add)
                },
            );
        }
        // masked_select with a broadcast mask over a transposed source.
        let v = sample(24, dt, 34);
        let mv = [true, false, true, true, false, false];
        let f = |d: Device| {
            let x = tensor(&v, &[6, 4], dt, d).t().unwrap(); // [4, 6]
            let m = Tensor::from_slice(&mv, &[6], d).unwrap();
            x.masked_select(&m).unwrap()
        };
        let y = f(dev);
        let xh = vals(&tensor(&v, &[6, 4], dt, Device::Cpu));
        let want: Vec<f64> = (0..24)
            .filter(|p| mv[p % 6])
            .map(|p| xh[(p % 6) * 4 + p / 6])
            .collect();
        assert_eq!(vals(&y), want, "masked_select {dt}");
        also_cpu(dev, f, &y, 0.0, &format!("masked_select {dt}"));
        // x[bool mask] over the leading dims.
        let lm = [false, true, true, false];
        let f = |d: Device| {
            tensor(&v, &[4, 6], dt, d)
                .index(&Tensor::from_slice(&lm, &[4], d).unwrap())
                .unwrap()
        };
        let y = f(dev);
        assert_eq!(y.shape(), &[2, 6]);
        assert_eq!(vals(&y), [&xh[6..18]].concat(), "bool index {dt}");
    }
    // A long mask (many chunks) keeps row-major order.
    let n = 100_003;
    let xs: Vec<i64> = (0..n as i64).collect();
    let m: Vec<bool> = (0..n).map(|i| i % 3 == 0 || i % 7 == 1).collect();
    let x = Tensor::from_slice(&xs, &[n], dev).unwrap();
    let sel = x
        .masked_select(&Tensor::from_slice(&m, &[n], dev).unwrap())
        .unwrap();
    let want: Vec<i64> = xs.iter().copied().filter(|&i| m[i as usize]).collect();
    assert_eq!(sel.to_vec::<i64>().unwrap(), want);
    // Bad indices: an error naming the op, the index, the dim and its size,
    // and nothing written.
    let x = tensor(&sample(24, DType::F32, 35), &[4, 6], DType::F32, dev);
    let before = vals(&x);
    let e = x
        .index_select(1, &index_tensor(&[0, 6], &[2], DType::I64, dev))
        .unwrap_err();
    assert_eq!(
        e,
        Error::IndexOutOfRange {
            op: "index_select",
            index: 6,
            dim: 1,
            size: 6
        }
    );
    let e = x
        .index_select(0, &index_tensor(&[-1], &[1], DType::I32, dev))
        .unwrap_err();
    assert_eq!(
        e,
        Error::IndexOutOfRange {
            op: "index_select",
            index: -1,
            dim: 0,
            size: 4
        }
    );
    let e = x
        .index(&index_tensor(&[1, -5], &[2], DType::I64, dev))
        .unwrap_err();
    assert_eq!(
        e,
        Error::IndexOutOfRange {
            op: "index",
            index: -5,
            dim: 0,
            size: 4
        }
    );
    let mut y = x.deep_clone().unwrap();
    let si = index_tensor(&[0, 1, 2, 9, 0, 1], &[1, 6], DType::I64, dev);
    let e = y
        .scatter_(0, &si, &tensor(&[5.0; 6], &[1, 6], DType::F32, dev))
        .unwrap_err();
    assert_eq!(
        e,
        Error::IndexOutOfRange {
            op: "scatter_",
            index: 9,
            dim: 0,
            size: 4
        }
    );
    assert_eq!(vals(&y), before, "a failed scatter_ writes nothing");
    let e = y
        .index_fill_(1, &index_tensor(&[2, -7], &[2], DType::I64, dev), 1.0)
        .unwrap_err();
    assert_eq!(
        e,
        Error::IndexOutOfRange {
            op: "index_fill_",
            index: -7,
            dim: 1,
            size: 6
        }
    );
    let e = y
        .index_add_(
            0,
            &index_tensor(&[4], &[1], DType::I32, dev),
            &tensor(&[1.0; 6], &[1, 6], DType::F32, dev),
        )
        .unwrap_err();
    assert_eq!(
        e,
        Error::IndexOutOfRange {
            op: "index_add_",
            index: 4,
            dim: 0,
            size: 4
        }
    );
    assert_eq!(vals(&y), before, "failed index ops write nothing");
    let e = x
        .index_select(0, &tensor(&[0.0], &[1], DType::F32, dev))
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::DTypeMismatch {
                op: "index_select",
                ..
            }
        ),
        "{e:?}"
    );
    let e = x
        .masked_select(&tensor(&[1.0], &[1], DType::F32, dev))
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::DTypeMismatch {
                op: "masked_select",
                ..
            }
        ),
        "{e:?}"
    );
}

// --------------------------------------------------------------- random ---

fn random_fills(dev: Device) {
    // Every random fill draws on the host from the global (or an explicit)
    // generator, so a seed gives the same values on every device.
    for dt in FLOATS {
        let draw = |d: Device| {
            tensorscope::manual_seed(41);
            let u = Tensor::rand(&[3, 50], dt, d).unwrap();
            let z = Tensor::randn(&[50, 3], dt, d).unwrap();
            let w = Tensor::zeros(&[6, 20], dt, d).unwrap();
            w.slice(1, 0, 20, 2).unwrap().uniform_(-2.0, 2.0).unwrap();
            let mut nrm = Tensor::zeros(&[40], dt, d).unwrap();
            nrm.normal_(1.0, 0.5).unwrap();
            let mut g = tensorscope::Generator::new(5);
            let r = Tensor::rand_with(&[30], dt, d, &mut g).unwrap();
            (u, z, w, nrm, r)
        };
        let (u, z, w, nrm, r) = draw(dev);
        assert!(vals(&u).iter().all(|x| (0.0..1.0).contains(x)), "rand {dt}");
        let wv = vals(&w);
        assert!(
            wv.iter().enumerate().all(|(i, &x)| if i % 2 == 0 {
                (-2.0..=2.0).contains(&x)
            } else {
                x == 0.0
            }),
            "uniform_ of a stepped view {dt}"
        );
        let zv = vals(&z);
        let mean = zv.iter().sum::<f64>() / zv.len() as f64;
        assert!(mean.abs() < 0.5, "randn {dt} mean {mean}");
        if dev.is_cuda() {
            let (cu, cz, cw, cn, cr) = draw(Device::Cpu);
            for (a, b, what) in [
                (&u, &cu, "rand"),
                (&z, &cz, "randn"),
                (&w, &cw, "uniform_"),
                (&nrm, &cn, "normal_"),
                (&r, &cr, "rand_with"),
            ] {
                assert_eq!(
                    vals(a),
                    vals(b),
                    "{what} {dt}: same seed, same values as on the CPU"
                );
            }
        }
    }
    // Dropout (training mode) draws its mask the same way.
    use tensorscope::nn::{Dropout, Module};
    let drop = Dropout::new(0.25).unwrap();
    let f = |d: Device| {
        tensorscope::manual_seed(42);
        drop.forward(&Tensor::ones(&[1000], DType::F32, d).unwrap())
            .unwrap()
    };
    let y = f(dev);
    let yv = vals(&y);
    assert!(yv.iter().all(|&x| x == 0.0 || (x - 4.0 / 3.0).abs() < 1e-6));
    let kept = yv.iter().filter(|&&x| x != 0.0).count();
    assert!((650..=850).contains(&kept), "dropout kept {kept} of 1000");
    also_cpu(dev, f, &y, 0.0, "dropout");
    let e = Tensor::rand(&[2], DType::I32, dev).unwrap_err();
    assert!(
        matches!(e, Error::DTypeMismatch { op: "rand", .. }),
        "{e:?}"
    );
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
