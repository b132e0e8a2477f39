//! Layers over existing tensors (`from_parts`, a checkpoint's tensors) and
//! the input checks the peer's hostile run asked for: each layer computes
//! what the constructed layer with the same values computes, on both
//! devices, and bad parts are `Err`s naming the op and what is wrong.

use crate::common;
use common::tensor;
use tensorscope::nn::{
    BatchNorm2d, BatchNormOptions, Conv1d, Conv2d, ConvTranspose2d, Embedding, GroupNorm,
    LayerNorm, Linear, Module, RMSNorm,
};
use tensorscope::{autograd, ConvOptions, ConvTransposeOptions, DType, Device, Tensor};

const F32: DType = DType::F32;

fn vals(n: usize, scale: f64) -> Vec<f64> {
    (0..n)
        .map(|i| ((i * 7 % 11) as f64 - 5.0) * scale)
        .collect()
}

/// The error's text (a test that gets `Ok` fails here).
fn err<T>(r: tensorscope::Result<T>) -> String {
    match r {
        Ok(_) => panic!("expected an Err"),
        Err(e) => e.to_string(),
    }
}

fn host(t: &Tensor) -> Vec<f32> {
    t.to_device(Device::Cpu).unwrap().to_vec::<f32>().unwrap()
}

fn layers_from_parts_compute_what_constructed_layers_do(dev: Device) {
    let x = tensor(&vals(24, 0.25), &[4, 6], F32, dev);
    let (w, b) = (
        tensor(&vals(6, 0.5), &[6], F32, dev),
        tensor(&vals(6, 0.1), &[6], F32, dev),
    );

    let ln = LayerNorm::from_parts(w.deep_clone().unwrap(), b.deep_clone().unwrap(), 1e-5).unwrap();
    let mut reference = LayerNorm::with_options(&[6], 1e-5, F32, dev).unwrap();
    autograd::no_grad(|| {
        reference.weight.copy_(&w)?;
        reference.bias.copy_(&b).map(|_| ())
    })
    .unwrap();
    assert_eq!(
        host(&ln.forward(&x).unwrap()),
        host(&reference.forward(&x).unwrap())
    );

    let rms = RMSNorm::from_parts(w.deep_clone().unwrap(), Some(1e-6)).unwrap();
    let mut reference = RMSNorm::with_options(&[6], Some(1e-6), true, F32, dev).unwrap();
    autograd::no_grad(|| reference.weight.as_mut().unwrap().copy_(&w).map(|_| ())).unwrap();
    assert_eq!(
        host(&rms.forward(&x).unwrap()),
        host(&reference.forward(&x).unwrap())
    );

    // Embedding: i32 ids give what i64 ids give, forward and gradient.
    let table = tensor(&vals(10, 1.0), &[5, 2], F32, dev)
        .requires_grad_(true)
        .unwrap();
    let emb = Embedding::from_parts(table).unwrap();
    let ids64 = Tensor::from_vec(vec![4i64, 0, 4, 2], &[2, 2], Device::Cpu)
        .unwrap()
        .to_device(dev)
        .unwrap();
    let ids32 = ids64.to_dtype(DType::I32).unwrap();
    let y64 = emb.forward(&ids64).unwrap();
    let y32 = emb.forward(&ids32).unwrap();
    assert_eq!(y32.shape(), &[2, 2, 2]);
    assert_eq!(host(&y32), host(&y64));
    y32.sum_all().unwrap().backward().unwrap();
    let g = host(&emb.weight.grad().unwrap());
    assert_eq!(g, [1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 2.0, 2.0]);
}

