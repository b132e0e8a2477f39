//! Backward formulas of the ops that pick or write by index: fancy indexing
//! ([`Tensor::index`]), the out-of-place scatter family (`scatter`,
//! `scatter_value`, `scatter_add`, `index_fill`, `index_copy`, `index_add`)
//! and the embedding lookup. The semantics are PyTorch's:
//!
//! * `scatter` / `scatter_value`: the gradient w.r.t. `self` is zero at the
//!   scattered positions (they were overwritten); w.r.t. `src` it is the
//!   gradient gathered at the index (zero where `src` was not read).
//! * `scatter_add`: `self` gets the gradient as it is; `src` gets it gathered.
//! * `index_fill` / `index_copy`: `self`'s gradient is zero in the written
//!   slices; `index_copy`'s `src` gets the gradient's slices at the index.
//! * `index_add`: `self` gets the gradient as it is; `src` its slices.
//! * `scatter_reduce`: PyTorch's `scatter_reduce_backward` (see
//!   [`scatter_reduce`]).
//!
//! As in PyTorch, with repeated indices `scatter`/`index_copy` give every
//! duplicate the gradient of the position it wrote to (only one of them
//! "won" the forward write: the gradient is then not that of a function).
//!
//! Each function takes the inputs and the computed output and returns the
//! output with its node when a graph must be recorded.

use super::{attach, needs_grad, BackwardFn, Saved};
use crate::dtype::DType;
use crate::error::Result;
use crate::ops::{mean_counts, ScatterReduce};
use crate::tensor::Tensor;

fn isize_shape(s: &[usize]) -> Vec<isize> {
    s.iter().map(|&d| d as isize).collect()
}

/// `t`'s leading corner of `shape` (a view): the elements of a source that
/// a scatter with an index of that shape reads.
fn corner(t: &Tensor, shape: &[usize]) -> Result<Tensor> {
    let mut part = t.alias();
    for (k, &n) in shape.iter().enumerate() {
        if part.shape()[k] != n {
            part = part.narrow(k as isize, 0, n)?;
        }
    }
    Ok(part)
}

/// `g` (shaped like `index`) placed in the leading corner of zeros of
/// `shape`: the gradient of a source that is larger than the index (only the
/// elements the index covers were read).
fn pad_to(g: Tensor, shape: &[usize]) -> Result<Tensor> {
    if g.shape() == shape {
        return Ok(g);
    }
    let z = Tensor::zeros(shape, g.dtype(), g.device())?;
    corner(&z, g.shape())?.copy_(&g)?;
    Ok(z)
}

/// Records `out = x.index(index)` for an integer `index` along dim 0: the
/// gradient rows are summed back into the picked rows (repeated indices
/// accumulate).
pub(crate) fn index_rows(x: &Tensor, index: &Tensor, out: Tensor) -> Result<Tensor> {
    if !needs_grad(&[x]) {
        return Ok(out);
    }
    let name = "IndexBackward";
    let n = x.shape()[0];
    // Negative indices counted from the end, as `index_add_` wants them.
    let flat = super::no_grad(|| -> Result<Tensor> {
        let i = index.to_dtype(DType::I64)?.reshape(&[-1])?;
        let neg = i
            .lt_scalar(0.0)?
            .to_dtype(DType::I64)?
            .mul_scalar(n as f64)?;
        i.add(&neg)
    })?;
    let kf = Saved::new(&flat, name)?;
    let (shape, dt) = (x.shape().to_vec(), x.dtype());
    let mut rows = vec![flat.numel() as isize];
    rows.extend(isize_shape(&shape[1..]));
    let f: BackwardFn = Box::new(move |g| {
        let mut z = Tensor::zeros(&shape, dt, g.device())?;
        z.index_add_(0, kf.get()?, &g.to_dtype(dt)?.reshape(&rows)?)?;
        Ok(vec![Some(z)])
    });
    Ok(attach(out, name, &[x], f))
}

/// Which member of the scatter family a node records.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Write {
    /// `scatter` / `index_copy`: the written positions take `src`.
    Assign,
    /// `scatter_value` / `index_fill`: the written positions take a constant.
    Value,
    /// `scatter_add` / `index_add`: `src` is added.
    Add,
}

/// Which in-place write an out-of-place form copies: the scatter family
/// (an index of `src`'s rank) or the index_{fill,copy,add} family (a vector
/// of positions along `d`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Family {
    /// `scatter`, `scatter_value`, `scatter_add`.
    Scatter,
    /// `index_copy`, `index_fill`, `index_add`.
    IndexVector,
}

