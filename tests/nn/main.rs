//! Layers, losses, attention, convolutions, pooling, fused kernels, pruning, Sequential, state dicts.
//!
//! One test binary of a family, one module per former test file (Note
//! [test binaries] in ARCHITECTURE.md): the tests that read the allocator's
//! statistics or global settings take `common::serial()`, every other test
//! `common::shared()`.

#[path = "../common/mod.rs"]
mod common;

mod activations_losses;
mod attention;
mod autocast;
mod autocast_fixture;
mod checkpoint;
mod conv;
mod conv_winograd;
mod from_parts;
mod fused;
mod generation;
mod hf_models;
mod kv_cache;
mod mha;
mod nn;
mod nn_options;
mod norm2d;
mod pool;
mod prune;
mod rope;
mod sequential;
mod state;
