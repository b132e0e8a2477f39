//! Elementwise ops against naive f64 references: every binary op, comparison,
//! scalar form, unary op and `where`, their in-place and `_out` forms, over
//! every dtype where they are defined, with contiguous, transposed, stepped and
//! broadcast inputs; PyTorch's type promotion; in-place dtype and aliasing rules.
//!
//! Every test holds `LOCK`: the `_out` test asserts that the allocator's
//! running totals do not move, and other tests of this binary allocate.

mod common;

use common::*;
use std::sync::{Mutex, MutexGuard};
use tensorscope::{memory, DType, Error, Result, Tensor};

static LOCK: Mutex<()> = Mutex::new(());

fn lock() -> MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

// ---------------------------------------------------------------- binary ops

#[derive(Copy, Clone, Debug, PartialEq)]
enum Bin {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    Max,
    Min,
}
const BINS: [Bin; 7] = [
    Bin::Add,
    Bin::Sub,
    Bin::Mul,
    Bin::Div,
    Bin::Pow,
    Bin::Max,
    Bin::Min,
];

fn bin(op: Bin, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    match op {
        Bin::Add => a.add(b),
        Bin::Sub => a.sub(b),
        Bin::Mul => a.mul(b),
        Bin::Div => a.div(b),
        Bin::Pow => a.pow(b),
        Bin::Max => a.maximum(b),
        Bin::Min => a.minimum(b),
    }
}
fn bin_scalar(op: Bin, a: &Tensor, s: f64) -> Result<Tensor> {
    match op {
        Bin::Add => a.add_scalar(s),
        Bin::Sub => a.sub_scalar(s),
        Bin::Mul => a.mul_scalar(s),
        Bin::Div => a.div_scalar(s),
        Bin::Pow => a.pow_scalar(s),
        Bin::Max => a.maximum_scalar(s),
        Bin::Min => a.minimum_scalar(s),
    }
}
fn bin_(op: Bin, a: &mut Tensor, b: &Tensor) -> Result<()> {
    match op {
        Bin::Add => a.add_(b),
        Bin::Sub => a.sub_(b),
        Bin::Mul => a.mul_(b),
        Bin::Div => a.div_(b),
        Bin::Pow => a.pow_(b),
        Bin::Max => a.maximum_(b),
        Bin::Min => a.minimum_(b),
    }
    .map(|_| ())
}
fn bin_scalar_(op: Bin, a: &mut Tensor, s: f64) -> Result<()> {
    match op {
        Bin::Add => a.add_scalar_(s),
        Bin::Sub => a.sub_scalar_(s),
        Bin::Mul => a.mul_scalar_(s),
        Bin::Div => a.div_scalar_(s),
        Bin::Pow => a.pow_scalar_(s),
        Bin::Max => a.maximum_scalar_(s),
        Bin::Min => a.minimum_scalar_(s),
    }
    .map(|_| ())
}
fn bin_out(op: Bin, a: &Tensor, b: &Tensor, out: &mut Tensor) -> Result<()> {
    match op {
        Bin::Add => a.add_out(b, out),
        Bin::Sub => a.sub_out(b, out),
        Bin::Mul => a.mul_out(b, out),
        Bin::Div => a.div_out(b, out),
        Bin::Pow => a.pow_out(b, out),
        Bin::Max => a.maximum_out(b, out),
        Bin::Min => a.minimum_out(b, out),
    }
}

/// PyTorch's promotion of two tensor dtypes, written out independently:
/// bool < integers < floats; the wider integer wins; f16 with bf16 is f32.
fn promote(a: DType, b: DType) -> DType {
    use DType::*;
    if a == b {
        return a;
    }
    let frank = |d: DType| match d {
        F64 => 3,
        F32 => 2,
        F16 | BF16 => 1,
        _ => 0,
    };
    let irank = |d: DType| match d {
        I64 => 3,
        I32 => 2,
        U8 => 1,
        _ => 0,
    };
    match (a.is_float(), b.is_float()) {
        (true, false) => a,
        (false, true) => b,
        (true, true) => match frank(a).max(frank(b)) {
            3 => F64,
            2 => F32,
            _ => F32, // f16 with bf16
        },
        (false, false) => {
            if irank(a) >= irank(b) {
                a
            } else {
                b
            }
        }
    }
}

/// The result dtype of `op` on two tensors, or None where it is an error.
fn result_dtype(op: Bin, a: DType, b: DType) -> Option<DType> {
    let p = promote(a, b);
    match op {
        Bin::Div if !p.is_float() => Some(DType::F32),
        Bin::Sub | Bin::Pow if p == DType::Bool => None,
        // PyTorch refuses subtraction with a bool operand, even when the
        // result would promote to a number.
        Bin::Sub if a == DType::Bool || b == DType::Bool => None,
        _ => Some(p),
    }
}

/// The result dtype of `op` on a tensor and a scalar, or None for an error.
fn scalar_result_dtype(op: Bin, a: DType, s: f64) -> Option<DType> {
    let integral = s.fract() == 0.0;
    match a {
        d if d.is_float() => Some(d),
        DType::Bool if op == Bin::Sub => None,
        _ if op == Bin::Div => Some(DType::F32),
        _ if !integral => Some(DType::F32),
        _ if op == Bin::Pow && s < 0.0 => None,
        DType::Bool => Some(DType::I64),
        d => Some(d),
    }
}

fn int_pow(x: f64, y: f64) -> f64 {
    let (x, y) = (x as i64, y as i64);
    if y < 0 {
        return match x {
            1 => 1.0,
            -1 => {
                if y % 2 == 0 {
                    1.0
                } else {
                    -1.0
                }
            }
            _ => 0.0,
        };
    }
    let mut r: i64 = 1;
    for _ in 0..y {
        r = r.wrapping_mul(x);
    }
    r as f64
}

/// The naive reference of `op` computing in dtype `dt` (inputs already stored in `dt`).
fn ref_op(op: Bin, dt: DType) -> impl Fn(f64, f64) -> f64 {
    move |x, y| match op {
        Bin::Add => x + y,
        Bin::Sub => x - y,
        Bin::Mul => x * y,
        Bin::Div => x / y,
        Bin::Pow if dt.is_float() => x.powf(y),
        Bin::Pow => int_pow(x, y),
        Bin::Max if x.is_nan() || y.is_nan() => f64::NAN,
        Bin::Min if x.is_nan() || y.is_nan() => f64::NAN,
        Bin::Max => x.max(y),
        Bin::Min => x.min(y),
    }
}

