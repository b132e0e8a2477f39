//! # tensorscope
//!
//! A tensor library in which memory has an owner.
//!
//! * [`Tensor`] is an owned handle over refcounted storage. When the last
//!   handle goes, the bytes go back to the device's caching allocator at once.
//! * Views (`view`, `transpose`, `narrow`, `expand`, ...) share storage;
//!   copies (`deep_clone`, `repeat`, `index_select`, `to_dtype`, ...) do not,
//!   exactly as in PyTorch's storage-stride model.
//! * Memory is observable: see [`memory`] for PyTorch-style statistics.
//!
//! ```
//! use tensorscope::{memory, DType, Device, Tensor};
//! let base = memory::memory_allocated(Device::Cpu);
//! {
//!     let a = Tensor::ones(&[256, 256], DType::F32, Device::Cpu)?;
//!     let b = a.transpose(0, 1)?;            // a view: no new bytes
//!     let c = a.add(&b)?;                    // a fresh result
//!     assert_eq!(c.sum_all()?.item::<f32>()?, 2.0 * 65536.0);
//! }
//! assert_eq!(memory::memory_allocated(Device::Cpu), base); // every byte is back
//! # Ok::<(), tensorscope::Error>(())
//! ```

#![warn(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]
#![deny(unsafe_op_in_unsafe_fn)]

mod alloc;
pub mod autocast;
pub mod autograd;
pub mod backend;
mod borrowed;
mod bytes;
mod creation;
pub mod data;
mod device;
mod display;
pub mod distributed;
mod dtype;
mod error;
pub mod generation;
#[cfg(test)]
mod internal_tests;
pub mod layout;
pub mod leak;
pub mod memory;
pub mod nn;
mod ops;
pub mod optim;
pub mod profiler;
pub mod random;
pub mod scope;
mod static_checks;
mod storage;
mod tensor;
mod threads;
mod unary_table;

pub use borrowed::{TensorView, TensorViewMut};
pub use device::Device;
pub use device::DeviceType;
pub use dtype::{DType, Element};
pub use error::{Error, Result};
pub use layout::Layout;
pub use ops::conv::{ConvOptions, ConvTransposeOptions, Padding};
pub use ops::pool::PoolOptions;
pub use ops::{InterpolateMode, InterpolateSize, Interpolation, PadMode};
pub use ops::{PendingHost, ScatterReduce, UniqueParts};
pub use random::{manual_seed, Generator};
pub use scope::{scope, scope_with_stats, Scope, ScopeStats, Scoped};
pub use tensor::Tensor;
pub use threads::{cpu_capability, num_threads, set_num_threads};

#[doc(hidden)]
pub use half;
pub use half::{bf16, f16};

/// `true` if the two tensors view the same storage.
pub fn shares_storage(a: &Tensor, b: &Tensor) -> bool {
    a.shares_storage(b)
}
