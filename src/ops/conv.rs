//! Convolutions: `conv1d`, `conv2d` and `conv_transpose2d` (PyTorch's
//! `F.conv1d` / `F.conv2d` / `F.conv_transpose2d`) with stride, zero
//! padding (explicit, `same` or `valid`), dilation and groups, forward and
//! backward on every device.
//!
//! How: Winograd's F(2x2, 3x3) for the stride-1 3x3 convolutions of f32
//! CPU tensors with at least 32 channels in and out and outputs at least 16
//! wide (`conv/winograd.rs`);
//! everywhere else im2col plus a matrix product. The im2col kernel
//! (`backend::pool_im2col::im2col`, on both devices) lays out the input's
//! patches, zeros where a tap lands in the padding, as the columns
//! `[groups, C/groups * kh * kw, N * OH * OW]`; the
//! weight `[groups, O/groups, C/groups * kh * kw]` times them is the output
//! (one product per group: the CPU's gemm, cuBLAS on CUDA), permuted into
//! `[N, O, OH, OW]`. The columns are workspace from the caching allocator,
//! freed before the op returns.
//!
//! The autograd node (`ConvolutionBackward0`) saves the input and the
//! weight, not the columns: the backward pass rebuilds them for the
//! weight's gradient (as PyTorch's does) and sums the columns' gradient
//! back into the input's shape with the col2im kernel
//! (`backend::pool_im2col::col2im`, on both devices), so no graph holds a
//! `kh * kw` times larger buffer between the passes.
//!
//! `conv_transpose2d` is the adjoint of `conv2d` in its input: its forward
//! pass is `conv2d`'s input gradient, and its backward pass is `conv2d`'s
//! forward (for the input) and `conv2d`'s weight gradient with input and
//! output swapped, over the geometry of that `conv2d`.

use crate::alloc::history::op_context_with;
use crate::autograd::{self, attach, needs_grad, BackwardFn, Saved};
use crate::backend::pool_im2col::{self, Windows};
use crate::backend::Operand;
use crate::error::{bail, Error, Result};
use crate::layout::checked_mul;
use crate::tensor::Tensor;

mod winograd;

/// The zero padding of a convolution (PyTorch's `padding=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Padding<const D: usize> {
    /// The same padding on both sides of each spatial dimension.
    Explicit([usize; D]),
    /// No padding (`padding="valid"`).
    Valid,
    /// The output has the input's size (`padding="same"`; stride 1 only):
    /// `dilation * (kernel - 1)` zeros per dimension, the odd one on the
    /// high side, as PyTorch places them.
    Same,
}

/// The options of [`Tensor::conv2d`] and [`Tensor::conv1d`] (PyTorch's
/// keyword arguments, one entry per spatial dimension).
///
/// ```
/// use tensorscope::{ConvOptions, Padding};
/// let opts = ConvOptions { stride: [2, 2], padding: Padding::Explicit([1, 1]), ..ConvOptions::default() };
/// assert_eq!((opts.dilation, opts.groups), ([1, 1], 1));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvOptions<const D: usize> {
    /// The step between patches (each at least 1).
    pub stride: [usize; D],
    /// The zeros added around the input.
    pub padding: Padding<D>,
    /// The spacing of the kernel's taps (each at least 1).
    pub dilation: [usize; D],
    /// Input and output channels split into this many independent groups.
    pub groups: usize,
}

impl<const D: usize> Default for ConvOptions<D> {
    /// Stride 1, no padding, dilation 1, one group (PyTorch's defaults).
    fn default() -> Self {
        ConvOptions {
            stride: [1; D],
            padding: Padding::Explicit([0; D]),
            dilation: [1; D],
            groups: 1,
        }
    }
}

/// A 2-d convolution's geometry, checked.
#[derive(Clone, Copy, Debug)]
struct Geometry {
    n: usize,
    c: usize,
    h: usize,
    w: usize,
    o: usize,
    g: usize,
    kh: usize,
    kw: usize,
    stride: [usize; 2],
    dil: [usize; 2],
    /// Zeros before and after, per dimension.
    lo: [usize; 2],
    hi: [usize; 2],
    oh: usize,
    ow: usize,
}

impl Geometry {
    /// Rows of one group's columns: `C/g * kh * kw`.
    fn k(&self) -> usize {
        self.c / self.g * self.kh * self.kw
    }
    fn l(&self) -> usize {
        self.oh * self.ow
    }
}

