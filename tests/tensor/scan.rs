//! Issue 17 item 5: `cumsum` and `cumprod` on the CPU and on CUDA device 0
//! (`on_both!`): every dtype (integers and bool give int64) along every
//! dimension of a permuted view against a direct f64 scan; gradients
//! against the closed forms, with zeros in
//! `cumprod`'s input (one and two per row); 0-d and empty inputs; errors.
//! Agreement with PyTorch itself is in the differential suite.

use crate::common;

#[cfg(feature = "cuda")]
use common::devices::on_both;
use common::{assert_close, assert_exact, read, store, tensor, tol, ALL};
use tensorscope::{DType, Device, Tensor};

#[cfg(feature = "cuda")]
on_both!(scans_in_every_dtype_and_dim, gradients_with_zeros);

#[cfg(not(feature = "cuda"))]
common::on_cpu!(scans_in_every_dtype_and_dim, gradients_with_zeros);

fn scans_in_every_dtype_and_dim(dev: Device) {
    let pool = [1.5, -0.5, 2.0, 1.0, -1.25, 0.75, 3.0, -2.0];
    for dt in ALL {
        let vals: Vec<f64> = (0..24).map(|i| store(dt, pool[(i * 5) % 8])).collect();
        let x = tensor(&vals, &[4, 3, 2], dt, dev)
            .permute(&[2, 1, 0])
            .unwrap();
        let logical = read(&x);
        let shape = [2usize, 3, 4];
        let strides = [12, 4, 1];
        let out_dt = if dt.is_float() { dt } else { DType::I64 };
        for d in 0..3 {
            for prod in [false, true] {
                let y = if prod {
                    x.cumprod(d as isize)
                } else {
                    x.cumsum(d as isize)
                }
                .unwrap();
                assert_eq!(y.dtype(), out_dt, "{dt}");
                let got = read(&y);
                let mut want = vec![0.0; 24];
                for base in 0..24 {
                    if (base / strides[d]) % shape[d] != 0 {
                        continue;
                    }
                    let mut acc = if prod { 1.0 } else { 0.0 };
                    for k in 0..shape[d] {
                        let v = logical[base + k * strides[d]];
                        acc = if prod { acc * v } else { acc + v };
                        want[base + k * strides[d]] = store(out_dt, acc);
                    }
                }
                let what = format!("{dt} dim {d} {}", if prod { "cumprod" } else { "cumsum" });
                // f16/bf16 outputs round from the f64 sum through f32.
                assert_close(&got, &want, tol(out_dt), &what);
            }
        }
    }
    let s = tensor(&[3.0], &[], DType::F32, dev);
    assert_eq!(
        (
            read(&s.cumsum(0).unwrap()),
            s.cumprod(-1).unwrap().shape().len()
        ),
        (vec![3.0], 0)
    );
    let e = Tensor::zeros(&[0, 3], DType::F32, dev).unwrap();
    assert_eq!(e.cumsum(0).unwrap().shape(), &[0, 3]);
    let err = s.cumsum(1).unwrap_err().to_string();
    assert!(err.contains("cumsum"), "{err}");
    // Integers wrap in int64.
    let big = tensor(&[i64::MAX as f64, 1.0], &[2], DType::I64, dev);
    assert_eq!(
        big.cumsum(0).unwrap().to_vec::<i64>().unwrap(),
        [i64::MAX, i64::MIN]
    );
    let p = tensor(&[4294967296.0, 4294967296.0], &[2], DType::I64, dev);
    assert_eq!(p.cumprod(0).unwrap().to_vec::<i64>().unwrap(), [1 << 32, 0]);
}

/// The gradient of `sum(w * scan(x))` against the closed forms:
/// `cumsum`: `sum_{k >= i} w_k`; `cumprod`: `sum_{k >= i} w_k prod_{j <= k, j != i} x_j`,
/// with no, one and two zeros in a row.
fn gradients_with_zeros(dev: Device) {
    let rows: [[f64; 5]; 3] = [
        [1.5, -2.0, 0.5, 3.0, -1.0],
        [2.0, 0.0, 3.0, -1.5, 2.5],
        [0.0, 1.5, 0.0, 2.0, -3.0],
    ];
    let w = [1.0, -2.0, 0.5, 3.0, 1.5];
    let flat: Vec<f64> = rows.iter().flatten().copied().collect();
    let wt = tensor(&w, &[5], DType::F64, dev);
    for prod in [false, true] {
        let x = tensor(&flat, &[3, 5], DType::F64, dev)
            .requires_grad_(true)
            .unwrap();
        let y = if prod { x.cumprod(1) } else { x.cumsum(1) }.unwrap();
        y.mul(&wt).unwrap().sum_all().unwrap().backward().unwrap();
        let mut want = Vec::new();
        for r in &rows {
            for i in 0..5 {
                let mut gi = 0.0;
                for (k, wk) in w.iter().enumerate().skip(i) {
                    let p: f64 = if prod {
                        (0..=k).filter(|&j| j != i).map(|j| r[j]).product()
                    } else {
                        1.0
                    };
                    gi += wk * p;
                }
                want.push(gi);
            }
        }
        let what = if prod { "cumprod" } else { "cumsum" };
        assert_close(&read(&x.grad().unwrap()), &want, 1e-12, what);
    }
    // A transposed input gives the gradient of its contiguous copy.
    let grad_of = |x: Tensor| {
        let x = x.requires_grad_(true).unwrap();
        x.cumprod(1)
            .unwrap()
            .mul(&tensor(&w[..3], &[3], DType::F64, dev))
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        read(&x.grad().unwrap())
    };
    let t = tensor(&flat, &[3, 5], DType::F64, dev).t().unwrap();
    let c = t.contiguous().unwrap().detach();
    assert_exact(&grad_of(t.detach()), &grad_of(c), "transposed cumprod");
}
