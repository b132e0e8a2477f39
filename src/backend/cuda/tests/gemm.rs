//! The cuBLAS row/column-major plan against an emulated column-major GEMM,
//! and cuBLAS's own argument checks over every small layout (no GPU).

use super::*;

/// A column-major GEMM exactly as cuBLAS defines it, over one f64 memory
/// (pointers and strides in elements).
fn emulate(p: &GemmPlan, mem: &mut [f64]) {
    for bt in 0..p.batch {
        let (a0, b0, c0) = (
            p.a as usize + bt * p.stride_a,
            p.b as usize + bt * p.stride_b,
            p.c as usize + bt * p.stride_c,
        );
        for i in 0..p.m {
            for j in 0..p.n {
                let mut acc = 0.0;
                for l in 0..p.k {
                    let av = if p.transa {
                        mem[a0 + l + i * p.lda]
                    } else {
                        mem[a0 + i + l * p.lda]
                    };
                    let bv = if p.transb {
                        mem[b0 + j + l * p.ldb]
                    } else {
                        mem[b0 + l + j * p.ldb]
                    };
                    acc += av * bv;
                }
                mem[c0 + i + j * p.ldc] = acc;
            }
        }
    }
}

fn elem(m: &Mat, b: usize, r: usize, c: usize) -> usize {
    m.ptr as usize + b * m.bs + r * m.rs + c * m.cs
}

/// Lays out A (M×K) and B (K×N) in memory with the given strides, runs the
/// plan through the emulator, and compares with a naive row-major product.
fn check_plan(
    m: usize,
    k: usize,
    n: usize,
    batch: usize,
    a_rc: (usize, usize, usize),
    b_rc: (usize, usize, usize),
) {
    let mem_len = 100_000;
    let mut mem = vec![f64::NAN; mem_len];
    let a = Mat {
        ptr: 10,
        rows: m,
        cols: k,
        rs: a_rc.0,
        cs: a_rc.1,
        bs: a_rc.2,
    };
    let b = Mat {
        ptr: 30_000,
        rows: k,
        cols: n,
        rs: b_rc.0,
        cs: b_rc.1,
        bs: b_rc.2,
    };
    let c = Mat {
        ptr: 60_000,
        rows: m,
        cols: n,
        rs: n + 3,
        cs: 1,
        bs: m * (n + 3),
    };
    for bt in 0..batch {
        for r in 0..m {
            for q in 0..k {
                mem[elem(&a, bt, r, q)] = (bt * 7 + r * 3 + q) as f64 * 0.5 - 4.0;
            }
        }
        for r in 0..k {
            for q in 0..n {
                mem[elem(&b, bt, r, q)] = ((bt + 1) * (r + 2 * q) % 11) as f64 - 5.0;
            }
        }
    }
    let p = plan(&a, &b, &c, batch).expect("expressible");
    emulate(&p, &mut mem);
    for bt in 0..batch {
        for r in 0..m {
            for q in 0..n {
                let want: f64 = (0..k)
                    .map(|l| mem[elem(&a, bt, r, l)] * mem[elem(&b, bt, l, q)])
                    .sum();
                assert_eq!(
                    mem[elem(&c, bt, r, q)],
                    want,
                    "batch {bt} [{r},{q}] (a {a_rc:?}, b {b_rc:?})"
                );
            }
        }
    }
}

#[test]
fn gemm_plan_matches_row_major_product() {
    let (m, k, n) = (5, 4, 3);
    // Row-major A and B.
    check_plan(m, k, n, 1, (k, 1, 0), (n, 1, 0));
    // Transposed (column-major) A, row-major B, and the reverse.
    check_plan(m, k, n, 1, (1, m, 0), (n, 1, 0));
    check_plan(m, k, n, 1, (k, 1, 0), (1, k, 0));
    check_plan(m, k, n, 1, (1, m, 0), (1, k, 0));
    // Padded leading dimensions.
    check_plan(m, k, n, 1, (k + 2, 1, 0), (1, k + 5, 0));
    // Batched, with B broadcast across the batch (batch stride 0).
    check_plan(m, k, n, 3, (k, 1, m * k + 1), (n, 1, 0));
    check_plan(m, k, n, 2, (1, m, m * k), (1, k, k * n));
    // Degenerate shapes: one row, one column, K = 1.
    check_plan(1, k, n, 1, (k, 1, 0), (n, 1, 0));
    check_plan(m, k, 1, 1, (k, 1, 0), (1, 1, 0));
    check_plan(m, 1, n, 1, (1, 1, 0), (n, 1, 0));
}

