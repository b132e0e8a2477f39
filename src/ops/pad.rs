//! Padding (PyTorch's `torch.nn.functional.pad`): a constant border, or
//! one made of the input's own elements (reflect, replicate, circular).
//!
//! Each padded dimension is one op: a constant border is a
//! [`cat`](Tensor::cat) with blocks of the value (a negative pad narrows
//! instead), the other modes an [`index_select`](Tensor::index_select) of
//! source positions computed on the host. Both run on every device, and
//! their backward (cat's slices, index_select's scatter-add, which sums
//! the gradient of a reflected or repeated element into its source) is
//! autograd's.

use crate::error::{bail, Error, Result};
use crate::tensor::Tensor;

const OP: &str = "pad";

/// How [`Tensor::pad`] fills the border (PyTorch's `mode`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PadMode {
    /// The value given (PyTorch's `"constant"`); pads may be negative,
    /// which removes elements.
    Constant(f64),
    /// Mirrored about the edge element, which is not repeated
    /// (`[a, b, c]` padded by 2 on the left: `c b a b c`); a pad must be
    /// smaller than the dimension.
    Reflect,
    /// The edge element repeated.
    Replicate,
    /// Wrapped around (`[a, b, c]` padded by 1 on both sides: `c a b c a`);
    /// a pad must be at most the dimension.
    Circular,
}

impl Tensor {
    /// `F.pad(x, pad, mode)`: `pad` lists `(before, after)` pairs from the
    /// last dimension backwards (`[left, right, top, bottom]` pads the
    /// last two), at most one pair per dimension. The non-constant modes
    /// pad the last one to three dimensions of an input with one or two
    /// more (`[C, W]` or `[N, C, W]` for one pair, and so on), as PyTorch.
    /// Differentiable; a fresh tensor.
    ///
    /// ```
    /// use tensorscope::{Device, PadMode, Tensor};
    /// let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[1, 3], Device::Cpu)?;
    /// let r = x.pad(&[2, 1], PadMode::Reflect)?;
    /// assert_eq!(r.to_vec::<f32>()?, [3.0, 2.0, 1.0, 2.0, 3.0, 2.0]);
    /// let c = x.pad(&[1, -1], PadMode::Constant(0.5))?;
    /// assert_eq!(c.to_vec::<f32>()?, [0.5, 1.0, 2.0]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn pad(&self, pad: &[isize], mode: PadMode) -> Result<Tensor> {
        if matches!(mode, PadMode::Reflect | PadMode::Replicate)
            && let Some(c) =
                crate::autocast::cast(&crate::autocast::PAD_REFLECT_REPLICATE, &[Some(self)])?
        {
            return c.get(0).pad(pad, mode);
        }
        let _op = crate::alloc::history::op_context_with(OP, || vec![self.shape().to_vec()]);
        let pairs = pad.len() / 2;
        if !pad.len().is_multiple_of(2) || pairs > self.rank() {
            bail!(Error::arg(
                OP,
                format!(
                    "expected pairs of pads, at most one per dimension: {} values for an input of shape {:?}",
                    pad.len(),
                    self.shape()
                )
            ));
        }
        if !matches!(mode, PadMode::Constant(_)) {
            let r = self.rank();
            if pairs == 0 || pairs > 3 || !(pairs + 1..=pairs + 2).contains(&r) {
                bail!(Error::arg(
                    OP,
                    format!(
                        "{mode:?} padding of {pairs} dimension(s) needs an input of rank {} or {}, got shape {:?}",
                        pairs + 1,
                        pairs + 2,
                        self.shape()
                    )
                ));
            }
        }
        let mut out = self.alias();
        for p in 0..pairs {
            let dim = self.rank() - 1 - p;
            let (lo, hi) = (pad[2 * p], pad[2 * p + 1]);
            out = match mode {
                PadMode::Constant(v) => constant(&out, dim, lo, hi, v)?,
                _ => from_input(&out, dim, lo, hi, mode)?,
            };
        }
        Ok(out)
    }
}

/// One dimension with a constant border: narrowed where a pad is
/// negative, the value's blocks concatenated where it is positive.
fn constant(x: &Tensor, dim: usize, lo: isize, hi: isize, v: f64) -> Result<Tensor> {
    let n = x.shape()[dim] as isize;
    let keep = n + lo.min(0) + hi.min(0);
    if keep < 0 {
        bail!(Error::arg(
            OP,
            format!(
                "pads ({lo}, {hi}) remove more than the {n} elements of dimension {dim} (shape {:?})",
                x.shape()
            )
        ));
    }
    let x = x.narrow(dim as isize, (-lo.min(0)) as usize, keep as usize)?;
    if lo <= 0 && hi <= 0 {
        return Ok(x);
    }
    let block = |len: isize| -> Result<Tensor> {
        let mut shape = x.shape().to_vec();
        shape[dim] = len as usize;
        Tensor::full(&shape, v, x.dtype(), x.device())
    };
    let (b, a) = (block(lo.max(0))?, block(hi.max(0))?);
    Tensor::cat(&[&b, &x, &a], dim as isize)
}

/// One dimension bordered with the input's elements: the source index of
/// each output position, gathered.
fn from_input(x: &Tensor, dim: usize, lo: isize, hi: isize, mode: PadMode) -> Result<Tensor> {
    let n = x.shape()[dim] as isize;
    let limit = match mode {
        PadMode::Reflect => n - 1,
        PadMode::Circular => n,
        _ => isize::MAX,
    };
    if lo < 0 || hi < 0 || lo > limit || hi > limit || n == 0 {
        bail!(Error::arg(
            OP,
            format!(
                "{mode:?} pads ({lo}, {hi}) must be non-negative and {} dimension {dim} of size {n} (shape {:?})",
                match mode {
                    PadMode::Reflect => "smaller than",
                    PadMode::Circular => "at most",
                    _ => "for a non-empty",
                },
                x.shape()
            )
        ));
    }
    let src: Vec<i64> = (-lo..n + hi)
        .map(|i| match mode {
            PadMode::Reflect if i < 0 => -i,
            PadMode::Reflect if i >= n => 2 * (n - 1) - i,
            PadMode::Replicate => i.clamp(0, n - 1),
            PadMode::Circular => i.rem_euclid(n),
            _ => i,
        } as i64)
        .collect();
    let len = src.len();
    let idx = Tensor::from_vec(src, &[len], crate::device::Device::Cpu)?.to_device(x.device())?;
    x.index_select(dim as isize, &idx)
}
