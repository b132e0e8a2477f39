//! Issue 17 item 5: `any`, `all`, `var_mean`, `std_mean`, `vector_norm` /
//! `norm`, `one_hot`, `diag` and `clamp` with tensor bounds, on the CPU and
//! on CUDA device 0 (`on_both!`): values against direct f64 computations,
//! gradients against PyTorch's formulas (a zero norm's gradient is 0, the
//! inf-norm's is shared among its ties, clamp's follows PyTorch 2.15's tie
//! rules), and the errors. Agreement with PyTorch itself is in the
//! differential suite.

use crate::common;

#[cfg(feature = "cuda")]
use common::devices::on_both;
use common::{assert_close, assert_exact, read, tensor};
use tensorscope::{DType, Device, Tensor};

#[cfg(feature = "cuda")]
on_both!(
    any_and_all,
    moments_and_norms,
    norm_gradients_follow_pytorch,
    one_hot_and_diag,
    clamp_with_tensor_bounds,
);

#[cfg(not(feature = "cuda"))]
common::on_cpu!(
    any_and_all,
    moments_and_norms,
    norm_gradients_follow_pytorch,
    one_hot_and_diag,
    clamp_with_tensor_bounds,
);

fn leaf(v: &[f64], s: &[usize], dev: Device) -> Tensor {
    tensor(v, s, DType::F64, dev).requires_grad_(true).unwrap()
}

/// Over a dimension, over all, with keepdim, on NaN (non-zero), on empty
/// sets (`any` false, `all` true), for bool, int and float inputs; uint8
/// gives uint8.
fn any_and_all(dev: Device) {
    let x = tensor(
        &[0.0, 0.0, f64::NAN, 0.0, 1.0, 2.0],
        &[3, 2],
        DType::F32,
        dev,
    );
    assert_eq!(read(&x.any(&[1], false).unwrap()), [0.0, 1.0, 1.0]);
    assert_eq!(read(&x.all(&[1], false).unwrap()), [0.0, 0.0, 1.0]);
    assert_eq!(x.any(&[0], true).unwrap().shape(), &[1, 2]);
    assert_eq!(x.any(&[], false).unwrap().dtype(), DType::Bool);
    assert_eq!(read(&x.all(&[], false).unwrap()), [0.0]);
    let e = Tensor::zeros(&[0, 3], DType::I64, dev).unwrap();
    assert_eq!(read(&e.any(&[0], false).unwrap()), [0.0; 3]);
    assert_eq!(read(&e.all(&[0], false).unwrap()), [1.0; 3]);
    let u = tensor(&[3.0, 0.0], &[2], DType::U8, dev);
    assert_eq!(u.all(&[], false).unwrap().dtype(), DType::U8);
    let b = tensor(&[1.0, 1.0], &[2], DType::Bool, dev);
    assert_eq!(read(&b.all(&[0], false).unwrap()), [1.0]);
    let err = x.any(&[2], false).unwrap_err().to_string();
    assert!(err.contains("any"), "{err}");
}

