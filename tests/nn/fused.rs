//! The fused norm, softmax-backward and cross-entropy kernels (issue 14,
//! item 3): LayerNorm and RMSNorm forward and backward, softmax and
//! log_softmax backward, cross-entropy from logits with every option.
//!
//! * RMSNorm against PyTorch 2.15's numbers (`tests/fixtures/rms_norm.txt`,
//!   written by `tests/fixtures/rms_norm.py`), forward and gradients, every
//!   float dtype, the functional form and the module;
//! * LayerNorm, the softmax backward and cross-entropy against f64
//!   references computed here from the stored (rounded) inputs, with shapes
//!   that exercise the vector tails, the parallel split, non-contiguous
//!   inputs and broadcast gradients;
//! * the memory each op allocates, exactly, through the allocator's
//!   statistics (CPU).
//!
//! Every body runs on the CPU and (through `on_both!`, with a skip line
//! without a GPU) on CUDA device 0; the memory tests on the CPU only. All
//! tests of this binary hold one lock: the statistics are per process.

use crate::common;

use common::{assert_close, read, tensor, Rng};
use tensorscope::memory::{self, round_size};
use tensorscope::nn::{
    cross_entropy_with, rms_norm, rms_norm_default_eps, CrossEntropyOptions, LayerNorm, Module,
    RMSNorm, Reduction,
};
use tensorscope::{autograd, DType, Device, Tensor};

const FLOATS: [DType; 4] = [DType::F32, DType::F64, DType::F16, DType::BF16];

/// The binary's lock (the one `on_both!` takes when CUDA is built).
fn lock() -> crate::common::Guard {
    crate::common::serial()
}

/// `cpu::<name>` tests, and `gpu::<name>` ones when CUDA is built.
macro_rules! both {
    ($($name:ident),* $(,)?) => {
        #[cfg(feature = "cuda")]
        common::devices::on_both!($($name),*);
        #[cfg(not(feature = "cuda"))]
        mod cpu {
            $(#[test] fn $name() {
                let _g = super::lock();
                super::$name(tensorscope::Device::Cpu)
            })*
        }
    };
}

both!(
    rms_norm_matches_pytorch,
    layer_norm_matches_f64_reference,
    softmax_backward_matches_f64_reference,
    cross_entropy_matches_f64_reference,
);

/// Values drawn uniformly in `[lo, hi)`, rounded to `dt`: what a tensor of
/// `dt` made from them stores.
fn drawn(n: usize, seed: u64, lo: f64, hi: f64, dt: DType) -> Vec<f64> {
    let mut r = Rng::new(seed);
    (0..n)
        .map(|_| common::store(dt, r.uniform(lo, hi)))
        .collect()
}

/// Relative tolerance of results computed in f32 (f64 for f64) and rounded
/// once to `dt`, after sums of up to a few thousand terms.
fn tol(dt: DType) -> f64 {
    match dt {
        DType::F64 => 1e-12,
        DType::F32 => 2e-5,
        DType::F16 => 2e-3,
        _ => 1.6e-2,
    }
}

// ---------------------------------------------------------------- RMSNorm

struct RmsCase {
    name: String,
    dtype: DType,
    shape: Vec<usize>,
    nshape: Vec<usize>,
    eps: Option<f64>,
    vals: std::collections::HashMap<String, Vec<f64>>,
}

fn dims(s: &str) -> Vec<usize> {
    s.split(',').map(|d| d.parse().unwrap()).collect()
}

fn rms_cases() -> Vec<RmsCase> {
    let text = include_str!("../fixtures/rms_norm.txt");
    let mut cases: Vec<RmsCase> = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = line.split(' ').collect();
        if f[0] == "case" {
            cases.push(RmsCase {
                name: f[1].into(),
                dtype: match f[2] {
                    "f32" => DType::F32,
                    "f64" => DType::F64,
                    "f16" => DType::F16,
                    _ => DType::BF16,
                },
                shape: dims(f[3]),
                nshape: dims(f[4]),
                eps: (f[5] != "none").then(|| f[5].parse().unwrap()),
                vals: Default::default(),
            });
        } else {
            let n: usize = f[1].parse().unwrap();
            let v: Vec<f64> = f[2..].iter().map(|x| x.parse().unwrap()).collect();
            assert_eq!(v.len(), n, "{line:.40}");
            let c = cases.last_mut().unwrap();
            c.vals.insert(f[0].into(), v);
        }
    }
    assert_eq!(cases.len(), 11, "the fixture's cases");
    cases
}

