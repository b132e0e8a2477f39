//! Issue 2 item 5: every view op.

use super::*;

#[test]
fn view_op_view() {
    let _g = lock();
    let x = base234();
    let v = x.view(&[3, -1, 2]).unwrap();
    assert_view(&v, &x, &[3, 4, 2], &[8, 2, 1], 0, |i| {
        i[0] * 8 + i[1] * 2 + i[2]
    });
    // a view of a narrowed tensor keeps its offset
    let n = x.narrow(1, 1, 2).unwrap(); // [2, 2, 4], offset 4
    let nv = n.view(&[2, 8]).unwrap();
    assert_view(&nv, &x, &[2, 8], &[12, 1], 4, |i| i[0] * 12 + 4 + i[1]);
    let e = x.transpose(0, 1).unwrap().view(&[24]).unwrap_err();
    assert!(matches!(e, Error::NotViewable { op: "view", .. }), "{e}");
    // a scalar views as all-ones shapes
    let s = Tensor::scalar(7.0f32, CPU).unwrap();
    assert_eq!(read(&s.view(&[1, 1]).unwrap()), vec![7.0]);
}

#[test]
fn view_op_reshape_is_a_view_when_strides_allow_a_copy_otherwise() {
    let _g = lock();
    let x = base234();
    // transposed but reshaped along the untouched dims: still a view
    let t = x.transpose(1, 2).unwrap(); // [2, 4, 3], strides [12, 1, 4]
    let r = t.reshape(&[2, 12]).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        !r.shares_storage(&x),
        "merging 4 and 3 with strides 1 and 4 needs a copy"
    );
    let r2 = t.reshape(&[1, 2, 4, 3]).unwrap();
    assert_view(&r2, &x, &[1, 2, 4, 3], &[24, 12, 1, 4], 0, |i| {
        i[1] * 12 + i[3] * 4 + i[2]
    });
    let want: Vec<f64> = (0..24)
        .map(|k| ((k / 12) * 12 + (k % 3) * 4 + (k % 12) / 3) as f64)
        .collect();
    assert_copy(&r, &x, &want);
    // stepped slice reshaped: copy
    let s = arange(10).slice(0, 0, 10, 2).unwrap();
    let rs = s.reshape(&[5]).unwrap();
    assert!(rs.shares_storage(&s), "same shape: view");
    let rs = s.reshape(&[5, 1]).unwrap();
    assert!(rs.shares_storage(&s), "adding a 1: view");
}

#[test]
fn view_op_flatten() {
    let _g = lock();
    let x = base234();
    let f = x.flatten(0, -1).unwrap();
    assert_view(&f, &x, &[24], &[1], 0, |i| i[0]);
    let f = x.flatten(1, 2).unwrap();
    assert_view(&f, &x, &[2, 12], &[12, 1], 0, |i| i[0] * 12 + i[1]);
    // non-contiguous: flatten copies (as reshape)
    let t = x.transpose(0, 2).unwrap();
    let f = t.flatten(0, -1).unwrap();
    assert!(!f.shares_storage(&x));
    assert_eq!(read(&f), read(&t.contiguous().unwrap()));
    // flatten of a transposed tensor over the dims that remain mergeable: view
    let f = t.flatten(0, 0).unwrap();
    assert!(f.shares_storage(&x));
    assert_eq!(
        Tensor::scalar(1.0f32, CPU)
            .unwrap()
            .flatten(0, -1)
            .unwrap()
            .shape(),
        &[1]
    );
}

#[test]
fn view_op_transpose() {
    let _g = lock();
    let x = base234();
    let t = x.transpose(-1, 0).unwrap();
    assert_view(&t, &x, &[4, 3, 2], &[1, 4, 12], 0, |i| {
        i[2] * 12 + i[1] * 4 + i[0]
    });
    let tt = t.transpose(0, 2).unwrap();
    assert_eq!(tt.strides(), x.strides());
    assert!(tt.is_contiguous());
}

