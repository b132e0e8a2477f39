//! Display against PyTorch's own printout.
//!
//! Every expected string below is `repr(t)` of the same tensor as printed by
//! PyTorch 2.15 (default print options), with one documented difference:
//! tensorscope writes `dtype=float64` where PyTorch writes
//! `dtype=torch.float64`.

use tensorscope::{bf16, f16, DType, Device, Tensor};

fn cpu<T: tensorscope::Element>(v: &[T], shape: &[usize]) -> Tensor {
    Tensor::from_slice(v, shape, Device::Cpu).unwrap()
}

/// The same logical tensor with permuted strides (a non-contiguous view).
fn transposed_copy(t: &Tensor) -> Tensor {
    let r = t.rank() as isize;
    let rev: Vec<isize> = (0..r).rev().collect();
    let v = t
        .permute(&rev)
        .unwrap()
        .contiguous()
        .unwrap()
        .permute(&rev)
        .unwrap();
    if t.rank() > 1 {
        assert!(!v.is_contiguous());
    }
    v
}

#[track_caller]
fn check(t: &Tensor, want: &str) {
    assert_eq!(t.to_string(), want);
    // Strides do not change the printout.
    assert_eq!(transposed_copy(t).to_string(), want);
}

#[test]
fn small_float_tensors() {
    let _shared = crate::common::shared();
    check(
        &cpu(&[1.0f32, 2., 3., 4.], &[2, 2]),
        "tensor([[1., 2.],\n        [3., 4.]])",
    );
    check(
        &cpu(&[1.5f64, -0.25], &[2]),
        "tensor([ 1.5000, -0.2500], dtype=float64)",
    );
    check(&cpu(&[0.0f32; 3], &[3]), "tensor([0., 0., 0.])");
    check(&cpu(&[-0.0f32, 1.5], &[2]), "tensor([-0.0000, 1.5000])");
    check(
        &Tensor::arange(0.0, 12.0, 1.0, DType::F32, Device::Cpu).unwrap().view(&[2, 2, 3]).unwrap(),
        "tensor([[[ 0.,  1.,  2.],\n         [ 3.,  4.,  5.]],\n\n        [[ 6.,  7.,  8.],\n         [ 9., 10., 11.]]])",
    );
}

#[test]
fn float_styles() {
    let _shared = crate::common::shared();
    // Scientific when the range is wide, a value is tiny, or one is huge.
    check(
        &cpu(&[1e-5f32, 1.0], &[2]),
        "tensor([1.0000e-05, 1.0000e+00])",
    );
    check(
        &cpu(&[1e9f32, 1.0], &[2]),
        "tensor([1.0000e+09, 1.0000e+00])",
    );
    check(
        &cpu(&[0.5f32, 1e-5, 3., 4.], &[2, 2]),
        "tensor([[5.0000e-01, 1.0000e-05],\n        [3.0000e+00, 4.0000e+00]])",
    );
    check(
        &cpu(&[123456789.0f64, 1.0], &[2]),
        "tensor([1.2346e+08, 1.0000e+00], dtype=float64)",
    );
    check(
        &cpu(&[-1.5e-7f64, 2.0], &[2]),
        "tensor([-1.5000e-07,  2.0000e+00], dtype=float64)",
    );
    // Non-finite values.
    check(
        &cpu(&[1.0f32, f32::NAN, f32::INFINITY, f32::NEG_INFINITY], &[4]),
        "tensor([1., nan, inf, -inf])",
    );
    check(&cpu(&[1.5f32, f32::NAN], &[2]), "tensor([1.5000,    nan])");
    check(&cpu(&[f32::NAN], &[1]), "tensor([nan])");
    check(
        &cpu(&[f32::NEG_INFINITY, 0.5], &[2]),
        "tensor([  -inf, 0.5000])",
    );
    // Half types print their exact values.
    check(
        &cpu(&[f16::from_f32(0.1), f16::from_f32(2.5)], &[2]),
        "tensor([0.1000, 2.5000], dtype=float16)",
    );
    check(
        &cpu(&[bf16::from_f32(0.1), bf16::from_f32(2.5)], &[2]),
        "tensor([0.1001, 2.5000], dtype=bfloat16)",
    );
    check(
        &cpu(&[f16::from_f32(1.0), f16::from_f32(2.0)], &[2]),
        "tensor([1., 2.], dtype=float16)",
    );
}

