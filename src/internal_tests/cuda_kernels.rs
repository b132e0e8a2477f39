//! The CUDA kernels of the softmax family, random fills, layer norm and
//! dropout, the cuBLAS entry point and per-stream cuBLAS handles, called
//! through the backend directly and compared with naive references; each
//! prints a skip line and returns without a GPU. (Above the backend, in
//! `internal_tests`: they hold their operands in tensors.)

use crate::backend::cuda;
use crate::backend::Operand;
use crate::device::Device;
use crate::dtype::DType;
use crate::tensor::Tensor;

// --------------------------------------------------------------- GPU ---

fn gpu() -> Option<Device> {
    if cuda::is_available() {
        Some(Device::Cuda(0))
    } else {
        eprintln!("skipped: no CUDA device (the CUDA variant of this test did not run)");
        None
    }
}

fn t(data: &[f64], shape: &[usize], dt: DType, dev: Device) -> Tensor {
    Tensor::from_slice(data, shape, Device::Cpu)
        .unwrap()
        .to_dtype(dt)
        .unwrap()
        .to_device(dev)
        .unwrap()
}

fn host(x: &Tensor) -> Vec<f64> {
    x.to_vec::<f64>().unwrap()
}

fn close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan()) || (g - w).abs() <= tol * (1.0 + w.abs());
        assert!(ok, "{what}: element {i}: got {g}, want {w}");
    }
}

fn data(n: usize, seed: u64) -> Vec<f64> {
    let mut g = crate::random::Generator::new(seed);
    (0..n)
        .map(|_| (g.next_f64() * 8.0 - 4.0).round() / 2.0 + g.next_f64() * 0.1)
        .collect()
}

#[test]
fn gpu_softmax_matches_naive() {
    let Some(dev) = gpu() else { return };
    let (r, n) = (5, 2000);
    let v = data(r * n, 2);
    for log in [false, true] {
        let x = t(&v, &[r, n], DType::F32, dev);
        let y = Tensor::alloc(&[r, n], DType::F32, dev).unwrap();
        cuda::softmax(&Operand::of(&x), 1, &Operand::of(&y), log).unwrap();
        let mut want = Vec::new();
        for i in 0..r {
            let row = &v[i * n..(i + 1) * n];
            let m = row.iter().cloned().fold(f64::MIN, f64::max);
            let s: f64 = row.iter().map(|x| (x - m).exp()).sum();
            want.extend(row.iter().map(|x| {
                if log {
                    x - m - s.ln()
                } else {
                    (x - m).exp() / s
                }
            }));
        }
        close(&host(&y), &want, 1e-4, "softmax");
        // Backward, with dy = x: softmax dx = y * (dy - sum(dy * y)),
        // log_softmax dx = dy - exp(y) * sum(dy).
        let dx = Tensor::alloc(&[r, n], DType::F32, dev).unwrap();
        cuda::softmax_backward(
            &Operand::of(&x),
            &Operand::of(&y),
            1,
            &Operand::of(&dx),
            log,
        )
        .unwrap();
        let mut want_dx = Vec::new();
        for i in 0..r {
            let (dyr, yr) = (&v[i * n..(i + 1) * n], &want[i * n..(i + 1) * n]);
            if log {
                let sg: f64 = dyr.iter().sum();
                want_dx.extend((0..n).map(|j| dyr[j] - yr[j].exp() * sg));
            } else {
                let sg: f64 = (0..n).map(|j| dyr[j] * yr[j]).sum();
                want_dx.extend((0..n).map(|j| yr[j] * (dyr[j] - sg)));
            }
        }
        close(&host(&dx), &want_dx, 1e-3, "softmax backward");
        // Along dim 0 of the same data (strided rows).
        let y0 = Tensor::alloc(&[r, n], DType::F32, dev).unwrap();
        cuda::softmax(&Operand::of(&x), 0, &Operand::of(&y0), log).unwrap();
        let h = host(&y0);
        for j in (0..n).step_by(97) {
            let col: Vec<f64> = (0..r).map(|i| v[i * n + j]).collect();
            let m = col.iter().cloned().fold(f64::MIN, f64::max);
            let s: f64 = col.iter().map(|x| (x - m).exp()).sum();
            for i in 0..r {
                let w = if log {
                    col[i] - m - s.ln()
                } else {
                    (col[i] - m).exp() / s
                };
                close(&[h[i * n + j]], &[w], 1e-4, "softmax dim 0");
            }
        }
    }
}

