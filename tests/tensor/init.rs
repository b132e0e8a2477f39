//! Issue 17 item 6 (the non-optimizer part): `nn::init`'s Xavier, Kaiming
//! (normal, and uniform with a mode and nonlinearity), orthogonal,
//! `calculate_gain` against the values PyTorch 2.15 printed, and
//! `clip_grad_value_` (in place, nothing allocated, refused arguments
//! changing nothing), on both devices. The draws are tensorscope's own
//! (deviation 9), so the distributions are checked, not the values.

use crate::common;

#[cfg(feature = "cuda")]
use common::devices::on_both;
use common::{assert_close, read, tensor};
use tensorscope::nn::init::{self, FanMode};
use tensorscope::nn::{Linear, Module};
use tensorscope::optim::clip_grad_value_;
use tensorscope::{memory, DType, Device, Tensor};

fn std_of(v: &[f64]) -> f64 {
    let m = v.iter().sum::<f64>() / v.len() as f64;
    (v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / v.len() as f64).sqrt()
}

fn the_distributions_have_pytorch_s_scales(dev: Device) {
    tensorscope::manual_seed(5);
    // [256, 128]: fan_in 128, fan_out 256; 32,768 draws (std within ~1%).
    let mut w = Tensor::empty(&[256, 128], DType::F32, dev).unwrap();
    init::xavier_uniform_(&mut w, 2.0).unwrap();
    let b = 2.0 * (6.0f64 / 384.0).sqrt();
    let v = read(&w);
    assert!(v.iter().all(|x| x.abs() <= b), "inside the bound {b}");
    assert!(
        v.iter().any(|x| x.abs() > 0.99 * b),
        "reaching the bound {b}"
    );
    init::xavier_normal_(&mut w, 1.0).unwrap();
    let want = (2.0f64 / 384.0).sqrt();
    assert!(
        (std_of(&read(&w)) / want - 1.0).abs() < 0.03,
        "xavier_normal_"
    );
    init::kaiming_normal_(&mut w, 0.0, FanMode::FanOut, "relu").unwrap();
    let want = 2f64.sqrt() / 256f64.sqrt();
    assert!(
        (std_of(&read(&w)) / want - 1.0).abs() < 0.03,
        "kaiming_normal_"
    );
    init::kaiming_uniform_with(&mut w, 0.2, FanMode::FanIn, "leaky_relu").unwrap();
    let b = 3f64.sqrt() * (2.0f64 / 1.04).sqrt() / 128f64.sqrt();
    let v = read(&w);
    assert!(v.iter().all(|x| x.abs() <= b) && v.iter().any(|x| x.abs() > 0.99 * b));
    // The convolution's fans count the kernel: [8, 4, 3, 3] has fan_in 36.
    let mut c = Tensor::empty(&[8, 4, 3, 3], DType::F64, dev).unwrap();
    init::kaiming_uniform_with(&mut c, 0.0, FanMode::FanIn, "linear").unwrap();
    let b = 3f64.sqrt() / 36f64.sqrt();
    assert!(read(&c).iter().all(|x| x.abs() <= b));
    init::zeros_(&mut c).unwrap();
    assert!(read(&c).iter().all(|&x| x == 0.0));
    init::ones_(&mut c).unwrap();
    assert!(read(&c).iter().all(|&x| x == 1.0));
    // kaiming_uniform_ (Linear's and the convolutions' default) draws
    // exactly what uniform_ within kaiming_bound draws.
    let (mut a, mut b) = (
        Tensor::empty(&[7, 5], DType::F32, dev).unwrap(),
        Tensor::empty(&[7, 5], DType::F32, dev).unwrap(),
    );
    tensorscope::manual_seed(9);
    init::kaiming_uniform_(&mut a, 5f64.sqrt()).unwrap();
    tensorscope::manual_seed(9);
    let bound = init::kaiming_bound(5f64.sqrt(), 5);
    init::uniform_(&mut b, -bound, bound).unwrap();
    assert_eq!(read(&a), read(&b));
    // The gains PyTorch 2.15 printed.
    let g = |n: &str, p: Option<f64>| init::calculate_gain(n, p).unwrap();
    assert_eq!(g("leaky_relu", None), 1.4141428569978354);
    assert_eq!(g("leaky_relu", Some(0.2)), 1.3867504905630728);
    assert_eq!(g("tanh", None), 1.6666666666666667);
    assert_eq!(g("relu", None), std::f64::consts::SQRT_2); // PyTorch: 1.4142135623730951
    assert_eq!(
        (g("selu", None), g("conv2d", None), g("sigmoid", None)),
        (0.75, 1.0, 1.0)
    );
    // Errors name the function and the shape or the name.
    let e = init::calculate_gain("swish", None).unwrap_err().to_string();
    assert!(e.contains("calculate_gain") && e.contains("swish"), "{e}");
    let mut v1 = Tensor::empty(&[5], DType::F32, dev).unwrap();
    let e = init::xavier_uniform_(&mut v1, 1.0).unwrap_err().to_string();
    assert!(e.contains("xavier_uniform_") && e.contains("[5]"), "{e}");
    let e = init::orthogonal_(&mut v1, 1.0).unwrap_err().to_string();
    assert!(e.contains("orthogonal_") && e.contains("[5]"), "{e}");
}

