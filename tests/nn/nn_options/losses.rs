//! PyTorch's loss options (cross-entropy ignore_index, weight and label smoothing; BCE-with-logits pos_weight and weight; MSE reductions), their gradchecks and errors.

use super::*;

#[test]
fn pytorch_cross_entropy_options() {
    let _g = lock();
    let t = i64s(&TARGETS, &[4]);
    let w = f64s(&CLASS_W, &[3]);
    let cases: [CeCase; 7] = [
        (
            "ignore mean",
            false,
            0.0,
            Reduction::Mean,
            &CE_IGNORE_MEAN,
            &CE_IGNORE_MEAN_GRAD,
        ),
        (
            "weight ignore mean",
            true,
            0.0,
            Reduction::Mean,
            &CE_W_IGNORE_MEAN,
            &CE_W_IGNORE_MEAN_GRAD,
        ),
        (
            "weight ignore smooth mean",
            true,
            0.15,
            Reduction::Mean,
            &CE_W_IGNORE_SMOOTH_MEAN,
            &CE_W_IGNORE_SMOOTH_MEAN_GRAD,
        ),
        (
            "weight ignore smooth sum",
            true,
            0.15,
            Reduction::Sum,
            &CE_W_IGNORE_SMOOTH_SUM,
            &CE_W_IGNORE_SMOOTH_SUM_GRAD,
        ),
        (
            "weight ignore smooth none",
            true,
            0.15,
            Reduction::None,
            &CE_W_IGNORE_SMOOTH_NONE,
            &CE_W_IGNORE_SMOOTH_NONE_GRAD,
        ),
        (
            "ignore smooth mean",
            false,
            0.2,
            Reduction::Mean,
            &CE_IGNORE_SMOOTH_MEAN,
            &CE_IGNORE_SMOOTH_MEAN_GRAD,
        ),
        (
            "ignore sum",
            false,
            0.0,
            Reduction::Sum,
            &CE_IGNORE_SUM,
            &CE_IGNORE_SUM_GRAD,
        ),
    ];
    for (what, weighted, ls, reduction, want, want_grad) in cases {
        let f = |x: &Tensor| {
            let w = if weighted {
                Some(w.to_dtype(x.dtype())?)
            } else {
                None
            };
            let opts = CrossEntropyOptions {
                reduction,
                ignore_index: Some(-100),
                weight: w.as_ref(),
                label_smoothing: ls,
            };
            cross_entropy_with(x, &t, &opts)
        };
        check_against_torch(what, &LOGITS, &[4, 3], &f, want, want_grad);
        if reduction == Reduction::None {
            assert_eq!(f(&f64s(&LOGITS, &[4, 3])).unwrap().shape(), &[4]);
        }
    }
    // A class weight without ignore_index.
    let t2 = i64s(&[0, 2, 2, 1], &[4]);
    let f = |x: &Tensor| {
        let w = w.to_dtype(x.dtype())?;
        let opts = CrossEntropyOptions {
            weight: Some(&w),
            ..Default::default()
        };
        cross_entropy_with(x, &t2, &opts)
    };
    check_against_torch(
        "weight mean",
        &LOGITS,
        &[4, 3],
        &f,
        &CE_W_MEAN,
        &CE_W_MEAN_GRAD,
    );
    // [N, C, d] logits with [N, d] targets; `None` keeps the targets' shape.
    let logits3 = [
        0.1, -0.3, 1.2, 0.4, -0.5, 2.2, 0.0, 0.7, -1.1, 0.3, 0.6, -0.2,
    ];
    let t3 = i64s(&[2, 0, -100, 1], &[2, 2]);
    for (reduction, want, want_grad) in [
        (Reduction::None, &CE3_NONE[..], &CE3_NONE_GRAD[..]),
        (Reduction::Mean, &CE3_MEAN[..], &CE3_MEAN_GRAD[..]),
    ] {
        let f = |x: &Tensor| {
            let w = w.to_dtype(x.dtype())?;
            let opts = CrossEntropyOptions {
                reduction,
                ignore_index: Some(-100),
                weight: Some(&w),
                label_smoothing: 0.1,
            };
            cross_entropy_with(x, &t3, &opts)
        };
        check_against_torch("[N, C, d]", &logits3, &[2, 3, 2], &f, want, want_grad);
        if reduction == Reduction::None {
            assert_eq!(f(&f64s(&logits3, &[2, 3, 2])).unwrap().shape(), &[2, 2]);
        }
    }
    // Unbatched: [C] logits with a 0-D target equal the first row of a batch.
    let row = f64s(&LOGITS[..3], &[3]);
    let one = cross_entropy(&row, &i64s(&[2], &[]))
        .unwrap()
        .item::<f64>()
        .unwrap();
    let lse = LOGITS[..3].iter().map(|v| v.exp()).sum::<f64>().ln();
    close(&[one], &[lse - LOGITS[2]], 1e-12, "unbatched");
}

