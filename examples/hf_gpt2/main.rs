//! A Hugging Face GPT-2 from its folder (config.json + model.safetensors):
//! loaded zero-copy, its greedy and sampled continuations generated
//! through a preallocated key/value cache, with tokens/s and memory.
//!
//! ```text
//! cargo run --release --example hf_gpt2 [-- DIR [PROMPT]]
//! cargo run --release --example hf_gpt2 --features tokenizers -- DIR "Some text"
//! ```
//!
//! DIR defaults to the tiny random-init GPT-2 of tests/fixtures/hf (made by
//! transformers' `save_pretrained`), whose reference continuation the
//! example checks. A PROMPT needs the `tokenizers` feature (the folder's
//! tokenizer.json); without it the reference prompt's ids are used.

mod model;
#[path = "../hf_run/mod.rs"]
mod run;

fn main() -> tensorscope::Result<()> {
    run::main("gpt2-tiny", |dir, dtype, dev| {
        model::Gpt2::load(dir, dtype, dev)
    })
}