#[test]
fn formatter_precision_replaces_four_decimals() {
    let _shared = crate::common::shared();
    // torch.set_printoptions(precision=2); ties round to even on the exact value.
    let t = cpu(&[0.125f64, 0.375, 1.0], &[3]);
    assert_eq!(
        format!("{t:.2}"),
        "tensor([0.12, 0.38, 1.00], dtype=float64)"
    );
    assert_eq!(
        t.to_string(),
        "tensor([0.1250, 0.3750, 1.0000], dtype=float64)"
    );
}

#[test]
fn integers_and_bools() {
    let _shared = crate::common::shared();
    check(
        &cpu(&[1i32, -20, 300, 4], &[2, 2]),
        "tensor([[  1, -20],\n        [300,   4]], dtype=int32)",
    );
    check(&cpu(&[5i64, -3, 100], &[3]), "tensor([  5,  -3, 100])");
    check(
        &cpu(&[1u8, 2, 255], &[3]),
        "tensor([  1,   2, 255], dtype=uint8)",
    );
    check(
        &cpu(&[true, false, true], &[3]),
        "tensor([ True, False,  True])",
    );
    let t = Tensor::arange(0.0, 24.0, 1.0, DType::I64, Device::Cpu)
        .unwrap()
        .view(&[2, 3, 4])
        .unwrap()
        .transpose(0, 2)
        .unwrap();
    assert_eq!(
        t.to_string(),
        "tensor([[[ 0, 12],\n         [ 4, 16],\n         [ 8, 20]],\n\n        [[ 1, 13],\n         [ 5, 17],\n         [ 9, 21]],\n\n        [[ 2, 14],\n         [ 6, 18],\n         [10, 22]],\n\n        [[ 3, 15],\n         [ 7, 19],\n         [11, 23]]])"
    );
}

#[test]
fn scalars() {
    let _shared = crate::common::shared();
    assert_eq!(
        Tensor::scalar(3.5f32, Device::Cpu).unwrap().to_string(),
        "tensor(3.5000)"
    );
    assert_eq!(
        Tensor::scalar(7i32, Device::Cpu).unwrap().to_string(),
        "tensor(7, dtype=int32)"
    );
    assert_eq!(
        Tensor::scalar(true, Device::Cpu).unwrap().to_string(),
        "tensor(True)"
    );
    // A rank-0 view into a larger tensor.
    let x = cpu(&[1.0f64, 2.25, 3.0], &[3]);
    assert_eq!(
        x.select(0, 1).unwrap().to_string(),
        "tensor(2.2500, dtype=float64)"
    );
}

#[test]
fn empty_tensors() {
    let _shared = crate::common::shared();
    assert_eq!(
        Tensor::zeros(&[0], DType::F32, Device::Cpu)
            .unwrap()
            .to_string(),
        "tensor([])"
    );
    assert_eq!(
        Tensor::zeros(&[0, 3], DType::F32, Device::Cpu)
            .unwrap()
            .to_string(),
        "tensor([], size=(0, 3))"
    );
    assert_eq!(
        Tensor::zeros(&[0], DType::I64, Device::Cpu)
            .unwrap()
            .to_string(),
        "tensor([], dtype=int64)"
    );
    assert_eq!(
        Tensor::zeros(&[0], DType::Bool, Device::Cpu)
            .unwrap()
            .to_string(),
        "tensor([], dtype=bool)"
    );
    assert_eq!(
        Tensor::zeros(&[2, 0, 3], DType::I32, Device::Cpu)
            .unwrap()
            .to_string(),
        "tensor([], size=(2, 0, 3), dtype=int32)"
    );
}

