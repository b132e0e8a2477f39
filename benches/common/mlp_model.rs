//! The MLP of the nn issue, shared by benches/mlp.rs (CPU) and
//! benches/cuda.rs (CUDA) through `#[path]`: 784-1024-1024-10 with ReLU,
//! batch 128, cross-entropy loss, one Adam step as PyTorch's
//! `opt.zero_grad(); loss_fn(net(x), y).backward(); opt.step()`.
//! bench/torch_mlp.py and bench/torch_cuda.py build the same net.

use tensorscope::nn::{cross_entropy, Linear, Module, ReLU, Sequential};
use tensorscope::optim::Optimizer;
use tensorscope::{DType, Device, Result, Tensor};

/// Batch size of every MLP figure.
pub const BATCH: usize = 128;

/// `Linear(784, 1024), ReLU, Linear(1024, 1024), ReLU, Linear(1024, 10)`,
/// f32, on the CPU (move it with `Module::to_device`).
pub fn mlp() -> Result<Sequential> {
    let mut net = Sequential::new();
    net.add(Linear::new(784, 1024)?)
        .add(ReLU)
        .add(Linear::new(1024, 1024)?)
        .add(ReLU)
        .add(Linear::new(1024, 10)?);
    Ok(net)
}

/// A batch on `dev`: inputs `randn [128, 784]` f32, labels `i % 10` (i64).
pub fn batch(dev: Device) -> Result<(Tensor, Tensor)> {
    let x = Tensor::randn(&[BATCH, 784], DType::F32, dev)?;
    let labels = (0..BATCH).map(|i| (i % 10) as i64).collect();
    let y = Tensor::from_vec(labels, &[BATCH], dev)?;
    Ok((x, y))
}

/// One training step: gradients freed, forward, loss, backward, update.
pub fn adam_step(
    net: &mut Sequential,
    opt: &mut dyn Optimizer,
    x: &Tensor,
    y: &Tensor,
) -> Result<()> {
    opt.zero_grad(net);
    let loss = cross_entropy(&net.forward(x)?, y)?;
    loss.backward()?;
    opt.step(net)
}
