//! 2-d pooling: `max_pool2d` (with its indices), `avg_pool2d` and
//! `adaptive_avg_pool2d` (PyTorch's `F.*` of the same names), forward and
//! backward on every device.
//!
//! `max_pool2d` is one kernel on each device (`backend::pool_im2col`): every
//! output visits its window's in-bounds taps and keeps the maximum and,
//! when a graph or the caller wants it, its flat index; nothing else is
//! allocated (a copy of the windows, a reduction and a gather cost a tenth of
//! the CNN training step: Note [CNN window kernels] in
//! `bench/results/ops-why.md`). It saves only its indices for the backward
//! pass (a scatter-add into the input's shape).
//!
//! For `avg_pool2d` the windows of the padded input are a strided view of
//! it (as for the convolutions' columns); one copy lays them out `[N, C,
//! OH, OW, kh kw]` and a mean over the last dimension gives the output.
//! That copy is workspace, freed before the op returns; the backward pass
//! sums the scaled gradient back one tap at a time and saves nothing.
//! `adaptive_avg_pool2d` averages PyTorch's windows (`[floor(i H / OH),
//! ceil((i + 1) H / OH))`) one dimension at a time: a mean per window of
//! rows, then per window of columns, whose backward autograd already knows.

use super::conv::pad2d;
use crate::alloc::history::op_context_with;
use crate::autograd::{self, attach, needs_grad, BackwardFn, Saved};
use crate::backend::pool_im2col::{self, Windows};
use crate::backend::Operand;
use crate::dtype::DType;
use crate::error::{bail, Error, Result};
use crate::tensor::Tensor;

/// The options of [`Tensor::max_pool2d`] and [`Tensor::avg_pool2d`]
/// (PyTorch's keyword arguments).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolOptions {
    /// The step between windows; `None` is the kernel size (PyTorch's
    /// default).
    pub stride: Option<[usize; 2]>,
    /// Padding on both sides (at most half the kernel): `-inf` for the
    /// max, zeros for the average.
    pub padding: [usize; 2],
    /// The spacing of a window's taps (`max_pool2d` only; 1 for the
    /// average).
    pub dilation: [usize; 2],
    /// `avg_pool2d`: divide by the whole window, padding included (`true`,
    /// PyTorch's default), or by the input elements in it.
    pub count_include_pad: bool,
    /// Round the output size up (`OH = ceil((H + 2 padding - span) /
    /// stride) + 1`), so that a last, partial window covers the rows and
    /// columns a floor would leave out; as in PyTorch, a window that would
    /// start in the right padding is dropped. The part of such a window
    /// beyond the padding holds nothing: it is not counted in an average's
    /// divisor, even with `count_include_pad`.
    pub ceil_mode: bool,
}

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions {
            stride: None,
            padding: [0, 0],
            dilation: [1, 1],
            count_include_pad: true,
            ceil_mode: false,
        }
    }
}

/// A pooling's geometry, checked.
#[derive(Clone, Copy, Debug)]
struct Pool {
    nchw: [usize; 4],
    k: [usize; 2],
    s: [usize; 2],
    /// Padding before the rows and columns.
    p: [usize; 2],
    /// Padding after them: `p`, plus what `ceil_mode`'s last window needs
    /// beyond it (filled like the padding; never counted in a divisor).
    p_hi: [usize; 2],
    d: [usize; 2],
    out: [usize; 2],
}

