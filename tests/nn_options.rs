//! PyTorch's nn options, checked against numbers PyTorch 2.15 printed:
//! loss reductions, cross-entropy ignore_index / weight / label_smoothing /
//! probability targets, BCE-with-logits pos_weight / weight, BatchNorm1d on
//! [N, C, L] with its options, Embedding padding_idx / max_norm; gradchecks
//! and bad-input errors of each option.

mod common;

use common::grad::{assert_err_names, close, gradcheck, leaf, randn, vals};
use common::CPU;
use std::sync::Mutex;
use tensorscope::nn::{bce_with_logits, cross_entropy, BatchNorm1d, Embedding, Module};
use tensorscope::{DType, Error, Tensor};

static LOCK: Mutex<()> = Mutex::new(());
fn lock() -> std::sync::MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

// ---------------------------------------------------------------------------
// PyTorch's options: reductions, cross-entropy ignore_index / weight /
// label_smoothing, BCE pos_weight / weight, BatchNorm1d on [N, C, L] with
// momentum / momentum=None / affine / track_running_stats, Embedding
// padding_idx / max_norm. The expected numbers were produced by PyTorch
// 2.15 (CPU, f64) with tests/fixtures/nn_options.py (`python3
// tests/fixtures/nn_options.py` prints the `const` block at the end of this
// file); the inputs below are the script's literals.
// ---------------------------------------------------------------------------

use tensorscope::nn::{
    bce_with_logits_with, cross_entropy_with, mse_loss_with, BatchNormOptions,
    BceWithLogitsOptions, CrossEntropyOptions, EmbeddingOptions, Reduction,
};

/// `data` (row-major, of logical shape `shape`) as a non-contiguous tensor:
/// stored with its first two dims swapped, then transposed back.
fn strided(data: &[f64], shape: &[usize]) -> Tensor {
    let mut sw = shape.to_vec();
    sw.swap(0, 1);
    let inner: usize = shape[2..].iter().product();
    let (a, b) = (shape[0], shape[1]);
    let mut t = vec![0.0; data.len()];
    for i in 0..a {
        for j in 0..b {
            for k in 0..inner {
                t[(j * a + i) * inner + k] = data[(i * b + j) * inner + k];
            }
        }
    }
    let x = Tensor::from_slice(&t, &sw, CPU)
        .unwrap()
        .transpose(0, 1)
        .unwrap();
    assert!(!x.is_contiguous());
    x
}

fn strided_leaf(data: &[f64], shape: &[usize]) -> Tensor {
    strided(data, shape).requires_grad_(true).unwrap()
}

const LOGITS: [f64; 12] = [
    0.5, -1.25, 2.0, 1.5, 0.25, -0.75, -2.0, 0.0, 1.0, 0.3, 0.9, -0.4,
];
const TARGETS: [i64; 4] = [0, 2, -100, 1];
const CLASS_W: [f64; 3] = [0.2, 1.0, 2.5];

fn i64s(v: &[i64], shape: &[usize]) -> Tensor {
    Tensor::from_slice(v, shape, CPU).unwrap()
}

fn f64s(v: &[f64], shape: &[usize]) -> Tensor {
    Tensor::from_slice(v, shape, CPU).unwrap()
}

/// Runs `f` on a fresh non-contiguous leaf holding `data`, compares the
/// loss and the gradient of its sum with PyTorch's, in f64 (and the loss
/// in f32 too).
fn check_against_torch(
    what: &str,
    data: &[f64],
    shape: &[usize],
    f: &dyn Fn(&Tensor) -> tensorscope::Result<Tensor>,
    want: &[f64],
    want_grad: &[f64],
) {
    let x = strided_leaf(data, shape);
    let l = f(&x).unwrap();
    close(&vals(&l), want, 1e-12, what);
    l.sum_all().unwrap().backward().unwrap();
    close(
        &vals(&x.grad().unwrap()),
        want_grad,
        1e-12,
        &format!("{what} grad"),
    );
    // In f32 the loss matches too, unless an option tensor of the case is
    // f64 (a class weight, pos_weight): then the only acceptable answer is
    // the dtype error, never a silently skipped check.
    match f(&strided(data, shape).to_dtype(DType::F32).unwrap()) {
        Ok(l32) => close(&vals(&l32), want, 1e-5, &format!("{what} (f32)")),
        Err(e) => assert!(
            matches!(e, Error::DTypeMismatch { .. }),
            "{what} (f32): {e}"
        ),
    }
}

