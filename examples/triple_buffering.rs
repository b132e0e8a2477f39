//! Triple buffering (the seed's `TripleBufferedLoader`): a ring of three
//! batch buffers, loading, ready and in use, so a slow batch is absorbed.
//!
//! `cargo run --release --example triple_buffering`

#[path = "buffering/mod.rs"]
mod buffering;

fn main() -> tensorscope::Result<()> {
    buffering::run(3, "triple buffering")
}
