//! Tensor ops: creation, shapes, elementwise, indexing, reductions, sorting, sampling, errors.
//!
//! One test binary of a family, one module per former test file (Note
//! [test binaries] in ARCHITECTURE.md): the tests that read the allocator's
//! statistics or global settings take `common::serial()`, every other test
//! `common::shared()`.

#[path = "../common/mod.rs"]
mod common;

mod breadth;
mod creation;
mod degenerate;
mod display;
mod division;
mod elementwise;
mod errors;
mod hostile;
mod index;
mod index_rows;
mod init;
mod pad_and_resize;
mod reduce;
mod reduce_compose;
mod sampling;
mod scan;
mod scatter_reduce;
mod sets_and_einsum;
mod shape;
mod sort;
mod threads;
mod trig;
