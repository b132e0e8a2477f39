//! Batched matmul and `linear` on the paths chosen from shapes (issue 14,
//! items 4b and 4c): batches split by product, products cut into row or
//! column blocks or split by gemm's own threads, the column-major and the
//! direct `linear` layouts, checked against a plain f64 triple loop. Every
//! test runs with 4 threads, so the parallel paths run on any machine.

use tensorscope::{DType, Device, Tensor};

const CPU: Device = Device::Cpu;

/// `a @ b` for row-major `[bt, m, k]` and `[bt, k, n]` values, in f64.
fn reference(a: &[f64], b: &[f64], bt: usize, m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut c = vec![0.0; bt * m * n];
    for t in 0..bt {
        for i in 0..m {
            for p in 0..k {
                let x = a[t * m * k + i * k + p];
                for j in 0..n {
                    c[t * m * n + i * n + j] += x * b[t * k * n + p * n + j];
                }
            }
        }
    }
    c
}

/// `|got - want| <= tol (scale + |want|)`, where `scale` is the typical
/// size of an element (sqrt(k) for a k-term product of N(0, 1) inputs): a
/// rounding error scales with the terms of a dot product, not with its
/// result, which can be near 0 (a k = 4096 f32 product summed in order by
/// gemm's matrix-vector path errs by up to ~4e-4 here, relative error
/// unbounded when the result is ~0).
fn close_scaled(got: &[f64], want: &[f64], tol: f64, scale: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (scale + w.abs()),
            "{what}: element {i}: {g} vs {w}"
        );
    }
}

fn close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    close_scaled(got, want, tol, 1.0, what)
}

fn values(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap()
}

/// Every test's first line: 4 threads, whatever the machine has, with the
/// binary's lock held alone (the thread count is global) and the count put
/// back when the guard goes.
fn four_threads() -> impl Drop {
    let g = crate::common::serial();
    let before = tensorscope::num_threads();
    tensorscope::set_num_threads(4).unwrap();
    scopeguard::guard(g, move |_| tensorscope::set_num_threads(before).unwrap())
}

#[test]
fn batched_matmul_matches_a_reference_on_every_schedule() {
    let _threads = four_threads();
    // Many small products (split by product), a few large ones (split by
    // gemm), a batch of matrix-vector products, f32 and f64, and integers.
    for (bt, m, k, n) in [
        (64, 128, 64, 128),
        (3, 300, 200, 260),
        (16, 1, 4096, 64),
        (5, 7, 3, 9),
    ] {
        for dt in [DType::F32, DType::F64] {
            let a = Tensor::randn(&[bt, m, k], dt, CPU).unwrap();
            let b = Tensor::randn(&[bt, k, n], dt, CPU).unwrap();
            let want = reference(&values(&a), &values(&b), bt, m, k, n);
            let tol = if dt == DType::F32 { 1e-4 } else { 1e-10 };
            let scale = (k as f64).sqrt();
            close_scaled(
                &values(&a.matmul(&b).unwrap()),
                &want,
                tol,
                scale,
                &format!("{dt:?} [{bt},{m},{k}]@[{bt},{k},{n}]"),
            );
            // A broadcast right operand (stride 0 along the batch).
            let b0 = b.narrow(0, 0, 1).unwrap();
            let want0 = reference(
                &values(&a),
                &values(
                    &b0.expand(&[bt as isize, k as isize, n as isize])
                        .unwrap()
                        .contiguous()
                        .unwrap(),
                ),
                bt,
                m,
                k,
                n,
            );
            close_scaled(
                &values(&a.matmul(&b0).unwrap()),
                &want0,
                tol,
                scale,
                "broadcast batch",
            );
        }
    }
    let ints: Vec<i64> = (0..64 * 40 * 30).map(|i| i % 7 - 3).collect();
    let a = Tensor::from_vec(ints, &[64, 40, 30], CPU).unwrap();
    let b = a.transpose(1, 2).unwrap();
    let want = reference(
        &values(&a),
        &values(&b.contiguous().unwrap()),
        64,
        40,
        30,
        40,
    );
    close(&values(&a.matmul(&b).unwrap()), &want, 0.0, "i64");
}

#[test]
fn linear_matches_a_reference_in_both_layouts() {
    let _threads = four_threads();
    // Direct (skinny weight, square, vector) and column-major (skinny
    // batch, transposed input) shapes, with and without a bias.
    for (m, n, k, transposed_x) in [
        (512, 16, 1024, false),
        (64, 1024, 256, false),
        (200, 200, 100, false),
        (1, 300, 784, false),
        (300, 48, 64, true),
    ] {
        for dt in [DType::F32, DType::F64] {
            let x = if transposed_x {
                Tensor::randn(&[k, m], dt, CPU).unwrap().t().unwrap()
            } else {
                Tensor::randn(&[m, k], dt, CPU).unwrap()
            };
            let w = Tensor::randn(&[n, k], dt, CPU).unwrap();
            let bias = Tensor::randn(&[n], dt, CPU).unwrap();
            let wt = values(&w.t().unwrap().contiguous().unwrap());
            let mut want = reference(&values(&x.contiguous().unwrap()), &wt, 1, m, k, n);
            let tol = if dt == DType::F32 { 2e-4 } else { 1e-10 };
            let what = format!("{dt:?} x[{m},{k}] w[{n},{k}]");
            close(&values(&x.linear(&w, None).unwrap()), &want, tol, &what);
            let bv = values(&bias);
            for (i, v) in want.iter_mut().enumerate() {
                *v += bv[i % n];
            }
            close(
                &values(&x.linear(&w, Some(&bias)).unwrap()),
                &want,
                tol,
                &what,
            );
        }
    }
}

