//! Issue 17 item 2: `BatchNorm2d` (batch statistics in training, the
//! running statistics updated with the unbiased variance, evaluation with
//! them) and `GroupNorm`, against direct f64 computations on both devices,
//! what a forward leaves allocated, and the errors. Agreement with PyTorch
//! (values and gradients) is in the differential suite.

use crate::common;

#[cfg(feature = "cuda")]
use common::devices::on_both;
use common::{assert_close, read, tensor};
use tensorscope::nn::{BatchNorm2d, GroupNorm, Module};
use tensorscope::{autograd, memory, DType, Device};

const F32: DType = DType::F32;

fn values(n: usize) -> Vec<f64> {
    (0..n)
        .map(|i| ((i * 37 % 23) as f64 - 11.0) / 4.0)
        .collect()
}

/// Mean and biased variance of `xs`.
fn moments(xs: &[f64]) -> (f64, f64) {
    let m = xs.iter().sum::<f64>() / xs.len() as f64;
    (
        m,
        xs.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / xs.len() as f64,
    )
}

fn batch_norm2d_uses_batch_then_running_statistics(dev: Device) {
    let (n, c, h, w) = (3usize, 2usize, 2usize, 3usize);
    let xv = values(n * c * h * w);
    let x = tensor(&xv, &[n, c, h, w], F32, dev);
    let mut bn = BatchNorm2d::with_options(c, 1e-5, 0.1, F32, dev).unwrap();
    bn.weight = Some(
        tensor(&[2.0, 0.5], &[c], F32, dev)
            .requires_grad_(true)
            .unwrap(),
    );
    bn.bias = Some(
        tensor(&[1.0, -1.0], &[c], F32, dev)
            .requires_grad_(true)
            .unwrap(),
    );
    let y = read(&bn.forward(&x).unwrap());
    let at = |b: usize, ch: usize, p: usize| (b * c + ch) * h * w + p;
    let (wv, bv) = ([2.0, 0.5], [1.0, -1.0]);
    for ch in 0..c {
        let xs: Vec<f64> = (0..n)
            .flat_map(|b| (0..h * w).map(move |p| (b, p)))
            .map(|(b, p)| xv[at(b, ch, p)])
            .collect();
        let (m, v) = moments(&xs);
        for b in 0..n {
            for p in 0..h * w {
                let want = (xv[at(b, ch, p)] - m) / (v + 1e-5).sqrt() * wv[ch] + bv[ch];
                assert_close(&[y[at(b, ch, p)]], &[want], 1e-5, "training output");
            }
        }
        // running = 0.9 * initial + 0.1 * batch, with the unbiased variance.
        let k = xs.len() as f64;
        let rm = read(bn.running_mean.as_ref().unwrap())[ch];
        let rv = read(bn.running_var.as_ref().unwrap())[ch];
        assert_close(
            &[rm, rv],
            &[0.1 * m, 0.9 + 0.1 * v * k / (k - 1.0)],
            1e-6,
            "running",
        );
    }
    assert_eq!(read(bn.num_batches_tracked.as_ref().unwrap()), [1.0]);
    // Evaluation: the running statistics.
    bn.eval();
    let (rm, rv) = (
        read(bn.running_mean.as_ref().unwrap()),
        read(bn.running_var.as_ref().unwrap()),
    );
    let y = read(&bn.forward(&x).unwrap());
    for b in 0..n {
        for ch in 0..c {
            for p in 0..h * w {
                let want = (xv[at(b, ch, p)] - rm[ch]) / (rv[ch] + 1e-5).sqrt() * wv[ch] + bv[ch];
                assert_close(&[y[at(b, ch, p)]], &[want], 1e-5, "eval output");
            }
        }
    }
    assert_eq!(read(bn.num_batches_tracked.as_ref().unwrap()), [1.0]);
    // A [N, C, L] input is BatchNorm1d's, not BatchNorm2d's.
    let e = bn
        .forward(&tensor(&values(12), &[2, 2, 3], F32, dev))
        .unwrap_err()
        .to_string();
    assert!(e.contains("BatchNorm2d") && e.contains("[2, 2, 3]"), "{e}");
}

fn group_norm_normalises_each_group_of_each_sample(dev: Device) {
    let (n, c, h, w, g) = (2usize, 6usize, 2usize, 2usize, 3usize);
    let xv = values(n * c * h * w);
    let x = tensor(&xv, &[n, c, h, w], F32, dev);
    let mut gn = GroupNorm::with_options(g, c, 1e-5, true, F32, dev).unwrap();
    let wv: Vec<f64> = (0..c).map(|i| 0.5 + i as f64).collect();
    let bv: Vec<f64> = (0..c).map(|i| i as f64 - 2.0).collect();
    gn.weight = Some(tensor(&wv, &[c], F32, dev).requires_grad_(true).unwrap());
    gn.bias = Some(tensor(&bv, &[c], F32, dev).requires_grad_(true).unwrap());
    let y = read(&gn.forward(&x).unwrap());
    let per = c / g * h * w;
    for b in 0..n {
        for gi in 0..g {
            let base = (b * c + gi * c / g) * h * w;
            let (m, v) = moments(&xv[base..base + per]);
            for k in 0..per {
                let ch = gi * c / g + k / (h * w);
                let want = (xv[base + k] - m) / (v + 1e-5).sqrt() * wv[ch] + bv[ch];
                assert_close(&[y[base + k]], &[want], 1e-5, "group norm");
            }
        }
    }
    // Under no_grad a forward leaves only its output.
    let one = {
        let before = memory::memory_allocated(dev);
        let t = tensorscope::Tensor::zeros(&[n, c, h, w], F32, dev).unwrap();
        let grown = memory::memory_allocated(dev) - before;
        drop(t);
        grown
    };
    let (out, m) = memory::measure(dev, || autograd::no_grad(|| gn.forward(&x))).unwrap();
    assert_eq!(out.unwrap().shape(), &[n, c, h, w]);
    assert_eq!(m.allocated_delta as usize, one);
    // A weight without a bias still scales.
    gn.bias = None;
    let scaled = read(&gn.forward(&x).unwrap());
    for (k, v) in scaled.iter().enumerate() {
        let ch = (k / (h * w)) % c;
        assert_close(&[*v], &[y[k] - bv[ch]], 1e-5, "weight without bias");
    }
    // Errors name the layer and the numbers.
    let e = GroupNorm::new(4, 6).err().unwrap().to_string();
    assert!(
        e.contains("GroupNorm") && e.contains('6') && e.contains('4'),
        "{e}"
    );
    let e = gn
        .forward(&tensor(&values(8), &[2, 4], F32, dev))
        .unwrap_err()
        .to_string();
    assert!(e.contains("GroupNorm") && e.contains("[2, 4]"), "{e}");
}

#[cfg(feature = "cuda")]
on_both!(
    batch_norm2d_uses_batch_then_running_statistics,
    group_norm_normalises_each_group_of_each_sample,
);

#[cfg(not(feature = "cuda"))]
common::on_cpu!(
    batch_norm2d_uses_batch_then_running_statistics,
    group_norm_normalises_each_group_of_each_sample,
);
