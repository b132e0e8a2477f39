//! 004 "Which Operations Create Views vs Copies?" (one test per row).

use super::*;

#[test]
fn row_view_and_reshape_are_views_reshape_copies_if_non_contiguous() {
    let _g = lock();
    let x = base234();
    let v = x.view(&[6, 4]).unwrap();
    assert_view(&v, &x, &[6, 4], &[4, 1], 0, |i| i[0] * 4 + i[1]);
    let r = x.reshape(&[4, -1]).unwrap();
    assert_view(&r, &x, &[4, 6], &[6, 1], 0, |i| i[0] * 6 + i[1]);
    // *reshape copies if non-contiguous (when no strides can express it)
    let t = x.transpose(1, 2).unwrap();
    assert!(t.view(&[24]).is_err());
    let c = t.reshape(&[24]).unwrap();
    let want: Vec<f64> = (0..24)
        .map(|k| {
            let (a, j, i) = (k / 12, (k / 3) % 4, k % 3);
            (a * 12 + i * 4 + j) as f64
        })
        .collect();
    assert_copy(&c, &x, &want);
}

#[test]
fn row_transpose_permute_and_t_are_views_changing_strides_not_data() {
    let _g = lock();
    let x = base234();
    let t = x.transpose(0, 2).unwrap();
    assert_view(&t, &x, &[4, 3, 2], &[1, 4, 12], 0, |i| {
        i[2] * 12 + i[1] * 4 + i[0]
    });
    let p = x.permute(&[1, 2, 0]).unwrap();
    assert_view(&p, &x, &[3, 4, 2], &[4, 1, 12], 0, |i| {
        i[2] * 12 + i[0] * 4 + i[1]
    });
    let m = arange(6).view(&[2, 3]).unwrap();
    let mt = m.t().unwrap(); // .T
    assert_view(&mt, &m, &[3, 2], &[1, 3], 0, |i| i[1] * 3 + i[0]);
}

#[test]
fn row_basic_slicing_is_a_view_adjusting_offset_and_strides() {
    let _g = lock();
    let x = base234();
    // x[:, 1:3]
    let s = x.slice(1, 1, 3, 1).unwrap();
    assert_view(&s, &x, &[2, 2, 4], &[12, 4, 1], 4, |i| {
        i[0] * 12 + (i[1] + 1) * 4 + i[2]
    });
    // x[..., 1::2]
    let s = x.slice(2, 1, 4, 2).unwrap();
    assert_view(&s, &x, &[2, 3, 2], &[12, 4, 2], 1, |i| {
        i[0] * 12 + i[1] * 4 + 1 + 2 * i[2]
    });
}

#[test]
fn row_squeeze_and_unsqueeze_are_views_adjusting_strides() {
    let _g = lock();
    let x = arange(6).view(&[1, 2, 1, 3]).unwrap();
    let s = x.squeeze();
    assert_view(&s, &x, &[2, 3], &[3, 1], 0, |i| i[0] * 3 + i[1]);
    let u = s.unsqueeze(1).unwrap();
    assert_view(&u, &x, &[2, 1, 3], &[3, 3, 1], 0, |i| i[0] * 3 + i[2]);
}

#[test]
fn row_expand_is_a_view_using_stride_0() {
    let _g = lock();
    let x = arange(3).view(&[3, 1]).unwrap();
    let e = x.expand(&[3, 4]).unwrap();
    assert_view(&e, &x, &[3, 4], &[1, 0], 0, |i| i[0]);
    assert_eq!(e.storage_nbytes(), x.storage_nbytes(), "no memory used");
}

#[test]
fn row_clone_always_copies_data() {
    let _g = lock();
    let x = base234();
    let c = x.deep_clone().unwrap();
    assert_copy(&c, &x, &(0..24).map(|k| k as f64).collect::<Vec<_>>());
}

#[test]
fn row_contiguous_copies_if_needed_returns_self_if_already_contiguous() {
    let _g = lock();
    let x = base234();
    let same = x.contiguous().unwrap();
    assert_view(&same, &x, &[2, 3, 4], &[4 * 3, 4, 1], 0, |i| {
        i[0] * 12 + i[1] * 4 + i[2]
    });
    let t = x.transpose(0, 1).unwrap();
    let c = t.contiguous().unwrap();
    let want: Vec<f64> = (0..24)
        .map(|k| {
            let (j, a, i) = (k / 8, (k / 4) % 2, k % 4);
            (a * 12 + j * 4 + i) as f64
        })
        .collect();
    assert_copy(&c, &x, &want);
}

#[test]
fn row_repeat_always_copies_data() {
    let _g = lock();
    // repeat() itself lands with the shape ops (ops/shape.rs); it is expand +
    // a contiguous copy, which is what is checked here: new storage, not stride 0.
    let x = arange(3);
    let r = x
        .unsqueeze(0)
        .unwrap()
        .expand(&[2, 3])
        .unwrap()
        .contiguous()
        .unwrap();
    assert_copy(&r, &x, &[0.0, 1.0, 2.0, 0.0, 1.0, 2.0]);
    assert_eq!(r.strides(), &[3, 1]);
}

#[test]
fn row_boolean_and_fancy_indexing_copy_data() {
    let _g = lock();
    // index_select / masked_select / gather land with the index ops
    // (ops/index.rs) and must give new storage. What exists now: the
    // out-of-place masked ops build a new tensor from a boolean mask.
    let x = arange(4);
    let mask = x.gt_scalar(1.5).unwrap();
    assert_copy(&mask, &x, &[0.0, 0.0, 1.0, 1.0]);
    let m = x.masked_fill(&mask, -1.0).unwrap();
    assert_copy(&m, &x, &[0.0, 1.0, -1.0, -1.0]);
    let w = Tensor::where_cond(&mask, &x, &x.neg().unwrap()).unwrap();
    assert_copy(&w, &x, &[0.0, -1.0, 2.0, 3.0]);
    assert_eq!(read(&x), vec![0.0, 1.0, 2.0, 3.0]);
}

#[test]
fn row_to_device_and_to_dtype_copy_unless_same_device_or_dtype() {
    let _g = lock();
    let x = base234();
    let d = x.to_dtype(DType::F64).unwrap();
    assert_copy(&d, &x, &(0..24).map(|k| k as f64).collect::<Vec<_>>());
    assert_eq!(d.dtype(), DType::F64);
    // same dtype / same device: no new storage
    assert!(x.to_dtype(DType::F32).unwrap().shares_storage(&x));
    assert!(x.to_device(Device::Cpu).unwrap().shares_storage(&x));
    // to(cuda) on a device this machine lacks is an error (cuda:0 without
    // a GPU; the copy itself is tested in tests/cuda/cuda.rs).
    let e = x
        .to_device(Device::Cuda(tensorscope::backend::cuda::device_count()))
        .unwrap_err();
    assert!(matches!(e, Error::DeviceUnavailable { .. }), "{e}");
}