fn rms_norm_matches_pytorch(dev: Device) {
    for c in rms_cases() {
        let dt = c.dtype;
        let ctx = format!("{} on {dev}", c.name);
        let x = tensor(&c.vals["x"], &c.shape, dt, dev)
            .requires_grad_(true)
            .unwrap();
        let w = c
            .vals
            .get("w")
            .map(|w| tensor(w, &c.nshape, dt, dev).requires_grad_(true).unwrap());
        let g = tensor(&c.vals["g"], &c.shape, dt, dev);
        // The functional form and the module agree bit for bit.
        let y = rms_norm(&x, &c.nshape, w.as_ref(), c.eps).unwrap();
        let mut m = RMSNorm::with_options(&c.nshape, c.eps, w.is_some(), dt, dev).unwrap();
        if let Some(w) = &w {
            m.weight = Some(w.alias());
        }
        let ym = autograd::no_grad(|| m.forward(&x)).unwrap();
        assert_eq!(read(&ym), read(&y), "{ctx}: the module");
        assert_eq!(y.dtype(), dt);
        assert_eq!(y.grad_fn_name(), Some("RmsNormBackward"));
        assert_close(&read(&y), &c.vals["y"], tol(dt), &format!("{ctx}: y"));
        y.backward_with(&g, false).unwrap();
        let gt = tol(dt);
        assert_close(
            &read(&x.grad().unwrap()),
            &c.vals["dx"],
            gt,
            &format!("{ctx}: dx"),
        );
        if let Some(w) = &w {
            assert_close(
                &read(&w.grad().unwrap()),
                &c.vals["dw"],
                gt,
                &format!("{ctx}: dw"),
            );
        }
    }
    // eps: None is the compute type's epsilon (PyTorch's code, not its docs).
    assert_eq!(rms_norm_default_eps(DType::F16), f32::EPSILON as f64);
    assert_eq!(rms_norm_default_eps(DType::F64), f64::EPSILON);
}

#[test]
fn rms_norm_refuses_bad_arguments() {
    let _g = lock();
    let x = Tensor::ones(&[2, 3], DType::F32, Device::Cpu).unwrap();
    let err = |r: tensorscope::Result<Tensor>, op: &str| {
        let e = r.expect_err("expected an error").to_string();
        assert!(e.contains(op), "{e} does not name {op}");
        e
    };
    let e = err(rms_norm(&x, &[4], None, None), "rms_norm");
    assert!(e.contains("[2, 3]") && e.contains("[4]"), "{e}");
    err(rms_norm(&x, &[], None, None), "rms_norm");
    err(rms_norm(&x, &[3], None, Some(-1.0)), "rms_norm");
    err(rms_norm(&x, &[3], None, Some(f64::NAN)), "rms_norm");
    let w = Tensor::ones(&[2], DType::F32, Device::Cpu).unwrap();
    err(rms_norm(&x, &[3], Some(&w), None), "rms_norm");
    let xi = Tensor::ones(&[2, 3], DType::I64, Device::Cpu).unwrap();
    err(rms_norm(&xi, &[3], None, None), "rms_norm");
    let m = RMSNorm::new(&[4]).unwrap();
    err(m.forward(&x), "RMSNorm");
    assert!(RMSNorm::with_options(&[3], None, true, DType::I32, Device::Cpu).is_err());
    assert!(RMSNorm::with_options(&[], None, true, DType::F32, Device::Cpu).is_err());
    // Without a weight the module has no parameters.
    let m = RMSNorm::with_options(&[3], Some(1e-6), false, DType::F32, Device::Cpu).unwrap();
    assert!(m.named_parameters().is_empty() && m.eps() == Some(1e-6));
    // A weight of another float dtype is converted: the result has x's dtype.
    let w64 = Tensor::full(&[3], 2.0, DType::F64, Device::Cpu).unwrap();
    let y = rms_norm(&x, &[3], Some(&w64), Some(0.0)).unwrap();
    assert_eq!(y.dtype(), DType::F32);
    assert_eq!(read(&y), vec![2.0; 6]);
    // An empty input gives an empty result.
    let e = Tensor::zeros(&[0, 3], DType::F32, Device::Cpu).unwrap();
    assert_eq!(rms_norm(&e, &[3], None, None).unwrap().shape(), &[0, 3]);
}