#[test]
fn view_op_t() {
    let _g = lock();
    let m = arange(12).view(&[3, 4]).unwrap();
    assert_view(&m.t().unwrap(), &m, &[4, 3], &[1, 4], 0, |i| {
        i[1] * 4 + i[0]
    });
    let v = arange(5);
    assert_view(&v.t().unwrap(), &v, &[5], &[1], 0, |i| i[0]);
    assert!(base234().t().is_err());
}

#[test]
fn view_op_permute() {
    let _g = lock();
    let x = base234();
    let p = x.permute(&[2, 0, 1]).unwrap();
    assert_view(&p, &x, &[4, 2, 3], &[1, 12, 4], 0, |i| {
        i[1] * 12 + i[2] * 4 + i[0]
    });
    let p = x.permute(&[-1, -3, -2]).unwrap();
    assert_eq!(p.shape(), &[4, 2, 3]);
}

#[test]
fn view_op_narrow() {
    let _g = lock();
    let x = base234();
    let n = x.narrow(2, 1, 2).unwrap();
    assert_view(&n, &x, &[2, 3, 2], &[12, 4, 1], 1, |i| {
        i[0] * 12 + i[1] * 4 + 1 + i[2]
    });
    let n = x.narrow(0, 1, 1).unwrap();
    assert_view(&n, &x, &[1, 3, 4], &[12, 4, 1], 12, |i| {
        12 + i[1] * 4 + i[2]
    });
    let e = x.narrow(2, 3, 2).unwrap_err();
    assert!(
        matches!(e, Error::IndexOutOfRange { op: "narrow", .. }),
        "{e}"
    );
    assert_eq!(x.narrow(2, 4, 0).unwrap().numel(), 0);
}

#[test]
fn view_op_step_slicing() {
    let _g = lock();
    let x = arange(20).view(&[4, 5]).unwrap();
    // x[1::2, ::3]
    let s = x.slice(0, 1, 4, 2).unwrap().slice(1, 0, 5, 3).unwrap();
    assert_view(&s, &x, &[2, 2], &[10, 3], 5, |i| {
        (1 + 2 * i[0]) * 5 + 3 * i[1]
    });
    // end past the size is clamped, as in Python
    let s = x.slice(1, 2, 100, 2).unwrap();
    assert_view(&s, &x, &[4, 2], &[5, 2], 2, |i| i[0] * 5 + 2 + 2 * i[1]);
    // a slice of a slice of a transpose
    let t = x.t().unwrap().slice(0, 1, 5, 2).unwrap();
    assert_view(&t, &x, &[2, 4], &[2, 5], 1, |i| i[1] * 5 + 1 + 2 * i[0]);
    assert!(x.slice(0, 0, 4, 0).is_err(), "step 0");
}

#[test]
fn view_op_select() {
    let _g = lock();
    let x = base234();
    let s = x.select(1, 2).unwrap();
    assert_view(&s, &x, &[2, 4], &[12, 1], 8, |i| i[0] * 12 + 8 + i[1]);
    let s = x.select(-1, -1).unwrap();
    assert_view(&s, &x, &[2, 3], &[12, 4], 3, |i| i[0] * 12 + i[1] * 4 + 3);
    let s = x
        .select(0, 1)
        .unwrap()
        .select(0, 1)
        .unwrap()
        .select(0, 1)
        .unwrap();
    assert_eq!(s.rank(), 0);
    assert_eq!(s.storage_offset(), 12 + 4 + 1);
    assert_eq!(s.item::<f32>().unwrap(), 17.0);
}

