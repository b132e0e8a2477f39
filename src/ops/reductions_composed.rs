//! Reductions a PyTorch user reaches for, composed of the core reductions so
//! that they run on every device: `any`, `all`, `var_mean`, `std_mean`, and
//! `vector_norm` / `norm`, whose backward is PyTorch's `norm_backward` (its
//! own node: at a zero norm the gradient is 0, where differentiating the
//! composition would give NaN).

use crate::alloc::history::op_context;
use crate::autograd::{attach, needs_grad, no_grad, BackwardFn, Saved};
use crate::dtype::DType;
use crate::error::{bail, Error, Result};
use crate::layout::normalize_dim;
use crate::tensor::Tensor;

const NORM_NODE: &str = "LinalgVectorNormBackward";

impl Tensor {
    /// `true` where any element over `dims` (empty: every dimension) is
    /// non-zero, NaN included (`torch.any`). Bool, or uint8 for a uint8
    /// input (as PyTorch); `false` over an empty set.
    ///
    /// ```
    /// # use tensorscope::{Tensor, Device};
    /// let x = Tensor::from_slice(&[0.0f32, 0.0, 1.0, 0.0], &[2, 2], Device::Cpu)?;
    /// assert_eq!(x.any(&[1], false)?.to_vec::<bool>()?, [false, true]);
    /// assert_eq!(x.all(&[], false)?.item::<bool>()?, false);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn any(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        let _op = op_context("any");
        self.truth("any", dims, keepdim)
    }

    /// `true` where every element over `dims` (empty: every dimension) is
    /// non-zero (`torch.all`); bool, or uint8 for a uint8 input; `true` over
    /// an empty set.
    pub fn all(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        let _op = op_context("all");
        self.truth("all", dims, keepdim)
    }

    fn truth(&self, op: &'static str, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        let any = op == "any";
        let r = no_grad(|| {
            // Count the elements that decide: non-zero ones for `any`, zeros
            // for `all` (NaN is non-zero).
            let hits = if any {
                self.ne_scalar(0.0)?
            } else {
                self.eq_scalar(0.0)?
            };
            let n = hits.sum(dims, keepdim)?;
            if any {
                n.gt_scalar(0.0)
            } else {
                n.eq_scalar(0.0)
            }
        })
        .map_err(|e| e.reported_as(op))?;
        if self.dtype() == DType::U8 {
            r.to_dtype(DType::U8)
        } else {
            Ok(r)
        }
    }

    /// `(var, mean)` over `dims` (`torch.var_mean`): [`var`](Tensor::var)
    /// with `correction` and [`mean`](Tensor::mean), both differentiable.
    pub fn var_mean(
        &self,
        dims: &[isize],
        correction: usize,
        keepdim: bool,
    ) -> Result<(Tensor, Tensor)> {
        let _op = op_context("var_mean");
        let v = self
            .var(dims, correction, keepdim)
            .map_err(|e| e.reported_as("var_mean"))?;
        Ok((v, self.mean(dims, keepdim)?))
    }

    /// `(std, mean)` over `dims` (`torch.std_mean`).
    pub fn std_mean(
        &self,
        dims: &[isize],
        correction: usize,
        keepdim: bool,
    ) -> Result<(Tensor, Tensor)> {
        let _op = op_context("std_mean");
        let s = self
            .std(dims, correction, keepdim)
            .map_err(|e| e.reported_as("std_mean"))?;
        Ok((s, self.mean(dims, keepdim)?))
    }

    /// The `ord`-norm of the elements over `dims` (empty: every dimension),
    /// `torch.linalg.vector_norm`: `sum(|x|^ord)^(1/ord)`; `ord` inf and
    /// -inf are the largest and smallest `|x|`, 0 counts the non-zero
    /// elements. Float tensors only; f16 and bf16 compute in f32 and round
    /// once (their squares would overflow). The gradient is PyTorch's: 0
    /// where the norm is 0, and for inf/-inf the gradient is shared among
    /// the elements that attain the norm.
    ///
    /// ```
    /// # use tensorscope::{Tensor, Device};
    /// let x = Tensor::from_slice(&[3.0f64, -4.0, 0.0, 1.0], &[2, 2], Device::Cpu)?;
    /// assert_eq!(x.vector_norm(2.0, &[], false)?.item::<f64>()?, 26f64.sqrt());
    /// assert_eq!(x.vector_norm(1.0, &[1], false)?.to_vec::<f64>()?, [7.0, 1.0]);
    /// assert_eq!(x.vector_norm(f64::INFINITY, &[0], false)?.to_vec::<f64>()?, [3.0, 4.0]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn vector_norm(&self, ord: f64, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        if let Some(c) = crate::autocast::cast(&crate::autocast::VECTOR_NORM, &[Some(self)])? {
            return c.get(0).vector_norm(ord, dims, keepdim);
        }
        let _op = op_context("vector_norm");
        self.norm_impl("vector_norm", ord, dims, keepdim)
    }

    /// `torch.norm(x, p, dim, keepdim)` for a numeric `p`: the same as
    /// [`vector_norm`](Tensor::vector_norm) (the Frobenius norm of a matrix
    /// is its 2-norm over both dimensions).
    pub fn norm(&self, p: f64, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        if let Some(c) = crate::autocast::cast(&crate::autocast::NORM, &[Some(self)])? {
            return c.get(0).norm(p, dims, keepdim);
        }
        let _op = op_context("norm");
        self.norm_impl("norm", p, dims, keepdim)
    }

    fn norm_impl(
        &self,
        op: &'static str,
        ord: f64,
        dims: &[isize],
        keepdim: bool,
    ) -> Result<Tensor> {
        let dt = self.dtype();
        if !dt.is_float() {
            bail!(Error::dtype(
                op,
                "a float tensor (PyTorch: \"linalg.vector_norm: Expected a floating point or complex tensor as input\")",
                dt
            ));
        }
        if ord.is_nan() {
            bail!(Error::arg(op, "the order must be a number, got NaN"));
        }
        // The reduced dimensions, ascending (empty: all).
        let mut reduced = Vec::with_capacity(dims.len());
        for &d in dims {
            reduced.push(normalize_dim(op, d, self.rank().max(1))?);
        }
        if dims.is_empty() {
            reduced = (0..self.rank()).collect();
        }
        if self.rank() == 0 {
            // Dim 0 (or -1) of a scalar reduces nothing: no dim to restore.
            reduced.clear();
        }
        reduced.sort_unstable();
        let empty = if self.rank() == 0 {
            false
        } else {
            reduced.iter().any(|&d| self.shape()[d] == 0)
        };
        if empty && ord < 0.0 {
            bail!(Error::arg(
                op,
                format!(
                    "cannot compute the {ord} norm over an empty dimension of shape {:?}",
                    self.shape()
                )
            ));
        }
        let out = no_grad(|| {
            let wide = matches!(dt, DType::F16 | DType::BF16);
            let x = if wide {
                self.to_dtype(DType::F32)?
            } else {
                self.alias()
            };
            let n = if ord == f64::INFINITY {
                x.abs()?.max(dims, keepdim)?
            } else if ord == f64::NEG_INFINITY {
                x.abs()?.min(dims, keepdim)?
            } else if ord == 0.0 {
                x.ne_scalar(0.0)?.to_dtype(x.dtype())?.sum(dims, keepdim)?
            } else if ord == 1.0 {
                x.abs()?.sum(dims, keepdim)?
            } else if ord == 2.0 {
                x.mul(&x)?.sum(dims, keepdim)?.sqrt()?
            } else {
                x.abs()?
                    .pow_scalar(ord)?
                    .sum(dims, keepdim)?
                    .pow_scalar(1.0 / ord)?
            };
            n.to_dtype(dt)
        })
        .map_err(|e| e.reported_as(op))?;
        if !needs_grad(&[self]) {
            return Ok(out);
        }
        let kx = Saved::new(self, NORM_NODE)?;
        let kn = Saved::new(&out, NORM_NODE)?;
        let f: BackwardFn = Box::new(move |g| {
            let (x, n) = (kx.get()?, kn.get()?);
            // The gradient and the norm with the reduced dimensions kept,
            // to broadcast against x.
            let (mut g, mut n) = (g.alias(), n.alias());
            if !keepdim {
                for &d in &reduced {
                    g = g.unsqueeze(d as isize)?;
                    n = n.unsqueeze(d as isize)?;
                }
            }
            let at_zero = n.eq_scalar(0.0)?;
            let gx = if ord == 0.0 {
                x.zeros_like()?
            } else if ord == 1.0 {
                x.sign()?.mul(&g)?
            } else if ord.is_infinite() {
                // Shared among the elements that attain the norm (or are NaN).
                let xa = x.abs()?;
                let mask = xa.eq(&n)?.logical_or(&xa.isnan()?)?.to_dtype(x.dtype())?;
                let dims: Vec<isize> = reduced.iter().map(|&d| d as isize).collect();
                let count = mask.sum(&dims, true)?;
                x.sign()?.mul(&g.div(&count)?.mul(&mask)?)?
            } else if ord == 2.0 {
                x.mul(&g.div(&n)?.masked_fill(&at_zero, 0.0)?)?
            } else if ord < 1.0 {
                let xs = x.sign()?.mul(
                    &x.abs()?
                        .pow_scalar(ord - 1.0)?
                        .masked_fill(&x.eq_scalar(0.0)?, 0.0)?,
                )?;
                xs.mul(&g.mul(&n.pow_scalar(1.0 - ord)?)?)?
            } else {
                let scale = g
                    .div(&n.pow_scalar(ord - 1.0)?)?
                    .masked_fill(&at_zero, 0.0)?;
                let xs = if ord < 2.0 {
                    x.sign()?.mul(&x.abs()?.pow_scalar(ord - 1.0)?)?
                } else {
                    x.mul(&x.abs()?.pow_scalar(ord - 2.0)?)?
                };
                xs.mul(&scale)?
            };
            Ok(vec![Some(gx)])
        });
        Ok(attach(out, NORM_NODE, &[self], f))
    }
}
