//! matmul against a naive reference: every rank case of `torch.matmul`,
//! broadcast batch dims, transposed / step-sliced / expanded operands, several
//! dtypes; `matmul_out` allocating nothing; and every error path.
//!
//! One test checks exact allocator counts, so every test takes `LOCK`.

use tensorscope::{memory, DType, Device, Error, Tensor};
const CPU: Device = Device::Cpu;

fn lock() -> crate::common::Guard {
    crate::common::serial()
}

/// Deterministic small integers in `[-3, 3]` (exact in every dtype, so
/// integer and float results can be compared exactly up to rounding).
fn tensor(shape: &[usize], seed: u64, dt: DType) -> Tensor {
    let n: usize = shape.iter().product();
    let mut s = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
    let v: Vec<f64> = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % 7) as f64 - 3.0
        })
        .collect();
    let t = Tensor::from_slice(&v, shape, CPU).unwrap();
    if dt == DType::U8 {
        // Non-negative for u8.
        t.add_scalar(3.0).unwrap().to_dtype(dt).unwrap()
    } else {
        t.to_dtype(dt).unwrap()
    }
}

/// `torch.matmul` on row-major f64 data, written out longhand.
fn naive(a: &Tensor, b: &Tensor) -> (Vec<usize>, Vec<f64>) {
    let (av, bv) = (a.to_vec::<f64>().unwrap(), b.to_vec::<f64>().unwrap());
    let mut sa = a.shape().to_vec();
    let mut sb = b.shape().to_vec();
    let (a_vec, b_vec) = (sa.len() == 1, sb.len() == 1);
    if a_vec {
        sa.insert(0, 1);
    }
    if b_vec {
        sb.push(1);
    }
    let (m, k) = (sa[sa.len() - 2], sa[sa.len() - 1]);
    let n = sb[sb.len() - 1];
    assert_eq!(k, sb[sb.len() - 2]);
    let (ba, bb) = (&sa[..sa.len() - 2], &sb[..sb.len() - 2]);
    let r = ba.len().max(bb.len());
    let pad = |s: &[usize]| {
        let mut v = vec![1; r - s.len()];
        v.extend_from_slice(s);
        v
    };
    let (pa, pb) = (pad(ba), pad(bb));
    let batch: Vec<usize> = (0..r).map(|i| pa[i].max(pb[i])).collect();
    let nb: usize = batch.iter().product();
    let mut out = vec![0.0; nb * m * n];
    for bi in 0..nb {
        // Multi-index of the batch element, then each operand's own (size-1 dims broadcast).
        let mut rem = bi;
        let mut idx = vec![0; r];
        for d in (0..r).rev() {
            idx[d] = rem % batch[d];
            rem /= batch[d];
        }
        let lin =
            |p: &[usize]| (0..r).fold(0, |acc, d| acc * p[d] + if p[d] == 1 { 0 } else { idx[d] });
        let (oa, ob) = (lin(&pa) * m * k, lin(&pb) * k * n);
        for i in 0..m {
            for j in 0..n {
                let mut acc = 0.0;
                for p in 0..k {
                    acc += av[oa + i * k + p] * bv[ob + p * n + j];
                }
                out[bi * m * n + i * n + j] = acc;
            }
        }
    }
    let mut shape = batch;
    if !a_vec {
        shape.push(m);
    }
    if !b_vec {
        shape.push(n);
    }
    (shape, out)
}

/// Exact up to the rounding of the result to `dt` (the inputs are small
/// integers; integer results wrap like the dtype).
fn check(what: &str, a: &Tensor, b: &Tensor, got: &Tensor) {
    let (shape, want) = naive(a, b);
    assert_eq!(got.shape(), shape.as_slice(), "{what}: shape");
    assert_eq!(got.dtype(), a.dtype(), "{what}: dtype");
    let g = got.to_vec::<f64>().unwrap();
    for (i, (&x, &w)) in g.iter().zip(&want).enumerate() {
        let w = match a.dtype() {
            DType::U8 => (w as i64 as u8) as f64,
            DType::I32 => (w as i64 as i32) as f64,
            DType::F16 => tensorscope::f16::from_f64(w).to_f64(),
            DType::BF16 => tensorscope::bf16::from_f64(w).to_f64(),
            DType::F32 => w as f32 as f64,
            _ => w,
        };
        let tol = match a.dtype() {
            // gemm's f16 path may round partial sums to f16.
            DType::F16 => 2e-3 * w.abs().max(8.0),
            DType::BF16 => 8e-3 * w.abs().max(8.0),
            DType::F32 => 1e-6 * w.abs().max(1.0),
            _ => 0.0,
        };
        assert!(
            (x - w).abs() <= tol,
            "{what}: element {i}: got {x}, want {w}"
        );
    }
}

