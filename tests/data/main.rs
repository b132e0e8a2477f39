//! The data module: datasets, samplers and the loader. Its own binary: two
//! of its tests leak an epoch on purpose (`mem::forget`), which the
//! absolute counts of `tests/memory/` would see.
//!
//! One test binary of a family, one module per former test file (Note
//! [test binaries] in ARCHITECTURE.md): the tests that read the allocator's
//! statistics or global settings take `common::serial()`, every other test
//! `common::shared()`.

#[path = "../common/mod.rs"]
mod common;

mod data;
mod data_files;
