//! PyTorch's nn options, checked against numbers PyTorch 2.15 printed:
//! loss reductions, cross-entropy ignore_index / weight / label_smoothing /
//! probability targets, BCE-with-logits pos_weight / weight, BatchNorm1d on
//! [N, C, L] with its options, Embedding padding_idx / max_norm; gradchecks
//! and bad-input errors of each option.

use crate::common;

use common::grad::{assert_err_names, close, gradcheck, leaf, randn, vals};
use common::CPU;
use tensorscope::nn::{bce_with_logits, cross_entropy, BatchNorm1d, Embedding, Module};
use tensorscope::{DType, Error, Tensor};
fn lock() -> crate::common::Guard {
    crate::common::serial()
}

// ---------------------------------------------------------------------------
// PyTorch's options: reductions, cross-entropy ignore_index / weight /
// label_smoothing, BCE pos_weight / weight, BatchNorm1d on [N, C, L] with
// momentum / momentum=None / affine / track_running_stats, Embedding
// padding_idx / max_norm. The expected numbers were produced by PyTorch
// 2.15 (CPU, f64) with tests/fixtures/nn_options.py (`python3
// tests/fixtures/nn_options.py` prints the `const` block of
// tests/nn/nn_options/torch.rs); the inputs below are the script's literals.
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

mod batchnorm;
mod embedding;
mod losses;
mod probability_targets;
#[rustfmt::skip]
mod torch;
use torch::*;