const DTYPES: [DType; 7] = [
    DType::F32,
    DType::F64,
    DType::F16,
    DType::BF16,
    DType::I64,
    DType::I32,
    DType::U8,
];

#[test]
fn every_rank_case_and_broadcast_batch() {
    let _g = lock();
    let cases: Vec<(Vec<usize>, Vec<usize>)> = vec![
        (vec![7], vec![7]),                // dot
        (vec![4, 7], vec![7, 5]),          // 2-D
        (vec![7], vec![7, 5]),             // 1-D x 2-D
        (vec![4, 7], vec![7]),             // 2-D x 1-D
        (vec![3, 4, 7], vec![7]),          // batched x 1-D
        (vec![7], vec![3, 7, 5]),          // 1-D x batched
        (vec![3, 4, 7], vec![3, 7, 5]),    // batched
        (vec![2, 1, 4, 7], vec![3, 7, 5]), // broadcast batch
        (vec![4, 7], vec![2, 3, 7, 5]),    // 2-D x batched
        (vec![2, 3, 4, 7], vec![1, 7, 5]),
        (vec![1, 1], vec![1, 1]),
    ];
    for dt in DTYPES {
        for (sa, sb) in &cases {
            let a = tensor(sa, 1, dt);
            let b = tensor(sb, 2, dt);
            let c = a.matmul(&b).unwrap();
            check(&format!("{dt} {sa:?} x {sb:?}"), &a, &b, &c);
        }
    }
}

/// A transposed left operand is multiplied from a padded copy when its
/// column stride is a multiple of 4 KiB, and from a row-major copy when the
/// product has 512 columns or more (`matmul::lhs_copy`): the result is the
/// product's and the operand is unchanged, padded (f32 at 1024 rows, f64
/// at 512, a batch), read in place (1000 and 1040 rows), and transposed
/// (f32 at 1024 and 1000 rows, f64 at 200, sizes off the copy's 16-element
/// blocks included).
#[test]
fn a_transposed_left_operand_multiplies_exactly_from_either_copy() {
    let _g = lock();
    for (dt, m, k, n) in [
        (DType::F32, 1024, 96, 96),
        (DType::F64, 512, 96, 96),
        (DType::F32, 1000, 96, 96),
        (DType::F32, 1040, 96, 96),
        (DType::F32, 1024, 40, 512),
        (DType::F32, 1000, 37, 520),
        (DType::F64, 200, 77, 600),
    ] {
        let base = tensor(&[k, m], 21, dt);
        let before = base.to_vec::<f64>().unwrap();
        let a = base.t().unwrap();
        let b = tensor(&[k, n], 22, dt);
        check(
            &format!("{dt} g^T at m = {m}, k = {k}, n = {n}"),
            &a,
            &b,
            &a.matmul(&b).unwrap(),
        );
        assert_eq!(
            base.to_vec::<f64>().unwrap(),
            before,
            "{dt}: the operand is unchanged"
        );
        // Again: the second call runs on the kept scratch buffer.
        check(&format!("{dt} g^T again"), &a, &b, &a.matmul(&b).unwrap());
    }
    // A batch of such operands (each its own copy).
    let base = tensor(&[3, 64, 1024], 23, DType::F32);
    let a = base.transpose(1, 2).unwrap();
    let b = tensor(&[3, 64, 80], 24, DType::F32);
    check("batched g^T", &a, &b, &a.matmul(&b).unwrap());
}

