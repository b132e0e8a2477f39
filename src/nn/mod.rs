//! Neural-network modules.
//!
//! A [`Module`] owns its parameters (leaf tensors that require grad). Layers
//! and `Sequential` live in this folder, one concept per file.

mod module;
mod state;

pub use module::Module;
pub use state::*;
