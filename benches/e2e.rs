//! Two end-to-end programs of issue 14 (item 7), written as the GUIDE's
//! training (chapter 9, "Training") and serving ("Long-running services")
//! chapters write them; `bench/torch_e2e.py` is the PyTorch twin doing the
//! same computation, and `bench/run_e2e.sh` runs both in one run.
//!
//! (a) `transformer_train_step`: one training step of a character-level
//!     transformer language model: token + position embeddings, 2 pre-norm
//!     blocks (LayerNorm, causal self-attention from matmul / masked_fill /
//!     softmax with 4 heads, LayerNorm, MLP d -> 4d -> d with exact GELU),
//!     a final LayerNorm and a linear head to the 65 characters; the
//!     cross-entropy of the next character, backward, one Adam step (lr 3e-4).
//!     d = 128, sequence 64, batch 16; the same batch every step.
//!     The causal mask is a bool `[64, 64]` (`j > i`) made once from
//!     `arange` and `gt`, filled with `-inf` by `masked_fill` (the library
//!     has no `triu` or fused masked softmax; `masked_fill` is PyTorch's
//!     `masked_fill` too).
//!     `transformer_train_step_sdpa`: the same step with the attention as
//!     `scaled_dot_product_attention(q, k, v, is_causal)` on both sides
//!     (PyTorch's `F.scaled_dot_product_attention`).
//! (b) `mlp_serve_bN`: an inference service, MLP 784-1024-1024-10 (ReLU),
//!     answering one request of batch N = 1, 8, 64 under `no_grad`: the
//!     request's host data becomes a tensor (`from_slice`), the model runs
//!     (`Sequential::forward_owned`, so ReLU works in place), and the logits
//!     go back to a host `Vec` (`to_vec`).
//!     `mlp_serve_out_bN`: the same request with the activations in buffers
//!     made once (`matmul_out` into them, then `add_` of the bias and
//!     `relu_` in place). The library has no copy from a host slice into an
//!     existing tensor or from a tensor into a caller's slice, so the
//!     request's input tensor and output `Vec` are still allocated per
//!     request (the PyTorch twin does the same: `torch.from_numpy(r).clone()`
//!     and `.numpy().copy()`).
//! (b') `mlp_service` (issue 47): a service answering one request of
//!     20,000 rows of 256 features through LayerNorm, Linear 256 -> 1024,
//!     GELU, Linear 1024 -> 1024, GELU, Linear 1024 -> 16 under `no_grad`,
//!     as a new user writes it: a `Sequential`, the request cut into
//!     512-row chunks (`narrow`), each chunk's `forward_owned` output
//!     copied (`copy_`) into the request's `[20000, 16]` output tensor,
//!     made once. tests/memory/long_running.rs (d) asserts that after the
//!     first request a chunk takes no memory from the system.
//! (c) `gpt_train_step` and `cnn_train_step` (issue 17 item 9): one
//!     training step of each proof model, built by the examples' own code
//!     (`examples/models/gpt.rs`, `examples/models/cnn.rs`) so the row times
//!     what `cargo run --example gpt|cnn` trains. GPT: batch 16 windows of
//!     128 characters of `data/guide.txt` (fixed), forward, cross-entropy,
//!     backward, Adam (lr 2e-3). CNN: a batch of 64 8x8 digits (fixed
//!     values in [0, 1), labels 0-9), the same (Adam lr 3e-3).
//!
//!     `gpt_train_step_bf16` and `cnn_train_step_bf16` (issue 49 item 8):
//!     the same steps with the forward and the loss under
//!     `autocast(Cpu, bf16)`; `bench/run_amp.sh` runs the four with
//!     `--peaks`.
//!
//! ```text
//! cargo bench --bench e2e -- [--json PATH] [--filter A,B,..] [--profile N] [--peaks]
//! ```
//!
//! `--peaks`: each training row also records its peak, measured as
//! PyTorch's side measures it: in a fresh process (this binary with
//! `--peak ROW`), the resident set's high-water mark over 3 steps, less its
//! size before the model was made.
//!
//! `--profile N`: after each training row, N more steps under
//! [`tensorscope::profiler`], printed per op and per op and input shapes
//! (the slowest 25); `bench/torch_e2e.py --threads 2 --profile N` prints
//! `torch.profiler`'s tables for the same steps.

