//! Layer norm.

use super::*;

/// LayerNorm over `[3, 4]` of a permuted (non-contiguous) `[2, 5, 3, 4]`
/// input with non-trivial weight and bias (the fused kernels on CUDA, the
/// composite ops on the CPU): the output against a naive f64 reference in
/// every float dtype, and for f32/f64 the gradients of `sum(y * r)` with
/// respect to the input, the weight and the bias; on CUDA also against the
/// CPU.
pub(super) fn layer_norm_forward_backward(dev: Device) {
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