#[test]
fn pytorch_bce_with_logits_options() {
    let _g = lock();
    let x = [-3.0, 0.5, 2.0, 40.0, -0.25, 1.0];
    let t = f64s(&[0.0, 1.0, 0.3, 1.0, 0.0, 0.8], &[2, 3]);
    let pw = f64s(&[3.0, 0.5, 1.5], &[3]);
    let ew = f64s(&[1.0, 2.0], &[2, 1]);
    let cases: [BceCase; 4] = [
        (
            "pos_weight mean",
            true,
            false,
            Reduction::Mean,
            &BCE_POS_MEAN,
            &BCE_POS_MEAN_GRAD,
        ),
        (
            "pos_weight weight sum",
            true,
            true,
            Reduction::Sum,
            &BCE_POS_W_SUM,
            &BCE_POS_W_SUM_GRAD,
        ),
        (
            "pos_weight weight none",
            true,
            true,
            Reduction::None,
            &BCE_POS_W_NONE,
            &BCE_POS_W_NONE_GRAD,
        ),
        (
            "weight mean",
            false,
            true,
            Reduction::Mean,
            &BCE_W_MEAN,
            &BCE_W_MEAN_GRAD,
        ),
    ];
    for (what, use_pw, use_w, reduction, want, want_grad) in cases {
        let f = |x: &Tensor| {
            let dt = x.dtype();
            let (pw, ew, t) = (pw.to_dtype(dt)?, ew.to_dtype(dt)?, t.to_dtype(dt)?);
            let opts = BceWithLogitsOptions {
                reduction,
                weight: if use_w { Some(&ew) } else { None },
                pos_weight: if use_pw { Some(&pw) } else { None },
            };
            bce_with_logits_with(x, &t, &opts)
        };
        check_against_torch(what, &x, &[2, 3], &f, want, want_grad);
    }
    // The default options are bce_with_logits, bit for bit.
    let xt = strided(&x, &[2, 3]);
    let a = bce_with_logits(&xt, &t).unwrap().item::<f64>().unwrap();
    let b = bce_with_logits_with(&xt, &t, &BceWithLogitsOptions::default())
        .unwrap()
        .item::<f64>()
        .unwrap();
    assert_eq!(a.to_bits(), b.to_bits());
}

#[test]
fn mse_reductions_match_naive() {
    let _g = lock();
    let p = randn(&[4, 3], DType::F64, 70).t().unwrap();
    let t = randn(&[3, 4], DType::F64, 71);
    let sq: Vec<f64> = vals(&p)
        .iter()
        .zip(vals(&t))
        .map(|(a, b)| (a - b).powi(2))
        .collect();
    close(
        &vals(&mse_loss_with(&p, &t, Reduction::None).unwrap()),
        &sq,
        1e-12,
        "none",
    );
    assert_eq!(
        mse_loss_with(&p, &t, Reduction::None).unwrap().shape(),
        &[3, 4]
    );
    let s: f64 = sq.iter().sum();
    close(
        &vals(&mse_loss_with(&p, &t, Reduction::Sum).unwrap()),
        &[s],
        1e-12,
        "sum",
    );
    close(
        &vals(&mse_loss_with(&p, &t, Reduction::Mean).unwrap()),
        &[s / 12.0],
        1e-12,
        "mean",
    );
    gradcheck("mse sum", &[leaf(&[3, 4], 72), leaf(&[3, 4], 73)], |x| {
        mse_loss_with(&x[0], &x[1], Reduction::Sum)
    });
}

#[test]
fn loss_options_gradcheck() {
    let _g = lock();
    let t = i64s(&[2, -100, 0, 1, 2], &[5]);
    let w = randn(&[3], DType::F64, 80)
        .abs()
        .unwrap()
        .add_scalar(0.1)
        .unwrap();
    for reduction in [Reduction::Mean, Reduction::Sum, Reduction::None] {
        gradcheck("cross_entropy options", &[leaf(&[5, 3], 81)], |x| {
            let opts = CrossEntropyOptions {
                reduction,
                ignore_index: Some(-100),
                weight: Some(&w),
                label_smoothing: 0.3,
            };
            cross_entropy_with(&x[0].t()?.contiguous()?.t()?, &t, &opts)
        });
    }
    let t3 = i64s(&[0, 2, 1, -100, 1, 1], &[2, 3]);
    gradcheck("cross_entropy [N, C, d]", &[leaf(&[2, 3, 3], 82)], |x| {
        let opts = CrossEntropyOptions {
            ignore_index: Some(-100),
            ..Default::default()
        };
        cross_entropy_with(&x[0], &t3, &opts)
    });
    let probs = randn(&[4, 3], DType::F64, 83).sigmoid().unwrap();
    let ew = randn(&[4, 1], DType::F64, 85).abs().unwrap();
    gradcheck("bce options", &[leaf(&[3, 4], 86), leaf(&[3], 87)], |x| {
        // The logits are a transposed leaf; pos_weight is a leaf too.
        let opts = BceWithLogitsOptions {
            reduction: Reduction::Sum,
            weight: Some(&ew),
            pos_weight: Some(&x[1]),
        };
        bce_with_logits_with(&x[0].t()?, &probs, &opts)
    });
}

