//! The op layer: validation, dtype promotion and output allocation, then a
//! call into [`crate::backend`]. One file per family.

mod elementwise;
mod index;
mod matmul;
mod operators;
pub(crate) mod pinned;
pub use pinned::PendingHost;
mod reduce;
mod shape;
mod views;
