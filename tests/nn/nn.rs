//! Layers, initialisation and losses: forward against naive f64 references
//! (with non-contiguous inputs), train/eval behaviour, running statistics,
//! gradchecks in f64 and bad-input errors. PyTorch's layer and loss options
//! are in tests/nn/nn_options/.

use crate::common;

use common::grad::{assert_err_names, close, gradcheck, leaf, randn, vals};
use common::CPU;
use tensorscope::nn::{
    bce_with_logits, cross_entropy, init, mse_loss, BatchNorm1d, Dropout, Embedding, LayerNorm,
    Linear, Module, ReLU, Sigmoid, Tanh, GELU,
};
use tensorscope::{autograd, DType, Error, Tensor};
fn lock() -> crate::common::Guard {
    crate::common::serial()
}

/// `erf` by its Taylor series (accurate to ~1e-12 for |x| <= 3).
fn erf(x: f64) -> f64 {
    let mut sum = 0.0;
    let mut term = x; // (-1)^n x^(2n+1) / n!
    for n in 0..200 {
        sum += term / (2 * n + 1) as f64;
        term *= -x * x / (n + 1) as f64;
    }
    sum * 2.0 / std::f64::consts::PI.sqrt()
}

#[test]
fn linear_forward_matches_naive_on_strided_inputs() {
    let _g = lock();
    for dtype in [DType::F32, DType::F64] {
        let lin = Linear::with_options(5, 3, true, dtype, CPU).unwrap();
        // A transposed (non-contiguous) input of logical shape [4, 5].
        let x = randn(&[5, 4], dtype, 1).t().unwrap();
        assert!(!x.is_contiguous());
        let y = lin.forward(&x).unwrap();
        assert_eq!(y.shape(), &[4, 3]);
        let (xv, wv, bv) = (
            vals(&x),
            vals(&lin.weight),
            vals(lin.bias.as_ref().unwrap()),
        );
        let mut r = vec![0.0; 12];
        for i in 0..4 {
            for o in 0..3 {
                r[i * 3 + o] = bv[o] + (0..5).map(|k| xv[i * 5 + k] * wv[o * 5 + k]).sum::<f64>();
            }
        }
        close(&vals(&y), &r, 1e-5, "linear");
        // A rank-3 input, and no bias.
        let nb = Linear::with_options(5, 3, false, dtype, CPU).unwrap();
        let x3 = randn(&[2, 2, 5], dtype, 2);
        let y3 = nb.forward(&x3).unwrap();
        assert_eq!(y3.shape(), &[2, 2, 3]);
        let (xv, wv) = (vals(&x3), vals(&nb.weight));
        let r: Vec<f64> = (0..4)
            .flat_map(|i| {
                let xv = &xv;
                let wv = &wv;
                (0..3).map(move |o| (0..5).map(|k| xv[i * 5 + k] * wv[o * 5 + k]).sum::<f64>())
            })
            .collect();
        close(&vals(&y3), &r, 1e-5, "linear no bias");
        assert_eq!(nb.named_parameters().len(), 1);
    }
}

