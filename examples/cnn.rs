//! A small CNN on the UCI 8x8 handwritten digits (the tour's MLP task,
//! `data/digits.csv`, the same seeded 80/20 split): three convolutions,
//! two max-pools and a linear layer, trained with Adam, with a progress
//! bar. It prints the best test accuracy next to the MLP's, the
//! parameters, what one training step costs in memory (through
//! `memory::measure`: the peak over its start and what it leaves), and
//! that every tensor is gone at the end.
//!
//! Then pruning (issue 17 item 7, seed 003): half of every convolution's
//! weights by magnitude (`prune::l1_unstructured`), the accuracy and the
//! sparsity before and after a short fine-tune, and the memory each stage
//! holds: the masks cost one weight-sized buffer per pruned layer, and
//! `prune::remove` gives them back, leaving zeros in the dense weights.
//!
//! `cargo run --release --example cnn` (on cuda:0 when a GPU is present).

#[allow(dead_code)] // the tour's digits task: its data, shuffle and bar are used here
#[path = "digits.rs"]
mod digits;

#[path = "models/cnn.rs"]
mod cnn_model;

use cnn_model::model;
use tensorscope::nn::{cross_entropy, prune, Module, Sequential};
use tensorscope::optim::{Adam, AdamConfig, Optimizer};
use tensorscope::{autograd, memory, DType, Device, Generator, Tensor};

/// The MLP's best test accuracy on the same split (examples/digits.rs,
/// printed by the tour).
const MLP_ACCURACY: f64 = 98.61;

/// The training and test tensors.
struct Data<'a> {
    x_train: &'a Tensor,
    y_train: &'a Tensor,
    x_test: &'a Tensor,
    y_test: &'a Tensor,
}

/// What a run of [`train`] saw.
struct Run {
    best: f64,
    best_epoch: usize,
    last: f64,
    step_cost: Option<memory::Measurement>,
}

/// `epochs` epochs of shuffled batches with a progress bar; the test
/// accuracy after each.
fn train(
    net: &mut Sequential,
    opt: &mut Adam,
    d: &Data,
    epochs: usize,
    batch: usize,
    shuffle: &mut Generator,
) -> tensorscope::Result<Run> {
    let dev = d.x_train.device();
    let n_train = d.y_train.numel();
    let bar = digits::epoch_bar(epochs * n_train.div_ceil(batch));
    let mut run = Run {
        best: 0.0,
        best_epoch: 0,
        last: 0.0,
        step_cost: None,
    };
    for epoch in 1..=epochs {
        let ids = digits::shuffled(n_train, shuffle);
        bar.set_prefix(format!("{epoch:>2}"));
        for chunk in ids.chunks(batch) {
            let idx = Tensor::from_slice(chunk, &[chunk.len()], dev)?;
            let (xb, yb) = (
                d.x_train.index_select(0, &idx)?,
                d.y_train.index_select(0, &idx)?,
            );
            let (loss, m) = memory::measure(dev, || -> tensorscope::Result<f32> {
                opt.zero_grad(net);
                let loss = cross_entropy(&net.forward(&xb)?, &yb)?;
                loss.backward()?;
                opt.step(net)?;
                loss.item::<f32>()
            })?;
            if epoch == 2 && run.step_cost.is_none() && chunk.len() == batch {
                run.step_cost = Some(m);
            }
            bar.set_message(format!("loss {:.4}", loss?));
            bar.inc(1);
        }
        run.last = 100.0 * digits::accuracy(net, d.x_test, d.y_test)?;
        if run.last > run.best {
            (run.best, run.best_epoch) = (run.last, epoch);
        }
    }
    bar.finish();
    Ok(run)
}

/// The zero entries and all entries of the convolutions' weights as the
/// forward uses them (masked while pruned).
fn conv_sparsity(net: &Sequential) -> tensorscope::Result<(usize, usize)> {
    let (mut zeros, mut all) = (0, 0);
    for name in CONVS {
        let w = prune::masked(net, name)?;
        zeros += w.eq_scalar(0.0)?.sum_all()?.item::<i64>()? as usize;
        all += w.numel();
    }
    Ok((zeros, all))
}

/// The weights pruned: every convolution's.
const CONVS: [&str; 3] = ["conv1.weight", "conv2.weight", "conv3.weight"];