/// Records `out = x.<family write>(d, index, src)` (`src` is `None` for a
/// value): the written positions pass no gradient to `x` (all of it for an
/// add), and `src` gets the gradient of the positions it was written to.
pub(crate) fn write(
    family: Family,
    kind: Write,
    x: &Tensor,
    d: usize,
    index: &Tensor,
    src: Option<&Tensor>,
    out: Tensor,
) -> Result<Tensor> {
    let inputs: Vec<&Tensor> = std::iter::once(x).chain(src).collect();
    if !needs_grad(&inputs) || !out.dtype().is_float() {
        return Ok(out);
    }
    let name = match (family, kind) {
        (Family::Scatter, Write::Assign) => "ScatterBackward",
        (Family::Scatter, Write::Value) => "ScatterValueBackward",
        (Family::Scatter, Write::Add) => "ScatterAddBackward",
        (Family::IndexVector, Write::Assign) => "IndexCopyBackward",
        (Family::IndexVector, Write::Value) => "IndexFillBackward",
        (Family::IndexVector, Write::Add) => "IndexAddBackward",
    };
    let ki = Saved::new(index, name)?;
    let dt = x.dtype();
    let rx = x.requires_grad();
    let src_shape = src
        .filter(|s| s.requires_grad())
        .map(|s| s.shape().to_vec());
    let dim = d as isize;
    let f: BackwardFn = Box::new(move |g| {
        let g = g.to_dtype(dt)?;
        let idx = ki.get()?;
        let gx = match (rx, kind) {
            (false, _) => None,
            (true, Write::Add) => Some(g.alias()),
            (true, _) => Some(match family {
                Family::Scatter => {
                    let mut z = g.deep_clone()?;
                    z.scatter_value_(dim, idx, 0.0)?;
                    z
                }
                Family::IndexVector => g.index_fill(dim, idx, 0.0)?,
            }),
        };
        let mut grads = vec![gx];
        if kind != Write::Value {
            grads.push(match &src_shape {
                None => None,
                Some(s) => Some(match family {
                    Family::Scatter => pad_to(g.gather(dim, idx)?, s)?,
                    Family::IndexVector => g.index_select(dim, idx)?,
                }),
            });
        }
        Ok(grads)
    });
    Ok(attach(out, name, &inputs, f))
}