#[test]
fn linear_init_is_pytorch_default() {
    let _g = lock();
    let lin = Linear::new(64, 256).unwrap();
    assert_eq!(lin.weight.shape(), &[256, 64]);
    assert!(lin.weight.requires_grad() && lin.weight.is_leaf());
    let bound = 1.0 / 8.0;
    let w = vals(&lin.weight);
    assert!(w.iter().all(|v| v.abs() <= bound), "weight out of bounds");
    let max = w.iter().cloned().fold(f64::MIN, f64::max);
    let min = w.iter().cloned().fold(f64::MAX, f64::min);
    assert!(
        max > 0.95 * bound && min < -0.95 * bound,
        "not uniform over the bound: {min} {max}"
    );
    let mean = w.iter().sum::<f64>() / w.len() as f64;
    let var = w.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / w.len() as f64;
    assert!(mean.abs() < 0.01, "mean {mean}");
    // U(-b, b) has variance b^2 / 3.
    assert!(
        (var - bound * bound / 3.0).abs() < 0.1 * bound * bound / 3.0,
        "var {var}"
    );
    let b = vals(lin.bias.as_ref().unwrap());
    assert!(b.iter().all(|v| v.abs() <= bound));
    assert!(b.iter().any(|v| v.abs() > 0.5 * bound));
    assert!((init::kaiming_bound(5f64.sqrt(), 64) - bound).abs() < 1e-15);
    assert_eq!(init::fan_in_and_fan_out(&lin.weight).unwrap(), (64, 256));
    let e = init::fan_in_and_fan_out(&Tensor::zeros(&[3], DType::F32, CPU).unwrap()).unwrap_err();
    assert!(matches!(
        e,
        Error::InvalidArgument {
            op: "fan_in_and_fan_out",
            ..
        }
    ));
    // Embedding: N(0, 1).
    let emb = Embedding::new(200, 50).unwrap();
    let v = vals(&emb.weight);
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64;
    assert!(
        mean.abs() < 0.05 && (var - 1.0).abs() < 0.05,
        "embedding init {mean} {var}"
    );
}

#[test]
fn activations_match_naive() {
    let _g = lock();
    type F = fn(f64) -> f64;
    let cases: [(&str, Box<dyn Module>, F); 4] = [
        ("relu", Box::new(ReLU), |x| x.max(0.0)),
        ("gelu", Box::new(GELU), |x| {
            0.5 * x * (1.0 + erf(x / 2f64.sqrt()))
        }),
        ("sigmoid", Box::new(Sigmoid), |x| 1.0 / (1.0 + (-x).exp())),
        ("tanh", Box::new(Tanh), |x| x.tanh()),
    ];
    for dtype in [DType::F32, DType::F64] {
        for (name, m, f) in &cases {
            // Sliced with a step: not contiguous.
            let x = randn(&[6, 8], dtype, 3).slice(1, 0, 8, 2).unwrap();
            let r: Vec<f64> = vals(&x).into_iter().map(f).collect();
            let y = m.forward(&x).unwrap();
            close(&vals(&y), &r, 1e-5, name);
            assert!(
                !y.shares_storage(&x),
                "{name}: a borrowed input is never written"
            );
            // Owned, unique, no grad: written in place.
            let x = randn(&[6, 4], dtype, 4);
            let ptr = x.data_ptr();
            let r: Vec<f64> = vals(&x).into_iter().map(f).collect();
            let y = m.forward_owned(x).unwrap();
            assert_eq!(y.data_ptr(), ptr, "{name}: in place");
            close(&vals(&y), &r, 1e-5, name);
            // Owned but aliased: the alias keeps its values.
            let x = randn(&[6, 4], dtype, 5);
            let keep = x.alias();
            let before = vals(&keep);
            let y = m.forward_owned(x).unwrap();
            assert_eq!(vals(&keep), before, "{name}: alias untouched");
            assert!(!y.shares_storage(&keep));
            // Owned, unique, strided (the base is gone): written in place.
            let x = randn(&[6, 8], dtype, 6).slice(1, 0, 8, 2).unwrap();
            assert!(!x.is_contiguous());
            let ptr = x.data_ptr();
            let r: Vec<f64> = vals(&x).into_iter().map(f).collect();
            let y = m.forward_owned(x).unwrap();
            assert_eq!(y.data_ptr(), ptr, "{name}: strided, in place");
            close(&vals(&y), &r, 1e-5, name);
        }
    }
    // Reduced precision: same function within the dtype's resolution.
    for dtype in [DType::F16, DType::BF16] {
        for (name, m, f) in &cases {
            let x = randn(&[4, 6], dtype, 7).t().unwrap();
            let r: Vec<f64> = vals(&x).into_iter().map(f).collect();
            close(&vals(&m.forward(&x).unwrap()), &r, 2e-2, name);
            let y = m.forward_owned(x.deep_clone().unwrap()).unwrap();
            close(&vals(&y), &r, 2e-2, name);
        }
    }
}