/// name, class weight?, label smoothing, reduction, loss, gradient.
type CeCase<'a> = (&'a str, bool, f64, Reduction, &'a [f64], &'a [f64]);
/// name, pos_weight?, weight?, reduction, loss, gradient.
type BceCase<'a> = (&'a str, bool, bool, Reduction, &'a [f64], &'a [f64]);

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

const EMB_W: [f64; 12] = [
    0.5, -1.0, 2.0, 1.0, 1.0, 1.0, -3.0, 0.0, 4.0, 0.1, 0.2, -0.2,
];
const EMB_IDX: [i64; 4] = [1, 2, 1, 0];
const EMB_GW: [f64; 12] = [
    1.0, 2.0, 3.0, 0.5, -1.0, 0.0, -2.0, 1.0, 1.0, 0.25, 0.5, 0.75,
];

fn emb_with(opts: EmbeddingOptions) -> Embedding {
    let mut e = Embedding::with_config(4, 3, opts, DType::F64, CPU).unwrap();
    e.weight = f64s(&EMB_W, &[4, 3]).requires_grad_(true).unwrap();
    e
}

#[test]
fn pytorch_embedding_padding_and_max_norm() {
    let _g = lock();
    let idx = i64s(&EMB_IDX, &[2, 2]);
    // padding_idx: a zero row at creation, and never a gradient.
    for p in [1isize, -3] {
        let e = Embedding::with_config(
            4,
            3,
            EmbeddingOptions {
                padding_idx: Some(p),
                ..Default::default()
            },
            DType::F64,
            CPU,
        )
        .unwrap();
        assert_eq!(e.padding_idx(), Some(1));
        assert_eq!(&vals(&e.weight)[3..6], &[0.0; 3]);
        assert!(vals(&e.weight)[..3].iter().any(|v| *v != 0.0));
    }
    let e = emb_with(EmbeddingOptions {
        padding_idx: Some(1),
        ..Default::default()
    });
    let y = e.forward(&idx).unwrap();
    assert_eq!(y.grad_fn_name(), Some("EmbeddingBackward"));
    // The forward still returns the padding row's current value (PyTorch).
    assert_eq!(&vals(&y)[0..3], &[1.0, 1.0, 1.0]);
    y.mul(&f64s(&EMB_GW, &[2, 2, 3]))
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    close(
        &vals(&e.weight.grad().unwrap()),
        &EMB_PAD_GRAD,
        0.0,
        "padding grad",
    );
    // max_norm: looked-up rows are renormalised in the weight.
    let e = emb_with(EmbeddingOptions {
        max_norm: Some(1.5),
        ..Default::default()
    });
    let y = e.forward(&idx).unwrap();
    close(&vals(&y), &EMB_MAXNORM_Y, 1e-12, "max_norm output");
    close(&vals(&e.weight), &EMB_MAXNORM_W, 1e-12, "max_norm weight");
    let e = emb_with(EmbeddingOptions {
        max_norm: Some(2.0),
        norm_type: 1.0,
        ..Default::default()
    });
    e.forward(&idx).unwrap();
    close(&vals(&e.weight), &EMB_MAXNORM_L1_W, 1e-12, "max_norm, L1");
    // Gradcheck of the lookup with a padding row (the weight is the input).
    let idx2 = i64s(&[3, 0, 0, 2, 3], &[5]);
    gradcheck("embedding padding_idx", &[leaf(&[4, 2], 98)], |t| {
        let mut e = Embedding::with_config(
            4,
            2,
            EmbeddingOptions {
                padding_idx: Some(0),
                ..Default::default()
            },
            DType::F64,
            CPU,
        )?;
        e.weight = t[0].alias();
        let y = e.forward(&idx2)?;
        // The padding row contributes to the output but gets no gradient:
        // finite differences see it, so mask it out of the checked function.
        y.mul(&idx2.ne_scalar(0.0)?.to_dtype(DType::F64)?.unsqueeze(1)?)
    });
    // Bad options.
    assert!(matches!(
        Embedding::with_config(
            4,
            3,
            EmbeddingOptions {
                padding_idx: Some(4),
                ..Default::default()
            },
            DType::F64,
            CPU
        ),
        Err(Error::IndexOutOfRange {
            op: "Embedding",
            index: 4,
            size: 4,
            ..
        })
    ));
    assert!(matches!(
        Embedding::with_config(
            4,
            3,
            EmbeddingOptions {
                padding_idx: Some(-5),
                ..Default::default()
            },
            DType::F64,
            CPU
        ),
        Err(Error::IndexOutOfRange {
            op: "Embedding",
            index: -5,
            ..
        })
    ));
    assert!(matches!(
        Embedding::with_config(
            4,
            3,
            EmbeddingOptions {
                max_norm: Some(-1.0),
                ..Default::default()
            },
            DType::F64,
            CPU
        ),
        Err(Error::InvalidArgument {
            op: "Embedding",
            ..
        })
    ));
}

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