/// `var_mean`/`std_mean` equal `var`/`std` and `mean`; the norms against
/// direct sums, every order, over dims and all, keepdim, f16 without
/// overflow (its squares would), and the refused inputs.
fn moments_and_norms(dev: Device) {
    let v: Vec<f64> = (0..12).map(|i| ((i * 7) % 11) as f64 * 0.5 - 2.0).collect();
    let x = tensor(&v, &[3, 4], DType::F64, dev);
    let (var, mean) = x.var_mean(&[1], 1, false).unwrap();
    assert_exact(
        &read(&var),
        &read(&x.var(&[1], 1, false).unwrap()),
        "var_mean var",
    );
    assert_exact(
        &read(&mean),
        &read(&x.mean(&[1], false).unwrap()),
        "var_mean mean",
    );
    let (std, _) = x.std_mean(&[0], 0, true).unwrap();
    assert_exact(
        &read(&std),
        &read(&x.std(&[0], 0, true).unwrap()),
        "std_mean",
    );
    for ord in [2.0, 1.0, 0.0, 3.0, 0.5, f64::INFINITY, f64::NEG_INFINITY] {
        let row = |r: usize| -> f64 {
            let a: Vec<f64> = v[r * 4..r * 4 + 4].iter().map(|x| x.abs()).collect();
            if ord == f64::INFINITY {
                a.iter().cloned().fold(0.0, f64::max)
            } else if ord == f64::NEG_INFINITY {
                a.iter().cloned().fold(f64::INFINITY, f64::min)
            } else if ord == 0.0 {
                a.iter().filter(|&&x| x != 0.0).count() as f64
            } else {
                a.iter().map(|x| x.powf(ord)).sum::<f64>().powf(1.0 / ord)
            }
        };
        let want: Vec<f64> = (0..3).map(row).collect();
        let got = x.vector_norm(ord, &[1], false).unwrap();
        assert_close(&read(&got), &want, 1e-12, &format!("vector_norm {ord}"));
        assert_eq!(x.norm(ord, &[-1], true).unwrap().shape(), &[3, 1]);
    }
    let all = x.vector_norm(2.0, &[], false).unwrap();
    assert_close(
        &read(&all),
        &[v.iter().map(|x| x * x).sum::<f64>().sqrt()],
        1e-12,
        "2-norm of all",
    );
    let h = tensor(&[300.0, 400.0], &[2], DType::F16, dev);
    let n = h.vector_norm(2.0, &[], false).unwrap();
    assert_eq!(n.dtype(), DType::F16);
    assert_eq!(read(&n), [500.0]);
    let i = tensor(&[3.0, 4.0], &[2], DType::I64, dev);
    let e = i.vector_norm(2.0, &[], false).unwrap_err().to_string();
    assert!(e.contains("vector_norm") && e.contains("float"), "{e}");
    assert!(x
        .norm(f64::NAN, &[], false)
        .unwrap_err()
        .to_string()
        .contains("norm"));
}

/// The gradients of `vector_norm`: `x / |x|` (0 at a zero norm), `sign`
/// for 1, 0 for 0, `sign * |x|^(p-1) / norm^(p-1)` for p, and for inf the
/// gradient shared among the elements attaining the norm.
fn norm_gradients_follow_pytorch(dev: Device) {
    let v = [3.0, -4.0, 0.0, 0.0, -2.0, 2.0];
    let grad = |ord: f64| -> Vec<f64> {
        let x = leaf(&v, &[3, 2], dev);
        x.vector_norm(ord, &[1], false)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        read(&x.grad().unwrap())
    };
    let s8 = 8f64.sqrt();
    assert_close(
        &grad(2.0),
        &[0.6, -0.8, 0.0, 0.0, -2.0 / s8, 2.0 / s8],
        1e-12,
        "ord 2",
    );
    assert_close(
        &grad(1.0),
        &[1.0, -1.0, 0.0, 0.0, -1.0, 1.0],
        1e-12,
        "ord 1",
    );
    assert_exact(&grad(0.0), &[0.0; 6], "ord 0");
    // Row 2 ties: the gradient is split between its two elements.
    assert_close(
        &grad(f64::INFINITY),
        &[0.0, -1.0, 0.0, 0.0, -0.5, 0.5],
        1e-12,
        "ord inf",
    );
    let n3: Vec<f64> = [[3.0f64, 4.0], [0.0, 0.0], [2.0, 2.0]]
        .iter()
        .map(|r| (r[0].powi(3) + r[1].powi(3)).cbrt())
        .collect();
    let want: Vec<f64> = v
        .iter()
        .enumerate()
        .map(|(i, &x)| {
            let n = n3[i / 2];
            if n == 0.0 {
                0.0
            } else {
                x.signum() * x.abs().powi(2) / n.powi(2)
            }
        })
        .collect();
    assert_close(&grad(3.0), &want, 1e-12, "ord 3");
    assert!(
        grad(0.5).iter().all(|g| g.is_finite()),
        "ord 0.5: {:?}",
        grad(0.5)
    );
    // -inf: the smallest |x| of each row (row 1 ties at 0, row 2 at 2).
    assert_close(
        &grad(f64::NEG_INFINITY),
        &[1.0, 0.0, 0.0, 0.0, -0.5, 0.5],
        1e-12,
        "ord -inf",
    );
    // A scalar with dim 0: the gradient has the scalar's shape.
    let s = leaf(&[-3.0], &[], dev);
    s.vector_norm(2.0, &[0], false).unwrap().backward().unwrap();
    assert_eq!(
        (s.grad().unwrap().shape().len(), read(&s.grad().unwrap())),
        (0, vec![-1.0])
    );
    // A negative order over an empty dimension is refused, as PyTorch.
    let e = Tensor::zeros(&[2, 0], DType::F32, dev).unwrap();
    let err = e.vector_norm(-2.0, &[1], false).unwrap_err().to_string();
    assert!(
        err.contains("vector_norm") && err.contains("empty"),
        "{err}"
    );
    assert_eq!(read(&e.vector_norm(2.0, &[1], false).unwrap()), [0.0, 0.0]);
}

