//! Issue 17 item 1, pooling: `max_pool2d` (values, indices, gradient),
//! `avg_pool2d` (with and without the padding counted) and
//! `adaptive_avg_pool2d` against direct f64 loops, the pooling modules,
//! the windows' workspace freed before the op returns, and the errors.

use crate::common;

use common::{assert_close, read, tensor, uniform};
use tensorscope::nn::{AdaptiveAvgPool2d, AvgPool2d, MaxPool2d, Module};
use tensorscope::{memory, DType, Device, PoolOptions, Tensor};

/// Output size and, per output position, the taps `(row, col)` inside
/// the input (padding excluded) and the window's size within the padded
/// input (the whole window, except a `ceil` window reaching past the
/// padding: PyTorch's average divisor with `count_include_pad`).
#[allow(clippy::type_complexity)]
fn taps(
    hw: [usize; 2],
    k: [usize; 2],
    s: [usize; 2],
    p: [usize; 2],
    d: [usize; 2],
    ceil: bool,
) -> ([usize; 2], Vec<(Vec<(usize, usize)>, usize)>) {
    let out = [0, 1].map(|i| {
        let room = hw[i] + 2 * p[i] - d[i] * (k[i] - 1) - 1;
        if !ceil {
            return room / s[i] + 1;
        }
        // PyTorch's pooling_output_shape with ceil_mode.
        let o = room.div_ceil(s[i]) + 1;
        if (o - 1) * s[i] >= hw[i] + p[i] {
            o - 1
        } else {
            o
        }
    });
    let within = |o: usize, i: usize| {
        let a = (o * s[i]) as isize - p[i] as isize;
        ((a + k[i] as isize).min((hw[i] + p[i]) as isize) - a) as usize
    };
    let mut v = Vec::new();
    for oh in 0..out[0] {
        for ow in 0..out[1] {
            let mut t = Vec::new();
            for i in 0..k[0] {
                for j in 0..k[1] {
                    let r = (oh * s[0] + i * d[0]) as isize - p[0] as isize;
                    let c = (ow * s[1] + j * d[1]) as isize - p[1] as isize;
                    if r >= 0 && c >= 0 && (r as usize) < hw[0] && (c as usize) < hw[1] {
                        t.push((r as usize, c as usize));
                    }
                }
            }
            v.push((t, within(oh, 0) * within(ow, 1)));
        }
    }
    (out, v)
}

/// (input, kernel, stride, padding, dilation).
type PoolCase = (
    [usize; 4],
    [usize; 2],
    Option<[usize; 2]>,
    [usize; 2],
    [usize; 2],
);

const CASES: [PoolCase; 6] = [
    ([2, 3, 6, 6], [2, 2], None, [0, 0], [1, 1]),
    ([1, 2, 7, 5], [3, 3], Some([2, 1]), [1, 1], [1, 1]),
    ([2, 1, 9, 8], [3, 2], Some([1, 2]), [1, 0], [2, 3]),
    ([1, 4, 5, 5], [5, 5], Some([1, 1]), [2, 2], [1, 1]),
    // 480 output rows of 630 taps: the CPU kernel's rows split over ~18
    // parallel chunks.
    ([3, 4, 40, 70], [3, 3], Some([1, 1]), [1, 1], [1, 1]),
    // The CPU's 2x2 stride-2 loop: an odd size floored, 180 output rows
    // in 3 parallel chunks.
    ([2, 3, 61, 97], [2, 2], None, [0, 0], [1, 1]),
];

/// Run with `ceil_mode`: a last partial window in the rows (7 = 3 x 2 +
/// 1), one reaching past the padding (8 rows, stride 2, padding 1), and
/// one that would start in the right padding and is dropped (5 + 1 rows).
const CEIL_CASES: [PoolCase; 4] = [
    ([1, 2, 7, 6], [2, 2], None, [0, 0], [1, 1]),
    ([2, 1, 8, 7], [3, 3], Some([2, 2]), [1, 1], [1, 1]),
    ([1, 1, 5, 5], [2, 2], None, [1, 1], [1, 1]),
    ([1, 2, 9, 7], [3, 2], Some([2, 3]), [1, 0], [2, 1]),
];

/// Every case with its `ceil_mode`.
fn all_cases() -> Vec<(PoolCase, bool)> {
    CASES
        .iter()
        .map(|&c| (c, false))
        .chain(CEIL_CASES.iter().map(|&c| (c, true)))
        .collect()
}

