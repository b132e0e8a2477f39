//! Reductions and softmax.

use super::*;

// ------------------------------------------- reductions and softmax ---

/// Few outputs of many elements each (a full reduction of a million
/// elements, three rows of 200,001 seen contiguous and transposed): on
/// CUDA these are split across many blocks per output (reduce.rs's
/// `split_count`), whose partial results are combined in slice order.
/// Against f64 references; on CUDA also against the CPU.
pub(super) fn long_reductions(dev: Device) {
    let n = 1_000_003usize;
    // Multiples of 1/8 in [-2, 2): sums are exact in f64.
    let v: Vec<f64> = sample(n, DType::F32, 91).iter().map(|x| x / 2.0).collect();
    let x = tensor(&v, &[n], DType::F32, dev);
    let exact_sum: f64 = v.iter().sum();
    let item = |t: Tensor| read(&t)[0];
    assert_eq!(
        item(x.sum(&[], false).unwrap()),
        exact_sum as f32 as f64,
        "sum"
    );
    let mean = exact_sum / n as f64;
    assert_close(&[item(x.mean(&[], false).unwrap())], &[mean], 1e-6, "mean");
    let var = v.iter().map(|a| (a - mean) * (a - mean)).sum::<f64>() / (n - 1) as f64;
    assert_close(&[item(x.var(&[], 1, false).unwrap())], &[var], 1e-6, "var");
    assert_close(
        &[item(x.std(&[], 0, false).unwrap())],
        &[(var * (n - 1) as f64 / n as f64).sqrt()],
        1e-6,
        "std",
    );
    let m = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let lse = m + v.iter().map(|a| (a - m).exp()).sum::<f64>().ln();
    assert_close(
        &[item(x.logsumexp(&[], false).unwrap())],
        &[lse],
        1e-5,
        "logsumexp",
    );
    // Products near 1: (1 + 2^-20)^k for k = n counts every element.
    let ones = Tensor::full(&[n], 1.0 + 1.0 / 1048576.0, DType::F64, dev).unwrap();
    let want = (1.0f64 + 1.0 / 1048576.0).powi(n as i32);
    assert_close(
        &[item(ones.prod(&[], false).unwrap())],
        &[want],
        1e-9,
        "prod",
    );
    // Extremes planted late and twice: the first occurrence wins across slices.
    let mut w = v.clone();
    for &(i, val) in &[
        (700_001usize, 9.0),
        (900_000, 9.0),
        (300_000, -9.0),
        (999_999, -9.0),
    ] {
        w[i] = val;
    }
    let xw = tensor(&w, &[n], DType::F32, dev);
    assert_eq!(item(xw.max(&[], false).unwrap()), 9.0);
    assert_eq!(item(xw.min(&[], false).unwrap()), -9.0);
    assert_eq!(
        item(xw.argmax(0, false).unwrap()),
        700_001.0,
        "argmax: first of two"
    );
    assert_eq!(
        item(xw.argmin(0, false).unwrap()),
        300_000.0,
        "argmin: first of two"
    );
    w[800_000] = f64::NAN;
    w[950_000] = f64::NAN;
    let xn = tensor(&w, &[n], DType::F32, dev);
    assert!(
        item(xn.max(&[], false).unwrap()).is_nan(),
        "max propagates NaN"
    );
    assert_eq!(
        item(xn.argmax(0, false).unwrap()),
        800_000.0,
        "argmax: first NaN"
    );
    // Integers wrap-free here; bool counts.
    let iv: Vec<i64> = (0..n as i64).collect();
    let xi = Tensor::from_slice(&iv, &[n], dev).unwrap();
    let want_i = (n as i64 - 1) * n as i64 / 2;
    assert_eq!(
        xi.sum(&[], false).unwrap().to_vec::<i64>().unwrap(),
        vec![want_i]
    );
    let bools: Vec<bool> = (0..n).map(|i| i % 3 == 0).collect();
    let xb = Tensor::from_slice(&bools, &[n], dev).unwrap();
    assert_eq!(
        read(&xb.sum(&[], false).unwrap()),
        vec![n.div_ceil(3) as f64]
    );
    // Three long rows, contiguous and transposed (a strided reduced dim).
    let (rows, cols) = (3usize, 200_001usize);
    let rv: Vec<f64> = sample(rows * cols, DType::F32, 92).to_vec();
    let want: Vec<f64> = (0..rows)
        .map(|r| rv[r * cols..(r + 1) * cols].iter().sum())
        .collect();
    let want_arg: Vec<f64> = (0..rows)
        .map(|r| arg_ref(&rv[r * cols..(r + 1) * cols], true))
        .collect();
    let a = tensor(&rv, &[rows, cols], DType::F32, dev);
    let mut tv = vec![0.0; rows * cols];
    for r in 0..rows {
        for c in 0..cols {
            tv[c * rows + r] = rv[r * cols + c];
        }
    }
    let b = tensor(&tv, &[cols, rows], DType::F32, dev).t().unwrap();
    for (name, t) in [("contiguous", &a), ("transposed", &b)] {
        let got = t.sum(&[1], false).unwrap();
        assert_close(&read(&got), &want, 1e-6, &format!("row sums, {name}"));
        let f = |d: Device| t.to_device(d).unwrap().sum(&[1], false).unwrap();
        also_cpu(dev, f, &got, 1e-6, &format!("row sums, {name}"));
        assert_eq!(
            read(&t.argmax(1, false).unwrap()),
            want_arg,
            "row argmax, {name}"
        );
    }
}

