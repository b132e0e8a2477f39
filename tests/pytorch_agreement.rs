//! Issue 13's reproductions, one test per defect class, on the CPU and on
//! CUDA device 0 (`on_both!`; the GPU half skips without a device). Every
//! expected value was printed by PyTorch 2.15 (CPU) for the same input; the
//! Python line is quoted above each check.
#![cfg(feature = "cuda")]

mod common;

use common::devices::on_both;
use common::read;
use tensorscope::{Device, Tensor};

on_both!(
    prod_backward_with_zeros,
    std_and_var_backward_where_std_is_zero,
    pow_backward_at_base_zero,
    clamp_backward_at_the_bounds,
    reductions_of_a_0d_tensor_differentiate,
    log_softmax_and_cross_entropy_of_large_logits,
);

fn leaf(v: &[f64], shape: &[usize], dev: Device) -> Tensor {
    Tensor::from_slice(v, shape, Device::Cpu)
        .unwrap()
        .to_device(dev)
        .unwrap()
        .requires_grad_(true)
        .unwrap()
}

fn grad(t: &Tensor) -> Vec<f64> {
    read(&t.grad().expect("a gradient"))
}

/// Equal, NaN equal to NaN and infinities by sign.
fn same(got: &[f64], want: &[f64], ctx: &str) {
    assert_eq!(got.len(), want.len(), "{ctx}: {got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        let ok = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= 1e-12 * w.abs();
        assert!(ok, "{ctx}: got {got:?}, PyTorch gives {want:?}");
    }
}

/// Item 3. `x.prod().backward()`: [0,2,3] -> [6,0,0]; [0,0,3] -> [0,0,0];
/// along dim 1 of [[0,2,3],[0,0,1],[1,2,4]] -> [[6,0,0],[0,0,0],[8,4,2]].
fn prod_backward_with_zeros(dev: Device) {
    for (v, want) in [
        ([0.0, 2.0, 3.0], [6.0, 0.0, 0.0]),
        ([0.0, 0.0, 3.0], [0.0, 0.0, 0.0]),
        ([1.5, 2.0, 4.0], [8.0, 6.0, 3.0]),
    ] {
        let x = leaf(&v, &[3], dev);
        x.prod(&[], false).unwrap().backward().unwrap();
        same(&grad(&x), &want, &format!("prod {v:?}"));
    }
    let x = leaf(&[0., 2., 3., 0., 0., 1., 1., 2., 4.], &[3, 3], dev);
    x.prod(&[1], false)
        .unwrap()
        .sum(&[], false)
        .unwrap()
        .backward()
        .unwrap();
    same(
        &grad(&x),
        &[6., 0., 0., 0., 0., 0., 8., 4., 2.],
        "prod dim 1",
    );
}

/// Item 4. `x.std()` and `x.var()` of [[1,1,1]] backward: zeros; of a
/// single element (correction 1, no degrees of freedom): NaN.
fn std_and_var_backward_where_std_is_zero(dev: Device) {
    for std in [true, false] {
        let x = leaf(&[1.0, 1.0, 1.0], &[1, 3], dev);
        let y = if std {
            x.std(&[], 1, false).unwrap()
        } else {
            x.var(&[], 1, false).unwrap()
        };
        y.backward().unwrap();
        same(
            &grad(&x),
            &[0.0, 0.0, 0.0],
            &format!("std={std} of equal values"),
        );
        let x = leaf(&[1.0], &[1], dev);
        let y = if std {
            x.std(&[], 1, false).unwrap()
        } else {
            x.var(&[], 1, false).unwrap()
        };
        y.backward().unwrap();
        same(&grad(&x), &[f64::NAN], &format!("std={std} of one value"));
    }
}

/// Item 5. `b.pow(e)` with b=[0,2], e=[0,0]: d/db [0,0], d/de [0, ln 2];
/// b=[0,2,0], e=[2,3,-1]: d/db [0,12,-inf], d/de [0, 8 ln 2, -inf];
/// `b.pow(0.)` of [0,2,0,-1]: zeros; `b.pow(0.5)`: [inf, 0.3536, inf, nan].
fn pow_backward_at_base_zero(dev: Device) {
    let b = leaf(&[0.0, 2.0], &[2], dev);
    let e = leaf(&[0.0, 0.0], &[2], dev);
    b.pow(&e)
        .unwrap()
        .sum(&[], false)
        .unwrap()
        .backward()
        .unwrap();
    same(&grad(&b), &[0.0, 0.0], "d/dbase at exponent 0");
    same(&grad(&e), &[0.0, 2f64.ln()], "d/dexponent at base 0");
    let b = leaf(&[0.0, 2.0, 0.0], &[3], dev);
    let e = leaf(&[2.0, 3.0, -1.0], &[3], dev);
    b.pow(&e)
        .unwrap()
        .sum(&[], false)
        .unwrap()
        .backward()
        .unwrap();
    same(&grad(&b), &[0.0, 12.0, f64::NEG_INFINITY], "d/dbase");
    same(
        &grad(&e),
        &[0.0, 8.0 * 2f64.ln(), f64::NEG_INFINITY],
        "d/dexponent",
    );
    let b = leaf(&[0.0, 2.0, 0.0, -1.0], &[4], dev);
    b.pow_scalar(0.0)
        .unwrap()
        .sum(&[], false)
        .unwrap()
        .backward()
        .unwrap();
    same(&grad(&b), &[0.0; 4], "pow_scalar(0) backward");
    let b = leaf(&[0.0, 2.0, 0.0, -1.0], &[4], dev);
    b.pow_scalar(0.5)
        .unwrap()
        .sum(&[], false)
        .unwrap()
        .backward()
        .unwrap();
    same(
        &grad(&b),
        &[f64::INFINITY, 0.5 / 2f64.sqrt(), f64::INFINITY, f64::NAN],
        "pow_scalar(0.5) backward",
    );
}

