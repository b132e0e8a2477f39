//! Every bad-input path of the existing API returns the right `Error` variant,
//! and its message names the op and the offending shapes, dtypes, devices or
//! indices. Nothing here may panic.

use tensorscope::{DType, Device, Error, Tensor};

const CPU: Device = Device::Cpu;

fn t(shape: &[usize]) -> Tensor {
    Tensor::zeros(shape, DType::F32, CPU).unwrap()
}

/// Asserts that the message contains every part.
#[track_caller]
fn says(e: &Error, parts: &[&str]) {
    let m = e.to_string();
    for p in parts {
        assert!(m.contains(p), "{p:?} missing from {m:?}");
    }
}

#[test]
fn shape_mismatch_in_add_names_both_shapes() {
    let _shared = crate::common::shared();
    let e = t(&[2, 3]).add(&t(&[4, 3])).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { op: "add", .. }), "{e:?}");
    says(&e, &["add", "[2, 3]", "[4, 3]", "2 vs 4"]);
    for (r, op) in [
        (t(&[3]).sub(&t(&[2])), "sub"),
        (t(&[3]).mul(&t(&[2])), "mul"),
        (t(&[3]).maximum(&t(&[2])), "maximum"),
        (t(&[3]).lt(&t(&[2])), "lt"),
        (
            Tensor::where_cond(&t(&[3]).gt_scalar(0.0).unwrap(), &t(&[3]), &t(&[2])),
            "where",
        ),
    ] {
        let e = r.unwrap_err();
        assert!(matches!(e, Error::ShapeMismatch { .. }), "{op}: {e:?}");
        says(&e, &[op, "[3]", "[2]"]);
    }
}

#[test]
fn a_view_the_layout_cannot_give() {
    let _shared = crate::common::shared();
    let x = t(&[3, 4]).t().unwrap();
    let e = x.view(&[12]).unwrap_err();
    assert!(matches!(e, Error::NotViewable { op: "view", .. }), "{e:?}");
    says(&e, &["view", "[12]", "[4, 3]", "[1, 4]", "reshape"]);
}

#[test]
fn reshape_or_view_with_the_wrong_element_count() {
    let _shared = crate::common::shared();
    let x = t(&[2, 3]);
    for (r, op) in [(x.reshape(&[4, 2]), "reshape"), (x.view(&[5]), "view")] {
        let e = r.unwrap_err();
        assert!(matches!(e, Error::ElementCount { .. }), "{e:?}");
        says(&e, &[op, "[2, 3]", "6 elements"]);
    }
    let e = x.reshape(&[4, -1]).unwrap_err();
    says(&e, &["reshape", "[4, -1]"]);
    let e = x.reshape(&[-1, -1]).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { op: "reshape", .. }),
        "{e:?}"
    );
    let e = x.view(&[-2, 3]).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { op: "view", .. }),
        "{e:?}"
    );
    let e = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[2, 2], CPU).unwrap_err();
    assert!(
        matches!(
            e,
            Error::ElementCount {
                op: "from_slice",
                ..
            }
        ),
        "{e:?}"
    );
    says(&e, &["from_slice", "[2, 2]", "3 elements"]);
    let e = Tensor::from_slice(&[1u8], &[usize::MAX, 2], CPU).unwrap_err();
    assert!(
        matches!(e, Error::ElementCount { .. }),
        "overflowing shape: {e:?}"
    );
}

#[test]
fn dim_out_of_range_for_every_dim_taking_op() {
    let _shared = crate::common::shared();
    let x = t(&[2, 3]);
    let cases: Vec<(tensorscope::Result<Tensor>, &str)> = vec![
        (x.transpose(0, 2), "transpose"),
        (x.transpose(-3, 0), "transpose"),
        (x.narrow(2, 0, 1), "narrow"),
        (x.slice(5, 0, 1, 1), "slice"),
        (x.select(-3, 0), "select"),
        (x.squeeze_dim(2), "squeeze"),
        (x.unsqueeze(3), "unsqueeze"),
        (x.unsqueeze(-4), "unsqueeze"),
        (x.flatten(0, 2), "flatten"),
        (x.permute(&[0, 2]), "permute"),
    ];
    for (r, op) in cases {
        let e = r.unwrap_err();
        assert!(
            matches!(e, Error::DimOutOfRange { rank: 2, .. }),
            "{op}: {e:?}"
        );
        says(&e, &[op, "rank 2"]);
    }
    for (r, op) in [
        (x.unbind(2).map(|_| ()), "unbind"),
        (x.split(1, 2).map(|_| ()), "split"),
        (x.chunk(2, -3).map(|_| ()), "chunk"),
        (x.size(2).map(|_| ()), "size"),
    ] {
        let e = r.unwrap_err();
        assert!(matches!(e, Error::DimOutOfRange { .. }), "{op}: {e:?}");
        says(&e, &[op]);
    }
    let s = Tensor::scalar(1.0f32, CPU).unwrap();
    assert!(matches!(
        s.transpose(0, 0),
        Err(Error::DimOutOfRange { rank: 0, .. })
    ));
}