/// `f` over the elements of each output of a reduction of the row-major
/// values `v` of `shape` over `dims` (the elements in row-major order of
/// the reduced dimensions).
pub(super) fn reduce_ref(
    v: &[f64],
    shape: &[usize],
    dims: &[usize],
    f: impl Fn(&[f64]) -> f64,
) -> Vec<f64> {
    let kept: Vec<usize> = (0..shape.len()).filter(|d| !dims.contains(d)).collect();
    let n_out: usize = kept.iter().map(|&d| shape[d]).product();
    let mut groups = vec![Vec::new(); n_out];
    for (i, &x) in v.iter().enumerate() {
        let mut rem = i;
        let mut idx = vec![0; shape.len()];
        for d in (0..shape.len()).rev() {
            idx[d] = rem % shape[d];
            rem /= shape[d];
        }
        let o = kept.iter().fold(0, |a, &d| a * shape[d] + idx[d]);
        groups[o].push(x);
    }
    groups.iter().map(|g| f(g)).collect()
}

pub(super) fn nan_max(g: &[f64], max: bool) -> f64 {
    if g.iter().any(|x| x.is_nan()) {
        return f64::NAN;
    }
    let it = g.iter().cloned();
    if max {
        it.fold(f64::NEG_INFINITY, f64::max)
    } else {
        it.fold(f64::INFINITY, f64::min)
    }
}

/// Index of the first NaN, else of the first extreme value.
pub(super) fn arg_ref(g: &[f64], max: bool) -> f64 {
    if let Some(i) = g.iter().position(|x| x.is_nan()) {
        return i as f64;
    }
    let m = nan_max(g, max);
    g.iter().position(|&x| x == m).unwrap() as f64
}

pub(super) fn var_ref(g: &[f64], correction: usize) -> f64 {
    let n = g.len() as f64;
    let mean = g.iter().sum::<f64>() / n;
    let m2: f64 = g.iter().map(|x| (x - mean) * (x - mean)).sum();
    m2 / (n - correction as f64).max(0.0)
}

pub(super) fn lse_ref(g: &[f64]) -> f64 {
    let m = g.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    if m == f64::NEG_INFINITY {
        return m;
    }
    m + g.iter().map(|x| (x - m).exp()).sum::<f64>().ln()
}

