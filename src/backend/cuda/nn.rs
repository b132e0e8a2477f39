//! Random fills and the fused nn kernels on CUDA (`kernels/random.cu`,
//! `kernels/nn.cu`): uniform, normal and Bernoulli fills, layer norm and RMS
//! norm forward and backward, dropout forward and backward.
//!
//! Crate-internal entry points for the op and nn layers. Every operand must
//! be dense (contiguous): the callers allocate these buffers themselves.
//! Random kernels are counter-based (Philox 4x32-10): a fill is a function of
//! `(seed, offset)` and the element index only, and returns how many Philox
//! counters it used, by which the caller advances its offset.
//!
//! The op layer's CUDA `rand`/`randn`/`uniform_`/`normal_` and
//! `nn::Dropout` generate here, at the generator's Philox offset (see
//! `crate::random::Generator`).

// `nn::LayerNorm` and `nn::RMSNorm` run the fused norm kernels on CUDA, and
// `Tensor::bernoulli_` the Bernoulli fill.
#![cfg_attr(not(test), allow(dead_code))]

use super::device::gpu_of;
use super::kernels;
use super::launch::{dptr, prepare};
use crate::backend::Operand;
use crate::dtype::DType;
use crate::error::{Error, Result};

fn dense(op: &'static str, o: &Operand) -> Result<()> {
    if !o.layout.is_contiguous() {
        return Err(Error::arg(
            op,
            format!(
                "CUDA {op} needs a contiguous operand, got shape {:?} strides {:?}",
                o.layout.shape(),
                o.layout.strides()
            ),
        ));
    }
    Ok(())
}

fn float(op: &'static str, dt: DType) -> Result<()> {
    if !dt.is_float() {
        return Err(Error::dtype(op, "a float dtype", dt));
    }
    Ok(())
}

/// Philox counters used by a fill of `n` elements of `dt`.
pub(crate) fn counters(n: usize, dt: DType, normal_or_uniform: bool) -> u64 {
    if normal_or_uniform && dt == DType::F64 {
        n.div_ceil(2) as u64
    } else {
        n.div_ceil(4) as u64
    }
}

/// The kernel of a fill: uniform and normal take two parameters, Bernoulli one.
enum Fill {
    Two(kernels::Kernel<kernels::RandArgs>, f64, f64),
    One(kernels::Kernel<kernels::BernoulliArgs>, f64),
}

fn rand_fill(op: &'static str, fill: Fill, dst: &Operand, seed: u64, offset: u64) -> Result<u64> {
    let g = gpu_of(op, dst.storage.device())?;
    dense(op, dst)?;
    let n = dst.layout.numel() as i64;
    if n == 0 {
        return Ok(0);
    }
    let po = dptr(dst);
    let items = counters(n as usize, dst.dtype, matches!(fill, Fill::Two(..)));
    let cfg = g.grid(items as i64);
    match fill {
        Fill::Two(k, a, b) => {
            let (s, f) = prepare(g, op, &k)?;
            // SAFETY: rand_{uniform,normal}_<dt>(T*, i64, u64, u64, double,
            // double) on a dense buffer of n elements.
            unsafe { f.launch(op, &s, cfg, &(po, n, seed, offset, a, b))? };
        }
        Fill::One(k, p) => {
            let (s, f) = prepare(g, op, &k)?;
            // SAFETY: rand_bernoulli_<dt>(T*, i64, u64, u64, double) on a
            // dense buffer of n elements.
            unsafe { f.launch(op, &s, cfg, &(po, n, seed, offset, p))? };
        }
    }
    Ok(items)
}

/// Fills dense `dst` uniformly in `[low, high)`.
pub(crate) fn rand_uniform(
    dst: &Operand,
    low: f64,
    high: f64,
    seed: u64,
    offset: u64,
) -> Result<u64> {
    float("uniform_", dst.dtype)?;
    let fill = Fill::Two(kernels::rand_uniform(dst.dtype), low, high);
    rand_fill("uniform_", fill, dst, seed, offset)
}

/// Fills dense `dst` with normals of `mean` and `std`.
pub(crate) fn rand_normal(
    dst: &Operand,
    mean: f64,
    std: f64,
    seed: u64,
    offset: u64,
) -> Result<u64> {
    float("normal_", dst.dtype)?;
    let fill = Fill::Two(kernels::rand_normal(dst.dtype), mean, std);
    rand_fill("normal_", fill, dst, seed, offset)
}

