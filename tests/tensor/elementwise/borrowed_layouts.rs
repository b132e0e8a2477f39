//! equal shapes: borrowed layouts

use super::*;

/// Operands of one shape and dtype take the fast path that hands the kernel
/// their own layouts (no broadcast layout is built). Its results must match
/// the reference whatever those layouts are: expanded (stride 0, from either
/// side), offset views (narrow), transposed, rank 0 and one element; for
/// arithmetic, comparisons and bool; and its errors must be the general
/// path's.
#[test]
fn equal_shapes_use_the_operands_own_layouts() {
    let _g = lock();
    let before = memory::memory_allocated(tensorscope::Device::Cpu);
    // f64 tensors (`from_slice` of f64 values): the reference is exact.
    let va = data_for(DType::F32, 4, 11, -5.0, 5.0);
    let vb = data_for(DType::F32, 3, 12, -5.0, 5.0);
    let dev = tensorscope::Device::Cpu;
    // a: [1, 4] expanded to [3, 4]; b: [3, 1] expanded to [3, 4].
    let a0 = Tensor::from_slice(&va, &[1, 4], dev).unwrap();
    let b0 = Tensor::from_slice(&vb, &[3, 1], dev).unwrap();
    let a = a0.expand(&[3, 4]).unwrap();
    let b = b0.expand(&[3, 4]).unwrap();
    let want_a: Vec<f64> = (0..12).map(|i| va[i % 4]).collect();
    let want_b: Vec<f64> = (0..12).map(|i| vb[i / 4]).collect();
    // c: rows 1..4 of a [5, 4] tensor (offset 4); d: the transpose of a [4, 3].
    let vc = data_for(DType::F32, 20, 13, -5.0, 5.0);
    let c = Tensor::from_slice(&vc, &[5, 4], dev)
        .unwrap()
        .narrow(0, 1, 3)
        .unwrap();
    let want_c: Vec<f64> = vc[4..16].to_vec();
    let vd = data_for(DType::F32, 12, 14, -5.0, 5.0);
    let d = Tensor::from_slice(&vd, &[4, 3], dev).unwrap().t().unwrap();
    let want_d: Vec<f64> = (0..12).map(|i| vd[(i % 4) * 3 + i / 4]).collect();
    // (x, x's values, y, y's values, what)
    type Case<'a> = (&'a Tensor, &'a Vec<f64>, &'a Tensor, &'a Vec<f64>, &'a str);
    let cases: [Case; 5] = [
        (&a, &want_a, &b, &want_b, "expanded rows + expanded columns"),
        (&b, &want_b, &c, &want_c, "expanded + offset view"),
        (&c, &want_c, &d, &want_d, "offset view + transposed"),
        (&d, &want_d, &a, &want_a, "transposed + expanded"),
        (&c, &want_c, &c, &want_c, "one tensor twice"),
    ];
    for (x, wx, y, wy, what) in cases {
        assert_eq!(x.shape(), y.shape(), "{what}");
        for op in [Bin::Add, Bin::Sub, Bin::Mul, Bin::Max, Bin::Min] {
            let r = bin(op, x, y).unwrap();
            let f = ref_op(op, DType::F64);
            let want: Vec<f64> = wx
                .iter()
                .zip(wy.iter())
                .map(|(&p, &q)| store(DType::F64, f(p, q)))
                .collect();
            assert_eq!(r.shape(), &[3, 4], "{what} {op:?}");
            assert_eq!(r.dtype(), DType::F64, "{what} {op:?}");
            assert!(r.is_contiguous(), "{what} {op:?}");
            assert_close(&read(&r), &want, 0.0, &format!("{what} {op:?}"));
        }
        let lt = x.lt(y).unwrap();
        assert_eq!(lt.dtype(), DType::Bool, "{what}");
        let want: Vec<f64> = wx
            .iter()
            .zip(wy.iter())
            .map(|(p, q)| f64::from(u8::from(p < q)))
            .collect();
        assert_eq!(read(&lt), want, "{what}: lt");
    }
    // Rank 0 and one element.
    let s = Tensor::from_slice(&[2.5f32], &[], dev).unwrap();
    assert_eq!(s.mul(&s).unwrap().item::<f64>().unwrap(), 6.25);
    let one = Tensor::from_slice(&[1.5f64], &[1], dev).unwrap();
    let mut x = Tensor::zeros(&[1], DType::F64, dev).unwrap();
    for _ in 0..100 {
        x = x.add(&one).unwrap();
    }
    assert_eq!(
        x.item::<f64>().unwrap(),
        150.0,
        "a chain of equal-shape adds"
    );
    // Bool on the fast path: add is `or`; sub is an error naming the op.
    let p = Tensor::from_slice(&[true, false, false], &[3], dev).unwrap();
    let q = Tensor::from_slice(&[false, false, true], &[3], dev).unwrap();
    assert_eq!(read(&p.add(&q).unwrap()), vec![1.0, 0.0, 1.0]);
    let e = p.sub(&q).unwrap_err();
    assert!(matches!(e, Error::DTypeMismatch { .. }), "{e}");
    assert!(e.to_string().contains("sub"), "{e}");
    // Equal shapes of different dtypes promote (the general path).
    let i = Tensor::from_slice(&[1i32, 2, 3], &[3], dev).unwrap();
    let r = i.div(&i).unwrap();
    assert_eq!(r.dtype(), DType::F32);
    assert_eq!(read(&r), vec![1.0, 1.0, 1.0]);
    drop((a, b, a0, b0, c, d, s, one, x, p, q, i, r));
    assert_eq!(
        memory::memory_allocated(dev),
        before,
        "every result and operand was returned to the allocator"
    );
}