fn geometry(op: &'static str, x: &Tensor, k: [usize; 2], o: &PoolOptions) -> Result<Pool> {
    if x.rank() != 4 {
        bail!(Error::arg(
            op,
            format!(
                "expected a [N, C, H, W] or [C, H, W] input, got shape {:?}",
                x.shape()
            )
        ));
    }
    if !x.dtype().is_float() {
        bail!(Error::dtype(op, "a float dtype", x.dtype()));
    }
    let s = o.stride.unwrap_or(k);
    if k.contains(&0) || s.contains(&0) || o.dilation.contains(&0) {
        bail!(Error::arg(
            op,
            format!(
                "kernel {k:?}, stride {s:?} and dilation {:?} must be at least 1",
                o.dilation
            )
        ));
    }
    if o.padding[0] > k[0] / 2 || o.padding[1] > k[1] / 2 {
        bail!(Error::arg(
            op,
            format!(
                "padding {:?} must be at most half the kernel {k:?}",
                o.padding
            )
        ));
    }
    let xs = x.shape();
    let nchw = [xs[0], xs[1], xs[2], xs[3]];
    if nchw[1..].contains(&0) {
        bail!(Error::arg(
            op,
            format!(
                "only the batch dimension may be empty, got shape {xs:?} (PyTorch refuses it too)"
            )
        ));
    }
    let mut out = [0; 2];
    let mut p_hi = o.padding;
    for i in 0..2 {
        // Checked: a dilation near usize::MAX is an Err, not a wrap.
        let span = o.dilation[i]
            .checked_mul(k[i] - 1)
            .and_then(|v| v.checked_add(1))
            .unwrap_or(usize::MAX);
        let padded = nchw[2 + i].saturating_add(2 * o.padding[i]);
        if padded < span || span == usize::MAX {
            bail!(Error::arg(
                op,
                format!(
                    "the padded input {:?} is smaller than the (dilated) kernel {:?} (input shape {:?})",
                    [nchw[2].saturating_add(2 * o.padding[0]), nchw[3].saturating_add(2 * o.padding[1])],
                    [
                        o.dilation[0].saturating_mul(k[0] - 1).saturating_add(1),
                        o.dilation[1].saturating_mul(k[1] - 1).saturating_add(1)
                    ],
                    xs
                )
            ));
        }
        out[i] = (padded - span) / s[i] + 1;
        if o.ceil_mode {
            // PyTorch's pooling_output_shape: round up, but drop a last
            // window that would start in the right padding.
            out[i] = (padded - span).div_ceil(s[i]) + 1;
            if (out[i] - 1) * s[i] >= nchw[2 + i] + o.padding[i] {
                out[i] -= 1;
            }
            let reach = (out[i] - 1) * s[i] + span;
            p_hi[i] = o.padding[i] + reach.saturating_sub(padded);
        }
        // With a dilation, a window can fall between the input's elements
        // (x [3] with kernel 2, padding 1, dilation 4: taps -1 and 3).
        // PyTorch then gives -inf and an index outside the plane, which
        // its backward pass would scatter out of bounds: an Err here
        // (deviation 25).
        let n = nchw[2 + i];
        if let Some(w) = (0..out[i]).find(|&w| {
            (0..k[i]).all(|t| {
                let at = (w * s[i] + t * o.dilation[i]) as isize - o.padding[i] as isize;
                at < 0 || at >= n as isize
            })
        }) {
            bail!(Error::arg(
                op,
                format!(
                    "window {w} of dim {} holds no input element (input shape {xs:?}, kernel {k:?}, \
                     padding {:?}, dilation {:?}); PyTorch returns -inf and an index outside the input there",
                    2 + i,
                    o.padding,
                    o.dilation
                )
            ));
        }
    }
    Ok(Pool {
        nchw,
        k,
        s,
        p: o.padding,
        p_hi,
        d: o.dilation,
        out,
    })
}

/// The windows of `x` padded with `value`: `[N, C, OH, OW, kh kw]`, laid
/// out (the workspace copy).
fn windows(x: &Tensor, g: &Pool, value: f64) -> Result<Tensor> {
    let xp = pad2d(x, g.p, g.p_hi, value)?;
    let [n, c, h, w] = g.nchw;
    let (hp, wp) = (h + g.p[0] + g.p_hi[0], w + g.p[1] + g.p_hi[1]);
    let v = xp.as_strided(
        &[n, c, g.out[0], g.out[1], g.k[0], g.k[1]],
        &[
            c * hp * wp,
            hp * wp,
            g.s[0] * wp,
            g.s[1],
            g.d[0] * wp,
            g.d[1],
        ],
        xp.storage_offset(),
    )?;
    v.contiguous()?.reshape(&[
        n as isize,
        c as isize,
        g.out[0] as isize,
        g.out[1] as isize,
        (g.k[0] * g.k[1]) as isize,
    ])
}

/// Runs a batched pooling on `x` (adding the batch dimension to a 3-d
/// input and removing it from each result).
fn batched<const R: usize>(
    op: &'static str,
    x: &Tensor,
    f: impl FnOnce(&Tensor) -> Result<[Tensor; R]>,
) -> Result<[Tensor; R]> {
    match x.rank() {
        4 => f(x),
        3 => {
            let r = f(&x.unsqueeze(0)?)?;
            let mut out = Vec::with_capacity(R);
            for t in r {
                out.push(t.squeeze_dim(0)?);
            }
            out.try_into()
                .map_err(|_| Error::arg(op, "internal: result count"))
        }
        _ => bail!(Error::arg(
            op,
            format!(
                "expected a [N, C, H, W] or [C, H, W] input, got shape {:?}",
                x.shape()
            )
        )),
    }
}