// -------------------------------------------------------------- LayerNorm

/// `(y, dx, dw, db)` of LayerNorm over the last `cols` values per row, in
/// f64, for the upstream gradient `g`.
#[allow(clippy::type_complexity)]
fn layer_norm_ref(
    x: &[f64],
    w: &[f64],
    b: &[f64],
    g: &[f64],
    cols: usize,
    eps: f64,
) -> (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>) {
    let (mut y, mut dx) = (vec![0.0; x.len()], vec![0.0; x.len()]);
    let (mut dw, mut db) = (vec![0.0; cols], vec![0.0; cols]);
    for r in 0..x.len() / cols {
        let xr = &x[r * cols..(r + 1) * cols];
        let gr = &g[r * cols..(r + 1) * cols];
        let mu = xr.iter().sum::<f64>() / cols as f64;
        let var = xr.iter().map(|v| (v - mu).powi(2)).sum::<f64>() / cols as f64;
        let rs = 1.0 / (var + eps).sqrt();
        let xh: Vec<f64> = xr.iter().map(|v| (v - mu) * rs).collect();
        let gw: Vec<f64> = (0..cols).map(|j| gr[j] * w[j]).collect();
        let m1 = gw.iter().sum::<f64>() / cols as f64;
        let m2 = (0..cols).map(|j| gw[j] * xh[j]).sum::<f64>() / cols as f64;
        for j in 0..cols {
            y[r * cols + j] = xh[j] * w[j] + b[j];
            dx[r * cols + j] = rs * (gw[j] - m1 - xh[j] * m2);
            dw[j] += gr[j] * xh[j];
            db[j] += gr[j];
        }
    }
    (y, dx, dw, db)
}

fn layer_norm_matches_f64_reference(dev: Device) {
    // (shape, normalised dims, transposed input): vector tails, two
    // normalised dims, one feature, a non-contiguous input, and (f32) a
    // size that takes the parallel split.
    let cases: [(&[usize], usize, bool); 6] = [
        (&[5, 37], 1, false),
        (&[2, 3, 20], 2, false),
        (&[4, 1], 1, false),
        (&[24, 40], 1, true),
        (&[3, 16], 1, false),
        (&[160, 1024], 1, false),
    ];
    for dt in FLOATS {
        for (k, &(shape, nd, transposed)) in cases.iter().enumerate() {
            if shape[0] == 160 && dt != DType::F32 {
                continue;
            }
            let ctx = format!("{dt} {shape:?} on {dev}");
            let ns = &shape[shape.len() - nd..];
            let cols: usize = ns.iter().product();
            let n: usize = shape.iter().product();
            let seed = 100 * k as u64;
            let xv = drawn(n, seed, -3.0, 5.0, dt);
            let (wv, bv) = (
                drawn(cols, seed + 1, 0.5, 1.5, dt),
                drawn(cols, seed + 2, -1.0, 1.0, dt),
            );
            let gv = drawn(n, seed + 3, -1.0, 1.0, dt);
            let x = if transposed {
                // The same logical values through a transposed view.
                let (r, c) = (shape[0], shape[1]);
                let tv: Vec<f64> = (0..n).map(|i| xv[(i % r) * c + i / r]).collect();
                let base = tensor(&tv, &[c, r], dt, dev).requires_grad_(true).unwrap();
                let x = base.t().unwrap();
                assert!(!x.is_contiguous());
                (Some(base), x)
            } else {
                let x = tensor(&xv, shape, dt, dev).requires_grad_(true).unwrap();
                (None, x)
            };
            let (base, x) = x;
            let mut ln = LayerNorm::with_options(ns, 1e-5, dt, dev).unwrap();
            ln.weight = tensor(&wv, ns, dt, dev).requires_grad_(true).unwrap();
            ln.bias = tensor(&bv, ns, dt, dev).requires_grad_(true).unwrap();
            let y = ln.forward(&x).unwrap();
            assert_eq!(y.grad_fn_name(), Some("NativeLayerNormBackward"), "{ctx}");
            let (yr, dxr, dwr, dbr) = layer_norm_ref(&xv, &wv, &bv, &gv, cols, 1e-5);
            assert_close(&read(&y), &yr, tol(dt), &format!("{ctx}: y"));
            y.backward_with(&tensor(&gv, shape, dt, dev), false)
                .unwrap();
            let dx = match &base {
                Some(b) => read(&b.grad().unwrap().t().unwrap()),
                None => read(&x.grad().unwrap()),
            };
            let gt = tol(dt);
            assert_close(&dx, &dxr, gt, &format!("{ctx}: dx"));
            assert_close(
                &read(&ln.weight.grad().unwrap()),
                &dwr,
                gt,
                &format!("{ctx}: dw"),
            );
            assert_close(
                &read(&ln.bias.grad().unwrap()),
                &dbr,
                gt,
                &format!("{ctx}: db"),
            );
            // Inference records nothing and gives the same values.
            let yi = autograd::no_grad(|| ln.forward(&x)).unwrap();
            assert!(yi.grad_fn_name().is_none());
            assert_eq!(read(&yi), read(&y), "{ctx}: no_grad");
        }
    }
}