#[test]
fn long_rows_wrap_at_80_columns() {
    let _shared = crate::common::shared();
    let t = Tensor::arange(0.0, 30.0, 1.0, DType::F32, Device::Cpu)
        .unwrap()
        .div_scalar(3.0)
        .unwrap();
    check(&t, "tensor([0.0000, 0.3333, 0.6667, 1.0000, 1.3333, 1.6667, 2.0000, 2.3333, 2.6667,\n        3.0000, 3.3333, 3.6667, 4.0000, 4.3333, 4.6667, 5.0000, 5.3333, 5.6667,\n        6.0000, 6.3333, 6.6667, 7.0000, 7.3333, 7.6667, 8.0000, 8.3333, 8.6667,\n        9.0000, 9.3333, 9.6667])");
    let t = Tensor::full(&[40], 1.5, DType::F64, Device::Cpu).unwrap();
    check(&t, "tensor([1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000,\n        1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000,\n        1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000,\n        1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000,\n        1.5000, 1.5000, 1.5000, 1.5000], dtype=float64)");
}

#[test]
fn large_tensors_are_summarized() {
    let _shared = crate::common::shared();
    // 2000 elements, 1-D.
    let t = Tensor::arange(0.0, 2000.0, 1.0, DType::F32, Device::Cpu).unwrap();
    check(&t, "tensor([0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 1.9970e+03, 1.9980e+03,\n        1.9990e+03])");
    let t = Tensor::arange(0.0, 2000.0, 1.0, DType::I32, Device::Cpu).unwrap();
    check(
        &t,
        "tensor([   0,    1,    2,  ..., 1997, 1998, 1999], dtype=int32)",
    );
    // 2000 elements, 2-D: both dimensions cut.
    let t = Tensor::arange(0.0, 2000.0, 1.0, DType::I64, Device::Cpu)
        .unwrap()
        .view(&[40, 50])
        .unwrap();
    check(&t, "tensor([[   0,    1,    2,  ...,   47,   48,   49],\n        [  50,   51,   52,  ...,   97,   98,   99],\n        [ 100,  101,  102,  ...,  147,  148,  149],\n        ...,\n        [1850, 1851, 1852,  ..., 1897, 1898, 1899],\n        [1900, 1901, 1902,  ..., 1947, 1948, 1949],\n        [1950, 1951, 1952,  ..., 1997, 1998, 1999]])");
    // 2000 elements, 3-D: the first dim (2) is not cut, the others are.
    let t = Tensor::arange(0.0, 2000.0, 1.0, DType::F32, Device::Cpu)
        .unwrap()
        .div_scalar(7.0)
        .unwrap()
        .view(&[2, 10, 100])
        .unwrap();
    check(&t, "tensor([[[0.0000e+00, 1.4286e-01, 2.8571e-01,  ..., 1.3857e+01,\n          1.4000e+01, 1.4143e+01],\n         [1.4286e+01, 1.4429e+01, 1.4571e+01,  ..., 2.8143e+01,\n          2.8286e+01, 2.8429e+01],\n         [2.8571e+01, 2.8714e+01, 2.8857e+01,  ..., 4.2429e+01,\n          4.2571e+01, 4.2714e+01],\n         ...,\n         [1.0000e+02, 1.0014e+02, 1.0029e+02,  ..., 1.1386e+02,\n          1.1400e+02, 1.1414e+02],\n         [1.1429e+02, 1.1443e+02, 1.1457e+02,  ..., 1.2814e+02,\n          1.2829e+02, 1.2843e+02],\n         [1.2857e+02, 1.2871e+02, 1.2886e+02,  ..., 1.4243e+02,\n          1.4257e+02, 1.4271e+02]],\n\n        [[1.4286e+02, 1.4300e+02, 1.4314e+02,  ..., 1.5671e+02,\n          1.5686e+02, 1.5700e+02],\n         [1.5714e+02, 1.5729e+02, 1.5743e+02,  ..., 1.7100e+02,\n          1.7114e+02, 1.7129e+02],\n         [1.7143e+02, 1.7157e+02, 1.7171e+02,  ..., 1.8529e+02,\n          1.8543e+02, 1.8557e+02],\n         ...,\n         [2.4286e+02, 2.4300e+02, 2.4314e+02,  ..., 2.5671e+02,\n          2.5686e+02, 2.5700e+02],\n         [2.5714e+02, 2.5729e+02, 2.5743e+02,  ..., 2.7100e+02,\n          2.7114e+02, 2.7129e+02],\n         [2.7143e+02, 2.7157e+02, 2.7171e+02,  ..., 2.8529e+02,\n          2.8543e+02, 2.8557e+02]]])");
    // Bools, and an expanded (stride 0) tensor.
    let b = Tensor::arange(0.0, 1200.0, 1.0, DType::I64, Device::Cpu)
        .unwrap()
        .view(&[30, 40])
        .unwrap();
    // b % 3 == 0, built from ops that exist: b - 3 * floor(b / 3) == 0.
    let m = b
        .sub(
            &b.div_scalar(3.0)
                .unwrap()
                .floor()
                .unwrap()
                .mul_scalar(3.0)
                .unwrap(),
        )
        .unwrap()
        .eq_scalar(0.0)
        .unwrap();
    check(&m, "tensor([[ True, False, False,  ..., False, False,  True],\n        [False, False,  True,  ..., False,  True, False],\n        [False,  True, False,  ...,  True, False, False],\n        ...,\n        [ True, False, False,  ..., False, False,  True],\n        [False, False,  True,  ..., False,  True, False],\n        [False,  True, False,  ...,  True, False, False]])");
    let e = Tensor::arange(0.0, 8.0, 1.0, DType::I64, Device::Cpu)
        .unwrap()
        .view(&[8, 1])
        .unwrap()
        .expand(&[8, 200])
        .unwrap();
    assert_eq!(e.to_string(), "tensor([[0, 0, 0,  ..., 0, 0, 0],\n        [1, 1, 1,  ..., 1, 1, 1],\n        [2, 2, 2,  ..., 2, 2, 2],\n        ...,\n        [5, 5, 5,  ..., 5, 5, 5],\n        [6, 6, 6,  ..., 6, 6, 6],\n        [7, 7, 7,  ..., 7, 7, 7]])");
}

