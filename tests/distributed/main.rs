//! `tensorscope::distributed`: the process group's collectives and their
//! checks on a world of one process (always), and the same collectives
//! across 2 and 4 processes under `mpirun` (feature `mpi`: each test
//! starts `mpirun` over this binary, filtered to itself).
//!
//! One test binary of a family (Note [test binaries] in ARCHITECTURE.md);
//! every test takes `common::shared()`.

#[path = "../common/mod.rs"]
mod common;

mod data;
#[cfg(feature = "mpi")]
mod mpi;
mod single;
