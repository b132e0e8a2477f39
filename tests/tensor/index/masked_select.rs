//! Masked_select.

use super::*;

#[test]
fn masked_select_matches_reference_with_broadcasting() {
    let _g = lock();
    for &dtype in &DTYPES {
        for kind in KINDS {
            // self [3, 4] with masks [3, 4], [4] and [3, 1]; self [3, 1] with mask [3, 4].
            let v = values(12, dtype, 5);
            let t = make(&v, &[3, 4], dtype, kind);
            for (mshape, mkind) in [
                (vec![3usize, 4], Kind::Transposed),
                (vec![4], Kind::Stepped),
                (vec![3, 1], Kind::Contiguous),
            ] {
                let mv: Vec<f64> = (0..numel(&mshape))
                    .map(|i| ((i * 3 + 1) % 4 < 2) as u8 as f64)
                    .collect();
                let mask = make(&mv, &mshape, DType::Bool, mkind);
                let out = t.masked_select(&mask).unwrap();
                let want: Vec<f64> = (0..12)
                    .filter(|&i| {
                        let idx = unravel(i, &[3, 4]);
                        let m = if mshape.len() == 1 {
                            mv[idx[1]]
                        } else if mshape[1] == 1 {
                            mv[idx[0]]
                        } else {
                            mv[i]
                        };
                        m != 0.0
                    })
                    .map(|i| v[i])
                    .collect();
                assert_eq!(out.shape(), &[want.len()]);
                assert_eq!(out.dtype(), dtype);
                assert_eq!(vals(&out), want, "{dtype} {kind:?} mask {mshape:?}");
                assert!(!out.shares_storage(&t));
            }
            // The input broadcasts to the mask.
            let col = make(&values(3, dtype, 1), &[3, 1], dtype, kind);
            let mask = Tensor::from_slice(
                &[true, false, true, true, false, false],
                &[3, 2],
                Device::Cpu,
            )
            .unwrap();
            let cv = values(3, dtype, 1);
            assert_eq!(
                vals(&col.masked_select(&mask).unwrap()),
                vec![cv[0], cv[1], cv[1]]
            );
        }
    }
    // Nothing selected: an empty 1-D tensor.
    let t = Tensor::ones(&[2, 2], DType::F32, Device::Cpu).unwrap();
    let none = Tensor::zeros(&[2, 2], DType::Bool, Device::Cpu).unwrap();
    assert_eq!(t.masked_select(&none).unwrap().shape(), &[0]);
}

#[test]
fn masked_select_errors() {
    let _g = lock();
    let t = Tensor::ones(&[2, 3], DType::F32, Device::Cpu).unwrap();
    let e = t
        .masked_select(&Tensor::ones(&[2, 3], DType::U8, Device::Cpu).unwrap())
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::DTypeMismatch {
                op: "masked_select",
                got: DType::U8,
                ..
            }
        ),
        "{e}"
    );
    let e = t
        .masked_select(&Tensor::ones(&[2, 2], DType::Bool, Device::Cpu).unwrap())
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::ShapeMismatch {
                op: "masked_select",
                ..
            }
        ),
        "{e}"
    );
    assert!(msg(&e).starts_with("masked_select:"), "{e}");
}
