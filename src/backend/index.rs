//! Dispatch of the indexed kernels: gather (index_select, gather, fancy
//! indexing), scatter (scatter_, scatter_add_, scatter_reduce_, index_fill_,
//! index_copy_, index_add_) and boolean-mask selection.
//!
//! Each function locks the storages involved (shared for reads, exclusive
//! for the written one), checks every index against the indexed dimension
//! before anything is written, and dispatches on the device (`backend::cpu`
//! or `backend::cuda`).

use super::{cpu, cuda, device_of, Operand};
use crate::device::Device;
use crate::error::Result;
use crate::layout::Layout;
use crate::storage::lock;

/// The dimension an index addresses: where indices point, and which are valid.
#[derive(Clone, Copy, Debug)]
pub(crate) struct IndexedDim {
    /// The op, for error messages.
    pub op: &'static str,
    /// The dimension (for error messages).
    pub dim: usize,
    /// Its size: indices must lie in `0..size` (or `-size..size`).
    pub size: usize,
    /// Its stride in the indexed storage, in elements.
    pub stride: usize,
    /// Whether negative indices count from the end (fancy indexing,
    /// `index_fill_`) or are errors (`gather`, `scatter_`, `index_select`, ...).
    pub negative: bool,
}

impl IndexedDim {
    /// The index as a position in `0..size`, or `None` if out of range.
    #[inline(always)]
    pub(crate) fn resolve(&self, v: i64) -> Option<usize> {
        let size = self.size as i64;
        if (0..size).contains(&v) {
            Some(v as usize)
        } else if self.negative && v < 0 && v >= -size {
            Some((v + size) as usize)
        } else {
            None
        }
    }
}

/// What a scatter writes.
#[derive(Clone, Copy)]
pub(crate) enum ScatterSrc<'a> {
    /// Elements of a tensor (its layout has the walk's shape).
    Tensor(&'a Operand<'a>),
    /// One value, converted to the destination's dtype.
    Value(f64),
}

/// How a scatter combines with what is there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ScatterMode {
    /// Overwrite.
    Assign,
    /// Accumulate (numeric dtypes).
    Add,
    /// Multiply (numeric dtypes; on bool, `and`).
    Mul,
    /// Keep the larger (NaN wins, as `torch.maximum`; on bool, `or`).
    Max,
    /// Keep the smaller (NaN wins; on bool, `and`).
    Min,
}

/// `dst[i] = src[walk(i) + index[i] * stride]`. `src.layout` is the walk
/// layout (the indexed dimension's stride set to 0) with `dst`'s shape;
/// `index` is the index as given (every element is checked); `index_walk`
/// sees it with `dst`'s shape.
pub(crate) fn gather(
    src: &Operand,
    index: &Operand,
    index_walk: &Layout,
    d: &IndexedDim,
    dst: &Operand,
) -> Result<()> {
    let dev = device_of(d.op, &[src, index, dst])?;
    let _l = lock(&[src.storage, index.storage], &[dst.storage]);
    match dev {
        Device::Cpu => cpu::index::gather(src, index, index_walk, d, dst),
        Device::Cuda(_) => cuda::gather(src, index, index_walk, d, dst),
    }
}

/// `dst[walk(i) + index[i] * stride] = src[i]` (or `+=`, or a value).
/// `dst.layout` is the walk layout; `index_walk` and a source tensor's layout
/// have its shape. Nothing is written unless every index is valid.
pub(crate) fn scatter(
    dst: &Operand,
    index: &Operand,
    index_walk: &Layout,
    d: &IndexedDim,
    src: ScatterSrc,
    mode: ScatterMode,
) -> Result<()> {
    let dev = match src {
        ScatterSrc::Tensor(s) => device_of(d.op, &[dst, index, s])?,
        ScatterSrc::Value(_) => device_of(d.op, &[dst, index])?,
    };
    let _l = match src {
        ScatterSrc::Tensor(s) => lock(&[index.storage, s.storage], &[dst.storage]),
        ScatterSrc::Value(_) => lock(&[index.storage], &[dst.storage]),
    };
    match dev {
        Device::Cpu => cpu::index::scatter(dst, index, index_walk, d, src, mode),
        Device::Cuda(_) => cuda::scatter(dst, index, index_walk, d, src, mode),
    }
}

/// How many elements of a mask are true, as [`masked_count`] found them.
pub(crate) struct MaskCount {
    /// The number of true elements: the length of `masked_select`'s output.
    pub total: usize,
    /// On CUDA, the per-chunk counts the count kernel left on the device
    /// (and the chunk length), which `masked_select` reads there instead
    /// of counting again: a selection waits for the device once.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub device_counts: Option<(crate::storage::Storage, usize)>,
}

/// The number of true elements of a bool `mask` (any layout).
pub(crate) fn masked_count(mask: &Operand) -> Result<MaskCount> {
    let _l = lock(&[mask.storage], &[]);
    match mask.storage.device() {
        Device::Cpu => Ok(MaskCount {
            total: cpu::index::masked_count(mask),
            device_counts: None,
        }),
        Device::Cuda(_) => cuda::masked_count(mask),
    }
}

/// The elements of `src` where `mask` (same shape) is true, in row-major
/// order, into the contiguous 1-D `dst` of `count.total` elements, `count`
/// being what [`masked_count`] returned for this `mask`.
pub(crate) fn masked_select(
    src: &Operand,
    mask: &Operand,
    count: &MaskCount,
    dst: &Operand,
) -> Result<()> {
    let dev = device_of("masked_select", &[src, mask, dst])?;
    let _l = lock(&[src.storage, mask.storage], &[dst.storage]);
    match dev {
        Device::Cpu => cpu::index::masked_select(src, mask, dst),
        Device::Cuda(_) => cuda::masked_select(src, mask, count, dst),
    }
}
