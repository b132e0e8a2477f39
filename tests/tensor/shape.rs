//! cat, stack and repeat against naive references on `Vec<f64>`, with
//! contiguous, transposed and stepped inputs in every dtype, plus every error
//! path.

use tensorscope::{DType, Device, Error, Tensor};

use crate::common;
use common::layouts::*;

fn vals(t: &Tensor) -> Vec<f64> {
    t.to_vec::<f64>().unwrap()
}

/// Naive cat of row-major buffers.
fn ref_cat(parts: &[(Vec<f64>, Vec<usize>)], d: usize) -> (Vec<f64>, Vec<usize>) {
    let mut shape = parts[0].1.clone();
    shape[d] = parts.iter().map(|p| p.1[d]).sum();
    let mut out = vec![0.0; numel(&shape)];
    for (i, o) in out.iter_mut().enumerate() {
        let mut idx = unravel(i, &shape);
        let mut k = 0;
        while idx[d] >= parts[k].1[d] {
            idx[d] -= parts[k].1[d];
            k += 1;
        }
        *o = parts[k].0[ravel(&idx, &parts[k].1)];
    }
    (out, shape)
}

#[test]
fn cat_matches_reference_for_every_dtype_and_layout() {
    let _shared = crate::common::shared();
    for &dtype in &DTYPES {
        for (ka, kb) in [
            (Kind::Contiguous, Kind::Transposed),
            (Kind::Transposed, Kind::Stepped),
            (Kind::Stepped, Kind::Contiguous),
        ] {
            for d in 0..3usize {
                let mut sa = vec![2, 3, 4];
                let mut sb = vec![2, 3, 4];
                sa[d] = 3;
                sb[d] = 2;
                let va = values(numel(&sa), dtype, 1);
                let vb = values(numel(&sb), dtype, 5);
                let a = make(&va, &sa, dtype, ka);
                let b = make(&vb, &sb, dtype, kb);
                let c = Tensor::cat(&[&a, &b, &a], d as isize).unwrap();
                let (want, wshape) = ref_cat(
                    &[
                        (va.clone(), sa.clone()),
                        (vb.clone(), sb.clone()),
                        (va.clone(), sa.clone()),
                    ],
                    d,
                );
                assert_eq!(c.shape(), wshape.as_slice());
                assert_eq!(c.dtype(), dtype);
                assert_eq!(vals(&c), want, "{dtype} {ka:?} {kb:?} dim {d}");
                assert!(c.is_contiguous());
                assert!(!c.shares_storage(&a) && !c.shares_storage(&b));
                // Negative dim means the same.
                let c2 = Tensor::cat(&[&a, &b, &a], d as isize - 3).unwrap();
                assert_eq!(vals(&c2), want);
            }
        }
    }
}

#[test]
fn cat_promotes_dtypes_like_pytorch() {
    let _shared = crate::common::shared();
    let a = Tensor::from_slice(&[1i32, 2], &[2], Device::Cpu).unwrap();
    let b = Tensor::from_slice(&[0.5f32], &[1], Device::Cpu).unwrap();
    let c = Tensor::cat(&[&a, &b], 0).unwrap();
    assert_eq!(c.dtype(), DType::F32);
    assert_eq!(c.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 0.5]);

    let u = Tensor::from_slice(&[200u8], &[1], Device::Cpu).unwrap();
    let i = Tensor::from_slice(&[-1i64], &[1], Device::Cpu).unwrap();
    let t = Tensor::from_slice(&[true], &[1], Device::Cpu).unwrap();
    let c = Tensor::cat(&[&t, &u, &i], 0).unwrap();
    assert_eq!(c.dtype(), DType::I64);
    assert_eq!(c.to_vec::<i64>().unwrap(), vec![1, 200, -1]);

    let h = Tensor::from_slice(&[1.5f64], &[1], Device::Cpu).unwrap();
    let f = Tensor::from_slice(&[tensorscope::f16::from_f32(2.0)], &[1], Device::Cpu).unwrap();
    let c = Tensor::cat(&[&f, &h], 0).unwrap();
    assert_eq!(c.dtype(), DType::F64);
    assert_eq!(c.to_vec::<f64>().unwrap(), vec![2.0, 1.5]);

    let g = Tensor::from_slice(&[tensorscope::bf16::from_f32(3.0)], &[1], Device::Cpu).unwrap();
    assert_eq!(Tensor::cat(&[&f, &g], 0).unwrap().dtype(), DType::F32);
}

#[test]
fn cat_single_tensor_is_a_copy() {
    let _shared = crate::common::shared();
    let a = Tensor::arange(0.0, 6.0, 1.0, DType::F32, Device::Cpu).unwrap();
    let c = Tensor::cat(&[&a], 0).unwrap();
    assert!(!c.shares_storage(&a));
    assert_eq!(vals(&c), vals(&a));
}

