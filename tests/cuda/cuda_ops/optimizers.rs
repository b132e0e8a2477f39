//! Optimizers.

use super::*;

/// The optimizers the device test runs, with their references.
pub(super) fn optimizer_cases(dt: DType) -> Vec<Case> {
    let mut v: Vec<Case> = Vec::new();
    for c in adam_option_sets() {
        v.push((
            format!("Adam {c:?}"),
            Box::new(move || Box::new(Adam::new(c).unwrap())),
            ref_adam(c, false, dt),
        ));
        v.push((
            format!("AdamW {c:?}"),
            Box::new(move || Box::new(AdamW::new(c).unwrap())),
            ref_adam(c, true, dt),
        ));
    }
    for c in sgd_option_sets() {
        v.push((
            format!("Sgd {c:?}"),
            Box::new(move || Box::new(Sgd::new(c).unwrap())),
            ref_sgd(c, dt),
        ));
    }
    v
}

/// Adam, AdamW and SGD (several option sets each) for four steps on
/// contiguous, transposed and stepped parameters with contiguous,
/// transposed and expanded gradients, in every float dtype: against the
/// naive f64 reference, and on CUDA against the CPU's fused kernels
/// (`optim_steps::check_cases`).
pub(super) fn optimizer_steps(dev: Device) {
    for dt in FLOATS {
        check_cases(dev, dt, optimizer_cases(dt));
    }
}

/// clip_grad_norm_ on gradients of several layouts and one large enough
/// for many blocks: the norm against the f64 reference (and the CPU's on
/// CUDA), the clipped gradients, no allocation from the device's
/// allocator, and an expanded gradient refused.
pub(super) fn clip_grad_norm_on_device(dev: Device) {
    for dt in FLOATS {
        let shapes: [(usize, usize, Lay); 4] = [
            (5, 7, Lay::Contiguous),
            (5, 7, Lay::Transposed),
            (5, 7, Lay::Stepped),
            (300, 700, Lay::Transposed),
        ];
        let make_model = |dev: Device| {
            Params(
                shapes
                    .iter()
                    .enumerate()
                    .map(|(k, &(r, c, lay))| {
                        let p = Tensor::zeros(&[r, c], dt, dev)
                            .unwrap()
                            .requires_grad_(true)
                            .unwrap();
                        let g = laid_out(&grad_vals(r * c, 2, k), r, c, dt, dev, lay);
                        p.set_grad(Some(g)).unwrap();
                        (format!("p{k}"), p)
                    })
                    .collect(),
            )
        };
        let model = make_model(dev);
        let gv: Vec<Vec<f64>> = model
            .parameters()
            .iter()
            .map(|p| read(&p.grad().unwrap()))
            .collect();
        let norm: f64 = gv.iter().flatten().map(|v| v * v).sum::<f64>().sqrt();
        let stats = || {
            let s = memory::memory_stats(dev);
            (s.allocation.all.allocated, s.allocated_bytes.all.allocated)
        };
        let before = stats();
        let n = clip_grad_norm_(&model, norm * 2.0).unwrap();
        assert_eq!(stats(), before, "{dt}: clip_grad_norm_ allocated");
        assert!((n - norm).abs() <= 1e-12 * norm, "{dt}: {n} vs {norm}");
        for (p, want) in model.parameters().iter().zip(&gv) {
            assert_eq!(&read(&p.grad().unwrap()), want, "{dt}: not clipped");
        }
        let before = stats();
        let n = clip_grad_norm_(&model, norm / 4.0).unwrap();
        assert_eq!(stats(), before, "{dt}: clip_grad_norm_ allocated");
        assert!((n - norm).abs() <= 1e-12 * norm, "{dt}: {n} vs {norm}");
        let coef = 0.25 * norm / (norm + 1e-6);
        for (k, (p, want)) in model.parameters().iter().zip(&gv).enumerate() {
            let w: Vec<f64> = want.iter().map(|v| store(dt, v * coef)).collect();
            assert_close(
                &read(&p.grad().unwrap()),
                &w,
                tol(dt),
                &format!("{dt} clipped {k}"),
            );
        }
        if dev.is_cuda() {
            let cpu = clip_grad_norm_(&make_model(Device::Cpu), norm * 2.0).unwrap();
            assert!(
                (n - cpu).abs() <= 1e-12 * cpu,
                "{dt}: CUDA {n} vs CPU {cpu}"
            );
        }
        // An expanded gradient: an Err naming the op, nothing scaled.
        let p = Tensor::zeros(&[5, 7], dt, dev)
            .unwrap()
            .requires_grad_(true)
            .unwrap();
        p.set_grad(Some(laid_out(
            &grad_vals(35, 1, 0),
            5,
            7,
            dt,
            dev,
            Lay::Expanded,
        )))
        .unwrap();
        let bad = Params(vec![("p".into(), p)]);
        let before = read(&bad.0[0].1.grad().unwrap());
        let e = clip_grad_norm_(&bad, 1e-3).unwrap_err();
        assert!(e.to_string().contains("clip_grad_norm_"), "{dt}: {e}");
        assert_eq!(
            read(&bad.0[0].1.grad().unwrap()),
            before,
            "{dt}: nothing scaled"
        );
    }
}
