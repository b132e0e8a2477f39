//! `tensorscope::distributed`: the process group's collectives and their
//! checks on a world of one process (always), and the same collectives
//! across 2 and 4 processes under `mpirun` (feature `mpi`: each test
//! starts `mpirun` over this binary, filtered to itself), and
//! `DistributedDataParallel` on both.
//!
//! One test binary of a family (Note [test binaries] in ARCHITECTURE.md);
//! every test takes `common::shared()`.

#[path = "../common/mod.rs"]
mod common;

mod data;
mod ddp;
#[cfg(feature = "mpi")]
#[macro_use]
mod mpi;
#[cfg(feature = "mpi")]
mod ddp_mpi;
mod single;
mod zero;