use std::hint::black_box;
use tensorscope::autocast::autocast_guard;
use tensorscope::autograd::no_grad_guard;
use tensorscope::nn::{
    cross_entropy, scaled_dot_product_attention_with, Embedding, LayerNorm, Linear, Module, ReLU,
    SdpaOptions, Sequential, GELU,
};
use tensorscope::optim::{Adam, AdamConfig, Optimizer};
use tensorscope::profiler::{self, ProfileOptions, SortBy};
use tensorscope::{DType, Device, DeviceType, Result, Tensor};

#[path = "common/peak.rs"]
mod peak;
#[path = "common/timing.rs"]
mod timing;

// The example's KV-cache half (sampling) is not timed here.
#[allow(dead_code)]
#[path = "../examples/models/gpt.rs"]
mod gpt_model;

#[path = "../examples/models/cnn.rs"]
mod cnn_model;
use peak::{peak_in_fresh_process, print_peak_since, status_bytes};
use timing::{arg_after, filter_arg, measure_budget, write_json, Measured, R};

const CPU: Device = Device::Cpu;

const VOCAB: usize = 65;
const D: usize = 128;
const HEADS: usize = 4;
const SEQ: usize = 64;
const BATCH: usize = 16;
const LAYERS: usize = 2;

/// Prefixes every name of `m`'s parameters with `prefix.`.
fn params<'a>(prefix: &str, m: &'a dyn Module) -> Vec<(String, &'a Tensor)> {
    m.named_parameters()
        .into_iter()
        .map(|(n, t)| (format!("{prefix}.{n}"), t))
        .collect()
}

fn params_mut<'a>(prefix: &str, m: &'a mut dyn Module) -> Vec<(String, &'a mut Tensor)> {
    m.named_parameters_mut()
        .into_iter()
        .map(|(n, t)| (format!("{prefix}.{n}"), t))
        .collect()
}

/// One pre-norm transformer block.
struct Block {
    ln1: LayerNorm,
    qkv: Linear,
    proj: Linear,
    ln2: LayerNorm,
    fc: Linear,
    out: Linear,
}

impl Block {
    fn new() -> Result<Block> {
        Ok(Block {
            ln1: LayerNorm::new(&[D])?,
            qkv: Linear::new(D, 3 * D)?,
            proj: Linear::new(D, D)?,
            ln2: LayerNorm::new(&[D])?,
            fc: Linear::new(D, 4 * D)?,
            out: Linear::new(4 * D, D)?,
        })
    }

    /// `x [B, T, D]` -> `[B, T, D]`; `mask [T, T]` is true where a position
    /// may not attend (the future).
    fn forward(&self, x: &Tensor, mask: &Tensor, sdpa: bool) -> Result<Tensor> {
        let (b, t) = (x.shape()[0] as isize, x.shape()[1] as isize);
        let hd = D / HEADS;
        let qkv = self.qkv.forward(&self.ln1.forward(x)?)?; // [B, T, 3D]
        let head = |i: usize| -> Result<Tensor> {
            qkv.narrow(2, i * D, D)?
                .reshape(&[b, t, HEADS as isize, hd as isize])?
                .transpose(1, 2) // [B, H, T, hd]
        };
        let (q, k, v) = (head(0)?, head(1)?, head(2)?);
        if sdpa {
            let causal = SdpaOptions {
                is_causal: true,
                ..Default::default()
            };
            let y = scaled_dot_product_attention_with(&q, &k, &v, &causal)?
                .transpose(1, 2)?
                .contiguous()?
                .reshape(&[b, t, D as isize])?;
            let x = x.add(&self.proj.forward(&y)?)?;
            let h = self.fc.forward(&self.ln2.forward(&x)?)?.gelu()?;
            return x.add(&self.out.forward(&h)?);
        }
        let att = q
            .matmul(&k.transpose(-2, -1)?)?
            .mul_scalar(1.0 / (hd as f64).sqrt())?
            .masked_fill(mask, f64::NEG_INFINITY)?
            .softmax(-1)?;
        let y = att
            .matmul(&v)?
            .transpose(1, 2)?
            .contiguous()?
            .reshape(&[b, t, D as isize])?;
        let x = x.add(&self.proj.forward(&y)?)?;
        let h = self.fc.forward(&self.ln2.forward(&x)?)?.gelu()?;
        x.add(&self.out.forward(&h)?)
    }