// ------------------------------------------------------- softmax backward

fn softmax_backward_matches_f64_reference(dev: Device) {
    // (shape, dim): the last dim (vector tails, the parallel split), a
    // middle dim and dim 0 (rows that are not contiguous).
    let cases: [(&[usize], usize); 5] = [
        (&[7, 33], 1),
        (&[4, 5, 6], 1),
        (&[9, 12], 0),
        (&[3, 1], 1),
        (&[300, 512], 1),
    ];
    for dt in FLOATS {
        for log in [false, true] {
            for (k, &(shape, dim)) in cases.iter().enumerate() {
                if shape[0] == 300 && dt != DType::F32 {
                    continue;
                }
                let ctx = format!("{dt} log={log} {shape:?} dim {dim} on {dev}");
                let n: usize = shape.iter().product();
                let xv = drawn(n, 7 + k as u64, -4.0, 4.0, dt);
                let gv = drawn(n, 70 + k as u64, -1.0, 1.0, dt);
                let x = tensor(&xv, shape, dt, dev).requires_grad_(true).unwrap();
                let y = if log {
                    x.log_softmax(dim as isize)
                } else {
                    x.softmax(dim as isize)
                }
                .unwrap();
                y.backward_with(&tensor(&gv, shape, dt, dev), false)
                    .unwrap();
                // The reference from the forward's stored output, as the kernel.
                let yv = read(&y);
                let (size, inner) = (shape[dim], shape[dim + 1..].iter().product::<usize>());
                let mut want = vec![0.0; n];
                for o in 0..n / (size * inner) {
                    for i in 0..inner {
                        let at = |j: usize| o * size * inner + j * inner + i;
                        let s: f64 = (0..size)
                            .map(|j| {
                                if log {
                                    gv[at(j)]
                                } else {
                                    gv[at(j)] * yv[at(j)]
                                }
                            })
                            .sum();
                        for j in 0..size {
                            want[at(j)] = if log {
                                gv[at(j)] - yv[at(j)].exp() * s
                            } else {
                                yv[at(j)] * (gv[at(j)] - s)
                            };
                        }
                    }
                }
                assert_close(&read(&x.grad().unwrap()), &want, tol(dt), &ctx);
            }
        }
    }
    // A broadcast gradient (sum's backward expands a scalar: stride 0):
    // softmax's sum is 1, so its gradient is 0; log_softmax's sum has the
    // gradient 1 - C softmax.
    let x = tensor(
        &drawn(24, 5, -2.0, 2.0, DType::F64),
        &[4, 6],
        DType::F64,
        dev,
    )
    .requires_grad_(true)
    .unwrap();
    x.softmax(1).unwrap().sum_all().unwrap().backward().unwrap();
    assert!(read(&x.grad().unwrap()).iter().all(|v| v.abs() < 1e-15));
    x.zero_grad();
    x.log_softmax(1)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    let p = read(&x.softmax(1).unwrap());
    let want: Vec<f64> = p.iter().map(|p| 1.0 - 6.0 * p).collect();
    assert_close(
        &read(&x.grad().unwrap()),
        &want,
        1e-12,
        "log_softmax of a sum",
    );
}

// ---------------------------------------------------------- cross-entropy