#[test]
fn loss_option_errors_name_the_op() {
    let _g = lock();
    let x = f64s(&LOGITS, &[4, 3]);
    let t = i64s(&TARGETS, &[4]);
    // The default ignores nothing: -100 is out of range, as before.
    assert!(matches!(
        assert_err_names(cross_entropy(&x, &t), "cross_entropy"),
        Error::IndexOutOfRange {
            index: -100,
            size: 3,
            ..
        }
    ));
    let ig = CrossEntropyOptions {
        ignore_index: Some(-100),
        ..Default::default()
    };
    let bad = i64s(&[0, 3, -100, 1], &[4]);
    assert!(matches!(
        assert_err_names(cross_entropy_with(&x, &bad, &ig), "cross_entropy"),
        Error::IndexOutOfRange { index: 3, .. }
    ));
    let bad = i64s(&[0, -1, -100, 1], &[4]);
    assert!(matches!(
        cross_entropy_with(&x, &bad, &ig),
        Err(Error::IndexOutOfRange { index: -1, .. })
    ));
    let w2 = f64s(&[1.0, 2.0], &[2]);
    let e = assert_err_names(
        cross_entropy_with(
            &x,
            &t,
            &CrossEntropyOptions {
                weight: Some(&w2),
                ..ig
            },
        ),
        "cross_entropy",
    );
    assert!(
        matches!(e, Error::ShapeMismatch { .. }) && e.to_string().contains("[2]"),
        "{e}"
    );
    let w32 = Tensor::ones(&[3], DType::F32, CPU).unwrap();
    assert!(matches!(
        assert_err_names(
            cross_entropy_with(
                &x,
                &t,
                &CrossEntropyOptions {
                    weight: Some(&w32),
                    ..ig
                }
            ),
            "cross_entropy"
        ),
        Error::DTypeMismatch { .. }
    ));
    assert!(matches!(
        assert_err_names(
            cross_entropy_with(
                &x,
                &t,
                &CrossEntropyOptions {
                    label_smoothing: 1.5,
                    ..ig
                }
            ),
            "cross_entropy"
        ),
        Error::InvalidArgument { .. }
    ));
    let x3 = Tensor::zeros(&[2, 3, 4], DType::F64, CPU).unwrap();
    assert!(matches!(
        assert_err_names(
            cross_entropy_with(&x3, &i64s(&[0; 6], &[2, 3]), &ig),
            "cross_entropy"
        ),
        Error::ShapeMismatch { .. }
    ));
    let xi = Tensor::zeros(&[4, 3], DType::I64, CPU).unwrap();
    assert!(matches!(
        assert_err_names(cross_entropy(&xi, &i64s(&[0; 4], &[4])), "cross_entropy"),
        Error::DTypeMismatch { .. }
    ));
    // BCE: a pos_weight that does not broadcast to the logits, another dtype,
    // integer logits.
    let b = Tensor::zeros(&[2, 3], DType::F64, CPU).unwrap();
    let pw = f64s(&[1.0, 2.0], &[2]);
    assert!(matches!(
        assert_err_names(
            bce_with_logits_with(
                &b,
                &b,
                &BceWithLogitsOptions {
                    pos_weight: Some(&pw),
                    ..Default::default()
                }
            ),
            "bce_with_logits"
        ),
        Error::ShapeMismatch { .. }
    ));
    let big = Tensor::ones(&[4, 2, 3], DType::F64, CPU).unwrap();
    assert!(matches!(
        assert_err_names(
            bce_with_logits_with(
                &b,
                &b,
                &BceWithLogitsOptions {
                    weight: Some(&big),
                    ..Default::default()
                }
            ),
            "bce_with_logits"
        ),
        Error::ShapeMismatch { .. }
    ));
    let pw32 = Tensor::ones(&[3], DType::F32, CPU).unwrap();
    assert!(matches!(
        assert_err_names(
            bce_with_logits_with(
                &b,
                &b,
                &BceWithLogitsOptions {
                    pos_weight: Some(&pw32),
                    ..Default::default()
                }
            ),
            "bce_with_logits"
        ),
        Error::DTypeMismatch { .. }
    ));
    let bi = Tensor::zeros(&[2, 3], DType::I64, CPU).unwrap();
    assert!(matches!(
        assert_err_names(bce_with_logits(&bi, &bi), "bce_with_logits"),
        Error::DTypeMismatch { .. }
    ));
    assert!(matches!(
        assert_err_names(
            mse_loss_with(&b, &b.t().unwrap(), Reduction::Sum),
            "mse_loss"
        ),
        Error::ShapeMismatch { .. }
    ));
}