fn orthogonal_gives_orthonormal_rows_or_columns(dev: Device) {
    tensorscope::manual_seed(6);
    for (shape, gain) in [
        (vec![5, 3], 1.0),
        (vec![3, 5], 2.0),
        (vec![4, 2, 3, 3], 0.5),
    ] {
        let mut w = Tensor::empty(&shape, DType::F64, dev).unwrap();
        init::orthogonal_(&mut w, gain).unwrap();
        let rows = shape[0];
        let cols = w.numel() / rows;
        let m = w.reshape(&[rows as isize, cols as isize]).unwrap();
        // Q^T Q (tall) or Q Q^T (wide) is gain^2 I.
        let (p, n) = if rows >= cols {
            (m.t().unwrap().matmul(&m).unwrap(), cols)
        } else {
            (m.matmul(&m.t().unwrap()).unwrap(), rows)
        };
        let want: Vec<f64> = (0..n * n)
            .map(|k| if k / n == k % n { gain * gain } else { 0.0 })
            .collect();
        assert_close(&read(&p), &want, 1e-12, &format!("orthogonal {shape:?}"));
    }
}

fn clip_grad_value_clamps_in_place(dev: Device) {
    let mut fc = Linear::with_options(3, 2, true, DType::F32, dev).unwrap();
    fc.weight = tensor(&[1.0, -2.0, 3.0, 0.5, 0.0, -0.25], &[2, 3], DType::F32, dev)
        .requires_grad_(true)
        .unwrap();
    let x = tensor(&[4.0, -0.2, 0.3, -5.0, 0.1, 0.6], &[2, 3], DType::F32, dev);
    fc.forward(&x)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    // d(sum)/dW[o, i] = sum over rows of x[., i]: -1, -0.1, 0.9 per row.
    let before = memory::memory_stats(dev).allocation.all.allocated;
    clip_grad_value_(&fc, 0.5).unwrap();
    assert_eq!(memory::memory_stats(dev).allocation.all.allocated, before);
    let g = read(&fc.weight.grad().unwrap());
    assert_close(&g, &[-0.5, -0.1, 0.5, -0.5, -0.1, 0.5], 1e-6, "clamped");
    assert_eq!(read(&fc.bias.as_ref().unwrap().grad().unwrap()), [0.5, 0.5]);
    // Refused: nothing changes.
    for bad in [-1.0, f64::NAN] {
        let e = clip_grad_value_(&fc, bad).unwrap_err().to_string();
        assert!(e.contains("clip_grad_value_"), "{e}");
        assert_close(&read(&fc.weight.grad().unwrap()), &g, 0.0, "unchanged");
    }
    // Infinity clips nothing.
    clip_grad_value_(&fc, f64::INFINITY).unwrap();
    assert_close(&read(&fc.weight.grad().unwrap()), &g, 0.0, "inf");
}

#[cfg(feature = "cuda")]
on_both!(
    the_distributions_have_pytorch_s_scales,
    orthogonal_gives_orthonormal_rows_or_columns,
    clip_grad_value_clamps_in_place,
);

#[cfg(not(feature = "cuda"))]
common::on_cpu!(
    the_distributions_have_pytorch_s_scales,
    orthogonal_gives_orthonormal_rows_or_columns,
    clip_grad_value_clamps_in_place,
);
