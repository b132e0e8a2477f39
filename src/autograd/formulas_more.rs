//! Backward formulas of reductions, softmax, matmul and the copying index and
//! shape ops. As in `formulas.rs`, each takes the inputs and the computed
//! output and returns the output with its node when a graph is recorded.

use super::formulas::sum_to;
use super::{attach, needs_grad, BackwardFn, Saved};
use crate::backend::Operand;
use crate::dtype::DType;
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
    let n: usize = rd.iter().map(|&d| x.shape()[d]).product();
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

/// Records `out = softmax(x, dim)` or `log_softmax`.
pub(crate) fn softmax(x: &Tensor, dim: isize, log: bool, out: Tensor) -> Result<Tensor> {
    if !needs_grad(&[x]) {
        return Ok(out);
    }
    let name = if log {
        "LogSoftmaxBackward"
    } else {
        "SoftmaxBackward"
    };
    let ky = Saved::new(&out, name)?;
    let dt = x.dtype();
    let d = normalize_dim(name, dim, x.rank().max(1))?;
    let f: BackwardFn = Box::new(move |g| {
        let y = ky.get()?;
        if y.rank() == 0 {
            return Ok(vec![Some(g.zeros_like()?.to_dtype(dt)?)]);
        }
        // One fused pass per row (CPU and CUDA): softmax dx = y (g - Σ g y),
        // log_softmax dx = g - exp(y) Σ g.
        let g = g.to_dtype(y.dtype())?;
        let dx = Tensor::alloc(y.shape(), y.dtype(), y.device())?;
        crate::backend::nn::softmax_backward(
            &Operand::of(&g),
            &Operand::of(y),
            d,
            &Operand::of(&dx),
            log,
        )?;
        Ok(vec![Some(dx.to_dtype(dt)?)])
    });
    Ok(attach(out, name, &[x], f))
}

/// `true` when the last two dims of `t` are a dense matrix stored
/// transposed (strides `[1, rows]`, e.g. `w.t()` of a dense `w`).
fn transposed_dense(t: &Tensor) -> bool {
    let (s, st, r) = (t.shape(), t.strides(), t.rank());
    r >= 2 && s[r - 2] > 1 && s[r - 1] > 1 && st[r - 2] == 1 && st[r - 1] == s[r - 2]
}

/// Records `out = a.matmul(b)` with torch.matmul's rank rules.
pub(crate) fn matmul(a: &Tensor, b: &Tensor, out: Tensor) -> Result<Tensor> {
    if !needs_grad(&[a, b]) {
        return Ok(out);
    }
    let (ra, rb) = (a.requires_grad(), b.requires_grad());
    let ka = if rb {
        Some(Saved::new(a, "MmBackward")?)
    } else {
        None
    };
    let kb = if ra {
        Some(Saved::new(b, "MmBackward")?)
    } else {
        None
    };
    let (sa, sb) = (a.shape().to_vec(), b.shape().to_vec());
    let (da, db) = (a.dtype(), b.dtype());
    let (a_t, b_t) = (transposed_dense(a), transposed_dense(b));
    let f: BackwardFn = Box::new(move |g| {
        // Lift vectors to matrices, as matmul does, and g to match.
        let lift_a = |t: &Tensor| {
            if sa.len() == 1 {
                t.unsqueeze(0)
            } else {
                Ok(t.alias())
            }
        };
        let lift_b = |t: &Tensor| {
            if sb.len() == 1 {
                t.unsqueeze(1)
            } else {
                Ok(t.alias())
            }
        };
        // Put back the dims matmul removed: m (last) first, then n before it.
        let mut g2 = g.alias();
        if sb.len() == 1 {
            g2 = g2.unsqueeze(-1)?;
        }
        if sa.len() == 1 {
            g2 = g2.unsqueeze(-2)?;
        }
        let sa2: Vec<usize> = if sa.len() == 1 {
            vec![1, sa[0]]
        } else {
            sa.clone()
        };
        let sb2: Vec<usize> = if sb.len() == 1 {
            vec![sb[0], 1]
        } else {
            sb.clone()
        };
        let unlift = |r: Tensor, s: &[usize]| {
            if s.len() == 1 {
                r.reshape(&[s[0] as isize])
            } else {
                Ok(r)
            }
        };
        // An operand stored transposed gets its gradient in its own layout
        // ((x^T y)^T = y^T x, written dense and seen transposed), so the
        // transpose that made it hands a dense gradient back without a copy.
        let ga = match &kb {
            Some(b) => {
                let b2 = lift_b(b.get()?)?;
                let p = if a_t {
                    b2.matmul(&g2.transpose(-1, -2)?)?.transpose(-1, -2)?
                } else {
                    g2.matmul(&b2.transpose(-1, -2)?)?
                };
                Some(unlift(sum_to(&p, &sa2, da)?, &sa)?)
            }
            None => None,
        };
        let gb = match &ka {
            Some(a) => {
                let a2 = lift_a(a.get()?)?;
                let p = if b_t {
                    g2.transpose(-1, -2)?.matmul(&a2)?.transpose(-1, -2)?
                } else {
                    a2.transpose(-1, -2)?.matmul(&g2)?
                };
                Some(unlift(sum_to(&p, &sb2, db)?, &sb)?)
            }
            None => None,
        };
        Ok(vec![ga, gb])
    });
    Ok(attach(out, "MmBackward", &[a, b], f))
}

