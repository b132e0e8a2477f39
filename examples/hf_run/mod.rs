//! What the two Hugging Face examples share: arguments, loading with its
//! memory figures, greedy and sampled generation with a progress bar, the
//! check against the fixture's reference, tokens/s.

use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use tensorscope::generation::{generate, CausalLm, GenerateOptions, SamplingOptions};
use tensorscope::memory;
use tensorscope::{DType, Device, Result};

const MIB: f64 = 1024.0 * 1024.0;

/// Loads the model in `args[1]` (default: the fixture `fixture`) with
/// `load`, then generates from `args[2]` (with the `tokenizers` feature) or
/// the reference prompt.
pub fn main<M: CausalLm>(
    fixture: &str,
    load: impl Fn(&Path, DType, Device) -> Result<M>,
) -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let default = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/hf")
        .join(fixture);
    let dir = args.get(1).map(PathBuf::from).unwrap_or(default.clone());
    let dev = Device::cuda_if_available();
    let before = memory::memory_allocated(dev);
    let t0 = std::time::Instant::now();
    let model = load(&dir, DType::F32, dev)?;
    let file_bytes: u64 = std::fs::read_dir(&dir)
        .map_err(|e| tensorscope::Error::Backend {
            op: "example",
            msg: e.to_string(),
        })?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "safetensors"))
        .map(|e| e.metadata().map(|m| m.len()).unwrap_or(0))
        .sum();
    println!(
        "loaded {} on {dev} in {:.1} ms: files {:.2} MiB, allocator +{:.2} MiB, mapped {:.2} MiB",
        dir.display(),
        t0.elapsed().as_secs_f64() * 1e3,
        file_bytes as f64 / MIB,
        (memory::memory_allocated(dev) - before) as f64 / MIB,
        memory::mapped_memory() as f64 / MIB
    );
    let reference = reference(&dir.join("reference.json"));
    let prompt: Vec<u32> = match (args.get(2), &reference) {
        (Some(text), _) => encode(&dir, text)?,
        (None, Some((ids, _))) => ids.clone(),
        (None, None) => vec![0],
    };
    let new_tokens = reference.as_ref().map_or(32, |r| r.1.len());
    for (what, sampling) in [
        ("greedy", SamplingOptions::default()),
        (
            "sampled (temperature 0.8, top-k 40, top-p 0.95, seed 7)",
            SamplingOptions {
                do_sample: true,
                temperature: 0.8,
                top_k: Some(40),
                top_p: Some(0.95),
                seed: 7,
                ..Default::default()
            },
        ),
    ] {
        let bar = ProgressBar::new(new_tokens as u64);
        bar.set_style(ProgressStyle::with_template("{msg} {bar:30} {pos}/{len} tokens").unwrap());
        bar.set_message(what);
        memory::reset_peak_memory_stats(dev);
        let start = memory::memory_allocated(dev);
        let o = GenerateOptions {
            max_new_tokens: new_tokens,
            sampling,
            eos_token_ids: vec![],
        };
        let out = generate(&model, std::slice::from_ref(&prompt), &o, |_, _| bar.inc(1))?;
        bar.finish_and_clear();
        println!(
            "{what}: {} tokens, prefill {:.2} ms, decode {:.0} tokens/s, peak +{:.3} MiB over the model, {} left after",
            out.tokens[0].len(),
            out.prefill.as_secs_f64() * 1e3,
            out.decode_tokens_per_second(),
            (memory::max_memory_allocated(dev) - start) as f64 / MIB,
            memory::memory_allocated(dev) - start
        );
        println!("  ids: {:?}", out.tokens[0]);
        print_text(&dir, &out.tokens[0]);
        if let (Some((ids, greedy)), true, None) = (&reference, !sampling.do_sample, args.get(2)) {
            assert_eq!(&prompt, ids);
            assert_eq!(&out.tokens[0], greedy, "transformers' greedy continuation");
            println!(
                "  = transformers' greedy continuation ({} tokens, reference.json)",
                greedy.len()
            );
        }
    }
    Ok(())
}

/// The reference prompt and greedy continuation, when the folder has them.
fn reference(path: &Path) -> Option<(Vec<u32>, Vec<u32>)> {
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    let ids = |x: &serde_json::Value| {
        x.as_array().map(|a| {
            a.iter()
                .filter_map(|t| t.as_u64())
                .map(|t| t as u32)
                .collect()
        })
    };
    Some((ids(&v["input_ids"][0])?, ids(&v["greedy"])?))
}

#[cfg(feature = "tokenizers")]
fn encode(dir: &Path, text: &str) -> Result<Vec<u32>> {
    tensorscope::generation::Tokenizer::from_file(dir)?.encode(text, true)
}

#[cfg(not(feature = "tokenizers"))]
fn encode(_: &Path, _: &str) -> Result<Vec<u32>> {
    Err(tensorscope::Error::Backend {
        op: "example",
        msg: "a text prompt needs --features tokenizers".into(),
    })
}

#[cfg(feature = "tokenizers")]
fn print_text(dir: &Path, ids: &[u32]) {
    if let Ok(t) = tensorscope::generation::Tokenizer::from_file(dir) {
        println!("  text: {:?}", t.decode(ids, true).unwrap_or_default());
    }
}

#[cfg(not(feature = "tokenizers"))]
fn print_text(_: &Path, _: &[u32]) {}
