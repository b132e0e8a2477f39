//! Parameter initialisation, as PyTorch's `torch.nn.init` does it.
//!
//! Every function writes in place under `no_grad` (so it also works on a
//! parameter that already requires grad) and draws from the global generator
//! ([`manual_seed`](crate::manual_seed) makes it reproducible).

use crate::autograd::no_grad;
use crate::device::Device;
use crate::dtype::DType;
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
    let receptive = crate::layout::numel(&t.shape()[2..]);
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
    kaiming_uniform_with(t, a, FanMode::FanIn, "leaky_relu")
}

/// The bound of [`kaiming_uniform_`] for `fan_in` (0 when `fan_in` is 0).
pub fn kaiming_bound(a: f64, fan_in: usize) -> f64 {
    if fan_in == 0 {
        return 0.0;
    }
    let gain = (2.0 / (1.0 + a * a)).sqrt();
    3f64.sqrt() * gain / (fan_in as f64).sqrt()
}

/// Fills `t` with zeros.
pub fn zeros_(t: &mut Tensor) -> Result<()> {
    constant_(t, 0.0)
}

/// Fills `t` with ones.
pub fn ones_(t: &mut Tensor) -> Result<()> {
    constant_(t, 1.0)
}

/// Which fan a Kaiming initialisation preserves the variance of: the
/// forward pass's (`FanIn`, PyTorch's default) or the backward's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FanMode {
    /// `fan_in`.
    #[default]
    FanIn,
    /// `fan_out`.
    FanOut,
}

/// PyTorch's `calculate_gain(nonlinearity, param)`: 1 for `linear`, the
/// `conv*` and `conv_transpose*` names and `sigmoid`; 5/3 for `tanh`;
/// sqrt(2) for `relu`; sqrt(2 / (1 + slope^2)) for `leaky_relu` (slope
/// `param`, 0.01 by default); 3/4 for `selu`. An `Err` for another name
/// or a non-finite slope.
///
/// ```
/// use tensorscope::nn::init::calculate_gain;
/// assert_eq!(calculate_gain("relu", None)?, 2f64.sqrt());
/// assert_eq!(calculate_gain("tanh", None)?, 5.0 / 3.0);
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub fn calculate_gain(nonlinearity: &str, param: Option<f64>) -> Result<f64> {
    const OP: &str = "calculate_gain";
    const ONE: [&str; 9] = [
        "linear",
        "conv1d",
        "conv2d",
        "conv3d",
        "conv_transpose1d",
        "conv_transpose2d",
        "conv_transpose3d",
        "sigmoid",
        "identity",
    ];
    Ok(match nonlinearity {
        n if ONE.contains(&n) => 1.0,
        "tanh" => 5.0 / 3.0,
        "relu" => 2f64.sqrt(),
        "selu" => 0.75,
        "leaky_relu" => {
            let slope = param.unwrap_or(0.01);
            if !slope.is_finite() {
                bail!(Error::arg(
                    OP,
                    format!("negative_slope {slope} is not a valid number")
                ));
            }
            (2.0 / (1.0 + slope * slope)).sqrt()
        }
        other => bail!(Error::arg(
            OP,
            format!("unsupported nonlinearity '{other}'")
        )),
    })
}

fn fan(op: &'static str, t: &Tensor, mode: FanMode) -> Result<usize> {
    let (fan_in, fan_out) = fan_in_and_fan_out(t).map_err(|e| e.reported_as(op))?;
    Ok(match mode {
        FanMode::FanIn => fan_in,
        FanMode::FanOut => fan_out,
    })
}

/// `k * gain / sqrt(fan)` (0 for an empty fan): the Kaiming standard
/// deviation for `k = 1`, the uniform bound for `k = sqrt(3)` (in the
/// order of [`kaiming_bound`], so `kaiming_uniform_` draws what it drew
/// before it was written in terms of `kaiming_uniform_with`).
fn kaiming_scale(
    op: &'static str,
    t: &Tensor,
    a: f64,
    mode: FanMode,
    nonlinearity: &str,
    k: f64,
) -> Result<f64> {
    let gain = calculate_gain(nonlinearity, Some(a)).map_err(|e| e.reported_as(op))?;
    let f = fan(op, t, mode)?;
    Ok(if f == 0 {
        0.0
    } else {
        k * gain / (f as f64).sqrt()
    })
}

/// PyTorch's `kaiming_uniform_(t, a, mode, nonlinearity)`: `U(-b, b)` with
/// `b = sqrt(3) * gain / sqrt(fan)`; `a` is the negative slope of
/// `leaky_relu` (ignored by the other nonlinearities).
pub fn kaiming_uniform_with(
    t: &mut Tensor,
    a: f64,
    mode: FanMode,
    nonlinearity: &str,
) -> Result<()> {
    let b = kaiming_scale("kaiming_uniform_", t, a, mode, nonlinearity, 3f64.sqrt())?;
    uniform_(t, -b, b)
}