#[test]
fn dropout_train_and_eval() {
    let _g = lock();
    tensorscope::manual_seed(7);
    let mut d = Dropout::new(0.3).unwrap();
    assert!(d.is_training());
    let x = Tensor::full(&[20000], 2.0, DType::F32, CPU).unwrap();
    let y = vals(&d.forward(&x).unwrap());
    let zeros = y.iter().filter(|v| **v == 0.0).count();
    assert!(
        y.iter().all(|v| *v == 0.0 || (v - 2.0 / 0.7).abs() < 1e-5),
        "kept values are scaled by 1/(1-p)"
    );
    let frac = zeros as f64 / y.len() as f64;
    assert!((frac - 0.3).abs() < 0.02, "drop fraction {frac}");
    // In place on a donated buffer in training mode: same values rule.
    let x = Tensor::full(&[1000], 1.0, DType::F32, CPU).unwrap();
    let ptr = x.data_ptr();
    let y = d.forward_owned(x).unwrap();
    assert_eq!(y.data_ptr(), ptr);
    assert!(vals(&y)
        .iter()
        .all(|v| *v == 0.0 || (v - 1.0 / 0.7).abs() < 1e-6));
    // Eval: identity, no copy.
    d.eval();
    assert!(!d.is_training());
    let x = randn(&[4, 5], DType::F32, 8);
    let y = d.forward(&x).unwrap();
    assert_eq!(vals(&y), vals(&x));
    let ptr = x.data_ptr();
    assert_eq!(d.forward_owned(x).unwrap().data_ptr(), ptr);
    // p = 1 zeroes everything; p = 0 is the identity.
    let d1 = Dropout::new(1.0).unwrap();
    assert!(vals(
        &d1.forward(&Tensor::ones(&[10], DType::F64, CPU).unwrap())
            .unwrap()
    )
    .iter()
    .all(|v| *v == 0.0));
    let d0 = Dropout::new(0.0).unwrap();
    assert_eq!(
        vals(
            &d0.forward(&Tensor::ones(&[10], DType::F64, CPU).unwrap())
                .unwrap()
        ),
        vec![1.0; 10]
    );
    // Gradient: mask / (1 - p), where the output is non-zero.
    let xl = Tensor::full(&[500], 1.5, DType::F64, CPU)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let out = d0.forward(&xl).unwrap();
    drop(out);
    let d = Dropout::new(0.5).unwrap();
    let out = d.forward(&xl).unwrap();
    out.sum_all().unwrap().backward().unwrap();
    let (o, g) = (vals(&out), vals(&xl.grad().unwrap()));
    for (o, g) in o.iter().zip(&g) {
        assert_eq!(*g, if *o == 0.0 { 0.0 } else { 2.0 });
    }
    for p in [-0.1, 1.5, f64::NAN] {
        assert!(matches!(
            Dropout::new(p),
            Err(Error::InvalidArgument { op: "Dropout", .. })
        ));
    }
    let e = Dropout::new(0.5)
        .unwrap()
        .forward(&Tensor::ones(&[2], DType::I64, CPU).unwrap())
        .unwrap_err();
    assert!(matches!(e, Error::DTypeMismatch { op: "Dropout", .. }));
}

fn naive_layernorm(x: &[f64], group: usize, w: &[f64], b: &[f64]) -> Vec<f64> {
    let mut out = Vec::new();
    for row in x.chunks(group) {
        let m = row.iter().sum::<f64>() / group as f64;
        let v = row.iter().map(|a| (a - m).powi(2)).sum::<f64>() / group as f64;
        for (j, a) in row.iter().enumerate() {
            out.push((a - m) / (v + 1e-5).sqrt() * w[j] + b[j]);
        }
    }
    out
}

