//! Index ops against naive references on `Vec<f64>`: index_select (and its
//! allocation-free out form), gather, masked_select, fancy indexing, the
//! scatter / index_fill / index_copy / index_add family and slice assignment.
//! Inputs are contiguous, transposed and stepped, in every dtype; in-place
//! targets are views, and the whole storage is checked after each write.
//! Every error path is checked for its variant, its op name, and (in place)
//! that `self` is unchanged.
//!
//! Every test takes `LOCK`: one test asserts exact allocation counts, which
//! are global to the process.

use tensorscope::{memory, DType, Device, Error, Tensor};

fn lock() -> crate::common::Guard {
    crate::common::serial()
}

use crate::common;
use common::layouts::*;

/// An index tensor with values `ix`, as i64 or i32, contiguous or stepped.
fn make_index(ix: &[i64], shape: &[usize], dtype: DType, stepped: bool) -> Tensor {
    let v: Vec<f64> = ix.iter().map(|&i| i as f64).collect();
    let kind = if stepped && !shape.is_empty() {
        Kind::Stepped
    } else {
        Kind::Contiguous
    };
    make(&v, shape, dtype, kind)
}

fn vals(t: &Tensor) -> Vec<f64> {
    t.to_vec::<f64>().unwrap()
}

/// Every element of `t`'s storage, in storage order.
fn storage_image(t: &Tensor) -> Vec<f64> {
    let n = t.storage_nbytes() / t.dtype().size_in_bytes();
    vals(&t.as_strided(&[n], &[1], 0).unwrap())
}

/// The storage image expected after `t`'s logical elements become `want`
/// and nothing else changes.
fn expected_image(before: &[f64], t: &Tensor, want: &[f64]) -> Vec<f64> {
    let mut img = before.to_vec();
    for (i, &w) in want.iter().enumerate() {
        let idx = unravel(i, t.shape());
        let pos = t.storage_offset()
            + idx
                .iter()
                .zip(t.strides())
                .map(|(i, s)| i * s)
                .sum::<usize>();
        img[pos] = w;
    }
    img
}

/// Asserts an in-place op on `t` left exactly `want` in it and touched no
/// other element of its storage.
fn assert_written(t: &Tensor, before: &[f64], want: &[f64], what: &str) {
    assert_eq!(vals(t), want, "{what}: values");
    assert_eq!(
        storage_image(t),
        expected_image(before, t, want),
        "{what}: storage"
    );
}

/// Lays out `values` of `shape` as `kind`, applies the in-place `write`,
/// and asserts that the logical values became `want` and that nothing else
/// in the storage changed.
fn check_write(
    (values, shape, dtype, kind): (&[f64], &[usize], DType, Kind),
    write: impl FnOnce(&mut Tensor),
    want: &[f64],
    what: &str,
) {
    let mut t = make(values, shape, dtype, kind);
    let before = storage_image(&t);
    write(&mut t);
    assert_written(&t, &before, want, what);
}

fn index_values(n: usize, size: usize, seed: usize) -> Vec<i64> {
    (0..n)
        .map(|i| ((i * 5 + seed * 3 + 1) % size) as i64)
        .collect()
}

fn with_dim(idx: &[usize], d: usize, v: usize) -> Vec<usize> {
    let mut i = idx.to_vec();
    i[d] = v;
    i
}

fn msg(e: &Error) -> String {
    e.to_string()
}

mod index_select;
use index_select::*;
mod gather;
use gather::*;
mod fancy;
mod masked_select;
mod scatter;
mod slice_assign;