#[test]
fn select_index_out_of_range() {
    let _shared = crate::common::shared();
    let x = t(&[2, 3]);
    let e = x.select(1, 3).unwrap_err();
    assert!(
        matches!(
            e,
            Error::IndexOutOfRange {
                op: "select",
                index: 3,
                dim: 1,
                size: 3
            }
        ),
        "{e:?}"
    );
    says(&e, &["select", "index 3", "dimension 1", "size 3"]);
    let e = x.select(0, -3).unwrap_err();
    assert!(
        matches!(e, Error::IndexOutOfRange { index: -3, .. }),
        "{e:?}"
    );
    let e = Tensor::zeros(&[0], DType::F32, CPU)
        .unwrap()
        .select(0, 0)
        .unwrap_err();
    assert!(matches!(e, Error::IndexOutOfRange { size: 0, .. }), "{e:?}");
}

#[test]
fn narrow_past_the_end() {
    let _shared = crate::common::shared();
    let x = t(&[4, 6]);
    let e = x.narrow(1, 4, 3).unwrap_err();
    assert!(
        matches!(
            e,
            Error::IndexOutOfRange {
                op: "narrow",
                index: 7,
                dim: 1,
                size: 6
            }
        ),
        "{e:?}"
    );
    says(&e, &["narrow", "7", "dimension 1", "size 6"]);
    let e = x.narrow(0, 5, 0).unwrap_err();
    assert!(
        matches!(e, Error::IndexOutOfRange { op: "narrow", .. }),
        "{e:?}"
    );
    // start + len overflowing usize is still just out of range
    let e = x.narrow(0, 2, usize::MAX).unwrap_err();
    assert!(
        matches!(e, Error::IndexOutOfRange { op: "narrow", .. }),
        "{e:?}"
    );
    // a start past the size is an empty view, as Python's x[5:6]
    assert_eq!(x.slice(0, 5, 6, 1).unwrap().shape(), &[0, 6]);
    let e = x.slice(0, 0, 4, 0).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { op: "slice", .. }),
        "{e:?}"
    );
    says(&e, &["slice", "step"]);
}

#[test]
fn expand_of_a_non_1_dim() {
    let _shared = crate::common::shared();
    let x = t(&[3, 1]);
    let e = x.expand(&[4, 5]).unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { op: "expand", .. }),
        "{e:?}"
    );
    says(&e, &["expand", "[3, 1]", "size 3 cannot expand to 4"]);
    let e = x.expand(&[5]).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { op: "expand", .. }),
        "{e:?}"
    );
    says(&e, &["expand", "[5]", "fewer dimensions"]);
    let e = x.expand(&[-1, 3, 5]).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { op: "expand", .. }),
        "{e:?}"
    );
    let e = x.expand_as(&t(&[2, 2])).unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { op: "expand", .. }),
        "{e:?}"
    );
}

#[test]
fn permute_bad_dims() {
    let _shared = crate::common::shared();
    let x = t(&[2, 3, 4]);
    let e = x.permute(&[0, 1]).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { op: "permute", .. }),
        "{e:?}"
    );
    says(&e, &["permute", "2 dims", "rank 3", "[2, 3, 4]"]);
    let e = x.permute(&[0, 1, 1]).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { op: "permute", .. }),
        "{e:?}"
    );
    says(&e, &["permute", "repeated", "[0, 1, 1]"]);
    let e = x.permute(&[0, 1, 3]).unwrap_err();
    assert!(
        matches!(
            e,
            Error::DimOutOfRange {
                op: "permute",
                dim: 3,
                rank: 3
            }
        ),
        "{e:?}"
    );
    // any rank: no fixed-size table to overflow
    let big = Tensor::zeros(&[1; 70], DType::F32, CPU).unwrap();
    let dims: Vec<isize> = (0..70).rev().collect();
    assert_eq!(big.permute(&dims).unwrap().rank(), 70);
}

