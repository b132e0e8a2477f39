//! Gather.

use super::*;

pub(super) fn ref_gather(
    v: &[f64],
    shape: &[usize],
    d: usize,
    ix: &[i64],
    ishape: &[usize],
) -> Vec<f64> {
    (0..numel(ishape))
        .map(|i| {
            let idx = unravel(i, ishape);
            v[ravel(&with_dim(&idx, d, ix[i] as usize), shape)]
        })
        .collect()
}

#[test]
fn gather_matches_reference() {
    let _g = lock();
    let shape = [3usize, 4, 5];
    for &dtype in &DTYPES {
        for kind in KINDS {
            let v = values(60, dtype, 2);
            let t = make(&v, &shape, dtype, kind);
            for d in 0..3 {
                // Smaller than the input in the other dims, larger along d.
                let mut ishape = vec![2usize, 3, 4];
                ishape[d] = shape[d] + 2;
                for (idt, ikind) in [
                    (DType::I64, Kind::Contiguous),
                    (DType::I32, Kind::Transposed),
                    (DType::I64, Kind::Stepped),
                ] {
                    let ix = index_values(numel(&ishape), shape[d], d);
                    let ivals: Vec<f64> = ix.iter().map(|&i| i as f64).collect();
                    let index = make(&ivals, &ishape, idt, ikind);
                    let out = t.gather(d as isize, &index).unwrap();
                    assert_eq!(out.shape(), ishape.as_slice());
                    assert_eq!(out.dtype(), dtype);
                    assert_eq!(
                        vals(&out),
                        ref_gather(&v, &shape, d, &ix, &ishape),
                        "{dtype} {kind:?} {ikind:?} dim {d}"
                    );
                    assert!(!out.shares_storage(&t), "gather must copy");
                }
            }
        }
    }
}

#[test]
fn gather_errors() {
    let _g = lock();
    let t = Tensor::arange(0.0, 6.0, 1.0, DType::F64, Device::Cpu)
        .unwrap()
        .view(&[2, 3])
        .unwrap();
    let idx = |v: &[i64], s: &[usize]| Tensor::from_slice(v, s, Device::Cpu).unwrap();
    let e = t.gather(1, &idx(&[0, 3], &[1, 2])).unwrap_err();
    assert_eq!(
        e,
        Error::IndexOutOfRange {
            op: "gather",
            index: 3,
            dim: 1,
            size: 3
        }
    );
    assert!(msg(&e).starts_with("gather:"), "{e}");
    let e = t.gather(0, &idx(&[-1], &[1, 1])).unwrap_err();
    assert_eq!(
        e,
        Error::IndexOutOfRange {
            op: "gather",
            index: -1,
            dim: 0,
            size: 2
        }
    );
    let e = t.gather(0, &idx(&[0, 0], &[2])).unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { op: "gather", .. }),
        "{e}"
    );
    assert!(msg(&e).contains("rank"), "{e}");
    let e = t.gather(0, &idx(&[0; 8], &[2, 4])).unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { op: "gather", .. }),
        "{e}"
    );
    assert!(msg(&e).contains("dimension 1"), "{e}");
    let e = t
        .gather(0, &Tensor::zeros(&[1, 1], DType::F32, Device::Cpu).unwrap())
        .unwrap_err();
    assert!(
        matches!(e, Error::DTypeMismatch { op: "gather", .. }),
        "{e}"
    );
    let e = t.gather(-3, &idx(&[0], &[1, 1])).unwrap_err();
    assert!(
        matches!(e, Error::DimOutOfRange { op: "gather", .. }),
        "{e}"
    );
}