fn max_pool2d_matches_the_loop(dev: Device) {
    for (k, ((shape, kernel, stride, pad, dil), ceil)) in all_cases().into_iter().enumerate() {
        let n: usize = shape.iter().product();
        let xv = uniform(n, 80 + k as u64, -1.0, 1.0); // distinct values: one argmax
        let (out, windows) = taps(
            [shape[2], shape[3]],
            kernel,
            stride.unwrap_or(kernel),
            pad,
            dil,
            ceil,
        );
        let plane = shape[2] * shape[3];
        let (mut want, mut want_idx) = (Vec::new(), Vec::new());
        for nc in 0..shape[0] * shape[1] {
            for (t, _) in &windows {
                let (v, i) = t
                    .iter()
                    .map(|&(r, c)| (xv[nc * plane + r * shape[3] + c], (r * shape[3] + c) as f64))
                    .fold(
                        (f64::NEG_INFINITY, -1.0),
                        |a, b| if b.0 > a.0 { b } else { a },
                    );
                want.push(v);
                want_idx.push(i);
            }
        }
        let opts = PoolOptions {
            stride,
            padding: pad,
            dilation: dil,
            ceil_mode: ceil,
            ..PoolOptions::default()
        };
        for dt in [DType::F64, DType::F32, DType::F16, DType::BF16] {
            let x = tensor(&xv, &shape, dt, dev).requires_grad_(true).unwrap();
            let (y, idx) = x.max_pool2d_with_indices(kernel, &opts).unwrap();
            assert_eq!(y.shape(), &[shape[0], shape[1], out[0], out[1]]);
            let want: Vec<f64> = if dt != DType::F64 {
                let xr = read(&x);
                (0..want.len())
                    .map(|i| xr[(i / windows.len()) * plane + want_idx[i] as usize])
                    .collect()
            } else {
                want.clone()
            };
            assert_close(&read(&y), &want, 0.0, &format!("{dt} case {k}"));
            // Without a graph (no indices: the taps' maxima).
            let y0 = x.detach().max_pool2d(kernel, &opts).unwrap();
            assert_close(&read(&y0), &want, 0.0, &format!("{dt} no grad, case {k}"));
            // (Half types may round two window elements to one value.)
            if !matches!(dt, DType::F16 | DType::BF16) {
                assert_eq!(read(&idx), want_idx, "indices, case {k}");
            }
            // The gradient lands on each window's maximum (summed where
            // windows overlap).
            let r = uniform(y.numel(), 90 + k as u64, -1.0, 1.0);
            y.mul(&tensor(&r, y.shape(), dt, dev))
                .unwrap()
                .sum_all()
                .unwrap()
                .backward()
                .unwrap();
            if dt == DType::F64 {
                let mut gx = vec![0.0; n];
                for (i, &ix) in want_idx.iter().enumerate() {
                    gx[(i / windows.len()) * plane + ix as usize] += r[i];
                }
                assert_close(
                    &read(&x.grad().unwrap()),
                    &gx,
                    1e-12,
                    &format!("grad case {k}"),
                );
            }
        }
    }
}

/// Edge cases PyTorch defines: a window whose every input is -inf gets
/// its first input position as the index (not a padding position); a 1x1
/// kernel still returns a new tensor; inf and NaN stay in the adaptive
/// windows that hold them.
fn pooling_edges_follow_pytorch(dev: Device) {
    let x = tensor(&[f64::NEG_INFINITY; 9], &[1, 1, 3, 3], DType::F32, dev);
    let o = PoolOptions {
        stride: Some([1, 1]),
        padding: [1, 1],
        ..PoolOptions::default()
    };
    let (_, idx) = x.max_pool2d_with_indices([3, 3], &o).unwrap();
    // torch.nn.functional.max_pool2d(x, 3, 1, 1, return_indices=True)[1]
    assert_eq!(read(&idx), [0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 3.0, 3.0, 4.0]);
    let y = x.max_pool2d([1, 1], &PoolOptions::default()).unwrap();
    assert!(!y.shares_storage(&x));
    let v = tensor(
        &[f64::INFINITY, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0],
        &[1, 1, 2, 4],
        DType::F32,
        dev,
    );
    let a = read(&v.adaptive_avg_pool2d([1, 2]).unwrap());
    assert!(a[0].is_infinite() && a[1] == 4.5, "{a:?}");
}

