//! Reductions and the softmax family against a naive f64 reference, over
//! contiguous, transposed, step-sliced and expanded inputs, several dtypes,
//! keepdim on and off, negative and multiple dims; and every error path.

use crate::common;

use tensorscope::{DType, Device, Error, Tensor};

const CPU: Device = Device::Cpu;
const FLOATS: [DType; 4] = [DType::F32, DType::F64, DType::F16, DType::BF16];

/// Deterministic pseudo-random values in `[lo, hi)`.
fn data(n: usize, seed: u64, lo: f64, hi: f64) -> Vec<f64> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            lo + (hi - lo) * ((s >> 11) as f64 / (1u64 << 53) as f64)
        })
        .collect()
}

fn tensor(shape: &[usize], seed: u64, lo: f64, hi: f64, dt: DType) -> Tensor {
    let n = shape.iter().product();
    let mut v = data(n, seed, lo, hi);
    if !dt.is_float() {
        v.iter_mut().for_each(|x| *x = x.floor());
    }
    Tensor::from_slice(&v, shape, CPU)
        .unwrap()
        .to_dtype(dt)
        .unwrap()
}

/// Inputs of rank 3 and 2 with every kind of layout, built from `dt` data in `[lo, hi)`.
fn inputs(dt: DType, lo: f64, hi: f64) -> Vec<(&'static str, Tensor)> {
    let base3 = tensor(&[5, 7, 6], 1, lo, hi, dt);
    let base2 = tensor(&[9, 14], 2, lo, hi, dt);
    let small = tensor(&[3, 1, 5], 3, lo, hi, dt);
    let row = tensor(&[1, 6], 4, lo, hi, dt);
    let out = vec![
        ("contiguous", tensor(&[4, 3, 5], 5, lo, hi, dt)),
        ("permuted", base3.permute(&[2, 0, 1]).unwrap()),
        ("transposed", base2.t().unwrap()),
        (
            "step-sliced",
            base2.slice(1, 1, 14, 3).unwrap().slice(0, 0, 9, 2).unwrap(),
        ),
        ("expanded-3d", small.expand(&[3, 4, 5]).unwrap()),
        ("expanded-2d", row.expand(&[4, 6]).unwrap()),
    ];
    assert!(!out[1].1.is_contiguous() && !out[3].1.is_contiguous());
    out
}

fn dims_for(rank: usize) -> Vec<Vec<isize>> {
    let mut d: Vec<Vec<isize>> = vec![vec![], vec![0], vec![-1], vec![1]];
    if rank == 3 {
        d.extend([vec![0, 2], vec![-1, 0], vec![2, -2], vec![0, 1, 2]]);
    } else {
        d.push(vec![-2, 1]);
    }
    d
}

/// Groups of reduced elements per output element (row-major over the kept
/// dims; each group in row-major order of the reduced dims) and the output shape.
fn naive_groups(x: &Tensor, dims: &[isize], keepdim: bool) -> (Vec<usize>, Vec<Vec<f64>>) {
    let shape = x.shape().to_vec();
    let rank = shape.len();
    let vals = x.to_vec::<f64>().unwrap();
    let mut red = vec![false; rank];
    if dims.is_empty() {
        red.iter_mut().for_each(|r| *r = true);
    }
    for &d in dims {
        red[if d < 0 { d + rank as isize } else { d } as usize] = true;
    }
    let mut out_shape = vec![];
    for i in 0..rank {
        if !red[i] {
            out_shape.push(shape[i]);
        } else if keepdim {
            out_shape.push(1);
        }
    }
    let n_out: usize = (0..rank).filter(|&i| !red[i]).map(|i| shape[i]).product();
    let mut groups = vec![vec![]; n_out];
    let mut idx = vec![0usize; rank];
    for &v in &vals {
        let mut o = 0;
        for i in 0..rank {
            if !red[i] {
                o = o * shape[i] + idx[i];
            }
        }
        groups[o].push(v);
        for i in (0..rank).rev() {
            idx[i] += 1;
            if idx[i] < shape[i] {
                break;
            }
            idx[i] = 0;
        }
    }
    (out_shape, groups)
}

/// Relative tolerance of results rounded to `dt`.
fn tol(dt: DType) -> f64 {
    match dt {
        DType::F32 => 2e-6,
        DType::F64 => 1e-12,
        DType::F16 => 2e-3,
        DType::BF16 => 1.6e-2,
        _ => 0.0,
    }
}

