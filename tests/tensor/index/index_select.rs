//! Index_select.

use super::*;

pub(super) fn ref_index_select(
    v: &[f64],
    shape: &[usize],
    d: usize,
    ix: &[i64],
) -> (Vec<f64>, Vec<usize>) {
    let oshape = with_dim(shape, d, ix.len());
    let out = (0..numel(&oshape))
        .map(|i| {
            let idx = unravel(i, &oshape);
            v[ravel(&with_dim(&idx, d, ix[idx[d]] as usize), shape)]
        })
        .collect();
    (out, oshape)
}

#[test]
fn index_select_matches_reference() {
    let _g = lock();
    let shape = [4usize, 3, 5];
    for &dtype in &DTYPES {
        for kind in KINDS {
            let v = values(60, dtype, 1);
            let t = make(&v, &shape, dtype, kind);
            for d in 0..3 {
                for (n, idt, stepped) in [
                    (0, DType::I64, false),
                    (1, DType::I32, true),
                    (4, DType::I64, true),
                    (7, DType::I32, false),
                ] {
                    let ix = index_values(n, shape[d], d + n);
                    let index = make_index(&ix, &[n], idt, stepped);
                    let out = t.index_select(d as isize, &index).unwrap();
                    let (want, wshape) = ref_index_select(&v, &shape, d, &ix);
                    assert_eq!(out.shape(), wshape.as_slice());
                    assert_eq!(out.dtype(), dtype);
                    assert_eq!(vals(&out), want, "{dtype} {kind:?} dim {d} index {ix:?}");
                    assert!(!out.shares_storage(&t), "index_select must copy");
                    let neg = t.index_select(d as isize - 3, &index).unwrap();
                    assert_eq!(vals(&neg), want);
                }
            }
        }
    }
}

#[test]
fn index_select_scalar_index_keeps_the_dim() {
    let _g = lock();
    let t = make(
        &values(6, DType::F32, 0),
        &[2, 3],
        DType::F32,
        Kind::Transposed,
    );
    let i = Tensor::scalar(2i64, Device::Cpu).unwrap();
    let out = t.index_select(1, &i).unwrap();
    assert_eq!(out.shape(), &[2, 1]);
    let v = values(6, DType::F32, 0);
    assert_eq!(vals(&out), vec![v[2], v[5]]);
}

#[test]
fn index_select_out_allocates_nothing() {
    let _g = lock();
    let v = values(4 * 6, DType::F32, 3);
    let t = make(&v, &[4, 6], DType::F32, Kind::Transposed);
    let i64_index = Tensor::from_slice(&[5i64, 0, 5, 2], &[4], Device::Cpu).unwrap();
    let i32_index = Tensor::from_slice(&[1i32, 3], &[2], Device::Cpu).unwrap();
    let mut out = Tensor::zeros(&[4, 4], DType::F32, Device::Cpu).unwrap();
    // A transposed output is written through its strides.
    let mut out_t = Tensor::zeros(&[6, 2], DType::F32, Device::Cpu)
        .unwrap()
        .t()
        .unwrap();
    let v0 = out.version();
    let before = memory::memory_stats(Device::Cpu).allocation.all.allocated;
    for _ in 0..10 {
        t.index_select_out(1, &i64_index, &mut out).unwrap();
        t.index_select_out(0, &i32_index, &mut out_t).unwrap();
    }
    let after = memory::memory_stats(Device::Cpu).allocation.all.allocated;
    assert_eq!(
        after,
        before,
        "index_select_out allocated {} blocks",
        after - before
    );
    assert!(out.version() > v0, "the out form bumps the version");
    let (want, _) = ref_index_select(&v, &[4, 6], 1, &[5, 0, 5, 2]);
    assert_eq!(vals(&out), want);
    let (want, _) = ref_index_select(&v, &[4, 6], 0, &[1, 3]);
    assert_eq!(vals(&out_t), want);
    // Also for a bool tensor and a contiguous input.
    let b = make(
        &values(8, DType::Bool, 1),
        &[8],
        DType::Bool,
        Kind::Contiguous,
    );
    let mut ob = Tensor::zeros(&[4], DType::Bool, Device::Cpu).unwrap();
    let before = memory::memory_stats(Device::Cpu).allocation.all.allocated;
    b.index_select_out(0, &i64_index, &mut ob).unwrap();
    assert_eq!(
        memory::memory_stats(Device::Cpu).allocation.all.allocated,
        before
    );
    let bv = values(8, DType::Bool, 1);
    assert_eq!(vals(&ob), vec![bv[5], bv[0], bv[5], bv[2]]);
    // The counter does see the allocating form.
    let before = memory::memory_stats(Device::Cpu).allocation.all.allocated;
    let fresh = b.index_select(0, &i64_index).unwrap();
    assert_eq!(
        memory::memory_stats(Device::Cpu).allocation.all.allocated,
        before + 1
    );
    assert_eq!(vals(&fresh), vals(&ob));
}

