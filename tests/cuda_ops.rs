//! Reductions, arg-reductions, softmax, matmul, the index ops and the fused
//! optimizer steps (Adam, AdamW, SGD, clip_grad_norm_) on the CPU and on
//! CUDA device 0, the same bodies on both (`on_both!`,
//! tests/common/devices.rs), over contiguous, permuted, stepped and
//! expanded layouts, against naive f64 references and, on CUDA, against
//! the CPU on the same layouts.
#![cfg(feature = "cuda")]

mod common;

use common::devices::{also_cpu, cast_ref, layout_456, on_both, sample, tensor, wrap};
use common::optim_ref::{adam_option_sets, ref_adam, ref_sgd, sgd_option_sets};
use common::optim_steps::{check_cases, grad_vals, laid_out, Case, Lay};
use common::{assert_close, read, store, tol, Params, ALL, FLOATS, NUMERIC};
use tensorscope::nn::{LayerNorm, Module};
use tensorscope::optim::{clip_grad_norm_, Adam, AdamW, Sgd};
use tensorscope::{memory, DType, Device, Error, Tensor};

on_both!(
    reductions,
    long_reductions,
    arg_reductions,
    softmax_family,
    matmul_ranks,
    linear_with_bias,
    index_ops,
    optimizer_steps,
    clip_grad_norm_on_device,
    layer_norm_forward_backward,
);

// ------------------------------------------- reductions and softmax ---

