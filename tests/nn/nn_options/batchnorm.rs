//! BatchNorm1d on [N, C, L] with its options, against PyTorch and a naive reference.

use super::*;

const BN_X1: [f64; 24] = [
    0.5, 1.0, -0.5, 2.0, 1.0, 1.5, 0.0, -1.0, -1.0, 0.0, 0.25, 1.5, 2.0, 2.5, 3.0, 0.5, 0.75,
    -0.25, 1.25, 0.0, -0.5, 1.0, 1.5, 2.0,
];
const BN_X2: [f64; 16] = [
    1.5, -2.0, 0.5, 0.0, 0.0, 0.5, 1.0, 1.5, 0.25, 0.5, -1.0, 2.5, 1.0, -1.0, 2.0, 3.0,
];

fn bn_with(opts: BatchNormOptions) -> BatchNorm1d {
    let mut bn = BatchNorm1d::with_config(2, opts, DType::F64, CPU).unwrap();
    if opts.affine {
        bn.weight = Some(f64s(&[1.5, -0.5], &[2]).requires_grad_(true).unwrap());
        bn.bias = Some(f64s(&[0.25, 1.0], &[2]).requires_grad_(true).unwrap());
    }
    bn
}

#[test]
fn pytorch_batchnorm1d_sequences_and_options() {
    let _g = lock();
    for (what, momentum, y2, rm, rv, ey) in [
        (
            "momentum 0.1",
            Some(0.1),
            &BN_M01_TRAIN_Y2,
            &BN_M01_RUNNING_MEAN,
            &BN_M01_RUNNING_VAR,
            &BN_M01_EVAL_Y,
        ),
        (
            "momentum None",
            None,
            &BN_CUMUL_TRAIN_Y2,
            &BN_CUMUL_RUNNING_MEAN,
            &BN_CUMUL_RUNNING_VAR,
            &BN_CUMUL_EVAL_Y,
        ),
    ] {
        let mut bn = bn_with(BatchNormOptions {
            momentum,
            ..Default::default()
        });
        bn.forward(&strided(&BN_X1, &[3, 2, 4])).unwrap();
        let y = bn.forward(&strided(&BN_X2, &[2, 2, 4])).unwrap();
        assert_eq!(y.shape(), &[2, 2, 4]);
        close(&vals(&y), y2, 1e-12, what);
        close(&vals(bn.running_mean.as_ref().unwrap()), rm, 1e-12, what);
        close(&vals(bn.running_var.as_ref().unwrap()), rv, 1e-12, what);
        assert_eq!(
            bn.num_batches_tracked
                .as_ref()
                .unwrap()
                .item::<i64>()
                .unwrap(),
            2
        );
        bn.eval();
        close(
            &vals(&bn.forward(&strided(&BN_X1, &[3, 2, 4])).unwrap()),
            ey,
            1e-12,
            what,
        );
    }
    // No running statistics: no buffers, batch statistics in eval too.
    let mut bn = bn_with(BatchNormOptions {
        affine: false,
        track_running_stats: false,
        ..Default::default()
    });
    assert!(bn.named_parameters().is_empty());
    assert!(bn.named_parameters_mut().is_empty());
    assert!(bn.running_mean.is_none() && bn.weight.is_none());
    bn.eval();
    let y = bn.forward(&strided(&BN_X2, &[2, 2, 4])).unwrap();
    close(
        &vals(&y),
        &BN_NOTRACK_EVAL_Y,
        1e-12,
        "no running stats, eval",
    );
    // affine without tracking: parameters only.
    let bn = bn_with(BatchNormOptions {
        track_running_stats: false,
        ..Default::default()
    });
    let names: Vec<String> = bn.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["weight", "bias"]);
}