#[test]
fn single_products_split_over_threads() {
    let _threads = four_threads();
    // Single products large enough to thread, taller than wide and wider
    // than tall (cut into row or column blocks), sizes that are no multiple
    // of gemm's tiles; two such products one after another; one above the
    // size where gemm's own threads take over (f32 only: 270M
    // multiply-adds); a bias accumulated onto; bf16 through f32; and
    // integers split by rows.
    let shapes = [
        (1, 1000, 128, 300),
        (1, 70, 256, 1000),
        (2, 513, 300, 500),
        (1, 520, 1000, 520),
    ];
    for (bt, m, k, n) in shapes {
        let dtypes: &[DType] = if m * n * k > 1 << 28 {
            &[DType::F32]
        } else {
            &[DType::F32, DType::F64, DType::BF16]
        };
        for &dt in dtypes {
            let a = Tensor::randn(&[bt, m, k], DType::F64, CPU).unwrap();
            let b = Tensor::randn(&[bt, k, n], DType::F64, CPU).unwrap();
            let (a, b) = (a.to_dtype(dt).unwrap(), b.to_dtype(dt).unwrap());
            let want = reference(&values(&a), &values(&b), bt, m, k, n);
            let tol = match dt {
                DType::F64 => 1e-10,
                DType::F32 => 1e-4,
                _ => 1e-2,
            };
            let scale = (k as f64).sqrt();
            let what = format!("{dt:?} [{bt},{m},{k}]@[{bt},{k},{n}]");
            close_scaled(&values(&a.matmul(&b).unwrap()), &want, tol, scale, &what);
            if bt == 1 && dt != DType::BF16 {
                // linear: x [m, k], w = b^T [n, k], with a bias.
                let x = a.reshape(&[m as isize, k as isize]).unwrap();
                let w = b
                    .reshape(&[k as isize, n as isize])
                    .unwrap()
                    .t()
                    .unwrap()
                    .contiguous()
                    .unwrap();
                let bias = Tensor::randn(&[n], dt, CPU).unwrap();
                let bv = values(&bias);
                let want_b: Vec<f64> = want
                    .iter()
                    .enumerate()
                    .map(|(i, v)| v + bv[i % n])
                    .collect();
                let got = values(&x.linear(&w, Some(&bias)).unwrap());
                close_scaled(&got, &want_b, tol, scale, &format!("linear {what}"));
            }
        }
    }
    let ints: Vec<i64> = (0..300 * 200).map(|i| i % 5 - 2).collect();
    let a = Tensor::from_vec(ints, &[300, 200], CPU).unwrap();
    let b = a.t().unwrap().narrow(1, 0, 260).unwrap();
    let want = reference(
        &values(&a),
        &values(&b.contiguous().unwrap()),
        1,
        300,
        200,
        260,
    );
    close(
        &values(&a.matmul(&b).unwrap()),
        &want,
        0.0,
        "i64 [300,200]@[200,260]",
    );
}

#[test]
fn a_transposed_left_operand_agrees_with_a_reference() {
    let _threads = four_threads();
    // A column-major left operand (a `.t()`, as a Linear's weight gradient
    // `g^T @ x`), with a padded column stride (a narrowed view) and
    // without, alone and in a batch: large products have it copied
    // row-major before the product, the last shape is too narrow for that.
    for (m, k, n, pad) in [(300, 200, 260, 0), (257, 129, 190, 7), (64, 64, 32, 0)] {
        for dt in [DType::F32, DType::F64] {
            let g = Tensor::randn(&[k, m + pad], dt, CPU).unwrap();
            let a = g.narrow(1, 0, m).unwrap().t().unwrap();
            assert_eq!(a.strides(), &[1, m + pad]);
            let b = Tensor::randn(&[k, n], dt, CPU).unwrap();
            let want = reference(&values(&a.contiguous().unwrap()), &values(&b), 1, m, k, n);
            let tol = if dt == DType::F64 { 1e-10 } else { 1e-4 };
            let scale = (k as f64).sqrt();
            let what = format!("{dt:?} [{m},{k}] (transposed, pad {pad}) @ [{k},{n}]");
            close_scaled(&values(&a.matmul(&b).unwrap()), &want, tol, scale, &what);

            let g3 = Tensor::randn(&[2, k, m], dt, CPU).unwrap();
            let a3 = g3.transpose(1, 2).unwrap();
            let b3 = Tensor::randn(&[2, k, n], dt, CPU).unwrap();
            let want = reference(&values(&a3.contiguous().unwrap()), &values(&b3), 2, m, k, n);
            close_scaled(
                &values(&a3.matmul(&b3).unwrap()),
                &want,
                tol,
                scale,
                &format!("batched {what}"),
            );
        }
    }
}