#[test]
fn item_on_a_non_scalar() {
    let _shared = crate::common::shared();
    let e = t(&[2, 2]).item::<f32>().unwrap_err();
    assert!(
        matches!(
            e,
            Error::NotAScalar {
                op: "item",
                numel: 4,
                ..
            }
        ),
        "{e:?}"
    );
    says(&e, &["item", "4 elements", "[2, 2]"]);
    let e = t(&[0]).item::<f32>().unwrap_err();
    assert!(matches!(e, Error::NotAScalar { numel: 0, .. }), "{e:?}");
    // any one-element shape is fine
    assert_eq!(
        Tensor::full(&[1, 1, 1], 2.5, DType::F64, CPU)
            .unwrap()
            .item::<f64>()
            .unwrap(),
        2.5
    );
}

#[test]
fn cuda_without_the_cuda_feature_is_device_unavailable() {
    let _shared = crate::common::shared();
    // The first CUDA ordinal this machine lacks: cuda:0 without a GPU (or
    // without the `cuda` feature), cuda:1 on a one-GPU machine.
    let n = tensorscope::backend::cuda::device_count();
    let cuda = Device::Cuda(n);
    let checks: Vec<(tensorscope::Result<Tensor>, &str)> = vec![
        (Tensor::zeros(&[2], DType::F32, cuda), "zeros"),
        (Tensor::from_slice(&[1.0f32], &[1], cuda), "from_slice"),
        (Tensor::arange(0.0, 3.0, 1.0, DType::F32, cuda), "arange"),
        (Tensor::randn(&[2], DType::F32, cuda), "randn"),
        (Tensor::empty(&[0], DType::F32, cuda), "empty of 0 elements"),
        (
            Tensor::from_slice::<f32>(&[], &[0], cuda),
            "from_slice of 0 elements",
        ),
        (t(&[2]).to_device(cuda), "to_device"),
    ];
    for (r, what) in checks {
        let e = r.unwrap_err();
        let Error::DeviceUnavailable {
            device, ref reason, ..
        } = e
        else {
            panic!("{what}: expected DeviceUnavailable, got {e:?}");
        };
        assert_eq!(device, cuda, "{what}");
        assert!(reason.to_lowercase().contains("cuda"), "{what}: {reason}");
        says(&e, &[&format!("cuda:{n}"), "not available"]);
    }
    if n == 0 {
        assert!(!tensorscope::backend::cuda::is_available());
        assert_eq!(Device::cuda_if_available(), CPU);
    }
}

#[test]
fn device_mismatch_message_names_both_devices() {
    let _shared = crate::common::shared();
    // Without a CUDA backend no tensor can live on a GPU, so no op can see
    // two devices yet (the CUDA issue adds `a_cpu.add(&b_cuda)` -> this error).
    // The error itself: variant and message.
    let e = Error::DeviceMismatch {
        op: "add",
        lhs: CPU,
        rhs: Device::Cuda(1),
    };
    says(&e, &["add", "device mismatch", "cpu", "cuda:1"]);
}