/// NaN wins its window on both paths, with its index (as in PyTorch).
fn max_pool2d_propagates_nan(dev: Device) {
    let v = tensor(&[1.0, f64::NAN, 3.0, 2.0], &[1, 1, 2, 2], DType::F32, dev);
    let d = PoolOptions::default();
    assert!(read(&v.max_pool2d([2, 2], &d).unwrap())[0].is_nan());
    let (y, i) = v.max_pool2d_with_indices([2, 2], &d).unwrap();
    assert!(read(&y)[0].is_nan());
    assert_eq!(read(&i), [1.0]);
    // Several NaNs: the last one's index, as PyTorch's pooling kernels
    // give (they replace the maximum at every NaN); `torch.nn.functional.
    // max_pool2d(torch.tensor([[[[1., nan], [nan, 2.]]]]), 2,
    // return_indices=True)` gives index 2.
    let v = tensor(
        &[1.0, f64::NAN, f64::NAN, 2.0],
        &[1, 1, 2, 2],
        DType::F32,
        dev,
    );
    let (y, i) = v.max_pool2d_with_indices([2, 2], &d).unwrap();
    assert!(read(&y)[0].is_nan());
    assert_eq!(read(&i), [2.0]);
    // A window of -inf only: -inf, at its first element.
    let v = tensor(&[f64::NEG_INFINITY; 4], &[1, 1, 2, 2], DType::F32, dev);
    let (y, i) = v.max_pool2d_with_indices([2, 2], &d).unwrap();
    assert_eq!((read(&y), read(&i)), (vec![f64::NEG_INFINITY], vec![0.0]));
}

fn avg_pool2d_matches_the_loop(dev: Device) {
    for (k, ((shape, kernel, stride, pad, _), ceil)) in all_cases().into_iter().enumerate() {
        let n: usize = shape.iter().product();
        let xv = uniform(n, 100 + k as u64, -1.0, 1.0);
        let (out, windows) = taps(
            [shape[2], shape[3]],
            kernel,
            stride.unwrap_or(kernel),
            pad,
            [1, 1],
            ceil,
        );
        let plane = shape[2] * shape[3];
        for include in [true, false] {
            let mut want = Vec::new();
            for nc in 0..shape[0] * shape[1] {
                for (t, full) in &windows {
                    let s: f64 = t
                        .iter()
                        .map(|&(r, c)| xv[nc * plane + r * shape[3] + c])
                        .sum();
                    want.push(s / if include { *full } else { t.len() } as f64);
                }
            }
            let opts = PoolOptions {
                stride,
                padding: pad,
                count_include_pad: include,
                ceil_mode: ceil,
                ..PoolOptions::default()
            };
            let x = tensor(&xv, &shape, DType::F64, dev)
                .requires_grad_(true)
                .unwrap();
            let y = x.avg_pool2d(kernel, &opts).unwrap();
            assert_eq!(y.shape(), &[shape[0], shape[1], out[0], out[1]]);
            assert_close(
                &read(&y),
                &want,
                1e-12,
                &format!("case {k} include {include}"),
            );
            let r = uniform(y.numel(), 110 + k as u64, -1.0, 1.0);
            y.mul(&tensor(&r, y.shape(), DType::F64, dev))
                .unwrap()
                .sum_all()
                .unwrap()
                .backward()
                .unwrap();
            let mut gx = vec![0.0; n];
            for nc in 0..shape[0] * shape[1] {
                for (o, (t, full)) in windows.iter().enumerate() {
                    let div = if include { *full } else { t.len() } as f64;
                    for &(rr, c) in t {
                        gx[nc * plane + rr * shape[3] + c] += r[nc * windows.len() + o] / div;
                    }
                }
            }
            assert_close(
                &read(&x.grad().unwrap()),
                &gx,
                1e-12,
                &format!("grad case {k} include {include}"),
            );
        }
    }
}

fn adaptive_avg_pool2d_matches_the_loop(dev: Device) {
    for (shape, o) in [
        ([2, 3, 7, 5], [3, 2]),
        ([1, 2, 4, 4], [1, 1]),
        ([1, 1, 5, 9], [5, 4]),
        ([2, 2, 3, 3], [6, 4]),
    ] {
        let n: usize = shape.iter().product();
        let xv = uniform(n, 120, -1.0, 1.0);
        let (h, w) = (shape[2], shape[3]);
        let mut want = Vec::new();
        for nc in 0..shape[0] * shape[1] {
            for i in 0..o[0] {
                for j in 0..o[1] {
                    let (r0, r1) = (i * h / o[0], ((i + 1) * h).div_ceil(o[0]));
                    let (c0, c1) = (j * w / o[1], ((j + 1) * w).div_ceil(o[1]));
                    let mut s = 0.0;
                    for r in r0..r1 {
                        for c in c0..c1 {
                            s += xv[nc * h * w + r * w + c];
                        }
                    }
                    want.push(s / ((r1 - r0) * (c1 - c0)) as f64);
                }
            }
        }
        let x = tensor(&xv, &shape, DType::F64, dev);
        let y = x.adaptive_avg_pool2d(o).unwrap();
        assert_eq!(y.shape(), &[shape[0], shape[1], o[0], o[1]]);
        assert_close(&read(&y), &want, 1e-12, &format!("{shape:?} -> {o:?}"));
        let m = AdaptiveAvgPool2d { output: o };
        assert_close(&read(&m.forward(&x).unwrap()), &want, 1e-12, "module");
    }
}