/// Records `out = x.scatter_reduce(d, index, src, reduce, include_self)`
/// with PyTorch's `scatter_reduce_backward`:
///
/// * sum: `gx = g`, `gs = g.gather(index)`;
/// * mean: both divided by the count `N` of values combined (`x`'s own
///   counted when included; 1 where there are none);
/// * prod: `gx = g * P' / x'`, with `x'` = `x` with its zeros replaced by 1
///   and `P'` the forward recomputed from `x'` (so a zero of `x` gets the
///   product of the others); `gs = (g * out).gather / src` where `src` is
///   not 0, and where it is the position's only zero source, the gathered
///   `g` times the product with that zero replaced by 1;
/// * amax/amin: the gradient of a position is shared evenly between the
///   values equal to its result, `x`'s included (even when excluded from
///   the forward, as PyTorch counts it).
///
/// With `include_self = false`, `gx` is 0 at the positions `index` names.
pub(crate) fn scatter_reduce(
    x: &Tensor,
    d: usize,
    index: &Tensor,
    src: &Tensor,
    reduce: ScatterReduce,
    include_self: bool,
    out: Tensor,
) -> Result<Tensor> {
    if !needs_grad(&[x, src]) || !out.dtype().is_float() {
        return Ok(out);
    }
    let name = "ScatterReduceBackward";
    let ki = Saved::new(index, name)?;
    // prod, amax and amin need the values; sum and mean only the index.
    let kv = match reduce {
        ScatterReduce::Sum | ScatterReduce::Mean => None,
        _ => Some((
            Saved::new(x, name)?,
            Saved::new(src, name)?,
            Saved::new(&out, name)?,
        )),
    };
    let (dt, rx) = (x.dtype(), x.requires_grad());
    let src_shape = src.requires_grad().then(|| src.shape().to_vec());
    let dim = d as isize;
    let f: BackwardFn = Box::new(move |g| {
        let g = g.to_dtype(dt)?;
        let idx = ki.get()?;
        // Each side only when it needs a gradient (prod's costs two more
        // forward passes).
        let (want_x, want_s) = (rx, src_shape.is_some());
        let (gx, gs) = match &kv {
            None if reduce == ScatterReduce::Sum => (
                want_x.then(|| g.alias()),
                want_s.then(|| g.gather(dim, idx)).transpose()?,
            ),
            None => {
                let n = mean_counts(name, &g, d, idx, include_self)?;
                let gs = || g.gather(dim, idx)?.div(&n.gather(dim, idx)?);
                (
                    want_x.then(|| g.div(&n)).transpose()?,
                    want_s.then(gs).transpose()?,
                )
            }
            Some((kx, ks, ko)) if reduce == ScatterReduce::Prod => {
                let (x, s, res) = (kx.get()?, corner(ks.get()?, idx.shape())?, ko.get()?);
                let gx = || -> Result<Tensor> {
                    // A zero of x gets the product of the others.
                    let x1 = x.masked_fill(&x.eq_scalar(0.0)?, 1.0)?;
                    let p1 = x1.scatter_reduce(dim, idx, &s, reduce, include_self)?;
                    g.mul(&p1)?.div(&x1)
                };
                let gs = || -> Result<Tensor> {
                    let zero = s.eq_scalar(0.0)?;
                    let zeros_at = x
                        .zeros_like()?
                        .scatter_add(dim, idx, &zero.to_dtype(dt)?)?
                        .gather(dim, idx)?;
                    let single = zero.logical_and(&zeros_at.eq_scalar(1.0)?)?;
                    let s1 = s.masked_fill(&single, 1.0)?;
                    let others = x.scatter_reduce(dim, idx, &s1, reduce, include_self)?;
                    Tensor::where_cond(
                        &single,
                        &g.mul(&others)?.gather(dim, idx)?,
                        &g.mul(res)?
                            .gather(dim, idx)?
                            .div(&s.masked_fill(&zero, 1.0)?)?,
                    )
                };
                (want_x.then(gx).transpose()?, want_s.then(gs).transpose()?)
            }
            Some((kx, ks, ko)) => {
                let (x, s, res) = (kx.get()?, corner(ks.get()?, idx.shape())?, ko.get()?);
                let at_x = x.eq(res)?.to_dtype(dt)?;
                let at_s = s.eq(&res.gather(dim, idx)?)?.to_dtype(dt)?;
                let shared = g.div(&at_x.scatter_add(dim, idx, &at_s)?)?;
                let gs = || at_s.mul(&shared.gather(dim, idx)?);
                (
                    want_x.then(|| at_x.mul(&shared)).transpose()?,
                    want_s.then(gs).transpose()?,
                )
            }
        };
        let gx = match (gx, include_self) {
            (Some(gx), false) => Some(gx.scatter_value(dim, idx, 0.0)?),
            (gx, _) => gx,
        };
        let gs = match (gs, &src_shape) {
            (Some(gs), Some(shape)) => Some(pad_to(gs, shape)?),
            _ => None,
        };
        Ok(vec![gx, gs])
    });
    Ok(attach(out, name, &[x, src], f))
}

/// Records `out = weight.index_select(0, flat_index)` viewed with the
/// index's shape plus the embedding dim, for an embedding lookup. The
/// gradient is summed into the looked-up rows, except that row `padding_idx`
/// (if any) receives none, as in PyTorch's `Embedding(padding_idx=...)`.
pub(crate) fn embedding(
    weight: &Tensor,
    flat_index: &Tensor,
    padding_idx: Option<usize>,
    out: Tensor,
) -> Result<Tensor> {
    if !needs_grad(&[weight]) {
        return Ok(out);
    }
    let name = "EmbeddingBackward";
    let ki = Saved::new(flat_index, name)?;
    let (shape, dt) = (weight.shape().to_vec(), weight.dtype());
    let rows = [flat_index.numel() as isize, shape[1] as isize];
    let f: BackwardFn = Box::new(move |g| {
        let mut z = Tensor::zeros(&shape, dt, g.device())?;
        z.index_add_(0, ki.get()?, &g.to_dtype(dt)?.reshape(&rows)?)?;
        if let Some(p) = padding_idx {
            z.select(0, p as isize)?.fill_(0.0)?;
        }
        Ok(vec![Some(z)])
    });
    Ok(attach(out, name, &[weight], f))
}
