//! The CUDA backend (cudarc). Until it lands, the `cuda` feature builds the
//! same stand-in as a build without it.

#[path = "../cuda_stub.rs"]
mod stub;
#[allow(unused_imports)]
pub(crate) use stub::*;
pub use stub::{device_count, is_available};
