//! Resizing (PyTorch's `torch.nn.functional.interpolate`): nearest, and
//! linear / bilinear with either `align_corners`, over the spatial dims of
//! `[N, C, L]` and `[N, C, H, W]` inputs.
//!
//! The resize is separable: one spatial dimension at a time, each an
//! [`index_select`](Tensor::index_select) of source rows (nearest), or two
//! of them weighted and added (linear), with the source positions and
//! weights computed on the host by PyTorch's formulas in the input's
//! compute precision (f32, f64 for f64). So it runs on every device and
//! autograd gives the backward (index_select's scatter-add sums each
//! source's share). Its rounding differs from PyTorch's fused kernel by
//! the order of the weighted sums only.

use crate::dtype::DType;
use crate::error::{bail, Error, Result};
use crate::tensor::Tensor;

const OP: &str = "interpolate";

/// How [`Tensor::interpolate`] samples (PyTorch's `mode`, and
/// `align_corners` for the linear ones).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InterpolateMode {
    /// `"nearest"`: source `floor(dst * scale)`.
    Nearest,
    /// `"linear"` (`[N, C, L]`) or `"bilinear"` (`[N, C, H, W]`).
    Linear {
        /// `true`: the corner samples of input and output coincide;
        /// `false` (PyTorch's default): their pixel areas' edges do.
        align_corners: bool,
    },
}

/// The output's size: given, or the input's times a factor per spatial
/// dimension (PyTorch's `size` and `scale_factor`, one of them).
#[derive(Clone, Debug, PartialEq)]
pub enum InterpolateSize {
    /// The spatial sizes.
    Size(Vec<usize>),
    /// `floor(input * factor)` per spatial dimension; the factor is also
    /// what maps output positions to input ones (PyTorch's default
    /// `recompute_scale_factor=None`).
    Scale(Vec<f64>),
}

impl Tensor {
    /// `F.interpolate(x, size | scale_factor, mode, align_corners)` for a
    /// float `[N, C, L]` or `[N, C, H, W]` input. Differentiable.
    ///
    /// ```
    /// use tensorscope::{Device, InterpolateMode, InterpolateSize, Tensor};
    /// let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[1, 1, 2, 2], Device::Cpu)?;
    /// let up = x.interpolate(&InterpolateSize::Scale(vec![2.0, 2.0]), InterpolateMode::Nearest)?;
    /// assert_eq!(up.shape(), &[1, 1, 4, 4]);
    /// let lin = InterpolateMode::Linear { align_corners: true };
    /// let y = x.interpolate(&InterpolateSize::Size(vec![3, 3]), lin)?;
    /// assert_eq!(y.to_vec::<f32>()?[4], 2.5); // the centre: the mean of the four
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn interpolate(&self, size: &InterpolateSize, mode: InterpolateMode) -> Result<Tensor> {
        if let Some(c) = crate::autocast::cast(&crate::autocast::INTERPOLATE, &[Some(self)])? {
            return c.get(0).interpolate(size, mode);
        }
        let _op = crate::alloc::history::op_context_with(OP, || vec![self.shape().to_vec()]);
        let r = self.rank();
        if !(r == 3 || r == 4) || !self.dtype().is_float() {
            bail!(Error::arg(
                OP,
                format!(
                    "expected a float input [N, C, L] or [N, C, H, W], got shape {:?} {}",
                    self.shape(),
                    self.dtype()
                )
            ));
        }
        let spatial = r - 2;
        let (out, scales): (Vec<usize>, Vec<Option<f64>>) = match size {
            InterpolateSize::Size(s) if s.len() == spatial && s.iter().all(|&d| d > 0) => {
                (s.clone(), vec![None; spatial])
            }
            InterpolateSize::Scale(f)
                if f.len() == spatial && f.iter().all(|&x| x > 0.0 && x.is_finite()) =>
            {
                let out: Vec<usize> = f
                    .iter()
                    .zip(&self.shape()[2..])
                    .map(|(&x, &n)| (n as f64 * x).floor() as usize)
                    .collect();
                (out, f.iter().map(|&x| Some(x)).collect())
            }
            _ => bail!(Error::arg(
                OP,
                format!(
                    "expected {spatial} positive output sizes or finite scale factors > 0 for input {:?}, got {size:?}",
                    self.shape()
                )
            )),
        };
        if out.contains(&0) || self.shape()[2..].contains(&0) {
            bail!(Error::arg(
                OP,
                format!(
                    "input {:?} and output {out:?} sizes must be non-zero",
                    self.shape()
                )
            ));
        }
        let mut y = self.alias();
        for d in 0..spatial {
            y = resize_dim(&y, 2 + d, out[d], scales[d], mode)?;
        }
        Ok(y)
    }
}