/// Item 6. `x.clamp(lo, hi)` of [-1, 0, 0.5, 1, 2] backward, scalar bounds:
/// (0, 1) -> [0,0,1,0,0]; (0, None) -> [0,0,1,1,1]; (None, 1) -> [1,1,1,0,0];
/// (1, 0) -> zeros. An input at a bound gets no gradient.
fn clamp_backward_at_the_bounds(dev: Device) {
    let v = [-1.0, 0.0, 0.5, 1.0, 2.0];
    for (lo, hi, want) in [
        (Some(0.0), Some(1.0), [0., 0., 1., 0., 0.]),
        (Some(0.0), None, [0., 0., 1., 1., 1.]),
        (None, Some(1.0), [1., 1., 1., 0., 0.]),
        (Some(1.0), Some(0.0), [0., 0., 0., 0., 0.]),
    ] {
        let x = leaf(&v, &[5], dev);
        x.clamp(lo, hi)
            .unwrap()
            .sum(&[], false)
            .unwrap()
            .backward()
            .unwrap();
        same(&grad(&x), &want, &format!("clamp({lo:?}, {hi:?})"));
    }
}

/// Item 14. `torch.tensor(3., requires_grad=True).sum(0).backward()` gives
/// grad 1: a 0-d tensor reduces over dim 0 or -1 with or without grad.
fn reductions_of_a_0d_tensor_differentiate(dev: Device) {
    for dim in [0isize, -1] {
        for keepdim in [false, true] {
            let x = leaf(&[3.0], &[], dev);
            let y = x.sum(&[dim], keepdim).unwrap();
            assert_eq!(y.shape(), &[] as &[usize]);
            y.backward().unwrap();
            same(
                &grad(&x),
                &[1.0],
                &format!("sum(dim {dim}, keepdim {keepdim})"),
            );
            let x = leaf(&[3.0], &[], dev);
            x.mean(&[dim], keepdim).unwrap().backward().unwrap();
            same(&grad(&x), &[1.0], &format!("mean(dim {dim})"));
            let x = leaf(&[3.0], &[], dev);
            x.prod(&[dim], keepdim).unwrap().backward().unwrap();
            same(&grad(&x), &[1.0], &format!("prod(dim {dim})"));
            let x = leaf(&[3.0], &[], dev);
            x.max(&[dim], keepdim).unwrap().backward().unwrap();
            same(&grad(&x), &[1.0], &format!("max(dim {dim})"));
        }
    }
}

/// Item 2. `torch.log_softmax(torch.tensor([[v, v, v]]), 1)` is -1.0986123
/// for v = 1e5 and 1e8 (f32), and `F.cross_entropy` 1.0986123; along a
/// strided dim (the CPU's lane schedule) too.
fn log_softmax_and_cross_entropy_of_large_logits(dev: Device) {
    let want = -(3f64.ln());
    for v in [1e5f32, 1e8] {
        let x = Tensor::from_slice(&[v, v, v], &[1, 3], Device::Cpu)
            .unwrap()
            .to_device(dev)
            .unwrap();
        let y = read(&x.log_softmax(1).unwrap());
        common::assert_close(&y, &[want; 3], 1e-6, &format!("log_softmax row, v = {v}"));
        // 8 columns, softmax down each: the kept dim is the dense one.
        let cols = Tensor::full(&[3, 8], v as f64, tensorscope::DType::F32, dev).unwrap();
        let y = read(&cols.log_softmax(0).unwrap());
        common::assert_close(
            &y,
            &[want; 24],
            1e-6,
            &format!("log_softmax column, v = {v}"),
        );
        let t = Tensor::from_slice(&[1i64], &[1], Device::Cpu)
            .unwrap()
            .to_device(dev)
            .unwrap();
        let l = tensorscope::nn::cross_entropy(&x, &t)
            .unwrap()
            .item::<f32>()
            .unwrap();
        common::assert_close(
            &[l as f64],
            &[-want],
            1e-6,
            &format!("cross_entropy, v = {v}"),
        );
    }
}
