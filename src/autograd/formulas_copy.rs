//! Backward formulas of the ops that copy by index or by shape:
//! `index_select`, `gather`, `masked_select`, `cat` and `repeat` (as in
//! `formulas.rs`).

use super::formulas::sum_to;
use super::{attach, needs_grad, BackwardFn, Saved};
use crate::dtype::DType;
use crate::error::Result;
use crate::tensor::Tensor;

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
    let numel = crate::layout::numel(&shape);
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