pub(super) fn reductions(dev: Device) {
    for dt in ALL {
        let v = sample(240, dt, 21);
        for li in 0..4 {
            let (lname, x) = layout_456(&v, dt, dev, li);
            let xv = read(&x);
            let shape = x.shape().to_vec();
            for dims in [vec![], vec![1], vec![0, 2], vec![2]] {
                let idims: Vec<isize> = dims.iter().map(|&d| d as isize).collect();
                let full: Vec<usize> = if dims.is_empty() {
                    vec![0, 1, 2]
                } else {
                    dims.clone()
                };
                for keepdim in [false, true] {
                    let what =
                        |op: &str| format!("{op} {dt} {lname} dims {dims:?} keepdim {keepdim}");
                    let check = |op: &str,
                                 f: &dyn Fn(&Tensor) -> tensorscope::Result<Tensor>,
                                 want: Vec<f64>,
                                 want_dt: DType,
                                 tol: f64| {
                        let got = f(&x).unwrap();
                        let mut want_shape: Vec<usize> = Vec::new();
                        for (d, &s) in shape.iter().enumerate() {
                            if !full.contains(&d) {
                                want_shape.push(s);
                            } else if keepdim {
                                want_shape.push(1);
                            }
                        }
                        assert_eq!(got.shape(), want_shape.as_slice(), "{}", what(op));
                        assert_eq!(got.dtype(), want_dt, "{}", what(op));
                        assert_eq!(got.device(), dev);
                        assert_close(&read(&got), &want, tol, &what(op));
                        also_cpu(
                            dev,
                            |d| f(&layout_456(&v, dt, d, li).1).unwrap(),
                            &got,
                            tol,
                            &what(op),
                        );
                    };
                    let int_out = if dt.is_float() { dt } else { DType::I64 };
                    let sum: Vec<f64> = reduce_ref(&xv, &shape, &full, |g| g.iter().sum())
                        .into_iter()
                        .map(|s| if dt.is_float() { cast_ref(s, dt) } else { s })
                        .collect();
                    check("sum", &|t| t.sum(&idims, keepdim), sum, int_out, tol(dt));
                    for max in [true, false] {
                        let want = reduce_ref(&xv, &shape, &full, |g| nan_max(g, max));
                        let f = |t: &Tensor| {
                            if max {
                                t.max(&idims, keepdim)
                            } else {
                                t.min(&idims, keepdim)
                            }
                        };
                        check(if max { "max" } else { "min" }, &f, want, dt, 0.0);
                    }
                    if full == [1] {
                        // Products of 5 elements: no overflow anywhere.
                        let p: Vec<f64> = reduce_ref(&xv, &shape, &full, |g| g.iter().product())
                            .into_iter()
                            .map(|s| if dt.is_float() { cast_ref(s, dt) } else { s })
                            .collect();
                        check("prod", &|t| t.prod(&idims, keepdim), p, int_out, tol(dt));
                    }
                    if !dt.is_float() {
                        continue;
                    }
                    let r = |f: &dyn Fn(&[f64]) -> f64| -> Vec<f64> {
                        reduce_ref(&xv, &shape, &full, f)
                            .into_iter()
                            .map(|s| cast_ref(s, dt))
                            .collect()
                    };
                    let n = full.iter().map(|&d| shape[d]).product::<usize>() as f64;
                    check(
                        "mean",
                        &|t| t.mean(&idims, keepdim),
                        r(&|g| g.iter().sum::<f64>() / n),
                        dt,
                        tol(dt),
                    );
                    for c in [0, 1] {
                        check(
                            "var",
                            &|t| t.var(&idims, c, keepdim),
                            r(&|g| var_ref(g, c)),
                            dt,
                            4.0 * tol(dt),
                        );
                        check(
                            "std",
                            &|t| t.std(&idims, c, keepdim),
                            r(&|g| var_ref(g, c).sqrt()),
                            dt,
                            4.0 * tol(dt),
                        );
                    }
                    check(
                        "logsumexp",
                        &|t| t.logsumexp(&idims, keepdim),
                        r(&lse_ref),
                        dt,
                        2.0 * tol(dt),
                    );
                }
            }
        }
    }
    // Special values: NaN propagates through max/min/sum, logsumexp of
    // -inf rows is -inf and of +inf is +inf; empty reductions.
    let inf = f64::INFINITY;
    let sv = [1.0, f64::NAN, 3.0, -inf, -inf, -inf, 2.0, inf, 5.0];
    for dt in FLOATS {
        let x = tensor(&sv, &[3, 3], dt, dev);
        let got = read(&x.max(&[1], false).unwrap());
        assert!(
            got[0].is_nan() && got[1] == -inf && got[2] == inf,
            "max {dt}: {got:?}"
        );
        let got = read(&x.logsumexp(&[1], false).unwrap());
        assert!(
            got[0].is_nan() && got[1] == -inf && got[2] == inf,
            "lse {dt}: {got:?}"
        );
        let e = tensor::<f64>(&[], &[0, 3], dt, dev);
        assert_eq!(read(&e.sum(&[0], false).unwrap()), vec![0.0; 3]);
        assert_eq!(read(&e.prod(&[0], false).unwrap()), vec![1.0; 3]);
        assert!(read(&e.mean(&[0], false).unwrap())
            .iter()
            .all(|x| x.is_nan()));
        assert_eq!(read(&e.logsumexp(&[0], false).unwrap()), vec![-inf; 3]);
        let err = e.max(&[0], false).unwrap_err();
        assert!(
            matches!(err, Error::InvalidArgument { op: "max", .. }),
            "{err:?}"
        );
        let err = x.var(&[5], 1, false).unwrap_err();
        assert!(
            matches!(err, Error::DimOutOfRange { op: "var", .. }),
            "{err:?}"
        );
    }
    // A long reduction (one block per output) and a large one (many outputs).
    let n = 100_000;
    let big: Vec<f64> = (0..n)
        .map(|i| ((i * 7919) % 1000) as f64 / 8.0 - 60.0)
        .collect();
    let x = tensor(&big, &[n], DType::F32, dev);
    let s = x.sum_all().unwrap().item::<f64>().unwrap();
    let want: f64 = big.iter().sum();
    assert!(
        (s - want).abs() <= 1e-5 * want.abs().max(1.0),
        "sum of {n}: {s} vs {want}"
    );
    let xv = x.var(&[0], 1, false).unwrap().item::<f64>().unwrap();
    let wv = var_ref(&big, 1);
    assert!((xv - wv).abs() <= 1e-4 * wv, "var of {n}: {xv} vs {wv}");
    let m = tensor(&big, &[1000, 100], DType::F64, dev);
    let got = read(&m.sum(&[0], false).unwrap());
    let want: Vec<f64> = (0..100)
        .map(|j| (0..1000).map(|i| big[i * 100 + j]).sum())
        .collect();
    assert_close(&got, &want, 1e-12, "sum over dim 0 of [1000, 100]");
    // Integer wrapping: a sum of i64 that overflows wraps as on the CPU.
    let w = Tensor::from_slice(&[i64::MAX, 1, 1], &[3], dev).unwrap();
    assert_eq!(w.sum_all().unwrap().item::<i64>().unwrap(), i64::MIN + 1);
    // Integers cannot take a mean.
    let e = tensor(&[1.0], &[1], DType::I32, dev)
        .mean(&[], false)
        .unwrap_err();
    assert!(
        matches!(e, Error::DTypeMismatch { op: "mean", .. }),
        "{e:?}"
    );
}