/// `one_hot` of int64 classes (given and inferred counts) and its
/// refusals; `diag` both ways, every offset, and its gradients.
fn one_hot_and_diag(dev: Device) {
    let y = tensor(&[2.0, 0.0, 1.0, 2.0], &[2, 2], DType::I64, dev);
    let oh = y.one_hot(None).unwrap();
    assert_eq!((oh.shape(), oh.dtype()), (&[2, 2, 3][..], DType::I64));
    assert_eq!(read(&oh), [0., 0., 1., 1., 0., 0., 0., 1., 0., 0., 0., 1.]);
    assert_eq!(y.one_hot(Some(5)).unwrap().shape(), &[2, 2, 5]);
    for (bad, what) in [
        (y.one_hot(Some(2)), "smaller than num_classes"),
        (
            tensor(&[-1.0], &[1], DType::I64, dev).one_hot(None),
            "non-negative",
        ),
        (
            Tensor::zeros(&[0], DType::I64, dev).unwrap().one_hot(None),
            "empty",
        ),
        (tensor(&[1.0], &[1], DType::I32, dev).one_hot(None), "int64"),
    ] {
        let e = bad.unwrap_err().to_string();
        assert!(e.contains("one_hot") && e.contains(what), "{e}");
    }
    assert_eq!(
        Tensor::zeros(&[0], DType::I64, dev)
            .unwrap()
            .one_hot(Some(3))
            .unwrap()
            .shape(),
        &[0, 3]
    );
    let v = leaf(&[1.0, 2.0, 3.0], &[3], dev);
    for k in [-2i64, -1, 0, 1, 2] {
        let m = v.diag(k).unwrap();
        let n = 3 + k.unsigned_abs() as usize;
        assert_eq!(m.shape(), &[n, n]);
        let mut want = vec![0.0; n * n];
        for i in 0..3usize {
            let (r, c) = if k >= 0 {
                (i, i + k as usize)
            } else {
                (i + (-k) as usize, i)
            };
            want[r * n + c] = [1.0, 2.0, 3.0][i];
        }
        assert_exact(&read(&m), &want, &format!("diag({k}) of a vector"));
        // And back: the matrix's diagonal k is the vector.
        assert_exact(
            &read(&m.diag(k).unwrap()),
            &[1.0, 2.0, 3.0],
            &format!("diag({k}) of diag"),
        );
    }
    let a = leaf(&(0..12).map(|i| i as f64).collect::<Vec<_>>(), &[3, 4], dev);
    assert_eq!(read(&a.diag(1).unwrap()), [1.0, 6.0, 11.0]);
    assert_eq!(read(&a.diag(-2).unwrap()), [8.0]);
    assert_eq!(a.diag(5).unwrap().shape(), &[0]);
    a.diag(1)
        .unwrap()
        .mul_scalar(2.0)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    let mut want = vec![0.0; 12];
    for i in [1, 6, 11] {
        want[i] = 2.0;
    }
    assert_exact(
        &read(&a.grad().unwrap()),
        &want,
        "diag gradient of a matrix",
    );
    v.diag(-1).unwrap().sum_all().unwrap().backward().unwrap();
    assert_exact(
        &read(&v.grad().unwrap()),
        &[1.0; 3],
        "diag gradient of a vector",
    );
    let e = Tensor::zeros(&[2, 2, 2], DType::F32, dev)
        .unwrap()
        .diag(0)
        .unwrap_err()
        .to_string();
    assert!(e.contains("diag"), "{e}");
    // Extreme offsets: empty diagonals of a matrix, a refused vector size.
    assert_eq!(a.diag(i64::MIN).unwrap().shape(), &[0]);
    assert_eq!(a.diag(i64::MAX).unwrap().shape(), &[0]);
    let e = v.diag(i64::MAX).unwrap_err().to_string();
    assert!(e.contains("diag") && e.contains("too large"), "{e}");
    let e = Tensor::zeros(&[0], DType::I64, dev)
        .unwrap()
        .one_hot(Some(0))
        .unwrap_err();
    assert!(e.to_string().contains("one_hot"), "{e}");
}

