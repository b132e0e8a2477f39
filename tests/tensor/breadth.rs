//! Issue 17 item 5, first part: the special-value tests and `nan_to_num`
//! (values PyTorch 2.15 gives, by hand: the differential fixtures hold no
//! NaN or infinite inputs), and the errors of the shape-checked products
//! and the index ops. Values and gradients of the rest are in the
//! differential suite.

#[cfg(feature = "cuda")]
use crate::common::devices::on_both;
use tensorscope::{DType, Device, Tensor};

const CPU: Device = Device::Cpu;

fn special_values_are_found_and_replaced(dev: Device) {
    let x = Tensor::from_slice(
        &[1.0f32, f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0],
        &[5],
        dev,
    )
    .unwrap();
    let b = |t: Tensor| t.to_vec::<bool>().unwrap();
    assert_eq!(b(x.isnan().unwrap()), [false, true, false, false, false]);
    assert_eq!(b(x.isinf().unwrap()), [false, false, true, true, false]);
    assert_eq!(b(x.isfinite().unwrap()), [true, false, false, false, true]);
    // torch.nan_to_num(x): 0, f32's max and lowest.
    let r = x
        .nan_to_num(0.0, None, None)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(r, [1.0, 0.0, f32::MAX, f32::MIN, -0.0]);
    let r = x
        .nan_to_num(7.0, Some(1.0), Some(-2.0))
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(r, [1.0, 7.0, 1.0, -2.0, -0.0]);
    // bf16 saturates to its own largest value.
    let h = x
        .to_dtype(DType::BF16)
        .unwrap()
        .nan_to_num(0.0, None, None)
        .unwrap();
    let hv = h.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(hv[2], tensorscope::bf16::MAX.to_f32());
    // Integers: no NaN, no infinity, all finite, unchanged.
    let i = Tensor::from_slice(&[3i64, -4], &[2], dev).unwrap();
    assert_eq!(b(i.isnan().unwrap()), [false, false]);
    assert_eq!(b(i.isinf().unwrap()), [false, false]);
    assert_eq!(b(i.isfinite().unwrap()), [true, true]);
    assert_eq!(
        i.nan_to_num(0.0, None, None)
            .unwrap()
            .to_vec::<i64>()
            .unwrap(),
        [3, -4]
    );
}

#[test]
fn bad_shapes_and_dims_are_errors_naming_the_op() {
    let _shared = crate::common::shared();
    let m = Tensor::zeros(&[2, 3], DType::F32, CPU).unwrap();
    let v = Tensor::zeros(&[3], DType::F32, CPU).unwrap();
    let b3 = Tensor::zeros(&[2, 3, 4], DType::F32, CPU).unwrap();
    let b3x = Tensor::zeros(&[3, 4, 5], DType::F32, CPU).unwrap();
    for (op, e) in [
        ("mm", m.mm(&v).unwrap_err()),
        ("mm", m.mm(&m).unwrap_err()),
        ("bmm", m.bmm(&m).unwrap_err()),
        ("bmm", b3.bmm(&b3x).unwrap_err()),
        ("outer", m.outer(&v).unwrap_err()),
        ("dot", v.dot(&m).unwrap_err()),
        (
            "dot",
            v.dot(&Tensor::zeros(&[4], DType::F32, CPU).unwrap())
                .unwrap_err(),
        ),
        ("addmm", m.addmm(&m, &m, 1.0, 1.0).unwrap_err()),
        ("tril", v.tril(0).unwrap_err()),
        ("triu", v.triu(0).unwrap_err()),
        ("flip", m.flip(&[2]).unwrap_err()),
        ("flip", m.flip(&[0, -2]).unwrap_err()),
        ("roll", m.roll(&[1, 2], &[0]).unwrap_err()),
        ("roll", m.roll(&[1, 2], &[]).unwrap_err()),
    ] {
        let s = e.to_string();
        assert!(s.contains(op), "{op}: {s}");
    }
    assert!(m.mm(&m).unwrap_err().to_string().contains("[2, 3]"));
    // An empty flip is a copy, not a view of the input.
    let f = m.flip(&[]).unwrap();
    assert!(!f.shares_storage(&m));
}