pub(super) fn arg_reductions(dev: Device) {
    for dt in ALL {
        // Few distinct values: many ties, the first must win.
        let mut v = sample(240, dt, 22);
        if dt.is_float() {
            v[7] = f64::NAN;
            v[50] = f64::NAN;
            v[53] = f64::NAN;
        }
        for li in 0..4 {
            let (lname, x) = layout_456(&v, dt, dev, li);
            let xv = read(&x);
            let shape = x.shape().to_vec();
            for dim in 0..3 {
                for keepdim in [false, true] {
                    for max in [true, false] {
                        let what = format!(
                            "arg{} {dt} {lname} dim {dim} keepdim {keepdim}",
                            if max { "max" } else { "min" }
                        );
                        let want_i = reduce_ref(&xv, &shape, &[dim], |g| arg_ref(g, max));
                        let want_v = reduce_ref(&xv, &shape, &[dim], |g| nan_max(g, max));
                        let f = |t: &Tensor| {
                            if max {
                                t.argmax(dim as isize, keepdim).unwrap()
                            } else {
                                t.argmin(dim as isize, keepdim).unwrap()
                            }
                        };
                        let i = f(&x);
                        assert_eq!(i.dtype(), DType::I64);
                        assert_eq!(i.rank(), if keepdim { 3 } else { 2 });
                        assert_eq!(read(&i), want_i, "{what}");
                        also_cpu(dev, |d| f(&layout_456(&v, dt, d, li).1), &i, 0.0, &what);
                        let g = |t: &Tensor| {
                            if max {
                                t.max_dim(dim as isize, keepdim).unwrap()
                            } else {
                                t.min_dim(dim as isize, keepdim).unwrap()
                            }
                        };
                        let (mv, mi) = g(&x);
                        assert_eq!(mv.dtype(), dt);
                        assert_eq!(mv.shape(), mi.shape());
                        assert_eq!(read(&mi), want_i, "{what} (max_dim indices)");
                        assert_close(&read(&mv), &want_v, 0.0, &format!("{what} (values)"));
                        also_cpu(dev, |d| g(&layout_456(&v, dt, d, li).1).0, &mv, 0.0, &what);
                    }
                }
            }
        }
    }
    let e = tensor::<f64>(&[], &[2, 0], DType::F32, dev)
        .argmax(1, false)
        .unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { op: "argmax", .. }),
        "{e:?}"
    );
    // A long row (a whole block per output).
    let n = 5000;
    let v: Vec<f64> = (0..n).map(|i| ((i * 37) % 1001) as f64).collect();
    let x = tensor(&v, &[1, n], DType::F32, dev);
    let want = v.iter().position(|&e| e == 1000.0).unwrap() as i64;
    assert_eq!(
        x.argmax(1, false).unwrap().to_vec::<i64>().unwrap(),
        vec![want]
    );
}

