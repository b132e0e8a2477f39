//! The optimizer steps the device tests run (tests/cuda/cuda_ops/,
//! tests/autograd/optim_rules.rs): parameters and gradients laid out contiguous,
//! transposed, strided or expanded on a device, four steps of an optimizer
//! on them, and the comparison with a naive reference (tests/common/
//! optim_ref.rs) and, on CUDA, with the CPU.

use super::optim_ref::RefStep;
use super::{assert_close, read, store, tensor, tol, Params};
use tensorscope::optim::Optimizer;
use tensorscope::{DType, Device, Tensor};

/// How a `[r, c]` parameter or gradient is laid out on the device.
#[derive(Clone, Copy, Debug)]
pub enum Lay {
    Contiguous,
    /// The transpose of a contiguous `[c, r]` tensor.
    Transposed,
    /// Every other column of a contiguous `[r, 2c]` tensor.
    Stepped,
    /// One row broadcast over the rows (stride 0; gradients only).
    Expanded,
}

/// The row-major values `v` of shape `[r, c]` in layout `lay` on `dev`
/// (for `Expanded`, the first row of `v` repeated).
pub fn laid_out(v: &[f64], r: usize, c: usize, dt: DType, dev: Device, lay: Lay) -> Tensor {
    match lay {
        Lay::Contiguous => tensor(v, &[r, c], dt, dev),
        Lay::Transposed => {
            let vt: Vec<f64> = (0..r * c).map(|i| v[(i % r) * c + i / r]).collect();
            tensor(&vt, &[c, r], dt, dev).t().unwrap()
        }
        Lay::Stepped => {
            let wide: Vec<f64> = (0..r * 2 * c)
                .map(|i| if i % 2 == 0 { v[i / 2] } else { 99.0 })
                .collect();
            tensor(&wide, &[r, 2 * c], dt, dev)
                .slice(1, 0, 2 * c, 2)
                .unwrap()
        }
        Lay::Expanded => tensor(&v[..c], &[1, c], dt, dev)
            .expand(&[r as isize, c as isize])
            .unwrap(),
    }
}

/// The parameters of the optimizer test: `[5, 7]` contiguous, transposed
/// and stepped, and a `[1, 300]` row.
pub const PARAMS: [(usize, usize, Lay); 4] = [
    (5, 7, Lay::Contiguous),
    (5, 7, Lay::Transposed),
    (5, 7, Lay::Stepped),
    (1, 300, Lay::Contiguous),
];

/// Gradient values of step `t` for parameter `k` (larger on the first step,
/// so that amsgrad's running maximum differs from `v` later).
pub fn grad_vals(n: usize, t: usize, k: usize) -> Vec<f64> {
    let scale = if t == 1 { 3.0 } else { 0.5 + 0.25 * t as f64 };
    (0..n)
        .map(|i| ((i * 37 + t * 101 + k * 13) as f64 * 0.7).sin() * scale)
        .collect()
}

/// Four steps of `opt` on [`PARAMS`] on `dev` with gradients in layout
/// `gl`; returns each parameter's values after each step.
pub fn run_steps(dev: Device, dt: DType, gl: Lay, opt: &mut dyn Optimizer) -> Vec<Vec<Vec<f64>>> {
    let mut model = Params(
        PARAMS
            .iter()
            .enumerate()
            .map(|(k, &(r, c, lay))| {
                let v: Vec<f64> = (0..r * c)
                    .map(|i| ((i * 7 + k * 3) as f64 * 0.31).cos() * 2.0)
                    .collect();
                let p = laid_out(&v, r, c, dt, dev, lay)
                    .requires_grad_(true)
                    .unwrap();
                (format!("p{k}"), p)
            })
            .collect(),
    );
    let mut out = Vec::new();
    for t in 1..=4 {
        for (k, (&(r, c, _), (_, p))) in PARAMS.iter().zip(&model.0).enumerate() {
            let g = laid_out(&grad_vals(r * c, t, k), r, c, dt, dev, gl);
            p.set_grad(Some(g)).unwrap();
        }
        opt.step(&mut model).unwrap();
        out.push(model.0.iter().map(|(_, p)| read(p)).collect());
    }
    out
}

/// A label, a maker of a fresh optimizer, and its reference.
pub type Case = (String, Box<dyn Fn() -> Box<dyn Optimizer>>, Box<RefStep>);

/// Four steps of each case on contiguous, transposed and stepped
/// parameters with contiguous, transposed and expanded gradients, in `dt`:
/// against the naive f64 reference, and on CUDA against the CPU's fused
/// kernels.
pub fn check_cases(dev: Device, dt: DType, cases: Vec<Case>) {
    let tl = tol(dt);
    for (label, make_opt, reference) in cases {
        for gl in [Lay::Contiguous, Lay::Transposed, Lay::Expanded] {
            let mut opt = make_opt();
            let got = run_steps(dev, dt, gl, &mut *opt);
            // The reference, on the values as stored in `dt`.
            let mut want: Vec<Vec<f64>> = PARAMS
                .iter()
                .enumerate()
                .map(|(k, &(r, c, _))| {
                    (0..r * c)
                        .map(|i| store(dt, ((i * 7 + k * 3) as f64 * 0.31).cos() * 2.0))
                        .collect()
                })
                .collect();
            let mut states: Vec<Vec<Vec<f64>>> = PARAMS
                .iter()
                .map(|&(r, c, _)| vec![vec![0.0; r * c]; 3])
                .collect();
            for (t, got_t) in got.iter().enumerate() {
                for (k, &(r, c, _)) in PARAMS.iter().enumerate() {
                    let mut gv: Vec<f64> = grad_vals(r * c, t + 1, k);
                    if matches!(gl, Lay::Expanded) {
                        gv = (0..r * c).map(|i| gv[i % c]).collect();
                    }
                    let gv: Vec<f64> = gv.iter().map(|&x| store(dt, x)).collect();
                    reference(&mut want[k], &gv, &mut states[k], t + 1);
                    assert_close(
                        &got_t[k],
                        &want[k],
                        tl,
                        &format!("{label} {dt} grads {gl:?} step {} param {k}", t + 1),
                    );
                }
            }
            if dev.is_cuda() {
                let mut cpu_opt = make_opt();
                let cpu = run_steps(Device::Cpu, dt, gl, &mut *cpu_opt);
                for (t, (g, c)) in got.iter().zip(&cpu).enumerate() {
                    for (k, (g, c)) in g.iter().zip(c).enumerate() {
                        assert_close(
                            g,
                            c,
                            tl,
                            &format!(
                                "{label} {dt} grads {gl:?} step {} param {k} (CUDA vs CPU)",
                                t + 1
                            ),
                        );
                    }
                }
            }
        }
    }
}
