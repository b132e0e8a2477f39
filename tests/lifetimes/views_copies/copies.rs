//! Copies.

use super::*;

#[test]
fn copy_deep_clone_of_every_layout_and_dtype() {
    let _g = lock();
    for dt in ALL {
        for lay in LAYS {
            let v: Vec<f64> = data_for(dt, 12, 9, -5.0, 5.0)
                .iter()
                .map(|&x| store(dt, x))
                .collect();
            let t = make(&v, &[3, 4], dt, lay);
            let c = t.deep_clone().unwrap();
            assert_eq!(c.dtype(), dt);
            assert_copy(&c, &t, &v);
        }
    }
}

#[test]
fn copy_contiguous_copies_when_needed_aliases_when_contiguous() {
    let _g = lock();
    for lay in LAYS {
        let v = uniform(12, 3, -1.0, 1.0);
        let t = make(&v, &[3, 4], DType::F64, lay);
        let c = t.contiguous().unwrap();
        if lay == Lay::Contig {
            assert!(c.shares_storage(&t));
            assert_eq!(c.data_ptr(), t.data_ptr());
        } else {
            assert_copy(&c, &t, &v);
        }
    }
    // size-1 dims with odd strides still count as contiguous (PyTorch's rule)
    let x = arange(4).view(&[4, 1]).unwrap().t().unwrap(); // [1, 4], strides [1, 1]
    assert!(x.is_contiguous());
    assert!(x.contiguous().unwrap().shares_storage(&x));
    // a narrowed row is contiguous with an offset: aliased, offset kept
    let n = base234().select(0, 1).unwrap();
    let c = n.contiguous().unwrap();
    assert!(c.shares_storage(&n));
    assert_eq!(c.storage_offset(), 12);
}

#[test]
fn copy_to_dtype_converts_into_new_storage() {
    let _g = lock();
    let v = [-2.7, -0.5, 0.0, 0.4, 1.5, 300.0];
    let x = make(&v, &[2, 3], DType::F64, Lay::Transposed);
    for dt in ALL {
        if dt == DType::F64 {
            continue;
        }
        let c = x.to_dtype(dt).unwrap();
        assert_eq!(c.dtype(), dt);
        let want: Vec<f64> = v
            .iter()
            .map(|&z| match dt {
                DType::Bool => (z != 0.0) as u8 as f64,
                // PyTorch's casts: truncated into i64, then wrapped.
                DType::U8 => (z as i64 as u8) as f64,
                DType::I32 => (z as i64 as i32) as f64,
                DType::I64 => (z as i64) as f64,
                _ => store(dt, z),
            })
            .collect();
        assert_copy(&c, &x, &want);
    }
}
