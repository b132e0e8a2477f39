//! Seed 003's pruning scenario, and what pruning does to memory.
//!
//! ```python
//! model = torch.nn.Linear(1000, 1000)
//! prune.ln_structured(model, name="weight", amount=0.3, n=2, dim=0)
//! prune.remove(model, "weight")
//! print(f"Sparse parameters: {torch.sum(model.weight == 0)}")
//! ```
//!
//! The same calls here, with `memory_allocated` after each: the mask is one
//! more weight-sized buffer (masking saves nothing), a forward makes the
//! masked weight as a temporary, and `remove` gives the mask back. Then
//! what does save memory: the rows that structured pruning zeroed are
//! units that compute nothing, and `prune::drop_pruned_units` builds the
//! smaller dense pair of layers without them, which computes the same
//! outputs.
//!
//! `cargo run --release --example pruning` (on cuda:0 when a GPU is present).

use tensorscope::nn::{prune, Linear, Module, ReLU};
use tensorscope::{autograd, memory, DType, Device, Tensor};

fn mib(b: usize) -> String {
    memory::fmt_bytes(b)
}

fn main() -> tensorscope::Result<()> {
    tensorscope::manual_seed(0);
    let dev = Device::cuda_if_available();
    let at = || memory::memory_allocated(dev);
    let start = at();

    // The seed's scenario.
    let mut model = Linear::with_options(1000, 1000, true, DType::F32, dev)?;
    let dense = at() - start;
    println!(
        "Linear(1000, 1000) on {dev}: {} allocated (weight and bias)",
        mib(dense)
    );
    prune::ln_structured(&mut model, "weight", 0.3, 2.0, 0)?;
    let masked = at() - start;
    let names: Vec<String> = model.named_state().into_iter().map(|(n, _)| n).collect();
    println!(
        "after prune::ln_structured(amount 0.3, n 2, dim 0): {} allocated (+{}: the mask), state {names:?}",
        mib(masked),
        mib(masked - dense)
    );
    let x = Tensor::randn(&[64, 1000], DType::F32, dev)?;
    let (y, m) = memory::measure(dev, || autograd::no_grad(|| model.forward(&x)))?;
    let y = y?;
    println!(
        "a forward of 64 rows: peak {} over its start (the masked weight, {}, and the output), {} left (the output)",
        mib(m.peak_delta),
        mib(1000 * 1000 * 4),
        mib(m.allocated_delta as usize)
    );
    drop((y, x));
    prune::remove(&mut model, "weight")?;
    println!(
        "after prune::remove: {} allocated (the mask freed; the zeros are in the dense weight)",
        mib(at() - start)
    );
    let zeros = model.weight.eq_scalar(0.0)?.sum_all()?.item::<i64>()?;
    println!("Sparse parameters: {zeros}");
    let rows = model
        .weight
        .ne_scalar(0.0)?
        .sum(&[1], false)?
        .ne_scalar(0.0)?;
    println!(
        "rows left with a non-zero weight: {} of 1000",
        rows.sum_all()?.item::<i64>()?
    );
    drop((model, rows));

    // What saves memory: a smaller dense pair.
    println!();
    let mut fc1 = Linear::with_options(1000, 1000, true, DType::F32, dev)?;
    let fc2 = Linear::with_options(1000, 10, true, DType::F32, dev)?;
    let x = Tensor::randn(&[64, 1000], DType::F32, dev)?;
    let pair_dense = at() - start;
    prune::ln_structured(&mut fc1, "weight", 0.3, 2.0, 0)?;
    prune::remove(&mut fc1, "weight")?;
    let want = autograd::no_grad(|| fc2.forward(&fc1.forward(&x)?.relu()?))?;
    let (small1, small2) = prune::drop_pruned_units(&fc1, &ReLU, &fc2)?;
    drop((fc1, fc2));
    let pair_small = at() - start;
    let got = autograd::no_grad(|| small2.forward(&small1.forward(&x)?.relu()?))?;
    let diff = got.sub(&want)?.abs()?.max_all()?.item::<f64>()?;
    let params = |l: &Linear| {
        l.named_parameters()
            .iter()
            .map(|(_, t)| t.numel())
            .sum::<usize>()
    };
    println!(
        "MLP 1000-1000-10 (with the input batch): {} allocated dense; 30% of the hidden units pruned and dropped: {} ({:.1}% less)",
        mib(pair_dense),
        mib(pair_small),
        100.0 * (pair_dense - pair_small) as f64 / pair_dense as f64
    );
    println!(
        "hidden units {} -> {}, parameters {} -> {}, largest output difference {diff:.2e}",
        1000,
        small1.out_features(),
        1000 * 1000 + 1000 + 10 * 1000 + 10,
        params(&small1) + params(&small2)
    );
    drop((small1, small2, x, got, want));
    println!(
        "every tensor is gone: {} allocated on {dev} at the start, {} at the end",
        mib(start),
        mib(at())
    );
    Ok(())
}