/// Few outputs of many elements each (a full reduction of a million
/// elements, three rows of 200,001 seen contiguous and transposed): on
/// CUDA these are split across many blocks per output (reduce.rs's
/// `split_count`), whose partial results are combined in slice order.
/// Against f64 references; on CUDA also against the CPU.
fn long_reductions(dev: Device) {
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
fn reduce_ref(v: &[f64], shape: &[usize], dims: &[usize], f: impl Fn(&[f64]) -> f64) -> Vec<f64> {
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

fn nan_max(g: &[f64], max: bool) -> f64 {
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
fn arg_ref(g: &[f64], max: bool) -> f64 {
    if let Some(i) = g.iter().position(|x| x.is_nan()) {
        return i as f64;
    }
    let m = nan_max(g, max);
    g.iter().position(|&x| x == m).unwrap() as f64
}

fn var_ref(g: &[f64], correction: usize) -> f64 {
    let n = g.len() as f64;
    let mean = g.iter().sum::<f64>() / n;
    let m2: f64 = g.iter().map(|x| (x - mean) * (x - mean)).sum();
    m2 / (n - correction as f64).max(0.0)
}

fn lse_ref(g: &[f64]) -> f64 {
    let m = g.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    if m == f64::NEG_INFINITY {
        return m;
    }
    m + g.iter().map(|x| (x - m).exp()).sum::<f64>().ln()
}

fn reductions(dev: Device) {
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

fn arg_reductions(dev: Device) {
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

fn softmax_family(dev: Device) {
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

// --------------------------------------------------------------- matmul ---

/// The naive batched product of row-major `a` `[.., m, k]` and `b`
/// `[.., k, n]` (batches already equal), in f64 or wrapped to `dt`.
fn matmul_ref(
    a: &[f64],
    b: &[f64],
    batch: usize,
    m: usize,
    k: usize,
    n: usize,
    dt: DType,
) -> Vec<f64> {
    let mut out = Vec::with_capacity(batch * m * n);
    for p in 0..batch {
        for i in 0..m {
            for j in 0..n {
                if dt.is_float() {
                    let s: f64 = (0..k)
                        .map(|l| a[(p * m + i) * k + l] * b[(p * k + l) * n + j])
                        .sum();
                    out.push(cast_ref(s, dt));
                } else {
                    let s: i128 = (0..k)
                        .map(|l| a[(p * m + i) * k + l] as i128 * b[(p * k + l) * n + j] as i128)
                        .sum();
                    out.push(wrap(s, dt));
                }
            }
        }
    }
    out
}

/// `x.linear(w, b)` (`x @ w^T + b`: on CUDA the bias is copied into the
/// output and one GEMM adds the product to it) against a naive reference,
/// with and without a bias, a transposed input, integer and float dtypes,
/// an empty inner dimension (the output is the bias), and its gradients.
fn linear_with_bias(dev: Device) {
    let (m, k, n) = (5usize, 3usize, 4usize);
    let xv = sample(m * k, DType::F32, 71);
    let wv = sample(n * k, DType::F32, 72);
    let bv = sample(n, DType::F32, 73);
    // The reference from the inputs as the dtype holds them, rounded once.
    let want = |bias: bool, dt: DType| -> Vec<f64> {
        let c = |v: f64| cast_ref(v, dt);
        let mut y = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                let dot: f64 = (0..k).map(|p| c(xv[i * k + p]) * c(wv[j * k + p])).sum();
                y[i * n + j] = c(dot + if bias { c(bv[j]) } else { 0.0 });
            }
        }
        y
    };
    for dt in [
        DType::F32,
        DType::F64,
        DType::BF16,
        DType::F16,
        DType::I64,
        DType::I32,
    ] {
        let x = tensor(&xv, &[m, k], dt, dev);
        // The same values, stored transposed: a non-contiguous input.
        let mut xt_v = vec![0.0; m * k];
        for i in 0..m {
            for p in 0..k {
                xt_v[p * m + i] = xv[i * k + p];
            }
        }
        let xt = tensor(&xt_v, &[k, m], dt, dev).t().unwrap();
        let w = tensor(&wv, &[n, k], dt, dev);
        let b = tensor(&bv, &[n], dt, dev);
        for (name, xin) in [("contiguous", &x), ("transposed", &xt)] {
            for bias in [true, false] {
                let y = xin.linear(&w, bias.then_some(&b)).unwrap();
                assert_eq!(y.shape(), &[m, n]);
                let r = want(bias, dt);
                assert_close(
                    &read(&y),
                    &r,
                    tol(dt).max(1e-6) * 8.0,
                    &format!("linear {dt} {name} bias={bias}"),
                );
            }
        }
    }
    // k = 0: the product is empty, the output is the bias on every row.
    let x0 = Tensor::zeros(&[m, 0], DType::F32, dev).unwrap();
    let w0 = Tensor::zeros(&[n, 0], DType::F32, dev).unwrap();
    let b = tensor(&bv, &[n], DType::F32, dev);
    let y = x0.linear(&w0, Some(&b)).unwrap();
    assert_eq!(read(&y), bv.repeat(m), "k = 0");
    // Gradients: dL/dx = g w, dL/dw = g^T x, dL/db = column sums of g, for
    // L = sum(y * g) with a fixed g.
    let x = tensor(&xv, &[m, k], DType::F64, dev)
        .requires_grad_(true)
        .unwrap();
    let w = tensor(&wv, &[n, k], DType::F64, dev)
        .requires_grad_(true)
        .unwrap();
    let b = tensor(&bv, &[n], DType::F64, dev)
        .requires_grad_(true)
        .unwrap();
    let gv = sample(m * n, DType::F32, 74);
    let g = tensor(&gv, &[m, n], DType::F64, dev);
    x.linear(&w, Some(&b))
        .unwrap()
        .mul(&g)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    let gx: Vec<f64> = (0..m * k)
        .map(|e| (0..n).map(|j| gv[e / k * n + j] * wv[j * k + e % k]).sum())
        .collect();
    let gw: Vec<f64> = (0..n * k)
        .map(|e| (0..m).map(|i| gv[i * n + e / k] * xv[i * k + e % k]).sum())
        .collect();
    let gb: Vec<f64> = (0..n)
        .map(|j| (0..m).map(|i| gv[i * n + j]).sum())
        .collect();
    assert_close(&read(&x.grad().unwrap()), &gx, 1e-12, "linear dx");
    assert_close(&read(&w.grad().unwrap()), &gw, 1e-12, "linear dw");
    assert_close(&read(&b.grad().unwrap()), &gb, 1e-12, "linear db");
}

fn matmul_ranks(dev: Device) {
    let (m, k, n) = (5, 7, 3);
    for dt in NUMERIC {
        // Products of sample values are exact in every float type; the
        // sums are rounded once in the dtype (f16/bf16 accumulate in f32).
        let tl = 2.0 * tol(dt);
        let av = sample(4 * m * k, dt, 24);
        let bv = sample(4 * k * n, dt, 25);
        let run = |what: &str, f: &dyn Fn(Device) -> Tensor, want: Vec<f64>, shape: &[usize]| {
            let got = f(dev);
            assert_eq!(got.shape(), shape, "{what} {dt}");
            assert_eq!(got.dtype(), dt);
            assert_close(&read(&got), &want, tl, &format!("{what} {dt}"));
            also_cpu(dev, f, &got, tl, &format!("{what} {dt}"));
        };
        // [k] x [k]: a dot product.
        run(
            "dot",
            &|d| {
                tensor(&av[..k], &[k], dt, d)
                    .matmul(&tensor(&bv[..k], &[k], dt, d))
                    .unwrap()
            },
            matmul_ref(&av[..k], &bv[..k], 1, 1, k, 1, dt),
            &[],
        );
        // [m, k] x [k, n], with a transposed A and a stepped B.
        let want = matmul_ref(&av, &bv, 1, m, k, n, dt);
        run(
            "2-D",
            &|d| {
                tensor(&av[..m * k], &[m, k], dt, d)
                    .matmul(&tensor(&bv[..k * n], &[k, n], dt, d))
                    .unwrap()
            },
            want.clone(),
            &[m, n],
        );
        let at: Vec<f64> = (0..m * k).map(|p| av[(p % m) * k + p / m]).collect(); // [k, m]
        let b2: Vec<f64> = bv[..k * n].iter().flat_map(|&x| [x, 9.0]).collect(); // [k, n, 2]
        run(
            "2-D transposed and stepped",
            &|d| {
                let a = tensor(&at, &[k, m], dt, d).t().unwrap();
                let b = tensor(&b2, &[k, n, 2], dt, d).select(2, 0).unwrap();
                a.matmul(&b).unwrap()
            },
            want.clone(),
            &[m, n],
        );
        // [k] x [2, k, n] and [2, m, k] x [k].
        let want_vb: Vec<f64> = (0..2)
            .flat_map(|p| matmul_ref(&av[..k], &bv[p * k * n..], 1, 1, k, n, dt))
            .collect();
        run(
            "vector x batch",
            &|d| {
                tensor(&av[..k], &[k], dt, d)
                    .matmul(&tensor(&bv[..2 * k * n], &[2, k, n], dt, d))
                    .unwrap()
            },
            want_vb,
            &[2, n],
        );
        let want_bv: Vec<f64> = (0..2)
            .flat_map(|p| matmul_ref(&av[p * m * k..], &bv[..k], 1, m, k, 1, dt))
            .collect();
        run(
            "batch x vector",
            &|d| {
                tensor(&av[..2 * m * k], &[2, m, k], dt, d)
                    .matmul(&tensor(&bv[..k], &[k], dt, d))
                    .unwrap()
            },
            want_bv,
            &[2, m],
        );
        // [2, 1, m, k] x [3, k, n] -> [2, 3, m, n]: broadcast batch dims.
        let want_bc: Vec<f64> = (0..2)
            .flat_map(|p| (0..3).map(move |q| (p, q)))
            .flat_map(|(p, q)| matmul_ref(&av[p * m * k..], &bv[q * k * n..], 1, m, k, n, dt))
            .collect();
        run(
            "broadcast batches",
            &|d| {
                let a = tensor(&av[..2 * m * k], &[2, 1, m, k], dt, d);
                let b = tensor(&bv[..3 * k * n], &[3, k, n], dt, d);
                a.matmul(&b).unwrap()
            },
            want_bc,
            &[2, 3, m, n],
        );
        // matmul_out into a transposed output.
        let out_t = Tensor::zeros(&[n, m], dt, dev).unwrap();
        let mut out = out_t.t().unwrap();
        tensor(&av[..m * k], &[m, k], dt, dev)
            .matmul_out(&tensor(&bv[..k * n], &[k, n], dt, dev), &mut out)
            .unwrap();
        assert_close(
            &read(&out),
            &want,
            tl,
            &format!("matmul_out transposed {dt}"),
        );
        assert_eq!(
            read(&out_t)[1],
            read(&out)[n],
            "the output's storage is column-major"
        );
    }
    // Batch dimensions that do not merge into one stride: a permuted [3, 2, m, k].
    let dt = DType::F32;
    let av = sample(6 * m * k, dt, 26);
    let bv = sample(k * n, dt, 27);
    let f = |d: Device| {
        let a = tensor(&av, &[2, 3, m, k], dt, d)
            .permute(&[1, 0, 2, 3])
            .unwrap();
        a.matmul(&tensor(&bv, &[k, n], dt, d)).unwrap()
    };
    let got = f(dev);
    let want: Vec<f64> = (0..3)
        .flat_map(|p| (0..2).map(move |q| (p, q)))
        .flat_map(|(p, q)| matmul_ref(&av[(q * 3 + p) * m * k..], &bv, 1, m, k, n, dt))
        .collect();
    assert_close(&read(&got), &want, tol(dt), "matmul of a permuted batch");
    also_cpu(dev, f, &got, tol(dt), "matmul of a permuted batch");
    // A larger product.
    let (m, k, n) = (64, 300, 48);
    let av = sample(m * k, dt, 28);
    let bv = sample(k * n, dt, 29);
    let f = |d: Device| {
        tensor(&av, &[m, k], dt, d)
            .matmul(&tensor(&bv, &[k, n], dt, d))
            .unwrap()
    };
    let got = f(dev);
    assert_close(
        &read(&got),
        &matmul_ref(&av, &bv, 1, m, k, n, dt),
        1e-5,
        "matmul 64x300x48",
    );
    let e = tensor(&[1.0; 6], &[2, 3], dt, dev)
        .matmul(&tensor(&[1.0; 6], &[2, 3], dt, dev))
        .unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { op: "matmul", .. }),
        "{e:?}"
    );
}

// ---------------------------------------------------------------- index ---

fn index_ops(dev: Device) {
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

// ------------------------------------------------------- optimizers ---

/// The optimizers the device test runs, with their references.
fn optimizer_cases(dt: DType) -> Vec<Case> {
    let mut v: Vec<Case> = Vec::new();
    for c in adam_option_sets() {
        v.push((
            format!("Adam {c:?}"),
            Box::new(move || Box::new(Adam::new(c).unwrap())),
            ref_adam(c, false, dt),
        ));
        v.push((
            format!("AdamW {c:?}"),
            Box::new(move || Box::new(AdamW::new(c).unwrap())),
            ref_adam(c, true, dt),
        ));
    }
    for c in sgd_option_sets() {
        v.push((
            format!("Sgd {c:?}"),
            Box::new(move || Box::new(Sgd::new(c).unwrap())),
            ref_sgd(c, dt),
        ));
    }
    v
}

/// Adam, AdamW and SGD (several option sets each) for four steps on
/// contiguous, transposed and stepped parameters with contiguous,
/// transposed and expanded gradients, in every float dtype: against the
/// naive f64 reference, and on CUDA against the CPU's fused kernels
/// (`optim_steps::check_cases`).
fn optimizer_steps(dev: Device) {
    for dt in FLOATS {
        check_cases(dev, dt, optimizer_cases(dt));
    }
}

/// clip_grad_norm_ on gradients of several layouts and one large enough
/// for many blocks: the norm against the f64 reference (and the CPU's on
/// CUDA), the clipped gradients, no allocation from the device's
/// allocator, and an expanded gradient refused.
fn clip_grad_norm_on_device(dev: Device) {
    for dt in FLOATS {
        let shapes: [(usize, usize, Lay); 4] = [
            (5, 7, Lay::Contiguous),
            (5, 7, Lay::Transposed),
            (5, 7, Lay::Stepped),
            (300, 700, Lay::Transposed),
        ];
        let make_model = |dev: Device| {
            Params(
                shapes
                    .iter()
                    .enumerate()
                    .map(|(k, &(r, c, lay))| {
                        let p = Tensor::zeros(&[r, c], dt, dev)
                            .unwrap()
                            .requires_grad_(true)
                            .unwrap();
                        let g = laid_out(&grad_vals(r * c, 2, k), r, c, dt, dev, lay);
                        p.set_grad(Some(g)).unwrap();
                        (format!("p{k}"), p)
                    })
                    .collect(),
            )
        };
        let model = make_model(dev);
        let gv: Vec<Vec<f64>> = model
            .parameters()
            .iter()
            .map(|p| read(&p.grad().unwrap()))
            .collect();
        let norm: f64 = gv.iter().flatten().map(|v| v * v).sum::<f64>().sqrt();
        let stats = || {
            let s = memory::memory_stats(dev);
            (s.allocation.all.allocated, s.allocated_bytes.all.allocated)
        };
        let before = stats();
        let n = clip_grad_norm_(&model, norm * 2.0).unwrap();
        assert_eq!(stats(), before, "{dt}: clip_grad_norm_ allocated");
        assert!((n - norm).abs() <= 1e-12 * norm, "{dt}: {n} vs {norm}");
        for (p, want) in model.parameters().iter().zip(&gv) {
            assert_eq!(&read(&p.grad().unwrap()), want, "{dt}: not clipped");
        }
        let before = stats();
        let n = clip_grad_norm_(&model, norm / 4.0).unwrap();
        assert_eq!(stats(), before, "{dt}: clip_grad_norm_ allocated");
        assert!((n - norm).abs() <= 1e-12 * norm, "{dt}: {n} vs {norm}");
        let coef = 0.25 * norm / (norm + 1e-6);
        for (k, (p, want)) in model.parameters().iter().zip(&gv).enumerate() {
            let w: Vec<f64> = want.iter().map(|v| store(dt, v * coef)).collect();
            assert_close(
                &read(&p.grad().unwrap()),
                &w,
                tol(dt),
                &format!("{dt} clipped {k}"),
            );
        }
        if dev.is_cuda() {
            let cpu = clip_grad_norm_(&make_model(Device::Cpu), norm * 2.0).unwrap();
            assert!(
                (n - cpu).abs() <= 1e-12 * cpu,
                "{dt}: CUDA {n} vs CPU {cpu}"
            );
        }
        // An expanded gradient: an Err naming the op, nothing scaled.
        let p = Tensor::zeros(&[5, 7], dt, dev)
            .unwrap()
            .requires_grad_(true)
            .unwrap();
        p.set_grad(Some(laid_out(
            &grad_vals(35, 1, 0),
            5,
            7,
            dt,
            dev,
            Lay::Expanded,
        )))
        .unwrap();
        let bad = Params(vec![("p".into(), p)]);
        let before = read(&bad.0[0].1.grad().unwrap());
        let e = clip_grad_norm_(&bad, 1e-3).unwrap_err();
        assert!(e.to_string().contains("clip_grad_norm_"), "{dt}: {e}");
        assert_eq!(
            read(&bad.0[0].1.grad().unwrap()),
            before,
            "{dt}: nothing scaled"
        );
    }
}

// -------------------------------------------------------- layer norm ---

/// LayerNorm over `[3, 4]` of a permuted (non-contiguous) `[2, 5, 3, 4]`
/// input with non-trivial weight and bias (the fused kernels on CUDA, the
/// composite ops on the CPU): the output against a naive f64 reference in
/// every float dtype, and for f32/f64 the gradients of `sum(y * r)` with
/// respect to the input, the weight and the bias; on CUDA also against the
/// CPU.
fn layer_norm_forward_backward(dev: Device) {
    const COLS: usize = 12;
    let eps = 1e-5;
    let run = |dt: DType, dev: Device| {
        let mut ln = LayerNorm::with_options(&[3, 4], eps, dt, dev).unwrap();
        let wv: Vec<f64> = (0..COLS).map(|j| 0.5 + 0.125 * j as f64).collect();
        let bv: Vec<f64> = (0..COLS).map(|j| 0.25 * j as f64 - 1.0).collect();
        ln.weight = tensor(&wv, &[3, 4], dt, dev).requires_grad_(true).unwrap();
        ln.bias = tensor(&bv, &[3, 4], dt, dev).requires_grad_(true).unwrap();
        // [4, 3, 5, 2] values, permuted to [2, 5, 3, 4]
        let xv: Vec<f64> = sample(120, dt, 21);
        let x = tensor(&xv, &[4, 3, 5, 2], dt, dev)
            .permute(&[3, 2, 1, 0])
            .unwrap()
            .requires_grad_(true)
            .unwrap();
        let rv: Vec<f64> = sample(120, dt, 22);
        let r = tensor(&rv, &[2, 5, 3, 4], dt, dev);
        let y = ln.forward(&x).unwrap();
        y.mul(&r)
            .unwrap()
            .sum(&[], false)
            .unwrap()
            .backward()
            .unwrap();
        let grads = [
            read(&x.grad().unwrap()),
            read(&ln.weight.grad().unwrap()),
            read(&ln.bias.grad().unwrap()),
        ];
        (read(&x), wv, bv, read(&r), read(&y), grads)
    };
    for dt in FLOATS {
        let (xv, wv, bv, rv, got_y, got_g) = run(dt, dev);
        // The reference on the stored values.
        let (wv, bv): (Vec<f64>, Vec<f64>) = (
            wv.iter().map(|&v| cast_ref(v, dt)).collect(),
            bv.iter().map(|&v| cast_ref(v, dt)).collect(),
        );
        let (mut y, mut dx) = (vec![0.0; 120], vec![0.0; 120]);
        let (mut dw, mut db) = (vec![0.0; COLS], vec![0.0; COLS]);
        for row in 0..10 {
            let xs = &xv[row * COLS..(row + 1) * COLS];
            let mu = xs.iter().sum::<f64>() / COLS as f64;
            let var = xs.iter().map(|a| (a - mu) * (a - mu)).sum::<f64>() / COLS as f64;
            let rs = 1.0 / (var + eps).sqrt();
            let xh: Vec<f64> = xs.iter().map(|a| (a - mu) * rs).collect();
            let dy = &rv[row * COLS..(row + 1) * COLS];
            let gw: Vec<f64> = (0..COLS).map(|j| dy[j] * wv[j]).collect();
            let m1 = gw.iter().sum::<f64>() / COLS as f64;
            let m2 = (0..COLS).map(|j| gw[j] * xh[j]).sum::<f64>() / COLS as f64;
            for j in 0..COLS {
                y[row * COLS + j] = xh[j] * wv[j] + bv[j];
                dx[row * COLS + j] = rs * (gw[j] - m1 - xh[j] * m2);
                dw[j] += dy[j] * xh[j];
                db[j] += dy[j];
            }
        }
        let tl = match dt {
            DType::F64 => 1e-10,
            DType::F32 => 1e-4,
            DType::F16 => 2e-2,
            _ => 1e-1,
        };
        assert_close(&got_y, &y, tl, &format!("{dt} layer_norm y"));
        if matches!(dt, DType::F32 | DType::F64) {
            for (what, got, want) in [
                ("dx", &got_g[0], &dx),
                ("dweight", &got_g[1], &dw),
                ("dbias", &got_g[2], &db),
            ] {
                assert_close(got, want, tl, &format!("{dt} layer_norm {what}"));
            }
        }
        if dev.is_cuda() {
            let (_, _, _, _, cpu_y, cpu_g) = run(dt, Device::Cpu);
            assert_close(
                &got_y,
                &cpu_y,
                tl,
                &format!("{dt} layer_norm y (CUDA vs CPU)"),
            );
            if matches!(dt, DType::F32 | DType::F64) {
                for (k, (g, c)) in got_g.iter().zip(&cpu_g).enumerate() {
                    assert_close(g, c, tl, &format!("{dt} layer_norm grad {k} (CUDA vs CPU)"));
                }
            }
        }
    }
}

// ------------------------------------------- kernel review additions ---

/// Cases found reviewing the CUDA kernels, run on both devices.
mod kernel_review {
    use super::common::devices::{also_cpu, on_both};
    use super::common::{assert_close, read, store, tol};
    use tensorscope::{DType, Device, Tensor};

    on_both!(reductions_accumulate_in_f64);

    /// `rows` (each 1024 long: reduced by a whole block, lane j folding
    /// elements j, j + 256, ...) as a [rows, 1024] tensor of `dt`, either
    /// contiguous or the transpose of a [1024, rows] storage.
    fn rows_tensor(rows: &[Vec<f64>], dt: DType, dev: Device, transposed: bool) -> Tensor {
        let (r, c) = (rows.len(), rows[0].len());
        if transposed {
            let v: Vec<f64> = (0..r * c).map(|p| rows[p % r][p / r]).collect();
            Tensor::from_slice(&v, &[c, r], Device::Cpu)
                .unwrap()
                .to_dtype(dt)
                .unwrap()
                .to_device(dev)
                .unwrap()
                .t()
                .unwrap()
        } else {
            let v: Vec<f64> = rows.concat();
            Tensor::from_slice(&v, &[r, c], Device::Cpu)
                .unwrap()
                .to_dtype(dt)
                .unwrap()
                .to_device(dev)
                .unwrap()
        }
    }

    /// Float sums, products and variances accumulate in f64, as on the
    /// CPU: one lane's running f32 sum 3e38 + 3e38 overflowed to inf where
    /// the f64 one (and the CPU) gives 3e38; likewise a product 1e30 * 1e30
    /// * 1e-30 * 1e-30 and the squared deviations of +-2e19.
    fn reductions_accumulate_in_f64(dev: Device) {
        let n = 1024;
        let mut sum_row = vec![0.0; n];
        (sum_row[0], sum_row[256], sum_row[512]) = (3e38, 3e38, -3e38);
        let mut prod_row = vec![1.0; n];
        (prod_row[0], prod_row[256], prod_row[512], prod_row[768]) = (1e30, 1e30, 1e-30, 1e-30);
        let std_row: Vec<f64> = (0..n)
            .map(|i| if i % 2 == 0 { 2e19 } else { -2e19 })
            .collect();
        let small: Vec<f64> = (0..n).map(|i| (i % 7) as f64 * 0.25 - 0.5).collect();
        for dt in [DType::F32, DType::BF16] {
            for transposed in [false, true] {
                let what = format!("{dt} transposed={transposed}");
                type R = fn(&Tensor) -> Tensor;
                type Ref = fn(&[f64]) -> f64;
                let cases: [(&str, Vec<f64>, R, Ref); 3] = [
                    (
                        "sum",
                        sum_row.clone(),
                        |x| x.sum(&[1], false).unwrap(),
                        |g| g.iter().sum(),
                    ),
                    (
                        "prod",
                        prod_row.clone(),
                        |x| x.prod(&[1], false).unwrap(),
                        |g| g.iter().product(),
                    ),
                    (
                        "std",
                        std_row.clone(),
                        |x| x.std(&[1], 1, false).unwrap(),
                        |g| {
                            let m = g.iter().sum::<f64>() / g.len() as f64;
                            let ss: f64 = g.iter().map(|x| (x - m) * (x - m)).sum();
                            (ss / (g.len() - 1) as f64).sqrt()
                        },
                    ),
                ];
                for (name, row, f, r) in cases {
                    let rows = vec![small.clone(), row];
                    let make = |d: Device| rows_tensor(&rows, dt, d, transposed);
                    let x = make(dev);
                    let y = f(&x);
                    // The reference folds the values as stored, in f64.
                    let xs = read(&x);
                    let want: Vec<f64> = xs.chunks(n).map(|g| store(dt, r(g))).collect();
                    assert!(
                        want.iter().all(|w| w.is_finite()),
                        "{name}: reference {want:?}"
                    );
                    assert_close(&read(&y), &want, tol(dt), &format!("{name} {what}"));
                    also_cpu(dev, |d| f(&make(d)), &y, tol(dt), &format!("{name} {what}"));
                }
            }
        }
    }
}
