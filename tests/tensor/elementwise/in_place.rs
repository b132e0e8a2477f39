//! in place

use super::*;

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
