//! Index ops against naive references on `Vec<f64>`: index_select (and its
//! allocation-free out form), gather, masked_select, fancy indexing, the
//! scatter / index_fill / index_copy / index_add family and slice assignment.
//! Inputs are contiguous, transposed and stepped, in every dtype; in-place
//! targets are views, and the whole storage is checked after each write.
//! Every error path is checked for its variant, its op name, and (in place)
//! that `self` is unchanged.
//!
//! Every test takes `LOCK`: one test asserts exact allocation counts, which
//! are global to the process.

use std::sync::{Mutex, MutexGuard};
use tensorscope::{memory, DType, Device, Error, Tensor};

static LOCK: Mutex<()> = Mutex::new(());

fn lock() -> MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

mod common;
use common::layouts::*;

/// An index tensor with values `ix`, as i64 or i32, contiguous or stepped.
fn make_index(ix: &[i64], shape: &[usize], dtype: DType, stepped: bool) -> Tensor {
    let v: Vec<f64> = ix.iter().map(|&i| i as f64).collect();
    let kind = if stepped && !shape.is_empty() {
        Kind::Stepped
    } else {
        Kind::Contiguous
    };
    make(&v, shape, dtype, kind)
}

fn vals(t: &Tensor) -> Vec<f64> {
    t.to_vec::<f64>().unwrap()
}

/// Every element of `t`'s storage, in storage order.
fn storage_image(t: &Tensor) -> Vec<f64> {
    let n = t.storage_nbytes() / t.dtype().size_in_bytes();
    vals(&t.as_strided(&[n], &[1], 0).unwrap())
}

/// The storage image expected after `t`'s logical elements become `want`
/// and nothing else changes.
fn expected_image(before: &[f64], t: &Tensor, want: &[f64]) -> Vec<f64> {
    let mut img = before.to_vec();
    for (i, &w) in want.iter().enumerate() {
        let idx = unravel(i, t.shape());
        let pos = t.storage_offset()
            + idx
                .iter()
                .zip(t.strides())
                .map(|(i, s)| i * s)
                .sum::<usize>();
        img[pos] = w;
    }
    img
}

/// Asserts an in-place op on `t` left exactly `want` in it and touched no
/// other element of its storage.
fn assert_written(t: &Tensor, before: &[f64], want: &[f64], what: &str) {
    assert_eq!(vals(t), want, "{what}: values");
    assert_eq!(
        storage_image(t),
        expected_image(before, t, want),
        "{what}: storage"
    );
}

/// Lays out `values` of `shape` as `kind`, applies the in-place `write`,
/// and asserts that the logical values became `want` and that nothing else
/// in the storage changed.
fn check_write(
    (values, shape, dtype, kind): (&[f64], &[usize], DType, Kind),
    write: impl FnOnce(&mut Tensor),
    want: &[f64],
    what: &str,
) {
    let mut t = make(values, shape, dtype, kind);
    let before = storage_image(&t);
    write(&mut t);
    assert_written(&t, &before, want, what);
}

fn index_values(n: usize, size: usize, seed: usize) -> Vec<i64> {
    (0..n)
        .map(|i| ((i * 5 + seed * 3 + 1) % size) as i64)
        .collect()
}

fn with_dim(idx: &[usize], d: usize, v: usize) -> Vec<usize> {
    let mut i = idx.to_vec();
    i[d] = v;
    i
}

fn msg(e: &Error) -> String {
    e.to_string()
}

// ---------------------------------------------------------------- index_select