/// PyTorch's cross-entropy in f64 over rows `[m, c]`: the per-row losses,
/// the mean's denominator, and `d(Σ_i k_i loss_i)/dx` for per-row
/// gradients `k`.
#[allow(clippy::too_many_arguments)]
fn ce_ref(
    x: &[f64],
    t: &[i64],
    c: usize,
    w: Option<&[f64]>,
    ignore: Option<i64>,
    eps: f64,
    k: &[f64],
) -> (Vec<f64>, f64, Vec<f64>) {
    let m = t.len();
    let wc = |j: usize| w.map_or(1.0, |w| w[j]);
    let big_w: f64 = (0..c).map(wc).sum();
    let (mut loss, mut den, mut dx) = (vec![0.0; m], 0.0, vec![0.0; m * c]);
    for i in 0..m {
        if ignore == Some(t[i]) {
            continue;
        }
        let ti = t[i] as usize;
        let xr = &x[i * c..(i + 1) * c];
        let mx = xr.iter().cloned().fold(f64::MIN, f64::max);
        let lse = mx + xr.iter().map(|v| (v - mx).exp()).sum::<f64>().ln();
        let logp: Vec<f64> = xr.iter().map(|v| v - lse).collect();
        let smooth: f64 = -(0..c).map(|j| wc(j) * logp[j]).sum::<f64>();
        loss[i] = (1.0 - eps) * wc(ti) * -logp[ti] + eps / c as f64 * smooth;
        den += wc(ti);
        for j in 0..c {
            let p = logp[j].exp();
            let d = (1.0 - eps) * wc(ti) * (p - (j == ti) as u8 as f64)
                + eps / c as f64 * (big_w * p - wc(j));
            dx[i * c + j] = k[i] * d;
        }
    }
    (loss, den, dx)
}

fn cross_entropy_matches_f64_reference(dev: Device) {
    let reductions = [Reduction::Mean, Reduction::Sum, Reduction::None];
    for dt in FLOATS {
        // (rows, classes): a vector tail, a single class... and (f32) the
        // parallel split.
        let shapes: &[(usize, usize)] = if dt == DType::F32 {
            &[(6, 5), (9, 37), (300, 1000)]
        } else {
            &[(6, 5), (9, 37)]
        };
        for &(m, c) in shapes {
            for (wi, ignore, eps) in [
                (false, None, 0.0),
                (true, None, 0.0),
                (false, Some(-100i64), 0.1),
                (true, Some(1), 0.25),
            ] {
                for red in reductions {
                    let ctx = format!(
                        "{dt} [{m}, {c}] weight {wi} ignore {ignore:?} eps {eps} {red:?} on {dev}"
                    );
                    let xv = drawn(m * c, (m * c) as u64, -3.0, 3.0, dt);
                    let mut r = Rng::new(m as u64 + 3);
                    let tv: Vec<i64> = (0..m)
                        .map(|i| match ignore {
                            Some(ig) if i % 4 == 1 => ig,
                            _ => r.int(0, c as i64 - 1),
                        })
                        .collect();
                    let wv = drawn(c, 11, 0.5, 2.0, dt);
                    let x = tensor(&xv, &[m, c], dt, dev).requires_grad_(true).unwrap();
                    let t = Tensor::from_slice(&tv, &[m], Device::Cpu)
                        .unwrap()
                        .to_device(dev)
                        .unwrap();
                    let w = tensor(&wv, &[c], dt, dev);
                    let opts = CrossEntropyOptions {
                        reduction: red,
                        ignore_index: ignore,
                        weight: wi.then_some(&w),
                        label_smoothing: eps,
                    };
                    let loss = cross_entropy_with(&x, &t, &opts).unwrap();
                    // The upstream gradient: 1 for a reduced loss, drawn per row for None.
                    let gk = drawn(m, 5, 0.5, 1.5, dt);
                    let wref = wi.then_some(&wv[..]);
                    let ones = vec![1.0; m];
                    let k = if red == Reduction::None { &gk } else { &ones };
                    let (per, den, mut dx) = ce_ref(&xv, &tv, c, wref, ignore, eps, k);
                    let want = match red {
                        Reduction::None => per.clone(),
                        Reduction::Sum => vec![per.iter().sum()],
                        Reduction::Mean => vec![per.iter().sum::<f64>() / den],
                    };
                    if red == Reduction::Mean {
                        dx.iter_mut().for_each(|v| *v /= den);
                    }
                    assert_close(&read(&loss), &want, tol(dt), &format!("{ctx}: loss"));
                    match red {
                        Reduction::None => loss
                            .backward_with(&tensor(&gk, &[m], dt, dev), false)
                            .unwrap(),
                        _ => loss.backward().unwrap(),
                    }
                    assert_close(
                        &read(&x.grad().unwrap()),
                        &dx,
                        tol(dt),
                        &format!("{ctx}: dx"),
                    );
                }
            }
        }
    }
    // [N, C, d] logits (class dim 1) and an unbatched [C] row: the fused
    // rows are a differentiable copy with the class dim last.
    let x3 = tensor(
        &drawn(30, 3, -2.0, 2.0, DType::F64),
        &[2, 5, 3],
        DType::F64,
        dev,
    )
    .requires_grad_(true)
    .unwrap();
    let t3 = Tensor::from_slice(&[0i64, 4, 2, 1, 3, 0], &[2, 3], Device::Cpu)
        .unwrap()
        .to_device(dev)
        .unwrap();
    let opts = CrossEntropyOptions {
        reduction: Reduction::None,
        ..Default::default()
    };
    let l3 = cross_entropy_with(&x3, &t3, &opts).unwrap();
    assert_eq!(l3.shape(), &[2, 3]);
    let xv = read(&x3);
    let mut rows = Vec::new();
    for n in 0..2 {
        for d in 0..3 {
            rows.extend((0..5).map(|c| xv[n * 15 + c * 3 + d]));
        }
    }
    let tv = [0i64, 4, 2, 1, 3, 0];
    let (per, _, dx) = ce_ref(&rows, &tv, 5, None, None, 0.0, &[1.0; 6]);
    assert_close(&read(&l3), &per, 1e-12, "[N, C, d] loss");
    l3.sum_all().unwrap().backward().unwrap();
    let g = read(&x3.grad().unwrap());
    for n in 0..2 {
        for d in 0..3 {
            for c in 0..5 {
                let (got, want) = (g[n * 15 + c * 3 + d], dx[(n * 3 + d) * 5 + c]);
                assert!(
                    (got - want).abs() < 1e-12,
                    "[N, C, d] grad {n} {c} {d}: {got} vs {want}"
                );
            }
        }
    }
    let x1 = tensor(&[1.0, 2.0, 0.5], &[3], DType::F32, dev);
    let t1 = Tensor::from_slice(&[2i64], &[], Device::Cpu)
        .unwrap()
        .to_device(dev)
        .unwrap();
    let l1 = cross_entropy_with(&x1, &t1, &Default::default()).unwrap();
    let (per, _, _) = ce_ref(&[1.0, 2.0, 0.5], &[2], 3, None, None, 0.0, &[1.0]);
    assert_close(&read(&l1), &per, 1e-6, "unbatched");
}