fn modules_and_workspace(dev: Device) {
    let x = Tensor::randn(&[2, 4, 16, 16], DType::F32, dev).unwrap();
    let mp = MaxPool2d {
        kernel: [2, 2],
        options: PoolOptions::default(),
    };
    let ap = AvgPool2d {
        kernel: [3, 3],
        options: PoolOptions {
            stride: Some([1, 1]),
            padding: [1, 1],
            ..PoolOptions::default()
        },
    };
    assert_eq!(mp.forward(&x).unwrap().shape(), &[2, 4, 8, 8]);
    assert_eq!(ap.forward(&x).unwrap().shape(), &[2, 4, 16, 16]);
    // One kernel, no workspace: the output (and the indices) is all that
    // is allocated, at its peak too.
    let out = 2 * 4 * 8 * 8 * 4;
    let (y, m) = memory::measure(dev, || {
        x.max_pool2d([2, 2], &PoolOptions::default()).unwrap()
    })
    .unwrap();
    assert_eq!(m.allocated_delta, out as i64, "{m:?}");
    assert_eq!(
        (m.peak_delta, m.allocations),
        (out, 1),
        "no window copy: {m:?}"
    );
    drop(y);
    let (y, m) = memory::measure(dev, || {
        x.max_pool2d_with_indices([2, 2], &PoolOptions::default())
            .unwrap()
    })
    .unwrap();
    assert_eq!(
        (m.allocated_delta, m.peak_delta, m.allocations),
        ((out + out * 2) as i64, out + out * 2, 2),
        "values and i64 indices only: {m:?}"
    );
    drop(y);
}

fn bad_input_is_an_error_naming_the_op(dev: Device) {
    let x = Tensor::zeros(&[1, 1, 4, 4], DType::F32, dev).unwrap();
    let d = PoolOptions::default();
    let msg = |r: tensorscope::Result<Tensor>| r.unwrap_err().to_string();
    let e = msg(x.max_pool2d(
        [2, 2],
        &PoolOptions {
            padding: [2, 0],
            ..d
        },
    ));
    assert!(e.contains("max_pool2d") && e.contains("half"), "{e}");
    let e = msg(x.max_pool2d([5, 5], &d));
    assert!(e.contains("max_pool2d") && e.contains("smaller"), "{e}");
    let e = msg(x.avg_pool2d([0, 2], &d));
    assert!(e.contains("avg_pool2d") && e.contains("at least 1"), "{e}");
    let e = msg(x.avg_pool2d(
        [2, 2],
        &PoolOptions {
            dilation: [2, 2],
            ..d
        },
    ));
    assert!(e.contains("avg_pool2d") && e.contains("dilation"), "{e}");
    let e = msg(Tensor::zeros(&[4, 4], DType::F32, dev)
        .unwrap()
        .max_pool2d([2, 2], &d));
    assert!(e.contains("max_pool2d") && e.contains("[4, 4]"), "{e}");
    let e = msg(x.adaptive_avg_pool2d([0, 1]));
    assert!(e.contains("adaptive_avg_pool2d"), "{e}");
    let i = Tensor::zeros(&[1, 1, 4, 4], DType::I64, dev).unwrap();
    assert!(msg(i.max_pool2d([2, 2], &d)).contains("float"));
    let e = msg(Tensor::zeros(&[1, 0, 4, 4], DType::F32, dev)
        .unwrap()
        .avg_pool2d([2, 2], &d));
    assert!(
        e.contains("avg_pool2d") && e.contains("only the batch"),
        "{e}"
    );
    let huge = PoolOptions {
        dilation: [usize::MAX / 2, 1],
        ..d
    };
    assert!(msg(x.max_pool2d([3, 3], &huge)).contains("smaller"));
    // A dilated window that falls between the input's elements (taps -1
    // and 3 of a 3-row input): PyTorch gives -inf and index 12, outside
    // the plane (deviation 25).
    let x3 = Tensor::zeros(&[1, 1, 3, 3], DType::F32, dev).unwrap();
    let gap = PoolOptions {
        stride: Some([1, 1]),
        padding: [1, 1],
        dilation: [4, 4],
        ..d
    };
    let e = msg(x3.max_pool2d([2, 2], &gap));
    assert!(
        e.contains("max_pool2d") && e.contains("holds no input element"),
        "{e}"
    );
    assert!(x3.max_pool2d_with_indices([2, 2], &gap).is_err());
    // An empty batch is fine.
    let e0 = Tensor::zeros(&[0, 2, 4, 4], DType::F32, dev).unwrap();
    assert_eq!(e0.max_pool2d([2, 2], &d).unwrap().shape(), &[0, 2, 2, 2]);
}