#[test]
fn layernorm_forward_and_gradcheck() {
    let _g = lock();
    for dtype in [DType::F32, DType::F64] {
        let mut ln = LayerNorm::with_options(&[3, 4], 1e-5, dtype, CPU).unwrap();
        assert_eq!(vals(&ln.weight), vec![1.0; 12]);
        assert_eq!(vals(&ln.bias), vec![0.0; 12]);
        ln.weight = randn(&[3, 4], dtype, 10).requires_grad_(true).unwrap();
        ln.bias = randn(&[3, 4], dtype, 11).requires_grad_(true).unwrap();
        // [2, 3, 4] from a permuted tensor: not contiguous.
        let x = randn(&[4, 3, 2], dtype, 12).permute(&[2, 1, 0]).unwrap();
        let y = ln.forward(&x).unwrap();
        let r = naive_layernorm(&vals(&x), 12, &vals(&ln.weight), &vals(&ln.bias));
        close(&vals(&y), &r, 1e-4, "layernorm");
    }
    let x = leaf(&[3, 5], 13);
    let w = leaf(&[5], 14);
    let b = leaf(&[5], 15);
    gradcheck("layernorm", &[x, w, b], |t| {
        let mut ln = LayerNorm::with_options(&[5], 1e-5, DType::F64, CPU)?;
        ln.weight = t[1].alias();
        ln.bias = t[2].alias();
        ln.forward(&t[0])
    });
    let ln = LayerNorm::new(&[4]).unwrap();
    let e = assert_err_names(
        ln.forward(&Tensor::zeros(&[2, 3], DType::F32, CPU).unwrap()),
        "LayerNorm",
    );
    assert!(matches!(e, Error::ShapeMismatch { .. }));
    assert!(matches!(
        LayerNorm::new(&[]),
        Err(Error::InvalidArgument {
            op: "LayerNorm",
            ..
        })
    ));
}

#[test]
fn batchnorm_train_eval_and_running_stats() {
    let _g = lock();
    let mut bn = BatchNorm1d::with_options(3, 1e-5, 0.1, DType::F64, CPU).unwrap();
    let mut rm = vec![0.0; 3];
    let mut rv = vec![1.0; 3];
    for step in 0..3u64 {
        // Transposed: [5, 3] not contiguous.
        let x = randn(&[3, 5], DType::F64, 20 + step).t().unwrap();
        let xv = vals(&x);
        let y = vals(&bn.forward(&x).unwrap());
        for c in 0..3 {
            let col: Vec<f64> = (0..5).map(|i| xv[i * 3 + c]).collect();
            let m = col.iter().sum::<f64>() / 5.0;
            let vb = col.iter().map(|a| (a - m).powi(2)).sum::<f64>() / 5.0;
            for i in 0..5 {
                let r = (col[i] - m) / (vb + 1e-5).sqrt();
                assert!((y[i * 3 + c] - r).abs() < 1e-9, "train normalisation");
            }
            rm[c] = 0.9 * rm[c] + 0.1 * m;
            rv[c] = 0.9 * rv[c] + 0.1 * vb * 5.0 / 4.0;
        }
        close(
            &vals(bn.running_mean.as_ref().unwrap()),
            &rm,
            1e-12,
            "running_mean",
        );
        close(
            &vals(bn.running_var.as_ref().unwrap()),
            &rv,
            1e-12,
            "running_var",
        );
        assert_eq!(
            bn.num_batches_tracked
                .as_ref()
                .unwrap()
                .item::<i64>()
                .unwrap(),
            step as i64 + 1
        );
    }
    assert!(
        !bn.running_mean.as_ref().unwrap().requires_grad()
            && !bn.running_var.as_ref().unwrap().requires_grad()
    );
    // Eval: running statistics, and they do not move.
    bn.eval();
    let x = randn(&[4, 3], DType::F64, 30);
    let xv = vals(&x);
    let y = vals(&bn.forward(&x).unwrap());
    for i in 0..4 {
        for c in 0..3 {
            let r = (xv[i * 3 + c] - rm[c]) / (rv[c] + 1e-5).sqrt();
            assert!((y[i * 3 + c] - r).abs() < 1e-9, "eval normalisation");
        }
    }
    close(
        &vals(bn.running_mean.as_ref().unwrap()),
        &rm,
        1e-12,
        "running_mean unchanged in eval",
    );
    // A batch of one works in eval, not in train.
    assert!(bn.forward(&randn(&[1, 3], DType::F64, 31)).is_ok());
    bn.train(true);
    let e = assert_err_names(bn.forward(&randn(&[1, 3], DType::F64, 31)), "BatchNorm1d");
    assert!(matches!(e, Error::InvalidArgument { .. }));
    let e = assert_err_names(bn.forward(&randn(&[4, 2], DType::F64, 31)), "BatchNorm1d");
    assert!(matches!(e, Error::ShapeMismatch { .. }));
    // Parameters vs buffers.
    let names: Vec<String> = bn.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["weight", "bias"]);
    let names: Vec<String> = bn
        .named_parameters_mut()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        names,
        [
            "weight",
            "bias",
            "running_mean",
            "running_var",
            "num_batches_tracked"
        ]
    );
}