#[test]
fn strided_operands_are_read_in_place() {
    let _g = lock();
    for dt in DTYPES {
        // Transposed: a = (base [7, 4]).t(), b = (base [5, 7]).t().
        let a = tensor(&[7, 4], 3, dt).t().unwrap();
        let b = tensor(&[5, 7], 4, dt).t().unwrap();
        check(&format!("{dt} transposed"), &a, &b, &a.matmul(&b).unwrap());
        // Step-sliced in both dims.
        let a = tensor(&[9, 20], 5, dt)
            .slice(0, 1, 9, 2)
            .unwrap()
            .slice(1, 0, 20, 3)
            .unwrap(); // [4, 7]
        let b = tensor(&[14, 11], 6, dt)
            .slice(0, 0, 14, 2)
            .unwrap()
            .slice(1, 2, 11, 2)
            .unwrap(); // [7, 5]
        assert!(!a.is_contiguous() && !b.is_contiguous());
        check(&format!("{dt} sliced"), &a, &b, &a.matmul(&b).unwrap());
        // Expanded: a row repeated (stride 0), a batch repeated (stride 0).
        let a = tensor(&[1, 7], 7, dt).expand(&[4, 7]).unwrap();
        let b = tensor(&[1, 7, 5], 8, dt).expand(&[3, 7, 5]).unwrap();
        check(&format!("{dt} expanded"), &a, &b, &a.matmul(&b).unwrap());
        // Permuted batch: [3, 4, 7] seen from a [4, 3, 7] base.
        let a = tensor(&[4, 3, 7], 9, dt).permute(&[1, 0, 2]).unwrap();
        let b = tensor(&[3, 5, 7], 10, dt).transpose(1, 2).unwrap();
        check(
            &format!("{dt} permuted batch"),
            &a,
            &b,
            &a.matmul(&b).unwrap(),
        );
        // A strided vector.
        let v = tensor(&[14], 11, dt).slice(0, 0, 14, 2).unwrap();
        let m = tensor(&[4, 7], 12, dt);
        check(
            &format!("{dt} strided vector"),
            &m,
            &v,
            &m.matmul(&v).unwrap(),
        );
        check(&format!("{dt} strided dot"), &v, &v, &v.matmul(&v).unwrap());
    }
}

#[test]
fn large_and_many_small_products() {
    let _g = lock();
    // One product large enough for gemm's threads (and row-parallel integers).
    for dt in [DType::F32, DType::F64, DType::I64, DType::BF16] {
        let a = tensor(&[96, 80], 13, dt);
        let b = tensor(&[112, 80], 14, dt).t().unwrap();
        check(&format!("{dt} 96x80x112"), &a, &b, &a.matmul(&b).unwrap());
    }
    // Many small products: batch elements in parallel.
    for dt in [DType::F32, DType::I32] {
        let a = tensor(&[64, 8, 9], 15, dt);
        let b = tensor(&[64, 9, 6], 16, dt);
        check(&format!("{dt} 64 small"), &a, &b, &a.matmul(&b).unwrap());
    }
}

#[test]
fn empty_dimensions() {
    let _g = lock();
    let a = Tensor::ones(&[3, 0], DType::F32, CPU).unwrap();
    let b = Tensor::ones(&[0, 4], DType::F32, CPU).unwrap();
    let c = a.matmul(&b).unwrap();
    assert_eq!(c.shape(), &[3, 4]);
    assert_eq!(c.to_vec::<f32>().unwrap(), vec![0.0; 12]);
    let ci = a
        .to_dtype(DType::I64)
        .unwrap()
        .matmul(&b.to_dtype(DType::I64).unwrap())
        .unwrap();
    assert_eq!(ci.to_vec::<i64>().unwrap(), vec![0; 12]);
    let d = Tensor::ones(&[0], DType::F64, CPU).unwrap();
    assert_eq!(d.matmul(&d).unwrap().item::<f64>().unwrap(), 0.0);
    let e = Tensor::ones(&[0, 5], DType::F32, CPU).unwrap();
    let f = Tensor::ones(&[5, 2], DType::F32, CPU).unwrap();
    assert_eq!(e.matmul(&f).unwrap().shape(), &[0, 2]);
    let g = Tensor::ones(&[0, 2, 5], DType::F32, CPU).unwrap();
    assert_eq!(g.matmul(&f).unwrap().shape(), &[0, 2, 2]);
}