/// A float input, a weight of its dtype, both on one device.
fn check_input_and_weight(op: &'static str, x: &Tensor, w: &Tensor) -> Result<()> {
    if !x.dtype().is_float() {
        bail!(Error::dtype(op, "a float dtype", x.dtype()));
    }
    if w.dtype() != x.dtype() {
        bail!(Error::dtype(
            op,
            format!("{} for the weight, like the input", x.dtype()),
            w.dtype()
        ));
    }
    x.same_device(op, w)
}

/// A bias, if given, of shape `[channels]` (the output channels), of the
/// input's dtype and device; `ws` is the weight's shape for the message.
fn check_bias(
    op: &'static str,
    x: &Tensor,
    b: Option<&Tensor>,
    channels: usize,
    ws: &[usize],
) -> Result<()> {
    let Some(b) = b else {
        return Ok(());
    };
    if b.shape() != [channels] {
        bail!(Error::shape(
            op,
            b.shape(),
            ws,
            format!("the bias must have shape [{channels}] (the output channels)")
        ));
    }
    if b.dtype() != x.dtype() {
        bail!(Error::dtype(
            op,
            format!("{} for the bias, like the input", x.dtype()),
            b.dtype()
        ));
    }
    x.same_device(op, b)
}

/// Checks a batched 2-d convolution's operands (`x` `[N, C, H, W]`, `w`
/// `[O, C/groups, kh, kw]`, `b` `[O]`) and works out its geometry. `op`
/// and `shown` are the public op and the shapes it was called with (a
/// `conv1d` reports its own 3-d shapes).
fn geometry(
    op: &'static str,
    shown: (&[usize], &[usize]),
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    o: &ConvOptions<2>,
) -> Result<Geometry> {
    let (xs, ws) = (x.shape(), w.shape());
    let dims = shown.1.len() - 2; // spatial dimensions of the public op
    check_input_and_weight(op, x, w)?;
    if o.groups == 0 {
        bail!(Error::arg(op, "groups must be at least 1"));
    }
    if o.stride.contains(&0) || o.dilation.contains(&0) {
        bail!(Error::arg(
            op,
            format!(
                "stride {:?} and dilation {:?} must be at least 1",
                &o.stride[2 - dims..],
                &o.dilation[2 - dims..]
            )
        ));
    }
    let (n, c, h, wd) = (xs[0], xs[1], xs[2], xs[3]);
    let (oc, cg, kh, kw) = (ws[0], ws[1], ws[2], ws[3]);
    if !oc.is_multiple_of(o.groups) || cg * o.groups != c {
        bail!(Error::shape(
            op,
            shown.0,
            shown.1,
            format!(
                "with groups = {}, the input's channels ({c}) and the weight's output channels ({oc}) must divide \
                 by groups, and the weight's dim 1 ({cg}) must be channels / groups",
                o.groups
            )
        ));
    }
    if oc == 0 || kh == 0 || kw == 0 {
        bail!(Error::shape(
            op,
            shown.0,
            shown.1,
            "the weight must have output channels and a kernel of at least one tap"
        ));
    }
    check_bias(op, x, b, oc, shown.1)?;
    // Checked: a dilation or padding near usize::MAX is an Err, not a wrap.
    let too_big = || {
        Error::arg(
            op,
            format!(
                "the padded input or the dilated kernel is too large (padding {:?}, dilation {:?})",
                o.padding,
                &o.dilation[2 - dims..]
            ),
        )
    };
    let span = |k: usize, d: usize| d.checked_mul(k - 1).and_then(|v| v.checked_add(1));
    let (lo, hi) = match o.padding {
        Padding::Explicit(p) => (p, p),
        Padding::Valid => ([0; 2], [0; 2]),
        Padding::Same => {
            if o.stride != [1, 1] {
                bail!(Error::arg(
                    op,
                    format!(
                        "padding Same needs stride 1, got stride {:?} (PyTorch refuses it too)",
                        &o.stride[2 - dims..]
                    )
                ));
            }
            let t = [
                o.dilation[0].checked_mul(kh - 1).ok_or_else(too_big)?,
                o.dilation[1].checked_mul(kw - 1).ok_or_else(too_big)?,
            ];
            ([t[0] / 2, t[1] / 2], [t[0] - t[0] / 2, t[1] - t[1] / 2])
        }
    };
    let sum = |a: usize, b: usize, c: usize| a.checked_add(b).and_then(|v| v.checked_add(c));
    let hp = sum(h, lo[0], hi[0]).ok_or_else(too_big)?;
    let wp = sum(wd, lo[1], hi[1]).ok_or_else(too_big)?;
    let sh = span(kh, o.dilation[0]).ok_or_else(too_big)?;
    let sw = span(kw, o.dilation[1]).ok_or_else(too_big)?;
    if hp < sh || wp < sw {
        bail!(Error::shape(
            op,
            shown.0,
            shown.1,
            format!(
                "the padded input ({:?}) is smaller than the dilated kernel ({:?})",
                &[hp, wp][2 - dims..],
                &[sh, sw][2 - dims..]
            )
        ));
    }
    Ok(Geometry {
        n,
        c,
        h,
        w: wd,
        o: oc,
        g: o.groups,
        kh,
        kw,
        stride: o.stride,
        dil: o.dilation,
        lo,
        hi,
        oh: (hp - sh) / o.stride[0] + 1,
        ow: (wp - sw) / o.stride[1] + 1,
    })
}

