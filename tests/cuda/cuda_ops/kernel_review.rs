//! Cases found reviewing the CUDA kernels, run on both devices.

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