/// Records `out = x @ w^T + b` (`x: [m, k]`, `w: [n, k]`, `b: [n]`) as one
/// node. The weight's gradient `g^T x` comes out dense in `w`'s own layout,
/// the bias's is one column sum of `g`.
pub(crate) fn linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>, out: Tensor) -> Result<Tensor> {
    let mut inputs = vec![x, w];
    inputs.extend(b);
    if !needs_grad(&inputs) {
        return Ok(out);
    }
    let name = if b.is_some() {
        "AddmmBackward"
    } else {
        "MmBackward"
    };
    let kx = if w.requires_grad() {
        Some(Saved::new(x, name)?)
    } else {
        None
    };
    let kw = if x.requires_grad() {
        Some(Saved::new(w, name)?)
    } else {
        None
    };
    let rb = b.map(|b| b.requires_grad());
    let f: BackwardFn = Box::new(move |g| {
        let gx = match &kw {
            Some(w) => Some(g.matmul(w.get()?)?),
            None => None,
        };
        let gw = match &kx {
            Some(x) => Some(g.t()?.matmul(x.get()?)?),
            None => None,
        };
        let mut v = vec![gx, gw];
        if let Some(rb) = rb {
            v.push(if rb { Some(g.sum(&[0], false)?) } else { None });
        }
        Ok(v)
    });
    Ok(attach(out, name, &inputs, f))
}

/// Records `out = x.index_select(dim, index)`.
pub(crate) fn index_select(x: &Tensor, dim: isize, index: &Tensor, out: Tensor) -> Result<Tensor> {
    if !needs_grad(&[x]) {
        return Ok(out);
    }
    let ki = Saved::new(index, "IndexSelectBackward")?;
    let (shape, dt) = (x.shape().to_vec(), x.dtype());
    let f: BackwardFn = Box::new(move |g| {
        let mut z = Tensor::zeros(&shape, dt, g.device())?;
        z.index_add_(dim, ki.get()?, &g.to_dtype(dt)?)?;
        Ok(vec![Some(z)])
    });
    Ok(attach(out, "IndexSelectBackward", &[x], f))
}

/// Records `out = x.gather(dim, index)`.
pub(crate) fn gather(x: &Tensor, dim: isize, index: &Tensor, out: Tensor) -> Result<Tensor> {
    if !needs_grad(&[x]) {
        return Ok(out);
    }
    let ki = Saved::new(index, "GatherBackward")?;
    let (shape, dt) = (x.shape().to_vec(), x.dtype());
    let f: BackwardFn = Box::new(move |g| {
        let mut z = Tensor::zeros(&shape, dt, g.device())?;
        z.scatter_add_(dim, ki.get()?, &g.to_dtype(dt)?)?;
        Ok(vec![Some(z)])
    });
    Ok(attach(out, "GatherBackward", &[x], f))
}