#[test]
fn view_op_squeeze_and_unsqueeze() {
    let _g = lock();
    let x = arange(6).view(&[2, 1, 3, 1]).unwrap();
    let s = x.squeeze_dim(1).unwrap();
    assert_view(&s, &x, &[2, 3, 1], &[3, 1, 1], 0, |i| i[0] * 3 + i[1]);
    let s = x.squeeze_dim(0).unwrap();
    assert_eq!(s.shape(), &[2, 1, 3, 1], "a size-2 dim is not squeezed");
    let u = x.squeeze().unsqueeze(-1).unwrap();
    assert_view(&u, &x, &[2, 3, 1], &[3, 1, 1], 0, |i| i[0] * 3 + i[1]);
    let u = x.squeeze().unsqueeze(0).unwrap();
    assert_view(&u, &x, &[1, 2, 3], &[6, 3, 1], 0, |i| i[1] * 3 + i[2]);
    // unsqueeze of a transposed tensor
    let t = x.squeeze().t().unwrap().unsqueeze(1).unwrap();
    assert_view(&t, &x, &[3, 1, 2], &[1, 6, 3], 0, |i| i[2] * 3 + i[0]);
}

#[test]
fn view_op_expand_uses_stride_0() {
    let _g = lock();
    let x = arange(3).view(&[1, 3]).unwrap();
    let e = x.expand(&[2, 4, 3]).unwrap();
    assert_view(&e, &x, &[2, 4, 3], &[0, 0, 1], 0, |i| i[2]);
    let e = x.expand(&[-1, 3]).unwrap();
    assert_eq!(e.strides(), &[3, 1]);
    let c = arange(4).view(&[4, 1]).unwrap();
    let e = c
        .expand_as(&Tensor::zeros(&[4, 5], DType::F32, CPU).unwrap())
        .unwrap();
    assert_view(&e, &c, &[4, 5], &[1, 0], 0, |i| i[0]);
    assert!(
        x.expand(&[2, 4]).is_err(),
        "a size-3 dim cannot expand to 4"
    );
}

#[test]
fn view_op_unbind() {
    let _g = lock();
    let x = base234();
    let parts = x.unbind(1).unwrap();
    assert_eq!(parts.len(), 3);
    for (j, p) in parts.iter().enumerate() {
        assert_view(p, &x, &[2, 4], &[12, 1], 4 * j, |i| {
            i[0] * 12 + 4 * j + i[1]
        });
    }
}

#[test]
fn view_op_chunk() {
    let _g = lock();
    let x = arange(10).view(&[2, 5]).unwrap();
    let c = x.chunk(3, 1).unwrap(); // sizes 2, 2, 1
    assert_eq!(c.len(), 3);
    for (k, (p, len)) in c.iter().zip([2usize, 2, 1]).enumerate() {
        assert_view(p, &x, &[2, len], &[5, 1], 2 * k, |i| {
            i[0] * 5 + 2 * k + i[1]
        });
    }
    assert_eq!(
        arange(6).chunk(4, 0).unwrap().len(),
        3,
        "pieces of 2: fewer chunks"
    );
    let empty = Tensor::zeros(&[0, 2], DType::F32, CPU).unwrap();
    let c = empty.chunk(3, 0).unwrap();
    assert_eq!(c.len(), 3, "PyTorch gives `chunks` empty pieces");
    assert!(c.iter().all(|p| p.shape() == [0, 2]));
}

#[test]
fn view_op_split() {
    let _g = lock();
    let x = arange(14).view(&[7, 2]).unwrap();
    let s = x.split(3, 0).unwrap(); // 3, 3, 1
    assert_eq!(s.len(), 3);
    for (k, (p, len)) in s.iter().zip([3usize, 3, 1]).enumerate() {
        assert_view(p, &x, &[len, 2], &[2, 1], 6 * k, |i| {
            (3 * k + i[0]) * 2 + i[1]
        });
    }
    let s = x.split_sizes(&[1, 4, 2], 0).unwrap();
    let starts = [0usize, 1, 5];
    for (p, (&len, &st)) in s.iter().zip([1usize, 4, 2].iter().zip(&starts)) {
        assert_view(p, &x, &[len, 2], &[2, 1], 2 * st, |i| {
            (st + i[0]) * 2 + i[1]
        });
    }
    assert!(x.split_sizes(&[1, 2], 0).is_err());
    assert!(x.split(0, 0).is_err());
}