fn close(got: f64, want: f64, rtol: f64) -> bool {
    if want.is_nan() {
        return got.is_nan();
    }
    if want.is_infinite() {
        return got == want;
    }
    (got - want).abs() <= rtol * want.abs().max(1.0)
}

fn check(what: &str, got: &Tensor, want_shape: &[usize], want: &[f64], dt: DType, rtol: f64) {
    assert_eq!(got.shape(), want_shape, "{what}: shape");
    assert_eq!(got.dtype(), dt, "{what}: dtype");
    let g = got.to_vec::<f64>().unwrap();
    for (i, (&a, &b)) in g.iter().zip(want).enumerate() {
        assert!(close(a, b, rtol), "{what}: element {i}: got {a}, want {b}");
    }
}

fn naive_var(g: &[f64], corr: usize) -> f64 {
    let n = g.len() as f64;
    let m = g.iter().sum::<f64>() / n;
    g.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (n - corr as f64).max(0.0)
}

fn naive_lse(g: &[f64]) -> f64 {
    let m = g.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    if m.is_infinite() {
        return m;
    }
    m + g.iter().map(|x| (x - m).exp()).sum::<f64>().ln()
}

fn nan_max(g: &[f64]) -> f64 {
    g.iter().cloned().fold(f64::NEG_INFINITY, |a, x| {
        if a.is_nan() || x.is_nan() {
            f64::NAN
        } else {
            a.max(x)
        }
    })
}

fn nan_min(g: &[f64]) -> f64 {
    -nan_max(&g.iter().map(|x| -x).collect::<Vec<_>>())
}

type Ref = fn(&[f64]) -> f64;

#[test]
fn float_reductions_match_reference() {
    let _shared = crate::common::shared();
    let ops: Vec<(&str, Ref)> = vec![
        ("sum", |g| g.iter().sum()),
        ("mean", |g| g.iter().sum::<f64>() / g.len() as f64),
        ("max", nan_max),
        ("min", nan_min),
        ("var1", |g| naive_var(g, 1)),
        ("var0", |g| naive_var(g, 0)),
        ("std1", |g| naive_var(g, 1).sqrt()),
        ("logsumexp", naive_lse),
    ];
    for dt in FLOATS {
        for (layout, x) in inputs(dt, -3.0, 3.0) {
            for dims in dims_for(x.rank()) {
                for keepdim in [false, true] {
                    let (shape, groups) = naive_groups(&x, &dims, keepdim);
                    for (name, f) in &ops {
                        let got = match *name {
                            "sum" => x.sum(&dims, keepdim),
                            "mean" => x.mean(&dims, keepdim),
                            "max" => x.max(&dims, keepdim),
                            "min" => x.min(&dims, keepdim),
                            "var1" => x.var(&dims, 1, keepdim),
                            "var0" => x.var(&dims, 0, keepdim),
                            "std1" => x.std(&dims, 1, keepdim),
                            _ => x.logsumexp(&dims, keepdim),
                        }
                        .unwrap();
                        let want: Vec<f64> = groups.iter().map(|g| f(g)).collect();
                        let what = format!("{name} {dt} {layout} dims {dims:?} keepdim {keepdim}");
                        check(&what, &got, &shape, &want, dt, tol(dt));
                    }
                }
            }
        }
    }
}

#[test]
fn prod_matches_reference() {
    let _shared = crate::common::shared();
    for dt in FLOATS {
        for (layout, x) in inputs(dt, 0.5, 1.5) {
            for dims in dims_for(x.rank()) {
                let (shape, groups) = naive_groups(&x, &dims, false);
                let want: Vec<f64> = groups.iter().map(|g| g.iter().product()).collect();
                let got = x.prod(&dims, false).unwrap();
                check(
                    &format!("prod {dt} {layout} {dims:?}"),
                    &got,
                    &shape,
                    &want,
                    dt,
                    tol(dt),
                );
            }
        }
    }
    // Integers wrap in i64, like PyTorch.
    let x = Tensor::from_slice(&[1i64 << 40, 1 << 40, 3], &[3], CPU).unwrap();
    let want = (1i64 << 40).wrapping_mul(1 << 40).wrapping_mul(3);
    assert_eq!(x.prod(&[], false).unwrap().item::<i64>().unwrap(), want);
}