    fn named_parameters(&self) -> Vec<(String, &Tensor)> {
        let mut v = params("ln1", &self.ln1);
        v.extend(params("attn.qkv", &self.qkv));
        v.extend(params("attn.proj", &self.proj));
        v.extend(params("ln2", &self.ln2));
        v.extend(params("mlp.fc", &self.fc));
        v.extend(params("mlp.out", &self.out));
        v
    }

    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
        let mut v = params_mut("ln1", &mut self.ln1);
        v.extend(params_mut("attn.qkv", &mut self.qkv));
        v.extend(params_mut("attn.proj", &mut self.proj));
        v.extend(params_mut("ln2", &mut self.ln2));
        v.extend(params_mut("mlp.fc", &mut self.fc));
        v.extend(params_mut("mlp.out", &mut self.out));
        v
    }
}

/// The character-level language model: `idx [B, T]` (i64) -> logits `[B, T, VOCAB]`.
struct CharTransformer {
    tok: Embedding,
    pos: Embedding,
    blocks: Vec<Block>,
    ln_f: LayerNorm,
    head: Linear,
    /// `0..SEQ` (i64), the positions.
    positions: Tensor,
    /// `[SEQ, SEQ]` bool, true above the diagonal.
    mask: Tensor,
    /// Attention through `scaled_dot_product_attention` (causal) instead
    /// of matmul / masked_fill / softmax / matmul.
    sdpa: bool,
}

impl CharTransformer {
    fn new(sdpa: bool) -> Result<CharTransformer> {
        let positions = Tensor::arange(0.0, SEQ as f64, 1.0, DType::I64, CPU)?;
        let rows = positions.view(&[SEQ as isize, 1])?;
        let cols = positions.view(&[1, SEQ as isize])?;
        Ok(CharTransformer {
            tok: Embedding::new(VOCAB, D)?,
            pos: Embedding::new(SEQ, D)?,
            blocks: (0..LAYERS).map(|_| Block::new()).collect::<Result<_>>()?,
            ln_f: LayerNorm::new(&[D])?,
            head: Linear::new(D, VOCAB)?,
            mask: cols.gt(&rows)?,
            positions,
            sdpa,
        })
    }
}

impl Module for CharTransformer {
    fn forward(&self, idx: &Tensor) -> Result<Tensor> {
        let t = idx.shape()[1];
        let pos = self.pos.forward(&self.positions.narrow(0, 0, t)?)?; // [T, D]
        let mask = self.mask.narrow(0, 0, t)?.narrow(1, 0, t)?;
        let mut x = self.tok.forward(idx)?.add(&pos)?; // [B, T, D]
        for b in &self.blocks {
            x = b.forward(&x, &mask, self.sdpa)?;
        }
        self.head.forward(&self.ln_f.forward(&x)?)
    }

    fn named_parameters(&self) -> Vec<(String, &Tensor)> {
        let mut v = params("tok", &self.tok);
        v.extend(params("pos", &self.pos));
        for (i, b) in self.blocks.iter().enumerate() {
            v.extend(
                b.named_parameters()
                    .into_iter()
                    .map(|(n, t)| (format!("blocks.{i}.{n}"), t)),
            );
        }
        v.extend(params("ln_f", &self.ln_f));
        v.extend(params("head", &self.head));
        v
    }

    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
        let mut v = params_mut("tok", &mut self.tok);
        v.extend(params_mut("pos", &mut self.pos));
        for (i, b) in self.blocks.iter_mut().enumerate() {
            v.extend(
                b.named_parameters_mut()
                    .into_iter()
                    .map(|(n, t)| (format!("blocks.{i}.{n}"), t)),
            );
        }
        v.extend(params_mut("ln_f", &mut self.ln_f));
        v.extend(params_mut("head", &mut self.head));
        v
    }
}

