//! The CUDA backend, on [cudarc](https://docs.rs/cudarc) with the driver,
//! NVRTC and cuBLAS libraries loaded at run time.
//!
//! Nothing here needs a CUDA toolkit to build. At run time the libraries are
//! looked for on the loader path; a machine without them (or without a GPU)
//! simply has no CUDA device: [`is_available`] is `false`, [`device_count`]
//! is 0, and every operation on a [`Device::Cuda`](crate::Device::Cuda)
//! returns [`Error::DeviceUnavailable`](crate::Error::DeviceUnavailable).
//! Nothing panics.
//!
//! ```
//! use tensorscope::{backend::cuda, DType, Device, Tensor};
//! let dev = Device::cuda_if_available();          // CUDA 0 if usable, else the CPU
//! let t = Tensor::ones(&[2, 3], DType::F32, dev)?;
//! let s = t.add_scalar(1.0)?;
//! assert_eq!(s.to_vec::<f32>()?, vec![2.0; 6]);
//! if !cuda::is_available() {
//!     assert_eq!(cuda::device_count(), 0);
//! }
//! # Ok::<(), tensorscope::Error>(())
//! ```
//!
//! What is here:
//! * one context per device, made once on first use ([`device`]);
//! * a caching device allocator: the crate's generic caching allocator over
//!   segments from `cuMemAlloc`, with per-stream pools and `record_stream`
//!   ([`alloc`]), so [`crate::memory`] reports CUDA statistics exactly as it
//!   does for the CPU;
//! * streams and events ([`Stream`], [`Event`], [`StreamGuard`]);
//! * a pinned-host caching allocator that stages host↔device copies
//!   ([`pinned_memory_stats`]);
//! * kernels from `kernels/*.cu`, compiled by NVRTC on first use per device
//!   and cached for the process (and on disk, see [`kernels`]);
//! * cuBLAS matmul ([`blas`]);
//! * the fused optimizer updates and `clip_grad_norm_`'s sum of squares
//!   ([`optim`]).

pub(crate) mod alloc;
pub(crate) mod blas;
pub(crate) mod device;
mod elementwise;
mod event;
pub(crate) mod index;
pub mod kernels;
pub(crate) mod launch;
pub(crate) mod nn;
pub(crate) mod optim;
mod pinned;
pub(crate) mod pinned_tensor;
mod pool_im2col;
mod probe;
pub(crate) mod reduce;
mod scan;
mod softmax;
mod sort;
mod stream;
mod transfer;

pub(crate) use alloc::record_stream;
pub use blas::{allow_tf32, set_allow_tf32};
pub use device::{compute_capability, device_name, synchronize};
pub(crate) use event::clock as event_clock;
pub use event::Event;
pub use pinned::{
    empty_pinned_cache, pinned_memory_stats, set_pinned_memory_limit, PinnedMemoryStats,
};
pub use probe::{device_count, is_available, libraries, Libraries};
pub use stream::{current_stream, set_current_stream, with_stream, Stream, StreamGuard};

#[cfg(test)]
mod tests;

pub(crate) use blas::{batched_matmul as matmul, linear};
pub(crate) use elementwise::{binary, binary_scalar, copy, fill, unary, where_cond};
pub(crate) use index::{gather, masked_count, masked_select, scatter};
pub(crate) use nn::{
    dropout, dropout_backward, layer_norm, layer_norm_backward, rand_bernoulli, rand_normal,
    rand_uniform, rms_norm, rms_norm_backward,
};
pub(crate) use optim::{adam_step, rule_step, sgd_step, sum_squares, unscale_check};
pub(crate) use pool_im2col::{col2im, im2col, max_pool2d};
pub(crate) use reduce::{arg_reduce, reduce};
pub(crate) use scan::scan;
pub(crate) use softmax::{softmax, softmax_backward};
pub(crate) use sort::argsort;

use crate::alloc::DeviceAllocator;
use crate::error::Result;

/// The caching allocator of CUDA device `ordinal` (made on first use).
pub(crate) fn allocator(ordinal: usize) -> Result<&'static dyn DeviceAllocator> {
    Ok(&device::gpu("allocate", ordinal)?.alloc)
}