/// Values with broadcast bounds of another dtype, NaN from `x` or a bound,
/// `min > max`; gradients as PyTorch 2.15's (printed by it: `(x, min, max)
/// = (1, 1, 2)` gives `(0.5, 0.5, 0)`, `(0, 1, 1)` gives `(0, 1, 0)`,
/// `(1, 1, 1)` gives `(1, 0, 0)`, `min > max` gives `(0, 0, 1)`), summed
/// over a broadcast bound.
fn clamp_with_tensor_bounds(dev: Device) {
    let x = leaf(&[-3.0, -1.0, 0.0, 1.0, 2.0, 5.0], &[2, 3], dev);
    let lo = leaf(&[-1.0, -2.0, 0.5], &[3], dev);
    let hi = leaf(&[1.0, 1.0, 4.0], &[3], dev);
    let y = x.clamp_tensor(Some(&lo), Some(&hi)).unwrap();
    assert_exact(&read(&y), &[-1.0, -1.0, 0.5, 1.0, 1.0, 4.0], "clamp values");
    y.sum_all().unwrap().backward().unwrap();
    // Element (1, 0): x = 1 ties max = 1, the gradient split.
    assert_exact(
        &read(&x.grad().unwrap()),
        &[0.0, 1.0, 0.0, 0.5, 0.0, 0.0],
        "d/dx",
    );
    assert_exact(&read(&lo.grad().unwrap()), &[1.0, 0.0, 1.0], "d/dmin");
    assert_exact(&read(&hi.grad().unwrap()), &[0.5, 1.0, 1.0], "d/dmax");
    // One element per case of PyTorch's table.
    let cases = [
        ([1.0, 1.0, 2.0], [0.5, 0.5, 0.0]),
        ([2.0, 1.0, 2.0], [0.5, 0.0, 0.5]),
        ([0.0, 1.0, 1.0], [0.0, 1.0, 0.0]),
        ([3.0, 1.0, 1.0], [0.0, 0.0, 1.0]),
        ([1.0, 1.0, 1.0], [1.0, 0.0, 0.0]),
        ([1.0, 2.0, 1.0], [0.0, 0.0, 1.0]),
        ([0.0, 0.0, -1.0], [0.0, 0.0, 1.0]),
    ];
    for (v, want) in cases {
        let (t, l, h) = (
            leaf(&v[..1], &[1], dev),
            leaf(&v[1..2], &[1], dev),
            leaf(&v[2..], &[1], dev),
        );
        t.clamp_tensor(Some(&l), Some(&h))
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        let g = |a: &Tensor| read(&a.grad().unwrap())[0];
        assert_eq!([g(&t), g(&l), g(&h)], want, "(x, min, max) = {v:?}");
    }
    // Promotion, NaN, min > max.
    let xf = tensor(&[f64::NAN, 0.0, 7.0], &[3], DType::F32, dev);
    let lo64 = tensor(&[0.0, f64::NAN, 9.0], &[3], DType::F64, dev);
    let hi64 = tensor(&[1.0], &[1], DType::F64, dev);
    let r = xf.clamp_tensor(Some(&lo64), Some(&hi64)).unwrap();
    assert_eq!(r.dtype(), DType::F64);
    let r = read(&r);
    assert!(r[0].is_nan() && r[1].is_nan() && r[2] == 1.0, "{r:?}");
    let e = xf.clamp_tensor(None, None).unwrap_err().to_string();
    assert!(e.contains("clamp"), "{e}");
    let bad = tensor(&[0.0, 1.0], &[2], DType::F32, dev);
    assert!(xf
        .clamp_tensor(Some(&bad), None)
        .unwrap_err()
        .to_string()
        .contains("clamp"));
}
