//! Views versus copies: one test per row of every view/copy table in the seed
//! material (004: "Which Operations Create Views vs Copies?", the
//! shares_storage quick test, "Quick Reference", the clone / detach /
//! contiguous / copy_ sections; 001: "Operation Summary"), then every view op
//! of issue 2 item 5 (storage, shape, strides, offset, values against index
//! arithmetic), the copies, and in-place writes through views.
//!
//! Every test holds `LOCK`: some rows check allocator statistics, which are
//! global.

use crate::common;

use common::*;
use tensorscope::{memory, shares_storage, DType, Device, Error, Tensor};

fn lock() -> crate::common::Guard {
    crate::common::serial()
}

/// `torch.arange(n)` as f32.
fn arange(n: usize) -> Tensor {
    Tensor::arange(0.0, n as f64, 1.0, DType::F32, CPU).unwrap()
}

/// `torch.randn(3, 4)` stand-in: distinct values, contiguous.
fn x34() -> Tensor {
    Tensor::from_slice(&uniform(12, 34, -2.0, 2.0), &[3, 4], CPU)
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap()
}

/// The 24 values 0..24 as a contiguous [2, 3, 4] f32 tensor.
fn base234() -> Tensor {
    arange(24).view(&[2, 3, 4]).unwrap()
}

/// Checks that `v` is a view of `base` with the given shape, strides and
/// offset, whose element at multi-index `idx` is `base`'s flat element
/// `at(idx)` (the op's meaning, written as index arithmetic).
#[track_caller]
fn assert_view(
    v: &Tensor,
    base: &Tensor,
    shape: &[usize],
    strides: &[usize],
    offset: usize,
    at: impl Fn(&[usize]) -> usize,
) {
    assert!(v.shares_storage(base), "a view shares its base's storage");
    assert_eq!(v.storage_ptr(), base.storage_ptr());
    assert_eq!(v.shape(), shape, "shape");
    assert_eq!(v.strides(), strides, "strides");
    assert_eq!(v.storage_offset(), offset, "offset");
    assert_eq!(
        v.data_ptr(),
        base.storage_ptr() + offset * v.dtype().size_in_bytes()
    );
    let bv = read(&base.contiguous().unwrap());
    let got = read(v);
    let n: usize = shape.iter().product();
    assert_eq!(got.len(), n);
    for (lin, g) in got.iter().enumerate() {
        let idx = unravel(lin, shape);
        assert_eq!(*g, bv[at(&idx)], "element {idx:?}");
    }
}

/// Checks that `c` is a copy: its own storage, contiguous, with `want` values.
#[track_caller]
fn assert_copy(c: &Tensor, of: &Tensor, want: &[f64]) {
    assert!(!c.shares_storage(of), "a copy has its own storage");
    assert!(!shares_storage(c, of));
    assert_ne!(c.storage_ptr(), of.storage_ptr());
    assert!(c.is_contiguous());
    assert_eq!(c.storage_offset(), 0);
    assert_eq!(read(c), want);
}

mod copies;
mod every_view_op;
mod operation_summary;
mod quick_reference;
mod sections_004;
mod shared_storage;
mod which_ops;
mod writes_through_views;