/// `x` `[N, C, H, W]` with `lo` / `hi` elements of `value` before and after
/// its last two dimensions, contiguous (`x` itself, made contiguous, when
/// there are none). The pooling ops pad with it (convolutions lay out
/// their columns with the im2col kernel instead).
pub(super) fn pad2d(x: &Tensor, lo: [usize; 2], hi: [usize; 2], value: f64) -> Result<Tensor> {
    if lo == [0, 0] && hi == [0, 0] {
        return x.contiguous();
    }
    let s = x.shape();
    let (h, w) = (s[2], s[3]);
    let p = Tensor::full(
        &[s[0], s[1], h + lo[0] + hi[0], w + lo[1] + hi[1]],
        value,
        x.dtype(),
        x.device(),
    )?;
    p.narrow(2, lo[0], h)?.narrow(3, lo[1], w)?.copy_(x)?;
    Ok(p)
}

/// Row length, in elements, at which [`workspace`] lays out a matrix whose
/// rows are `len` elements of `esize` bytes: `len` itself, or 64 bytes more
/// when the rows would lie a multiple of 1 KiB apart (at least 4 KiB).
///
/// gemm reads the columns (and `dy`'s matrix) in place, one column of its
/// transposed frame per step of `k`; rows a power-of-two number of bytes
/// apart then fall into the same few L1/L2 sets and evict each other: the
/// bench's ResNet-stage product ran twice as long with rows 32 KiB apart as
/// with rows 64 bytes further apart (Note [conv workspace rows] in
/// `bench/results/ops-why.md`).
fn padded_row(len: usize, esize: usize) -> usize {
    let bytes = len.saturating_mul(esize);
    if bytes >= 4096 && bytes.is_multiple_of(1024) {
        len + 64 / esize.max(1)
    } else {
        len
    }
}

/// An uninitialised `[g, rows, cols]` operand for a product whose rows
/// need padding, each row [`padded_row`] elements after the previous one
/// (a view of a slightly larger buffer from the caching allocator, freed
/// with it), and that row stride; `None` when rows of `cols` elements need
/// none (the caller keeps its usual layout).
fn workspace(g: usize, rows: usize, cols: usize, like: &Tensor) -> Result<Option<(Tensor, usize)>> {
    let rs = padded_row(cols, like.dtype().size_in_bytes());
    if rs == cols {
        return Ok(None);
    }
    let buf = Tensor::empty(&[g, rows, rs], like.dtype(), like.device())?;
    Ok(Some((buf.narrow(2, 0, cols)?, rs)))
}

/// The columns of `x`, `[G, K, N L]`: for each group, its `C/G kh kw`
/// taps (rows) at every output position of every sample (columns), the
/// rows [`padded_row`] apart, laid out by the im2col kernel
/// (`backend::pool_im2col::im2col`) straight from `x`: no padded copy of the
/// input. (A copy of a 7-d strided view of a padded copy moves runs of only
/// `OW` elements: Note [CNN window kernels] in `bench/results/ops-why.md`.) A
/// pointwise convolution of one sample whose rows need no padding needs no
/// columns: they are `x` itself.
fn columns(x: &Tensor, g: &Geometry) -> Result<Tensor> {
    // An input of zero height may have any batch size: the columns'
    // size is then checked here (`empty` checks the product of the rest).
    let l = checked_mul("conv2d", g.oh, g.ow, "the output's size")?;
    let nl = checked_mul("conv2d", g.n, l, "the columns' length")?;
    let x = x.contiguous()?;
    let rs = padded_row(nl, x.dtype().size_in_bytes());
    let pointwise = (g.kh, g.kw) == (1, 1)
        && g.stride == [1, 1]
        && g.lo == [0, 0]
        && g.hi == [0, 0]
        && g.n == 1
        && rs == nl;
    if pointwise {
        return x.reshape(&[g.g as isize, g.k() as isize, nl as isize]);
    }
    let rows = g.g * g.k();
    let cols = Tensor::empty(&[rows, rs], x.dtype(), x.device())?.narrow(1, 0, nl)?;
    let win = windows_of(g);
    pool_im2col::im2col("conv2d", &Operand::of(&x), &Operand::of(&cols), g.n, &win)?;
    cols.as_strided(
        &[g.g, g.k(), nl],
        &[g.k() * rs, rs, 1],
        cols.storage_offset(),
    )
}

