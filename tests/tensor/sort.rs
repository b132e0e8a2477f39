//! Issue 17 item 5: `sort`, `argsort`, `topk`, `median` and `quantile` on the CPU and
//! on CUDA device 0 (`on_both!`): the stable order (equal elements keep
//! their order), NaN after every number ascending and before descending,
//! every dtype, every dimension of a strided rank-3 input, against a
//! direct stable sort in f64; gradients through the values; `median`'s
//! lower median and its NaN rule; the errors. Agreement with PyTorch itself
//! is in the differential suite.

use crate::common;

#[cfg(feature = "cuda")]
use common::devices::on_both;
use common::{assert_exact, read, tensor, ALL};
use tensorscope::{DType, Device, Interpolation, Tensor};

#[cfg(feature = "cuda")]
on_both!(
    sort_is_stable_in_every_dtype_and_dim,
    topk_and_its_errors,
    median_and_its_nan_rule,
    gradients_flow_to_the_sources,
    quantiles_interpolate_as_pytorch,
    nanquantile_skips_nan,
);

#[cfg(not(feature = "cuda"))]
common::on_cpu!(
    sort_is_stable_in_every_dtype_and_dim,
    topk_and_its_errors,
    median_and_its_nan_rule,
    gradients_flow_to_the_sources,
    quantiles_interpolate_as_pytorch,
    nanquantile_skips_nan,
);

/// The stable permutation of `v` (NaN as the largest value).
fn ref_order(v: &[f64], desc: bool) -> Vec<usize> {
    let key = |x: f64| if x.is_nan() { f64::INFINITY } else { x };
    let mut o: Vec<usize> = (0..v.len()).collect();
    o.sort_by(|&a, &b| {
        let (x, y) = (key(v[a]), key(v[b]));
        // NaN after +inf: compare NaN-ness first when both keys are inf.
        let c = x
            .partial_cmp(&y)
            .unwrap()
            .then(v[a].is_nan().cmp(&v[b].is_nan()));
        if desc {
            c.reverse()
        } else {
            c
        }
    });
    o
}

/// Rows with ties, NaN, infinities and signed zeros (floats), small
/// integers with ties (integers, bool), sorted along each dimension of a
/// `[3, 4, 5]` input seen transposed, both directions.
fn sort_is_stable_in_every_dtype_and_dim(dev: Device) {
    let pool = [
        2.0,
        -0.0,
        f64::NAN,
        0.0,
        2.0,
        f64::INFINITY,
        -3.5,
        2.0,
        f64::NEG_INFINITY,
        -1.0,
    ];
    let ints = [2.0, -1.0, 0.0, 3.0, 2.0, 1.0, -3.0, 2.0, 0.0, -1.0];
    for dt in ALL {
        let vals: Vec<f64> = (0..60)
            .map(|i| {
                let v = if dt.is_float() {
                    pool[(i * 7) % 10]
                } else {
                    ints[(i * 7) % 10]
                };
                common::store(dt, v)
            })
            .collect();
        // Stored as [5, 4, 3], seen as [3, 4, 5] (a permuted, strided view).
        let x = tensor(&vals, &[5, 4, 3], dt, dev)
            .permute(&[2, 1, 0])
            .unwrap();
        let logical = read(&x);
        let shape = [3usize, 4, 5];
        for d in 0..3 {
            for desc in [false, true] {
                let (v, i) = x.sort(d as isize, desc).unwrap();
                assert_eq!(i.dtype(), DType::I64);
                assert_eq!(v.dtype(), dt);
                let (gv, gi) = (read(&v), read(&i));
                let strides = [20, 5, 1];
                let n = shape[d];
                // Every line along d.
                for base in 0..60 {
                    if (base / strides[d]) % n != 0 {
                        continue;
                    }
                    let line: Vec<f64> = (0..n).map(|k| logical[base + k * strides[d]]).collect();
                    let want = ref_order(&line, desc);
                    let got: Vec<usize> =
                        (0..n).map(|k| gi[base + k * strides[d]] as usize).collect();
                    assert_eq!(
                        got, want,
                        "{dt} dim {d} desc {desc} line at {base}: {line:?}"
                    );
                    let got_v: Vec<f64> = (0..n).map(|k| gv[base + k * strides[d]]).collect();
                    let want_v: Vec<f64> = want.iter().map(|&k| line[k]).collect();
                    assert_exact(&got_v, &want_v, &format!("{dt} values"));
                }
                assert_eq!(
                    read(&x.argsort(d as isize, desc).unwrap()),
                    gi,
                    "{dt} argsort"
                );
            }
        }
    }
    // 0-d and empty inputs.
    let s = tensor(&[7.0], &[], DType::F32, dev);
    let (v, i) = s.sort(0, false).unwrap();
    assert_eq!((read(&v), read(&i)), (vec![7.0], vec![0.0]));
    let e = Tensor::zeros(&[0, 3], DType::F32, dev).unwrap();
    assert_eq!(e.sort(0, false).unwrap().1.shape(), &[0, 3]);
    let err = s.sort(1, false).unwrap_err().to_string();
    assert!(err.contains("sort"), "{err}");
}