impl Tensor {
    /// Max pooling over `kernel` windows (PyTorch's `F.max_pool2d`):
    /// `[N, C, H, W]` (or `[C, H, W]`) to `[N, C, OH, OW]`, `OH = (H + 2
    /// padding - dilation (k - 1) - 1) / stride + 1`. NaN wins a window,
    /// as in PyTorch. An `Err` naming `max_pool2d` for a padding over half
    /// the kernel, a kernel larger than the padded input, or a zero size.
    ///
    /// ```
    /// use tensorscope::{DType, Device, PoolOptions, Tensor};
    /// let x = Tensor::arange(0.0, 16.0, 1.0, DType::F32, Device::Cpu)?.reshape(&[1, 1, 4, 4])?;
    /// let (y, idx) = x.max_pool2d_with_indices([2, 2], &PoolOptions::default())?;
    /// assert_eq!(y.to_vec::<f32>()?, [5.0, 7.0, 13.0, 15.0]);
    /// assert_eq!(idx.to_vec::<i64>()?, [5, 7, 13, 15]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn max_pool2d(&self, kernel: [usize; 2], opts: &PoolOptions) -> Result<Tensor> {
        if needs_grad(&[self]) {
            return Ok(self.max_pool2d_with_indices(kernel, opts)?.0);
        }
        // Without a graph no index is needed (nor stored).
        const OP: &str = "max_pool2d";
        let _op = op_context_with(OP, || vec![self.shape().to_vec()]);
        let [y] = batched(OP, self, |x| {
            let g = geometry(OP, x, kernel, opts)?;
            pool_kernel(x, &g, false)
                .map(|(y, _)| [y])
                .map_err(|e| e.reported_as(OP))
        })?;
        Ok(y)
    }

    /// [`max_pool2d`](Tensor::max_pool2d) and, for each output, the flat
    /// index (`row * W + col`) in its input plane of the element chosen
    /// (PyTorch's `return_indices=True`), as i64.
    pub fn max_pool2d_with_indices(
        &self,
        kernel: [usize; 2],
        opts: &PoolOptions,
    ) -> Result<(Tensor, Tensor)> {
        const OP: &str = "max_pool2d";
        let _op = op_context_with(OP, || vec![self.shape().to_vec()]);
        let [y, i] = batched(OP, self, |x| {
            let g = geometry(OP, x, kernel, opts)?;
            max_pool(x, &g).map(|(y, i)| [y, i])
        })?;
        Ok((y, i))
    }

    /// Average pooling over `kernel` windows (PyTorch's `F.avg_pool2d`):
    /// the mean of each window, padding counted as zeros unless
    /// `count_include_pad` is `false`. Dilation must be 1 (PyTorch's
    /// average pooling has none).
    ///
    /// ```
    /// use tensorscope::{DType, Device, PoolOptions, Tensor};
    /// let x = Tensor::arange(0.0, 16.0, 1.0, DType::F32, Device::Cpu)?.reshape(&[1, 4, 4])?;
    /// let y = x.avg_pool2d([2, 2], &PoolOptions::default())?;
    /// assert_eq!(y.to_vec::<f32>()?, [2.5, 4.5, 10.5, 12.5]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn avg_pool2d(&self, kernel: [usize; 2], opts: &PoolOptions) -> Result<Tensor> {
        const OP: &str = "avg_pool2d";
        let _op = op_context_with(OP, || vec![self.shape().to_vec()]);
        if opts.dilation != [1, 1] {
            bail!(Error::arg(
                OP,
                format!("dilation must be [1, 1], got {:?}", opts.dilation)
            ));
        }
        let [y] = batched(OP, self, |x| {
            let g = geometry(OP, x, kernel, opts)?;
            avg_pool(x, &g, opts.count_include_pad).map(|y| [y])
        })?;
        Ok(y)
    }

    /// Average pooling to a fixed output size (PyTorch's
    /// `F.adaptive_avg_pool2d`): output row `i` averages input rows
    /// `floor(i H / OH) .. ceil((i + 1) H / OH)`, and the same for columns.
    ///
    /// ```
    /// use tensorscope::{DType, Device, Tensor};
    /// let x = Tensor::arange(0.0, 15.0, 1.0, DType::F32, Device::Cpu)?.reshape(&[1, 1, 3, 5])?;
    /// let y = x.adaptive_avg_pool2d([1, 1])?;
    /// assert_eq!(y.to_vec::<f32>()?, [7.0]);
    /// assert_eq!(x.adaptive_avg_pool2d([2, 2])?.shape(), &[1, 1, 2, 2]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn adaptive_avg_pool2d(&self, output: [usize; 2]) -> Result<Tensor> {
        const OP: &str = "adaptive_avg_pool2d";
        let _op = op_context_with(OP, || vec![self.shape().to_vec()]);
        let r = self.rank();
        if (r != 3 && r != 4) || !self.dtype().is_float() {
            bail!(Error::arg(
                OP,
                format!(
                    "expected a float [N, C, H, W] or [C, H, W] input, got {} {:?}",
                    self.dtype(),
                    self.shape()
                )
            ));
        }
        let (h, w) = (self.shape()[r - 2], self.shape()[r - 1]);
        if output.contains(&0) || h == 0 || w == 0 {
            bail!(Error::arg(
                OP,
                format!(
                    "the output size {output:?} and the input's plane {:?} must be non-empty",
                    [h, w]
                )
            ));
        }
        // Absurd output sizes fail at the allocation, before any loop.
        let mut out_shape = self.shape().to_vec();
        out_shape[r - 2] = output[0];
        out_shape[r - 1] = output[1];
        drop(
            Tensor::empty(&out_shape, self.dtype(), self.device())
                .map_err(|e| e.reported_as(OP))?,
        );
        // Window `i` of `o` over `len`: `[floor(i len / o), ceil((i + 1) len / o))`,
        // in u128 (no overflow). Each window's mean, per dimension: an inf
        // or NaN stays in the windows that hold it, as in PyTorch.
        let window = |i: usize, len: usize, o: usize| -> (usize, usize) {
            let (i, len, o) = (i as u128, len as u128, o as u128);
            ((i * len / o) as usize, ((i + 1) * len).div_ceil(o) as usize)
        };
        let pass = |t: &Tensor, dim: isize, len: usize, o: usize| -> Result<Tensor> {
            let parts = (0..o)
                .map(|i| {
                    let (a, b) = window(i, len, o);
                    t.narrow(dim, a, b - a)?.mean(&[dim], true)
                })
                .collect::<Result<Vec<_>>>()?;
            let refs: Vec<&Tensor> = parts.iter().collect();
            Tensor::cat(&refs, dim)
        };
        let rows = pass(self, -2, h, output[0]).map_err(|e| e.reported_as(OP))?;
        pass(&rows, -1, w, output[1]).map_err(|e| e.reported_as(OP))
    }
}