/// Operand data for `op` in dtype `dt` (seeded), chosen so the results are
/// finite and meaningful: positive bases for float pow, small exponents.
fn operands(op: Bin, dt: DType, na: usize, nb: usize, seed: u64) -> (Vec<f64>, Vec<f64>) {
    let (a, b) = match (op, dt.is_float()) {
        (Bin::Pow, true) => (
            data_for(dt, na, seed, 0.5, 3.0),
            data_for(dt, nb, seed + 1, -2.0, 2.5),
        ),
        (Bin::Pow, false) => (
            data_for(dt, na, seed, -3.0, 3.0),
            data_for(dt, nb, seed + 1, 0.0, 4.0),
        ),
        (Bin::Div, true) => (
            data_for(dt, na, seed, -10.0, 10.0),
            data_for(dt, nb, seed + 1, 0.5, 8.0),
        ),
        _ => (
            data_for(dt, na, seed, -20.0, 20.0),
            data_for(dt, nb, seed + 1, -20.0, 20.0),
        ),
    };
    let a = a.iter().map(|&x| store(dt, x)).collect();
    let b = b.iter().map(|&x| store(dt, x)).collect();
    (a, b)
}

/// Exact for the correctly rounded ops; a few ulps for pow.
fn tol(op: Bin, dt: DType) -> f64 {
    if op == Bin::Pow {
        4.0 * eps(dt)
    } else {
        0.0
    }
}

const SHAPES: [(&[usize], &[usize]); 4] = [
    (&[4, 5], &[4, 5]),
    (&[4, 1], &[5]),
    (&[2, 4, 5], &[1, 5]),
    (&[], &[3, 4]),
];
const LAY_PAIRS: [(Lay, Lay); 3] = [
    (Lay::Contig, Lay::Contig),
    (Lay::Transposed, Lay::Stepped),
    (Lay::Stepped, Lay::Transposed),
];

#[test]
fn binary_ops_every_dtype_layout_and_broadcast() {
    let _g = lock();
    let mut seed = 1;
    for op in BINS {
        for dt in ALL {
            for (sa, sb) in SHAPES {
                for (la, lb) in LAY_PAIRS {
                    seed += 2;
                    let na: usize = sa.iter().product();
                    let nb: usize = sb.iter().product();
                    let (va, vb) = operands(op, dt, na, nb, seed);
                    let (a, b) = (make(&va, sa, dt, la), make(&vb, sb, dt, lb));
                    let ctx = format!("{op:?} {dt} {sa:?}/{la:?} with {sb:?}/{lb:?}");
                    let r = bin(op, &a, &b);
                    let Some(rdt) = result_dtype(op, dt, dt) else {
                        let e = r.expect_err(&ctx);
                        assert!(matches!(e, Error::DTypeMismatch { .. }), "{ctx}: {e}");
                        continue;
                    };
                    let r = r.expect(&ctx);
                    let (want, shape) = ref_binary(&va, sa, &vb, sb, ref_op(op, rdt));
                    let want: Vec<f64> = want.iter().map(|&v| store(rdt, v)).collect();
                    assert_eq!(r.shape(), &shape[..], "{ctx}");
                    assert_eq!(r.dtype(), rdt, "{ctx}");
                    assert!(
                        r.is_contiguous(),
                        "{ctx}: results are fresh contiguous tensors"
                    );
                    assert!(!r.shares_storage(&a) && !r.shares_storage(&b), "{ctx}");
                    assert_close(&read(&r), &want, tol(op, rdt), &ctx);
                }
            }
        }
    }
}

#[test]
fn binary_ops_mixed_dtypes_promote_and_compute_in_the_result_dtype() {
    let _g = lock();
    use DType::*;
    let pairs = [
        (I32, F16),
        (U8, I64),
        (F16, BF16),
        (Bool, F32),
        (I32, I64),
        (U8, I32),
        (Bool, U8),
        (F32, F64),
        (BF16, I64),
        (I64, F32),
    ];
    let mut seed = 100;
    for op in BINS {
        for (da, db) in pairs {
            seed += 2;
            let (va, _) = operands(op, da, 20, 1, seed);
            let (_, vb) = operands(op, db, 1, 20, seed);
            let (sa, sb) = (&[4usize, 5][..], &[5usize, 4][..]);
            let a = make(&va, sa, da, Lay::Transposed);
            let b = make(&vb, sb, db, Lay::Stepped).t().unwrap();
            let ctx = format!("{op:?} {da} with {db}");
            let r = bin(op, &a, &b);
            let Some(rdt) = result_dtype(op, da, db) else {
                assert!(r.is_err(), "{ctx}");
                continue;
            };
            let r = r.expect(&ctx);
            assert_eq!(r.dtype(), rdt, "{ctx}");
            // b was laid out as [5, 4] and transposed: logical b[i][j] = vb[j * 4 + i].
            let bt: Vec<f64> = (0..20).map(|k| vb[(k % 5) * 4 + k / 5]).collect();
            let f = ref_op(op, rdt);
            let want: Vec<f64> = va
                .iter()
                .zip(&bt)
                .map(|(&x, &y)| store(rdt, f(store(rdt, x), store(rdt, y))))
                .collect();
            assert_close(&read(&r), &want, tol(op, rdt), &ctx);
        }
    }
}

#[test]
fn type_promotion_rules() {
    let _g = lock();
    use DType::*;
    let t = |dt: DType| Tensor::ones(&[3], dt, CPU).unwrap();
    // int + float tensor -> float
    assert_eq!(t(I64).add(&t(F32)).unwrap().dtype(), F32);
    assert_eq!(t(I32).add(&t(F16)).unwrap().dtype(), F16);
    assert_eq!(t(U8).mul(&t(BF16)).unwrap().dtype(), BF16);
    // int / int -> f32 (true division)
    let q = Tensor::from_slice(&[7i64, -7, 1], &[3], CPU)
        .unwrap()
        .div(&Tensor::from_slice(&[2i64, 2, 0], &[3], CPU).unwrap())
        .unwrap();
    assert_eq!(q.dtype(), F32);
    assert_eq!(q.to_vec::<f32>().unwrap(), vec![3.5, -3.5, f32::INFINITY]);
    assert_eq!(t(U8).div(&t(U8)).unwrap().dtype(), F32);
    assert_eq!(t(Bool).div(&t(Bool)).unwrap().dtype(), F32);
    // int tensor + 2.5 -> f32; + 2 stays int
    let i = Tensor::from_slice(&[1i64, 2], &[2], CPU).unwrap();
    let r = i.add_scalar(2.5).unwrap();
    assert_eq!(r.dtype(), F32);
    assert_eq!(r.to_vec::<f32>().unwrap(), vec![3.5, 4.5]);
    assert_eq!(i.add_scalar(2.0).unwrap().dtype(), I64);
    assert_eq!(i.div_scalar(2.0).unwrap().dtype(), F32);
    // i32 + i64 -> i64
    assert_eq!(t(I32).add(&t(I64)).unwrap().dtype(), I64);
    assert_eq!(t(U8).add(&t(I32)).unwrap().dtype(), I32);
    // f16 + bf16 -> f32
    let h = Tensor::full(&[2], 1.5, F16, CPU).unwrap();
    let b = Tensor::full(&[2], 0.25, BF16, CPU).unwrap();
    let r = h.add(&b).unwrap();
    assert_eq!(r.dtype(), F32);
    assert_eq!(r.to_vec::<f32>().unwrap(), vec![1.75, 1.75]);
    // f32 + f64 -> f64; bool + bool add stays bool (logical or)
    assert_eq!(t(F32).add(&t(F64)).unwrap().dtype(), F64);
    assert_eq!(t(Bool).add(&t(Bool)).unwrap().dtype(), Bool);
    // bool + int scalar -> i64; bool * 0.5 -> f32
    assert_eq!(t(Bool).add_scalar(1.0).unwrap().dtype(), I64);
    assert_eq!(t(Bool).mul_scalar(0.5).unwrap().dtype(), F32);
    // comparisons always give bool, after promoting
    assert_eq!(t(I32).lt(&t(F64)).unwrap().dtype(), Bool);
    // float-only unary ops on integers compute in f32
    assert_eq!(t(I64).exp().unwrap().dtype(), F32);
    assert_eq!(t(U8).sqrt().unwrap().dtype(), F32);
    assert_eq!(t(I32).neg().unwrap().dtype(), I32);
}

