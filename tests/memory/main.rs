//! Memory statistics, history, the profiler, long-running processes.
//!
//! One test binary of a family, one module per former test file (Note
//! [test binaries] in ARCHITECTURE.md): the tests that read the allocator's
//! statistics or global settings take `common::serial()`, every other test
//! `common::shared()`.

#[path = "../common/mod.rs"]
mod common;

mod autocast_peak;
mod long_running;
mod memory;
mod memory_history;
mod profiler;