/// The geometry as the window kernels' (`backend::pool_im2col`) over the
/// input's `N C` planes.
fn windows_of(g: &Geometry) -> Windows {
    Windows {
        planes: g.n * g.c,
        h: g.h,
        w: g.w,
        out: [g.oh, g.ow],
        kernel: [g.kh, g.kw],
        stride: g.stride,
        pad: g.lo,
        dilation: g.dil,
    }
}

/// `dy` `[N, O, OH, OW]` as the products' `[G, O/G, N L]` operand: a copy
/// with its rows [`padded_row`] apart when they need it, else a view for
/// one sample or one copy.
fn dy_matrix(dy: &Tensor, g: &Geometry) -> Result<Tensor> {
    let og = g.o / g.g;
    let nl = g.n * g.l();
    let grouped = dy.reshape(&[g.n as isize, g.g as isize, og as isize, g.l() as isize])?;
    let Some((m, rs)) = workspace(g.g, og, nl, dy)? else {
        // No padding needed: a view for one sample, else one copy.
        return grouped
            .permute(&[1, 2, 0, 3])?
            .reshape(&[g.g as isize, og as isize, nl as isize]);
    };
    m.as_strided(
        &[g.n, g.g, og, g.l()],
        &[g.l(), og * rs, rs, 1],
        m.storage_offset(),
    )?
    .copy_(&grouped)?;
    Ok(m)
}

/// The forward pass, without autograd: `[N, O, OH, OW]`.
fn forward(x: &Tensor, w: &Tensor, b: Option<&Tensor>, g: &Geometry) -> Result<Tensor> {
    if winograd::applies(g, x) {
        return winograd::forward(x, w, b, g);
    }
    // One product per group over every sample's columns at once
    // (`[O/G, K] x [K, N L]`) rather than N narrow ones: no slower on the
    // CPU (bench/results/models.md), and one wide call suits cuBLAS; the
    // output is then permuted into place.
    let cols = columns(x, g)?; // [G, K, N L]
    let og = (g.o / g.g) as isize;
    let wm = w.reshape(&[g.g as isize, og, g.k() as isize])?;
    let prod = wm.matmul(&cols)?; // [G, O/G, N L]
    drop(cols);
    let out = prod
        .reshape(&[g.g as isize, og, g.n as isize, g.l() as isize])?
        .permute(&[2, 0, 1, 3])?
        .contiguous()?; // [N, G, O/G, L]
    drop(prod);
    if let Some(b) = b {
        let mut out3 = out.reshape(&[g.n as isize, g.o as isize, g.l() as isize])?;
        out3.add_(&b.reshape(&[1, g.o as isize, 1])?)?;
    }
    out.reshape(&[g.n as isize, g.o as isize, g.oh as isize, g.ow as isize])
}

/// The input's gradient: the columns' gradient `W^T dy` (one product per
/// group over every sample, as the forward pass), summed into the input's
/// shape by the col2im kernel (`backend::pool_im2col::col2im`: each input
/// element adds up its taps once; no padded buffer), not `kh kw` strided adds
/// into a padded buffer and a copy out of it: where those ran, the profiler
/// found a third of the CNN training step outside any recorded op
/// (Note [CNN window kernels] in `bench/results/ops-why.md`).
fn input_grad(dy: &Tensor, w: &Tensor, g: &Geometry) -> Result<Tensor> {
    if winograd::applies(g, dy) {
        return winograd::input_grad(dy, w, g);
    }
    let og = (g.o / g.g) as isize;
    let wm = w.reshape(&[g.g as isize, og, g.k() as isize])?;
    let dyt = dy_matrix(dy, g)?;

    // [G, K, N L] = [C, kh, kw, N, OH, OW]: G and Cg merge (G's stride is
    // Cg's times Cg).
    let dcols = wm.transpose(1, 2)?.matmul(&dyt)?.contiguous()?;
    drop(dyt);
    let dx = Tensor::empty(&[g.n, g.c, g.h, g.w], dy.dtype(), dy.device())?;
    pool_im2col::col2im(
        "conv2d",
        &Operand::of(&dcols),
        &Operand::of(&dx),
        g.n,
        &windows_of(g),
    )?;
    Ok(dx)
}