/// Fills dense `dst` (any dtype) with 1 with probability `p`, else 0.
pub(crate) fn rand_bernoulli(dst: &Operand, p: f64, seed: u64, offset: u64) -> Result<u64> {
    if !(0.0..=1.0).contains(&p) {
        return Err(Error::arg(
            "bernoulli_",
            format!("p must be in [0, 1], got {p}"),
        ));
    }
    let fill = Fill::One(kernels::rand_bernoulli(dst.dtype), p);
    rand_fill("bernoulli_", fill, dst, seed, offset)
}

/// The dtype of layer norm's saved statistics for input dtype `dt`.
pub(crate) fn stats_dtype(dt: DType) -> DType {
    if dt == DType::F64 {
        DType::F64
    } else {
        DType::F32
    }
}

fn rows_cols(op: &'static str, x: &Operand) -> Result<(i64, i64)> {
    let sh = x.layout.shape();
    let cols = *sh
        .last()
        .ok_or_else(|| Error::arg(op, "the input must have at least one dimension"))?;
    let rows = x.layout.numel().checked_div(cols).unwrap_or(0);
    Ok((rows as i64, cols as i64))
}

fn check_param(op: &'static str, p: Option<&Operand>, dt: DType, cols: i64) -> Result<u64> {
    match p {
        None => Ok(0),
        Some(p) => {
            dense(op, p)?;
            if p.dtype != dt {
                return Err(Error::dtype(op, dt.name(), p.dtype));
            }
            if p.layout.numel() as i64 != cols {
                return Err(Error::shape(
                    op,
                    p.layout.shape(),
                    &[cols as usize],
                    "the affine parameters must have one element per normalised feature",
                ));
            }
            Ok(dptr(p))
        }
    }
}

fn check_stats(op: &'static str, st: &Operand, dt: DType, rows: i64) -> Result<()> {
    dense(op, st)?;
    if st.dtype != stats_dtype(dt) {
        return Err(Error::dtype(op, stats_dtype(dt).name(), st.dtype));
    }
    if st.layout.numel() as i64 != rows {
        return Err(Error::shape(
            op,
            st.layout.shape(),
            &[rows as usize],
            "one statistic per row",
        ));
    }
    Ok(())
}

/// Each of `ops` is dense, with `x`'s dtype and shape (`what` names them
/// in the error).
fn check_like(op: &'static str, x: &Operand, ops: &[&Operand], what: &str) -> Result<()> {
    for o in ops {
        dense(op, o)?;
        if o.dtype != x.dtype || o.layout.shape() != x.layout.shape() {
            return Err(Error::shape(op, x.layout.shape(), o.layout.shape(), what));
        }
    }
    Ok(())
}

/// A statistics operand's device pointer (0 when absent), checked.
fn opt_stats(op: &'static str, st: Option<&Operand>, dt: DType, rows: i64) -> Result<u64> {
    match st {
        None => Ok(0),
        Some(st) => {
            check_stats(op, st, dt, rows)?;
            Ok(dptr(st))
        }
    }
}

/// Layer norm over the last dimension of dense `x`: `y = (x - mean) * rstd
/// * gamma + beta`, saving `mean` and `rstd` (one per row, in
/// [`stats_dtype`]) for the backward pass when given.
pub(crate) fn layer_norm(
    x: &Operand,
    gamma: Option<&Operand>,
    beta: Option<&Operand>,
    y: &Operand,
    mean: Option<&Operand>,
    rstd: Option<&Operand>,
    eps: f64,
) -> Result<()> {
    const OP: &str = "layer_norm";
    let g = gpu_of(OP, x.storage.device())?;
    float(OP, x.dtype)?;
    check_like(OP, x, &[x, y], "the output must match the input")?;
    let (rows, cols) = rows_cols(OP, x)?;
    let (pg, pb) = (
        check_param(OP, gamma, x.dtype, cols)?,
        check_param(OP, beta, x.dtype, cols)?,
    );
    let pm = opt_stats(OP, mean, x.dtype, rows)?;
    let pr = opt_stats(OP, rstd, x.dtype, rows)?;
    if rows == 0 || cols == 0 {
        return Ok(());
    }
    let (s, f) = prepare(g, OP, &kernels::layer_norm_fwd(x.dtype))?;
    let (px, py) = (dptr(x), dptr(y));
    let args = (px, pg, pb, py, pm, pr, rows, cols, eps);
    // SAFETY: layer_norm_fwd_<dt>(const T*, const T*, const T*, T*, A*, A*,
    // i64, i64, double) on dense buffers of the checked sizes (null gamma,
    // beta, mean and rstd allowed).
    unsafe { f.launch(OP, &s, g.per_row(rows), &args) }
}

