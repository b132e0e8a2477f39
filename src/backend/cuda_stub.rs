//! Stand-in for the CUDA backend when tensorscope is built without the `cuda`
//! feature: every entry point returns [`Error::DeviceUnavailable`].

#![allow(dead_code)]

use crate::alloc::DeviceAllocator;
use crate::backend::{BinaryOp, Operand, UnaryOp};
use crate::error::{Error, Result};
use crate::Device;

const REASON: &str = "tensorscope was built without the `cuda` feature";

fn err<T>(op: &'static str, ordinal: usize) -> Result<T> {
    Err(Error::DeviceUnavailable {
        op,
        device: Device::Cuda(ordinal),
        reason: REASON.into(),
    })
}

fn ordinal(o: &Operand) -> usize {
    match o.storage.device() {
        Device::Cuda(i) => i,
        Device::Cpu => 0,
    }
}

/// `false`: this build has no CUDA backend.
pub fn is_available() -> bool {
    false
}

/// `0`: this build has no CUDA backend.
pub fn device_count() -> usize {
    0
}

pub(crate) fn allocator(ordinal: usize) -> Result<&'static dyn DeviceAllocator> {
    err("allocate", ordinal)
}

pub(crate) fn current_stream_id(_ordinal: usize) -> u64 {
    0
}

pub(crate) fn copy(src: &Operand, dst: &Operand) -> Result<()> {
    err("copy", ordinal(src).max(ordinal(dst)))
}
pub(crate) fn fill(dst: &Operand, _v: f64) -> Result<()> {
    err("fill", ordinal(dst))
}
pub(crate) fn unary(op: UnaryOp, src: &Operand, _dst: &Operand) -> Result<()> {
    err(op.name(), ordinal(src))
}
pub(crate) fn binary(op: BinaryOp, a: &Operand, _b: &Operand, _dst: &Operand) -> Result<()> {
    err(op.name(), ordinal(a))
}
pub(crate) fn binary_scalar(op: BinaryOp, a: &Operand, _s: f64, _dst: &Operand) -> Result<()> {
    err(op.name(), ordinal(a))
}
pub(crate) fn where_cond(c: &Operand, _a: &Operand, _b: &Operand, _dst: &Operand) -> Result<()> {
    err("where", ordinal(c))
}
