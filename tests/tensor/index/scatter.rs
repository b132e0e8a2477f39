//! Scatter family.

use super::*;

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