#[test]
fn integer_and_bool_reductions_are_exact() {
    let _shared = crate::common::shared();
    for dt in [DType::I64, DType::I32, DType::U8, DType::Bool] {
        let (lo, hi) = match dt {
            DType::U8 => (0.0, 200.0),
            DType::Bool => (0.0, 2.0),
            _ => (-50.0, 50.0),
        };
        for (layout, x) in inputs(dt, lo, hi) {
            for dims in dims_for(x.rank()) {
                for keepdim in [false, true] {
                    let (shape, groups) = naive_groups(&x, &dims, keepdim);
                    let what = format!("{dt} {layout} dims {dims:?} keepdim {keepdim}");
                    let s = x.sum(&dims, keepdim).unwrap();
                    check(
                        &format!("sum {what}"),
                        &s,
                        &shape,
                        &groups.iter().map(|g| g.iter().sum()).collect::<Vec<_>>(),
                        DType::I64,
                        0.0,
                    );
                    let mx = x.max(&dims, keepdim).unwrap();
                    let want: Vec<f64> = groups.iter().map(|g| nan_max(g)).collect();
                    check(&format!("max {what}"), &mx, &shape, &want, dt, 0.0);
                    let mn = x.min(&dims, keepdim).unwrap();
                    let want: Vec<f64> = groups.iter().map(|g| nan_min(g)).collect();
                    check(&format!("min {what}"), &mn, &shape, &want, dt, 0.0);
                    if dt == DType::Bool || dt == DType::U8 {
                        let p = x.prod(&dims, keepdim).unwrap();
                        let want: Vec<f64> = groups
                            .iter()
                            .map(|g| g.iter().fold(1i64, |a, &v| a.wrapping_mul(v as i64)) as f64)
                            .collect();
                        check(&format!("prod {what}"), &p, &shape, &want, DType::I64, 0.0);
                    }
                }
            }
        }
    }
    // Bool sums count the true elements, whatever byte the storage holds.
    let b = Tensor::from_slice(&[true, false, true, true], &[2, 2], CPU).unwrap();
    assert_eq!(
        b.sum(&[1], false).unwrap().to_vec::<i64>().unwrap(),
        vec![1, 2]
    );
    assert_eq!(
        b.max(&[1], false).unwrap().to_vec::<bool>().unwrap(),
        vec![true, true]
    );
    assert_eq!(
        b.min(&[1], false).unwrap().to_vec::<bool>().unwrap(),
        vec![false, true]
    );
}

/// Index and value of the first extreme element (the first NaN wins).
fn naive_arg(g: &[f64], max: bool) -> (usize, f64) {
    let mut best = 0;
    for (i, &v) in g.iter().enumerate() {
        let b = g[best];
        if b.is_nan() {
            break;
        }
        if v.is_nan() || (max && v > b) || (!max && v < b) {
            best = i;
        }
    }
    (best, g[best])
}

/// [`naive_arg`]'s index for each row of `cols` elements.
fn rows_arg(v: &[f64], cols: usize, max: bool) -> Vec<i64> {
    v.chunks(cols).map(|r| naive_arg(r, max).0 as i64).collect()
}

/// argmax and argmin over the last dim (the CPU kernel's two vectorised
/// passes per run) against the element-wise definition ([`naive_arg`]): ties, NaN (first wins), `-0`
/// against `0`, rows of one value, lengths around the 32-element blocks,
/// every dtype, and rows long enough to be split between threads (the
/// parts' results merged in order, the extreme value in several parts).
#[test]
fn argmax_and_argmin_over_long_rows_match_the_definition() {
    let _shared = crate::common::shared();
    for (rows, cols) in [
        (5, 1),
        (4, 31),
        (4, 32),
        (4, 33),
        (3, 100),
        (300, 700),
        (2, 300_000),
    ] {
        // Values in 0..50 (exact in every dtype), many ties.
        let mut v: Vec<f64> = (0..rows * cols)
            .map(|i| ((i * 7919 + i / cols * 13) % 50) as f64)
            .collect();
        let is_float = |dt: DType| matches!(dt, DType::F32 | DType::F64 | DType::F16 | DType::BF16);
        for dt in common::NUMERIC {
            let mut w = v.clone();
            if is_float(dt) && cols > 3 {
                // Row 0: a NaN late and one early (the early one wins);
                // row 1: -0 and 0 as the only extremes of an otherwise
                // negative (max) row.
                w[cols - 2] = f64::NAN;
                w[cols / 2] = f64::NAN;
                for x in &mut w[cols..2 * cols] {
                    *x = -1.0 - *x;
                }
                w[cols + cols / 3] = -0.0;
                w[cols + cols - 1] = 0.0;
            }
            let x = Tensor::from_slice(&w, &[rows, cols], Device::Cpu)
                .unwrap()
                .to_dtype(dt)
                .unwrap();
            for max in [true, false] {
                let got = if max {
                    x.argmax(1, false)
                } else {
                    x.argmin(1, false)
                };
                let got = got.unwrap().to_vec::<i64>().unwrap();
                assert_eq!(
                    got,
                    rows_arg(&w, cols, max),
                    "{dt:?} [{rows}, {cols}] max={max}"
                );
            }
        }
        // The extreme in several places of a long row, and at the end.
        v[rows * cols - 1] = 1000.0;
        let x = Tensor::from_slice(&v, &[rows, cols], Device::Cpu)
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap();
        let got = x.argmax(1, false).unwrap().to_vec::<i64>().unwrap();
        assert_eq!(got, rows_arg(&v, cols, true), "[{rows}, {cols}] tail");
    }
}