/// [N, C, L] against a naive reference: statistics per channel over N and L.
#[test]
fn batchnorm1d_sequence_matches_naive_and_gradchecks() {
    let _g = lock();
    let bn = BatchNorm1d::with_options(3, 1e-5, 0.1, DType::F64, CPU).unwrap();
    // [N = 2, C = 3, L = 5] stored as [L, C, N]: non-contiguous.
    let x = randn(&[5, 3, 2], DType::F64, 90)
        .permute(&[2, 1, 0])
        .unwrap();
    assert_eq!(x.shape(), &[2, 3, 5]);
    let xv = vals(&x);
    let y = vals(&bn.forward(&x).unwrap());
    let mut rm = [0.0; 3];
    let mut rv = [1.0; 3];
    for c in 0..3 {
        let at = |n: usize, l: usize| n * 15 + c * 5 + l;
        let all: Vec<f64> = (0..2)
            .flat_map(|n| (0..5).map(move |l| (n, l)))
            .map(|(n, l)| xv[at(n, l)])
            .collect();
        let m = all.iter().sum::<f64>() / 10.0;
        let vb = all.iter().map(|a| (a - m).powi(2)).sum::<f64>() / 10.0;
        for n in 0..2 {
            for l in 0..5 {
                let r = (xv[at(n, l)] - m) / (vb + 1e-5).sqrt();
                assert!((y[at(n, l)] - r).abs() < 1e-9, "train normalisation");
            }
        }
        rm[c] = 0.1 * m;
        rv[c] = 0.9 + 0.1 * vb * 10.0 / 9.0;
    }
    close(
        &vals(bn.running_mean.as_ref().unwrap()),
        &rm,
        1e-12,
        "running_mean [N, C, L]",
    );
    close(
        &vals(bn.running_var.as_ref().unwrap()),
        &rv,
        1e-12,
        "running_var [N, C, L]",
    );
    // One value per channel in training is an error; [1, C, 3] is not.
    assert!(bn.forward(&randn(&[1, 3, 3], DType::F64, 91)).is_ok());
    let e = assert_err_names(
        bn.forward(&randn(&[1, 3, 1], DType::F64, 91)),
        "BatchNorm1d",
    );
    assert!(matches!(e, Error::InvalidArgument { .. }));
    let e = assert_err_names(
        bn.forward(&randn(&[2, 3, 4, 1], DType::F64, 91)),
        "BatchNorm1d",
    );
    assert!(matches!(e, Error::ShapeMismatch { .. }) && e.to_string().contains("[2, 3, 4, 1]"));
    let e = assert_err_names(
        bn.forward(&randn(&[2, 4, 5], DType::F64, 91)),
        "BatchNorm1d",
    );
    assert!(matches!(e, Error::ShapeMismatch { .. }));
    let e = assert_err_names(
        bn.forward(&randn(&[2, 3, 5], DType::F32, 91)),
        "BatchNorm1d",
    );
    assert!(matches!(e, Error::DTypeMismatch { .. }));
    assert!(matches!(
        BatchNorm1d::with_config(
            3,
            BatchNormOptions {
                momentum: Some(1.5),
                ..Default::default()
            },
            DType::F64,
            CPU
        ),
        Err(Error::InvalidArgument {
            op: "BatchNorm1d",
            ..
        })
    ));
    // Gradients through the batch statistics, for both layouts and without affine.
    let (w, b) = (leaf(&[3], 92), leaf(&[3], 93));
    gradcheck(
        "batchnorm1d [N, C, L] train",
        &[leaf(&[2, 3, 4], 94), w, b],
        |t| {
            let mut bn = BatchNorm1d::with_options(3, 1e-5, 0.1, DType::F64, CPU)?;
            bn.weight = Some(t[1].alias());
            bn.bias = Some(t[2].alias());
            bn.forward(&t[0].transpose(0, 2)?.transpose(0, 2)?)
        },
    );
    gradcheck("batchnorm1d no affine", &[leaf(&[4, 3, 2], 95)], |t| {
        let opts = BatchNormOptions {
            affine: false,
            ..Default::default()
        };
        BatchNorm1d::with_config(3, opts, DType::F64, CPU)?.forward(&t[0])
    });
    gradcheck(
        "batchnorm1d eval [N, C, L]",
        &[leaf(&[2, 3, 4], 96), leaf(&[3], 97)],
        |t| {
            let mut bn = BatchNorm1d::with_options(3, 1e-5, 0.1, DType::F64, CPU)?;
            bn.weight = Some(t[1].alias());
            bn.eval();
            bn.forward(&t[0])
        },
    );
}
