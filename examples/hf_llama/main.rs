//! A Hugging Face Llama from its folder (config.json + safetensors,
//! grouped-query attention, RoPE with Llama 3 scaling, SwiGLU): loaded
//! zero-copy, its greedy and sampled continuations generated through a
//! preallocated key/value cache, with tokens/s and memory.
//!
//! ```text
//! cargo run --release --example hf_llama [-- DIR [PROMPT]]
//! cargo run --release --example hf_llama --features tokenizers -- DIR "Some text"
//! ```
//!
//! DIR defaults to the tiny random-init Llama of tests/fixtures/hf, whose
//! reference continuation the example checks. A PROMPT needs the
//! `tokenizers` feature; without it the reference prompt's ids are used.

mod model;
#[path = "../hf_run/mod.rs"]
mod run;

fn main() -> tensorscope::Result<()> {
    run::main("llama-tiny", |dir, dtype, dev| {
        model::Llama::load(dir, dtype, dev)
    })
}