/// The window maxima, and with `with_idx` the flat in-plane index of
/// each (`row * W + col`, int64), in one pass of the pooling kernel
/// (`backend::pool_im2col`: PyTorch's rule, the last NaN of a window wins).
fn pool_kernel(x: &Tensor, g: &Pool, with_idx: bool) -> Result<(Tensor, Option<Tensor>)> {
    const OP: &str = "max_pool2d";
    let [n, c, h, w] = g.nchw;
    let x = autograd::no_grad(|| x.contiguous())?;
    let out = [n, c, g.out[0], g.out[1]];
    let y = Tensor::empty(&out, x.dtype(), x.device())?;
    let idx = if with_idx {
        Some(Tensor::empty(&out, DType::I64, x.device())?)
    } else {
        None
    };
    let geom = Windows {
        planes: n * c,
        h,
        w,
        out: g.out,
        kernel: g.k,
        stride: g.s,
        pad: g.p,
        dilation: g.d,
    };
    let io = idx.as_ref().map(Operand::of);
    pool_im2col::max_pool2d(OP, &Operand::of(&x), &Operand::of(&y), io.as_ref(), &geom)?;
    Ok((y, idx))
}

fn max_pool(x: &Tensor, g: &Pool) -> Result<(Tensor, Tensor)> {
    let (vals, idx) = pool_kernel(x, g, true).map_err(|e| e.reported_as("max_pool2d"))?;
    let idx = idx.ok_or_else(|| Error::arg("max_pool2d", "internal: no indices"))?;
    if !needs_grad(&[x]) {
        return Ok((vals, idx));
    }
    const NODE: &str = "MaxPool2DWithIndicesBackward0";
    let saved = Saved::new(&idx, NODE)?;
    let [n, c, h, w] = g.nchw;
    let f: BackwardFn = Box::new(move |dy| {
        let l = (dy.numel() / (n * c).max(1)) as isize;
        let (n, c) = (n as isize, c as isize);
        let mut gx = Tensor::zeros(&[n as usize, c as usize, h * w], dy.dtype(), dy.device())?;
        gx.scatter_add_(
            2,
            &saved.get()?.reshape(&[n, c, l])?,
            &dy.reshape(&[n, c, l])?,
        )?;
        Ok(vec![Some(gx.reshape(&[n, c, h as isize, w as isize])?)])
    });
    Ok((attach(vals, NODE, &[x], f), idx))
}

