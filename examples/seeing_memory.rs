//! Seeing memory (issue 16, first part): trains the digits MLP for a few
//! steps with the memory history on, then writes `seeing_memory.pickle`, a
//! snapshot in the layout of `torch.cuda.memory._snapshot()` that
//! PyTorch's own tools open:
//!
//! ```text
//! python -m torch.cuda._memory_viz stats seeing_memory.pickle
//! python -m torch.cuda._memory_viz trace_plot seeing_memory.pickle -o trace.html
//! ```
//!
//! and `seeing_memory.html`, the library's own picture of it (one
//! self-contained file: the allocated memory over the steps stacked by op,
//! the segments, the largest tensors at the peak), and prints what
//! `memory::measure` saw of a step, the allocations per op and per
//! module, the profiler's table of one more step (its Chrome trace in
//! `seeing_memory.trace.json`, for Perfetto), and `memory_summary`.
//!
//! `cargo run --release --example seeing_memory [-- OUT.pickle [STEPS]]`

#[allow(dead_code)] // the tour's digits task: only its data and model are used here
#[path = "digits.rs"]
mod digits;

use indicatif::{ProgressBar, ProgressStyle};
use std::collections::BTreeMap;
use tensorscope::memory::{self, Action};
use tensorscope::nn::{cross_entropy, Module};
use tensorscope::optim::{Adam, AdamConfig, Optimizer};
use tensorscope::profiler::{self, ProfileOptions, SortBy};
use tensorscope::{Device, Tensor};

const BATCH: usize = 64;

fn main() -> tensorscope::Result<()> {
    tensorscope::manual_seed(7);
    let dev = Device::cuda_if_available();
    let out = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "seeing_memory.pickle".into());
    let steps: usize = std::env::args()
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    println!("seeing memory on {dev}: {steps} steps of the digits MLP with the history on");
    let (xs, ys) = digits::load();
    let x = Tensor::from_vec(xs[..BATCH * 64].to_vec(), &[BATCH, 64], dev)?;
    let y = Tensor::from_vec(ys[..BATCH].to_vec(), &[BATCH], dev)?;

    memory::record_history(dev, true, 100_000)?;
    let mut net = digits::model()?;
    let mut opt = Adam::new(AdamConfig {
        lr: 3e-3,
        ..Default::default()
    })?;
    let bar = ProgressBar::new(steps as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} steps {msg}").expect("a valid template"),
    );
    let mut step = |net: &mut tensorscope::nn::Sequential| -> tensorscope::Result<f32> {
        let _s = memory::scope("train_step");
        opt.zero_grad(net);
        let loss = cross_entropy(&net.forward(&x)?, &y)?;
        loss.backward()?;
        opt.step(net)?;
        loss.item::<f32>()
    };
    let mut last = (0.0, memory::Measurement::default());
    for i in 0..steps {
        let (loss, m) = memory::measure(dev, || step(&mut net))?;
        last = (loss?, m);
        bar.set_message(format!("loss {:.4}", last.0));
        bar.inc(1);
        if i == 0 {
            println!(
                "step 1 (Adam's state made here): peak +{} over the start, {} allocations, {} left allocated",
                memory::fmt_bytes(m.peak_delta),
                m.allocations,
                memory::fmt_bytes(m.allocated_delta.max(0) as usize)
            );
        }
    }
    bar.finish();
    // One more step under the profiler (torch.profiler with record_shapes
    // and profile_memory): the table and a Chrome trace.
    let (loss, prof) = profiler::profile(
        ProfileOptions {
            record_shapes: true,
            profile_memory: true,
            // On a GPU, each op's time on it too (CUDA events).
            device_time: dev.is_cuda().then_some(dev),
        },
        || step(&mut net),
    )?;
    loss?;
    let m = last.1;
    println!(
        "step {steps}: peak +{} over the start, {} allocations, {} bytes left allocated (the step frees all it made)",
        memory::fmt_bytes(m.peak_delta),
        m.allocations,
        m.allocated_delta
    );

    let snap = memory::snapshot(dev)?;
    memory::record_history(dev, false, 0)?;
    let mut by_op: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let mut by_module: BTreeMap<String, usize> = BTreeMap::new();
    for e in snap.trace.iter().filter(|e| e.action == Action::Alloc) {
        let r = by_op.entry(e.op.unwrap_or("(no op)")).or_default();
        r.0 += 1;
        r.1 += e.size;
        if let Some(m) = &e.module {
            *by_module.entry(m.clone()).or_default() += e.size;
        }
    }
    println!(
        "\nhistory: {} events; allocations by op (count, bytes):",
        snap.trace.len()
    );
    let mut ops: Vec<_> = by_op.into_iter().collect();
    ops.sort_by_key(|(_, (_, b))| std::cmp::Reverse(*b));
    for (op, (n, b)) in ops {
        println!("  {op:<16} {n:>6} {:>12}", memory::fmt_bytes(b));
    }
    println!("allocated bytes by module of the Sequential:");
    for (m, b) in by_module {
        println!("  layer {m:<6} {:>12}", memory::fmt_bytes(b));
    }
    println!(
        "snapshot: {} segments, {} allocated, {} reserved (memory_allocated {})",
        snap.segments.len(),
        memory::fmt_bytes(snap.allocated_bytes()),
        memory::fmt_bytes(snap.reserved_bytes()),
        memory::fmt_bytes(memory::memory_allocated(dev))
    );
    snap.save_pickle(&out)?;
    let html = std::path::Path::new(&out).with_extension("html");
    snap.save_html(&html)?;
    println!("wrote {out}: python -m torch.cuda._memory_viz stats {out}");
    println!(
        "wrote {}: the timeline by op, the segments, the largest tensors at the peak\n",
        html.display()
    );
    let trace = std::path::Path::new(&out).with_extension("trace.json");
    prof.export_chrome_trace(&trace)?;
    println!(
        "one more step under the profiler, by self memory (Chrome trace: {}):",
        trace.display()
    );
    println!("{}", prof.table(SortBy::SelfMemory, 12));
    println!("{}", memory::memory_summary(dev));
    Ok(())
}
