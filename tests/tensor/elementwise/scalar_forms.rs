//! scalar forms

use super::*;

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