/// The adjoint of a window view: a `[N, C, Hp, Wp]` buffer of zeros into
/// which `tap(i, j)` (`[N, C, OH, OW]`, the gradient of kernel tap `(i,
/// j)` at every output position) is summed at that tap's positions, one
/// strided add per tap (col2im), then cut to the unpadded `[N, C, H, W]`.
#[allow(clippy::too_many_arguments)]
fn sum_taps(
    like: &Tensor,
    nchw: [usize; 4],
    lo: [usize; 2],
    hi: [usize; 2],
    kernel: [usize; 2],
    stride: [usize; 2],
    dil: [usize; 2],
    out: [usize; 2],
    tap: impl Fn(usize, usize) -> Result<Tensor>,
) -> Result<Tensor> {
    let [n, c, h, w] = nchw;
    let (hp, wp) = (h + lo[0] + hi[0], w + lo[1] + hi[1]);
    let gp = Tensor::zeros(&[n, c, hp, wp], like.dtype(), like.device())?;
    let strides = [c * hp * wp, hp * wp, stride[0] * wp, stride[1]];
    for i in 0..kernel[0] {
        for j in 0..kernel[1] {
            let at = gp.storage_offset() + i * dil[0] * wp + j * dil[1];
            let mut dst = gp.as_strided(&[n, c, out[0], out[1]], &strides, at)?;
            dst.add_(&tap(i, j)?)?;
        }
    }
    if lo == [0, 0] && hi == [0, 0] {
        return Ok(gp);
    }
    gp.narrow(2, lo[0], h)?.narrow(3, lo[1], w)?.contiguous()
}

/// The divisor of each output position: the window within the padded
/// input (the whole window, except a `ceil_mode` window reaching past the
/// padding), or the input elements in it.
fn divisors(g: &Pool, include_pad: bool, dtype: DType, like: &Tensor) -> Result<Tensor> {
    let [_, _, h, w] = g.nchw;
    let mut d = Vec::with_capacity(g.out[0] * g.out[1]);
    for oh in 0..g.out[0] {
        for ow in 0..g.out[1] {
            // The window's rows (columns) within [lo, hi) of the input's.
            let inside = |o: usize, i: usize, lo: i64, hi: i64| {
                let a = (o * g.s[i]) as i64 - g.p[i] as i64;
                let b = a + g.k[i] as i64;
                (b.min(hi) - a.max(lo)).max(0)
            };
            let n = if include_pad {
                let (ph, pw) = (g.p[0] as i64, g.p[1] as i64);
                inside(oh, 0, -ph, h as i64 + ph) * inside(ow, 1, -pw, w as i64 + pw)
            } else {
                inside(oh, 0, 0, h as i64) * inside(ow, 1, 0, w as i64)
            };
            d.push(n as f64);
        }
    }
    Tensor::from_vec(d, &[g.out[0], g.out[1]], crate::device::Device::Cpu)?
        .to_dtype(dtype)?
        .to_device(like.device())
}

fn avg_pool(x: &Tensor, g: &Pool, include_pad: bool) -> Result<Tensor> {
    const OP: &str = "avg_pool2d";
    let div = divisors(g, include_pad, x.dtype(), x).map_err(|e| e.reported_as(OP))?;
    let y = autograd::no_grad(|| -> Result<Tensor> {
        let win = windows(x, g, 0.0)?;
        win.sum(&[-1], false)?.div(&div)
    })
    .map_err(|e| e.reported_as(OP))?;
    if !needs_grad(&[x]) {
        return Ok(y);
    }
    let g = *g;
    let f: BackwardFn = Box::new(move |dy| {
        let scaled = dy.div(&div)?;
        let gx = sum_taps(dy, g.nchw, g.p, g.p_hi, g.k, g.s, g.d, g.out, |_, _| {
            Ok(scaled.alias())
        })?;
        Ok(vec![Some(gx)])
    });
    Ok(attach(y, "AvgPool2DBackward0", &[x], f))
}
