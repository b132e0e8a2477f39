//! Matmul.

use super::*;

/// The naive batched product of row-major `a` `[.., m, k]` and `b`
/// `[.., k, n]` (batches already equal), in f64 or wrapped to `dt`.
pub(super) fn matmul_ref(
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
pub(super) fn linear_with_bias(dev: Device) {
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

pub(super) fn matmul_ranks(dev: Device) {
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