// Printed by tests/fixtures/nn_options.py (PyTorch 2.15, CPU, f64).
#[rustfmt::skip]
mod torch {
    pub const CE_IGNORE_MEAN: [f64; 1] = [1.6376229897244527];
    pub const CE_IGNORE_MEAN_GRAD: [f64; 12] = [-0.2743932726308519, 0.01024224677547881, 0.2641510258553731, 0.23948011371702163, 0.06861220133255051, -0.30809231504957213, 0.0, 0.0, 0.0, 0.10044081149425102, -0.1503182423831794, 0.04987743088892835];
    pub const CE_W_IGNORE_MEAN: [f64; 1] = [1.99940008021691];
    pub const CE_W_IGNORE_MEAN_GRAD: [f64; 12] = [-0.044496206372570575, 0.0016609048825100773, 0.0428353014900605, 0.4854326629399086, 0.13907878648489966, -0.6245114494248083, 0.0, 0.0, 0.0, 0.08143849580614947, -0.12187965598636166, 0.04044116018021217];
    pub const CE_W_IGNORE_SMOOTH_MEAN: [f64; 1] = [1.9440524355619602];
    pub const CE_W_IGNORE_SMOOTH_MEAN_GRAD: [f64; 12] = [-0.03168346901401548, -0.010565407347058126, 0.042248876361073606, 0.445837077853773, 0.11499528519853382, -0.5608323630523068, 0.0, 0.0, 0.0, 0.081586140456662, -0.08965895745939785, 0.008072817002735818];
    pub const CE_W_IGNORE_SMOOTH_SUM: [f64; 1] = [7.192994011579253];
    pub const CE_W_IGNORE_SMOOTH_SUM_GRAD: [f64; 12] = [-0.1172288353518573, -0.03909200718411506, 0.15632084253597234, 1.64959718805896, 0.4254825552345751, -2.0750797432935353, 0.0, 0.0, 0.0, 0.3018687196896494, -0.33173814259977213, 0.029869422910122522];
    pub const CE_W_IGNORE_SMOOTH_NONE: [f64; 4] = [0.5150808040012216, 5.888853727730687, 0.0, 0.7890594798473443];
    pub const CE_W_IGNORE_SMOOTH_NONE_GRAD: [f64; 12] = [-0.1172288353518573, -0.03909200718411506, 0.15632084253597234, 1.64959718805896, 0.4254825552345751, -2.0750797432935353, 0.0, 0.0, 0.0, 0.3018687196896494, -0.33173814259977213, 0.029869422910122522];
    pub const CE_IGNORE_SMOOTH_MEAN: [f64; 1] = [1.6131785452800083];
    pub const CE_IGNORE_SMOOTH_MEAN_GRAD: [f64; 12] = [-0.22994882818640744, -0.011979975446743415, 0.2419288036331508, 0.2172578914947994, 0.04638997911032829, -0.2636478706051277, 0.0, 0.0, 0.0, 0.07821858927202878, -0.10587379793873497, 0.027655208666706114];
    pub const CE_IGNORE_SUM: [f64; 1] = [4.912868969173358];
    pub const CE_IGNORE_SUM_GRAD: [f64; 12] = [-0.8231798178925557, 0.030726740326436432, 0.7924530775661193, 0.7184403411510649, 0.20583660399765155, -0.9242769451487165, 0.0, 0.0, 0.0, 0.3013224344827531, -0.4509547271495382, 0.14963229266678504];
    pub const CE_W_MEAN: [f64; 1] = [1.333921103019844];
    pub const CE_W_MEAN_GRAD: [f64; 12] = [-0.02655418767395341, 0.0009911851718205301, 0.02556300250213288, 0.28969368594801004, 0.08299863064421432, -0.37269231659222435, 0.014160897967475692, 0.10463566949291091, -0.11879656746038665, 0.04860039265850856, -0.07273463341121583, 0.024134240752707266];
    pub const CE3_NONE: [f64; 4] = [4.96078797394171, 0.593718035182516, 0.0, 1.1962584411103934];
    pub const CE3_NONE_GRAD: [f64; 12] = [0.5146039194297833, -0.1667055973344206, 1.5326500507002656, 0.006863324078483061, -2.0472539701300487, 0.15984227325593758, 0.0, 0.4860572996023376, 0.0, -0.6030505815810316, 0.0, 0.11699328197869421];
    pub const CE3_MEAN: [f64; 1] = [1.824530932495843];
    pub const CE3_MEAN_GRAD: [f64; 12] = [0.13908214038642794, -0.04505556684714071, 0.4142297434325042, 0.0018549524536440693, -0.553311883818932, 0.043200614393496636, 0.0, 0.13136683773036148, 0.0, -0.16298664367054908, 0.0, 0.03161980594018761];
    pub const BCE_POS_MEAN: [f64; 1] = [0.5076831397945948];
    pub const BCE_POS_MEAN_GRAD: [f64; 6] = [0.00790431219626113, -0.03146172239984545, 0.09381943994576077, 0.0, 0.07297058318570032, -0.029419664986332195];
    pub const BCE_POS_W_SUM: [f64; 1] = [4.260604621171924];
    pub const BCE_POS_W_SUM_GRAD: [f64; 6] = [0.04742587317756678, -0.1887703343990727, 0.5629166396745646, 0.0, 0.8756469982284039, -0.35303597983598634];
    pub const BCE_POS_W_NONE: [f64; 6] = [0.048587351573742055, 0.23703849209005334, 1.5459672126994182, 2.5490125531749533e-17, 1.1518788397576871, 1.2771327250510238];
    pub const BCE_POS_W_NONE_GRAD: [f64; 6] = [0.04742587317756678, -0.1887703343990727, 0.5629166396745646, 0.0, 0.8756469982284039, -0.35303597983598634];
    pub const BCE_W_MEAN: [f64; 1] = [0.704665760265159];
    pub const BCE_W_MEAN_GRAD: [f64; 6] = [0.00790431219626113, -0.0629234447996909, 0.09679951299631373, 0.0, 0.14594116637140064, -0.022980473789998384];
    pub const BN_M01_TRAIN_Y2: [f64; 16] = [1.6609662777974858, -2.3910394430568327, 0.5032503575533949, -0.0756076025686506, 1.4364341178689883, 1.2182170589344943, 1.0, 0.7817829410655059, 0.21382137749237215, 0.5032503575533949, -1.2333235228127415, 2.818682198041577, 1.0, 1.8728682357379767, 0.5635658821310118, 0.1271317642620235];
    pub const BN_M01_RUNNING_MEAN: [f64; 2] = [0.069375, 0.20125];
    pub const BN_M01_RUNNING_VAR: [f64; 2] = [1.0712276785714285, 1.0914204545454547];
    pub const BN_M01_EVAL_Y: [f64; 24] = [0.8740905096722479, 1.5987239026153512, -0.5751762762139591, 3.0479906885015584, 0.6177188871856696, 0.37841928604993846, 1.0963180894571318, 1.574917291728594, -1.2998096691570626, 0.14945711672914438, 0.5117738132006961, 2.3233572955584547, 0.13911968491420734, -0.10017991622152378, -0.3394795173572549, 0.8570184883214007, 1.2364072061437996, -0.21285957974240735, 1.961040599086903, 0.14945711672914438, 1.335617690592863, 0.6177188871856696, 0.37841928604993846, 0.13911968491420734];
    pub const BN_CUMUL_TRAIN_Y2: [f64; 16] = [1.6609662777974858, -2.3910394430568327, 0.5032503575533949, -0.0756076025686506, 1.4364341178689883, 1.2182170589344943, 1.0, 0.7817829410655059, 0.21382137749237215, 0.5032503575533949, -1.2333235228127415, 2.818682198041577, 1.0, 1.8728682357379767, 0.5635658821310118, 0.1271317642620235];
    pub const BN_CUMUL_RUNNING_MEAN: [f64; 2] = [0.36979166666666663, 1.0625];
    pub const BN_CUMUL_RUNNING_VAR: [f64; 2] = [1.3446800595238095, 1.4801136363636362];
    pub const BN_CUMUL_EVAL_Y: [f64; 24] = [0.4184298034387639, 1.065200248643617, -0.8751110869709422, 2.358741139053323, 1.0256862688980295, 0.8201961177137937, 1.4366665712665008, 1.847646873634972, -1.5218815321757952, -0.22834064176608918, 0.09504458083633735, 1.71197069384847, 0.614705966529558, 0.4092158153453223, 0.20372566416108662, 1.231176420082265, 0.7418150260411904, -0.5517258643685157, 1.3885854712460435, -0.22834064176608918, 1.6421567224507365, 1.0256862688980295, 0.8201961177137937, 0.614705966529558];
    pub const BN_NOTRACK_EVAL_Y: [f64; 16] = [0.9406441851983238, -1.7606929620378882, 0.16883357170226326, -0.21707173504576704, -0.8728682357379766, -0.4364341178689883, 0.0, 0.4364341178689883, -0.02411908167175189, 0.16883357170226326, -0.9888823485418277, 1.7124547986943846, 0.0, -1.7457364714759531, 0.8728682357379766, 1.7457364714759531];
    pub const EMB_PAD_GRAD: [f64; 12] = [0.25, 0.5, 0.75, 0.0, 0.0, 0.0, 0.5, -1.0, 0.0, 0.0, 0.0, 0.0];
    pub const EMB_MAXNORM_Y: [f64; 12] = [0.8660253537844416, 0.8660253537844416, 0.8660253537844416, -0.8999999820000003, 0.0, 1.1999999760000004, 0.8660253537844416, 0.8660253537844416, 0.8660253537844416, 0.32732682106827493, -0.6546536421365499, 1.3093072842730997];
    pub const EMB_MAXNORM_W: [f64; 12] = [0.32732682106827493, -0.6546536421365499, 1.3093072842730997, 0.8660253537844416, 0.8660253537844416, 0.8660253537844416, -0.8999999820000003, 0.0, 1.1999999760000004, 0.1, 0.2, -0.2];
    pub const EMB_MAXNORM_L1_W: [f64; 12] = [0.28571427755102063, -0.5714285551020413, 1.1428571102040825, 0.6666666444444452, 0.6666666444444452, 0.6666666444444452, -0.8571428448979593, 0.0, 1.1428571265306124, 0.1, 0.2, -0.2];
    pub const CEP_MEAN: [f64; 1] = [2.1904702964853864];
    pub const CEP_MEAN_GRAD: [f64; 12] = [-0.1307949544731389, -0.042318314918390894, 0.1731132693915298, 0.17961008528776623, -0.0735408490005871, -0.10606923628717913, -0.24122024326016506, 0.06487411508560477, 0.17634612817456027, 0.012830608620688272, 0.07476131821261545, -0.08759192683330375];
    pub const CEP_W_SMOOTH_MEAN: [f64; 1] = [2.0033293592015617];
    pub const CEP_W_SMOOTH_MEAN_GRAD: [f64; 12] = [0.00043535938530416115, -0.051146095654683595, 0.05071073626937942, 0.29242460710718843, -0.031930598020966774, -0.2604940090862216, -0.03976289892580046, 0.009715473468145937, 0.030047425457654507, 0.09865817148275657, 0.13739515974275499, -0.23605333122551156];
    pub const CEP_W_NONE: [f64; 4] = [0.9972469700301992, 4.016177066462642, 0.6698024433536374, 2.5843402838293565];
    pub const CEP_W_NONE_GRAD: [f64; 12] = [-0.03567609255660786, -0.1818712232074025, 0.21754731576401035, 1.2572705970143636, -0.1397859430041098, -1.1174846540102539, -0.19297619460813206, 0.051899292068483815, 0.14107690253964822, 0.41704977344826727, 0.6010201729182157, -1.018069946366483];
    pub const CEP3_SUM: [f64; 1] = [3.2882997940742005];
    pub const CEP3_SUM_GRAD: [f64; 12] = [0.18690453789681213, 0.15542983875024904, -0.18860898621089953, 0.27422546150437466, 0.0017044483140874977, -0.4296553002546234, 0.5371883352349787, 0.2326418576182827, 0.1565220399247359, -0.06025978105681683, -0.6937103751597146, -0.17238207656146579];
}
use torch::*;
