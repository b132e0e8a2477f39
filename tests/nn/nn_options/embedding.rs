//! Embedding's padding_idx and max_norm against PyTorch.

use super::*;

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