#[test]
fn matmul_out_allocates_nothing() {
    let _g = lock();
    let a = tensor(&[2, 64, 48], 17, DType::F32);
    let b = tensor(&[48, 40], 18, DType::F32);
    let mut out = Tensor::zeros(&[2, 64, 40], DType::F32, CPU).unwrap();
    let big_a = tensor(&[128, 128], 19, DType::F32);
    let mut big_out = Tensor::zeros(&[128, 128], DType::F32, CPU).unwrap();
    // Warm up (gemm's own scratch is on the system heap, not tensor memory).
    a.matmul_out(&b, &mut out).unwrap();
    let before = memory::memory_stats(CPU);
    let v0 = out.version();
    a.matmul_out(&b, &mut out).unwrap();
    big_a.matmul_out(&big_a.t().unwrap(), &mut big_out).unwrap();
    let after = memory::memory_stats(CPU);
    assert_eq!(
        after.allocation.all.allocated,
        before.allocation.all.allocated
    );
    assert_eq!(
        after.allocated_bytes.all.current,
        before.allocated_bytes.all.current
    );
    assert!(out.version() > v0, "the write bumps the version");
    check("out", &a, &b, &out);
    check("big out", &big_a, &big_a.t().unwrap(), &big_out);
    // A transposed output view is written through its strides.
    let mut base = Tensor::zeros(&[40, 64], DType::F64, CPU).unwrap();
    let (a64, b64) = (
        tensor(&[64, 48], 20, DType::F64),
        tensor(&[48, 40], 21, DType::F64),
    );
    {
        let mut view = base.t().unwrap();
        a64.matmul_out(&b64, &mut view).unwrap();
    }
    check("transposed out", &a64, &b64, &base.t().unwrap());
    // Vector cases into rank-0 and rank-1 outputs.
    let v = tensor(&[48], 22, DType::F32);
    let mut s = Tensor::zeros(&[], DType::F32, CPU).unwrap();
    v.matmul_out(&v, &mut s).unwrap();
    check("dot out", &v, &v, &s);
    let mut r = Tensor::zeros(&[40], DType::F32, CPU).unwrap();
    v.matmul_out(&b, &mut r).unwrap();
    check("vector-matrix out", &v, &b, &r);
    let _ = &mut base;
}

fn is_op(e: &Error, op: &str) -> bool {
    e.to_string().starts_with(&format!("{op}:"))
}

#[test]
fn bad_inputs_are_errors_naming_the_op_and_shapes() {
    let _g = lock();
    let a = Tensor::ones(&[2, 3], DType::F32, CPU).unwrap();
    let b = Tensor::ones(&[4, 5], DType::F32, CPU).unwrap();
    // Inner dimensions.
    let e = a.matmul(&b).unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { op: "matmul", .. }),
        "{e:?}"
    );
    let msg = e.to_string();
    assert!(
        is_op(&e, "matmul")
            && msg.contains("[2, 3]")
            && msg.contains("[4, 5]")
            && msg.contains("inner"),
        "{msg}"
    );
    let v = Tensor::ones(&[4], DType::F32, CPU).unwrap();
    assert!(matches!(
        a.matmul(&v),
        Err(Error::ShapeMismatch { op: "matmul", .. })
    ));
    assert!(matches!(
        v.matmul(&a),
        Err(Error::ShapeMismatch { op: "matmul", .. })
    ));
    // Rank 0.
    let s = Tensor::scalar(1.0f32, CPU).unwrap();
    for e in [s.matmul(&a).unwrap_err(), a.matmul(&s).unwrap_err()] {
        assert!(
            matches!(e, Error::ShapeMismatch { op: "matmul", .. }),
            "{e:?}"
        );
        assert!(e.to_string().contains("at least 1 dimension"), "{e}");
    }
    // Batch dims that do not broadcast.
    let x = Tensor::ones(&[2, 2, 3], DType::F32, CPU).unwrap();
    let y = Tensor::ones(&[3, 3, 4], DType::F32, CPU).unwrap();
    let e = x.matmul(&y).unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { op: "matmul", .. }),
        "{e:?}"
    );
    // Dtypes must match (no promotion), and bool has no matmul.
    let d = Tensor::ones(&[3, 2], DType::F64, CPU).unwrap();
    let e = a.matmul(&d).unwrap_err();
    assert!(
        matches!(
            e,
            Error::DTypeMismatch {
                op: "matmul",
                got: DType::F64,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(
        e.to_string().contains("float32") && e.to_string().contains("float64"),
        "{e}"
    );
    let bb = Tensor::ones(&[3, 3], DType::Bool, CPU).unwrap();
    assert!(matches!(
        bb.matmul(&bb),
        Err(Error::DTypeMismatch {
            op: "matmul",
            got: DType::Bool,
            ..
        })
    ));
    // matmul_out: wrong shape, wrong dtype, an expanded output, an output that aliases an input.
    let c = Tensor::ones(&[3, 4], DType::F32, CPU).unwrap();
    let mut wrong = Tensor::zeros(&[2, 5], DType::F32, CPU).unwrap();
    let e = a.matmul_out(&c, &mut wrong).unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { op: "matmul", .. }),
        "{e:?}"
    );
    assert!(
        e.to_string().contains("[2, 5]") && e.to_string().contains("[2, 4]"),
        "{e}"
    );
    let mut wrong_dt = Tensor::zeros(&[2, 4], DType::F64, CPU).unwrap();
    let e = a.matmul_out(&c, &mut wrong_dt).unwrap_err();
    assert!(
        matches!(
            e,
            Error::DTypeMismatch {
                op: "matmul",
                got: DType::F64,
                ..
            }
        ),
        "{e:?}"
    );
    let mut expanded = Tensor::zeros(&[1, 4], DType::F32, CPU)
        .unwrap()
        .expand(&[2, 4])
        .unwrap();
    let e = a.matmul_out(&c, &mut expanded).unwrap_err();
    assert!(
        matches!(e, Error::InvalidInPlace { op: "matmul", .. }),
        "{e:?}"
    );
    let sq = Tensor::ones(&[3, 3], DType::F32, CPU).unwrap();
    let mut alias = sq.alias();
    let e = sq.matmul_out(&sq, &mut alias).unwrap_err();
    assert!(
        matches!(e, Error::InvalidInPlace { op: "matmul", .. }),
        "{e:?}"
    );
    assert_eq!(
        sq.to_vec::<f32>().unwrap(),
        vec![1.0; 9],
        "nothing was written"
    );
}