/// Records `out = x.masked_select(mask)`: the gradient lands on the selected
/// positions of the broadcast shape, then sums back to `x`'s shape.
pub(crate) fn masked_select(x: &Tensor, mask: &Tensor, out: Tensor) -> Result<Tensor> {
    if !needs_grad(&[x]) {
        return Ok(out);
    }
    let shape = crate::layout::broadcast_shapes("masked_select", x.shape(), mask.shape())?.to_vec();
    let numel: usize = shape.iter().product();
    // Positions of the selected elements, computed once in the forward pass.
    let pos = super::no_grad(|| {
        let all = Tensor::arange(0.0, numel as f64, 1.0, DType::I64, x.device())?;
        let all = all.reshape(&shape.iter().map(|&d| d as isize).collect::<Vec<_>>())?;
        all.masked_select(mask)
    })?;
    let kp = Saved::new(&pos, "MaskedSelectBackward")?;
    let (xs, dt) = (x.shape().to_vec(), x.dtype());
    let f: BackwardFn = Box::new(move |g| {
        let mut z = Tensor::zeros(&[numel], dt, g.device())?;
        z.index_add_(0, kp.get()?, &g.to_dtype(dt)?)?;
        let z = z.reshape(&shape.iter().map(|&d| d as isize).collect::<Vec<_>>())?;
        Ok(vec![Some(sum_to(&z, &xs, dt)?)])
    });
    Ok(attach(out, "MaskedSelectBackward", &[x], f))
}

/// Records `out = cat(xs, dim)`: each input gets its slice of the gradient.
pub(crate) fn cat(xs: &[&Tensor], dim: usize, out: Tensor) -> Result<Tensor> {
    if !needs_grad(xs) {
        return Ok(out);
    }
    // Inputs skipped by cat (a 1-D empty tensor beside higher ranks) get no gradient.
    let parts: Vec<(usize, usize, DType, bool)> = {
        let mut start = 0;
        xs.iter()
            .map(|t| {
                let used = t.rank() == out.rank();
                let len = if used { t.shape()[dim] } else { 0 };
                let p = (start, len, t.dtype(), used);
                start += len;
                p
            })
            .collect()
    };
    let f: BackwardFn = Box::new(move |g| {
        parts
            .iter()
            .map(|&(start, len, dt, used)| {
                if used {
                    Ok(Some(g.narrow(dim as isize, start, len)?.to_dtype(dt)?))
                } else {
                    Ok(None)
                }
            })
            .collect()
    });
    Ok(attach(out, "CatBackward", xs, f))
}

/// Records `out = x.repeat(reps)`: the gradient sums over the copies.
pub(crate) fn repeat(x: &Tensor, reps: &[usize], out: Tensor) -> Result<Tensor> {
    if !needs_grad(&[x]) {
        return Ok(out);
    }
    let lead = reps.len() - x.rank();
    let xs: Vec<usize> = std::iter::repeat_n(1, lead)
        .chain(x.shape().iter().copied())
        .collect();
    let reps = reps.to_vec();
    let (orig, dt) = (x.shape().to_vec(), x.dtype());
    let f: BackwardFn = Box::new(move |g| {
        // [r0 * s0, r1 * s1, ...] -> [r0, s0, r1, s1, ...], sum the r dims.
        let split: Vec<isize> = reps
            .iter()
            .zip(&xs)
            .flat_map(|(&r, &s)| [r as isize, s as isize])
            .collect();
        let rdims: Vec<isize> = (0..reps.len()).map(|i| 2 * i as isize).collect();
        let s = g.reshape(&split)?.sum(&rdims, false)?;
        Ok(vec![Some(
            s.reshape(&orig.iter().map(|&d| d as isize).collect::<Vec<_>>())?
                .to_dtype(dt)?,
        )])
    });
    Ok(attach(out, "RepeatBackward", &[x], f))
}
