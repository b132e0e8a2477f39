//! binary ops

use super::*;

#[derive(Copy, Clone, Debug, PartialEq)]
pub(super) enum Bin {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    Max,
    Min,
}
pub(super) const BINS: [Bin; 7] = [
    Bin::Add,
    Bin::Sub,
    Bin::Mul,
    Bin::Div,
    Bin::Pow,
    Bin::Max,
    Bin::Min,
];

pub(super) fn bin(op: Bin, a: &Tensor, b: &Tensor) -> Result<Tensor> {
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
pub(super) fn bin_scalar(op: Bin, a: &Tensor, s: f64) -> Result<Tensor> {
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
pub(super) fn bin_(op: Bin, a: &mut Tensor, b: &Tensor) -> Result<()> {
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
pub(super) fn bin_scalar_(op: Bin, a: &mut Tensor, s: f64) -> Result<()> {
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
pub(super) fn bin_out(op: Bin, a: &Tensor, b: &Tensor, out: &mut Tensor) -> Result<()> {
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
pub(super) fn promote(a: DType, b: DType) -> DType {
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
pub(super) fn result_dtype(op: Bin, a: DType, b: DType) -> Option<DType> {
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
pub(super) fn scalar_result_dtype(op: Bin, a: DType, s: f64) -> Option<DType> {
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

pub(super) fn int_pow(x: f64, y: f64) -> f64 {
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
pub(super) fn ref_op(op: Bin, dt: DType) -> impl Fn(f64, f64) -> f64 {
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
pub(super) fn operands(
    op: Bin,
    dt: DType,
    na: usize,
    nb: usize,
    seed: u64,
) -> (Vec<f64>, Vec<f64>) {
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
pub(super) fn tol(op: Bin, dt: DType) -> f64 {
    if op == Bin::Pow {
        4.0 * eps(dt)
    } else {
        0.0
    }
}

pub(super) const SHAPES: [(&[usize], &[usize]); 4] = [
    (&[4, 5], &[4, 5]),
    (&[4, 1], &[5]),
    (&[2, 4, 5], &[1, 5]),
    (&[], &[3, 4]),
];
pub(super) const LAY_PAIRS: [(Lay, Lay); 3] = [
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