fn products_and_lerp_follow_pytorch_at_their_edges(dev: Device) {
    // addmm with beta 0 does not read self (NaN stays out).
    let nan = Tensor::full(&[2, 2], f64::NAN, DType::F32, dev).unwrap();
    let a = Tensor::ones(&[2, 3], DType::F32, dev).unwrap();
    let b = Tensor::ones(&[3, 2], DType::F32, dev).unwrap();
    assert_eq!(
        nan.addmm(&a, &b, 0.0, 2.0)
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        [6.0; 4]
    );
    // self must be the product's dtype and broadcast to its shape.
    let big = Tensor::zeros(&[3, 2, 2], DType::F32, dev).unwrap();
    assert!(big
        .addmm(&a, &b, 1.0, 1.0)
        .unwrap_err()
        .to_string()
        .contains("addmm"));
    let f64s = Tensor::zeros(&[2, 2], DType::F64, dev).unwrap();
    assert!(f64s
        .addmm(&a, &b, 1.0, 1.0)
        .unwrap_err()
        .to_string()
        .contains("addmm"));
    // lerp at weight 1 is `end` exactly; mixed dtypes are refused.
    let s = Tensor::from_slice(&[1e8f32], &[1], dev).unwrap();
    let e = Tensor::from_slice(&[1.0f32], &[1], dev).unwrap();
    assert_eq!(s.lerp(&e, 1.0).unwrap().to_vec::<f32>().unwrap(), [1.0]);
    let e64 = Tensor::from_slice(&[1.0f64], &[1], dev).unwrap();
    assert!(s.lerp(&e64, 0.5).unwrap_err().to_string().contains("lerp"));
    // dot: one product-sum (no f16 overflow of a product), bool refused.
    let h = Tensor::from_slice(&[300.0f32, 300.0], &[2], dev)
        .unwrap()
        .to_dtype(DType::F16)
        .unwrap();
    let h2 = Tensor::from_slice(&[300.0f32, -300.0], &[2], dev)
        .unwrap()
        .to_dtype(DType::F16)
        .unwrap();
    let d = h
        .dot(&h2)
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap()
        .item::<f32>()
        .unwrap();
    assert_eq!(d, 0.0);
    let t = Tensor::ones(&[2], DType::Bool, dev).unwrap();
    assert!(t.dot(&t).unwrap_err().to_string().contains("dot"));
    // nan_to_num of integers is a copy; logical ops name themselves.
    let i = Tensor::from_slice(&[1i64, 2], &[2], dev).unwrap();
    assert!(!i.nan_to_num(0.0, None, None).unwrap().shares_storage(&i));
    let e = i
        .logical_and(&Tensor::zeros(&[3], DType::I64, dev).unwrap())
        .unwrap_err();
    assert!(e.to_string().contains("logical_and"), "{e}");
}

/// f16 and bf16 products sum in f32, as PyTorch's do on every CPU and
/// with cuBLAS: 4096 ones times the type's 1/3 make exactly 4096 times it
/// (1365 in f16, 1368 in bf16, PyTorch's figures), where a sum in the
/// half type drifts (its step is 1/16 by 64). gemm accumulates f16 in f16
/// on aarch64 with FEAT_FP16, so that target multiplies f16 as f32.
fn half_products_accumulate_in_f32(dev: Device) {
    const K: usize = 4096;
    for (dt, want) in [(DType::F16, 1365.0), (DType::BF16, 1368.0)] {
        let ones = |shape: &[usize]| Tensor::ones(shape, dt, dev).unwrap();
        let third = |shape: &[usize]| Tensor::full(shape, 1.0 / 3.0, dt, dev).unwrap();
        let read = |t: Tensor| t.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap();
        for (m, n) in [(3, 2), (2, 18), (16, 16), (64, 48)] {
            let mm = ones(&[m, K]).mm(&third(&[K, n])).unwrap();
            assert_eq!(
                read(mm),
                vec![want; m * n],
                "mm {dt} [{m}, {K}] x [{K}, {n}]"
            );
        }
        let bmm = ones(&[2, 1, K]).bmm(&third(&[2, K, 1])).unwrap();
        assert_eq!(read(bmm), [want; 2], "bmm {dt}");
        assert_eq!(
            read(ones(&[K]).dot(&third(&[K])).unwrap()),
            [want],
            "dot {dt}"
        );
    }
}

#[cfg(feature = "cuda")]
on_both!(
    special_values_are_found_and_replaced,
    products_and_lerp_follow_pytorch_at_their_edges,
    half_products_accumulate_in_f32,
);

#[cfg(not(feature = "cuda"))]
mod cpu {
    use tensorscope::Device;
    #[test]
    fn special_values_are_found_and_replaced() {
        let _shared = crate::common::shared();
        super::special_values_are_found_and_replaced(Device::Cpu)
    }
    #[test]
    fn products_and_lerp_follow_pytorch_at_their_edges() {
        let _shared = crate::common::shared();
        super::products_and_lerp_follow_pytorch_at_their_edges(Device::Cpu)
    }
    #[test]
    fn half_products_accumulate_in_f32() {
        let _shared = crate::common::shared();
        super::half_products_accumulate_in_f32(Device::Cpu)
    }
}