// ----------------------------------------------------------- comparisons

#[derive(Copy, Clone, Debug)]
enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}
const CMPS: [Cmp; 6] = [Cmp::Eq, Cmp::Ne, Cmp::Lt, Cmp::Le, Cmp::Gt, Cmp::Ge];

fn cmp(op: Cmp, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    match op {
        Cmp::Eq => a.eq(b),
        Cmp::Ne => a.ne(b),
        Cmp::Lt => a.lt(b),
        Cmp::Le => a.le(b),
        Cmp::Gt => a.gt(b),
        Cmp::Ge => a.ge(b),
    }
}
fn cmp_scalar(op: Cmp, a: &Tensor, s: f64) -> Result<Tensor> {
    match op {
        Cmp::Eq => a.eq_scalar(s),
        Cmp::Ne => a.ne_scalar(s),
        Cmp::Lt => a.lt_scalar(s),
        Cmp::Le => a.le_scalar(s),
        Cmp::Gt => a.gt_scalar(s),
        Cmp::Ge => a.ge_scalar(s),
    }
}
fn cmp_out(op: Cmp, a: &Tensor, b: &Tensor, out: &mut Tensor) -> Result<()> {
    match op {
        Cmp::Eq => a.eq_out(b, out),
        Cmp::Ne => a.ne_out(b, out),
        Cmp::Lt => a.lt_out(b, out),
        Cmp::Le => a.le_out(b, out),
        Cmp::Gt => a.gt_out(b, out),
        Cmp::Ge => a.ge_out(b, out),
    }
}
fn ref_cmp(op: Cmp) -> impl Fn(f64, f64) -> f64 {
    move |x, y| {
        (match op {
            Cmp::Eq => x == y,
            Cmp::Ne => x != y,
            Cmp::Lt => x < y,
            Cmp::Le => x <= y,
            Cmp::Gt => x > y,
            Cmp::Ge => x >= y,
        }) as u8 as f64
    }
}

#[test]
fn comparisons_every_dtype_layout_and_broadcast() {
    let _g = lock();
    let mut seed = 500;
    for op in CMPS {
        for dt in ALL {
            for (sa, sb) in SHAPES {
                for (la, lb) in LAY_PAIRS {
                    seed += 2;
                    let na: usize = sa.iter().product();
                    let nb: usize = sb.iter().product();
                    // Few distinct (integral, so exact) values: equal pairs occur.
                    let small = |n, seed| match dt {
                        DType::Bool | DType::U8 => data_for(dt, n, seed, 0.0, 3.0),
                        _ => ints(n, seed, -3, 3),
                    };
                    let (va, vb) = (small(na, seed), small(nb, seed + 1));
                    let (a, b) = (make(&va, sa, dt, la), make(&vb, sb, dt, lb));
                    let ctx = format!("{op:?} {dt} {sa:?}/{la:?} with {sb:?}/{lb:?}");
                    let r = cmp(op, &a, &b).expect(&ctx);
                    let (want, shape) = ref_binary(&va, sa, &vb, sb, ref_cmp(op));
                    assert_eq!(r.dtype(), DType::Bool, "{ctx}");
                    assert_eq!(r.shape(), &shape[..], "{ctx}");
                    assert_exact(&read(&r), &want, &ctx);
                }
            }
        }
    }
}

#[test]
fn comparisons_mixed_dtypes_and_nan() {
    let _g = lock();
    let a = Tensor::from_slice(&[1i64, 2, 3], &[3], CPU).unwrap();
    let b = Tensor::from_slice(&[1.5f32, 2.0, 2.5], &[3], CPU).unwrap();
    assert_eq!(read(&a.lt(&b).unwrap()), vec![1.0, 0.0, 0.0]);
    assert_eq!(read(&a.eq(&b).unwrap()), vec![0.0, 1.0, 0.0]);
    assert_eq!(read(&a.ge(&b).unwrap()), vec![0.0, 1.0, 1.0]);
    let n = Tensor::from_slice(&[f32::NAN, 1.0], &[2], CPU).unwrap();
    let m = Tensor::from_slice(&[f32::NAN, f32::NAN], &[2], CPU).unwrap();
    for (op, want) in [
        (Cmp::Eq, [0.0, 0.0]),
        (Cmp::Ne, [1.0, 1.0]),
        (Cmp::Lt, [0.0, 0.0]),
        (Cmp::Le, [0.0, 0.0]),
        (Cmp::Gt, [0.0, 0.0]),
        (Cmp::Ge, [0.0, 0.0]),
    ] {
        assert_eq!(read(&cmp(op, &n, &m).unwrap()), want, "{op:?} with NaN");
    }
}

// ----------------------------------------------------------- scalar forms

const SCALARS: [f64; 6] = [2.0, -1.5, 0.5, 3.0, 0.0, -2.0];

#[test]
fn scalar_forms_every_dtype_and_layout() {
    let _g = lock();
    let mut seed = 900;
    let shape = &[3usize, 4][..];
    for op in BINS {
        for dt in ALL {
            for s in SCALARS {
                for lay in LAYS {
                    seed += 1;
                    let (va, _) = operands(op, dt, 12, 1, seed);
                    let a = make(&va, shape, dt, lay);
                    let ctx = format!("{op:?}_scalar {dt}/{lay:?} with {s}");
                    let r = bin_scalar(op, &a, s);
                    let Some(rdt) = scalar_result_dtype(op, dt, s) else {
                        assert!(r.is_err(), "{ctx}");
                        continue;
                    };
                    let r = r.expect(&ctx);
                    assert_eq!(r.dtype(), rdt, "{ctx}");
                    let f = ref_op(op, rdt);
                    let want: Vec<f64> = va
                        .iter()
                        .map(|&x| store(rdt, f(store(rdt, x), store(rdt, s))))
                        .collect();
                    assert_close(&read(&r), &want, tol(op, rdt), &ctx);
                }
            }
        }
    }
}