fn bad_parts_and_inputs_are_errors_naming_the_layer(dev: Device) {
    let w = tensor(&vals(6, 0.5), &[6], F32, dev);
    let e = err(LayerNorm::from_parts(
        w.alias(),
        tensor(&vals(5, 1.0), &[5], F32, dev),
        1e-5,
    ));
    assert!(
        e.contains("LayerNorm::from_parts") && e.contains("[6]") && e.contains("[5]"),
        "{e}"
    );
    let e = err(LayerNorm::from_parts(
        w.alias(),
        w.to_dtype(DType::F64).unwrap(),
        1e-5,
    ));
    assert!(
        e.contains("LayerNorm::from_parts") && e.contains("float64"),
        "{e}"
    );
    let e = err(LayerNorm::from_parts(w.alias(), w.alias(), -1.0));
    assert!(e.contains("eps"), "{e}");
    let ids = Tensor::zeros(&[6], DType::I64, dev).unwrap();
    let e = err(RMSNorm::from_parts(ids.alias(), None));
    assert!(
        e.contains("RMSNorm::from_parts") && e.contains("int64"),
        "{e}"
    );
    let e = err(Embedding::from_parts(w.alias()));
    assert!(
        e.contains("Embedding::from_parts") && e.contains("[6]"),
        "{e}"
    );
    let e = err(Linear::from_parts(
        tensor(&vals(6, 1.0), &[2, 3], F32, dev),
        Some(tensor(&vals(3, 1.0), &[3], F32, dev)),
    ));
    assert!(
        e.contains("Linear::from_parts") && e.contains("[out_features]"),
        "{e}"
    );

    // LayerNorm refuses an integer input by its own name, and a weight
    // replaced through the public field by one of another shape.
    let mut ln = LayerNorm::with_options(&[4], 1e-5, F32, dev).unwrap();
    let e = err(ln.forward(&Tensor::zeros(&[3, 4], DType::I64, dev).unwrap()));
    assert!(
        e.contains("LayerNorm") && e.contains("int64") && !e.contains("mean"),
        "{e}"
    );
    ln.weight = tensor(&vals(5, 1.0), &[5], F32, dev);
    let e = err(ln.forward(&tensor(&vals(12, 1.0), &[3, 4], F32, dev)));
    assert!(
        e.contains("LayerNorm") && e.contains("[5]") && e.contains("weight"),
        "{e}"
    );
    // A bias of another dtype, through the public field: an Err from the
    // fused kernel's own check, not a read of f64 bytes as f32.
    let mut ln = LayerNorm::with_options(&[4], 1e-5, F32, dev).unwrap();
    ln.bias = Tensor::zeros(&[4], DType::F64, dev).unwrap();
    let e = err(ln.forward(&tensor(&vals(12, 1.0), &[3, 4], F32, dev)));
    assert!(
        e.contains("LayerNorm") && e.contains("4 float32 elements"),
        "{e}"
    );
    let e = err(Embedding::new(3, 2)
        .unwrap()
        .forward(&Tensor::zeros(&[2], DType::U8, Device::Cpu).unwrap()));
    assert!(e.contains("Embedding") && e.contains("i64 or i32"), "{e}");
}