#[test]
fn batchnorm_train_gradcheck() {
    let _g = lock();
    let x = leaf(&[4, 3], 40);
    let w = leaf(&[3], 41);
    let b = leaf(&[3], 42);
    gradcheck("batchnorm1d train", &[x, w, b], |t| {
        let mut bn = BatchNorm1d::with_options(3, 1e-5, 0.1, DType::F64, CPU)?;
        bn.weight = Some(t[1].alias());
        bn.bias = Some(t[2].alias());
        bn.forward(&t[0])
    });
}

#[test]
fn embedding_forward_and_grad() {
    let _g = lock();
    let emb = Embedding::with_options(6, 3, DType::F64, CPU).unwrap();
    let idx = Tensor::from_slice(&[1i64, 4, 1, 0, 5, 4], &[2, 3], CPU).unwrap();
    let y = emb.forward(&idx).unwrap();
    assert_eq!(y.shape(), &[2, 3, 3]);
    let w = vals(&emb.weight);
    let r: Vec<f64> = [1usize, 4, 1, 0, 5, 4]
        .iter()
        .flat_map(|&i| w[i * 3..i * 3 + 3].to_vec())
        .collect();
    assert_eq!(vals(&y), r);
    y.sum_all().unwrap().backward().unwrap();
    let g = vals(&emb.weight.grad().unwrap());
    let counts = [1.0, 2.0, 0.0, 0.0, 2.0, 1.0];
    for (row, c) in counts.iter().enumerate() {
        assert_eq!(&g[row * 3..row * 3 + 3], &[*c; 3]);
    }
    let e = assert_err_names(
        emb.forward(&Tensor::zeros(&[2], DType::F32, CPU).unwrap()),
        "Embedding",
    );
    assert!(matches!(e, Error::DTypeMismatch { .. }));
    assert!(emb
        .forward(&Tensor::from_slice(&[6i64], &[1], CPU).unwrap())
        .is_err());
}