/// `dy` `[N, O, OH, OW]` as the `[G, N L, O/G]` operand of the weight
/// gradient's product on the CPU: one copy, each sample's `[O/G, L]`
/// block transposed.
fn dy_rows(dy: &Tensor, g: &Geometry) -> Result<Tensor> {
    let og = (g.o / g.g) as isize;
    dy.reshape(&[g.n as isize, g.g as isize, og, g.l() as isize])?
        .permute(&[1, 0, 3, 2])?
        .contiguous()?
        .reshape(&[g.g as isize, (g.n * g.l()) as isize, og])
}

/// The weight's gradient `[O, C/G, kh, kw]`: `dy` times the columns.
///
/// On the CPU it is computed transposed, `cols [K, N L] x dy^T [N L,
/// O/G]`, with `dy^T` copied row-major ([`dy_rows`]): both operands then
/// have unit column stride, which gemm reads without packing either
/// transposed. The direct `dy [O/G, N L] x cols^T` has a column-major right
/// operand, which took more than twice as long for the CNN example's second
/// convolution (Note [conv weight gradient] in `bench/results/ops-why.md`).
/// CUDA keeps the direct form: cuBLAS takes either layout without a copy.
fn weight_grad(dy: &Tensor, x: &Tensor, g: &Geometry, wshape: &[usize]) -> Result<Tensor> {
    if winograd::applies(g, x) {
        return winograd::weight_grad(dy, x, g);
    }
    let shape: Vec<isize> = wshape.iter().map(|&d| d as isize).collect();
    let cols = columns(x, g)?; // [G, K, N L]
    if dy.device().is_cpu() {
        let dyt = dy_rows(dy, g)?; // [G, N L, O/G]
        let gwt = cols.matmul(&dyt)?; // [G, K, O/G]
        drop((cols, dyt));
        return gwt.transpose(1, 2)?.contiguous()?.reshape(&shape);
    }
    let dyt = dy_matrix(dy, g)?;
    let gw = dyt.matmul(&cols.transpose(1, 2)?)?; // [G, O/G, K]
    gw.reshape(&shape)
}

/// A 2-d convolution of the batched `x` `[N, C, H, W]`; `op`/`shown` name
/// the public op and its shapes for errors.
fn conv2d_impl(
    op: &'static str,
    shown: (&[usize], &[usize]),
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    opts: &ConvOptions<2>,
) -> Result<Tensor> {
    let geo = geometry(op, shown, x, w, b, opts)?;
    let out = autograd::no_grad(|| forward(x, w, b, &geo)).map_err(|e| e.reported_as(op))?;
    attach_conv(out, x, w, b, geo, conv2d_grads)
}

/// A convolution's input and weight gradients from the output's gradient
/// `dy`: the input's when the saved weight is given, the weight's when
/// the saved input is (with the geometry and the weight's shape).
type Grads = fn(
    &Tensor,
    Option<&Tensor>,
    Option<&Tensor>,
    &Geometry,
    &[usize],
) -> Result<(Option<Tensor>, Option<Tensor>)>;

/// [`Grads`] of `conv2d`: Winograd's share one transform of `dy` per
/// chunk of samples between the two gradients.
fn conv2d_grads(
    dy: &Tensor,
    x: Option<&Tensor>,
    w: Option<&Tensor>,
    g: &Geometry,
    wshape: &[usize],
) -> Result<(Option<Tensor>, Option<Tensor>)> {
    if winograd::applies(g, dy) {
        return winograd::grads(dy, x, w, g);
    }
    let gx = w.map(|w| input_grad(dy, w, g)).transpose()?;
    let gw = x.map(|x| weight_grad(dy, x, g, wshape)).transpose()?;
    Ok((gx, gw))
}

