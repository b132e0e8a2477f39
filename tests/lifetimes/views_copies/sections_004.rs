//! 004 sections: views, copies, clone, detach, copy_, contiguous.

use super::*;

#[test]
fn section_what_is_a_view_modifying_the_view_changes_the_original() {
    let _g = lock();
    let original = arange(6);
    let view = original.view(&[2, 3]).unwrap();
    assert!(shares_storage(&original, &view));
    view.select(0, 0)
        .unwrap()
        .select(0, 0)
        .unwrap()
        .fill_(99.0)
        .unwrap(); // view[0, 0] = 99
    assert_eq!(original.select(0, 0).unwrap().item::<f32>().unwrap(), 99.0);
}

#[test]
fn section_what_is_a_copy_modifying_the_copy_leaves_the_original() {
    let _g = lock();
    let original = arange(6);
    let copy = original.deep_clone().unwrap();
    copy.select(0, 0).unwrap().fill_(99.0).unwrap(); // copy[0] = 99
    assert_eq!(original.select(0, 0).unwrap().item::<f32>().unwrap(), 0.0);
}

#[test]
fn section_clone_of_a_non_contiguous_tensor_is_contiguous() {
    let _g = lock();
    let t = x34().t().unwrap();
    assert!(!t.is_contiguous());
    let c = t.deep_clone().unwrap();
    assert!(c.is_contiguous());
    assert_eq!(read(&c), read(&t));
    // requires_grad preserved and gradient flow: the autograd issue adds them.
}

#[test]
fn section_detach_shares_memory_and_writes_show_through() {
    let _g = lock();
    // y = x.detach(); y[0] = 99; x[0] == 99. The autograd issue adds detach()
    // (requires_grad false); the storage behaviour is checked with alias().
    let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3], CPU).unwrap();
    let y = x.alias();
    y.select(0, 0).unwrap().fill_(99.0).unwrap();
    assert_eq!(x.to_vec::<f32>().unwrap(), vec![99.0, 2.0, 3.0]);
}

#[test]
fn section_copy_supports_broadcasting_and_dtypes() {
    let _g = lock();
    let mut target = Tensor::zeros(&[3, 3], DType::F32, CPU).unwrap();
    target
        .copy_(&Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3], CPU).unwrap())
        .unwrap();
    assert_eq!(read(&target), [1.0, 2.0, 3.0].repeat(3));
    let mut i = Tensor::zeros(&[3], DType::I32, CPU).unwrap();
    i.copy_(&Tensor::from_slice(&[1.9f64, -2.9, 7.0], &[3], CPU).unwrap())
        .unwrap();
    assert_eq!(
        i.to_vec::<i32>().unwrap(),
        vec![1, -2, 7],
        "truncation, as a cast"
    );
    // into a transposed view
    let base = Tensor::zeros(&[2, 3], DType::F64, CPU).unwrap();
    let mut tv = base.t().unwrap();
    tv.copy_(&Tensor::from_slice(&[1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2], CPU).unwrap())
        .unwrap();
    assert_eq!(read(&base), vec![1.0, 3.0, 5.0, 2.0, 4.0, 6.0]);
    let e = target
        .copy_(&Tensor::zeros(&[2], DType::F32, CPU).unwrap())
        .unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { op: "copy_", .. }), "{e}");
}

#[test]
fn section_contiguous_is_self_when_contiguous_otherwise_a_copy() {
    let _g = lock();
    let t = x34();
    let t_cont = t.contiguous().unwrap();
    // `t is t_cont`: same storage, same layout, same first element.
    assert_eq!(t_cont.data_ptr(), t.data_ptr());
    assert_eq!(t_cont.layout(), t.layout());
    let t_t = t.t().unwrap();
    let t_t_cont = t_t.contiguous().unwrap();
    assert!(!shares_storage(&t_t, &t_t_cont));
    assert!(t_t_cont.is_contiguous());
}

#[test]
fn section_in_place_aliasing_views_share_storage() {
    let _g = lock();
    // x = arange(12); view = x.view(3, 4); view.fill_(0) -> x all zeros
    let x = arange(12);
    let mut view = x.view(&[3, 4]).unwrap();
    view.fill_(0.0).unwrap();
    assert_eq!(read(&x), vec![0.0; 12]);
    // y = x[2:5]; y.mul_(10) modifies elements 2, 3, 4 of x
    let x = arange(12);
    let mut y = x.slice(0, 2, 5, 1).unwrap();
    y.mul_scalar_(10.0).unwrap();
    let want: Vec<f64> = (0..12)
        .map(|k| {
            if (2..5).contains(&k) {
                k as f64 * 10.0
            } else {
                k as f64
            }
        })
        .collect();
    assert_eq!(read(&x), want);
}

#[test]
fn section_common_mistake_unintended_aliasing() {
    let _g = lock();
    fn process_bug(t: &Tensor) -> Tensor {
        let mut r = t.alias();
        r.mul_scalar_(2.0).unwrap();
        r
    }
    fn process_fixed(t: &Tensor) -> Tensor {
        let mut r = t.deep_clone().unwrap();
        r.mul_scalar_(2.0).unwrap();
        r
    }
    let x = arange(3);
    let _ = process_fixed(&x);
    assert_eq!(read(&x), vec![0.0, 1.0, 2.0]);
    let _ = process_bug(&x);
    assert_eq!(read(&x), vec![0.0, 2.0, 4.0], "modified the original");
}

#[test]
fn section_hidden_references_through_views_keep_the_storage() {
    let _g = lock();
    let x = Tensor::zeros(&[512, 512], DType::F32, CPU).unwrap();
    let big = x.storage_nbytes();
    let y = x.select(0, 0).unwrap(); // y = x[0, :]
    let alloc0 = memory::memory_allocated(CPU);
    drop(x);
    assert_eq!(y.storage_nbytes(), big, "the whole storage is still held");
    assert_eq!(memory::memory_allocated(CPU), alloc0, "nothing was freed");
    drop(y);
    assert!(
        memory::memory_allocated(CPU) + big <= alloc0,
        "freed with the last view"
    );
    // clone the slice: the big storage goes with x
    let x = Tensor::zeros(&[512, 512], DType::F32, CPU).unwrap();
    let y = x.select(0, 0).unwrap().deep_clone().unwrap();
    let alloc1 = memory::memory_allocated(CPU);
    drop(x);
    assert!(memory::memory_allocated(CPU) + big <= alloc1);
    assert_eq!(y.storage_nbytes(), 512 * 4);
}