#[test]
fn scalar_comparisons_every_dtype() {
    let _g = lock();
    let mut seed = 1300;
    for op in CMPS {
        for dt in ALL {
            for s in SCALARS.iter().copied().chain([1.0, 300.0, -1.0]) {
                seed += 1;
                let va: Vec<f64> = data_for(dt, 12, seed, -3.0, 3.0)
                    .iter()
                    .map(|&x| store(dt, x))
                    .collect();
                let a = make(&va, &[3, 4], dt, Lay::Transposed);
                let ctx = format!("{op:?}_scalar {dt} with {s}");
                let r = cmp_scalar(op, &a, s).expect(&ctx);
                assert_eq!(r.dtype(), DType::Bool, "{ctx}");
                // Every test value (and scalar) is exact in every dtype's
                // compute type, so the comparison is the mathematical one.
                let want: Vec<f64> = va.iter().map(|&x| ref_cmp(op)(x, s)).collect();
                assert_exact(&read(&r), &want, &ctx);
            }
        }
    }
}

#[test]
fn integer_scalars_wrap_like_pytorch() {
    let _g = lock();
    let u = Tensor::from_slice(&[5u8, 1, 200], &[3], CPU).unwrap();
    // 5 + (-2) = 3; 1 + 254 wraps to 255; 200 + 254 wraps to 198
    assert_eq!(
        u.add_scalar(-2.0).unwrap().to_vec::<u8>().unwrap(),
        vec![3, 255, 198]
    );
    assert_eq!(
        u.mul_scalar(2.0).unwrap().to_vec::<u8>().unwrap(),
        vec![10, 2, 144]
    );
    let i = Tensor::from_slice(&[i32::MAX, -1], &[2], CPU).unwrap();
    assert_eq!(
        i.add_scalar(1.0).unwrap().to_vec::<i32>().unwrap(),
        vec![i32::MIN, 0]
    );
    // Comparisons see the true scalar value, not a wrapped one.
    let z = Tensor::from_slice(&[0u8, 254], &[2], CPU).unwrap();
    assert_eq!(read(&z.eq_scalar(-2.0).unwrap()), vec![0.0, 0.0]);
    assert_eq!(read(&z.gt_scalar(-2.0).unwrap()), vec![1.0, 1.0]);
    assert_eq!(read(&z.lt_scalar(300.0).unwrap()), vec![1.0, 1.0]);
}

#[test]
fn integer_pow_negative_exponents() {
    let _g = lock();
    let base = Tensor::from_slice(&[1i64, -1, -1, 2, 0, -3], &[6], CPU).unwrap();
    let exp = Tensor::from_slice(&[-1i64, -1, -2, -1, 3, 3], &[6], CPU).unwrap();
    assert_eq!(
        base.pow(&exp).unwrap().to_vec::<i64>().unwrap(),
        vec![1, -1, 1, 0, 0, -27]
    );
    // A negative integer scalar exponent on an integer tensor is refused (PyTorch).
    let e = base.pow_scalar(-1.0).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { op: "pow", .. }), "{e}");
    // A huge exponent must not be truncated to 32 bits: 2^(2^32) wraps to 0, 1^x is 1.
    let b = Tensor::from_slice(&[2i64, 1, -1], &[3], CPU).unwrap();
    let big = Tensor::from_slice(&[1i64 << 32, 1 << 32, (1 << 32) + 1], &[3], CPU).unwrap();
    assert_eq!(
        b.pow(&big).unwrap().to_vec::<i64>().unwrap(),
        vec![0, 1, -1]
    );
}

#[test]
fn maximum_minimum_propagate_nan() {
    let _g = lock();
    for dt in FLOATS {
        let a = make(&[f64::NAN, 1.0, 3.0], &[3], dt, Lay::Stepped);
        let b = make(&[0.0, f64::NAN, 2.0], &[3], dt, Lay::Contig);
        assert_exact(
            &read(&a.maximum(&b).unwrap()),
            &[f64::NAN, f64::NAN, 3.0],
            "max",
        );
        assert_exact(
            &read(&a.minimum(&b).unwrap()),
            &[f64::NAN, f64::NAN, 2.0],
            "min",
        );
        assert_exact(
            &read(&a.maximum_scalar(2.0).unwrap()),
            &[f64::NAN, 2.0, 3.0],
            "max scalar",
        );
    }
}

// ------------------------------------------------------------- unary ops