#[test]
fn gpu_random_fills_have_the_right_moments() {
    let Some(dev) = gpu() else { return };
    let n = 1 << 20;
    for dt in [DType::F32, DType::F64, DType::BF16] {
        let u = Tensor::alloc(&[n], dt, dev).unwrap();
        let used = cuda::nn::rand_uniform(&Operand::of(&u), 2.0, 4.0, 42, 0).unwrap();
        assert_eq!(used, cuda::nn::counters(n, dt, true));
        let h = host(&u);
        assert!(h.iter().all(|&x| (2.0..4.0).contains(&x)));
        let mean = h.iter().sum::<f64>() / n as f64;
        // The expected mean of the kernel's distribution: 2 + 2u, u on the
        // grid of 2^-P (P = 8 for bf16, as PyTorch's CPU generator), stored
        // in dt (ties to even), a value that rounds to 4 replaced by 2. For
        // bf16 that is 2.98828125, not 3 (the first GPU run measured 2.9879
        // against a test that wanted 3 +- 0.01).
        let want = if dt == DType::BF16 {
            let v = |k: u32| {
                let x = crate::bf16::from_f64(2.0 + 2.0 * f64::from(k) / 256.0).to_f64();
                if x >= 4.0 {
                    2.0
                } else {
                    x
                }
            };
            (0..256).map(v).sum::<f64>() / 256.0
        } else {
            3.0
        };
        assert!(
            (mean - want).abs() < 0.003,
            "{dt} uniform mean {mean}, want {want}"
        );
        let z = Tensor::alloc(&[n], dt, dev).unwrap();
        cuda::nn::rand_normal(&Operand::of(&z), 1.0, 2.0, 42, used).unwrap();
        let h = host(&z);
        let mean = h.iter().sum::<f64>() / n as f64;
        let var = h.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        assert!(
            (mean - 1.0).abs() < 0.02 && (var.sqrt() - 2.0).abs() < 0.03,
            "{dt} normal {mean} {var}"
        );
    }
    let bern = Tensor::alloc(&[n], DType::U8, dev).unwrap();
    cuda::nn::rand_bernoulli(&Operand::of(&bern), 0.3, 5, 0).unwrap();
    let h = host(&bern);
    assert!(h.iter().all(|&x| x == 0.0 || x == 1.0));
    let frac = h.iter().sum::<f64>() / n as f64;
    assert!((frac - 0.3).abs() < 0.01, "bernoulli fraction {frac}");
    // Same seed and offset, same values; another offset, other values.
    let a = Tensor::alloc(&[1000], DType::F32, dev).unwrap();
    let b = Tensor::alloc(&[1000], DType::F32, dev).unwrap();
    cuda::nn::rand_uniform(&Operand::of(&a), 0.0, 1.0, 7, 3).unwrap();
    cuda::nn::rand_uniform(&Operand::of(&b), 0.0, 1.0, 7, 3).unwrap();
    assert_eq!(host(&a), host(&b));
    cuda::nn::rand_uniform(&Operand::of(&b), 0.0, 1.0, 7, 4).unwrap();
    assert_ne!(host(&a), host(&b));
}