/// Every 2x2 window over {-inf, 1, 2, NaN} (ties, NaNs in each position,
/// -inf only), against PyTorch's scan over the taps (start from the first,
/// replace when greater or NaN): the value and its index (what the
/// backward pass scatters to). 2x2 windows at stride 2 have their own CPU
/// loop; a row padded by one column on each side sends its edge windows
/// down the general one, and the rest down the 2x2 loop at an odd offset.
fn max_pool2d_ties_and_nans_follow_the_scan(dev: Device) {
    let vals = [f64::NEG_INFINITY, 1.0, 2.0, f64::NAN];
    let windows: Vec<[f64; 4]> = (0..256)
        .map(|k| [0, 1, 2, 3].map(|t| vals[(k >> (2 * t)) & 3]))
        .collect();
    // Window q's taps (row-major within the window) at columns 2q, 2q + 1
    // of rows 0 and 1.
    let mut x = vec![0.0; 2 * 512];
    for (q, win) in windows.iter().enumerate() {
        x[2 * q] = win[0];
        x[2 * q + 1] = win[1];
        x[512 + 2 * q] = win[2];
        x[512 + 2 * q + 1] = win[3];
    }
    let scan = |win: &[f64; 4]| {
        let mut at = 0;
        for t in 1..4 {
            if win[t] > win[at] || win[t].is_nan() {
                at = t;
            }
        }
        at
    };
    let same = |a: f64, b: f64| a == b || (a.is_nan() && b.is_nan());
    for dt in [DType::F32, DType::F64, DType::BF16] {
        let t = tensor(&x, &[1, 1, 2, 512], dt, dev);
        let (y, i) = t
            .max_pool2d_with_indices([2, 2], &PoolOptions::default())
            .unwrap();
        let (y, i) = (read(&y), read(&i));
        for (q, win) in windows.iter().enumerate() {
            let at = scan(win);
            let want_i = (at / 2 * 512 + 2 * q + at % 2) as f64;
            assert!(same(y[q], win[at]), "{dt} window {win:?}: {}", y[q]);
            assert_eq!(i[q], want_i, "{dt} window {win:?}");
        }
        // Padded by a column on each side: output 0 and 256 see one
        // column of the row, outputs 1..256 windows (2q - 1, 2q), which
        // are the scan of those four taps too.
        let padded = PoolOptions {
            padding: [0, 1],
            ..PoolOptions::default()
        };
        let (yp, ip) = t.max_pool2d_with_indices([2, 2], &padded).unwrap();
        let (yp, ip) = (read(&yp), read(&ip));
        assert_eq!(yp.len(), 257);
        for o in 0..257 {
            let cols: Vec<usize> = [2 * o as isize - 1, 2 * o as isize]
                .into_iter()
                .filter(|&c| (0..512).contains(&c))
                .map(|c| c as usize)
                .collect();
            let taps: Vec<usize> = [0, 512]
                .into_iter()
                .flat_map(|r| cols.iter().map(move |c| r + c))
                .collect();
            let mut at = taps[0];
            for &p in &taps[1..] {
                if x[p] > x[at] || x[p].is_nan() {
                    at = p;
                }
            }
            assert!(same(yp[o], x[at]), "{dt} padded output {o}");
            assert_eq!(ip[o], at as f64, "{dt} padded output {o}");
        }
    }
}

common::on_devices!(
    max_pool2d_matches_the_loop,
    max_pool2d_propagates_nan,
    max_pool2d_ties_and_nans_follow_the_scan,
    pooling_edges_follow_pytorch,
    avg_pool2d_matches_the_loop,
    adaptive_avg_pool2d_matches_the_loop,
    modules_and_workspace,
    bad_input_is_an_error_naming_the_op,
);