/// Deterministic pseudo-random numbers (the data's values do not matter to
/// the timing; the PyTorch twin draws its own).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn uniform(&mut self) -> f32 {
        (self.next() as f32 / (1u64 << 31) as f32) * 2.0 - 1.0
    }
}

fn transformer(rows: &mut Vec<Measured>, sdpa: bool) -> R<()> {
    let mut model = CharTransformer::new(sdpa)?;
    let mut rng = Lcg(7);
    let text: Vec<i64> = (0..BATCH * (SEQ + 1))
        .map(|_| (rng.next() % VOCAB as u64) as i64)
        .collect();
    let text = Tensor::from_vec(text, &[BATCH, SEQ + 1], CPU)?;
    let x = text.narrow(1, 0, SEQ)?.contiguous()?;
    let y = text.narrow(1, 1, SEQ)?.reshape(&[-1])?;
    let (name, what) = if sdpa {
        (
            "transformer_train_step_sdpa",
            "the same step, attention by scaled_dot_product_attention(is_causal)",
        )
    } else {
        (
            "transformer_train_step",
            "char LM, d128, 4 heads, 2 blocks, seq 64, batch 16, vocab 65: fwd + CE + bwd + Adam",
        )
    };
    rows.push(train_row(name, what, 4.0, &mut model, 3e-4, &x, &y, None)?);
    Ok(())
}

/// `gpt_train_step`: `examples/gpt.rs`'s model and a fixed batch.
fn gpt_setup() -> Result<(gpt_model::Gpt, Tensor, Tensor)> {
    const GPT_BATCH: usize = 16;
    let (ids, chars) = gpt_model::corpus();
    let seq = gpt_model::SEQ;
    let mut rng = Lcg(5);
    let (mut x, mut y) = (Vec::new(), Vec::new());
    for _ in 0..GPT_BATCH {
        let at = (rng.next() % (ids.len() - seq - 1) as u64) as usize;
        x.extend_from_slice(&ids[at..at + seq]);
        y.extend_from_slice(&ids[at + 1..at + seq + 1]);
    }
    let x = Tensor::from_vec(x, &[GPT_BATCH, seq], CPU)?;
    let y = Tensor::from_vec(y, &[GPT_BATCH * seq], CPU)?;
    Ok((gpt_model::Gpt::new(chars.len(), CPU)?, x, y))
}

/// `cnn_train_step`: `examples/cnn.rs`'s model and a fixed batch.
fn cnn_setup() -> Result<(Sequential, Tensor, Tensor)> {
    const CNN_BATCH: usize = 64;
    let mut rng = Lcg(9);
    let x: Vec<f32> = (0..CNN_BATCH * 64)
        .map(|_| (rng.uniform() + 1.0) / 2.0)
        .collect();
    let y: Vec<i64> = (0..CNN_BATCH).map(|_| (rng.next() % 10) as i64).collect();
    let x = Tensor::from_vec(x, &[CNN_BATCH, 1, 8, 8], CPU)?;
    let y = Tensor::from_vec(y, &[CNN_BATCH], CPU)?;
    Ok((cnn_model::model(CPU)?, x, y))
}

const GPT_WHAT: &str =
    "examples/gpt.rs's model (RMSNorm, causal MHA, GELU MLP, tied head; d128, 4 heads, \
                        2 blocks), batch 16 x 128 characters: fwd + CE + bwd + Adam";
const CNN_WHAT: &str =
    "examples/cnn.rs's model (3 convs 3x3 same, 2 max-pools, linear), batch 64 of 1x8x8: \
                        fwd + CE + bwd + Adam";