/// The k largest or smallest in order, NaN as the largest, k = 0 and
/// k = n; k > n is an `Err` naming topk.
fn topk_and_its_errors(dev: Device) {
    let x = tensor(
        &[1.0, f64::NAN, 5.0, 2.0, 4.0, -1.0],
        &[2, 3],
        DType::F32,
        dev,
    );
    let (v, i) = x.topk(2, 1, true).unwrap();
    let v = read(&v);
    assert!(
        v[0].is_nan() && v[1] == 5.0 && v[2] == 4.0 && v[3] == 2.0,
        "{v:?}"
    );
    assert_eq!(read(&i), [1.0, 2.0, 1.0, 0.0]);
    let (v, i) = x.topk(1, 0, false).unwrap();
    let v = read(&v);
    assert!(v[0] == 1.0 && v[1] == 4.0 && v[2] == -1.0, "{v:?}");
    assert_eq!(read(&i), [0.0, 1.0, 1.0]);
    assert_eq!(x.topk(0, 1, true).unwrap().0.shape(), &[2, 0]);
    assert_eq!(x.topk(3, 1, true).unwrap().0.shape(), &[2, 3]);
    let e = x.topk(4, 1, true).unwrap_err().to_string();
    assert!(e.contains("topk") && e.contains("larger"), "{e}");
}

/// The lower median (position (n - 1) / 2), its index, keepdim, integers;
/// a slice with NaN gives its first NaN; the median of all; an empty
/// dimension is an `Err`.
fn median_and_its_nan_rule(dev: Device) {
    let x = tensor(
        &[4.0, 1.0, 3.0, 2.0, 9.0, f64::NAN, 0.0, f64::NAN],
        &[2, 4],
        DType::F64,
        dev,
    );
    let (m, i) = x.median(1, false).unwrap();
    let m = read(&m);
    assert!(m[0] == 2.0 && m[1].is_nan(), "{m:?}");
    assert_eq!(read(&i), [3.0, 1.0]);
    let (m, i) = x.median(0, true).unwrap();
    assert_eq!(m.shape(), &[1, 4]);
    let (m, i) = (read(&m), read(&i));
    assert!(
        m[0] == 4.0 && m[1].is_nan() && m[2] == 0.0 && m[3].is_nan(),
        "{m:?}"
    );
    assert_eq!(i, [0.0, 1.0, 1.0, 1.0]);
    let ints = tensor(&[5.0, 3.0, 8.0, 1.0], &[4], DType::I32, dev);
    let (m, i) = ints.median(0, false).unwrap();
    assert_eq!((read(&m), read(&i)), (vec![3.0], vec![1.0]));
    assert_eq!(read(&ints.median_all().unwrap()), [3.0]);
    assert!(read(&x.median_all().unwrap())[0].is_nan());
    let e = Tensor::zeros(&[2, 0], DType::F32, dev)
        .unwrap()
        .median(1, false)
        .unwrap_err();
    assert!(e.to_string().contains("median"), "{e}");
}

/// The values of sort, topk and median are gathered: their gradient lands
/// on the elements they came from.
fn gradients_flow_to_the_sources(dev: Device) {
    let x = tensor(&[3.0, 1.0, 2.0, 0.5, 4.0, -1.0], &[2, 3], DType::F64, dev)
        .requires_grad_(true)
        .unwrap();
    let w = tensor(&[1.0, 10.0, 100.0], &[3], DType::F64, dev);
    x.sort(1, false)
        .unwrap()
        .0
        .mul(&w)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    assert_exact(
        &read(&x.grad().unwrap()),
        &[100.0, 1.0, 10.0, 10.0, 100.0, 1.0],
        "sort",
    );
    x.zero_grad();
    x.topk(1, 1, true)
        .unwrap()
        .0
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    assert_exact(
        &read(&x.grad().unwrap()),
        &[1.0, 0.0, 0.0, 0.0, 1.0, 0.0],
        "topk",
    );
    x.zero_grad();
    x.median(1, false)
        .unwrap()
        .0
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    assert_exact(
        &read(&x.grad().unwrap()),
        &[0.0, 0.0, 1.0, 1.0, 0.0, 0.0],
        "median",
    );
}

