//! The index ops.

use super::*;

// ---------------------------------------------------------------- index ---

pub(super) fn index_ops(dev: Device) {
    for dt in ALL {
        let v = sample(240, dt, 31);
        for it in [DType::I64, DType::I32] {
            for li in 0..4 {
                let (lname, x) = layout_456(&v, dt, dev, li);
                let xv = read(&x);
                let at = |i: usize, j: usize, k: usize| xv[(i * 5 + j) * 6 + k];
                let what = |op: &str| format!("{op} {dt} index {it} {lname}");
                // index_select along each dim, with repeats.
                let sel = [3i64, 0, 3, 1];
                for dim in 0..3 {
                    let f = |d: Device| {
                        layout_456(&v, dt, d, li)
                            .1
                            .index_select(dim, &tensor(&sel, &[4], it, d))
                            .unwrap()
                    };
                    let y = f(dev);
                    let mut shape = [4usize, 5, 6];
                    shape[dim as usize] = 4;
                    let want: Vec<f64> = (0..shape.iter().product::<usize>())
                        .map(|p| {
                            let (i, j, k) = (
                                p / (shape[1] * shape[2]),
                                p / shape[2] % shape[1],
                                p % shape[2],
                            );
                            match dim {
                                0 => at(sel[i] as usize, j, k),
                                1 => at(i, sel[j] as usize, k),
                                _ => at(i, j, sel[k] as usize),
                            }
                        })
                        .collect();
                    assert_eq!(read(&y), want, "{} dim {dim}", what("index_select"));
                    also_cpu(dev, f, &y, 0.0, &what("index_select"));
                }
                // gather along dim 1 with a [4, 3, 6] index, read transposed.
                let gi: Vec<i64> = (0..72).map(|p| ((p * 7) % 5) as i64).collect();
                let f = |d: Device| {
                    let i = tensor(&gi, &[6, 3, 4], it, d).permute(&[2, 1, 0]).unwrap();
                    layout_456(&v, dt, d, li).1.gather(1, &i).unwrap()
                };
                let y = f(dev);
                let want: Vec<f64> = (0..72)
                    .map(|p| {
                        let (i, j, k) = (p / 18, p / 6 % 3, p % 6);
                        at(i, gi[(k * 3 + j) * 4 + i] as usize, k)
                    })
                    .collect();
                assert_eq!(read(&y), want, "{}", what("gather"));
                also_cpu(dev, f, &y, 0.0, &what("gather"));
                // Fancy indexing with a 2-D index and negative entries.
                let fi = [-1i64, 0, 2, -4];
                let f = |d: Device| {
                    layout_456(&v, dt, d, li)
                        .1
                        .index(&tensor(&fi, &[2, 2], it, d))
                        .unwrap()
                };
                let y = f(dev);
                assert_eq!(y.shape(), &[2, 2, 5, 6]);
                let want: Vec<f64> = (0..120)
                    .map(|p| at(fi[p / 30].rem_euclid(4) as usize, p / 6 % 5, p % 6))
                    .collect();
                assert_eq!(read(&y), want, "{}", what("index"));
                also_cpu(dev, f, &y, 0.0, &what("index"));
            }
            // In place: scatter_ (distinct targets), scatter_value_,
            // scatter_add_ (repeats), index_copy_, index_add_, index_fill_,
            // each into a stepped view of a [4, 10, 6] tensor.
            let base: Vec<f64> = sample(240, dt, 32);
            let wrapped = |x: f64| {
                if dt.is_float() {
                    cast_ref(x, dt)
                } else {
                    cast_ref(wrap(x as i128, dt), dt)
                }
            };
            let dst = |d: Device| tensor(&base, &[4, 10, 6], dt, d);
            let view_at = |b: &[f64], i: usize, j: usize, k: usize| b[(i * 10 + 2 * j + 1) * 6 + k];
            let src_v = sample(120, dt, 33);
            let src = |d: Device| {
                tensor(&src_v, &[5, 4, 6], dt, d)
                    .permute(&[1, 0, 2])
                    .unwrap()
            }; // [4, 5, 6]
            let sv = |i: usize, j: usize, k: usize| {
                read(&tensor(&src_v, &[5, 4, 6], dt, Device::Cpu))[(j * 4 + i) * 6 + k]
            };
            let srch: Vec<f64> = (0..120).map(|p| sv(p / 30, p / 6 % 5, p % 6)).collect();
            let bh = read(&tensor(&base, &[4, 10, 6], dt, Device::Cpu));
            type Body<'a> = &'a dyn Fn(&mut Tensor, Device);
            let run = |op: &str, body: Body, want: &dyn Fn(usize, usize, usize) -> f64| {
                let go = |d: Device| {
                    let full = dst(d);
                    let mut view = full.slice(1, 1, 10, 2).unwrap();
                    body(&mut view, d);
                    full
                };
                let got = go(dev);
                let want: Vec<f64> = (0..240)
                    .map(|p| {
                        let (i, r, k) = (p / 60, p / 6 % 10, p % 6);
                        if r % 2 == 1 {
                            want(i, r / 2, k)
                        } else {
                            bh[p]
                        }
                    })
                    .collect();
                assert_close(
                    &read(&got),
                    &want,
                    tol(dt),
                    &format!("{op} {dt} index {it}"),
                );
                also_cpu(dev, go, &got, tol(dt), &format!("{op} {dt} index {it}"));
            };
            // scatter_ along dim 1: a permutation per (i, k) column.
            let perm = |i: usize, k: usize, j: usize| (j + i + k) % 5;
            let si: Vec<i64> = (0..120)
                .map(|p| perm(p / 30, p % 6, p / 6 % 5) as i64)
                .collect();
            run(
                "scatter_",
                &|t, d| {
                    t.scatter_(1, &tensor(&si, &[4, 5, 6], it, d), &src(d))
                        .unwrap();
                },
                &|i, j, k| {
                    let jj = (0..5).find(|&jj| perm(i, k, jj) == j).unwrap();
                    srch[(i * 5 + jj) * 6 + k]
                },
            );
            // scatter_value_ along dim 2 with a [4, 5, 2] index.
            let vi: Vec<i64> = (0..40).map(|p| [1, 4][p % 2]).collect();
            run(
                "scatter_value_",
                &|t, d| {
                    t.scatter_value_(2, &tensor(&vi, &[4, 5, 2], it, d), 3.0)
                        .unwrap();
                },
                &|i, j, k| {
                    if k == 1 || k == 4 {
                        cast_ref(3.0, dt)
                    } else {
                        view_at(&bh, i, j, k)
                    }
                },
            );
            // index_fill_ along dim 0 with a negative index.
            let fill = [-1i64, 1];
            run(
                "index_fill_",
                &|t, d| {
                    t.index_fill_(0, &tensor(&fill, &[2], it, d), -2.0).unwrap();
                },
                &|i, j, k| {
                    if i == 3 || i == 1 {
                        cast_ref(-2.0, dt)
                    } else {
                        view_at(&bh, i, j, k)
                    }
                },
            );
            // index_copy_ along dim 1: rows 4, 0, 2 get rows 0, 1, 2 of a [4, 3, 6] source.
            let ci = [4i64, 0, 2];
            run(
                "index_copy_",
                &|t, d| {
                    let s = src(d).narrow(1, 0, 3).unwrap();
                    t.index_copy_(1, &tensor(&ci, &[3], it, d), &s).unwrap();
                },
                &|i, j, k| match ci.iter().position(|&c| c as usize == j) {
                    Some(r) => srch[(i * 5 + r) * 6 + k],
                    None => view_at(&bh, i, j, k),
                },
            );
            if dt == DType::Bool {
                let mut t = dst(dev);
                let e = t
                    .scatter_add_(
                        1,
                        &tensor(&[0], &[1, 1, 1], it, dev),
                        &tensor(&[1.0], &[1, 1, 1], dt, dev),
                    )
                    .unwrap_err();
                assert!(
                    matches!(
                        e,
                        Error::DTypeMismatch {
                            op: "scatter_add_",
                            ..
                        }
                    ),
                    "{e:?}"
                );
                continue;
            }
            // scatter_add_ along dim 1 with repeated targets, index_add_ along dim 2.
            let ai: Vec<i64> = (0..120).map(|p| ((p / 6 % 5) % 2) as i64 * 3).collect();
            run(
                "scatter_add_",
                &|t, d| {
                    t.scatter_add_(1, &tensor(&ai, &[4, 5, 6], it, d), &src(d))
                        .unwrap();
                },
                &|i, j, k| {
                    let add: f64 = (0..5)
                        .filter(|&jj| (jj % 2) * 3 == j)
                        .map(|jj| srch[(i * 5 + jj) * 6 + k])
                        .sum();
                    wrapped(view_at(&bh, i, j, k) + add)
                },
            );
            let xi = [5i64, 0, 5];
            run(
                "index_add_",
                &|t, d| {
                    let s = src(d).narrow(2, 0, 3).unwrap();
                    t.index_add_(2, &tensor(&xi, &[3], it, d), &s).unwrap();
                },
                &|i, j, k| {
                    let add: f64 = (0..3)
                        .filter(|&c| xi[c] as usize == k)
                        .map(|c| srch[(i * 5 + j) * 6 + c])
                        .sum();
                    wrapped(view_at(&bh, i, j, k) + add)
                },
            );
        }
        // masked_select with a broadcast mask over a transposed source.
        let v = sample(24, dt, 34);
        let mv = [true, false, true, true, false, false];
        let f = |d: Device| {
            let x = tensor(&v, &[6, 4], dt, d).t().unwrap(); // [4, 6]
            let m = Tensor::from_slice(&mv, &[6], d).unwrap();
            x.masked_select(&m).unwrap()
        };
        let y = f(dev);
        let xh = read(&tensor(&v, &[6, 4], dt, Device::Cpu));
        let want: Vec<f64> = (0..24)
            .filter(|p| mv[p % 6])
            .map(|p| xh[(p % 6) * 4 + p / 6])
            .collect();
        assert_eq!(read(&y), want, "masked_select {dt}");
        also_cpu(dev, f, &y, 0.0, &format!("masked_select {dt}"));
        // x[bool mask] over the leading dims.
        let lm = [false, true, true, false];
        let f = |d: Device| {
            tensor(&v, &[4, 6], dt, d)
                .index(&Tensor::from_slice(&lm, &[4], d).unwrap())
                .unwrap()
        };
        let y = f(dev);
        assert_eq!(y.shape(), &[2, 6]);
        assert_eq!(read(&y), [&xh[6..18]].concat(), "bool index {dt}");
    }
    // A long mask (many chunks) keeps row-major order.
    let n = 100_003;
    let xs: Vec<i64> = (0..n as i64).collect();
    let m: Vec<bool> = (0..n).map(|i| i % 3 == 0 || i % 7 == 1).collect();
    let x = Tensor::from_slice(&xs, &[n], dev).unwrap();
    let sel = x
        .masked_select(&Tensor::from_slice(&m, &[n], dev).unwrap())
        .unwrap();
    let want: Vec<i64> = xs.iter().copied().filter(|&i| m[i as usize]).collect();
    assert_eq!(sel.to_vec::<i64>().unwrap(), want);
    // Bad indices: an error naming the op, the index, the dim and its size,
    // and nothing written.
    let x = tensor(&sample(24, DType::F32, 35), &[4, 6], DType::F32, dev);
    let before = read(&x);
    let e = x
        .index_select(1, &tensor(&[0, 6], &[2], DType::I64, dev))
        .unwrap_err();
    assert_eq!(
        e,
        Error::IndexOutOfRange {
            op: "index_select",
            index: 6,
            dim: 1,
            size: 6
        }
    );
    let e = x
        .index_select(0, &tensor(&[-1], &[1], DType::I32, dev))
        .unwrap_err();
    assert_eq!(
        e,
        Error::IndexOutOfRange {
            op: "index_select",
            index: -1,
            dim: 0,
            size: 4
        }
    );
    let e = x
        .index(&tensor(&[1, -5], &[2], DType::I64, dev))
        .unwrap_err();
    assert_eq!(
        e,
        Error::IndexOutOfRange {
            op: "index",
            index: -5,
            dim: 0,
            size: 4
        }
    );
    let mut y = x.deep_clone().unwrap();
    let si = tensor(&[0, 1, 2, 9, 0, 1], &[1, 6], DType::I64, dev);
    let e = y
        .scatter_(0, &si, &tensor(&[5.0; 6], &[1, 6], DType::F32, dev))
        .unwrap_err();
    assert_eq!(
        e,
        Error::IndexOutOfRange {
            op: "scatter_",
            index: 9,
            dim: 0,
            size: 4
        }
    );
    assert_eq!(read(&y), before, "a failed scatter_ writes nothing");
    let e = y
        .index_fill_(1, &tensor(&[2, -7], &[2], DType::I64, dev), 1.0)
        .unwrap_err();
    assert_eq!(
        e,
        Error::IndexOutOfRange {
            op: "index_fill_",
            index: -7,
            dim: 1,
            size: 6
        }
    );
    let e = y
        .index_add_(
            0,
            &tensor(&[4], &[1], DType::I32, dev),
            &tensor(&[1.0; 6], &[1, 6], DType::F32, dev),
        )
        .unwrap_err();
    assert_eq!(
        e,
        Error::IndexOutOfRange {
            op: "index_add_",
            index: 4,
            dim: 0,
            size: 4
        }
    );
    assert_eq!(read(&y), before, "failed index ops write nothing");
    let e = x
        .index_select(0, &tensor(&[0.0], &[1], DType::F32, dev))
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::DTypeMismatch {
                op: "index_select",
                ..
            }
        ),
        "{e:?}"
    );
    let e = x
        .masked_select(&tensor(&[1.0], &[1], DType::F32, dev))
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::DTypeMismatch {
                op: "masked_select",
                ..
            }
        ),
        "{e:?}"
    );
}
