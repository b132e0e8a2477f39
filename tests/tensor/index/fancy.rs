//! Fancy indexing.

use super::*;

#[test]
fn index_with_integer_tensors() {
    let _g = lock();
    let shape = [5usize, 2, 3];
    for &dtype in &DTYPES {
        for kind in KINDS {
            let v = values(30, dtype, 7);
            let t = make(&v, &shape, dtype, kind);
            let ix: Vec<i64> = vec![4, -1, 0, -5, 2, 2];
            for (idt, ishape) in [
                (DType::I64, vec![6usize]),
                (DType::I32, vec![2, 3]),
                (DType::I64, vec![3, 2, 1]),
            ] {
                let index = make_index(&ix, &ishape, idt, false);
                let out = t.index(&index).unwrap();
                let mut wshape = ishape.clone();
                wshape.extend_from_slice(&shape[1..]);
                assert_eq!(out.shape(), wshape.as_slice());
                let rows: Vec<i64> = ix.iter().map(|&i| if i < 0 { i + 5 } else { i }).collect();
                let (want, _) = ref_index_select(&v, &shape, 0, &rows);
                assert_eq!(vals(&out), want, "{dtype} {kind:?} {ishape:?}");
                assert!(!out.shares_storage(&t));
            }
            // A scalar index removes the dim (and still copies).
            let s = t
                .index(&Tensor::scalar(-2i64, Device::Cpu).unwrap())
                .unwrap();
            assert_eq!(s.shape(), &[2, 3]);
            assert_eq!(vals(&s), v[18..24].to_vec());
            assert!(!s.shares_storage(&t));
        }
    }
}

#[test]
fn index_with_bool_masks() {
    let _g = lock();
    let v = values(24, DType::F32, 3);
    for kind in KINDS {
        let t = make(&v, &[2, 3, 4], DType::F32, kind);
        // Mask over dim 0.
        let m1 = Tensor::from_slice(&[false, true], &[2], Device::Cpu).unwrap();
        let r = t.index(&m1).unwrap();
        assert_eq!(r.shape(), &[1, 3, 4]);
        assert_eq!(vals(&r), v[12..].to_vec());
        // Mask over dims 0 and 1 (transposed mask).
        let mb = Tensor::from_slice(
            &[true, false, false, true, true, false],
            &[3, 2],
            Device::Cpu,
        )
        .unwrap()
        .t()
        .unwrap();
        // Logical mask [2, 3]: [[T, F, T], [F, T, F]].
        let r = t.index(&mb).unwrap();
        assert_eq!(r.shape(), &[3, 4]);
        let mut want = v[0..4].to_vec();
        want.extend_from_slice(&v[8..12]);
        want.extend_from_slice(&v[16..20]);
        assert_eq!(vals(&r), want, "{kind:?}");
        assert!(!r.shares_storage(&t));
        // A full-shape mask is masked_select.
        let mf = t.gt_scalar(5.0).unwrap();
        assert_eq!(
            vals(&t.index(&mf).unwrap()),
            vals(&t.masked_select(&mf).unwrap())
        );
    }
}

#[test]
fn index_errors() {
    let _g = lock();
    let t = Tensor::ones(&[3, 2], DType::F32, Device::Cpu).unwrap();
    let e = t
        .index(&Tensor::from_slice(&[3i64], &[1], Device::Cpu).unwrap())
        .unwrap_err();
    assert_eq!(
        e,
        Error::IndexOutOfRange {
            op: "index",
            index: 3,
            dim: 0,
            size: 3
        }
    );
    let e = t
        .index(&Tensor::from_slice(&[-4i64], &[1], Device::Cpu).unwrap())
        .unwrap_err();
    assert_eq!(
        e,
        Error::IndexOutOfRange {
            op: "index",
            index: -4,
            dim: 0,
            size: 3
        }
    );
    let e = t
        .index(&Tensor::from_slice(&[1.0f32], &[1], Device::Cpu).unwrap())
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::DTypeMismatch {
                op: "index",
                got: DType::F32,
                ..
            }
        ),
        "{e}"
    );
    let e = t
        .index(&Tensor::from_slice(&[true, false], &[2], Device::Cpu).unwrap())
        .unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { op: "index", .. }), "{e}");
    let s = Tensor::scalar(1.0f32, Device::Cpu).unwrap();
    let e = s
        .index(&Tensor::from_slice(&[0i64], &[1], Device::Cpu).unwrap())
        .unwrap_err();
    assert!(matches!(e, Error::DimOutOfRange { op: "index", .. }), "{e}");
}
