//! Cross-entropy with probability targets against PyTorch.

use super::*;

#[test]
fn pytorch_cross_entropy_probability_targets() {
    let _g = lock();
    let probs = [0.7, 0.2, 0.1, 0.0, 0.5, 0.5, 1.0, 0.0, 0.0, 0.25, 0.25, 0.5];
    let w = f64s(&CLASS_W, &[3]);
    let cases: [CeCase; 3] = [
        (
            "probs mean",
            false,
            0.0,
            Reduction::Mean,
            &CEP_MEAN,
            &CEP_MEAN_GRAD,
        ),
        (
            "probs weight smooth mean",
            true,
            0.2,
            Reduction::Mean,
            &CEP_W_SMOOTH_MEAN,
            &CEP_W_SMOOTH_MEAN_GRAD,
        ),
        (
            "probs weight none",
            true,
            0.0,
            Reduction::None,
            &CEP_W_NONE,
            &CEP_W_NONE_GRAD,
        ),
    ];
    for (what, weighted, ls, reduction, want, want_grad) in cases {
        let f = |x: &Tensor| {
            let dt = x.dtype();
            let w = if weighted {
                Some(w.to_dtype(dt)?)
            } else {
                None
            };
            let opts = CrossEntropyOptions {
                reduction,
                ignore_index: Some(-100), // PyTorch's default: allowed with probabilities
                weight: w.as_ref(),
                label_smoothing: ls,
            };
            cross_entropy_with(x, &strided(&probs, &[4, 3]).to_dtype(dt)?, &opts)
        };
        check_against_torch(what, &LOGITS, &[4, 3], &f, want, want_grad);
    }
    let logits3 = [
        0.1, -0.3, 1.2, 0.4, -0.5, 2.2, 0.0, 0.7, -1.1, 0.3, 0.6, -0.2,
    ];
    let p3 = f64s(&logits3, &[2, 3, 2])
        .mul_scalar(1.7)
        .unwrap()
        .softmax(1)
        .unwrap();
    let f = |x: &Tensor| {
        let w = w.to_dtype(x.dtype())?;
        let opts = CrossEntropyOptions {
            weight: Some(&w),
            reduction: Reduction::Sum,
            ..Default::default()
        };
        cross_entropy_with(x, &p3.to_dtype(x.dtype())?, &opts)
    };
    check_against_torch(
        "probs [N, C, d] sum",
        &logits3,
        &[2, 3, 2],
        &f,
        &CEP3_SUM,
        &CEP3_SUM_GRAD,
    );
    gradcheck(
        "cross_entropy probabilities",
        &[leaf(&[4, 3], 88), leaf(&[4, 3], 89)],
        |x| {
            let opts = CrossEntropyOptions {
                label_smoothing: 0.1,
                ..Default::default()
            };
            cross_entropy_with(&x[0], &x[1].softmax(1)?, &opts)
        },
    );
    // Errors: another shape, another float dtype, an ignore_index that names a class.
    let x = f64s(&LOGITS, &[4, 3]);
    let e = assert_err_names(
        cross_entropy(&x, &Tensor::zeros(&[4, 2], DType::F64, CPU).unwrap()),
        "cross_entropy",
    );
    assert!(
        matches!(e, Error::ShapeMismatch { .. }) && e.to_string().contains("[4, 2]"),
        "{e}"
    );
    let e = assert_err_names(
        cross_entropy(&x, &Tensor::zeros(&[4, 3], DType::F32, CPU).unwrap()),
        "cross_entropy",
    );
    assert!(matches!(e, Error::DTypeMismatch { .. }), "{e}");
    let opts = CrossEntropyOptions {
        ignore_index: Some(1),
        ..Default::default()
    };
    let e = assert_err_names(
        cross_entropy_with(&x, &x.softmax(1).unwrap(), &opts),
        "cross_entropy",
    );
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
}
