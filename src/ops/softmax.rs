//! The softmax family: `softmax` and `log_softmax` along one dim, forward
//! and backward, one fused kernel per direction on each device
//! (`backend::softmax`, `kernels/softmax.cu`).

use super::reduce::need_float;
use crate::autograd::{attach, needs_grad, BackwardFn, Saved};
use crate::backend::{self, Operand};
use crate::error::Result;
use crate::layout::normalize_dim;
use crate::tensor::Tensor;

impl Tensor {
    /// The forward, and the normalised dim for [`record`].
    fn softmax_impl(&self, dim: isize, log: bool) -> Result<(Tensor, usize)> {
        let op = if log { "log_softmax" } else { "softmax" };
        need_float(op, self)?;
        let d = normalize_dim(op, dim, self.rank().max(1))?;
        let out = Tensor::alloc(self.shape(), self.dtype(), self.device())?;
        if self.rank() == 0 {
            // One element: softmax 1, log_softmax 0 (NaN stays NaN).
            let x = self.to_vec::<f64>()?[0];
            let v = if x.is_nan() {
                f64::NAN
            } else if log {
                0.0
            } else {
                1.0
            };
            backend::fill(&Operand::of(&out), v)?;
            return Ok((out, d));
        }
        backend::softmax::softmax(&Operand::of(self), d, &Operand::of(&out), log)?;
        Ok((out, d))
    }

    /// `exp(x) / sum(exp(x))` along `dim`, computed stably (the row's
    /// maximum is subtracted first). Float tensors only.
    ///
    /// ```
    /// # use tensorscope::{Tensor, Device};
    /// let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 1000.0, 1000.0, 1000.0], &[2, 3], Device::Cpu)?;
    /// let p = x.softmax(-1)?;
    /// let rows = p.sum(&[-1], false)?.to_vec::<f32>()?;
    /// assert!(rows.iter().all(|s| (s - 1.0).abs() < 1e-6));
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn softmax(&self, dim: isize) -> Result<Tensor> {
        if let Some(c) = crate::autocast::cast(&crate::autocast::SOFTMAX, &[Some(self)])? {
            return c.get(0).softmax(dim);
        }
        let _op = crate::alloc::history::op_context_with("softmax", || vec![self.shape().to_vec()]);
        let (out, d) = self.softmax_impl(dim, false)?;
        record(self, d, false, out)
    }

    /// `x - logsumexp(x)` along `dim`, computed stably. Float tensors only.
    pub fn log_softmax(&self, dim: isize) -> Result<Tensor> {
        if let Some(c) = crate::autocast::cast(&crate::autocast::LOG_SOFTMAX, &[Some(self)])? {
            return c.get(0).log_softmax(dim);
        }
        let _op = crate::alloc::history::op_context("log_softmax");
        let (out, d) = self.softmax_impl(dim, true)?;
        record(self, d, true, out)
    }
}

/// Records `out = softmax(x, d)` or `log_softmax` (`d` normalised).
fn record(x: &Tensor, d: usize, log: bool, out: Tensor) -> Result<Tensor> {
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
    let f: BackwardFn = Box::new(move |g| {
        let y = ky.get()?;
        if y.rank() == 0 {
            return Ok(vec![Some(g.zeros_like()?.to_dtype(dt)?)]);
        }
        // One fused pass per row (CPU and CUDA): softmax dx = y (g - Σ g y),
        // log_softmax dx = g - exp(y) Σ g.
        let g = g.to_dtype(y.dtype())?;
        let dx = Tensor::alloc(y.shape(), y.dtype(), y.device())?;
        backend::softmax::softmax_backward(
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