/// `x @ w^T + b` on row-major f64 data, longhand: (shape, values).
fn naive_linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> (Vec<usize>, Vec<f64>) {
    let (xv, wv) = (x.to_vec::<f64>().unwrap(), w.to_vec::<f64>().unwrap());
    let bv = b.map(|b| b.to_vec::<f64>().unwrap());
    let (n, k) = (w.shape()[0], w.shape()[1]);
    let m: usize = x.shape()[..x.rank() - 1].iter().product();
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut acc = bv.as_ref().map_or(0.0, |b| b[j]);
            for p in 0..k {
                acc += xv[i * k + p] * wv[j * k + p];
            }
            out[i * n + j] = acc;
        }
    }
    let mut shape = x.shape()[..x.rank() - 1].to_vec();
    shape.push(n);
    (shape, out)
}

fn check_linear(what: &str, x: &Tensor, w: &Tensor, b: Option<&Tensor>) {
    let got = x.linear(w, b).unwrap();
    let (shape, want) = naive_linear(x, w, b);
    assert_eq!(got.shape(), shape.as_slice(), "{what}: shape");
    assert_eq!(got.dtype(), x.dtype(), "{what}: dtype");
    let dt = x.dtype();
    for (i, (&x, &w)) in got.to_vec::<f64>().unwrap().iter().zip(&want).enumerate() {
        let w = match dt {
            DType::U8 => (w as i64 as u8) as f64,
            DType::I32 => (w as i64 as i32) as f64,
            DType::F16 => tensorscope::f16::from_f64(w).to_f64(),
            DType::BF16 => tensorscope::bf16::from_f64(w).to_f64(),
            DType::F32 => w as f32 as f64,
            _ => w,
        };
        let tol = match dt {
            DType::F16 => 2e-3 * w.abs().max(8.0),
            DType::BF16 => 8e-3 * w.abs().max(8.0),
            DType::F32 => 1e-6 * w.abs().max(1.0),
            _ => 0.0,
        };
        assert!(
            (x - w).abs() <= tol,
            "{what}: element {i}: got {x}, want {w}"
        );
    }
}