/// The training rows of the proof models: (name, what, budget in seconds,
/// Adam's lr, the autocast dtype of the forward). The `_bf16` rows are
/// issue 49's: the forward and loss under `autocast(Cpu, bf16)`, as
/// `torch.autocast("cpu", dtype=torch.bfloat16)` on PyTorch's side.
const PROGRAMS: [(&str, &str, f64, f64, Option<DType>); 4] = [
    ("gpt_train_step", GPT_WHAT, 4.0, 2e-3, None),
    (
        "gpt_train_step_bf16",
        GPT_WHAT,
        4.0,
        2e-3,
        Some(DType::BF16),
    ),
    ("cnn_train_step", CNN_WHAT, 2.0, 3e-3, None),
    (
        "cnn_train_step_bf16",
        CNN_WHAT,
        2.0,
        3e-3,
        Some(DType::BF16),
    ),
];

/// Runs `f` on the model and batch of `program` (a `PROGRAMS` name).
fn with_program<T>(
    program: &str,
    f: &mut dyn FnMut(&mut dyn Module, &Tensor, &Tensor) -> R<T>,
) -> R<T> {
    if program.starts_with("gpt") {
        let (mut m, x, y) = gpt_setup()?;
        f(&mut m, &x, &y)
    } else {
        let (mut m, x, y) = cnn_setup()?;
        f(&mut m, &x, &y)
    }
}

/// `--peak PROGRAM`: the model and batch made, then `PEAK_STEPS` steps,
/// and the resident set's high-water mark over its size before, printed
/// (bench/torch_e2e.py --peak measures PyTorch the same way). The
/// allocator's own peak of the last step goes to stderr.
fn peak_mode(program: &str) -> R<()> {
    const PEAK_STEPS: usize = 3;
    let &(_, _, _, lr, region) = PROGRAMS
        .iter()
        .find(|p| p.0 == program)
        .ok_or_else(|| format!("--peak {program}: not a training row"))?;
    let before = status_bytes("VmRSS:");
    let step_peak = with_program(program, &mut |model, x, y| {
        let mut opt = Adam::new(AdamConfig {
            lr,
            ..Default::default()
        })?;
        let mut peak = 0;
        for _ in 0..PEAK_STEPS {
            let (r, m) =
                tensorscope::memory::measure(CPU, || train_step(model, &mut opt, x, y, region))?;
            r?;
            peak = m.peak_delta;
        }
        Ok(peak)
    })?;
    eprintln!("{program}: allocator peak of step {PEAK_STEPS} over its start: {step_peak} B");
    print_peak_since(before);
    Ok(())
}

/// One training step of `model` timed as a row (zero_grad, forward, the
/// cross-entropy of the logits flattened to `[-1, classes]` against `y`,
/// backward, Adam at `lr`), with the median and the loss at the first and
/// last timed step printed.
#[allow(clippy::too_many_arguments)]
fn train_row(
    name: &'static str,
    what: &'static str,
    budget: f64,
    model: &mut dyn Module,
    lr: f64,
    x: &Tensor,
    y: &Tensor,
    region: Option<DType>,
) -> R<Measured> {
    let mut opt = Adam::new(AdamConfig {
        lr,
        ..Default::default()
    })?;
    let mut losses = Vec::new();
    let m = measure_budget(name, what, budget, 10, || {
        let loss = train_step(model, &mut opt, x, y, region)?;
        losses.push(loss.item::<f32>()?);
        Ok(())
    })?;
    if let Some(steps) = arg_after("--profile").and_then(|s| s.parse::<usize>().ok()) {
        // `--profile N`: N more steps under the profiler, its per-op table
        // on stderr (bench/torch_e2e.py --profile N prints PyTorch's).
        let opts = ProfileOptions {
            record_shapes: true,
            profile_memory: false,
            device_time: None,
        };
        let (r, prof) = profiler::profile(opts, || -> Result<()> {
            for _ in 0..steps {
                train_step(model, &mut opt, x, y, region)?;
            }
            Ok(())
        })?;
        r?;
        eprintln!(
            "{name}: {steps} steps profiled\n{}",
            prof.table(SortBy::SelfTime, 40)
        );
        let mut by_shape = prof.key_averages_by_shapes();
        by_shape.sort_by_key(|a| std::cmp::Reverse(a.self_us));
        for a in by_shape.iter().take(25) {
            eprintln!(
                "{:>10} us {:>5} calls  {} {:?}",
                a.self_us, a.calls, a.name, a.shapes
            );
        }
    }
    eprintln!(
        "{name} {:.3} ms ({} samples; loss {:.4} at step 1, {:.4} at step {}; {} parameters)",
        m.median() * 1e3,
        m.samples.len(),
        losses[0],
        losses[losses.len() - 1],
        losses.len(),
        model.parameters().iter().map(|p| p.numel()).sum::<usize>()
    );
    Ok(m)
}