#[test]
fn threshold_is_1000_elements() {
    let _shared = crate::common::shared();
    // Exactly 1000 elements print in full; 1001 are summarized.
    let full = Tensor::zeros(&[1000], DType::I64, Device::Cpu)
        .unwrap()
        .to_string();
    assert!(!full.contains("..."));
    assert_eq!(full.matches('0').count(), 1000);
    let cut = Tensor::zeros(&[1001], DType::I64, Device::Cpu)
        .unwrap()
        .to_string();
    assert_eq!(cut, "tensor([0, 0, 0,  ..., 0, 0, 0])");
}

#[test]
fn a_strided_half_of_a_large_tensor_is_not_summarized() {
    let _shared = crate::common::shared();
    // 1000 elements of a 2000-element storage: printed in full (PyTorch
    // looks at the view's element count, not the storage's).
    let t = Tensor::arange(0.0, 2000.0, 1.0, DType::F32, Device::Cpu)
        .unwrap()
        .view(&[2, 1000])
        .unwrap()
        .slice(1, 0, 1000, 2)
        .unwrap();
    let s = t.to_string();
    assert!(!s.contains("..."));
    assert!(s.starts_with("tensor([[   0.,    2.,    4.,    6.,    8.,   10.,   12.,   14.,   16.,   18.,\n           20.,"), "{s}");
    assert!(
        s.ends_with("1980., 1982., 1984., 1986., 1988., 1990., 1992., 1994., 1996., 1998.]])"),
        "{s}"
    );
    assert!(s.contains("998.],\n        [1000., 1002.,"), "{s}");
}