fn ref_index_select(v: &[f64], shape: &[usize], d: usize, ix: &[i64]) -> (Vec<f64>, Vec<usize>) {
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

// ---------------------------------------------------------------- gather

fn ref_gather(v: &[f64], shape: &[usize], d: usize, ix: &[i64], ishape: &[usize]) -> Vec<f64> {
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

// ---------------------------------------------------------------- masked_select

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

// ---------------------------------------------------------------- fancy indexing

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

// ---------------------------------------------------------------- scatter family

#[allow(clippy::too_many_arguments)]
fn ref_scatter(
    base: &[f64],
    shape: &[usize],
    d: usize,
    ix: &[i64],
    ishape: &[usize],
    src: Option<(&[f64], &[usize])>,
    value: f64,
    add: bool,
) -> Vec<f64> {
    let mut out = base.to_vec();
    for (i, &k) in ix.iter().enumerate() {
        let idx = unravel(i, ishape);
        let pos = ravel(&with_dim(&idx, d, k as usize), shape);
        let s = match src {
            Some((sv, sshape)) => sv[ravel(&idx, sshape)],
            None => value,
        };
        out[pos] = if add { out[pos] + s } else { s };
    }
    out
}

#[test]
fn scatter_family_matches_reference_through_views() {
    let _g = lock();
    let shape = [4usize, 3, 5];
    for &dtype in &DTYPES {
        for kind in KINDS {
            for d in 0..3 {
                let mut ishape = vec![2usize, 3, 4];
                ishape[d] = 3;
                for k in 1..3 {
                    if k != d {
                        ishape[k] = ishape[k].min(shape[k]);
                    }
                }
                // The source is larger than the index in every dim.
                let sshape: Vec<usize> = ishape.iter().map(|s| s + 1).collect();
                let ix = index_values(numel(&ishape), shape[d], d + 1);
                let ivals: Vec<f64> = ix.iter().map(|&i| i as f64).collect();
                let index = make(
                    &ivals,
                    &ishape,
                    if d == 1 { DType::I32 } else { DType::I64 },
                    kind,
                );
                let sv = values(numel(&sshape), dtype, 9);
                let src = make(&sv, &sshape, dtype, KINDS[(d + 1) % 3]);
                let bv = values(60, dtype, 4);

                // scatter_
                let mut t = make(&bv, &shape, dtype, kind);
                let before = storage_image(&t);
                let v0 = t.version();
                t.scatter_(d as isize, &index, &src).unwrap();
                let want = ref_scatter(
                    &bv,
                    &shape,
                    d,
                    &ix,
                    &ishape,
                    Some((&sv, &sshape)),
                    0.0,
                    false,
                );
                assert_written(
                    &t,
                    &before,
                    &want,
                    &format!("scatter_ {dtype} {kind:?} dim {d}"),
                );
                assert!(t.version() > v0);

                // scatter_value_
                let want = ref_scatter(&bv, &shape, d, &ix, &ishape, None, 1.0, false);
                check_write(
                    (&bv, &shape, dtype, kind),
                    |t| {
                        t.scatter_value_(d as isize, &index, 1.0).unwrap();
                    },
                    &want,
                    &format!("scatter_value_ {dtype} {kind:?} dim {d}"),
                );

                // scatter_add_ (numeric only; repeated indices accumulate)
                if dtype != DType::Bool {
                    let want = ref_scatter(
                        &bv,
                        &shape,
                        d,
                        &ix,
                        &ishape,
                        Some((&sv, &sshape)),
                        0.0,
                        true,
                    );
                    check_write(
                        (&bv, &shape, dtype, kind),
                        |t| {
                            t.scatter_add_(d as isize, &index, &src).unwrap();
                        },
                        &want,
                        &format!("scatter_add_ {dtype} {kind:?} dim {d}"),
                    );
                }
            }
        }
    }
}

#[test]
fn index_fill_copy_add_match_reference_through_views() {
    let _g = lock();
    let shape = [4usize, 3, 5];
    for &dtype in &DTYPES {
        for kind in KINDS {
            for d in 0..3 {
                let n = 4;
                let ix = index_values(n, shape[d], d); // has repeats when shape[d] < 4
                let index = make_index(
                    &ix,
                    &[n],
                    if d == 2 { DType::I32 } else { DType::I64 },
                    d == 1,
                );
                let sshape = with_dim(&shape, d, n);
                let sv = values(numel(&sshape), dtype, 6);
                let src = make(&sv, &sshape, dtype, KINDS[(d + 2) % 3]);
                let bv = values(60, dtype, 8);
                // The vector index seen as a full index of the source's shape.
                let full_ix: Vec<i64> = (0..numel(&sshape))
                    .map(|i| ix[unravel(i, &sshape)[d]])
                    .collect();

                let want = ref_scatter(
                    &bv,
                    &shape,
                    d,
                    &full_ix,
                    &sshape,
                    Some((&sv, &sshape)),
                    0.0,
                    false,
                );
                check_write(
                    (&bv, &shape, dtype, kind),
                    |t| {
                        t.index_copy_(d as isize, &index, &src).unwrap();
                    },
                    &want,
                    &format!("index_copy_ {dtype} {kind:?} dim {d}"),
                );

                // index_fill_ with negative indices meaning the same positions.
                let neg: Vec<i64> = ix.iter().map(|&i| i - shape[d] as i64).collect();
                let nindex = make_index(&neg, &[n], DType::I64, false);
                let want = ref_scatter(&bv, &shape, d, &full_ix, &sshape, None, 1.0, false);
                check_write(
                    (&bv, &shape, dtype, kind),
                    |t| {
                        t.index_fill_(d as isize, &nindex, 1.0).unwrap();
                    },
                    &want,
                    &format!("index_fill_ {dtype} {kind:?} dim {d}"),
                );

                if dtype != DType::Bool {
                    let want = ref_scatter(
                        &bv,
                        &shape,
                        d,
                        &full_ix,
                        &sshape,
                        Some((&sv, &sshape)),
                        0.0,
                        true,
                    );
                    check_write(
                        (&bv, &shape, dtype, kind),
                        |t| {
                            t.index_add_(d as isize, &index, &src).unwrap();
                        },
                        &want,
                        &format!("index_add_ {dtype} {kind:?} dim {d}"),
                    );
                }
            }
        }
    }
}

#[test]
fn seed_example_indexed_assignment() {
    let _g = lock();
    // x = torch.zeros(5); x[0] = 1.0; x[1:4] = [10, 20, 30]; x[x > 15] = -1
    // x.scatter_(0, [0, 2, 4], [1., 2., 3.]); x.index_fill_(0, [1, 3], -1)
    let mut x = Tensor::zeros(&[5], DType::F32, Device::Cpu).unwrap();
    x.select(0, 0).unwrap().fill_(1.0).unwrap();
    let t = Tensor::from_slice(&[10.0f32, 20., 30.], &[3], Device::Cpu).unwrap();
    x.slice_assign_(0, 1, 4, 1, &t).unwrap();
    assert_eq!(vals(&x), vec![1.0, 10.0, 20.0, 30.0, 0.0]);
    let m = x.gt_scalar(15.0).unwrap();
    x.masked_fill_(&m, -1.0).unwrap();
    assert_eq!(vals(&x), vec![1.0, 10.0, -1.0, -1.0, 0.0]);
    let i = Tensor::from_slice(&[0i64, 2, 4], &[3], Device::Cpu).unwrap();
    let s = Tensor::from_slice(&[1.0f32, 2., 3.], &[3], Device::Cpu).unwrap();
    x.scatter_(0, &i, &s).unwrap();
    assert_eq!(vals(&x), vec![1.0, 10.0, 2.0, -1.0, 3.0]);
    x.index_fill_(
        0,
        &Tensor::from_slice(&[1i64, 3], &[2], Device::Cpu).unwrap(),
        -1.0,
    )
    .unwrap();
    assert_eq!(vals(&x), vec![1.0, -1.0, 2.0, -1.0, 3.0]);
}

#[test]
fn out_of_place_forms_copy_and_leave_self() {
    let _g = lock();
    let bv = values(12, DType::F32, 1);
    let t = make(&bv, &[3, 4], DType::F32, Kind::Transposed);
    let idx2 = Tensor::from_slice(&[2i64, 0, 1, 1], &[1, 4], Device::Cpu).unwrap();
    let src = Tensor::full(&[1, 4], 100.0, DType::F32, Device::Cpu).unwrap();
    let vidx = Tensor::from_slice(&[2i64, 0], &[2], Device::Cpu).unwrap();
    let vsrc = Tensor::full(&[3, 2], 50.0, DType::F32, Device::Cpu).unwrap();
    let outs = [
        ("scatter", t.scatter(0, &idx2, &src).unwrap(), {
            let mut c = t.deep_clone().unwrap();
            c.scatter_(0, &idx2, &src).unwrap();
            c
        }),
        ("scatter_add", t.scatter_add(0, &idx2, &src).unwrap(), {
            let mut c = t.deep_clone().unwrap();
            c.scatter_add_(0, &idx2, &src).unwrap();
            c
        }),
        ("index_fill", t.index_fill(1, &vidx, 7.0).unwrap(), {
            let mut c = t.deep_clone().unwrap();
            c.index_fill_(1, &vidx, 7.0).unwrap();
            c
        }),
        ("index_copy", t.index_copy(1, &vidx, &vsrc).unwrap(), {
            let mut c = t.deep_clone().unwrap();
            c.index_copy_(1, &vidx, &vsrc).unwrap();
            c
        }),
        ("index_add", t.index_add(1, &vidx, &vsrc).unwrap(), {
            let mut c = t.deep_clone().unwrap();
            c.index_add_(1, &vidx, &vsrc).unwrap();
            c
        }),
    ];
    for (name, out, inplace) in &outs {
        assert_eq!(vals(out), vals(inplace), "{name}");
        assert_ne!(vals(out), bv, "{name} changed something");
        assert!(!out.shares_storage(&t), "{name}");
    }
    assert_eq!(vals(&t), bv, "self unchanged");
}

#[test]
fn overlapping_sources_are_read_before_the_write() {
    let _g = lock();
    // scatter_ with src = self: every read sees the old values.
    let v = vec![10.0, 20.0, 30.0, 40.0];
    let mut x = Tensor::from_slice(&v, &[4], Device::Cpu).unwrap();
    let same = x.alias();
    let idx = Tensor::from_slice(&[1i64, 2, 3, 0], &[4], Device::Cpu).unwrap();
    x.scatter_(0, &idx, &same).unwrap();
    assert_eq!(vals(&x), vec![40.0, 10.0, 20.0, 30.0]);
    // index_copy_ from a shifted view of self.
    let mut y = Tensor::from_slice(&[1.0f64, 2., 3., 4., 5.], &[5], Device::Cpu).unwrap();
    let src = y.narrow(0, 0, 4).unwrap();
    let idx = Tensor::from_slice(&[1i64, 2, 3, 4], &[4], Device::Cpu).unwrap();
    y.index_copy_(0, &idx, &src).unwrap();
    assert_eq!(vals(&y), vec![1.0, 1.0, 2.0, 3.0, 4.0]);
    // The index itself lives in self's storage.
    let mut z = Tensor::from_slice(&[2i64, 0, 1], &[3], Device::Cpu).unwrap();
    let zi = z.alias();
    let zs = Tensor::from_slice(&[7i64, 8, 9], &[3], Device::Cpu).unwrap();
    z.scatter_(0, &zi, &zs).unwrap();
    assert_eq!(z.to_vec::<i64>().unwrap(), vec![8, 9, 7]);
}

/// Runs a failing in-place op on a transposed view and checks that neither
/// its values, the rest of its storage, nor its version changed.
fn assert_refused(
    what: &str,
    f: impl FnOnce(&mut Tensor) -> Result<(), Error>,
    check: impl FnOnce(&Error) -> bool,
) {
    let v = values(12, DType::F32, 2);
    let mut t = make(&v, &[3, 4], DType::F32, Kind::Transposed);
    let before = storage_image(&t);
    let v0 = t.version();
    let e = f(&mut t).expect_err(what);
    assert!(check(&e), "{what}: unexpected error {e:?}");
    assert_eq!(vals(&t), v, "{what}: self changed");
    assert_eq!(storage_image(&t), before, "{what}: storage changed");
    assert_eq!(t.version(), v0, "{what}: version bumped");
}

#[test]
fn in_place_errors_leave_self_unchanged() {
    let _g = lock();
    let i = |v: &[i64], s: &[usize]| Tensor::from_slice(v, s, Device::Cpu).unwrap();
    let f32s = |s: &[usize]| Tensor::ones(s, DType::F32, Device::Cpu).unwrap();
    // The last index is bad: nothing before it may be written either.
    let late_bad = i(&[0, 1, 2, 3], &[1, 4]);
    let late_bad_vec = i(&[0, 1, 2, 9], &[4]);

    assert_refused(
        "scatter_ range",
        |t| t.scatter_(0, &late_bad, &f32s(&[1, 4])).map(|_| ()),
        |e| {
            *e == Error::IndexOutOfRange {
                op: "scatter_",
                index: 3,
                dim: 0,
                size: 3,
            }
        },
    );
    assert_refused(
        "scatter_ negative",
        |t| {
            t.scatter_(1, &i(&[0, -1], &[1, 2]), &f32s(&[1, 2]))
                .map(|_| ())
        },
        |e| {
            *e == Error::IndexOutOfRange {
                op: "scatter_",
                index: -1,
                dim: 1,
                size: 4,
            }
        },
    );
    assert_refused(
        "scatter_value_ range",
        |t| t.scatter_value_(0, &late_bad, 5.0).map(|_| ()),
        |e| {
            *e == Error::IndexOutOfRange {
                op: "scatter_value_",
                index: 3,
                dim: 0,
                size: 3,
            }
        },
    );
    assert_refused(
        "scatter_add_ range",
        |t| t.scatter_add_(0, &late_bad, &f32s(&[1, 4])).map(|_| ()),
        |e| {
            *e == Error::IndexOutOfRange {
                op: "scatter_add_",
                index: 3,
                dim: 0,
                size: 3,
            }
        },
    );
    assert_refused(
        "scatter_ index dtype",
        |t| t.scatter_(0, &f32s(&[1, 4]), &f32s(&[1, 4])).map(|_| ()),
        |e| {
            matches!(
                e,
                Error::DTypeMismatch {
                    op: "scatter_",
                    got: DType::F32,
                    ..
                }
            )
        },
    );
    assert_refused(
        "scatter_ src dtype",
        |t| {
            t.scatter_(
                0,
                &i(&[0], &[1, 1]),
                &Tensor::ones(&[1, 1], DType::F64, Device::Cpu).unwrap(),
            )
            .map(|_| ())
        },
        |e| {
            matches!(
                e,
                Error::DTypeMismatch {
                    op: "scatter_",
                    got: DType::F64,
                    ..
                }
            ) && e.to_string().contains("float32")
        },
    );
    assert_refused(
        "scatter_ index rank",
        |t| t.scatter_(0, &i(&[0], &[1]), &f32s(&[1])).map(|_| ()),
        |e| {
            matches!(e, Error::ShapeMismatch { op: "scatter_", .. })
                && e.to_string().contains("rank")
        },
    );
    assert_refused(
        "scatter_ src rank",
        |t| {
            t.scatter_(0, &i(&[0], &[1, 1]), &f32s(&[1, 1, 1]))
                .map(|_| ())
        },
        |e| matches!(e, Error::ShapeMismatch { op: "scatter_", .. }),
    );
    assert_refused(
        "scatter_ index wider than self",
        |t| {
            t.scatter_(0, &i(&[0; 5], &[1, 5]), &f32s(&[1, 5]))
                .map(|_| ())
        },
        |e| {
            matches!(e, Error::ShapeMismatch { op: "scatter_", .. })
                && e.to_string().contains("dimension 1")
        },
    );
    assert_refused(
        "scatter_ index larger than src",
        |t| {
            t.scatter_(0, &i(&[0, 0], &[2, 1]), &f32s(&[1, 1]))
                .map(|_| ())
        },
        |e| {
            matches!(e, Error::ShapeMismatch { op: "scatter_", .. })
                && e.to_string().contains("source")
        },
    );
    assert_refused(
        "scatter_ dim",
        |t| t.scatter_(2, &i(&[0], &[1, 1]), &f32s(&[1, 1])).map(|_| ()),
        |e| {
            *e == Error::DimOutOfRange {
                op: "scatter_",
                dim: 2,
                rank: 2,
            }
        },
    );

    assert_refused(
        "index_fill_ range",
        |t| t.index_fill_(1, &late_bad_vec, 5.0).map(|_| ()),
        |e| {
            *e == Error::IndexOutOfRange {
                op: "index_fill_",
                index: 9,
                dim: 1,
                size: 4,
            }
        },
    );
    assert_refused(
        "index_fill_ negative range",
        |t| t.index_fill_(1, &i(&[-5], &[1]), 5.0).map(|_| ()),
        |e| {
            *e == Error::IndexOutOfRange {
                op: "index_fill_",
                index: -5,
                dim: 1,
                size: 4,
            }
        },
    );
    assert_refused(
        "index_fill_ matrix index",
        |t| t.index_fill_(1, &i(&[0, 1], &[1, 2]), 5.0).map(|_| ()),
        |e| {
            matches!(
                e,
                Error::InvalidArgument {
                    op: "index_fill_",
                    ..
                }
            )
        },
    );
    assert_refused(
        "index_fill_ index dtype",
        |t| {
            t.index_fill_(
                1,
                &Tensor::zeros(&[1], DType::Bool, Device::Cpu).unwrap(),
                5.0,
            )
            .map(|_| ())
        },
        |e| {
            matches!(
                e,
                Error::DTypeMismatch {
                    op: "index_fill_",
                    got: DType::Bool,
                    ..
                }
            )
        },
    );
    assert_refused(
        "index_copy_ range",
        |t| t.index_copy_(1, &late_bad_vec, &f32s(&[3, 4])).map(|_| ()),
        |e| {
            *e == Error::IndexOutOfRange {
                op: "index_copy_",
                index: 9,
                dim: 1,
                size: 4,
            }
        },
    );
    assert_refused(
        "index_copy_ negative",
        |t| {
            t.index_copy_(1, &i(&[-1], &[1]), &f32s(&[3, 1]))
                .map(|_| ())
        },
        |e| {
            *e == Error::IndexOutOfRange {
                op: "index_copy_",
                index: -1,
                dim: 1,
                size: 4,
            }
        },
    );
    assert_refused(
        "index_copy_ src shape",
        |t| {
            t.index_copy_(1, &i(&[0, 1], &[2]), &f32s(&[3, 3]))
                .map(|_| ())
        },
        |e| {
            matches!(
                e,
                Error::ShapeMismatch {
                    op: "index_copy_",
                    ..
                }
            ) && e.to_string().contains("[3, 2]")
        },
    );
    assert_refused(
        "index_copy_ src dtype",
        |t| {
            t.index_copy_(
                1,
                &i(&[0], &[1]),
                &Tensor::ones(&[3, 1], DType::I64, Device::Cpu).unwrap(),
            )
            .map(|_| ())
        },
        |e| {
            matches!(
                e,
                Error::DTypeMismatch {
                    op: "index_copy_",
                    got: DType::I64,
                    ..
                }
            )
        },
    );
    assert_refused(
        "index_add_ range",
        |t| {
            t.index_add_(0, &i(&[0, 3], &[2]), &f32s(&[2, 4]))
                .map(|_| ())
        },
        |e| {
            *e == Error::IndexOutOfRange {
                op: "index_add_",
                index: 3,
                dim: 0,
                size: 3,
            }
        },
    );
    assert_refused(
        "index_add_ dim",
        |t| t.index_add_(-3, &i(&[0], &[1]), &f32s(&[1, 4])).map(|_| ()),
        |e| {
            matches!(
                e,
                Error::DimOutOfRange {
                    op: "index_add_",
                    ..
                }
            )
        },
    );

    assert_refused(
        "slice_assign_ shape",
        |t| t.slice_assign_(1, 0, 4, 2, &f32s(&[3, 3])).map(|_| ()),
        |e| {
            matches!(
                e,
                Error::ShapeMismatch {
                    op: "slice_assign_",
                    ..
                }
            )
        },
    );
    assert_refused(
        "slice_assign_ not to the slice",
        |t| t.slice_assign_(0, 0, 1, 1, &f32s(&[3, 4])).map(|_| ()),
        |e| {
            matches!(
                e,
                Error::ShapeMismatch {
                    op: "slice_assign_",
                    ..
                }
            ) && e.to_string().contains("slice")
        },
    );
    // A start past the end is an empty slice (Python's x[4:5] = ...): a
    // two-element source cannot broadcast to it.
    assert_refused(
        "slice_assign_ start",
        |t| t.slice_assign_(0, 4, 5, 1, &f32s(&[1, 2])).map(|_| ()),
        |e| {
            matches!(
                e,
                Error::ShapeMismatch {
                    op: "slice_assign_",
                    ..
                }
            )
        },
    );
    assert_refused(
        "slice_assign_ step",
        |t| t.slice_assign_(0, 0, 3, 0, &f32s(&[1])).map(|_| ()),
        |e| {
            matches!(
                e,
                Error::InvalidArgument {
                    op: "slice_assign_",
                    ..
                }
            )
        },
    );
    assert_refused(
        "slice_assign_ dim",
        |t| t.slice_assign_(5, 0, 3, 1, &f32s(&[1])).map(|_| ()),
        |e| {
            matches!(
                e,
                Error::DimOutOfRange {
                    op: "slice_assign_",
                    ..
                }
            )
        },
    );
    assert_refused(
        "slice_fill_ dim",
        |t| t.slice_fill_(-3, 0, 3, 1, 2.0).map(|_| ()),
        |e| {
            matches!(
                e,
                Error::DimOutOfRange {
                    op: "slice_fill_",
                    ..
                }
            )
        },
    );
}

#[test]
fn bool_add_and_expanded_targets_are_refused() {
    let _g = lock();
    let mut b = Tensor::zeros(&[3], DType::Bool, Device::Cpu).unwrap();
    let bs = Tensor::ones(&[3], DType::Bool, Device::Cpu).unwrap();
    let i = Tensor::from_slice(&[0i64, 1, 2], &[3], Device::Cpu).unwrap();
    let e = b.scatter_add_(0, &i, &bs).unwrap_err();
    assert!(
        matches!(
            e,
            Error::DTypeMismatch {
                op: "scatter_add_",
                got: DType::Bool,
                ..
            }
        ),
        "{e}"
    );
    let e = b.index_add_(0, &i, &bs).unwrap_err();
    assert!(
        matches!(
            e,
            Error::DTypeMismatch {
                op: "index_add_",
                got: DType::Bool,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(b.to_vec::<bool>().unwrap(), vec![false; 3]);

    // An expanded tensor has several elements per memory location.
    let base = Tensor::zeros(&[1, 3], DType::F32, Device::Cpu).unwrap();
    let mut e2 = base.expand(&[2, 3]).unwrap();
    let src = Tensor::ones(&[2, 3], DType::F32, Device::Cpu).unwrap();
    let idx = Tensor::zeros(&[2, 3], DType::I64, Device::Cpu).unwrap();
    let v = Tensor::from_slice(&[0i64], &[1], Device::Cpu).unwrap();
    for (op, r) in [
        ("scatter_", e2.scatter_(0, &idx, &src).map(|_| ())),
        (
            "scatter_value_",
            e2.scatter_value_(0, &idx, 1.0).map(|_| ()),
        ),
        ("scatter_add_", e2.scatter_add_(0, &idx, &src).map(|_| ())),
        ("index_fill_", e2.index_fill_(1, &v, 1.0).map(|_| ())),
        (
            "index_copy_",
            e2.index_copy_(
                0,
                &v,
                &Tensor::ones(&[1, 3], DType::F32, Device::Cpu).unwrap(),
            )
            .map(|_| ()),
        ),
        (
            "index_add_",
            e2.index_add_(
                0,
                &v,
                &Tensor::ones(&[1, 3], DType::F32, Device::Cpu).unwrap(),
            )
            .map(|_| ()),
        ),
        (
            "slice_assign_",
            e2.slice_assign_(1, 0, 2, 1, &src.narrow(1, 0, 2).unwrap())
                .map(|_| ()),
        ),
        ("slice_fill_", e2.slice_fill_(1, 0, 2, 1, 3.0).map(|_| ())),
    ] {
        let e = r.unwrap_err();
        assert!(
            matches!(&e, Error::InvalidInPlace { op: o, .. } if *o == op),
            "{op}: {e}"
        );
        assert!(e.to_string().starts_with(op), "{e}");
    }
    assert_eq!(vals(&base), vec![0.0; 3]);
}

// ---------------------------------------------------------------- slice assignment

#[test]
fn slice_assign_writes_the_base() {
    let _g = lock();
    for &dtype in &DTYPES {
        for kind in KINDS {
            let shape = [4usize, 6];
            let bv = values(24, dtype, 3);
            for (d, start, end, step) in [
                (0usize, 1usize, 4usize, 1usize),
                (1, 0, 6, 2),
                (1, 1, 100, 3),
                (0, 3, 4, 5),
                (1, 6, 6, 1),
            ] {
                let mut t = make(&bv, &shape, dtype, kind);
                let keep = t.alias(); // another handle on the same tensor
                let before = storage_image(&t);
                let sel: Vec<usize> = (start..end.min(shape[d])).step_by(step).collect();
                let sshape = with_dim(&shape, d, sel.len());
                let sv = values(numel(&sshape), dtype, 11);
                let src = make(&sv, &sshape, DType::F64, KINDS[(d + 1) % 3]); // cross-dtype source
                let v0 = t.version();
                t.slice_assign_(d as isize, start, end, step, &src).unwrap();
                let mut want = bv.clone();
                for (i, &x) in sv.iter().enumerate() {
                    let idx = unravel(i, &sshape);
                    want[ravel(&with_dim(&idx, d, sel[idx[d]]), &shape)] = if dtype == DType::Bool {
                        (x != 0.0) as u8 as f64
                    } else {
                        x
                    };
                }
                assert_written(
                    &t,
                    &before,
                    &want,
                    &format!("slice_assign_ {dtype} {kind:?} {d} {start}:{end}:{step}"),
                );
                assert_eq!(vals(&keep), want);
                if !sel.is_empty() {
                    assert!(t.version() > v0);
                }
            }
        }
    }
}

#[test]
fn slice_assign_broadcasts_and_handles_overlap() {
    let _g = lock();
    let base = Tensor::zeros(&[3, 4], DType::F32, Device::Cpu).unwrap();
    let mut view = base.t().unwrap(); // [4, 3], writes go to base
    let row = Tensor::from_slice(&[1.0f32, 2., 3.], &[3], Device::Cpu).unwrap();
    view.slice_assign_(0, 1, 3, 1, &row).unwrap();
    assert_eq!(
        vals(&base),
        vec![0., 1., 1., 0., 0., 2., 2., 0., 0., 3., 3., 0.]
    );
    let five = Tensor::scalar(5i64, Device::Cpu).unwrap();
    view.slice_assign_(1, 2, 3, 1, &five).unwrap();
    assert_eq!(
        vals(&base),
        vec![0., 1., 1., 0., 0., 2., 2., 0., 5., 5., 5., 5.]
    );
    view.slice_fill_(0, 0, 4, 3, -1.0).unwrap();
    assert_eq!(
        vals(&base),
        vec![-1., 1., 1., -1., -1., 2., 2., -1., -1., 5., 5., -1.]
    );

    // x[1:5] = x[0:4] reads the old values (PyTorch copies overlapping sources).
    let mut x = Tensor::arange(0.0, 6.0, 1.0, DType::I32, Device::Cpu).unwrap();
    let src = x.narrow(0, 0, 4).unwrap();
    x.slice_assign_(0, 1, 5, 1, &src).unwrap();
    assert_eq!(x.to_vec::<i32>().unwrap(), vec![0, 0, 1, 2, 3, 5]);
}

#[test]
fn large_gathers_take_the_parallel_and_tiled_paths() {
    let _g = lock();
    // 600 x 300 = 180 000 output elements: above the parallel threshold, and
    // the transposed input makes the walk tiled.
    let (r, c) = (600usize, 300usize);
    let v: Vec<f64> = (0..r * c).map(|i| (i % 1000) as f64).collect();
    for kind in [Kind::Contiguous, Kind::Transposed] {
        let t = make(&v, &[r, c], DType::F32, kind);
        let ix: Vec<i64> = (0..c as i64).rev().collect();
        let index = Tensor::from_slice(&ix, &[c], Device::Cpu).unwrap();
        let out = t.index_select(1, &index).unwrap();
        let (want, _) = ref_index_select(&v, &[r, c], 1, &ix);
        assert_eq!(vals(&out), want, "index_select {kind:?}");
        let full: Vec<i64> = (0..r * c).map(|i| ((i * 7) % r) as i64).collect();
        let gi = Tensor::from_slice(&full, &[r, c], Device::Cpu).unwrap();
        let g = t.gather(0, &gi).unwrap();
        assert_eq!(
            vals(&g),
            ref_gather(&v, &[r, c], 0, &full, &[r, c]),
            "gather {kind:?}"
        );
    }
}
