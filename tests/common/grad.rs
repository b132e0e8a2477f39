//! Helpers shared by the autograd and nn tests: f64 leaves, reading values
//! back, and the finite-difference gradcheck.

use super::CPU;
use tensorscope::{DType, Error, Generator, Tensor};

/// A standard-normal tensor from a seeded generator.
pub fn randn(shape: &[usize], dtype: DType, seed: u64) -> Tensor {
    let mut g = Generator::new(seed);
    Tensor::randn_with(shape, dtype, CPU, &mut g).unwrap()
}

/// A standard-normal f64 leaf that requires grad.
pub fn leaf(shape: &[usize], seed: u64) -> Tensor {
    randn(shape, DType::F64, seed).requires_grad_(true).unwrap()
}

/// The tensor's values in row-major order, as f64.
pub fn vals(t: &Tensor) -> Vec<f64> {
    t.to_vec::<f64>().unwrap()
}

/// Checks the analytic gradient of `sum(f(xs) * w)` (w random, fixed) against
/// central finite differences, for every element of every input (f64).
/// Device-agnostic: `w` lives on the output's device and each perturbed
/// input on its input's device (on the CPU the moves are no-ops).
#[track_caller]
pub fn gradcheck(
    name: &str,
    inputs: &[Tensor],
    f: impl Fn(&[Tensor]) -> tensorscope::Result<Tensor>,
) {
    let out = f(inputs).unwrap();
    let w = randn(out.shape(), DType::F64, 99)
        .to_device(out.device())
        .unwrap();
    let loss = |xs: &[Tensor]| -> f64 {
        f(xs)
            .unwrap()
            .mul(&w)
            .unwrap()
            .sum_all()
            .unwrap()
            .item::<f64>()
            .unwrap()
    };
    for x in inputs {
        x.zero_grad();
    }
    out.mul(&w).unwrap().sum_all().unwrap().backward().unwrap();
    let eps = 1e-6;
    for (k, x) in inputs.iter().enumerate() {
        let analytic = x
            .grad()
            .map(|g| vals(&g))
            .unwrap_or_else(|| vec![0.0; x.numel()]);
        let base = vals(x);
        for i in 0..x.numel() {
            let mk = |d: f64| -> Vec<Tensor> {
                let mut v = base.clone();
                v[i] += d;
                inputs
                    .iter()
                    .enumerate()
                    .map(|(j, t)| {
                        if j == k {
                            Tensor::from_slice(&v, t.shape(), CPU)
                                .unwrap()
                                .to_device(t.device())
                                .unwrap()
                        } else {
                            t.detach()
                        }
                    })
                    .collect()
            };
            let numeric = (loss(&mk(eps)) - loss(&mk(-eps))) / (2.0 * eps);
            let a = analytic[i];
            assert!(
                (a - numeric).abs() <= 1e-5 * (1.0 + numeric.abs()),
                "{name}: input {k} element {i}: analytic {a} vs numeric {numeric}"
            );
        }
    }
}

/// Asserts `|a - b| <= tol * (1 + |b|)` elementwise.
#[track_caller]
pub fn close(a: &[f64], b: &[f64], tol: f64, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= tol * (1.0 + y.abs()),
            "{what}: element {i}: {x} vs {y}"
        );
    }
}

/// Asserts that `r` is an `Err` whose message names `op`, and returns it.
#[track_caller]
pub fn assert_err_names(r: tensorscope::Result<Tensor>, op: &str) -> Error {
    let e = r.expect_err("expected an error");
    assert!(e.to_string().contains(op), "message {e} does not name {op}");
    e
}