/// Gives a convolution's output its node (`ConvolutionBackward0`, PyTorch's
/// name for every convolution) when an operand requires grad: it saves the
/// input `x` only if the weight needs a gradient and the weight only if the
/// input does, and computes `(dx, dw) = grads(dy, x, w, shape)` and the
/// bias's `dy` summed over all but the channels.
fn attach_conv(
    out: Tensor,
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    geo: Geometry,
    grads: Grads,
) -> Result<Tensor> {
    let mut inputs = vec![x, w];
    inputs.extend(b);
    if !needs_grad(&inputs) {
        return Ok(out);
    }
    const NODE: &str = "ConvolutionBackward0";
    let kx = if w.requires_grad() {
        Some(Saved::new(x, NODE)?)
    } else {
        None
    };
    let kw = if x.requires_grad() {
        Some(Saved::new(w, NODE)?)
    } else {
        None
    };
    let rb = b.map(|b| b.requires_grad());
    let wshape = w.shape().to_vec();
    let f: BackwardFn = Box::new(move |dy| {
        let x = kx.as_ref().map(Saved::get).transpose()?;
        let w = kw.as_ref().map(Saved::get).transpose()?;
        let (gx, gw) = grads(dy, x, w, &geo, &wshape)?;
        let mut v = vec![gx, gw];
        if let Some(rb) = rb {
            v.push(if rb {
                Some(dy.sum(&[0, 2, 3], false)?)
            } else {
                None
            });
        }
        Ok(v)
    });
    Ok(attach(out, NODE, &inputs, f))
}

impl Tensor {
    /// A 2-d convolution (PyTorch's `F.conv2d`, a cross-correlation): `self`
    /// `[N, C, H, W]` (or unbatched `[C, H, W]`), `weight`
    /// `[O, C / groups, kh, kw]`, `bias` `[O]`; the result is
    /// `[N, O, OH, OW]` with `OH = (H + pads - dilation (kh - 1) - 1) /
    /// stride + 1`. Float dtypes; all operands of one dtype and device.
    /// An `Err` naming `conv2d` and the shapes for channels that do not
    /// match the groups, a kernel larger than the padded input, a zero
    /// stride or dilation, or padding `Same` with a stride.
    ///
    /// ```
    /// use tensorscope::{ConvOptions, DType, Device, Padding, Tensor};
    /// let x = Tensor::ones(&[1, 2, 5, 5], DType::F32, Device::Cpu)?;
    /// let w = Tensor::ones(&[4, 2, 3, 3], DType::F32, Device::Cpu)?;
    /// let same = ConvOptions { padding: Padding::Same, ..ConvOptions::default() };
    /// let y = x.conv2d(&w, None, &same)?;
    /// assert_eq!(y.shape(), &[1, 4, 5, 5]);
    /// // Centre: 2 channels x 9 taps of ones; corner: 2 x 4.
    /// let v = y.to_vec::<f32>()?;
    /// assert_eq!((v[2 * 5 + 2], v[0]), (18.0, 8.0));
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn conv2d(
        &self,
        weight: &Tensor,
        bias: Option<&Tensor>,
        opts: &ConvOptions<2>,
    ) -> Result<Tensor> {
        if let Some(c) =
            crate::autocast::cast(&crate::autocast::CONV2D, &[Some(self), Some(weight), bias])?
        {
            return c.get(0).conv2d(c.get(1), c.opt(2), opts);
        }
        const OP: &str = "conv2d";
        let _op = op_context_with(OP, || vec![self.shape().to_vec(), weight.shape().to_vec()]);
        check_ranks(OP, self, weight, 4)?;
        if self.rank() == 3 {
            let y = conv2d_impl(
                OP,
                (self.shape(), weight.shape()),
                &self.unsqueeze(0)?,
                weight,
                bias,
                opts,
            )?;
            return y.squeeze_dim(0);
        }
        conv2d_impl(OP, (self.shape(), weight.shape()), self, weight, bias, opts)
    }