#[test]
fn cat_with_empty_parts() {
    let _shared = crate::common::shared();
    let a = Tensor::ones(&[2, 3], DType::F32, Device::Cpu).unwrap();
    let e = Tensor::zeros(&[0, 3], DType::F32, Device::Cpu).unwrap();
    let c = Tensor::cat(&[&e, &a, &e], 0).unwrap();
    assert_eq!(c.shape(), &[2, 3]);
    assert_eq!(vals(&c), vec![1.0; 6]);
    // PyTorch's legacy rule: a 1-D [0] tensor is skipped next to 2-D ones.
    let legacy = Tensor::zeros(&[0], DType::I64, Device::Cpu).unwrap();
    let c = Tensor::cat(&[&a, &legacy], 1).unwrap();
    assert_eq!(c.shape(), &[2, 3]);
    assert_eq!(c.dtype(), DType::F32);
    let c = Tensor::cat(&[&legacy, &legacy], 0).unwrap();
    assert_eq!(c.shape(), &[0]);
}

#[test]
fn cat_errors() {
    let _shared = crate::common::shared();
    let a = Tensor::ones(&[2, 3], DType::F32, Device::Cpu).unwrap();
    let b = Tensor::ones(&[2, 4], DType::F32, Device::Cpu).unwrap();
    let v = Tensor::ones(&[6], DType::F32, Device::Cpu).unwrap();
    let s = Tensor::scalar(1.0f32, Device::Cpu).unwrap();

    let e = Tensor::cat(&[], 0).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { op: "cat", .. }), "{e}");
    assert!(e.to_string().contains("cat") && e.to_string().contains("non-empty"));

    let e = Tensor::cat(&[&a, &b], 0).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { op: "cat", .. }), "{e}");
    assert!(
        e.to_string().starts_with("cat:") && e.to_string().contains("[2, 4]"),
        "{e}"
    );
    // ... but along dim 1 they fit.
    assert_eq!(Tensor::cat(&[&a, &b], 1).unwrap().shape(), &[2, 7]);

    let e = Tensor::cat(&[&a, &v], 0).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { op: "cat", .. }), "{e}");
    assert!(e.to_string().contains("rank"), "{e}");

    let e = Tensor::cat(&[&a, &a], 2).unwrap_err();
    assert!(
        matches!(
            e,
            Error::DimOutOfRange {
                op: "cat",
                dim: 2,
                rank: 2
            }
        ),
        "{e}"
    );
    let e = Tensor::cat(&[&a, &a], -3).unwrap_err();
    assert!(matches!(e, Error::DimOutOfRange { op: "cat", .. }), "{e}");

    let e = Tensor::cat(&[&s, &s], 0).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { op: "cat", .. }), "{e}");
    assert!(e.to_string().contains("zero-dimensional"), "{e}");
}

#[test]
fn stack_matches_reference() {
    let _shared = crate::common::shared();
    for &dtype in &DTYPES {
        for kind in KINDS {
            let shape = [3usize, 4];
            let va = values(12, dtype, 2);
            let vb = values(12, dtype, 9);
            let a = make(&va, &shape, dtype, kind);
            let b = make(&vb, &shape, dtype, Kind::Contiguous);
            for d in 0..=2usize {
                let s = Tensor::stack(&[&a, &b], d as isize).unwrap();
                let mut wshape = shape.to_vec();
                wshape.insert(d, 2);
                assert_eq!(s.shape(), wshape.as_slice());
                let want: Vec<f64> = (0..24)
                    .map(|i| {
                        let mut idx = unravel(i, &wshape);
                        let which = idx.remove(d);
                        let src = if which == 0 { &va } else { &vb };
                        src[ravel(&idx, &shape)]
                    })
                    .collect();
                assert_eq!(vals(&s), want, "{dtype} {kind:?} dim {d}");
                assert!(!s.shares_storage(&a) && !s.shares_storage(&b));
                // Negative dims count from rank + 1.
                let s2 = Tensor::stack(&[&a, &b], d as isize - 3).unwrap();
                assert_eq!(vals(&s2), want);
            }
        }
    }
}

#[test]
fn stack_promotes_and_copies_single() {
    let _shared = crate::common::shared();
    let a = Tensor::from_slice(&[1u8, 2], &[2], Device::Cpu).unwrap();
    let b = Tensor::from_slice(&[0.5f64, 1.5], &[2], Device::Cpu).unwrap();
    let s = Tensor::stack(&[&a, &b], 0).unwrap();
    assert_eq!(s.dtype(), DType::F64);
    assert_eq!(vals(&s), vec![1.0, 2.0, 0.5, 1.5]);
    let one = Tensor::stack(&[&a], 0).unwrap();
    assert_eq!(one.shape(), &[1, 2]);
    assert!(!one.shares_storage(&a));
    // Scalars stack into a vector.
    let x = Tensor::scalar(1.0f32, Device::Cpu).unwrap();
    let y = Tensor::scalar(2.0f32, Device::Cpu).unwrap();
    assert_eq!(vals(&Tensor::stack(&[&x, &y], 0).unwrap()), vec![1.0, 2.0]);
}

