//! 004 "Quick Reference" (one test per row).

use super::*;

#[test]
fn quick_ref_clone_new_storage_independent() {
    let _g = lock();
    let x = x34();
    let mut y = x.deep_clone().unwrap();
    y.fill_(0.0).unwrap();
    assert!(!shares_storage(&x, &y));
    assert_ne!(read(&x), read(&y), "independent memory");
    // Gradient "Preserved": the autograd issue adds requires_grad and the graph node.
}

#[test]
fn quick_ref_detach_no_new_storage_shared() {
    let _g = lock();
    // detach() (gradient removed) comes with the autograd issue; its storage
    // semantics are alias()'s: same storage, writes visible through both.
    let x = x34();
    let mut y = x.alias();
    assert!(shares_storage(&x, &y));
    assert_eq!(y.data_ptr(), x.data_ptr());
    y.fill_(5.0).unwrap();
    assert_eq!(read(&x), vec![5.0; 12]);
}

#[test]
fn quick_ref_detach_clone_new_storage_independent() {
    let _g = lock();
    // The autograd issue adds detach(); the snapshot pattern is alias + deep_clone.
    let x = x34();
    let snapshot = x.alias().deep_clone().unwrap();
    assert!(!shares_storage(&x, &snapshot));
    let before = read(&snapshot);
    let mut w = x.alias();
    w.fill_(0.0).unwrap();
    assert_eq!(read(&snapshot), before);
}

#[test]
fn quick_ref_contiguous_new_storage_if_needed() {
    let _g = lock();
    let x = x34();
    assert!(shares_storage(&x, &x.contiguous().unwrap()));
    let t = x.t().unwrap();
    let c = t.contiguous().unwrap();
    assert!(!shares_storage(&t, &c));
    assert_eq!(read(&c), read(&t));
}

#[test]
fn quick_ref_to_device_or_dtype_new_storage_independent() {
    let _g = lock();
    let x = x34();
    let mut y = x.to_dtype(DType::F64).unwrap();
    assert!(!shares_storage(&x, &y));
    y.fill_(0.0).unwrap();
    assert_ne!(read(&x), vec![0.0; 12]);
    // to(device) to a GPU this machine lacks is an error (tests/cuda/cuda.rs
    // tests the copy to a present one).
    assert!(x
        .to_device(Device::Cuda(tensorscope::backend::cuda::device_count()))
        .is_err());
}

#[test]
fn quick_ref_copy_in_place_no_new_storage_target_modified() {
    let _g = lock();
    let mut target = Tensor::zeros(&[3], DType::F32, CPU).unwrap();
    let (ptr, ver) = (target.data_ptr(), target.version());
    let source = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3], CPU).unwrap();
    target.copy_(&source).unwrap();
    assert_eq!(target.data_ptr(), ptr);
    assert_eq!(target.version(), ver + 1);
    assert_eq!(read(&target), vec![1.0, 2.0, 3.0]);
    assert!(!shares_storage(&target, &source));
}

#[test]
fn quick_ref_view_and_reshape_no_new_storage_shared() {
    let _g = lock();
    let x = x34();
    let mut v = x.view(&[2, 6]).unwrap();
    let r = x.reshape(&[12]).unwrap();
    assert!(shares_storage(&x, &v) && shares_storage(&x, &r));
    v.mul_scalar_(2.0).unwrap();
    assert_eq!(read(&r), read(&x));
}

#[test]
fn quick_ref_in_place_ops_no_new_storage_same_tensor() {
    let _g = lock();
    let mut x = x34();
    let ptr = x.data_ptr();
    let y: *const Tensor = x.add_scalar_(1.0).unwrap();
    assert!(
        std::ptr::eq(y, &x),
        "the in-place op returns the same tensor"
    );
    x.mul_scalar_(2.0)
        .unwrap()
        .relu_()
        .unwrap()
        .clamp_(None, Some(1.0))
        .unwrap();
    assert_eq!(x.data_ptr(), ptr);
}