#[derive(Copy, Clone, Debug, PartialEq)]
enum Un {
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
const UNS: [Un; 21] = [
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

fn un(op: Un, a: &Tensor) -> Result<Tensor> {
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
fn un_(op: Un, a: &mut Tensor) -> Result<()> {
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

fn float_only(op: Un) -> bool {
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
fn erf_ref(z: f64) -> f64 {
    let n = 20_000;
    let h = z / n as f64;
    let f = |t: f64| (-t * t).exp();
    let mut s = f(0.0) + f(z);
    for i in 1..n {
        s += f(i as f64 * h) * if i % 2 == 1 { 4.0 } else { 2.0 };
    }
    s * h / 3.0 * 2.0 / std::f64::consts::PI.sqrt()
}

fn gelu_ref(x: f64) -> f64 {
    0.5 * x * (1.0 + erf_ref(x / std::f64::consts::SQRT_2))
}

fn ref_un(op: Un, x: f64) -> f64 {
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

fn un_tol(op: Un, dt: DType) -> f64 {
    match op {
        Un::Neg | Un::Abs | Un::Relu | Un::Floor | Un::Round | Un::Sign | Un::Square => 0.0,
        Un::Clamp(..) => 0.0,
        Un::Gelu if dt == DType::F64 => 1e-13,
        Un::Gelu if dt == DType::F32 => 1e-6,
        _ => 4.0 * eps(dt),
    }
}

fn un_data(op: Un, dt: DType, n: usize, seed: u64) -> Vec<f64> {
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

// ------------------------------------------------------------------ where

#[test]
fn where_cond_broadcasts_promotes_and_walks_any_layout() {
    let _g = lock();
    let mut seed = 3000;
    for da in ALL {
        for db in [DType::F32, DType::I64, da] {
            for (lc, la) in LAY_PAIRS {
                seed += 3;
                let (sc, sa, sb) = (&[4usize, 1][..], &[4usize, 5][..], &[5usize][..]);
                let vc = ints(4, seed, 0, 1);
                let st = |d: DType, v: Vec<f64>| v.iter().map(|&x| store(d, x)).collect::<Vec<_>>();
                let va = st(da, data_for(da, 20, seed + 1, -9.0, 9.0));
                let vb = st(db, data_for(db, 5, seed + 2, -9.0, 9.0));
                let c = make(&vc, sc, DType::Bool, lc);
                let a = make(&va, sa, da, la);
                let b = make(&vb, sb, db, Lay::Stepped);
                let ctx = format!("where {da}/{la:?} {db} cond {lc:?}");
                let r = Tensor::where_cond(&c, &a, &b).expect(&ctx);
                let rdt = promote(da, db);
                assert_eq!(r.dtype(), rdt, "{ctx}");
                assert_eq!(r.shape(), &[4, 5], "{ctx}");
                let want: Vec<f64> = (0..20)
                    .map(|k| {
                        let (i, j) = (k / 5, k % 5);
                        store(rdt, if vc[i] != 0.0 { va[k] } else { vb[j] })
                    })
                    .collect();
                assert_exact(&read(&r), &want, &ctx);
            }
        }
    }
    let c = Tensor::ones(&[2], DType::F32, CPU).unwrap();
    let e = Tensor::where_cond(&c, &c, &c).unwrap_err();
    assert!(matches!(e, Error::DTypeMismatch { op: "where", .. }), "{e}");
}

// --------------------------------------------------------------- in place

/// The whole storage of `t`, row-major, as f64 (to check what a write through
/// a view did to the elements around it).
fn storage_of(t: &Tensor) -> Vec<f64> {
    let n = t.storage_nbytes() / t.dtype().size_in_bytes();
    read(&t.as_strided(&[n], &[1], 0).unwrap())
}

#[test]
fn binary_in_place_through_views_every_dtype() {
    let _g = lock();
    let mut seed = 4000;
    for op in BINS {
        for dt in NUMERIC {
            for (la, lb) in LAY_PAIRS {
                for sb in [&[4usize, 5][..], &[5], &[4, 1], &[]] {
                    seed += 2;
                    let sa = &[4usize, 5][..];
                    let nb: usize = sb.iter().product();
                    let (va, vb) = operands(op, dt, 20, nb, seed);
                    let mut a = make(&va, sa, dt, la);
                    let b = make(&vb, sb, dt, lb);
                    let before = storage_of(&a);
                    let (ptr, ver) = (a.data_ptr(), a.version());
                    let ctx = format!("{op:?}_ {dt}/{la:?} with {sb:?}/{lb:?}");
                    let r = bin_(op, &mut a, &b);
                    let rdt = result_dtype(op, dt, dt).unwrap();
                    if rdt != dt {
                        // A float result cannot be stored in an integer tensor.
                        let e = r.expect_err(&ctx);
                        assert!(matches!(e, Error::DTypeMismatch { .. }), "{ctx}: {e}");
                        assert_eq!(storage_of(&a), before, "{ctx}: nothing written");
                        assert_eq!(a.version(), ver, "{ctx}");
                        continue;
                    }
                    r.expect(&ctx);
                    assert_eq!(a.data_ptr(), ptr, "{ctx}: same memory");
                    assert_eq!(a.version(), ver + 1, "{ctx}: version bumped once");
                    let (want, _) = ref_binary(&va, sa, &vb, sb, ref_op(op, dt));
                    let want: Vec<f64> = want.iter().map(|&v| store(dt, v)).collect();
                    assert_close(&read(&a), &want, tol(op, dt), &ctx);
                    // Elements of the storage outside the view are untouched.
                    if la == Lay::Stepped {
                        let after = storage_of(&a);
                        for (k, (x, y)) in before.iter().zip(&after).enumerate() {
                            if k % 11 % 2 == 0 {
                                assert_eq!(x, y, "{ctx}: storage element {k} changed");
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn scalar_and_unary_in_place_every_dtype() {
    let _g = lock();
    let mut seed = 5000;
    for dt in NUMERIC {
        for lay in LAYS {
            for op in BINS {
                for s in [2.0, 0.5, -2.0] {
                    seed += 1;
                    let (va, _) = operands(op, dt, 12, 1, seed);
                    let mut a = make(&va, &[3, 4], dt, lay);
                    let ctx = format!("{op:?}_scalar_ {dt}/{lay:?} with {s}");
                    let r = bin_scalar_(op, &mut a, s);
                    match scalar_result_dtype(op, dt, s) {
                        Some(rdt) if rdt == dt => {
                            r.expect(&ctx);
                            let f = ref_op(op, dt);
                            let want: Vec<f64> =
                                va.iter().map(|&x| store(dt, f(x, store(dt, s)))).collect();
                            assert_close(&read(&a), &want, tol(op, dt), &ctx);
                        }
                        _ => {
                            let e = r.expect_err(&ctx);
                            assert!(
                                matches!(
                                    e,
                                    Error::DTypeMismatch { .. } | Error::InvalidArgument { .. }
                                ),
                                "{ctx}: {e}"
                            );
                            assert_exact(&read(&a), &va, &ctx);
                        }
                    }
                }
            }
            for op in UNS {
                seed += 1;
                let va = un_data(op, dt, 12, seed);
                let mut a = make(&va, &[3, 4], dt, lay);
                let ver = a.version();
                let ctx = format!("{op:?}_ {dt}/{lay:?}");
                let r = un_(op, &mut a);
                if float_only(op) && !dt.is_float() {
                    let e = r.expect_err(&ctx);
                    assert!(matches!(e, Error::DTypeMismatch { .. }), "{ctx}: {e}");
                    assert_eq!(a.version(), ver);
                    continue;
                }
                r.expect(&ctx);
                assert_eq!(a.version(), ver + 1, "{ctx}");
                let want: Vec<f64> = va.iter().map(|&x| store(dt, ref_un(op, x))).collect();
                assert_close(&read(&a), &want, un_tol(op, dt), &ctx);
            }
        }
    }
}

#[test]
fn in_place_dtype_rules() {
    let _g = lock();
    use DType::*;
    let mut i = Tensor::from_slice(&[1i64, 2], &[2], CPU).unwrap();
    let f = Tensor::from_slice(&[0.5f32, 0.5], &[2], CPU).unwrap();
    // int tensor add_ float tensor -> Err, nothing written
    let e = i.add_(&f).unwrap_err();
    assert!(matches!(e, Error::DTypeMismatch { op: "add", .. }), "{e}");
    assert!(
        e.to_string().contains("float32") && e.to_string().contains("int64"),
        "{e}"
    );
    let e = i.add_scalar_(2.5).unwrap_err();
    assert!(matches!(e, Error::DTypeMismatch { op: "add", .. }), "{e}");
    let e = i.div_(&i.alias()).unwrap_err();
    assert!(matches!(e, Error::DTypeMismatch { op: "div", .. }), "{e}");
    let e = i.exp_().unwrap_err();
    assert!(matches!(e, Error::DTypeMismatch { op: "exp", .. }), "{e}");
    assert_eq!(i.to_vec::<i64>().unwrap(), vec![1, 2]);
    // bool tensors take no numeric result in place
    let mut b = Tensor::ones(&[2], Bool, CPU).unwrap();
    assert!(matches!(
        b.add_scalar_(1.0),
        Err(Error::DTypeMismatch { .. })
    ));
    assert!(matches!(
        b.add_(&Tensor::ones(&[2], I64, CPU).unwrap()),
        Err(Error::DTypeMismatch { .. })
    ));
    b.add_(&Tensor::zeros(&[2], Bool, CPU).unwrap()).unwrap();
    // Allowed: a wider result of the same category is cast back.
    let mut h = Tensor::full(&[2], 1.0, F32, CPU).unwrap();
    h.add_(&Tensor::full(&[2], 0.25, F64, CPU).unwrap())
        .unwrap();
    h.add_(&Tensor::full(&[2], 2.0, I64, CPU).unwrap()).unwrap();
    assert_eq!(h.to_vec::<f32>().unwrap(), vec![3.25, 3.25]);
    let mut j = Tensor::from_slice(&[1i32, 2], &[2], CPU).unwrap();
    j.add_(&Tensor::from_slice(&[10i64, 20], &[2], CPU).unwrap())
        .unwrap();
    assert_eq!(j.dtype(), I32);
    assert_eq!(j.to_vec::<i32>().unwrap(), vec![11, 22]);
    // in place, the other operand must broadcast to self's shape
    let mut s = Tensor::zeros(&[3], F32, CPU).unwrap();
    let e = s
        .add_(&Tensor::zeros(&[2, 3], F32, CPU).unwrap())
        .unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { op: "add", .. }), "{e}");
}

#[test]
fn in_place_into_an_expanded_view_is_refused() {
    let _g = lock();
    let base = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3, 1], CPU).unwrap();
    let mut x = base.expand(&[3, 4]).unwrap();
    let one = Tensor::ones(&[3, 4], DType::F32, CPU).unwrap();
    let check = |r: Result<()>, what: &str| {
        let e = r.expect_err(what);
        assert!(matches!(e, Error::InvalidInPlace { .. }), "{what}: {e}");
        assert!(e.to_string().contains("[3, 4]"), "{what}: {e}");
    };
    check(x.add_(&one).map(|_| ()), "add_");
    check(x.add_scalar_(1.0).map(|_| ()), "add_scalar_");
    check(x.neg_().map(|_| ()), "neg_");
    check(x.clamp_(Some(0.0), None).map(|_| ()), "clamp_");
    check(x.fill_(0.0).map(|_| ()), "fill_");
    check(x.copy_(&one).map(|_| ()), "copy_");
    check(one.add_out(&one, &mut x), "add_out");
    let mask = Tensor::ones(&[3, 4], DType::Bool, CPU).unwrap();
    check(x.masked_fill_(&mask, 0.0).map(|_| ()), "masked_fill_");
    assert_eq!(
        base.to_vec::<f32>().unwrap(),
        vec![1.0, 2.0, 3.0],
        "nothing written"
    );
}

#[test]
fn overlapping_in_place_reads_as_if_cloned_first() {
    let _g = lock();
    // PyTorch: a[1:] += a[:-1] on [1,2,3,4,5] gives [1,3,5,7,9] (not a running sum).
    for dt in [DType::F32, DType::I64, DType::F16] {
        let a = Tensor::from_slice(&[1.0f64, 2.0, 3.0, 4.0, 5.0], &[5], CPU)
            .unwrap()
            .to_dtype(dt)
            .unwrap();
        let mut hi = a.slice(0, 1, 5, 1).unwrap();
        let lo = a.slice(0, 0, 4, 1).unwrap();
        hi.add_(&lo).unwrap();
        assert_eq!(read(&a), vec![1.0, 3.0, 5.0, 7.0, 9.0], "{dt}");
        // And the other direction: a[:-1] += a[1:].
        let mut lo = a.slice(0, 0, 4, 1).unwrap();
        let hi = a.slice(0, 1, 5, 1).unwrap();
        lo.add_(&hi).unwrap();
        assert_eq!(read(&a), vec![4.0, 8.0, 12.0, 16.0, 9.0], "{dt}");
    }
    // A square matrix plus its own transpose, in place: symmetric result.
    let v: Vec<f64> = (0..16).map(|x| x as f64).collect();
    let mut m = Tensor::from_slice(&v, &[4, 4], CPU).unwrap();
    let mt = m.t().unwrap();
    m.add_(&mt).unwrap();
    let want: Vec<f64> = (0..16).map(|k| v[k] + v[(k % 4) * 4 + k / 4]).collect();
    assert_eq!(read(&m), want);
    // Same tensor on both sides.
    let mut s = Tensor::from_slice(&[1.0f32, 2.0], &[2], CPU).unwrap();
    let s2 = s.alias();
    s.mul_(&s2).unwrap();
    assert_eq!(s.to_vec::<f32>().unwrap(), vec![1.0, 4.0]);
    // Through out=: writing into one input's storage with another layout.
    let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0], &[5], CPU).unwrap();
    let mut out = a.slice(0, 1, 5, 1).unwrap();
    let lo = a.slice(0, 0, 4, 1).unwrap();
    lo.add_out(&lo, &mut out).unwrap();
    assert_eq!(a.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 4.0, 6.0, 8.0]);
}

// ------------------------------------------------------------- out forms

fn alloc_totals() -> (u64, u64) {
    let s = memory::memory_stats(CPU);
    (s.allocation.all.allocated, s.allocated_bytes.all.allocated)
}

#[test]
fn out_forms_write_the_result_and_allocate_nothing() {
    let _g = lock();
    let mut seed = 6000;
    for dt in NUMERIC {
        for (la, lb) in LAY_PAIRS {
            for lo in [Lay::Contig, Lay::Transposed, Lay::Stepped] {
                seed += 2;
                let (sa, sb) = (&[4usize, 5][..], &[5usize][..]);
                for op in BINS {
                    let (va, vb) = operands(op, dt, 20, 5, seed);
                    let a = make(&va, sa, dt, la);
                    let b = make(&vb, sb, dt, lb);
                    let rdt = result_dtype(op, dt, dt).unwrap();
                    let mut out = make(&[0.0; 20], sa, rdt, lo);
                    let ver = out.version();
                    let ctx = format!("{op:?}_out {dt} {la:?}/{lb:?} into {lo:?}");
                    let before = alloc_totals();
                    bin_out(op, &a, &b, &mut out).expect(&ctx);
                    if rdt == dt {
                        // (Integer division computes in f32: its inputs are converted first.)
                        assert_eq!(alloc_totals(), before, "{ctx}: the allocator was called");
                    }
                    assert_eq!(out.version(), ver + 1, "{ctx}");
                    let (want, _) = ref_binary(&va, sa, &vb, sb, ref_op(op, rdt));
                    let want: Vec<f64> = want.iter().map(|&v| store(rdt, v)).collect();
                    assert_close(&read(&out), &want, tol(op, rdt), &ctx);
                }
                for op in CMPS {
                    let va = data_for(dt, 20, seed, -3.0, 3.0);
                    let vb = data_for(dt, 5, seed + 1, -3.0, 3.0);
                    let a = make(&va, sa, dt, la);
                    let b = make(&vb, sb, dt, lb);
                    let mut out = make(&[0.0; 20], sa, DType::Bool, lo);
                    let ctx = format!("{op:?}_out {dt} into {lo:?}");
                    let before = alloc_totals();
                    cmp_out(op, &a, &b, &mut out).expect(&ctx);
                    assert_eq!(alloc_totals(), before, "{ctx}: the allocator was called");
                    let (want, _) = ref_binary(&va, sa, &vb, sb, ref_cmp(op));
                    assert_exact(&read(&out), &want, &ctx);
                }
            }
        }
    }
}

#[test]
fn out_forms_check_shape_dtype_and_cast() {
    let _g = lock();
    let a = Tensor::ones(&[2, 3], DType::F32, CPU).unwrap();
    let mut wrong = Tensor::zeros(&[3, 2], DType::F32, CPU).unwrap();
    let e = a.add_out(&a, &mut wrong).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { op: "add", .. }), "{e}");
    assert!(
        e.to_string().contains("[2, 3]") && e.to_string().contains("[3, 2]"),
        "{e}"
    );
    let mut int_out = Tensor::zeros(&[2, 3], DType::I64, CPU).unwrap();
    let e = a.add_out(&a, &mut int_out).unwrap_err();
    assert!(matches!(e, Error::DTypeMismatch { op: "add", .. }), "{e}");
    let mut bool_out = Tensor::zeros(&[2, 3], DType::Bool, CPU).unwrap();
    let i = Tensor::ones(&[2, 3], DType::I64, CPU).unwrap();
    assert!(matches!(
        i.add_out(&i, &mut bool_out),
        Err(Error::DTypeMismatch { .. })
    ));
    // A comparison may be written into a numeric out (bool casts to anything).
    let mut f_out = Tensor::zeros(&[2, 3], DType::F32, CPU).unwrap();
    a.eq_out(&a, &mut f_out).unwrap();
    assert_eq!(f_out.to_vec::<f32>().unwrap(), vec![1.0; 6]);
    // A same-category cast: f64 result into an f32 out.
    let d = Tensor::full(&[2, 3], 0.5, DType::F64, CPU).unwrap();
    let mut o = Tensor::zeros(&[2, 3], DType::F32, CPU).unwrap();
    a.add_out(&d, &mut o).unwrap();
    assert_eq!(o.to_vec::<f32>().unwrap(), vec![1.5; 6]);
}

// -------------------------------------------------------------- operators

#[test]
fn operators_match_the_methods_and_return_results() {
    let _g = lock();
    let va = uniform(12, 77, -3.0, 3.0);
    let vb = uniform(4, 78, 0.5, 3.0);
    let a = make(&va, &[3, 4], DType::F32, Lay::Transposed);
    let b = make(&vb, &[4], DType::F32, Lay::Stepped);
    let pairs: [(Tensor, Tensor); 4] = [
        ((&a + &b).unwrap(), a.add(&b).unwrap()),
        ((&a - &b).unwrap(), a.sub(&b).unwrap()),
        ((&a * &b).unwrap(), a.mul(&b).unwrap()),
        ((&a / &b).unwrap(), a.div(&b).unwrap()),
    ];
    for (x, y) in &pairs {
        assert_eq!(read(x), read(y));
    }
    assert_eq!(read(&(-&a).unwrap()), read(&a.neg().unwrap()));
    assert_eq!(
        read(&(&a * 2.0).unwrap()),
        read(&a.mul_scalar(2.0).unwrap())
    );
    let r = (1.0 - &a).unwrap();
    let want: Vec<f64> = va
        .iter()
        .map(|&x| store(DType::F32, 1.0 - store(DType::F32, x)))
        .collect();
    assert_eq!(read(&r), want);
    let r = (2.0 / &b).unwrap();
    let want: Vec<f64> = vb
        .iter()
        .map(|&x| store(DType::F32, 2.0 / store(DType::F32, x)))
        .collect();
    assert_eq!(read(&r), want);
    // owned operands are consumed; the result is still a Result
    let c = (a.alias() + b.alias()).unwrap();
    assert_eq!(c.shape(), &[3, 4]);
    // bad input: an Err, never a panic
    let e = (&a + &Tensor::ones(&[3], DType::F32, CPU).unwrap()).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { op: "add", .. }), "{e}");
    let bools = Tensor::ones(&[2], DType::Bool, CPU).unwrap();
    assert!(matches!(
        &bools - &bools,
        Err(Error::DTypeMismatch { op: "sub", .. })
    ));
    assert!(matches!(
        1.0 - &bools,
        Err(Error::DTypeMismatch { op: "sub", .. })
    ));
    assert!(matches!(
        -&bools,
        Err(Error::DTypeMismatch { op: "neg", .. })
    ));
}

// ------------------------------------------------- random layouts (fuzz)

/// A random view of a fresh f64 tensor: permuted, stepped, narrowed and
/// expanded dims. Returns the view and its logical values computed by index
/// arithmetic on the base (independent of the library's strided walk).
fn random_view(r: &mut Rng, shape: &[usize]) -> (Tensor, Vec<f64>) {
    let rank = shape.len();
    // base dims: each logical dim d gets a base extent with room for a step and start
    let steps: Vec<usize> = (0..rank).map(|_| r.int(1, 3) as usize).collect();
    let starts: Vec<usize> = (0..rank).map(|_| r.int(0, 2) as usize).collect();
    let expanded: Vec<bool> = (0..rank)
        .map(|_| shape.len() > 1 && r.int(0, 5) == 0)
        .collect();
    let ext: Vec<usize> = (0..rank)
        .map(|d| {
            if expanded[d] {
                1
            } else {
                starts[d] + (shape[d].max(1) - 1) * steps[d] + 1
            }
        })
        .collect();
    // random permutation: the base is laid out in `perm` order
    let mut perm: Vec<usize> = (0..rank).collect();
    for i in (1..rank).rev() {
        perm.swap(i, r.int(0, i as i64) as usize);
    }
    let bshape: Vec<usize> = perm.iter().map(|&d| ext[d]).collect();
    let bn: usize = bshape.iter().product();
    let bvals: Vec<f64> = (0..bn).map(|_| r.int(-50, 50) as f64).collect();
    let base = Tensor::from_slice(&bvals, &bshape, CPU).unwrap();
    // undo the permutation: logical dim d is base dim inv[d]
    let mut inv = vec![0; rank];
    for (i, &d) in perm.iter().enumerate() {
        inv[d] = i;
    }
    let inv_i: Vec<isize> = inv.iter().map(|&i| i as isize).collect();
    let mut v = base.permute(&inv_i).unwrap();
    for d in 0..rank {
        if !expanded[d] {
            let end = starts[d] + shape[d] * steps[d];
            v = v
                .slice(d as isize, starts[d], end.min(ext[d]), steps[d])
                .unwrap();
        }
    }
    let want_shape: Vec<isize> = shape.iter().map(|&s| s as isize).collect();
    let v = v.expand(&want_shape).unwrap();
    assert_eq!(v.shape(), shape);
    let bstrides = row_major(&bshape);
    let n: usize = shape.iter().product();
    let vals = (0..n)
        .map(|lin| {
            let idx = unravel(lin, shape);
            let off: usize = (0..rank)
                .map(|d| {
                    let i = if expanded[d] {
                        0
                    } else {
                        starts[d] + idx[d] * steps[d]
                    };
                    i * bstrides[inv[d]]
                })
                .sum();
            bvals[off]
        })
        .collect();
    (v, vals)
}

#[test]
fn random_layouts_small_and_large_against_index_arithmetic() {
    let _g = lock();
    let mut r = Rng::new(4242);
    let mut shapes: Vec<Vec<usize>> = vec![
        vec![],
        vec![1],
        vec![0, 3],
        vec![300, 500],     // parallel chunks, tiles when transposed
        vec![2, 129, 1100], // parallel, rank 3
        vec![70_000, 3],    // long outer dim
    ];
    for _ in 0..60 {
        let rank = r.int(1, 4) as usize;
        shapes.push((0..rank).map(|_| r.int(1, 7) as usize).collect());
    }
    for shape in &shapes {
        for _ in 0..3 {
            let (a, va) = random_view(&mut r, shape);
            let (b, vb) = random_view(&mut r, shape);
            let ctx = format!(
                "{shape:?} a {:?}/{:?} b {:?}/{:?}",
                a.strides(),
                a.storage_offset(),
                b.strides(),
                b.storage_offset()
            );
            let want: Vec<f64> = va.iter().zip(&vb).map(|(x, y)| x - 2.0 * y).collect();
            let got = a.sub(&b.mul_scalar(2.0).unwrap()).unwrap();
            assert_exact(&read(&got), &want, &ctx);
            assert_exact(&read(&a.contiguous().unwrap()), &va, &ctx);
            // in place into a (non-expanded) random view: the base sees it
            if !a.layout().has_internal_overlap() {
                let mut w = a.alias();
                w.add_(&b).unwrap();
                let want: Vec<f64> = va.iter().zip(&vb).map(|(x, y)| x + y).collect();
                assert_exact(&read(&a), &want, &ctx);
            }
            // out= into a transposed output
            if shape.len() == 2 {
                let o = Tensor::zeros(&[shape[1], shape[0]], DType::F64, CPU).unwrap();
                let mut ot = o.t().unwrap();
                a.maximum_out(&b, &mut ot).unwrap();
                let av = read(&a);
                let want: Vec<f64> = av.iter().zip(&vb).map(|(x, y)| x.max(*y)).collect();
                assert_exact(&read(&ot), &want, &ctx);
            }
        }
    }
}

// ------------------------------------------- equal shapes: borrowed layouts

/// Operands of one shape and dtype take the fast path that hands the kernel
/// their own layouts (no broadcast layout is built). Its results must match
/// the reference whatever those layouts are: expanded (stride 0, from either
/// side), offset views (narrow), transposed, rank 0 and one element; for
/// arithmetic, comparisons and bool; and its errors must be the general
/// path's.
#[test]
fn equal_shapes_use_the_operands_own_layouts() {
    let _g = lock();
    let before = memory::memory_allocated(tensorscope::Device::Cpu);
    // f64 tensors (`from_slice` of f64 values): the reference is exact.
    let va = data_for(DType::F32, 4, 11, -5.0, 5.0);
    let vb = data_for(DType::F32, 3, 12, -5.0, 5.0);
    let dev = tensorscope::Device::Cpu;
    // a: [1, 4] expanded to [3, 4]; b: [3, 1] expanded to [3, 4].
    let a0 = Tensor::from_slice(&va, &[1, 4], dev).unwrap();
    let b0 = Tensor::from_slice(&vb, &[3, 1], dev).unwrap();
    let a = a0.expand(&[3, 4]).unwrap();
    let b = b0.expand(&[3, 4]).unwrap();
    let want_a: Vec<f64> = (0..12).map(|i| va[i % 4]).collect();
    let want_b: Vec<f64> = (0..12).map(|i| vb[i / 4]).collect();
    // c: rows 1..4 of a [5, 4] tensor (offset 4); d: the transpose of a [4, 3].
    let vc = data_for(DType::F32, 20, 13, -5.0, 5.0);
    let c = Tensor::from_slice(&vc, &[5, 4], dev)
        .unwrap()
        .narrow(0, 1, 3)
        .unwrap();
    let want_c: Vec<f64> = vc[4..16].to_vec();
    let vd = data_for(DType::F32, 12, 14, -5.0, 5.0);
    let d = Tensor::from_slice(&vd, &[4, 3], dev).unwrap().t().unwrap();
    let want_d: Vec<f64> = (0..12).map(|i| vd[(i % 4) * 3 + i / 4]).collect();
    // (x, x's values, y, y's values, what)
    type Case<'a> = (&'a Tensor, &'a Vec<f64>, &'a Tensor, &'a Vec<f64>, &'a str);
    let cases: [Case; 5] = [
        (&a, &want_a, &b, &want_b, "expanded rows + expanded columns"),
        (&b, &want_b, &c, &want_c, "expanded + offset view"),
        (&c, &want_c, &d, &want_d, "offset view + transposed"),
        (&d, &want_d, &a, &want_a, "transposed + expanded"),
        (&c, &want_c, &c, &want_c, "one tensor twice"),
    ];
    for (x, wx, y, wy, what) in cases {
        assert_eq!(x.shape(), y.shape(), "{what}");
        for op in [Bin::Add, Bin::Sub, Bin::Mul, Bin::Max, Bin::Min] {
            let r = bin(op, x, y).unwrap();
            let f = ref_op(op, DType::F64);
            let want: Vec<f64> = wx
                .iter()
                .zip(wy.iter())
                .map(|(&p, &q)| store(DType::F64, f(p, q)))
                .collect();
            assert_eq!(r.shape(), &[3, 4], "{what} {op:?}");
            assert_eq!(r.dtype(), DType::F64, "{what} {op:?}");
            assert!(r.is_contiguous(), "{what} {op:?}");
            assert_close(&read(&r), &want, 0.0, &format!("{what} {op:?}"));
        }
        let lt = x.lt(y).unwrap();
        assert_eq!(lt.dtype(), DType::Bool, "{what}");
        let want: Vec<f64> = wx
            .iter()
            .zip(wy.iter())
            .map(|(p, q)| f64::from(u8::from(p < q)))
            .collect();
        assert_eq!(read(&lt), want, "{what}: lt");
    }
    // Rank 0 and one element.
    let s = Tensor::from_slice(&[2.5f32], &[], dev).unwrap();
    assert_eq!(s.mul(&s).unwrap().item::<f64>().unwrap(), 6.25);
    let one = Tensor::from_slice(&[1.5f64], &[1], dev).unwrap();
    let mut x = Tensor::zeros(&[1], DType::F64, dev).unwrap();
    for _ in 0..100 {
        x = x.add(&one).unwrap();
    }
    assert_eq!(
        x.item::<f64>().unwrap(),
        150.0,
        "a chain of equal-shape adds"
    );
    // Bool on the fast path: add is `or`; sub is an error naming the op.
    let p = Tensor::from_slice(&[true, false, false], &[3], dev).unwrap();
    let q = Tensor::from_slice(&[false, false, true], &[3], dev).unwrap();
    assert_eq!(read(&p.add(&q).unwrap()), vec![1.0, 0.0, 1.0]);
    let e = p.sub(&q).unwrap_err();
    assert!(matches!(e, Error::DTypeMismatch { .. }), "{e}");
    assert!(e.to_string().contains("sub"), "{e}");
    // Equal shapes of different dtypes promote (the general path).
    let i = Tensor::from_slice(&[1i32, 2, 3], &[3], dev).unwrap();
    let r = i.div(&i).unwrap();
    assert_eq!(r.dtype(), DType::F32);
    assert_eq!(read(&r), vec![1.0, 1.0, 1.0]);
    drop((a, b, a0, b0, c, d, s, one, x, p, q, i, r));
    assert_eq!(
        memory::memory_allocated(dev),
        before,
        "every result and operand was returned to the allocator"
    );
}
