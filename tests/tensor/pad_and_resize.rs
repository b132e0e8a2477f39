//! Issue 48 item 5: `pad`, `interpolate`, `meshgrid` and `round_decimals`
//! beyond the differential suite's values and gradients (which PyTorch 2.15
//! gives): meshgrid's outputs are views, a reflect pad's gradient sums
//! into its sources, and bad input is an `Err` naming the op and the shape.

use crate::common;

#[cfg(feature = "cuda")]
use common::devices::on_both;
use tensorscope::{DType, Device, InterpolateMode, InterpolateSize, PadMode, Tensor};

fn pad_resize_meshgrid(dev: Device) {
    let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[1, 3], Device::Cpu)
        .unwrap()
        .to_device(dev)
        .unwrap();
    // Meshgrid: expanded views of the inputs, no copy.
    let y = Tensor::from_slice(&[5.0f32, 6.0], &[2], Device::Cpu)
        .unwrap()
        .to_device(dev)
        .unwrap();
    let xs = x.reshape(&[3]).unwrap();
    let g = Tensor::meshgrid(&[&xs, &y], "ij").unwrap();
    assert_eq!(g[0].shape(), &[3, 2]);
    assert!(g[0].shares_storage(&x) && g[1].shares_storage(&y));
    assert_eq!(g[1].strides(), &[0, 1]);
    // Reflect's gradient: each output's 1 summed into its source.
    let leaf = x.alias().requires_grad_(true).unwrap();
    let r = leaf.pad(&[2, 2], PadMode::Reflect).unwrap(); // 3 2 | 1 2 3 | 2 1
    r.sum_all().unwrap().backward().unwrap();
    let grad = leaf
        .grad()
        .unwrap()
        .to_device(Device::Cpu)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(grad, [2.0, 3.0, 2.0]);
    let circ = x.pad(&[1, 1], PadMode::Circular).unwrap();
    assert_eq!(
        circ.to_device(Device::Cpu)
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        [3.0, 1.0, 2.0, 3.0, 1.0]
    );

    let e = |r: tensorscope::Result<Tensor>| r.unwrap_err().to_string();
    let x4 = Tensor::zeros(&[1, 1, 2, 3], DType::F32, dev).unwrap();
    for (what, r, op) in [
        ("odd pads", x.pad(&[1], PadMode::Replicate), "pad"),
        ("reflect too wide", x.pad(&[3, 0], PadMode::Reflect), "pad"),
        (
            "circular too wide",
            x.pad(&[0, 4], PadMode::Circular),
            "pad",
        ),
        (
            "reflect rank",
            Tensor::zeros(&[3], DType::F32, dev)
                .unwrap()
                .pad(&[1, 1], PadMode::Reflect),
            "pad",
        ),
        (
            "crop too far",
            x.pad(&[-2, -2], PadMode::Constant(0.0)),
            "pad",
        ),
        ("negative reflect", x.pad(&[-1, 0], PadMode::Reflect), "pad"),
        (
            "interp rank",
            x.interpolate(&InterpolateSize::Size(vec![4]), InterpolateMode::Nearest),
            "interpolate",
        ),
        (
            "interp sizes",
            x4.interpolate(&InterpolateSize::Size(vec![4]), InterpolateMode::Nearest),
            "interpolate",
        ),
        (
            "interp zero",
            x4.interpolate(
                &InterpolateSize::Scale(vec![0.1, 0.1]),
                InterpolateMode::Nearest,
            ),
            "interpolate",
        ),
        (
            "interp int",
            Tensor::zeros(&[1, 1, 2], DType::I64, dev)
                .unwrap()
                .interpolate(&InterpolateSize::Size(vec![4]), InterpolateMode::Nearest),
            "interpolate",
        ),
        (
            "round int",
            Tensor::zeros(&[2], DType::I64, dev)
                .unwrap()
                .round_decimals(1),
            "round",
        ),
    ] {
        let msg = e(r);
        assert!(msg.starts_with(op), "{what}: {msg}");
    }
    let m = Tensor::meshgrid(&[&x], "yx").unwrap_err().to_string();
    assert!(m.starts_with("meshgrid") && m.contains("yx"), "{m}");
    assert!(Tensor::meshgrid(&[&x], "ij")
        .unwrap_err()
        .to_string()
        .contains("[1, 3]"));
}

#[cfg(feature = "cuda")]
on_both!(pad_resize_meshgrid);

#[cfg(not(feature = "cuda"))]
common::on_cpu!(pad_resize_meshgrid);