/// One spatial dimension resized to `out`.
fn resize_dim(
    x: &Tensor,
    dim: usize,
    out: usize,
    scale: Option<f64>,
    mode: InterpolateMode,
) -> Result<Tensor> {
    let n = x.shape()[dim];
    let (dev, f64s) = (x.device(), x.dtype() == DType::F64);
    let index = |v: Vec<i64>| -> Result<Tensor> {
        let len = v.len();
        Tensor::from_vec(v, &[len], crate::device::Device::Cpu)?.to_device(dev)
    };
    match mode {
        InterpolateMode::Nearest => {
            let src: Vec<i64> = if out == n {
                (0..n as i64).collect()
            } else if out == 2 * n {
                (0..out as i64).map(|i| i >> 1).collect()
            } else {
                let s = pixel_scale(n, out, false, scale, f64s);
                (0..out)
                    .map(|i| {
                        let f = if f64s {
                            (i as f64 * s).floor()
                        } else {
                            (i as f32 * s as f32).floor() as f64
                        };
                        (f as i64).min(n as i64 - 1)
                    })
                    .collect()
            };
            x.index_select(dim as isize, &index(src)?)
        }
        InterpolateMode::Linear { align_corners } => {
            let s = pixel_scale(n, out, align_corners, scale, f64s);
            let (mut i0, mut i1, mut w1) = (Vec::new(), Vec::new(), Vec::new());
            for i in 0..out {
                // PyTorch's area_pixel_compute_source_index, in the compute precision.
                let src = if f64s {
                    if align_corners {
                        s * i as f64
                    } else {
                        (s * (i as f64 + 0.5) - 0.5).max(0.0)
                    }
                } else {
                    let (s, i) = (s as f32, i as f32);
                    (if align_corners {
                        s * i
                    } else {
                        (s * (i + 0.5) - 0.5).max(0.0)
                    }) as f64
                };
                let h = (src as i64).min(n as i64 - 1);
                let step = i64::from(h < n as i64 - 1);
                i0.push(h);
                i1.push(h + step);
                w1.push(if f64s {
                    src - h as f64
                } else {
                    (src as f32 - h as f32) as f64
                });
            }
            let mut wshape = vec![1usize; x.rank()];
            wshape[dim] = out;
            let cdt = if f64s { DType::F64 } else { DType::F32 };
            let w1 = Tensor::from_vec(w1, &[out], crate::device::Device::Cpu)?
                .to_dtype(cdt)?
                .reshape(&wshape.iter().map(|&d| d as isize).collect::<Vec<_>>())?
                .to_device(dev)?;
            let w0 = w1.neg()?.add_scalar(1.0)?;
            let a = x.index_select(dim as isize, &index(i0)?)?;
            let b = x.index_select(dim as isize, &index(i1)?)?;
            let y = a
                .to_dtype(cdt)?
                .mul(&w0)?
                .add(&b.to_dtype(cdt)?.mul(&w1)?)?;
            y.to_dtype(x.dtype())
        }
    }
}

/// PyTorch's `area_pixel_compute_scale`: the input distance per output
/// step, computed in the compute precision (`f64s`: f64, else f32, the
/// f32 value returned widened).
fn pixel_scale(n: usize, out: usize, align_corners: bool, scale: Option<f64>, f64s: bool) -> f64 {
    if align_corners {
        return match (out > 1, f64s) {
            (false, _) => 0.0,
            (true, true) => (n as f64 - 1.0) / (out as f64 - 1.0),
            (true, false) => ((n as f32 - 1.0) / (out as f32 - 1.0)) as f64,
        };
    }
    match (scale, f64s) {
        (Some(f), true) => 1.0 / f,
        (Some(f), false) => (1.0 / f) as f32 as f64,
        (None, true) => n as f64 / out as f64,
        (None, false) => (n as f32 / out as f32) as f64,
    }
}
