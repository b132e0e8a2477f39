//! 001 "Operation Summary" (one test per row).

use super::*;

#[test]
fn summary_del_tensor_removes_a_reference() {
    let _g = lock();
    let t = Tensor::zeros(&[1000], DType::F32, CPU).unwrap();
    let v = t.view(&[10, 100]).unwrap();
    assert_eq!(v.storage_use_count(), 2);
    let before = memory::memory_allocated(CPU);
    drop(t); // del tensor: one handle fewer, the storage lives on in v
    assert_eq!(v.storage_use_count(), 1);
    assert_eq!(memory::memory_allocated(CPU), before);
    drop(v);
    assert_eq!(memory::memory_allocated(CPU), before - 4096);
}

#[test]
fn summary_tensor_none_is_the_same_as_del() {
    let _g = lock();
    let mut slot: Option<Tensor> = Some(Tensor::zeros(&[1000], DType::F32, CPU).unwrap());
    let before = memory::memory_allocated(CPU);
    assert!(slot.is_some());
    slot = None; // tensor = None
    assert!(slot.is_none());
    assert_eq!(memory::memory_allocated(CPU), before - 4096);
}

#[test]
fn summary_detach_shares_data() {
    let _g = lock();
    // Removing grad_fn is the autograd issue's; the memory impact ("none,
    // shares data") is alias()'s.
    let t = x34();
    let before = memory::memory_allocated(CPU);
    let d = t.alias();
    assert!(shares_storage(&t, &d));
    assert_eq!(memory::memory_allocated(CPU), before, "no new memory");
}

#[test]
fn summary_cpu_moves_to_the_cpu() {
    let _g = lock();
    // Frees GPU, allocates CPU: the CUDA issue adds GPU tensors. On the CPU,
    // .cpu() is free: same storage.
    let t = x34();
    let before = memory::memory_allocated(CPU);
    let c = t.to_device(Device::Cpu).unwrap();
    assert!(shares_storage(&t, &c));
    assert_eq!(memory::memory_allocated(CPU), before);
    let e = Tensor::zeros(
        &[2],
        DType::F32,
        Device::Cuda(tensorscope::backend::cuda::device_count()),
    )
    .unwrap_err();
    assert!(matches!(e, Error::DeviceUnavailable { .. }), "{e}");
}

#[test]
fn summary_clone_allocates_new() {
    let _g = lock();
    let t = Tensor::zeros(&[1000], DType::F32, CPU).unwrap();
    let before = memory::memory_allocated(CPU);
    let c = t.deep_clone().unwrap();
    assert_eq!(memory::memory_allocated(CPU), before + 4096);
    assert!(!shares_storage(&t, &c));
    // "New graph node": the autograd issue adds it.
}

#[test]
fn summary_detach_in_place_keeps_the_storage() {
    let _g = lock();
    // detach_() (in-place detach) comes with the autograd issue. Its memory
    // impact is none: an in-place op keeps the tensor's storage and address.
    let mut t = x34();
    let (ptr, before) = (t.data_ptr(), memory::memory_allocated(CPU));
    t.relu_().unwrap();
    assert_eq!(t.data_ptr(), ptr);
    assert_eq!(memory::memory_allocated(CPU), before);
}

#[test]
fn summary_empty_cache_frees_cached_memory_to_the_os() {
    let _g = lock();
    let t = Tensor::zeros(&[16 << 20], DType::U8, CPU).unwrap(); // its own 16 MiB segment
    drop(t);
    let cached = memory::memory_reserved(CPU);
    assert!(cached >= 16 << 20);
    let frees = memory::memory_stats(CPU).num_sys_free;
    memory::empty_cache(CPU);
    assert!(memory::memory_reserved(CPU) <= cached - (16 << 20));
    assert!(memory::memory_stats(CPU).num_sys_free > frees);
    memory::empty_cache(Device::Cuda(0)); // no GPU backend: a no-op, not a panic
}

#[test]
fn summary_gc_collect_is_not_needed_drop_is_deterministic() {
    let _g = lock();
    // There is no garbage collector: the bytes are back at the allocator the
    // moment the last handle goes.
    let before = memory::memory_allocated(CPU);
    for _ in 0..10 {
        let a = Tensor::ones(&[256, 256], DType::F32, CPU).unwrap();
        let b = a.mul_scalar(2.0).unwrap();
        let _c = a.add(&b).unwrap();
    }
    assert_eq!(memory::memory_allocated(CPU), before);
}