/// PyTorch's `kaiming_normal_(t, a, mode, nonlinearity)`: `N(0, std^2)`
/// with `std = gain / sqrt(fan)`.
///
/// ```
/// use tensorscope::nn::init::{kaiming_normal_, FanMode};
/// use tensorscope::{DType, Device, Tensor};
/// let mut w = Tensor::empty(&[512, 256], DType::F32, Device::Cpu)?;
/// kaiming_normal_(&mut w, 0.0, FanMode::FanIn, "relu")?;
/// let std = w.std(&[0, 1], 0, false)?.item::<f64>()?;
/// assert!((std - (2.0f64 / 256.0).sqrt()).abs() < 0.003);
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub fn kaiming_normal_(t: &mut Tensor, a: f64, mode: FanMode, nonlinearity: &str) -> Result<()> {
    let std = kaiming_scale("kaiming_normal_", t, a, mode, nonlinearity, 1.0)?;
    normal_(t, 0.0, std)
}

/// The Xavier (Glorot) standard deviation `gain * sqrt(2 / (fan_in +
/// fan_out))` (0 when both are 0).
fn xavier_std(op: &'static str, t: &Tensor, gain: f64) -> Result<f64> {
    let (fan_in, fan_out) = fan_in_and_fan_out(t).map_err(|e| e.reported_as(op))?;
    let fans = fan_in + fan_out;
    Ok(if fans == 0 {
        0.0
    } else {
        gain * (2.0 / fans as f64).sqrt()
    })
}

/// PyTorch's `xavier_uniform_(t, gain)`: `U(-b, b)` with `b = gain *
/// sqrt(6 / (fan_in + fan_out))`.
pub fn xavier_uniform_(t: &mut Tensor, gain: f64) -> Result<()> {
    let b = 3f64.sqrt() * xavier_std("xavier_uniform_", t, gain)?;
    uniform_(t, -b, b)
}

/// PyTorch's `xavier_normal_(t, gain)`: `N(0, std^2)` with `std = gain *
/// sqrt(2 / (fan_in + fan_out))`.
pub fn xavier_normal_(t: &mut Tensor, gain: f64) -> Result<()> {
    let std = xavier_std("xavier_normal_", t, gain)?;
    normal_(t, 0.0, std)
}

/// PyTorch's `orthogonal_(t, gain)`: `t` viewed as `[rows, numel / rows]`
/// becomes a (semi-)orthogonal matrix times `gain`: orthonormal rows when
/// there are fewer rows than columns, orthonormal columns otherwise. As in
/// PyTorch, the matrix is the Q of a QR decomposition of a standard normal
/// draw, its columns' signs fixed by R's diagonal, so it is uniform over the
/// orthogonal matrices. The QR runs on the host in f64 (modified
/// Gram-Schmidt, twice; `O(rows cols min(rows, cols))`), and the result is
/// written into `t` on its device. An `Err` below rank 2.
///
/// ```
/// use tensorscope::nn::init::orthogonal_;
/// use tensorscope::{DType, Device, Tensor};
/// let mut w = Tensor::empty(&[3, 5], DType::F64, Device::Cpu)?;
/// orthogonal_(&mut w, 1.0)?;
/// let eye = w.matmul(&w.t()?)?.to_vec::<f64>()?;
/// for i in 0..3 {
///     for j in 0..3 {
///         assert!((eye[i * 3 + j] - (i == j) as u8 as f64).abs() < 1e-12);
///     }
/// }
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub fn orthogonal_(t: &mut Tensor, gain: f64) -> Result<()> {
    const OP: &str = "orthogonal_";
    if t.rank() < 2 {
        bail!(Error::arg(
            OP,
            format!(
                "only tensors with 2 or more dimensions are supported, got shape {:?}",
                t.shape()
            )
        ));
    }
    if t.numel() == 0 {
        return Ok(());
    }
    let rows = t.shape()[0];
    let cols = t.numel() / rows;
    // Columns of the tall matrix a: [m, n], m >= n.
    let (m, n) = (rows.max(cols), rows.min(cols));
    let draw = Tensor::randn(&[n, m], DType::F64, Device::Cpu)?.to_vec::<f64>()?;
    let mut q: Vec<Vec<f64>> = draw.chunks(m).map(|c| c.to_vec()).collect();
    for j in 0..n {
        // Twice-repeated modified Gram-Schmidt against the earlier columns.
        for _ in 0..2 {
            for i in 0..j {
                let (done, rest) = q.split_at_mut(j);
                let d: f64 = done[i].iter().zip(&rest[0]).map(|(a, b)| a * b).sum();
                for (x, y) in rest[0].iter_mut().zip(&done[i]) {
                    *x -= d * y;
                }
            }
        }
        // R's diagonal entry is this norm, positive: PyTorch's sign fix
        // (`q *= sign(diag(r))`) is already applied.
        let norm = q[j].iter().map(|v| v * v).sum::<f64>().sqrt();
        for x in q[j].iter_mut() {
            *x /= norm;
        }
    }
    // The values in `t`'s row-major order: Q [m, n] for rows >= cols
    // (q[j] is column j), Q^T [n, m] otherwise.
    let mut out = vec![0.0; rows * cols];
    for r in 0..rows {
        for c in 0..cols {
            out[r * cols + c] = gain * if rows >= cols { q[c][r] } else { q[r][c] };
        }
    }
    let v = Tensor::from_vec(out, t.shape(), Device::Cpu)?
        .to_dtype(t.dtype())?
        .to_device(t.device())?;
    no_grad(|| t.copy_(&v).map(|_| ())).map_err(|e| e.reported_as(OP))
}
