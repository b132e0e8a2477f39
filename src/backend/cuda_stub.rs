//! Stand-in for the CUDA backend when tensorscope is built without the `cuda`
//! feature: every entry point returns [`Error::DeviceUnavailable`].

#![allow(dead_code)]

use crate::alloc::DeviceAllocator;
use crate::backend::{BinaryOp, Operand, UnaryOp};
use crate::device::Device;
use crate::error::{Error, Result};

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

/// A device's compute capability: an `Err`, as this build has no CUDA
/// backend.
pub fn compute_capability(device: Device) -> Result<(i32, i32)> {
    err(
        "compute_capability",
        match device {
            Device::Cuda(i) => i,
            Device::Cpu => 0,
        },
    )
}

/// Pinned tensors need the CUDA backend.
pub(crate) mod pinned_tensor {
    use super::*;
    use crate::alloc::{Block, BlockSink};
    use crate::storage::Storage;
    pub(crate) fn pinned_storage(_nbytes: usize) -> Result<Storage> {
        err("pin_memory", 0)
    }
    /// Never given a block: no pinned block exists without the backend.
    struct NoPinned(#[allow(dead_code)] u8);
    impl BlockSink for NoPinned {
        fn free(&self, _block: Block) {}
    }
    static NO_PINNED: NoPinned = NoPinned(0);
    pub(crate) fn sink() -> &'static dyn BlockSink {
        &NO_PINNED
    }
    pub(crate) fn to_device_async(_src: &Operand, _block: usize, dst: &Operand) -> Result<()> {
        err("to_device_non_blocking", ordinal(dst))
    }
}

/// Waits for a CUDA device: an `Err`, as this build has no CUDA backend.
pub fn synchronize(device: Device) -> Result<()> {
    err(
        "synchronize",
        match device {
            Device::Cuda(i) => i,
            Device::Cpu => 0,
        },
    )
}

/// The profiler's device clock needs the CUDA backend.
pub(crate) fn event_clock(device: Device) -> Result<Box<dyn crate::alloc::ops_trace::DeviceClock>> {
    err(
        "profiler::profile",
        match device {
            Device::Cuda(i) => i,
            Device::Cpu => 0,
        },
    )
}