#[test]
fn gemm_plan_refuses_what_cublas_cannot_express() {
    let a = Mat {
        ptr: 0,
        rows: 4,
        cols: 4,
        rs: 8,
        cs: 2,
        bs: 0,
    };
    assert_eq!(storage_order(&a), None, "no unit stride");
    let ok = Mat {
        ptr: 0,
        rows: 4,
        cols: 4,
        rs: 4,
        cs: 1,
        bs: 0,
    };
    let ct = Mat {
        ptr: 0,
        rows: 4,
        cols: 4,
        rs: 1,
        cs: 4,
        bs: 0,
    };
    assert!(
        plan(&ok, &ok, &ct, 1).is_none(),
        "a column-major output is written through a copy"
    );
    assert!(plan(&a, &ok, &ok, 1).is_none());
    // A broadcast column (row stride 0) has no valid leading dimension.
    let bc = Mat {
        ptr: 0,
        rows: 4,
        cols: 1,
        rs: 0,
        cs: 1,
        bs: 0,
    };
    assert_eq!(storage_order(&bc), None);
}

// ------------------------------------------- host-side review (rev-host) ---

/// cuBLAS's own argument checks for `cublasGemmStridedBatchedEx` (it answers
/// `CUBLAS_STATUS_INVALID_VALUE` otherwise): `m, n, k >= 0`, and each
/// leading dimension at least the row count of the matrix as stored.
fn cublas_accepts(p: &GemmPlan) -> bool {
    let rows_a = if p.transa { p.k } else { p.m };
    let rows_b = if p.transb { p.n } else { p.k };
    p.lda >= rows_a.max(1) && p.ldb >= rows_b.max(1) && p.ldc >= p.m.max(1)
}

#[test]
fn every_gemm_plan_is_one_cublas_accepts_and_computes_the_product() {
    // Every small shape and every stride pattern (0 = broadcast, 1 = unit,
    // larger = padded or transposed): whatever `plan` accepts must pass
    // cuBLAS's checks and compute the row-major product.
    let strides = [0usize, 1, 2, 3, 7];
    let mut accepted = 0;
    for (m, k, n) in [
        (1, 1, 1),
        (1, 3, 2),
        (3, 1, 2),
        (2, 3, 1),
        (3, 2, 4),
        (4, 4, 4),
    ] {
        for &ars in &strides {
            for &acs in &strides {
                for &brs in &strides {
                    for &bcs in &strides {
                        let a = Mat {
                            ptr: 10,
                            rows: m,
                            cols: k,
                            rs: ars,
                            cs: acs,
                            bs: 0,
                        };
                        let b = Mat {
                            ptr: 500,
                            rows: k,
                            cols: n,
                            rs: brs,
                            cs: bcs,
                            bs: 0,
                        };
                        let c = Mat {
                            ptr: 1000,
                            rows: m,
                            cols: n,
                            rs: n,
                            cs: 1,
                            bs: 0,
                        };
                        let Some(p) = plan(&a, &b, &c, 1) else {
                            continue;
                        };
                        accepted += 1;
                        assert!(cublas_accepts(&p), "{a:?} {b:?}: {p:?}");
                        let mut mem = vec![0.0; 2000];
                        for r in 0..m {
                            for q in 0..k {
                                mem[elem(&a, 0, r, q)] = (r * 5 + q) as f64 - 3.0;
                            }
                        }
                        for r in 0..k {
                            for q in 0..n {
                                mem[elem(&b, 0, r, q)] = (r * 2 + q * 3) as f64 - 4.0;
                            }
                        }
                        // Aliased elements (stride 0 or overlapping rows)
                        // hold the last value written: read the inputs back.
                        let av: Vec<f64> =
                            (0..m * k).map(|i| mem[elem(&a, 0, i / k, i % k)]).collect();
                        let bv: Vec<f64> =
                            (0..k * n).map(|i| mem[elem(&b, 0, i / n, i % n)]).collect();
                        emulate(&p, &mut mem);
                        for r in 0..m {
                            for q in 0..n {
                                let want: f64 = (0..k).map(|l| av[r * k + l] * bv[l * n + q]).sum();
                                assert_eq!(mem[elem(&c, 0, r, q)], want, "{a:?} {b:?} [{r},{q}]");
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(accepted > 100, "only {accepted} layouts accepted");
}
