//! Double buffering (the seed's `DoubleBufferedDataLoader`): a ring of two
//! batch buffers, one being filled while the loop computes on the other.
//!
//! `cargo run --release --example double_buffering`

#[path = "buffering/mod.rs"]
mod buffering;

fn main() -> tensorscope::Result<()> {
    buffering::run(2, "double buffering")
}