pub(crate) fn allocator(ordinal: usize) -> Result<&'static dyn DeviceAllocator> {
    err("allocate", ordinal)
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
pub(crate) fn reduce(
    op: crate::backend::Reduction,
    src: &Operand,
    _dims: &[usize],
    _dst: &Operand,
) -> Result<()> {
    err(op.name(), ordinal(src))
}
pub(crate) fn arg_reduce(
    op: &'static str,
    _max: bool,
    src: &Operand,
    _dim: usize,
    _values: Option<&Operand>,
    _indices: &Operand,
) -> Result<()> {
    err(op, ordinal(src))
}
pub(crate) fn softmax(src: &Operand, _dim: usize, _dst: &Operand, log: bool) -> Result<()> {
    err(if log { "log_softmax" } else { "softmax" }, ordinal(src))
}
pub(crate) fn matmul(a: &Operand, _b: &Operand, _dst: &Operand) -> Result<()> {
    err("matmul", ordinal(a))
}
pub(crate) fn gather(
    src: &Operand,
    _index: &Operand,
    _index_walk: &crate::layout::Layout,
    d: &crate::backend::IndexedDim,
    _dst: &Operand,
) -> Result<()> {
    err(d.op, ordinal(src))
}
pub(crate) fn scatter(
    dst: &Operand,
    _index: &Operand,
    _index_walk: &crate::layout::Layout,
    d: &crate::backend::IndexedDim,
    _src: crate::backend::ScatterSrc,
    _mode: crate::backend::ScatterMode,
) -> Result<()> {
    err(d.op, ordinal(dst))
}
pub(crate) fn linear(
    x: &Operand,
    _wt: &Operand,
    _bias: Option<&Operand>,
    _dst: &Operand,
) -> Result<()> {
    err("linear", ordinal(x))
}
pub(crate) fn masked_count(mask: &Operand) -> Result<crate::backend::MaskCount> {
    err("masked_select", ordinal(mask))
}
pub(crate) fn masked_select(
    src: &Operand,
    _mask: &Operand,
    _count: &crate::backend::MaskCount,
    _dst: &Operand,
) -> Result<()> {
    err("masked_select", ordinal(src))
}
pub(crate) fn rand_uniform(dst: &Operand, _lo: f64, _hi: f64, _s: u64, _o: u64) -> Result<u64> {
    err("uniform_", ordinal(dst))
}
pub(crate) fn rand_bernoulli(dst: &Operand, _p: f64, _s: u64, _o: u64) -> Result<u64> {
    err("bernoulli_", ordinal(dst))
}
pub(crate) fn rand_normal(dst: &Operand, _m: f64, _sd: f64, _s: u64, _o: u64) -> Result<u64> {
    err("normal_", ordinal(dst))
}
pub(crate) fn dropout(
    x: &Operand,
    _y: &Operand,
    _mask: &Operand,
    _p: f64,
    _seed: u64,
    _offset: u64,
) -> Result<u64> {
    err("dropout", ordinal(x))
}
pub(crate) fn dropout_backward(dy: &Operand, _m: &Operand, _dx: &Operand, _p: f64) -> Result<()> {
    err("dropout_backward", ordinal(dy))
}
pub(crate) fn adam_step(
    op: &'static str,
    p: &Operand,
    _g: &Operand,
    _m: &Operand,
    _v: &Operand,
    _vmax: Option<&Operand>,
    _h: &crate::backend::optim::AdamHyper,
) -> Result<()> {
    err(op, ordinal(p))
}
pub(crate) fn sgd_step(
    op: &'static str,
    p: &Operand,
    _g: &Operand,
    _buf: Option<&Operand>,
    _h: &crate::backend::optim::SgdHyper,
) -> Result<()> {
    err(op, ordinal(p))
}
pub(crate) fn rule_step(
    op: &'static str,
    p: &Operand,
    _g: &Operand,
    _states: [Option<&Operand>; 3],
    _r: &crate::backend::optim::UpdateRule,
) -> Result<()> {
    err(op, ordinal(p))
}
pub(crate) fn scan(
    op: &'static str,
    _kind: crate::backend::scan::ScanKind,
    x: &Operand,
    _a: Option<&Operand>,
    _out: &Operand,
    _rows: usize,
    _n: usize,
) -> Result<()> {
    err(op, ordinal(x))
}
pub(crate) fn max_pool2d(
    op: &'static str,
    x: &Operand,
    _y: &Operand,
    _idx: Option<&Operand>,
    _g: &crate::backend::pool_im2col::Windows,
) -> Result<()> {
    err(op, ordinal(x))
}
pub(crate) fn col2im(
    op: &'static str,
    cols: &Operand,
    _dx: &Operand,
    _n: usize,
    _g: &crate::backend::pool_im2col::Windows,
) -> Result<()> {
    err(op, ordinal(cols))
}
pub(crate) fn im2col(
    op: &'static str,
    x: &Operand,
    _cols: &Operand,
    _n: usize,
    _g: &crate::backend::pool_im2col::Windows,
) -> Result<()> {
    err(op, ordinal(x))
}
pub(crate) fn argsort(
    x: &Operand,
    _idx: &Operand,
    _rows: usize,
    _n: usize,
    _desc: bool,
) -> Result<()> {
    err("argsort", ordinal(x))
}
pub(crate) fn unscale_check(op: &'static str, x: &Operand, _s: f32, _f: &Operand) -> Result<()> {
    err(op, ordinal(x))
}
pub(crate) fn sum_squares(op: &'static str, src: &Operand) -> Result<f64> {
    err(op, ordinal(src))
}
pub(crate) fn layer_norm(
    x: &Operand,
    _gamma: Option<&Operand>,
    _beta: Option<&Operand>,
    _y: &Operand,
    _mean: Option<&Operand>,
    _rstd: Option<&Operand>,
    _eps: f64,
) -> Result<()> {
    err("layer_norm", ordinal(x))
}
#[allow(clippy::too_many_arguments)]
pub(crate) fn layer_norm_backward(
    dy: &Operand,
    _x: &Operand,
    _gamma: Option<&Operand>,
    _mean: &Operand,
    _rstd: &Operand,
    _dx: Option<&Operand>,
    _dgamma: Option<&Operand>,
    _dbeta: Option<&Operand>,
) -> Result<()> {
    err("layer_norm_backward", ordinal(dy))
}
pub(crate) fn rms_norm(
    x: &Operand,
    _gamma: Option<&Operand>,
    _y: &Operand,
    _rstd: Option<&Operand>,
    _eps: f64,
) -> Result<()> {
    err("rms_norm", ordinal(x))
}
pub(crate) fn rms_norm_backward(
    dy: &Operand,
    _x: &Operand,
    _gamma: Option<&Operand>,
    _rstd: &Operand,
    _dx: Option<&Operand>,
    _dgamma: Option<&Operand>,
) -> Result<()> {
    err("rms_norm_backward", ordinal(dy))
}
pub(crate) fn softmax_backward(
    dy: &Operand,
    _y: &Operand,
    _dim: usize,
    _dx: &Operand,
    log: bool,
) -> Result<()> {
    err(
        if log {
            "log_softmax_backward"
        } else {
            "softmax_backward"
        },
        ordinal(dy),
    )
}