#[test]
fn argmax_argmin_max_dim_min_dim_match_reference() {
    let _shared = crate::common::shared();
    for dt in [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I64,
        DType::I32,
        DType::U8,
        DType::Bool,
    ] {
        // Few distinct values: many ties, so "first index" is exercised.
        for (layout, x) in inputs(dt, 0.0, 4.0) {
            let x = x.floor().unwrap();
            let rank = x.rank() as isize;
            for dim in -rank..rank {
                for keepdim in [false, true] {
                    let (shape, groups) = naive_groups(&x, &[dim], keepdim);
                    let what = format!("{dt} {layout} dim {dim} keepdim {keepdim}");
                    for max in [true, false] {
                        let want: Vec<(usize, f64)> =
                            groups.iter().map(|g| naive_arg(g, max)).collect();
                        let idx: Vec<f64> = want.iter().map(|w| w.0 as f64).collect();
                        let val: Vec<f64> = want.iter().map(|w| w.1).collect();
                        let (v, i) = if max {
                            x.max_dim(dim, keepdim).unwrap()
                        } else {
                            x.min_dim(dim, keepdim).unwrap()
                        };
                        check(&format!("values {max} {what}"), &v, &shape, &val, dt, 0.0);
                        check(
                            &format!("indices {max} {what}"),
                            &i,
                            &shape,
                            &idx,
                            DType::I64,
                            0.0,
                        );
                        let a = if max {
                            x.argmax(dim, keepdim).unwrap()
                        } else {
                            x.argmin(dim, keepdim).unwrap()
                        };
                        check(
                            &format!("arg {max} {what}"),
                            &a,
                            &shape,
                            &idx,
                            DType::I64,
                            0.0,
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn nan_propagates_through_max_min_and_argmax_picks_it() {
    let _shared = crate::common::shared();
    let n = f32::NAN;
    let x = Tensor::from_slice(&[1.0f32, n, 3.0, n, 5.0, 0.0, -1.0, 2.0], &[2, 4], CPU).unwrap();
    let mx = x.max(&[1], false).unwrap().to_vec::<f32>().unwrap();
    assert!(mx[0].is_nan() && mx[1] == 5.0);
    let mn = x.min(&[], false).unwrap().item::<f32>().unwrap();
    assert!(mn.is_nan());
    assert_eq!(
        x.argmax(1, false).unwrap().to_vec::<i64>().unwrap(),
        vec![1, 0]
    );
    assert_eq!(
        x.argmin(1, false).unwrap().to_vec::<i64>().unwrap(),
        vec![1, 2]
    );
    let (v, i) = x.max_dim(0, false).unwrap();
    assert_eq!(i.to_vec::<i64>().unwrap(), vec![1, 0, 0, 0]);
    let v = v.to_vec::<f32>().unwrap();
    assert!(v[0] == 5.0 && v[1].is_nan() && v[2] == 3.0 && v[3].is_nan());
    let s = x.sum(&[1], false).unwrap().to_vec::<f32>().unwrap();
    assert!(s[0].is_nan() && s[1] == 6.0);
    assert!(x.logsumexp(&[1], false).unwrap().to_vec::<f32>().unwrap()[0].is_nan());
}

#[test]
fn sum_of_16m_f32_keeps_its_accuracy() {
    let _shared = crate::common::shared();
    // A naive f32 running sum of 2^24 copies of 0.1 stalls at 2^21 = 2097152.
    let n = 1usize << 24;
    let x = Tensor::full(&[n], 0.1, DType::F32, CPU).unwrap();
    let exact = n as f64 * 0.1f32 as f64;
    let got = x.sum_all().unwrap().item::<f32>().unwrap() as f64;
    assert!((got - exact).abs() / exact < 1e-6, "sum {got} vs {exact}");
    let mean = x.mean_all().unwrap().item::<f32>().unwrap();
    assert_eq!(mean, 0.1f32);
    // The same data as a matrix: per-row (dense runs) and per-column (lanes) sums.
    let m = x.view(&[4096, 4096]).unwrap();
    for dim in [0, 1] {
        let s = m.sum(&[dim], false).unwrap().to_vec::<f32>().unwrap();
        let want = (4096.0 * 0.1f32 as f64) as f32;
        assert!(
            s.iter().all(|&v| (v - want).abs() <= want * 1e-6),
            "dim {dim}"
        );
    }
    let v = m.var(&[], 1, false).unwrap().item::<f32>().unwrap();
    assert_eq!(v, 0.0);
}

#[test]
fn large_reductions_take_every_schedule() {
    let _shared = crate::common::shared();
    // Parallel over outputs (rows and lanes), and split ranges for few outputs.
    let x = tensor(&[300, 1000], 9, -2.0, 2.0, DType::F32);
    let xt = x.t().unwrap();
    for (name, t) in [("contiguous", &x), ("transposed", &xt)] {
        for dims in [vec![0], vec![1], vec![]] {
            let (shape, groups) = naive_groups(t, &dims, false);
            let what = format!("{name} {dims:?}");
            let want: Vec<f64> = groups.iter().map(|g| g.iter().sum()).collect();
            check(
                &format!("sum {what}"),
                &t.sum(&dims, false).unwrap(),
                &shape,
                &want,
                DType::F32,
                1e-5,
            );
            let want: Vec<f64> = groups.iter().map(|g| naive_var(g, 1)).collect();
            check(
                &format!("var {what}"),
                &t.var(&dims, 1, false).unwrap(),
                &shape,
                &want,
                DType::F32,
                1e-5,
            );
            let want: Vec<f64> = groups.iter().map(|g| naive_lse(g)).collect();
            check(
                &format!("lse {what}"),
                &t.logsumexp(&dims, false).unwrap(),
                &shape,
                &want,
                DType::F32,
                1e-5,
            );
            let want: Vec<f64> = groups.iter().map(|g| nan_max(g)).collect();
            check(
                &format!("max {what}"),
                &t.max(&dims, false).unwrap(),
                &shape,
                &want,
                DType::F32,
                0.0,
            );
        }
    }
    // argmax over 300k elements for 2 outputs: merged across parallel chunks,
    // with the maximum repeated in several chunks (the first must win).
    let n = 300_000;
    let mut v = data(2 * n, 11, 0.0, 1.0);
    for &i in &[250_001usize, 70_000, 180_000] {
        v[2 * i] = 7.0;
        v[2 * i + 1] = -7.0;
    }
    let t = Tensor::from_slice(&v, &[n, 2], CPU)
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap();
    let (_, groups) = naive_groups(&t, &[0], false);
    let col1_max = naive_arg(&groups[1], true).0 as i64;
    assert_eq!(
        t.argmax(0, false).unwrap().to_vec::<i64>().unwrap(),
        vec![70_000, col1_max]
    );
    assert_eq!(
        t.argmin(0, false).unwrap().to_vec::<i64>().unwrap()[1],
        70_000
    );
    let (vals, idx) = t.max_dim(0, true).unwrap();
    assert_eq!(vals.shape(), &[1, 2]);
    assert_eq!(idx.to_vec::<i64>().unwrap()[0], 70_000);
    // logsumexp over the split schedule: +inf in one chunk beats a huge
    // finite value in another; NaN anywhere wins; all -inf gives -inf.
    let n = 300_000;
    let mut v = data(n, 12, -1.0, 1.0);
    v[10] = 1e300;
    v[250_000] = f64::INFINITY;
    let t = Tensor::from_slice(&v, &[n], CPU).unwrap();
    assert_eq!(
        t.logsumexp(&[], false).unwrap().item::<f64>().unwrap(),
        f64::INFINITY
    );
    v[250_000] = 1e300;
    let t = Tensor::from_slice(&v, &[n], CPU).unwrap();
    let want = 1e300 + 2f64.ln();
    assert_eq!(
        t.logsumexp(&[], false).unwrap().item::<f64>().unwrap(),
        want
    );
    v[200_000] = f64::NAN;
    let t = Tensor::from_slice(&v, &[n], CPU)
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap();
    assert!(t
        .logsumexp(&[0], false)
        .unwrap()
        .item::<f32>()
        .unwrap()
        .is_nan());
    let t = Tensor::full(&[n], f64::NEG_INFINITY, DType::F32, CPU).unwrap();
    assert_eq!(
        t.logsumexp(&[0], false).unwrap().item::<f32>().unwrap(),
        f32::NEG_INFINITY
    );
    // Sum of i64 over the split schedule.
    let i = Tensor::arange(0.0, 400_000.0, 1.0, DType::I64, CPU).unwrap();
    let want = 399_999i64 * 400_000 / 2;
    assert_eq!(i.sum_all().unwrap().item::<i64>().unwrap(), want);
}

#[test]
fn softmax_and_log_softmax_match_reference() {
    let _shared = crate::common::shared();
    for dt in FLOATS {
        for (layout, x) in inputs(dt, -4.0, 4.0) {
            let rank = x.rank() as isize;
            for dim in -rank..rank {
                let d = if dim < 0 { dim + rank } else { dim } as usize;
                let p = x.softmax(dim).unwrap();
                let lp = x.log_softmax(dim).unwrap();
                assert_eq!(p.shape(), x.shape());
                assert_eq!(p.dtype(), dt);
                // Reference: move `dim` last, compute per row, compare elementwise.
                let mut perm: Vec<isize> = (0..rank).filter(|&i| i != d as isize).collect();
                perm.push(d as isize);
                let xs = x.permute(&perm).unwrap().to_vec::<f64>().unwrap();
                let ps = p.permute(&perm).unwrap().to_vec::<f64>().unwrap();
                let lps = lp.permute(&perm).unwrap().to_vec::<f64>().unwrap();
                let n = x.shape()[d];
                for (r, row) in xs.chunks(n).enumerate() {
                    let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let s: f64 = row.iter().map(|v| (v - m).exp()).sum();
                    let what = format!("{dt} {layout} dim {dim} row {r}");
                    let mut total = 0.0;
                    for (k, &v) in row.iter().enumerate() {
                        let want = (v - m).exp() / s;
                        let got = ps[r * n + k];
                        total += got;
                        assert!(
                            (got - want).abs() <= tol(dt) * 2.0,
                            "softmax {what}: {got} vs {want}"
                        );
                        let want_l = v - m - s.ln();
                        let got_l = lps[r * n + k];
                        assert!(
                            close(got_l, want_l, tol(dt) * 4.0),
                            "log_softmax {what}: {got_l} vs {want_l}"
                        );
                    }
                    assert!(
                        (total - 1.0).abs() <= tol(dt) * n as f64 * 2.0,
                        "rows sum to 1: {what}: {total}"
                    );
                }
            }
        }
    }
}

#[test]
fn softmax_is_stable_and_handles_infinities() {
    let _shared = crate::common::shared();
    let x = Tensor::from_slice(
        &[1000.0f32, 1000.0, 999.0, f32::NEG_INFINITY, 0.0, -1000.0],
        &[2, 3],
        CPU,
    )
    .unwrap();
    let p = x.softmax(1).unwrap().to_vec::<f32>().unwrap();
    assert!(p.iter().all(|v| v.is_finite()));
    let e = (-1.0f64).exp();
    let want = [1.0 / (2.0 + e), 1.0 / (2.0 + e), e / (2.0 + e)];
    for k in 0..3 {
        assert!((p[k] as f64 - want[k]).abs() < 1e-6);
    }
    assert_eq!(p[3], 0.0);
    assert!((p[4] - 1.0).abs() < 1e-6 && p[5] == 0.0);
    let lp = x.log_softmax(-1).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(lp[3], f32::NEG_INFINITY);
    assert!((lp[0] as f64 - want[0].ln()).abs() < 1e-5);
    // Large rows, contiguous along the last dim and strided along dim 0, in parallel.
    let big = tensor(&[512, 300], 21, -30.0, 30.0, DType::F32);
    for dim in [0, 1] {
        let s = big.softmax(dim).unwrap().sum(&[dim], false).unwrap();
        assert!(s
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .all(|v| (v - 1.0).abs() < 1e-5));
    }
    // A scalar: softmax 1, log_softmax 0.
    let s = Tensor::scalar(3.5f64, CPU).unwrap();
    assert_eq!(s.softmax(0).unwrap().item::<f64>().unwrap(), 1.0);
    assert_eq!(s.log_softmax(-1).unwrap().item::<f64>().unwrap(), 0.0);
}

#[test]
fn logsumexp_is_stable() {
    let _shared = crate::common::shared();
    let x = Tensor::from_slice(&[1000.0f32, 1000.0, -1000.0, -1000.0], &[2, 2], CPU).unwrap();
    let l = x.logsumexp(&[1], false).unwrap().to_vec::<f32>().unwrap();
    assert!(l.iter().all(|v| v.is_finite()));
    assert!((l[0] - (1000.0 + 2f32.ln())).abs() < 1e-3);
    assert!((l[1] - (-1000.0 + 2f32.ln())).abs() < 1e-3);
    let all = x.logsumexp(&[], true).unwrap();
    assert_eq!(all.shape(), &[1, 1]);
    assert!((all.item::<f32>().unwrap() - (1000.0 + 2f32.ln())).abs() < 1e-3);
    // f16 near its largest value.
    let h = Tensor::from_slice(&[60000.0f64, 60000.0], &[2], CPU)
        .unwrap()
        .to_dtype(DType::F16)
        .unwrap();
    assert!(h
        .logsumexp(&[0], false)
        .unwrap()
        .item::<f32>()
        .unwrap()
        .is_finite());
    // Infinities: all -inf gives -inf, any +inf gives +inf.
    let ni = f64::NEG_INFINITY;
    let y = Tensor::from_slice(&[ni, ni, f64::INFINITY, 1.0], &[2, 2], CPU).unwrap();
    assert_eq!(
        y.logsumexp(&[1], false).unwrap().to_vec::<f64>().unwrap(),
        vec![ni, f64::INFINITY]
    );
}

#[test]
fn empty_reductions() {
    let _shared = crate::common::shared();
    let e = Tensor::zeros(&[0, 3], DType::F32, CPU).unwrap();
    assert_eq!(
        e.sum(&[0], false).unwrap().to_vec::<f32>().unwrap(),
        vec![0.0; 3]
    );
    assert_eq!(
        e.prod(&[0], false).unwrap().to_vec::<f32>().unwrap(),
        vec![1.0; 3]
    );
    assert!(e
        .mean(&[0], false)
        .unwrap()
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .all(|v| v.is_nan()));
    assert_eq!(e.sum_all().unwrap().item::<f32>().unwrap(), 0.0);
    assert!(e.mean_all().unwrap().item::<f32>().unwrap().is_nan());
    assert_eq!(
        e.logsumexp(&[0], false).unwrap().to_vec::<f32>().unwrap(),
        vec![f32::NEG_INFINITY; 3]
    );
    // Reducing the non-empty dim of an empty tensor is fine: an empty result.
    assert_eq!(e.max(&[1], false).unwrap().shape(), &[0]);
    assert_eq!(e.argmax(1, true).unwrap().shape(), &[0, 1]);
    let ei = Tensor::zeros(&[0], DType::I32, CPU).unwrap();
    assert_eq!(ei.sum_all().unwrap().item::<i64>().unwrap(), 0);
    assert_eq!(ei.sum_all().unwrap().dtype(), DType::I64);
}

#[test]
fn scalars_reduce_over_dim_zero() {
    let _shared = crate::common::shared();
    let s = Tensor::scalar(2.5f32, CPU).unwrap();
    for dims in [vec![], vec![0], vec![-1]] {
        let r = s.sum(&dims, false).unwrap();
        assert_eq!(r.shape(), &[] as &[usize]);
        assert_eq!(r.item::<f32>().unwrap(), 2.5);
        assert_eq!(s.sum(&dims, true).unwrap().shape(), &[] as &[usize]);
    }
    assert_eq!(s.max_all().unwrap().item::<f32>().unwrap(), 2.5);
    assert_eq!(s.argmax(0, false).unwrap().item::<i64>().unwrap(), 0);
    let (v, i) = s.min_dim(-1, false).unwrap();
    assert_eq!(
        (v.item::<f32>().unwrap(), i.item::<i64>().unwrap()),
        (2.5, 0)
    );
    assert!(matches!(
        s.sum(&[1], false),
        Err(Error::DimOutOfRange { op: "sum", .. })
    ));
}

#[test]
fn output_dtypes_follow_pytorch() {
    let _shared = crate::common::shared();
    let i = Tensor::from_slice(&[1i32, 2, 3], &[3], CPU).unwrap();
    assert_eq!(i.sum_all().unwrap().dtype(), DType::I64);
    assert_eq!(i.prod(&[], false).unwrap().dtype(), DType::I64);
    assert_eq!(i.max_all().unwrap().dtype(), DType::I32);
    assert_eq!(i.argmax(0, false).unwrap().dtype(), DType::I64);
    let u = Tensor::from_slice(&[200u8, 100, 250], &[3], CPU).unwrap();
    assert_eq!(u.sum_all().unwrap().item::<i64>().unwrap(), 550);
    let b = Tensor::from_slice(&[true, true, false], &[3], CPU).unwrap();
    assert_eq!(b.sum_all().unwrap().dtype(), DType::I64);
    assert_eq!(b.sum_all().unwrap().item::<i64>().unwrap(), 2);
    for dt in [DType::F16, DType::BF16] {
        let h = Tensor::ones(&[4096], dt, CPU).unwrap();
        let s = h.sum_all().unwrap();
        assert_eq!(s.dtype(), dt);
        // Accumulated in higher precision: a half-precision running sum stops at 2048 (f16) or 256 (bf16).
        assert_eq!(s.item::<f32>().unwrap(), 4096.0);
        assert_eq!(h.mean_all().unwrap().item::<f32>().unwrap(), 1.0);
    }
}

fn is_op(e: &Error, op: &str) -> bool {
    e.to_string().starts_with(&format!("{op}:"))
}

#[test]
fn bad_inputs_are_errors_naming_the_op() {
    let _shared = crate::common::shared();
    let x = Tensor::ones(&[2, 3], DType::F32, CPU).unwrap();
    // Dims out of range.
    for (op, r) in [
        ("sum", x.sum(&[2], false).err()),
        ("mean", x.mean(&[-3], false).err()),
        ("max", x.max(&[0, 5], false).err()),
        ("var", x.var(&[2], 1, false).err()),
        ("logsumexp", x.logsumexp(&[7], true).err()),
        ("argmax", x.argmax(2, false).err()),
        ("min_dim", x.min_dim(-3, false).err()),
        ("softmax", x.softmax(2).err()),
        ("log_softmax", x.log_softmax(-3).err()),
    ] {
        let e = r.unwrap_or_else(|| panic!("{op}: expected an error"));
        assert!(matches!(e, Error::DimOutOfRange { .. }), "{op}: {e:?}");
        assert!(is_op(&e, op), "{op}: {e}");
    }
    // A dim given twice.
    let e = x.sum(&[1, -1], false).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { op: "sum", .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("multiple times"));
    // Float-only ops on integer and bool tensors (logsumexp computes in f32
    // instead, as PyTorch's: tests/agreement/pytorch_agreement.rs).
    let i = Tensor::ones(&[2, 3], DType::I64, CPU).unwrap();
    let b = Tensor::ones(&[2, 3], DType::Bool, CPU).unwrap();
    for t in [&i, &b] {
        for (op, r) in [
            ("mean", t.mean(&[], false).err()),
            ("var", t.var(&[0], 1, false).err()),
            ("std", t.std(&[0], 0, false).err()),
            ("softmax", t.softmax(1).err()),
            ("log_softmax", t.log_softmax(0).err()),
        ] {
            let e = r.unwrap_or_else(|| panic!("{op}: expected an error"));
            assert!(
                matches!(e, Error::DTypeMismatch { got, .. } if got == t.dtype()),
                "{op}: {e:?}"
            );
            assert!(
                is_op(&e, op) && e.to_string().contains("float"),
                "{op}: {e}"
            );
        }
    }
    // Max/min over an empty dimension have no identity.
    let e0 = Tensor::zeros(&[0, 3], DType::F32, CPU).unwrap();
    for (op, r) in [
        ("max", e0.max(&[0], false).err()),
        ("min", e0.min(&[], false).err()),
        ("max", e0.max_all().err()),
        ("min", e0.min_all().err()),
        ("argmax", e0.argmax(0, false).err()),
        ("argmin", e0.argmin(-2, true).err()),
        ("max_dim", e0.max_dim(0, false).err()),
        ("min_dim", e0.min_dim(0, false).err()),
    ] {
        let e = r.unwrap_or_else(|| panic!("{op}: expected an error"));
        assert!(matches!(e, Error::InvalidArgument { .. }), "{op}: {e:?}");
        assert!(
            is_op(&e, op) && e.to_string().contains("size 0"),
            "{op}: {e}"
        );
    }
}
