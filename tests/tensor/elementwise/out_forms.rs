//! out forms

use super::*;

fn alloc_totals() -> (u64, u64) {
    let s = memory::memory_stats(CPU);
    (s.allocation.all.allocated, s.allocated_bytes.all.allocated)
}

#[test]
fn out_forms_write_the_result_and_allocate_nothing() {
    let _g = lock();
    let mut seed = 6000;
    for dt in NUMERIC {
        for (la, lb) in LAY_PAIRS {
            for lo in [Lay::Contig, Lay::Transposed, Lay::Stepped] {
                seed += 2;
                let (sa, sb) = (&[4usize, 5][..], &[5usize][..]);
                for op in BINS {
                    let (va, vb) = operands(op, dt, 20, 5, seed);
                    let a = make(&va, sa, dt, la);
                    let b = make(&vb, sb, dt, lb);
                    let rdt = result_dtype(op, dt, dt).unwrap();
                    let mut out = make(&[0.0; 20], sa, rdt, lo);
                    let ver = out.version();
                    let ctx = format!("{op:?}_out {dt} {la:?}/{lb:?} into {lo:?}");
                    let before = alloc_totals();
                    bin_out(op, &a, &b, &mut out).expect(&ctx);
                    if rdt == dt {
                        // (Integer division computes in f32: its inputs are converted first.)
                        assert_eq!(alloc_totals(), before, "{ctx}: the allocator was called");
                    }
                    assert_eq!(out.version(), ver + 1, "{ctx}");
                    let (want, _) = ref_binary(&va, sa, &vb, sb, ref_op(op, rdt));
                    let want: Vec<f64> = want.iter().map(|&v| store(rdt, v)).collect();
                    assert_close(&read(&out), &want, tol(op, rdt), &ctx);
                }
                for op in CMPS {
                    let va = data_for(dt, 20, seed, -3.0, 3.0);
                    let vb = data_for(dt, 5, seed + 1, -3.0, 3.0);
                    let a = make(&va, sa, dt, la);
                    let b = make(&vb, sb, dt, lb);
                    let mut out = make(&[0.0; 20], sa, DType::Bool, lo);
                    let ctx = format!("{op:?}_out {dt} into {lo:?}");
                    let before = alloc_totals();
                    cmp_out(op, &a, &b, &mut out).expect(&ctx);
                    assert_eq!(alloc_totals(), before, "{ctx}: the allocator was called");
                    let (want, _) = ref_binary(&va, sa, &vb, sb, ref_cmp(op));
                    assert_exact(&read(&out), &want, &ctx);
                }
            }
        }
    }
}

#[test]
fn out_forms_check_shape_dtype_and_cast() {
    let _g = lock();
    let a = Tensor::ones(&[2, 3], DType::F32, CPU).unwrap();
    let mut wrong = Tensor::zeros(&[3, 2], DType::F32, CPU).unwrap();
    let e = a.add_out(&a, &mut wrong).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { op: "add", .. }), "{e}");
    assert!(
        e.to_string().contains("[2, 3]") && e.to_string().contains("[3, 2]"),
        "{e}"
    );
    let mut int_out = Tensor::zeros(&[2, 3], DType::I64, CPU).unwrap();
    let e = a.add_out(&a, &mut int_out).unwrap_err();
    assert!(matches!(e, Error::DTypeMismatch { op: "add", .. }), "{e}");
    let mut bool_out = Tensor::zeros(&[2, 3], DType::Bool, CPU).unwrap();
    let i = Tensor::ones(&[2, 3], DType::I64, CPU).unwrap();
    assert!(matches!(
        i.add_out(&i, &mut bool_out),
        Err(Error::DTypeMismatch { .. })
    ));
    // A comparison may be written into a numeric out (bool casts to anything).
    let mut f_out = Tensor::zeros(&[2, 3], DType::F32, CPU).unwrap();
    a.eq_out(&a, &mut f_out).unwrap();
    assert_eq!(f_out.to_vec::<f32>().unwrap(), vec![1.0; 6]);
    // A same-category cast: f64 result into an f32 out.
    let d = Tensor::full(&[2, 3], 0.5, DType::F64, CPU).unwrap();
    let mut o = Tensor::zeros(&[2, 3], DType::F32, CPU).unwrap();
    a.add_out(&d, &mut o).unwrap();
    assert_eq!(o.to_vec::<f32>().unwrap(), vec![1.5; 6]);
}