#[test]
fn linear_matches_a_naive_reference() {
    let _g = lock();
    for dt in DTYPES {
        let x = tensor(&[5, 4], 31, dt);
        let w = tensor(&[3, 4], 32, dt);
        let b = tensor(&[3], 33, dt);
        check_linear(&format!("{dt} dense"), &x, &w, Some(&b));
        check_linear(&format!("{dt} no bias"), &x, &w, None);
        // Transposed input and weight, a step-sliced bias.
        let xt = tensor(&[4, 5], 34, dt).t().unwrap();
        let wt = tensor(&[4, 3], 35, dt).t().unwrap();
        let bs = tensor(&[6], 36, dt).slice(0, 0, 6, 2).unwrap();
        assert!(!xt.is_contiguous() && !wt.is_contiguous() && !bs.is_contiguous());
        check_linear(&format!("{dt} strided"), &xt, &wt, Some(&bs));
        // Expanded input rows and an expanded bias (stride 0).
        let xe = tensor(&[1, 4], 37, dt).expand(&[6, 4]).unwrap();
        let be = tensor(&[1], 38, dt).expand(&[3]).unwrap();
        check_linear(&format!("{dt} expanded"), &xe, &w, Some(&be));
        // Rank 3 (a permuted batch) and rank 1 inputs.
        let x3 = tensor(&[5, 2, 4], 39, dt).permute(&[1, 0, 2]).unwrap();
        check_linear(&format!("{dt} rank 3"), &x3, &w, Some(&b));
        let x1 = tensor(&[4], 40, dt);
        check_linear(&format!("{dt} rank 1"), &x1, &w, Some(&b));
        // Empty batch, and in_features = 0 (the output is the bias).
        let x0 = tensor(&[0, 4], 41, dt);
        check_linear(&format!("{dt} empty batch"), &x0, &w, Some(&b));
        let xk = tensor(&[5, 0], 42, dt);
        let wk = tensor(&[3, 0], 43, dt);
        check_linear(&format!("{dt} k = 0"), &xk, &wk, Some(&b));
        check_linear(&format!("{dt} k = 0, no bias"), &xk, &wk, None);
    }
    // Large enough for the column-major scratch route (m, n >= 16) and
    // gemm's parallel path, with strided operands and a strided bias.
    for dt in [DType::F32, DType::F64] {
        let x = tensor(&[64, 96], 44, dt);
        let w = tensor(&[80, 96], 45, dt);
        let b = tensor(&[80], 46, dt);
        check_linear(&format!("{dt} large"), &x, &w, Some(&b));
        check_linear(&format!("{dt} large, no bias"), &x, &w, None);
        let xt = tensor(&[96, 40], 47, dt).t().unwrap();
        let wt = tensor(&[96, 33], 48, dt).t().unwrap();
        let bs = tensor(&[99], 49, dt).slice(0, 0, 99, 3).unwrap();
        check_linear(&format!("{dt} large strided"), &xt, &wt, Some(&bs));
        let x3 = tensor(&[3, 17, 96], 50, dt);
        check_linear(&format!("{dt} large rank 3"), &x3, &w, Some(&b));
    }
}

#[test]
fn linear_bad_inputs_are_errors_naming_the_op() {
    let _g = lock();
    let x = Tensor::ones(&[2, 3], DType::F32, CPU).unwrap();
    let w = Tensor::ones(&[4, 3], DType::F32, CPU).unwrap();
    let b = Tensor::ones(&[4], DType::F32, CPU).unwrap();
    let shape_err = |r: tensorscope::Result<Tensor>, needle: &str| {
        let e = r.unwrap_err();
        assert!(
            matches!(e, Error::ShapeMismatch { op: "linear", .. }),
            "{e:?}"
        );
        assert!(is_op(&e, "linear") && e.to_string().contains(needle), "{e}");
    };
    // in_features differ; weight of rank 1; rank-0 input.
    shape_err(x.linear(&w.t().unwrap(), None), "[2, 3]");
    shape_err(x.linear(&b, None), "[4]");
    shape_err(
        Tensor::scalar(1.0f32, CPU).unwrap().linear(&w, None),
        "[4, 3]",
    );
    // A bias of the wrong shape.
    let b2 = Tensor::ones(&[3], DType::F32, CPU).unwrap();
    shape_err(x.linear(&w, Some(&b2)), "bias");
    let b3 = Tensor::ones(&[1, 4], DType::F32, CPU).unwrap();
    shape_err(x.linear(&w, Some(&b3)), "[1, 4]");
    // Dtypes: no promotion; bool refused.
    let w64 = w.to_dtype(DType::F64).unwrap();
    let b64 = b.to_dtype(DType::F64).unwrap();
    for e in [
        x.linear(&w64, None).unwrap_err(),
        x.linear(&w, Some(&b64)).unwrap_err(),
    ] {
        assert!(
            matches!(e, Error::DTypeMismatch { op: "linear", .. }),
            "{e:?}"
        );
        assert!(e.to_string().contains("float64"), "{e}");
    }
    let xb = x.to_dtype(DType::Bool).unwrap();
    let wb = w.to_dtype(DType::Bool).unwrap();
    let e = xb.linear(&wb, None).unwrap_err();
    assert!(
        matches!(e, Error::DTypeMismatch { op: "linear", .. }),
        "{e:?}"
    );
}