// ----------------------------------------------------------------- memory

/// `(allocations, bytes)` made so far on the CPU.
fn made() -> (u64, u64) {
    let s = memory::memory_stats(Device::Cpu);
    (s.allocation.all.allocated, s.allocated_bytes.all.allocated)
}

/// Live bytes on the CPU.
fn live() -> usize {
    memory::memory_allocated(Device::Cpu)
}

/// The allocations and bytes `f` makes.
fn counting<R>(f: impl FnOnce() -> R) -> (R, (u64, u64)) {
    let a = made();
    let r = f();
    let b = made();
    (r, (b.0 - a.0, b.1 - a.1))
}

fn bytes(n: usize, dt: DType) -> u64 {
    round_size(n * dt.size_in_bytes()) as u64
}

#[test]
fn layer_norm_allocates_the_output_and_the_saved_statistics() {
    let _g = lock();
    let (r, c) = (64, 256);
    let x = Tensor::randn(&[r, c], DType::F32, Device::Cpu).unwrap();
    let ln = LayerNorm::new(&[c]).unwrap();
    let gy = Tensor::randn(&[r, c], DType::F32, Device::Cpu).unwrap();
    // Inference: the output alone.
    let (y, n) = counting(|| autograd::no_grad(|| ln.forward(&x)).unwrap());
    assert_eq!(n, (1, bytes(r * c, DType::F32)), "no_grad forward");
    drop(y);
    // Training: the output and one f32 mean and rstd per row, saved.
    let base = live();
    let (y, n) = counting(|| ln.forward(&x).unwrap());
    let stats = bytes(r, DType::F32);
    assert_eq!(n, (3, bytes(r * c, DType::F32) + 2 * stats), "forward");
    assert_eq!(
        live(),
        base + (bytes(r * c, DType::F32) + 2 * stats) as usize
    );
    // Backward: the weight's and bias's gradients (the input needs none),
    // nothing else; the statistics go with the graph.
    let (_, n) = counting(|| y.backward_with(&gy, false).unwrap());
    assert_eq!(n, (2, 2 * bytes(c, DType::F32)), "backward");
    drop(y);
    assert_eq!(
        live(),
        base + 2 * bytes(c, DType::F32) as usize,
        "after backward"
    );
    // With the input's gradient too: one more [r, c].
    let xg = x.deep_clone().unwrap().requires_grad_(true).unwrap();
    let y = ln.forward(&xg).unwrap();
    let (_, n) = counting(|| y.backward_with(&gy, false).unwrap());
    // dx, dw and db (the latter two added in place into the gradients the
    // parameters already hold).
    assert_eq!(
        n,
        (3, bytes(r * c, DType::F32) + 2 * bytes(c, DType::F32)),
        "backward with dx"
    );
}

