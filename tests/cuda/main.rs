//! The CUDA backend (each GPU test prints a skip line without a device) and the NVRTC/ptxas check of every kernel.
//!
//! One test binary of a family, one module per former test file (Note
//! [test binaries] in ARCHITECTURE.md): the tests that read the allocator's
//! statistics or global settings take `common::serial()`, every other test
//! `common::shared()`.

#![cfg(feature = "cuda")]

#[path = "../common/mod.rs"]
mod common;

mod cuda;
mod cuda_autograd;
mod cuda_elementwise;
mod cuda_ops;
mod cuda_random;
mod nvrtc;
