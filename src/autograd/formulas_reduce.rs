//! Backward formulas of the reductions and of `select` along a dim.
//! As in `formulas.rs`, each takes the inputs and the computed output and
//! returns the output with its node when a graph is recorded.

use super::{attach, needs_grad, BackwardFn, Saved};
use crate::error::Result;
use crate::layout::normalize_dim;
use crate::tensor::Tensor;

use crate::backend::Reduction as Red;

/// Normalized reduced dims (empty: all), ascending. A 0-d tensor accepts
/// dim 0 and -1 as the forward does (`normalize_dim` over rank 1) and has
/// no dim to reduce.
fn reduced_dims(x: &Tensor, dims: &[isize]) -> Result<Vec<usize>> {
    if dims.is_empty() {
        return Ok((0..x.rank()).collect());
    }
    let mut v = dims
        .iter()
        .map(|&d| normalize_dim("backward", d, x.rank().max(1)))
        .collect::<Result<Vec<_>>>()?;
    if x.rank() == 0 {
        return Ok(Vec::new());
    }
    v.sort_unstable();
    v.dedup();
    Ok(v)
}

/// `t` (reduced without keepdim) with the reduced dims put back as size 1.
fn keep(t: &Tensor, dims: &[usize], keepdim: bool) -> Result<Tensor> {
    if keepdim {
        return Ok(t.alias());
    }
    let mut t = t.alias();
    for &d in dims {
        t = t.unsqueeze(d as isize)?;
    }
    Ok(t)
}

/// Records `out = red(x, dims, keepdim)`.
pub(crate) fn reduce(
    red: Red,
    x: &Tensor,
    dims: &[isize],
    keepdim: bool,
    out: Tensor,
) -> Result<Tensor> {
    if !needs_grad(&[x]) || !out.dtype().is_float() {
        return Ok(out);
    }
    let name = match red {
        Red::Sum => "SumBackward",
        Red::Mean => "MeanBackward",
        Red::Max => "AmaxBackward",
        Red::Min => "AminBackward",
        Red::Prod => "ProdBackward",
        Red::Var(_) => "VarBackward",
        Red::Std(_) => "StdBackward",
        Red::LogSumExp => "LogsumexpBackward",
    };
    let rd = reduced_dims(x, dims)?;
    let shape: Vec<isize> = x.shape().iter().map(|&d| d as isize).collect();
    let n = crate::layout::numel_of(rd.iter().map(|&d| x.shape()[d]));
    let sdims: Vec<isize> = rd.iter().map(|&d| d as isize).collect();
    let dt = x.dtype();
    let needs_x = !matches!(red, Red::Sum | Red::Mean);
    let needs_y = matches!(red, Red::Max | Red::Min | Red::Std(_) | Red::LogSumExp);
    let kx = if needs_x {
        Some(Saved::new(x, name)?)
    } else {
        None
    };
    let ky = if needs_y {
        Some(Saved::new(&out, name)?)
    } else {
        None
    };
    let f: BackwardFn = Box::new(move |g| {
        let gk = keep(g, &rd, keepdim)?;
        let gin = match red {
            Red::Sum => gk.expand(&shape)?,
            Red::Mean => gk.div_scalar(n as f64)?.expand(&shape)?,
            _ => {
                let x = kx.as_ref().expect("saved").get()?;
                match red {
                    Red::Max | Red::Min => {
                        // Split evenly among the elements equal to the extremum.
                        let y = keep(ky.as_ref().expect("saved").get()?, &rd, keepdim)?;
                        let mask = x.eq(&y)?.to_dtype(dt)?;
                        let count = mask.sum(&sdims, true)?;
                        mask.mul(&gk.div(&count)?)?
                    }
                    Red::Prod => {
                        // PyTorch's prod_backward: with no zero in a slice,
                        // g * y / x; with one zero, the product of the
                        // others at the zero and 0 elsewhere; with more, 0.
                        let z = x.eq_scalar(0.0)?;
                        let xnz = x.masked_fill(&z, 1.0)?;
                        let pnz = xnz.prod(&sdims, true)?;
                        let zeros = z.to_dtype(dt)?.sum(&sdims, true)?;
                        let none = zeros.eq_scalar(0.0)?;
                        let one = zeros.eq_scalar(1.0)?;
                        let at_zero = pnz.mul(&z.to_dtype(dt)?)?.mul(&one.to_dtype(dt)?)?;
                        let d = Tensor::where_cond(&none, &pnz.div(&xnz)?, &at_zero)?;
                        d.mul(&gk)?
                    }
                    Red::Var(c) => {
                        let mean = x.mean(&sdims, true)?;
                        let denom = (n as f64 - c as f64).max(0.0);
                        x.sub(&mean)?.mul_scalar(2.0 / denom)?.mul(&gk)?
                    }
                    Red::Std(c) => {
                        let y = keep(ky.as_ref().expect("saved").get()?, &rd, keepdim)?;
                        let mean = x.mean(&sdims, true)?;
                        let denom = (n as f64 - c as f64).max(0.0);
                        // 0 where the std is 0 (every x equals the mean),
                        // as PyTorch's std_backward, not 0 / 0.
                        let y = y.masked_fill(&y.eq_scalar(0.0)?, 1.0)?;
                        x.sub(&mean)?.div(&y.mul_scalar(denom)?)?.mul(&gk)?
                    }
                    _ => {
                        // logsumexp: softmax over the reduced dims.
                        let y = keep(ky.as_ref().expect("saved").get()?, &rd, keepdim)?;
                        x.sub(&y)?.exp()?.mul(&gk)?
                    }
                }
            }
        };
        Ok(vec![Some(gin.to_dtype(dt)?)])
    });
    Ok(attach(out, name, &[x], f))
}

/// Records the values of `max_dim`/`min_dim`: the gradient goes to the
/// selected index only.
pub(crate) fn select_dim(
    x: &Tensor,
    dim: isize,
    keepdim: bool,
    values: Tensor,
    indices: &Tensor,
) -> Result<Tensor> {
    if !needs_grad(&[x]) {
        return Ok(values);
    }
    let d = normalize_dim("backward", dim, x.rank().max(1))?;
    let ki = Saved::new(indices, "MaxBackward")?;
    let (shape, dt) = (x.shape().to_vec(), x.dtype());
    let rank0 = x.rank() == 0;
    let f: BackwardFn = Box::new(move |g| {
        if rank0 {
            return Ok(vec![Some(g.to_dtype(dt)?)]);
        }
        let idx = keep(ki.get()?, &[d], keepdim)?;
        let gk = keep(g, &[d], keepdim)?;
        let mut z = Tensor::zeros(&shape, dt, g.device())?;
        z.scatter_(d as isize, &idx, &gk)?;
        Ok(vec![Some(z)])
    });
    Ok(attach(values, "MaxBackward", &[x], f))
}