/// The backward pass of [`layer_norm`]: `dx` from `dy`, and `dgamma` and
/// `dbeta`, each when given.
#[allow(clippy::too_many_arguments)]
pub(crate) fn layer_norm_backward(
    dy: &Operand,
    x: &Operand,
    gamma: Option<&Operand>,
    mean: &Operand,
    rstd: &Operand,
    dx: Option<&Operand>,
    dgamma: Option<&Operand>,
    dbeta: Option<&Operand>,
) -> Result<()> {
    const OP: &str = "layer_norm_backward";
    let g = gpu_of(OP, x.storage.device())?;
    float(OP, x.dtype)?;
    check_like(OP, x, &[dy, x], "dy, x and dx must match")?;
    if let Some(dx) = dx {
        check_like(OP, x, &[dx], "dy, x and dx must match")?;
    }
    let (rows, cols) = rows_cols(OP, x)?;
    let pg = check_param(OP, gamma, x.dtype, cols)?;
    let (pdg, pdb) = (
        check_param(OP, dgamma, x.dtype, cols)?,
        check_param(OP, dbeta, x.dtype, cols)?,
    );
    check_stats(OP, mean, x.dtype, rows)?;
    check_stats(OP, rstd, x.dtype, rows)?;
    if rows == 0 || cols == 0 {
        return Ok(());
    }
    let (pdy, px, pm, pr) = (dptr(dy), dptr(x), dptr(mean), dptr(rstd));
    let s = super::stream::current(g);
    if let Some(dx) = dx {
        let f = g.kernel(OP, &kernels::layer_norm_bwd(x.dtype))?;
        let args = (pdy, px, pg, pm, pr, dptr(dx), rows, cols);
        let cfg = g.per_row(rows);
        // SAFETY: layer_norm_bwd_<dt>(const T*, const T*, const T*, const A*,
        // const A*, T*, i64, i64) on dense buffers of the checked sizes.
        unsafe { f.launch(OP, &s, cfg, &args)? };
    }
    if pdg == 0 && pdb == 0 {
        return Ok(());
    }
    let f = g.kernel(OP, &kernels::layer_norm_bwd_params(x.dtype))?;
    let args = (pdy, px, pm, pr, pdg, pdb, rows, cols);
    // SAFETY: layer_norm_bwd_params_<dt>(const T*, const T*, const A*,
    // const A*, T*, T*, i64, i64); null outputs are skipped by the kernel.
    unsafe { f.launch(OP, &s, g.grid(cols), &args) }
}

/// RMS norm over the last dimension of dense `x`: `y = x * rstd * gamma`,
/// `rstd = 1 / sqrt(mean(x^2) + eps)` per row, saved (in [`stats_dtype`])
/// for the backward pass when given.
pub(crate) fn rms_norm(
    x: &Operand,
    gamma: Option<&Operand>,
    y: &Operand,
    rstd: Option<&Operand>,
    eps: f64,
) -> Result<()> {
    const OP: &str = "rms_norm";
    let g = gpu_of(OP, x.storage.device())?;
    float(OP, x.dtype)?;
    check_like(OP, x, &[x, y], "the output must match the input")?;
    let (rows, cols) = rows_cols(OP, x)?;
    let pg = check_param(OP, gamma, x.dtype, cols)?;
    let pr = opt_stats(OP, rstd, x.dtype, rows)?;
    if rows == 0 || cols == 0 {
        return Ok(());
    }
    let (s, f) = prepare(g, OP, &kernels::rms_norm_fwd(x.dtype))?;
    let args = (dptr(x), pg, dptr(y), pr, rows, cols, eps);
    let cfg = g.per_row(rows);
    // SAFETY: rms_norm_fwd_<dt>(const T*, const T*, T*, A*, i64, i64, double)
    // on dense buffers of the checked sizes (null gamma and rstd allowed).
    unsafe { f.launch(OP, &s, cfg, &args) }
}

