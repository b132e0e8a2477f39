//! Agreement with PyTorch: the differential suite, documented deviations, kernel paths, matmul.
//!
//! One test binary of a family, one module per former test file (Note
//! [test binaries] in ARCHITECTURE.md): the tests that read the allocator's
//! statistics or global settings take `common::serial()`, every other test
//! `common::shared()`.

#[path = "../common/mod.rs"]
mod common;

mod deviations;
mod differential;
mod kernel_paths;
mod matmul;
mod matmul_parallel;
mod pytorch_agreement;