/// Every interpolation against `q * (n - 1)` computed here (PyTorch's
/// printed `quantile([1, 2, 3, 4], 0.4) = 2.2`, nearest rounds half to
/// even), along a dim and of all, keepdim, a NaN slice, several q stacked
/// first, gradients through the two neighbours, and the refusals.
fn quantiles_interpolate_as_pytorch(dev: Device) {
    let x = tensor(
        &[4.0, 1.0, 3.0, 2.0, 1.0, f64::NAN, 2.0, 3.0],
        &[2, 4],
        DType::F64,
        dev,
    );
    let q = x.quantile(0.4, Some(1), false).unwrap();
    let q = read(&q);
    assert!((q[0] - 2.2).abs() < 1e-12 && q[1].is_nan(), "{q:?}");
    let row = tensor(&[4.0, 1.0, 3.0, 2.0], &[4], DType::F64, dev);
    for (how, want) in [
        (Interpolation::Linear, [1.75, 2.5, 3.25]),
        (Interpolation::Lower, [1.0, 2.0, 3.0]),
        (Interpolation::Higher, [2.0, 3.0, 4.0]),
        (Interpolation::Midpoint, [1.5, 2.5, 3.5]),
        // Positions 0.75, 1.5, 2.25 round to 1, 2, 2.
        (Interpolation::Nearest, [2.0, 3.0, 3.0]),
    ] {
        let got = row.quantiles(&[0.25, 0.5, 0.75], None, false, how).unwrap();
        assert_eq!(got.shape(), &[3]);
        assert_exact(&read(&got), &want, &format!("{how:?}"));
    }
    // One quantile of a 1-D tensor of `dt`, with interpolation `how`.
    let one = |v: &[f64], dt: DType, q: f64, how: Interpolation| {
        read(
            &tensor(v, &[v.len()], dt, dev)
                .quantiles(&[q], None, false, how)
                .unwrap(),
        )
    };
    // Ties to even: positions 0.5 and 2.5 (n = 2 and 6) go to 0 and 2.
    assert_eq!(
        one(&[10.0, 20.0], DType::F64, 0.5, Interpolation::Nearest),
        [10.0]
    );
    let six: Vec<f64> = (0..6).map(|i| i as f64).collect();
    assert_eq!(one(&six, DType::F64, 0.5, Interpolation::Nearest), [2.0]);
    // Midpoint is a lerp: no overflow where lo + hi would.
    assert_eq!(
        one(&[3e38, 3e38], DType::F32, 0.5, Interpolation::Midpoint),
        [3e38f32 as f64]
    );
    // q rounded to f32 for f32 input, the position in f64 (as torch 2.15):
    // 0.29f32 * 100 = 28.9999992, so 'lower' is 28 (an f32 product would
    // round to 29.0); 0.2f32 * 5 = 1.0000000149, so 'higher' is 2.
    let r101: Vec<f64> = (0..101).map(|i| i as f64).collect();
    assert_eq!(one(&r101, DType::F32, 0.29, Interpolation::Lower), [28.0]);
    assert_eq!(one(&six, DType::F32, 0.2, Interpolation::Higher), [2.0]);
    assert_eq!(one(&six, DType::F64, 0.2, Interpolation::Higher), [1.0]);
    assert_eq!(
        x.quantiles(&[], Some(1), false, Interpolation::Linear)
            .unwrap()
            .shape(),
        &[0, 2]
    );
    assert!(read(
        &Tensor::zeros(&[0], DType::F32, dev)
            .unwrap()
            .median_all()
            .unwrap()
    )[0]
    .is_nan());
    assert_eq!(x.quantile(0.5, Some(0), true).unwrap().shape(), &[1, 4]);
    assert_eq!(x.quantile(0.5, None, true).unwrap().shape(), &[1, 1]);
    assert_eq!(
        x.quantiles(&[0.1, 0.9], Some(-1), false, Interpolation::Linear)
            .unwrap()
            .shape(),
        &[2, 2]
    );
    let s = tensor(&[5.0], &[], DType::F32, dev);
    assert_eq!(read(&s.quantile(0.3, Some(0), false).unwrap()), [5.0]);
    // d/dx of the linear quantile: 1 - frac and frac on the neighbours.
    let g = row.alias().requires_grad_(true).unwrap();
    g.quantile(0.25, None, false).unwrap().backward().unwrap();
    assert_exact(
        &read(&g.grad().unwrap()),
        &[0.0, 0.25, 0.0, 0.75],
        "quantile gradient",
    );
    for (r, what) in [
        (row.quantile(1.5, None, false), "q must be in [0, 1]"),
        (
            tensor(&[1.0], &[1], DType::F16, dev).quantile(0.5, None, false),
            "float",
        ),
        (
            Tensor::zeros(&[3, 0], DType::F32, dev)
                .unwrap()
                .quantile(0.5, Some(0), false),
            "empty",
        ),
        (
            tensor(&[1.0], &[1], DType::I64, dev).quantile(0.5, None, false),
            "float",
        ),
        (
            Tensor::zeros(&[0], DType::F32, dev)
                .unwrap()
                .quantile(0.5, None, false),
            "empty",
        ),
    ] {
        let e = r.unwrap_err().to_string();
        assert!(e.contains("quantile") && e.contains(what), "{e}");
    }
}