#[test]
fn gpu_layer_norm_and_dropout_match_naive() {
    let Some(dev) = gpu() else { return };
    let (r, c) = (6, 300);
    let v = data(r * c, 5);
    let gv = data(c, 6);
    let bv = data(c, 7);
    let x = t(&v, &[r, c], DType::F32, dev);
    let gamma = t(&gv, &[c], DType::F32, dev);
    let beta = t(&bv, &[c], DType::F32, dev);
    let y = Tensor::alloc(&[r, c], DType::F32, dev).unwrap();
    let mean = Tensor::alloc(&[r], DType::F32, dev).unwrap();
    let rstd = Tensor::alloc(&[r], DType::F32, dev).unwrap();
    let (ox, oy, om, or) = (
        Operand::of(&x),
        Operand::of(&y),
        Operand::of(&mean),
        Operand::of(&rstd),
    );
    cuda::nn::layer_norm(
        &ox,
        Some(&Operand::of(&gamma)),
        Some(&Operand::of(&beta)),
        &oy,
        Some(&om),
        Some(&or),
        1e-5,
    )
    .unwrap();
    let mut want = Vec::new();
    let mut xhat = Vec::new();
    let mut rs = Vec::new();
    for i in 0..r {
        let row = &v[i * c..(i + 1) * c];
        let mu = row.iter().sum::<f64>() / c as f64;
        let var = row.iter().map(|x| (x - mu).powi(2)).sum::<f64>() / c as f64;
        let s = 1.0 / (var + 1e-5).sqrt();
        rs.push(s);
        for j in 0..c {
            xhat.push((row[j] - mu) * s);
            want.push((row[j] - mu) * s * gv[j] + bv[j]);
        }
    }
    close(&host(&y), &want, 1e-4, "layer_norm");
    // Backward with dy = 1 + x/10.
    let dyv: Vec<f64> = v.iter().map(|x| 1.0 + x / 10.0).collect();
    let dy = t(&dyv, &[r, c], DType::F32, dev);
    let dx = Tensor::alloc(&[r, c], DType::F32, dev).unwrap();
    let dg = Tensor::alloc(&[c], DType::F32, dev).unwrap();
    let db = Tensor::alloc(&[c], DType::F32, dev).unwrap();
    cuda::nn::layer_norm_backward(
        &Operand::of(&dy),
        &ox,
        Some(&Operand::of(&gamma)),
        &om,
        &or,
        Some(&Operand::of(&dx)),
        Some(&Operand::of(&dg)),
        Some(&Operand::of(&db)),
    )
    .unwrap();
    let mut want_dx = Vec::new();
    for i in 0..r {
        let gg: Vec<f64> = (0..c).map(|j| dyv[i * c + j] * gv[j]).collect();
        let m1 = gg.iter().sum::<f64>() / c as f64;
        let m2 = (0..c).map(|j| gg[j] * xhat[i * c + j]).sum::<f64>() / c as f64;
        want_dx.extend((0..c).map(|j| rs[i] * (gg[j] - m1 - xhat[i * c + j] * m2)));
    }
    close(&host(&dx), &want_dx, 1e-3, "layer_norm dx");
    let want_dg: Vec<f64> = (0..c)
        .map(|j| (0..r).map(|i| dyv[i * c + j] * xhat[i * c + j]).sum())
        .collect();
    let want_db: Vec<f64> = (0..c)
        .map(|j| (0..r).map(|i| dyv[i * c + j]).sum())
        .collect();
    close(&host(&dg), &want_dg, 1e-3, "layer_norm dgamma");
    close(&host(&db), &want_db, 1e-4, "layer_norm dbeta");
    // Dropout: kept elements are scaled, dropped ones are 0, the rate is p.
    let n = 1 << 18;
    let xv = vec![1.5; n];
    let x = t(&xv, &[n], DType::F32, dev);
    let y = Tensor::alloc(&[n], DType::F32, dev).unwrap();
    let mask = Tensor::alloc(&[n], DType::Bool, dev).unwrap();
    cuda::nn::dropout(
        &Operand::of(&x),
        &Operand::of(&y),
        &Operand::of(&mask),
        0.25,
        1,
        0,
    )
    .unwrap();
    let (hy, hm) = (host(&y), host(&mask));
    for i in 0..n {
        assert_eq!(hy[i], if hm[i] != 0.0 { 2.0 } else { 0.0 });
    }
    let kept = hm.iter().sum::<f64>() / n as f64;
    assert!((kept - 0.75).abs() < 0.01, "kept fraction {kept}");
    let dx = Tensor::alloc(&[n], DType::F32, dev).unwrap();
    cuda::nn::dropout_backward(
        &Operand::of(&x),
        &Operand::of(&mask),
        &Operand::of(&dx),
        0.25,
    )
    .unwrap();
    assert_eq!(host(&dx), hy);
}