#[test]
fn losses_match_naive() {
    let _g = lock();
    for dtype in [DType::F32, DType::F64] {
        let p = randn(&[4, 3], dtype, 50).t().unwrap();
        let t = randn(&[3, 4], dtype, 51);
        let (pv, tv) = (vals(&p), vals(&t));
        let r = pv
            .iter()
            .zip(&tv)
            .map(|(a, b)| (a - b).powi(2))
            .sum::<f64>()
            / 12.0;
        close(
            &[mse_loss(&p, &t).unwrap().item::<f64>().unwrap()],
            &[r],
            1e-5,
            "mse",
        );

        let logits = randn(&[5, 4], dtype, 52).mul_scalar(3.0).unwrap();
        let tg = [0i64, 3, 2, 3, 1];
        let targets = Tensor::from_slice(&tg, &[5], CPU).unwrap();
        let lv = vals(&logits);
        let mut r = 0.0;
        for i in 0..5 {
            let row = &lv[i * 4..i * 4 + 4];
            let m = row.iter().cloned().fold(f64::MIN, f64::max);
            let lse = m + row.iter().map(|a| (a - m).exp()).sum::<f64>().ln();
            r += lse - row[tg[i] as usize];
        }
        close(
            &[cross_entropy(&logits, &targets)
                .unwrap()
                .item::<f64>()
                .unwrap()],
            &[r / 5.0],
            1e-5,
            "ce",
        );

        // Large logits: the stable form does not overflow.
        let x = Tensor::from_slice(&[-200.0f64, -3.0, 0.0, 2.5, 200.0, 50.0], &[2, 3], CPU)
            .unwrap()
            .to_dtype(dtype)
            .unwrap();
        let tt = Tensor::from_slice(&[0.0f64, 1.0, 0.5, 0.0, 1.0, 0.2], &[2, 3], CPU)
            .unwrap()
            .to_dtype(dtype)
            .unwrap();
        let (xv, ttv) = (vals(&x), vals(&tt));
        let r = xv
            .iter()
            .zip(&ttv)
            .map(|(x, t)| {
                // -(t log σ(x) + (1-t) log(1-σ(x))) written with log-sigmoid.
                let ls = |z: f64| {
                    if z >= 0.0 {
                        -(-z).exp().ln_1p()
                    } else {
                        z - z.exp().ln_1p()
                    }
                };
                -(t * ls(*x) + (1.0 - t) * ls(-x))
            })
            .sum::<f64>()
            / 6.0;
        let got = bce_with_logits(&x, &tt).unwrap().item::<f64>().unwrap();
        assert!(got.is_finite());
        close(&[got], &[r], 1e-5, "bce");
    }
}

#[test]
fn losses_gradcheck() {
    let _g = lock();
    gradcheck("mse", &[leaf(&[3, 4], 60), leaf(&[3, 4], 61)], |t| {
        mse_loss(&t[0], &t[1])
    });
    let targets = Tensor::from_slice(&[2i64, 0, 1], &[3], CPU).unwrap();
    gradcheck("cross_entropy", &[leaf(&[3, 4], 62)], |t| {
        cross_entropy(&t[0], &targets)
    });
    let probs = randn(&[3, 4], DType::F64, 63)
        .sigmoid()
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    gradcheck("bce_with_logits", &[leaf(&[3, 4], 64), probs], |t| {
        bce_with_logits(&t[0], &t[1])
    });
}

#[test]
fn loss_and_layer_errors_name_the_op() {
    let _g = lock();
    let a = Tensor::zeros(&[2, 3], DType::F32, CPU).unwrap();
    let b = Tensor::zeros(&[3, 2], DType::F32, CPU).unwrap();
    assert!(matches!(
        assert_err_names(mse_loss(&a, &b), "mse_loss"),
        Error::ShapeMismatch { .. }
    ));
    assert!(matches!(
        assert_err_names(bce_with_logits(&a, &b), "bce_with_logits"),
        Error::ShapeMismatch { .. }
    ));
    let t = Tensor::from_slice(&[0i64, 3], &[2], CPU).unwrap();
    assert!(matches!(
        assert_err_names(cross_entropy(&a, &t), "cross_entropy"),
        Error::IndexOutOfRange {
            index: 3,
            size: 3,
            ..
        }
    ));
    let t = Tensor::from_slice(&[0i64, -1], &[2], CPU).unwrap();
    assert!(matches!(
        cross_entropy(&a, &t),
        Err(Error::IndexOutOfRange { index: -1, .. })
    ));
    let t = Tensor::from_slice(&[0i64, 1, 2], &[3], CPU).unwrap();
    assert!(matches!(
        assert_err_names(cross_entropy(&a, &t), "cross_entropy"),
        Error::ShapeMismatch { .. }
    ));
    let t = Tensor::from_slice(&[0.0f32, 1.0], &[2], CPU).unwrap();
    assert!(matches!(
        assert_err_names(cross_entropy(&a, &t), "cross_entropy"),
        Error::DTypeMismatch { .. }
    ));
    let lin = Linear::new(4, 2).unwrap();
    assert!(matches!(
        assert_err_names(lin.forward(&a), "Linear"),
        Error::ShapeMismatch { .. }
    ));
    assert!(matches!(
        Linear::with_options(2, 2, true, DType::I64, CPU),
        Err(Error::DTypeMismatch { op: "Linear", .. })
    ));
}