/// Convolutions, batch and group norm over given tensors: the functional
/// op's result, the tensors used in place (BatchNorm's running mean is the
/// handle given, updated in training mode), and bad parts refused by name.
fn conv_and_norm_layers_from_parts(dev: Device) {
    let x = tensor(&vals(2 * 4 * 5 * 5, 0.25), &[2, 4, 5, 5], F32, dev);
    let (w, b) = (
        tensor(&vals(6 * 2 * 3 * 3, 0.1), &[6, 2, 3, 3], F32, dev),
        tensor(&vals(6, 0.3), &[6], F32, dev),
    );
    let o = ConvOptions {
        groups: 2,
        ..Default::default()
    };
    let conv = Conv2d::from_parts(w.alias(), Some(b.alias()), o).unwrap();
    assert_eq!(conv.weight.storage_ptr(), w.storage_ptr());
    assert_eq!(
        host(&conv.forward(&x).unwrap()),
        host(&x.conv2d(&w, Some(&b), &o).unwrap())
    );
    let x1 = x.reshape(&[2, 4, 25]).unwrap();
    let w1 = tensor(&vals(3 * 4 * 2, 0.2), &[3, 4, 2], F32, dev);
    let c1 = Conv1d::from_parts(w1.alias(), None, ConvOptions::default()).unwrap();
    assert_eq!(
        host(&c1.forward(&x1).unwrap()),
        host(&x1.conv1d(&w1, None, &ConvOptions::default()).unwrap())
    );
    let wt = tensor(&vals(4 * 3 * 2 * 2, 0.2), &[4, 3, 2, 2], F32, dev);
    let bt = tensor(&vals(3, 0.5), &[3], F32, dev);
    let ot = ConvTransposeOptions {
        stride: [2, 2],
        ..Default::default()
    };
    let up = ConvTranspose2d::from_parts(wt.alias(), Some(bt.alias()), ot).unwrap();
    assert_eq!(
        host(&up.forward(&x).unwrap()),
        host(&x.conv_transpose2d(&wt, Some(&bt), &ot).unwrap())
    );

    let c4 = |scale: f64, shift: f64| {
        let v: Vec<f64> = (0..4).map(|i| shift + scale * i as f64).collect();
        tensor(&v, &[4], F32, dev)
    };
    let (gw, gb, rm, rv) = (c4(0.5, 1.0), c4(0.1, -0.2), c4(0.2, 0.1), c4(0.3, 0.5));
    let opts = BatchNormOptions::default();
    let mut bn = BatchNorm2d::from_parts(
        Some(gw.alias()),
        Some(gb.alias()),
        Some(rm.alias()),
        Some(rv.alias()),
        opts,
    )
    .unwrap();
    bn.train(false);
    let view = |t: &Tensor| t.view(&[1, 4, 1, 1]).unwrap();
    let want = x
        .sub(&view(&rm))
        .unwrap()
        .div(&view(&rv).add_scalar(1e-5).unwrap().sqrt().unwrap())
        .unwrap()
        .mul(&view(&gw))
        .unwrap()
        .add(&view(&gb))
        .unwrap();
    common::assert_close(
        &common::read(&bn.forward(&x).unwrap()),
        &common::read(&want),
        1e-5,
        "BatchNorm2d eval over the given statistics",
    );
    let before = host(&rm);
    bn.train(true);
    autograd::no_grad(|| bn.forward(&x)).unwrap();
    assert_ne!(
        host(&rm),
        before,
        "the given running_mean is the layer's buffer"
    );

    let gn = GroupNorm::from_parts(2, gw.alias(), gb.alias(), 1e-5).unwrap();
    let mut reference = GroupNorm::with_options(2, 4, 1e-5, true, F32, dev).unwrap();
    autograd::no_grad(|| {
        reference.weight.as_mut().unwrap().copy_(&gw)?;
        reference.bias.as_mut().unwrap().copy_(&gb).map(|_| ())
    })
    .unwrap();
    assert_eq!(
        host(&gn.forward(&x).unwrap()),
        host(&reference.forward(&x).unwrap())
    );

    let e = err(Conv2d::from_parts(w1.alias(), None, ConvOptions::default()));
    assert!(
        e.starts_with("Conv2d::from_parts") && e.contains("[3, 4, 2]"),
        "{e}"
    );
    let e = err(Conv2d::from_parts(w.alias(), Some(bt.alias()), o));
    assert!(e.starts_with("Conv2d::from_parts"), "{e}");
    let e = err(ConvTranspose2d::from_parts(wt.alias(), Some(b.alias()), ot));
    assert!(e.starts_with("ConvTranspose2d::from_parts"), "{e}");
    let e = err(BatchNorm2d::from_parts(
        Some(gw.alias()),
        None,
        None,
        None,
        opts,
    ));
    assert!(
        e.starts_with("BatchNorm2d::from_parts") && e.contains("affine"),
        "{e}"
    );
    let e = err(BatchNorm2d::from_parts(
        Some(gw.alias()),
        Some(tensor(&[0.0; 3], &[3], F32, dev)),
        Some(rm.alias()),
        Some(rv.alias()),
        opts,
    ));
    assert!(e.starts_with("BatchNorm2d::from_parts"), "{e}");
    let e = err(GroupNorm::from_parts(3, gw.alias(), gb.alias(), 1e-5));
    assert!(
        e.starts_with("GroupNorm::from_parts") && e.contains("num_groups (3)"),
        "{e}"
    );
}

#[cfg(feature = "cuda")]
common::devices::on_both!(
    layers_from_parts_compute_what_constructed_layers_do,
    bad_parts_and_inputs_are_errors_naming_the_layer,
    conv_and_norm_layers_from_parts,
);

#[cfg(not(feature = "cuda"))]
common::on_cpu!(
    layers_from_parts_compute_what_constructed_layers_do,
    bad_parts_and_inputs_are_errors_naming_the_layer,
    conv_and_norm_layers_from_parts,
);
