//! comparisons

use super::*;

#[derive(Copy, Clone, Debug)]
pub(super) enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}
pub(super) const CMPS: [Cmp; 6] = [Cmp::Eq, Cmp::Ne, Cmp::Lt, Cmp::Le, Cmp::Gt, Cmp::Ge];

pub(super) fn cmp(op: Cmp, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    match op {
        Cmp::Eq => a.eq(b),
        Cmp::Ne => a.ne(b),
        Cmp::Lt => a.lt(b),
        Cmp::Le => a.le(b),
        Cmp::Gt => a.gt(b),
        Cmp::Ge => a.ge(b),
    }
}
pub(super) fn cmp_scalar(op: Cmp, a: &Tensor, s: f64) -> Result<Tensor> {
    match op {
        Cmp::Eq => a.eq_scalar(s),
        Cmp::Ne => a.ne_scalar(s),
        Cmp::Lt => a.lt_scalar(s),
        Cmp::Le => a.le_scalar(s),
        Cmp::Gt => a.gt_scalar(s),
        Cmp::Ge => a.ge_scalar(s),
    }
}
pub(super) fn cmp_out(op: Cmp, a: &Tensor, b: &Tensor, out: &mut Tensor) -> Result<()> {
    match op {
        Cmp::Eq => a.eq_out(b, out),
        Cmp::Ne => a.ne_out(b, out),
        Cmp::Lt => a.lt_out(b, out),
        Cmp::Le => a.le_out(b, out),
        Cmp::Gt => a.gt_out(b, out),
        Cmp::Ge => a.ge_out(b, out),
    }
}
pub(super) fn ref_cmp(op: Cmp) -> impl Fn(f64, f64) -> f64 {
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