#[test]
fn no_grad_forward_records_nothing() {
    let _g = lock();
    let lin = Linear::new(3, 2).unwrap();
    let x = Tensor::ones(&[2, 3], DType::F32, CPU).unwrap();
    let y = autograd::no_grad(|| lin.forward(&x)).unwrap();
    assert!(!y.requires_grad());
    let y = lin.forward(&x).unwrap();
    assert!(y.requires_grad());
    // One fused node, as PyTorch's Linear records.
    assert_eq!(y.grad_fn_name(), Some("AddmmBackward"));
}

/// `Module::to_dtype` (PyTorch's `half()` / `bfloat16()`): every float
/// parameter and buffer converted, `requires_grad` kept, the integer
/// `num_batches_tracked` left, the f32 storages freed (the allocator holds
/// the bf16 bytes only), and the converted model computes what the f32 one
/// does to bf16 rounding. A non-float dtype is refused with nothing changed.
fn module_to_dtype_converts_parameters_and_buffers(dev: tensorscope::Device) {
    use tensorscope::memory::{memory_allocated, round_size};
    use tensorscope::nn::{BatchNorm1d, Module, Sequential, GELU};
    tensorscope::manual_seed(4);
    let mut net = Sequential::new();
    net.add(Linear::new(16, 32).unwrap())
        .add(BatchNorm1d::new(32).unwrap())
        .add(GELU)
        .add(Linear::new(32, 8).unwrap());
    net.eval();
    net.to_device(dev).unwrap();
    let x = Tensor::randn(&[5, 16], DType::F32, CPU)
        .unwrap()
        .to_device(dev)
        .unwrap();
    let want = autograd::no_grad(|| net.forward(&x)).unwrap();
    let e = net.to_dtype(DType::I32).unwrap_err().to_string();
    assert!(e.starts_with("Module::to_dtype"), "{e}");
    assert!(net.parameters().iter().all(|p| p.dtype() == DType::F32));
    let before = memory_allocated(dev);
    let f32_bytes: usize = net
        .named_parameters_mut()
        .iter()
        .filter(|(_, t)| t.dtype() == DType::F32)
        .map(|(_, t)| round_size(t.numel() * 4))
        .sum();
    net.to_dtype(DType::BF16).unwrap();
    let state = net.named_parameters_mut();
    let bf16_bytes: usize = state
        .iter()
        .filter(|(_, t)| t.dtype() == DType::BF16)
        .map(|(_, t)| round_size(t.numel() * 2))
        .sum();
    assert_eq!(before - memory_allocated(dev), f32_bytes - bf16_bytes);
    for (name, t) in &state {
        let want = if name.ends_with("num_batches_tracked") {
            DType::I64
        } else {
            DType::BF16
        };
        assert_eq!(t.dtype(), want, "{name}");
    }
    drop(state);
    assert!(net.parameters().iter().all(|p| p.requires_grad()));
    let got = autograd::no_grad(|| net.forward(&x.to_dtype(DType::BF16)?)).unwrap();
    assert_eq!(got.dtype(), DType::BF16);
    let (g, w) = (
        got.to_dtype(DType::F32)
            .unwrap()
            .to_device(CPU)
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        want.to_device(CPU).unwrap().to_vec::<f32>().unwrap(),
    );
    for (a, b) in g.iter().zip(&w) {
        assert!((a - b).abs() <= 0.05 * (1.0 + b.abs()), "{a} vs {b}");
    }
}

#[cfg(feature = "cuda")]
common::devices::on_both!(module_to_dtype_converts_parameters_and_buffers);

#[cfg(not(feature = "cuda"))]
common::on_cpu!(module_to_dtype_converts_parameters_and_buffers);