fn main() -> tensorscope::Result<()> {
    tensorscope::manual_seed(7);
    let dev = Device::cuda_if_available();
    let start = memory::memory_allocated(dev);
    let (xs, ys) = digits::load();
    let n = ys.len();
    let (order, n_train) = digits::split(n);
    let pick = |ids: &[usize]| digits::pick(&xs, &ys, ids, &[ids.len(), 1, 8, 8], dev);
    let (x_train, y_train) = pick(&order[..n_train])?;
    let (x_test, y_test) = pick(&order[n_train..])?;
    let mut net = model(dev)?;
    let params: usize = net.named_parameters().iter().map(|(_, t)| t.numel()).sum();
    println!(
        "cnn on {dev}: {n_train} training and {} test digits, {params} parameters ({})",
        n - n_train,
        net.names().join(" ")
    );
    let mut opt = Adam::new(AdamConfig {
        lr: 3e-3,
        ..Default::default()
    })?;
    let (epochs, batch) = (30usize, 64usize);
    let data = Data {
        x_train: &x_train,
        y_train: &y_train,
        x_test: &x_test,
        y_test: &y_test,
    };
    let run = train(
        &mut net,
        &mut opt,
        &data,
        epochs,
        batch,
        &mut Generator::new(1),
    )?;
    let (best, best_epoch, step_cost) = (run.best, run.best_epoch, run.step_cost);
    println!(
        "best test accuracy {best:.2}% at epoch {best_epoch} (the MLP's: {MLP_ACCURACY:.2}%: {})",
        if best > MLP_ACCURACY {
            "beaten"
        } else {
            "not beaten"
        }
    );
    if let Some(m) = step_cost {
        println!(
            "one training step of {batch} (epoch 2): peak {} over its start ({} allocations), {} left allocated",
            memory::fmt_bytes(m.peak_delta),
            m.allocations,
            m.allocated_delta
        );
    }
    // Pruning: half of every convolution's weights, by magnitude.
    let (zeros, all) = conv_sparsity(&net)?;
    let dense_bytes = memory::memory_allocated(dev);
    println!(
        "pruning: trained model {:.2}% (last epoch), conv weights {zeros} of {all} zero, {} allocated (model, Adam state, data)",
        run.last,
        memory::fmt_bytes(dense_bytes)
    );
    for name in CONVS {
        prune::l1_unstructured(&mut net, name, 0.5)?;
    }
    let (zeros, all) = conv_sparsity(&net)?;
    let pruned_bytes = memory::memory_allocated(dev);
    let masks: usize = net.named_buffers().iter().map(|(_, m)| m.numel() * 4).sum();
    println!(
        "  pruned 50% of each conv: sparsity {:.1}% ({zeros} of {all}), accuracy {:.2}% before fine-tuning, \
         {} allocated (+{}: the masks, {} of f32 — masking saves no memory)",
        100.0 * zeros as f64 / all as f64,
        100.0 * digits::accuracy(&net, &x_test, &y_test)?,
        memory::fmt_bytes(pruned_bytes),
        memory::fmt_bytes(pruned_bytes - dense_bytes),
        memory::fmt_bytes(masks)
    );
    // Fine-tune with a fresh optimizer at a lower learning rate (the old
    // one would also work: its state carries on through pruning).
    drop(opt);
    let mut opt = Adam::new(AdamConfig {
        lr: 1e-3,
        ..Default::default()
    })?;
    let tuned = train(&mut net, &mut opt, &data, 5, batch, &mut Generator::new(2))?;
    let (zeros, all) = conv_sparsity(&net)?;
    println!(
        "  fine-tuned 5 epochs: accuracy {:.2}% (best {:.2}%), sparsity still {:.1}%",
        tuned.last,
        tuned.best,
        100.0 * zeros as f64 / all as f64
    );
    drop(opt);
    let before_remove = memory::memory_allocated(dev);
    for name in CONVS {
        prune::remove(&mut net, name)?;
    }
    let (zeros, _) = conv_sparsity(&net)?;
    println!(
        "  prune::remove (the fine-tuning Adam dropped): the masks freed ({} -> {} allocated), {zeros} zeros kept in the dense weights, accuracy {:.2}%",
        memory::fmt_bytes(before_remove),
        memory::fmt_bytes(memory::memory_allocated(dev)),
        100.0 * digits::accuracy(&net, &x_test, &y_test)?
    );
    let x = Tensor::zeros(&[batch, 1, 8, 8], DType::F32, dev)?;
    let (y, m) = memory::measure(dev, || autograd::no_grad(|| net.forward(&x)))?;
    println!(
        "inference on {batch} digits: peak {} over its start, {} left (the logits)",
        memory::fmt_bytes(m.peak_delta),
        memory::fmt_bytes(m.allocated_delta as usize)
    );
    drop((y?, x, net, x_train, y_train, x_test, y_test));
    println!(
        "every tensor is gone: {} allocated on {dev} at the start, {} at the end",
        memory::fmt_bytes(start),
        memory::fmt_bytes(memory::memory_allocated(dev))
    );
    Ok(())
}
