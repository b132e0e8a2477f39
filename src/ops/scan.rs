//! Cumulative sums and products: `cumsum` and `cumprod`, with one scan kernel
//! on both devices (`backend::scan`) and PyTorch's gradients: a reversed
//! cumulative sum for `cumsum`; for `cumprod` the exclusive products times
//! the reversed recurrence `s_i = g_i + x_{i+1} s_{i+1}`, which needs no
//! division, so zeros in the input give the exact gradient.

use crate::alloc::history::op_context;
use crate::autograd::{attach, needs_grad, no_grad, BackwardFn, Saved};
use crate::backend::scan::{scan, ScanKind};
use crate::backend::Operand;
use crate::dtype::DType;
use crate::error::Result;
use crate::layout::normalize_dim;
use crate::tensor::Tensor;

impl Tensor {
    /// `torch.cumsum(x, dim)`: `y_i = x_0 + .. + x_i` along `dim`. Floats
    /// keep their dtype (accumulated in f64; f16 and bf16 outputs round
    /// through f32);
    /// integers and bool give int64 (wrapping), as PyTorch.
    ///
    /// ```
    /// # use tensorscope::{Tensor, Device};
    /// let x = Tensor::from_slice(&[1i32, 2, 3, 4], &[2, 2], Device::Cpu)?;
    /// assert_eq!(x.cumsum(1)?.to_vec::<i64>()?, [1, 3, 3, 7]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn cumsum(&self, dim: isize) -> Result<Tensor> {
        if let Some(c) = crate::autocast::cast(&crate::autocast::CUMSUM, &[Some(self)])? {
            return c.get(0).cumsum(dim);
        }
        let _op = op_context("cumsum");
        self.cumulative("cumsum", ScanKind::Sum, dim)
    }

    /// `torch.cumprod(x, dim)`: `y_i = x_0 * .. * x_i` along `dim`; dtypes
    /// as [`cumsum`](Tensor::cumsum). The gradient is exact with zeros in
    /// the input (no division).
    ///
    /// ```
    /// # use tensorscope::{Tensor, Device};
    /// let x = Tensor::from_slice(&[2.0f32, 0.0, 3.0], &[3], Device::Cpu)?.requires_grad_(true)?;
    /// let y = x.cumprod(0)?;
    /// assert_eq!(y.to_vec::<f32>()?, [2.0, 0.0, 0.0]);
    /// y.sum_all()?.backward()?;
    /// // d/dx1 of (2 + 2 x1 + 2 x1 x2) at x1 = 0, x2 = 3: 2 + 6 = 8.
    /// assert_eq!(x.grad().unwrap().to_vec::<f32>()?, [1.0, 8.0, 0.0]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn cumprod(&self, dim: isize) -> Result<Tensor> {
        if let Some(c) = crate::autocast::cast(&crate::autocast::CUMPROD, &[Some(self)])? {
            return c.get(0).cumprod(dim);
        }
        let _op = op_context("cumprod");
        self.cumulative("cumprod", ScanKind::Prod, dim)
    }

    fn cumulative(&self, op: &'static str, kind: ScanKind, dim: isize) -> Result<Tensor> {
        let d = normalize_dim(op, dim, self.rank().max(1))?;
        let dt = if self.dtype().is_float() {
            self.dtype()
        } else {
            DType::I64
        };
        let out = no_grad(|| raw_scan(op, kind, &self.to_dtype(dt)?, None, d))?;
        if !needs_grad(&[self]) {
            return Ok(out);
        }
        let node = if kind == ScanKind::Sum {
            "CumsumBackward"
        } else {
            "CumprodBackward"
        };
        let kx = Saved::new(self, node)?;
        let ko = Saved::new(&out, node)?;
        let f: BackwardFn = Box::new(move |g| {
            let (x, y) = (kx.get()?, ko.get()?);
            let flip = |t: &Tensor| {
                if t.rank() == 0 {
                    Ok(t.alias())
                } else {
                    t.flip(&[d as isize])
                }
            };
            let gx = match kind {
                // The sum of the gradients at and after each position.
                ScanKind::Sum => flip(&raw_scan(op, ScanKind::Sum, &flip(g)?, None, d)?)?,
                _ => {
                    if x.rank() == 0 || x.shape()[d] == 0 {
                        return Ok(vec![Some(g.alias())]);
                    }
                    // grad_i = (x_0 .. x_{i-1}) * s_i with s_i = g_i + x_{i+1} s_{i+1}:
                    // run forward over the flipped sequence, where the
                    // coefficient of position j is the flipped x one back
                    // (0 at the start).
                    let n = x.shape()[d];
                    let di = d as isize;
                    let mut first = x.shape().to_vec();
                    first[d] = 1;
                    let dev = x.device();
                    let zero = Tensor::zeros(&first, x.dtype(), dev)?;
                    let one = Tensor::ones(&first, x.dtype(), dev)?;
                    let a = Tensor::cat(&[&zero, &flip(x)?.narrow(di, 0, n - 1)?], di)?;
                    let s = flip(&raw_scan(op, ScanKind::Affine, &flip(g)?, Some(&a), d)?)?;
                    let excl = Tensor::cat(&[&one, &y.narrow(di, 0, n - 1)?], di)?;
                    excl.mul(&s)?
                }
            };
            Ok(vec![Some(gx)])
        });
        Ok(attach(out, node, &[self], f))
    }
}

/// The scan of `x` (float or int64) along dimension `d` (`a`: the
/// recurrence's coefficients, of `x`'s shape), in `x`'s shape and dtype.
fn raw_scan(
    op: &'static str,
    kind: ScanKind,
    x: &Tensor,
    a: Option<&Tensor>,
    d: usize,
) -> Result<Tensor> {
    if x.rank() == 0 {
        let a1 = a.map(|a| a.reshape(&[1])).transpose()?;
        return raw_scan(op, kind, &x.reshape(&[1])?, a1.as_ref(), 0)?.reshape(&[]);
    }
    if x.numel() == 0 {
        return Tensor::zeros(x.shape(), x.dtype(), x.device());
    }
    let last = (x.rank() - 1) as isize;
    let di = d as isize;
    let rows_of = |t: &Tensor| t.transpose(di, last)?.contiguous();
    let xt = rows_of(x)?;
    let at = a.map(rows_of).transpose()?;
    let n = x.shape()[d];
    let rows = x.numel() / n;
    let out = Tensor::alloc(xt.shape(), x.dtype(), x.device())?;
    let ao = at.as_ref().map(Operand::of);
    scan(
        op,
        kind,
        &Operand::of(&xt),
        ao.as_ref(),
        &Operand::of(&out),
        rows,
        n,
    )?;
    out.transpose(di, last)?.contiguous()
}
