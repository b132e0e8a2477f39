//! Parameter initialisation, as PyTorch's `torch.nn.init` does it.
//!
//! Every function writes in place under `no_grad` (so it also works on a
//! parameter that already requires grad) and draws from the global generator
//! ([`manual_seed`](crate::manual_seed) makes it reproducible).

use crate::autograd::no_grad;
use crate::error::{bail, Error, Result};
use crate::tensor::Tensor;

/// `(fan_in, fan_out)` of a weight: for a matrix `[out, in]`, `(in, out)`;
/// for higher ranks the trailing dimensions multiply both (PyTorch's
/// `_calculate_fan_in_and_fan_out`). An error below rank 2.
pub fn fan_in_and_fan_out(t: &Tensor) -> Result<(usize, usize)> {
    if t.rank() < 2 {
        bail!(Error::arg(
            "fan_in_and_fan_out",
            format!(
                "fan in and fan out need a tensor of at least 2 dimensions, got shape {:?}",
                t.shape()
            )
        ));
    }
    let receptive: usize = t.shape()[2..].iter().product();
    Ok((t.shape()[1] * receptive, t.shape()[0] * receptive))
}

/// Fills `t` uniformly in `[low, high)`.
pub fn uniform_(t: &mut Tensor, low: f64, high: f64) -> Result<()> {
    no_grad(|| t.uniform_(low, high).map(|_| ()))
}

/// Fills `t` from `N(mean, std^2)`.
pub fn normal_(t: &mut Tensor, mean: f64, std: f64) -> Result<()> {
    no_grad(|| t.normal_(mean, std).map(|_| ()))
}

/// Fills `t` with `value`.
pub fn constant_(t: &mut Tensor, value: f64) -> Result<()> {
    no_grad(|| t.fill_(value).map(|_| ()))
}

/// PyTorch's `kaiming_uniform_(t, a, mode='fan_in', nonlinearity='leaky_relu')`:
/// `U(-b, b)` with `b = sqrt(3) * sqrt(2 / (1 + a^2)) / sqrt(fan_in)`. With
/// `a = sqrt(5)` (Linear's default) this is `b = 1 / sqrt(fan_in)`.
pub fn kaiming_uniform_(t: &mut Tensor, a: f64) -> Result<()> {
    let (fan_in, _) = fan_in_and_fan_out(t)?;
    let bound = kaiming_bound(a, fan_in);
    uniform_(t, -bound, bound)
}

/// The bound of [`kaiming_uniform_`] for `fan_in` (0 when `fan_in` is 0).
pub fn kaiming_bound(a: f64, fan_in: usize) -> f64 {
    if fan_in == 0 {
        return 0.0;
    }
    let gain = (2.0 / (1.0 + a * a)).sqrt();
    3f64.sqrt() * gain / (fan_in as f64).sqrt()
}