#[test]
fn bool_arithmetic_is_refused() {
    let _shared = crate::common::shared();
    let b = Tensor::ones(&[3], DType::Bool, CPU).unwrap();
    for (r, op) in [
        (b.sub(&b), "sub"),
        (b.pow(&b), "pow"),
        (b.sub_scalar(1.0), "sub"),
        (b.neg(), "neg"),
        (b.abs(), "abs"),
        (b.relu(), "relu"),
        (b.clamp(Some(0.0), None), "clamp"),
        (b.rsub_scalar(1.0), "sub"),
    ] {
        let e = r.unwrap_err();
        assert!(
            matches!(
                e,
                Error::DTypeMismatch {
                    got: DType::Bool,
                    ..
                }
            ),
            "{op}: {e:?}"
        );
        says(&e, &[op, "bool"]);
    }
    let e = Tensor::where_cond(&t(&[3]), &t(&[3]), &t(&[3])).unwrap_err();
    assert!(
        matches!(
            e,
            Error::DTypeMismatch {
                op: "where",
                got: DType::F32,
                ..
            }
        ),
        "{e:?}"
    );
    let mut x = t(&[3]);
    let e = x.masked_fill_(&t(&[3]), 1.0).unwrap_err();
    assert!(
        matches!(
            e,
            Error::DTypeMismatch {
                op: "masked_fill_",
                ..
            }
        ),
        "{e:?}"
    );
    says(&e, &["masked_fill_", "bool", "float32"]);
}

#[test]
fn float_only_ops_into_an_integer_tensor_in_place() {
    let _shared = crate::common::shared();
    let mut i = Tensor::from_slice(&[1i32, 4, 9], &[3], CPU).unwrap();
    for (r, op) in [
        (i.sqrt_().map(|_| ()), "sqrt"),
        (i.exp_().map(|_| ()), "exp"),
        (i.sigmoid_().map(|_| ()), "sigmoid"),
        (i.gelu_().map(|_| ()), "gelu"),
    ] {
        let e = r.unwrap_err();
        assert!(
            matches!(
                e,
                Error::DTypeMismatch {
                    got: DType::I32,
                    ..
                }
            ),
            "{op}: {e:?}"
        );
        says(&e, &[op, "int32"]);
    }
    let f = Tensor::ones(&[3], DType::F64, CPU).unwrap();
    let e = i.mul_(&f).unwrap_err();
    assert!(matches!(e, Error::DTypeMismatch { op: "mul", .. }), "{e:?}");
    says(&e, &["mul", "float64", "int32"]);
    let e = i.div_scalar_(2.0).unwrap_err();
    says(&e, &["div", "float32", "int32"]);
    assert_eq!(
        i.to_vec::<i32>().unwrap(),
        vec![1, 4, 9],
        "nothing was written"
    );
    let mut u = Tensor::zeros(&[3], DType::U8, CPU).unwrap();
    let e = u.uniform_(0.0, 1.0).unwrap_err();
    assert!(
        matches!(
            e,
            Error::DTypeMismatch {
                op: "uniform_",
                got: DType::U8,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn in_place_broadcast_and_expanded_targets() {
    let _shared = crate::common::shared();
    let mut x = t(&[3]);
    let e = x.add_(&t(&[2, 3])).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { op: "add", .. }), "{e:?}");
    says(&e, &["add", "[3]", "[2, 3]"]);
    let mut ex = t(&[1, 3]).expand(&[4, 3]).unwrap();
    let e = ex.mul_scalar_(2.0).unwrap_err();
    assert!(
        matches!(e, Error::InvalidInPlace { op: "mul", .. }),
        "{e:?}"
    );
    says(&e, &["mul", "[4, 3]", "[0, 1]", "single memory location"]);
    let mut out = t(&[2]);
    let e = t(&[3]).add_out(&t(&[3]), &mut out).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { op: "add", .. }), "{e:?}");
}