/// One step: zero_grad, forward, the cross-entropy of the logits
/// flattened to `[-1, classes]` against `y` (both under an autocast region
/// of `region` when given), backward, the optimizer step; returns the loss.
fn train_step(
    model: &mut dyn Module,
    opt: &mut Adam,
    x: &Tensor,
    y: &Tensor,
    region: Option<DType>,
) -> Result<Tensor> {
    opt.zero_grad(model);
    let loss = {
        let _ac = region
            .map(|dt| autocast_guard(DeviceType::Cpu, dt))
            .transpose()?;
        let logits = model.forward(x)?;
        let classes = logits.shape()[logits.rank() - 1] as isize;
        cross_entropy(&logits.reshape(&[-1, classes])?, y)?
    };
    loss.backward()?;
    opt.step(model)?;
    Ok(loss)
}

fn mlp() -> Result<Sequential> {
    let mut net = Sequential::new();
    net.add(Linear::new(784, 1024)?)
        .add(ReLU)
        .add(Linear::new(1024, 1024)?)
        .add(ReLU)
        .add(Linear::new(1024, 10)?);
    Ok(net)
}

fn service(rows: &mut Vec<Measured>, want: &dyn Fn(&str) -> bool) -> R<()> {
    let net = mlp()?;
    let mut rng = Lcg(11);
    let _g = no_grad_guard();
    // The `_out` form's weights: the Linear layers' own tensors, transposed views.
    let lin: Vec<(Tensor, Tensor)> = net
        .named_parameters()
        .chunks(2)
        .map(|wb| Ok((wb[0].1.t()?, wb[1].1.alias())))
        .collect::<Result<_>>()?;
    for batch in [1usize, 8, 64] {
        let req: Vec<f32> = (0..batch * 784).map(|_| rng.uniform()).collect();
        let name = format!("mlp_serve_b{batch}");
        if want(&name) {
            let m = measure_budget(
                Box::leak(name.into_boxed_str()),
                "MLP 784-1024-1024-10: from_slice, Sequential::forward_owned, to_vec",
                1.0,
                10,
                || {
                    let x = Tensor::from_slice(&req, &[batch, 784], CPU)?;
                    let y = net.forward_owned(x)?;
                    black_box(y.to_vec::<f32>()?);
                    Ok(())
                },
            )?;
            eprintln!("{:<24} {:.1} us", m.name, m.median() * 1e6);
            rows.push(m);
        }
        let name = format!("mlp_serve_out_b{batch}");
        if want(&name) {
            let mut bufs: Vec<Tensor> = [1024, 1024, 10]
                .iter()
                .map(|&n| Tensor::empty(&[batch, n], DType::F32, CPU))
                .collect::<Result<_>>()?;
            let m = measure_budget(
                Box::leak(name.into_boxed_str()),
                "MLP 784-1024-1024-10: from_slice, matmul_out + add_ + relu_ into buffers, to_vec",
                1.0,
                10,
                || {
                    let x = Tensor::from_slice(&req, &[batch, 784], CPU)?;
                    let mut h = &x;
                    for (i, ((wt, b), out)) in lin.iter().zip(bufs.iter_mut()).enumerate() {
                        h.matmul_out(wt, out)?;
                        out.add_(b)?;
                        if i < 2 {
                            out.relu_()?;
                        }
                        h = out;
                    }
                    black_box(h.to_vec::<f32>()?);
                    Ok(())
                },
            )?;
            eprintln!("{:<24} {:.1} us", m.name, m.median() * 1e6);
            rows.push(m);
        }
    }
    Ok(())
}