#[test]
fn gpu_matmul_matches_naive() {
    let Some(dev) = gpu() else { return };
    let (m, k, n) = (33, 70, 17);
    let av = data(m * k, 8);
    let bv = data(k * n, 9);
    // The exact product of the inputs as the device holds them (rounded to
    // `dt`): the first GPU run compared bf16 results with the product of
    // the unrounded f64 inputs, and a sum with cancellation missed it by
    // more than any accumulation error (0.617 against 0.565).
    let reference = |dt: DType| -> Vec<f64> {
        let round = |v: &[f64], shape: &[usize]| host(&t(v, shape, dt, Device::Cpu));
        let (ar, br) = (round(&av, &[m, k]), round(&bv, &[k, n]));
        (0..m)
            .flat_map(|i| (0..n).map(move |j| (i, j)))
            .map(|(i, j)| (0..k).map(|l| ar[i * k + l] * br[l * n + j]).sum())
            .collect()
    };
    for (dt, tol) in [
        (DType::F32, 1e-4),
        (DType::F64, 1e-12),
        (DType::F16, 1e-2),
        (DType::BF16, 3e-2),
    ] {
        let want = reference(dt);
        let a = t(&av, &[m, k], dt, dev);
        let b = t(&bv, &[k, n], dt, dev);
        let c = Tensor::alloc(&[m, n], dt, dev).unwrap();
        cuda::blas::matmul(&Operand::of(&a), &Operand::of(&b), &Operand::of(&c)).unwrap();
        close(&host(&c), &want, tol, &format!("matmul {dt}"));
        // A transposed A (stored [k, m]) and a sliced-with-step B (copied).
        let at = t(&av, &[m, k], dt, dev)
            .t()
            .unwrap()
            .contiguous()
            .unwrap()
            .t()
            .unwrap();
        let bb = t(
            &bv.iter().flat_map(|&x| [x, -1.0]).collect::<Vec<_>>(),
            &[k, n, 2],
            dt,
            dev,
        )
        .select(2, 0)
        .unwrap();
        let c2 = Tensor::alloc(&[m, n], dt, dev).unwrap();
        cuda::blas::matmul(&Operand::of(&at), &Operand::of(&bb), &Operand::of(&c2)).unwrap();
        close(
            &host(&c2),
            &want,
            tol,
            &format!("matmul {dt}, strided operands"),
        );
    }
    // Batched with B broadcast (batch stride 0).
    let a = t(
        &av.iter().chain(av.iter()).cloned().collect::<Vec<_>>(),
        &[2, m, k],
        DType::F32,
        dev,
    );
    let b = t(&bv, &[1, k, n], DType::F32, dev)
        .expand(&[2, k as isize, n as isize])
        .unwrap();
    let c = Tensor::alloc(&[2, m, n], DType::F32, dev).unwrap();
    cuda::blas::matmul(&Operand::of(&a), &Operand::of(&b), &Operand::of(&c)).unwrap();
    let want = reference(DType::F32);
    close(
        &host(&c),
        &[want.clone(), want].concat(),
        1e-4,
        "batched matmul",
    );
    let i = Tensor::alloc(&[m, k], DType::I32, dev).unwrap();
    let e = cuda::blas::matmul(&Operand::of(&i), &Operand::of(&i), &Operand::of(&i)).unwrap_err();
    assert!(e.to_string().contains("matmul"), "{e}");
}

#[test]
fn gpu_dropping_a_stream_releases_its_cublas_handle() {
    let Some(dev) = gpu() else { return };
    let g = cuda::device::gpu("test", 0).unwrap();
    let side = cuda::Stream::new(dev).unwrap();
    let id = side.id();
    let a = Tensor::ones(&[4, 3], DType::F32, dev).unwrap();
    let b = Tensor::ones(&[3, 5], DType::F32, dev).unwrap();
    side.wait_stream(&cuda::current_stream(dev).unwrap())
        .unwrap();
    let c = cuda::with_stream(&side, || a.matmul(&b).unwrap());
    side.synchronize().unwrap();
    assert!(
        g.blas.lock().unwrap().contains_key(&id),
        "made on first use"
    );
    assert_eq!(host(&c), vec![3.0; 20]);
    drop(side);
    assert!(
        !g.blas.lock().unwrap().contains_key(&id),
        "the handle (which holds the stream) goes with the stream"
    );
}