/// The backward pass of [`rms_norm`]: `dx` from `dy` when given, and
/// `dgamma` when given.
#[allow(clippy::too_many_arguments)]
pub(crate) fn rms_norm_backward(
    dy: &Operand,
    x: &Operand,
    gamma: Option<&Operand>,
    rstd: &Operand,
    dx: Option<&Operand>,
    dgamma: Option<&Operand>,
) -> Result<()> {
    const OP: &str = "rms_norm_backward";
    let g = gpu_of(OP, x.storage.device())?;
    float(OP, x.dtype)?;
    check_like(OP, x, &[dy, x], "dy, x and dx must match")?;
    if let Some(dx) = dx {
        check_like(OP, x, &[dx], "dy, x and dx must match")?;
    }
    let (rows, cols) = rows_cols(OP, x)?;
    let pg = check_param(OP, gamma, x.dtype, cols)?;
    let pdg = check_param(OP, dgamma, x.dtype, cols)?;
    check_stats(OP, rstd, x.dtype, rows)?;
    if rows == 0 || cols == 0 {
        return Ok(());
    }
    let (pdy, px, pr) = (dptr(dy), dptr(x), dptr(rstd));
    let s = super::stream::current(g);
    if let Some(dx) = dx {
        let f = g.kernel(OP, &kernels::rms_norm_bwd(x.dtype))?;
        let args = (pdy, px, pg, pr, dptr(dx), rows, cols);
        let cfg = g.per_row(rows);
        // SAFETY: rms_norm_bwd_<dt>(const T*, const T*, const T*, const A*, T*,
        // i64, i64) on dense buffers of the checked sizes (null gamma allowed).
        unsafe { f.launch(OP, &s, cfg, &args)? };
    }
    if pdg == 0 {
        return Ok(());
    }
    let f = g.kernel(OP, &kernels::rms_norm_bwd_params(x.dtype))?;
    let args = (pdy, px, pr, pdg, rows, cols);
    // SAFETY: rms_norm_bwd_params_<dt>(const T*, const T*, const A*, T*, i64,
    // i64) on dense buffers of the checked sizes.
    unsafe { f.launch(OP, &s, g.grid(cols), &args) }
}

/// Dropout of dense `x` into `y` with drop probability `p`, writing the kept
/// mask (bool) for the backward pass. Returns the Philox counters used.
pub(crate) fn dropout(
    x: &Operand,
    y: &Operand,
    mask: &Operand,
    p: f64,
    seed: u64,
    offset: u64,
) -> Result<u64> {
    const OP: &str = "dropout";
    let g = gpu_of(OP, x.storage.device())?;
    float(OP, x.dtype)?;
    if !(0.0..=1.0).contains(&p) {
        return Err(Error::arg(OP, format!("p must be in [0, 1], got {p}")));
    }
    for o in [x, y, mask] {
        dense(OP, o)?;
        if o.layout.numel() != x.layout.numel() {
            return Err(Error::shape(
                OP,
                x.layout.shape(),
                o.layout.shape(),
                "x, y and the mask must match",
            ));
        }
    }
    if y.dtype != x.dtype || mask.dtype != DType::Bool {
        return Err(Error::dtype(
            OP,
            "y of x's dtype and a bool mask",
            if y.dtype != x.dtype {
                y.dtype
            } else {
                mask.dtype
            },
        ));
    }
    let n = x.layout.numel() as i64;
    if n == 0 {
        return Ok(0);
    }
    let (s, f) = prepare(g, OP, &kernels::dropout(x.dtype))?;
    let args = (dptr(x), dptr(y), dptr(mask), n, p, seed, offset);
    let items = counters(n as usize, x.dtype, false);
    // SAFETY: dropout_<dt>(const T*, T*, u8*, i64, double, u64, u64).
    unsafe { f.launch(OP, &s, g.grid(items as i64), &args)? };
    Ok(items)
}

/// The backward pass of [`dropout`]: `dx = mask ? dy / (1 - p) : 0`.
pub(crate) fn dropout_backward(dy: &Operand, mask: &Operand, dx: &Operand, p: f64) -> Result<()> {
    const OP: &str = "dropout_backward";
    let g = gpu_of(OP, dy.storage.device())?;
    float(OP, dy.dtype)?;
    for o in [dy, mask, dx] {
        dense(OP, o)?;
        if o.layout.numel() != dy.layout.numel() {
            return Err(Error::shape(
                OP,
                dy.layout.shape(),
                o.layout.shape(),
                "dy, the mask and dx must match",
            ));
        }
    }
    if dx.dtype != dy.dtype || mask.dtype != DType::Bool {
        return Err(Error::dtype(
            OP,
            "dx of dy's dtype and a bool mask",
            if dx.dtype != dy.dtype {
                dx.dtype
            } else {
                mask.dtype
            },
        ));
    }
    let n = dy.layout.numel() as i64;
    if n == 0 {
        return Ok(());
    }
    let (s, f) = prepare(g, OP, &kernels::dropout_bwd(dy.dtype))?;
    let args = (dptr(dy), dptr(mask), dptr(dx), n, p);
    // SAFETY: dropout_bwd_<dt>(const T*, const u8*, T*, i64, double).
    unsafe { f.launch(OP, &s, g.grid(n), &args) }
}