    /// A 1-d convolution (PyTorch's `F.conv1d`): `self` `[N, C, L]` (or
    /// `[C, L]`), `weight` `[O, C / groups, k]`, `bias` `[O]`; the result
    /// is `[N, O, OL]`. Computed as a [`conv2d`](Tensor::conv2d) of height
    /// 1, with its errors (naming `conv1d`).
    ///
    /// ```
    /// use tensorscope::{ConvOptions, DType, Device, Tensor};
    /// let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[1, 1, 4], Device::Cpu)?;
    /// let w = Tensor::from_slice(&[1.0f32, -1.0], &[1, 1, 2], Device::Cpu)?;
    /// let y = x.conv1d(&w, None, &ConvOptions::default())?;
    /// assert_eq!(y.to_vec::<f32>()?, [-1.0, -1.0, -1.0]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn conv1d(
        &self,
        weight: &Tensor,
        bias: Option<&Tensor>,
        opts: &ConvOptions<1>,
    ) -> Result<Tensor> {
        if let Some(c) =
            crate::autocast::cast(&crate::autocast::CONV1D, &[Some(self), Some(weight), bias])?
        {
            return c.get(0).conv1d(c.get(1), c.opt(2), opts);
        }
        const OP: &str = "conv1d";
        let _op = op_context_with(OP, || vec![self.shape().to_vec(), weight.shape().to_vec()]);
        check_ranks(OP, self, weight, 3)?;
        let two = ConvOptions::<2> {
            stride: [1, opts.stride[0]],
            padding: match opts.padding {
                Padding::Explicit([p]) => Padding::Explicit([0, p]),
                Padding::Valid => Padding::Valid,
                Padding::Same => Padding::Same,
            },
            dilation: [1, opts.dilation[0]],
            groups: opts.groups,
        };
        let batched = if self.rank() == 2 {
            self.unsqueeze(0)?
        } else {
            self.alias()
        };
        let y = conv2d_impl(
            OP,
            (self.shape(), weight.shape()),
            &batched.unsqueeze(2)?,
            &weight.unsqueeze(2)?,
            bias,
            &two,
        )?
        .squeeze_dim(2)?;
        if self.rank() == 2 {
            y.squeeze_dim(0)
        } else {
            Ok(y)
        }
    }
}

/// The geometry of a transposed convolution `x` `[N, Cin, H, W]`, `w`
/// `[Cin, Cout / groups, kh, kw]`: that of the `conv2d` it is the adjoint
/// of (input `[N, Cout, Ho, Wo]`, weight `[Cin, Cout / groups, ..]`,
/// output `[N, Cin, H, W]`).
fn transposed_geometry(
    op: &'static str,
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    o: &ConvTransposeOptions,
) -> Result<Geometry> {
    let (xs, ws) = (x.shape(), w.shape());
    check_input_and_weight(op, x, w)?;
    let g = o.groups;
    if g == 0 || o.stride.contains(&0) || o.dilation.contains(&0) {
        bail!(Error::arg(
            op,
            format!(
                "groups ({g}), stride {:?} and dilation {:?} must be at least 1",
                o.stride, o.dilation
            )
        ));
    }
    let (n, cin, h, wd) = (xs[0], xs[1], xs[2], xs[3]);
    let (wcin, cog, kh, kw) = (ws[0], ws[1], ws[2], ws[3]);
    if wcin != cin || !cin.is_multiple_of(g) || cog == 0 || kh == 0 || kw == 0 {
        bail!(Error::shape(
            op,
            xs,
            ws,
            format!(
                "the weight must be [in_channels, out_channels / groups, kh, kw] with in_channels = the \
                 input's channels ({cin}), divisible by groups ({g})"
            )
        ));
    }
    for i in 0..2 {
        if o.output_padding[i] >= o.stride[i].max(o.dilation[i]) {
            bail!(Error::arg(
                op,
                format!(
                    "output_padding {:?} must be smaller than the stride {:?} or the dilation {:?}",
                    o.output_padding, o.stride, o.dilation
                )
            ));
        }
    }
    let cout = cog * g;
    check_bias(op, x, b, cout, ws)?;
    let k = [kh, kw];
    let mut out = [0usize; 2];
    for i in 0..2 {
        // Checked, and an empty input first: `H - 1` must not wrap.
        let full = xs[2 + i].checked_sub(1).and_then(|h1| {
            h1.checked_mul(o.stride[i])?
                .checked_add(o.dilation[i].checked_mul(k[i] - 1)?)?
                .checked_add(o.output_padding[i])?
                .checked_add(1)
        });
        let full = full.unwrap_or(0);
        if full <= o.padding[i].saturating_mul(2) {
            bail!(Error::shape(
                op,
                xs,
                ws,
                format!(
                    "padding {:?} leaves no output (the output would be {full} before the padding is cut, \
                     or the sizes overflow)",
                    o.padding
                )
            ));
        }
        out[i] = full - 2 * o.padding[i];
    }
    Ok(Geometry {
        n,
        c: cout,
        h: out[0],
        w: out[1],
        o: cin,
        g,
        kh,
        kw,
        stride: o.stride,
        dil: o.dilation,
        lo: o.padding,
        hi: o.padding,
        oh: h,
        ow: wd,
    })
}

