//! Training across processes: a [`ProcessGroup`] runs `torch.distributed`'s
//! collectives (all-reduce with sum, average, max and min; broadcast;
//! all-gather; reduce-scatter; barrier; send and receive; sub-groups) over
//! an existing engine, MPI for CPU tensors (feature `mpi`, Open MPI from the
//! system), or a world of one process with no engine at all.
//!
//! ```
//! use tensorscope::distributed::{ProcessGroup, ReduceOp};
//! use tensorscope::{Device, Tensor};
//! // Under `mpirun -np N`, `ProcessGroup::mpi()?` (feature `mpi`).
//! let pg = ProcessGroup::single();
//! let mut g = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3], Device::Cpu)?;
//! pg.all_reduce(&mut g, ReduceOp::Avg)?;
//! // In the background: the tensor is the work's until `wait`.
//! let work = pg.all_reduce_async(g, ReduceOp::Sum)?;
//! let g = work.wait()?;
//! assert_eq!(g.to_vec::<f32>()?, [1.0, 2.0, 3.0]);
//! # Ok::<(), tensorscope::Error>(())
//! ```
//!
//! Every rank checks its own call (device, contiguity, dtype, ranks), then
//! the ranks agree that they all made the same call before any data moves
//! (Note [collective agreement] in `group.rs`): a rank with another shape
//! or op gets an `Err`, as do the others. A collective that waits longer
//! than the group's timeout returns an `Err` and stops the group, leaking
//! (never freeing) the buffers the engine may still write.

mod ddp;
mod group;
#[cfg(feature = "mpi")]
mod mpi;
mod reducer;
mod transport;
mod zero;

pub use ddp::{DdpOptions, DistributedDataParallel};
pub use group::{ProcessGroup, ReduceOp, Work};
pub use zero::ZeroRedundancyOptimizer;