#[test]
fn creation_arguments() {
    let _shared = crate::common::shared();
    for (r, op) in [
        (Tensor::arange(0.0, 1.0, 0.0, DType::F32, CPU), "arange"),
        (Tensor::arange(0.0, 1.0, -1.0, DType::F32, CPU), "arange"),
        (
            Tensor::arange(0.0, f64::INFINITY, 1.0, DType::F32, CPU),
            "arange",
        ),
        (
            Tensor::arange(f64::NAN, 1.0, 1.0, DType::F32, CPU),
            "arange",
        ),
    ] {
        let e = r.unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{op}: {e:?}");
        says(&e, &[op]);
    }
    let e = Tensor::rand(&[2], DType::I64, CPU).unwrap_err();
    assert!(
        matches!(
            e,
            Error::DTypeMismatch {
                op: "rand",
                got: DType::I64,
                ..
            }
        ),
        "{e:?}"
    );
    let e = Tensor::randn(&[2], DType::Bool, CPU).unwrap_err();
    assert!(
        matches!(e, Error::DTypeMismatch { op: "randn", .. }),
        "{e:?}"
    );
    let mut x = t(&[2]);
    for (lo, hi) in [(1.0, 0.0), (f64::NAN, 1.0), (0.0, f64::INFINITY)] {
        let e = x.uniform_(lo, hi).unwrap_err();
        assert!(
            matches!(e, Error::InvalidArgument { op: "uniform_", .. }),
            "{e:?}"
        );
    }
    for std in [-1.0, f64::NAN] {
        let e = x.normal_(0.0, std).unwrap_err();
        assert!(
            matches!(e, Error::InvalidArgument { op: "normal_", .. }),
            "{e:?}"
        );
    }
    // sizes that overflow the address space or cannot be served
    let e = Tensor::zeros(&[usize::MAX, 2], DType::F32, CPU).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { op: "zeros", .. }),
        "{e:?}"
    );
    says(&e, &["overflows"]);
    let e = Tensor::zeros(&[usize::MAX / 8], DType::F32, CPU).unwrap_err();
    assert!(matches!(e, Error::OutOfMemory { .. }), "{e:?}");
    let e = Tensor::arange(0.0, 1e300, 1.0, DType::F32, CPU).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { .. } | Error::OutOfMemory { .. }),
        "{e:?}"
    );
    let e = Tensor::linspace(0.0, 1.0, usize::MAX / 4, DType::F32, CPU).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { .. } | Error::OutOfMemory { .. }),
        "{e:?}"
    );
}

#[test]
fn split_chunk_and_as_strided_arguments() {
    let _shared = crate::common::shared();
    let x = t(&[4, 2]);
    let e = x.split(0, 0).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { op: "split", .. }),
        "{e:?}"
    );
    let e = x.split_sizes(&[1, 2], 0).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { op: "split", .. }),
        "{e:?}"
    );
    says(&e, &["split", "[1, 2]", "3", "size 4"]);
    let e = x.split_sizes(&[usize::MAX, 5], 0).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { op: "split", .. }),
        "overflowing sizes: {e:?}"
    );
    let e = x.chunk(0, 0).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { op: "chunk", .. }),
        "{e:?}"
    );
    let e = x.as_strided(&[3, 3], &[3, 1], 0).unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidArgument {
                op: "as_strided",
                ..
            }
        ),
        "{e:?}"
    );
    says(&e, &["as_strided", "[3, 3]", "element 8", "8 elements"]);
    let e = x.as_strided(&[2], &[usize::MAX], 0).unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidArgument {
                op: "as_strided",
                ..
            }
        ),
        "{e:?}"
    );
    let e = x.as_strided(&[2], &[1, 1], 0).unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidArgument {
                op: "as_strided",
                ..
            }
        ),
        "{e:?}"
    );
    let e = t(&[2, 2, 2]).t().unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { op: "t", .. }), "{e:?}");
    says(&e, &["t", "rank 3", "transpose"]);
    let e = x.flatten(1, 0).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { op: "flatten", .. }),
        "{e:?}"
    );
}

#[test]
fn pow_negative_integer_scalar_on_integers() {
    let _shared = crate::common::shared();
    let i = Tensor::from_slice(&[2i64, 3], &[2], CPU).unwrap();
    let e = i.pow_scalar(-2.0).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { op: "pow", .. }),
        "{e:?}"
    );
    says(&e, &["pow", "negative", "int64", "-2"]);
}

#[test]
fn operators_return_errors_instead_of_panicking() {
    let _shared = crate::common::shared();
    let a = t(&[2]);
    let b = t(&[3]);
    assert!(matches!(
        &a + &b,
        Err(Error::ShapeMismatch { op: "add", .. })
    ));
    assert!(matches!(
        &a - &b,
        Err(Error::ShapeMismatch { op: "sub", .. })
    ));
    assert!(matches!(
        &a * &b,
        Err(Error::ShapeMismatch { op: "mul", .. })
    ));
    assert!(matches!(
        &a / &b,
        Err(Error::ShapeMismatch { op: "div", .. })
    ));
    let bools = Tensor::ones(&[2], DType::Bool, CPU).unwrap();
    assert!(matches!(
        -bools,
        Err(Error::DTypeMismatch { op: "neg", .. })
    ));
}