#[test]
fn index_select_errors() {
    let _g = lock();
    let t = Tensor::arange(0.0, 12.0, 1.0, DType::F32, Device::Cpu)
        .unwrap()
        .view(&[3, 4])
        .unwrap();
    let good = Tensor::from_slice(&[0i64, 2], &[2], Device::Cpu).unwrap();

    let e = t
        .index_select(
            0,
            &Tensor::from_slice(&[0i64, 3], &[2], Device::Cpu).unwrap(),
        )
        .unwrap_err();
    assert_eq!(
        e,
        Error::IndexOutOfRange {
            op: "index_select",
            index: 3,
            dim: 0,
            size: 3
        }
    );
    assert!(
        msg(&e).contains("index_select") && msg(&e).contains('3'),
        "{e}"
    );
    let e = t
        .index_select(1, &Tensor::from_slice(&[-1i32], &[1], Device::Cpu).unwrap())
        .unwrap_err();
    assert_eq!(
        e,
        Error::IndexOutOfRange {
            op: "index_select",
            index: -1,
            dim: 1,
            size: 4
        }
    );

    let e = t
        .index_select(
            0,
            &Tensor::from_slice(&[0.0f32], &[1], Device::Cpu).unwrap(),
        )
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::DTypeMismatch {
                op: "index_select",
                got: DType::F32,
                ..
            }
        ),
        "{e}"
    );
    let e = t
        .index_select(0, &Tensor::from_slice(&[0u8], &[1], Device::Cpu).unwrap())
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::DTypeMismatch {
                op: "index_select",
                got: DType::U8,
                ..
            }
        ),
        "{e}"
    );

    let e = t.index_select(2, &good).unwrap_err();
    assert_eq!(
        e,
        Error::DimOutOfRange {
            op: "index_select",
            dim: 2,
            rank: 2
        }
    );
    let e = t
        .index_select(0, &Tensor::zeros(&[1, 2], DType::I64, Device::Cpu).unwrap())
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidArgument {
                op: "index_select",
                ..
            }
        ),
        "{e}"
    );
    assert!(msg(&e).contains("[1, 2]"), "{e}");

    // The out form: shape, dtype, aliasing, expanded output, bad index.
    let mut out = Tensor::full(&[2, 4], 9.0, DType::F32, Device::Cpu).unwrap();
    let e = t.index_select_out(1, &good, &mut out).unwrap_err();
    assert!(
        matches!(
            e,
            Error::ShapeMismatch {
                op: "index_select_out",
                ..
            }
        ),
        "{e}"
    );
    let mut out_i = Tensor::zeros(&[2, 4], DType::I64, Device::Cpu).unwrap();
    let e = t.index_select_out(0, &good, &mut out_i).unwrap_err();
    assert!(
        matches!(
            e,
            Error::DTypeMismatch {
                op: "index_select_out",
                got: DType::I64,
                ..
            }
        ),
        "{e}"
    );
    let mut alias = t.narrow(0, 0, 2).unwrap();
    let e = t.index_select_out(0, &good, &mut alias).unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidInPlace {
                op: "index_select_out",
                ..
            }
        ),
        "{e}"
    );
    let mut expanded = Tensor::zeros(&[1, 4], DType::F32, Device::Cpu)
        .unwrap()
        .expand(&[2, 4])
        .unwrap();
    let e = t.index_select_out(0, &good, &mut expanded).unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidInPlace {
                op: "index_select_out",
                ..
            }
        ),
        "{e}"
    );
    let v0 = out.version();
    let bad = Tensor::from_slice(&[1i64, 7], &[2], Device::Cpu).unwrap();
    let e = t.index_select_out(0, &bad, &mut out).unwrap_err();
    assert_eq!(
        e,
        Error::IndexOutOfRange {
            op: "index_select_out",
            index: 7,
            dim: 0,
            size: 3
        }
    );
    assert_eq!(vals(&out), vec![9.0; 8], "a failed out form writes nothing");
    assert_eq!(out.version(), v0);
}