pub(super) fn softmax_family(dev: Device) {
    for dt in FLOATS {
        let v = sample(240, dt, 23);
        for li in 0..4 {
            let (lname, x) = layout_456(&v, dt, dev, li);
            let xv = read(&x);
            let shape = x.shape().to_vec();
            for dim in 0..3 {
                for log in [false, true] {
                    let what = format!(
                        "{} {dt} {lname} dim {dim}",
                        if log { "log_softmax" } else { "softmax" }
                    );
                    let f = |t: &Tensor| {
                        if log {
                            t.log_softmax(dim as isize).unwrap()
                        } else {
                            t.softmax(dim as isize).unwrap()
                        }
                    };
                    let y = f(&x);
                    assert_eq!((y.shape(), y.dtype()), (shape.as_slice(), dt));
                    // The reference, element by element in row-major order.
                    let lse = reduce_ref(&xv, &shape, &[dim], lse_ref);
                    let want: Vec<f64> = (0..xv.len())
                        .map(|i| {
                            let mut rem = i;
                            let mut idx = [0usize; 3];
                            for d in (0..3).rev() {
                                idx[d] = rem % shape[d];
                                rem /= shape[d];
                            }
                            let o = (0..3)
                                .filter(|&d| d != dim)
                                .fold(0, |a, d| a * shape[d] + idx[d]);
                            let l = xv[i] - lse[o];
                            cast_ref(if log { l } else { l.exp() }, dt)
                        })
                        .collect();
                    assert_close(&read(&y), &want, 4.0 * tol(dt), &what);
                    also_cpu(
                        dev,
                        |d| f(&layout_456(&v, dt, d, li).1),
                        &y,
                        4.0 * tol(dt),
                        &what,
                    );
                }
            }
        }
        // A long row (block-wide groups), with -inf entries and huge values.
        let n = 3000;
        let mut v: Vec<f64> = (0..n).map(|i| (i % 17) as f64 / 4.0 + 1000.0).collect();
        v[5] = f64::NEG_INFINITY;
        let x = tensor(&v, &[1, n], dt, dev);
        let y = x.softmax(1).unwrap();
        let yv = read(&y);
        assert_eq!(yv[5], 0.0);
        let s: f64 = yv.iter().sum();
        assert!(
            (s - 1.0).abs() < 100.0 * tol(dt),
            "softmax {dt} of a long row sums to {s}"
        );
        also_cpu(
            dev,
            |d| x.to_device(d).unwrap().softmax(1).unwrap(),
            &y,
            4.0 * tol(dt),
            &format!("long softmax {dt}"),
        );
        // Masked rows (attention masks): runs of -inf that fill whole
        // threads' shares, in a short row (warp groups) and a long one
        // (block groups); a row of only -inf, a row with a NaN and a row
        // with +inf are NaN throughout, as in PyTorch (checked with
        // PyTorch 2.11 on CUDA and the CPU). A one-pass (online) CUDA
        // forward was tried, which must keep -inf - -inf out of its running
        // sum for such rows; it measured slower and was not kept.
        for n in [40usize, 3000] {
            let k = n * 2 / 3;
            let mut rows = Vec::new();
            for r in 0..4 {
                rows.extend((0..n).map(|i| match (r, i) {
                    (0, i) if i < k => f64::NEG_INFINITY,
                    (1, _) => f64::NEG_INFINITY,
                    (2, 7) => f64::NAN,
                    (3, 9) => f64::INFINITY,
                    _ => (i % 13) as f64 / 4.0,
                }));
            }
            let x = tensor(&rows, &[4, n], dt, dev);
            for log in [false, true] {
                let y = if log { x.log_softmax(1) } else { x.softmax(1) };
                let yv = read(&y.unwrap());
                let tail: Vec<f64> = (k..n).map(|i| (i % 13) as f64 / 4.0).collect();
                let lse = tail.iter().map(|v| v.exp()).sum::<f64>().ln();
                for (i, &got) in yv.iter().enumerate().take(n) {
                    let want = if i < k {
                        if log {
                            f64::NEG_INFINITY
                        } else {
                            0.0
                        }
                    } else {
                        let l = (i % 13) as f64 / 4.0 - lse;
                        cast_ref(if log { l } else { l.exp() }, dt)
                    };
                    assert!(
                        got == want || (got - want).abs() <= 4.0 * tol(dt) * (1.0 + want.abs()),
                        "masked {} {dt} n {n}: [{i}] = {got}, want {want}",
                        if log { "log_softmax" } else { "softmax" }
                    );
                }
                for r in 1..4 {
                    assert!(
                        yv[r * n..(r + 1) * n].iter().all(|v| v.is_nan()),
                        "{dt} n {n}: row {r} (all -inf, a NaN, +inf) is NaN throughout"
                    );
                }
            }
        }
    }
    let e = tensor(&[1.0], &[1], DType::I64, dev)
        .softmax(0)
        .unwrap_err();
    assert!(
        matches!(e, Error::DTypeMismatch { op: "softmax", .. }),
        "{e:?}"
    );
}