/// The `mlp_service` row's model (the same layers as bench/torch_e2e.py's).
fn service_model() -> Result<Sequential> {
    let mut net = Sequential::new();
    net.add(LayerNorm::new(&[256])?)
        .add(Linear::new(256, 1024)?)
        .add(GELU)
        .add(Linear::new(1024, 1024)?)
        .add(GELU)
        .add(Linear::new(1024, 16)?);
    Ok(net)
}

fn mlp_service(rows: &mut Vec<Measured>, want: &dyn Fn(&str) -> bool) -> R<()> {
    const ROWS: usize = 20_000;
    const CHUNK: usize = 512;
    if !want("mlp_service") {
        return Ok(());
    }
    let net = service_model()?;
    let _g = no_grad_guard();
    let mut rng = Lcg(13);
    let req: Vec<f32> = (0..ROWS * 256).map(|_| rng.uniform()).collect();
    let x = Tensor::from_slice(&req, &[ROWS, 256], CPU)?;
    let out = Tensor::empty(&[ROWS, 16], DType::F32, CPU)?;
    let m = measure_budget(
        "mlp_service",
        "LayerNorm, Linear 256-1024, GELU, Linear 1024-1024, GELU, Linear 1024-16 (Sequential): one request of 20,000 rows in 512-row chunks, each copied into the request's output",
        3.0,
        3,
        || {
            for start in (0..ROWS).step_by(CHUNK) {
                let len = CHUNK.min(ROWS - start);
                let y = net.forward_owned(x.narrow(0, start, len)?)?;
                out.narrow(0, start, len)?.copy_(&y)?;
            }
            black_box(&out);
            Ok(())
        },
    )?;
    eprintln!("{:<24} {:.1} ms", m.name, m.median() * 1e3);
    rows.push(m);
    Ok(())
}

fn main() -> R<()> {
    if let Some(program) = arg_after("--peak") {
        return peak_mode(&program);
    }
    let json = arg_after("--json");
    let filter = filter_arg();
    let want = |n: &str| filter.is_empty() || filter.iter().any(|f| n.contains(f.as_str()));
    let threads = rayon::current_num_threads();
    tensorscope::manual_seed(0);
    eprintln!(
        "tensorscope {} end-to-end (rayon threads: {threads}, SIMD level: {})",
        env!("CARGO_PKG_VERSION"),
        tensorscope::cpu_capability()
    );
    let mut rows = Vec::new();
    // Each program starts as in a process of its own: the same seed
    // (the CNN's initial loss no longer depends on which rows ran
    // before it) and no blocks cached by the programs before it. (Once,
    // after the transformer's steps, the CNN step ran 2.0-2.1 ms against
    // 1.6-1.7 with an empty cache; a later rerun did not reproduce it:
    // bench/results/ops-why.md, session 19.)
    let fresh = || {
        tensorscope::manual_seed(0);
        tensorscope::memory::empty_cache(CPU);
    };
    for sdpa in [false, true] {
        let name = if sdpa {
            "transformer_train_step_sdpa"
        } else {
            "transformer_train_step"
        };
        if filter.is_empty()
            || filter
                .iter()
                .any(|f| name == f || (f != "transformer_train_step" && name.contains(f.as_str())))
        {
            fresh();
            transformer(&mut rows, sdpa)?;
        }
    }
    let peaks = std::env::args().any(|a| a == "--peaks");
    for &(name, what, budget, lr, region) in &PROGRAMS {
        if want(name) {
            fresh();
            let mut m = with_program(name, &mut |model, x, y| {
                train_row(name, what, budget, model, lr, x, y, region)
            })?;
            if peaks {
                m.peak_bytes = Some(peak_in_fresh_process(name, "the model")?);
            }
            rows.push(m);
        }
    }
    fresh();
    service(&mut rows, &want)?;
    fresh();
    mlp_service(&mut rows, &want)?;
    write_json(json, threads, &rows)?;
    Ok(())
}
