//! Issue 48 item 6: the Hugging Face examples' GPT-2 and Llama
//! (examples/hf_*/model.rs) over the folders bench/interop_models.py saves
//! with transformers, timed as bench/torch_interop.py times PyTorch +
//! transformers on the same folders (bench/run_interop.sh runs both):
//!
//! * `<model>_forward_b4x128`: the logits of 4 sequences of 128 tokens
//!   (under no_grad; a cache for the 128 positions made per call);
//! * `<model>_generate_64`: 64 greedy tokens after a 32-token prompt,
//!   through `generation::generate`.
//!
//! Each row also records its peak memory as PyTorch's side measures it: in
//! a fresh process (this binary with `--peak ROW`), the resident set's
//! peak (VmHWM) over loading the model and one call, less its size before
//! the load.
//!
//! ```text
//! cargo bench --bench interop -- [--json PATH] [--filter A,B,..]
//! ```

#[path = "../examples/hf_gpt2/model.rs"]
mod gpt2;
#[path = "../examples/hf_llama/model.rs"]
mod llama;
#[path = "common/peak.rs"]
mod peak;
#[path = "common/timing.rs"]
mod timing;

use peak::{peak_in_fresh_process, print_peak_since, status_bytes};
use std::path::PathBuf;
use tensorscope::autograd::no_grad;
use tensorscope::generation::{generate, CausalLm, GenerateOptions};
use tensorscope::{DType, Device, Tensor};
use timing::{arg_after, filter_arg, fmt_s, measure_budget, write_json, Measured, R};

const CPU: Device = Device::Cpu;
const VOCAB: i64 = 8192;

/// Deterministic ids, the same rule as bench/torch_interop.py's.
fn ids(b: usize, t: usize) -> Vec<i64> {
    (0..b * t).map(|i| (i as i64 * 7919 + 13) % VOCAB).collect()
}

/// `--peak WORKLOAD`: load, one call, and the peak growth printed.
fn peak_mode(dir: &std::path::Path, workload: &str) -> R<()> {
    let before = status_bytes("VmRSS:");
    let model = workload.split('_').next().unwrap_or("");
    match model {
        "gpt2" => run_once(
            &gpt2::Gpt2::load(dir.join("gpt2-bench"), DType::F32, CPU)?,
            workload,
        )?,
        _ => run_once(
            &llama::Llama::load(dir.join("llama-bench"), DType::F32, CPU)?,
            workload,
        )?,
    }
    print_peak_since(before);
    Ok(())
}

fn run_once<M: CausalLm>(m: &M, workload: &str) -> R<()> {
    if workload.ends_with("forward_b4x128") {
        forward(m)
    } else {
        generate_64(m)
    }
}

fn forward<M: CausalLm>(m: &M) -> R<()> {
    let x = Tensor::from_vec(ids(4, 128), &[4, 128], CPU)?;
    no_grad(|| {
        let mut cache = m.new_cache(4, 128)?;
        m.forward(&x, &mut cache).map(drop)
    })?;
    Ok(())
}

fn generate_64<M: CausalLm>(m: &M) -> R<()> {
    let prompt: Vec<u32> = ids(1, 32).iter().map(|&i| i as u32).collect();
    let o = GenerateOptions {
        max_new_tokens: 64,
        ..Default::default()
    };
    let g = generate(m, std::slice::from_ref(&prompt), &o, |_, _| {})?;
    assert_eq!(g.tokens[0].len(), 64);
    Ok(())
}

/// Each model's rows, after its name.
const ROWS: [&str; 2] = ["forward_b4x128", "generate_64"];

fn rows_for<M: CausalLm>(
    name: &str,
    m: &M,
    want: &dyn Fn(&str) -> bool,
    out: &mut Vec<Measured>,
) -> R<()> {
    let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
    let what = [
        "logits of 4 x 128 tokens (no_grad)",
        "64 greedy tokens after 32 (batch 1, KV cache)",
    ];
    for ((r, what), budget) in ROWS.iter().zip(what).zip([3.0, 4.0]) {
        let (row, what) = (leak(format!("{name}_{r}")), leak(format!("{name}: {what}")));
        if !want(row) {
            continue;
        }
        let mut r = measure_budget(row, what, budget, 3, || run_once(m, row))?;
        eprintln!("  {row}: {}", fmt_s(r.median()));
        r.peak_bytes = Some(peak_in_fresh_process(row, "loading")?);
        out.push(r);
    }
    Ok(())
}

fn main() -> R<()> {
    let json = arg_after("--json");
    let filter = filter_arg();
    let want = |n: &str| filter.is_empty() || filter.iter().any(|f| n.contains(f.as_str()));
    let dir = PathBuf::from(
        std::env::var("INTEROP_MODELS").unwrap_or_else(|_| "target/interop-models".into()),
    );
    if let Some(w) = arg_after("--peak") {
        return peak_mode(&dir, &w);
    }
    let threads = rayon::current_num_threads();
    eprintln!(
        "tensorscope {} interop (rayon threads: {threads}, SIMD level: {}, models in {})",
        env!("CARGO_PKG_VERSION"),
        tensorscope::cpu_capability(),
        dir.display()
    );
    let mut rows = Vec::new();
    // A model is loaded when one of its rows is wanted.
    let any_row = |m: &str| ROWS.iter().any(|r| want(&format!("{m}_{r}")));
    if any_row("gpt2") {
        let m = gpt2::Gpt2::load(dir.join("gpt2-bench"), DType::F32, CPU)?;
        rows_for("gpt2", &m, &want, &mut rows)?;
    }
    if any_row("llama") {
        let m = llama::Llama::load(dir.join("llama-bench"), DType::F32, CPU)?;
        rows_for("llama", &m, &want, &mut rows)?;
    }
    write_json(json, threads, &rows)?;
    Ok(())
}