#[test]
fn stack_errors() {
    let _shared = crate::common::shared();
    let a = Tensor::ones(&[2, 3], DType::F32, Device::Cpu).unwrap();
    let b = Tensor::ones(&[3, 2], DType::F32, Device::Cpu).unwrap();
    let e = Tensor::stack(&[], 0).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { op: "stack", .. }),
        "{e}"
    );
    let e = Tensor::stack(&[&a, &b], 0).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { op: "stack", .. }), "{e}");
    assert!(e.to_string().starts_with("stack:"), "{e}");
    let e = Tensor::stack(&[&a, &a], 3).unwrap_err();
    assert!(
        matches!(
            e,
            Error::DimOutOfRange {
                op: "stack",
                dim: 3,
                rank: 2
            }
        ),
        "{e}"
    );
    let e = Tensor::stack(&[&a, &a], -4).unwrap_err();
    assert!(matches!(e, Error::DimOutOfRange { op: "stack", .. }), "{e}");
}

fn ref_repeat(v: &[f64], shape: &[usize], reps: &[usize]) -> (Vec<f64>, Vec<usize>) {
    let lead = reps.len() - shape.len();
    let mut pshape = vec![1; lead];
    pshape.extend_from_slice(shape);
    let oshape: Vec<usize> = pshape.iter().zip(reps).map(|(s, r)| s * r).collect();
    let out = (0..numel(&oshape))
        .map(|i| {
            let idx: Vec<usize> = unravel(i, &oshape)
                .iter()
                .zip(&pshape)
                .map(|(i, s)| i % s)
                .collect();
            v[ravel(&idx, &pshape)]
        })
        .collect();
    (out, oshape)
}

#[test]
fn repeat_matches_reference() {
    let _shared = crate::common::shared();
    for &dtype in &DTYPES {
        for kind in KINDS {
            let shape = [2usize, 3];
            let v = values(6, dtype, 4);
            let t = make(&v, &shape, dtype, kind);
            for reps in [
                vec![1usize, 1],
                vec![2, 1],
                vec![1, 3],
                vec![3, 2],
                vec![2, 1, 1],
                vec![2, 2, 3],
                vec![1, 2, 1, 2],
            ] {
                let r = t.repeat(&reps).unwrap();
                let (want, wshape) = ref_repeat(&v, &shape, &reps);
                assert_eq!(r.shape(), wshape.as_slice());
                assert_eq!(r.dtype(), dtype);
                assert_eq!(vals(&r), want, "{dtype} {kind:?} {reps:?}");
                assert!(!r.shares_storage(&t), "repeat must copy");
            }
        }
    }
}

#[test]
fn repeat_of_expanded_and_scalar_and_zero() {
    let _shared = crate::common::shared();
    // An expanded (stride 0) input.
    let col = Tensor::from_slice(&[1.0f32, 2.0], &[2, 1], Device::Cpu).unwrap();
    let e = col.expand(&[2, 3]).unwrap();
    let r = e.repeat(&[1, 2]).unwrap();
    assert_eq!(r.shape(), &[2, 6]);
    assert_eq!(
        vals(&r),
        vec![1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0]
    );
    // A scalar gains dimensions.
    let s = Tensor::scalar(7i64, Device::Cpu).unwrap();
    let r = s.repeat(&[2, 3]).unwrap();
    assert_eq!(r.shape(), &[2, 3]);
    assert_eq!(r.to_vec::<i64>().unwrap(), vec![7; 6]);
    let r = s.repeat(&[]).unwrap();
    assert_eq!(r.shape(), &[] as &[usize]);
    assert!(!r.shares_storage(&s));
    // Zero repeats give an empty tensor.
    let t = Tensor::ones(&[2, 2], DType::F32, Device::Cpu).unwrap();
    let r = t.repeat(&[0, 2]).unwrap();
    assert_eq!(r.shape(), &[0, 4]);
}

#[test]
fn repeat_errors() {
    let _shared = crate::common::shared();
    let t = Tensor::ones(&[2, 2], DType::F32, Device::Cpu).unwrap();
    let e = t.repeat(&[2]).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { op: "repeat", .. }),
        "{e}"
    );
    assert!(
        e.to_string().starts_with("repeat:") && e.to_string().contains("[2, 2]"),
        "{e}"
    );
    let e = t.repeat(&[usize::MAX, 1]).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { op: "repeat", .. }),
        "{e}"
    );
}