/// `nanquantile` against a direct computation over each row's numbers:
/// rows with NaN in different places, a row of only NaN (NaN out), every
/// interpolation; and its gradient goes to the two elements around the
/// position.
fn nanquantile_skips_nan(dev: Device) {
    let nan = f64::NAN;
    let rows: [[f64; 5]; 3] = [
        [4.0, nan, 1.0, 3.0, 2.0],
        [nan, nan, nan, nan, nan],
        [0.5, 7.0, nan, -2.0, nan],
    ];
    let flat: Vec<f64> = rows.iter().flatten().copied().collect();
    let x = tensor(&flat, &[3, 5], DType::F64, dev)
        .requires_grad_(true)
        .unwrap();
    let qs = [0.0, 0.3, 0.5, 1.0];
    for how in [
        Interpolation::Linear,
        Interpolation::Lower,
        Interpolation::Higher,
        Interpolation::Midpoint,
        Interpolation::Nearest,
    ] {
        let got = read(&x.nanquantiles(&qs, Some(1), false, how).unwrap());
        for (qi, &q) in qs.iter().enumerate() {
            for (r, row) in rows.iter().enumerate() {
                let mut v: Vec<f64> = row.iter().copied().filter(|x| !x.is_nan()).collect();
                v.sort_by(|a, b| a.partial_cmp(b).unwrap());
                let want = if v.is_empty() {
                    nan
                } else {
                    let pos = q * (v.len() - 1) as f64;
                    let (lo, hi) = (v[pos.floor() as usize], v[pos.ceil() as usize]);
                    match how {
                        Interpolation::Lower => lo,
                        Interpolation::Higher => hi,
                        Interpolation::Nearest => v[pos.round_ties_even() as usize],
                        Interpolation::Midpoint => lo + (hi - lo) * 0.5,
                        Interpolation::Linear => lo + (hi - lo) * (pos - pos.floor()),
                    }
                };
                let g = got[qi * 3 + r];
                assert!(
                    (g.is_nan() && want.is_nan()) || (g - want).abs() < 1e-12,
                    "{how:?} q {q} row {r}: {g} vs {want}"
                );
            }
        }
    }
    // Row 0's numbers sorted: 1 2 3 4; q = 0.5 is 2.5, half from 2 and 3.
    let m = x.nanquantile(0.5, Some(1), false).unwrap();
    m.narrow(0, 0, 1)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    let g = read(&x.grad().unwrap());
    assert_eq!(&g[..5], &[0.0, 0.0, 0.0, 0.5, 0.5]);
    let all = x.detach().nanquantile(0.5, None, true).unwrap();
    assert_eq!(all.shape(), &[1, 1]);
    // The numbers of the whole tensor: -2 0.5 1 2 3 4 7, the median 2.
    assert_eq!(read(&all), vec![2.0]);
    let e = x.nanquantile(1.5, None, false).unwrap_err().to_string();
    assert!(e.contains("nanquantile") && e.contains("[0, 1]"), "{e}");
}