/// The options of [`Tensor::conv_transpose2d`] (PyTorch's keyword
/// arguments).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvTransposeOptions {
    /// The stride of the convolution this is the adjoint of.
    pub stride: [usize; 2],
    /// The padding cut from each side of the full output.
    pub padding: [usize; 2],
    /// Extra rows and columns added at the bottom and right (smaller than
    /// the stride or the dilation), to choose among the input sizes a
    /// strided convolution maps to the same output size.
    pub output_padding: [usize; 2],
    /// Channels split into this many independent groups.
    pub groups: usize,
    /// The spacing of the kernel's taps.
    pub dilation: [usize; 2],
}

impl Default for ConvTransposeOptions {
    fn default() -> Self {
        ConvTransposeOptions {
            stride: [1, 1],
            padding: [0, 0],
            output_padding: [0, 0],
            groups: 1,
            dilation: [1, 1],
        }
    }
}

impl Tensor {
    /// A transposed 2-d convolution (PyTorch's `F.conv_transpose2d`, the
    /// gradient of `conv2d` with respect to its input): `self` `[N, Cin, H,
    /// W]` (or `[Cin, H, W]`), `weight` `[Cin, Cout / groups, kh, kw]`,
    /// `bias` `[Cout]`; the result is `[N, Cout, Ho, Wo]`, `Ho = (H - 1)
    /// stride - 2 padding + dilation (kh - 1) + output_padding + 1`.
    ///
    /// ```
    /// use tensorscope::{ConvTransposeOptions, DType, Device, Tensor};
    /// let x = Tensor::ones(&[1, 1, 2, 2], DType::F32, Device::Cpu)?;
    /// let w = Tensor::ones(&[1, 1, 2, 2], DType::F32, Device::Cpu)?;
    /// let up = ConvTransposeOptions { stride: [2, 2], ..ConvTransposeOptions::default() };
    /// let y = x.conv_transpose2d(&w, None, &up)?; // each input spreads over a 2x2 block
    /// assert_eq!(y.shape(), &[1, 1, 4, 4]);
    /// assert_eq!(y.to_vec::<f32>()?, [1.0; 16]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn conv_transpose2d(
        &self,
        weight: &Tensor,
        bias: Option<&Tensor>,
        opts: &ConvTransposeOptions,
    ) -> Result<Tensor> {
        if let Some(c) = crate::autocast::cast(
            &crate::autocast::CONV_TRANSPOSE2D,
            &[Some(self), Some(weight), bias],
        )? {
            return c.get(0).conv_transpose2d(c.get(1), c.opt(2), opts);
        }
        const OP: &str = "conv_transpose2d";
        let _op = op_context_with(OP, || vec![self.shape().to_vec(), weight.shape().to_vec()]);
        check_ranks(OP, self, weight, 4)?;
        if self.rank() == 3 {
            return self
                .unsqueeze(0)?
                .conv_transpose2d(weight, bias, opts)?
                .squeeze_dim(0);
        }
        let geo = transposed_geometry(OP, self, weight, bias, opts)?;
        let out = autograd::no_grad(|| -> Result<Tensor> {
            let mut y = input_grad(self, weight, &geo)?;
            if let Some(b) = bias {
                y.add_(&b.reshape(&[1, geo.c as isize, 1, 1])?)?;
            }
            Ok(y)
        })
        .map_err(|e| e.reported_as(OP))?;
        // The adjoint of the adjoint: the input's gradient is conv2d of
        // the output's; the weight's is conv2d's weight gradient with its
        // input and output swapped.
        attach_conv(out, self, weight, bias, geo, |dy, x, w, g, ws| {
            let gx = w.map(|w| forward(dy, w, None, g)).transpose()?;
            let gw = x.map(|x| weight_grad(x, dy, g, ws)).transpose()?;
            Ok((gx, gw))
        })
    }
}

/// The input must be batched (`rank`) or unbatched (`rank - 1`), the
/// weight `rank`.
fn check_ranks(op: &'static str, x: &Tensor, w: &Tensor, rank: usize) -> Result<()> {
    if w.rank() != rank || (x.rank() != rank && x.rank() != rank - 1) {
        bail!(Error::shape(
            op,
            x.shape(),
            w.shape(),
            format!(
                "expected an input of rank {} or {} and a weight of rank {rank} \
                 ([out_channels, in_channels / groups, kernel...])",
                rank - 1,
                rank
            )
        ));
    }
    Ok(())
}