#[test]
fn rms_norm_allocates_the_output_and_the_saved_rstd() {
    let _g = lock();
    let (r, c) = (32, 300);
    let x = Tensor::randn(&[r, c], DType::F64, Device::Cpu).unwrap();
    let m = RMSNorm::with_options(&[c], None, true, DType::F64, Device::Cpu).unwrap();
    let gy = Tensor::randn(&[r, c], DType::F64, Device::Cpu).unwrap();
    let (y, n) = counting(|| autograd::no_grad(|| m.forward(&x)).unwrap());
    assert_eq!(n, (1, bytes(r * c, DType::F64)), "no_grad forward");
    drop(y);
    let base = live();
    let (y, n) = counting(|| m.forward(&x).unwrap());
    assert_eq!(
        n,
        (2, bytes(r * c, DType::F64) + bytes(r, DType::F64)),
        "forward"
    );
    let (_, n) = counting(|| y.backward_with(&gy, false).unwrap());
    assert_eq!(
        n,
        (1, bytes(c, DType::F64)),
        "backward: the weight's gradient"
    );
    drop(y);
    assert_eq!(
        live(),
        base + bytes(c, DType::F64) as usize,
        "after backward"
    );
}

#[test]
fn softmax_backward_allocates_the_gradient_only() {
    let _g = lock();
    let x = Tensor::randn(&[64, 100], DType::F32, Device::Cpu)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let gy = Tensor::randn(&[64, 100], DType::F32, Device::Cpu).unwrap();
    for log in [false, true] {
        x.zero_grad();
        let y = if log { x.log_softmax(1) } else { x.softmax(1) }.unwrap();
        let (_, n) = counting(|| y.backward_with(&gy, false).unwrap());
        assert_eq!(n, (1, bytes(6400, DType::F32)), "log={log}");
    }
}

#[test]
fn cross_entropy_never_materialises_log_softmax() {
    let _g = lock();
    let (m, c) = (128, 1000);
    let x = Tensor::randn(&[m, c], DType::F32, Device::Cpu)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let tv: Vec<i64> = (0..m as i64).map(|i| (i * 37) % c as i64).collect();
    let t = Tensor::from_slice(&tv, &[m], Device::Cpu).unwrap();
    let opts = |reduction| CrossEntropyOptions {
        reduction,
        ..Default::default()
    };
    // Without a graph: the scalar result only.
    let (l, n) = counting(|| {
        autograd::no_grad(|| cross_entropy_with(&x, &t, &opts(Reduction::Mean))).unwrap()
    });
    assert_eq!(n, (1, bytes(1, DType::F32)), "no_grad");
    drop(l);
    // With one: the result and one f32 logsumexp per row.
    let base = live();
    let (l, n) = counting(|| cross_entropy_with(&x, &t, &opts(Reduction::Mean)).unwrap());
    assert_eq!(
        n,
        (2, bytes(1, DType::F32) + bytes(m, DType::F32)),
        "forward"
    );
    // Backward: the logits' gradient and the seed gradient `backward()` makes.
    let (_, n) = counting(|| l.backward().unwrap());
    assert_eq!(
        n,
        (2, bytes(m * c, DType::F32) + bytes(1, DType::F32)),
        "backward"
    );
    drop(l);
    assert_eq!(live(), base + bytes(m * c, DType::F32) as usize);
    // Reduction::None: the per-row losses are the result.
    let (_, n) = counting(|| cross_entropy_with(&x, &t, &opts(Reduction::None)).unwrap());
    assert_eq!(n, (2, 2 * bytes(m, DType::F32)), "None");
}
