//! Rotary position embeddings (RoPE) in Hugging Face's convention: the
//! head's last dimension `D` splits into halves `[x1, x2]`, and position
//! `p` rotates the pair `(x1[i], x2[i])` by the angle `p * inv_freq[i]`:
//! `x * cos + rotate_half(x) * sin`, with `rotate_half(x) = [-x2, x1]` and
//! `cos`, `sin` of `[freqs, freqs]` (transformers' `apply_rotary_pos_emb`).
//! GPT-J's interleaved pairs `(x[2i], x[2i+1])` are not this layout: a
//! checkpoint in it needs its `q`/`k` weight rows permuted at load.
//!
//! The angles are computed per call, as transformers does (an f32 product
//! of the positions and the inverse frequencies), rather than tabulated to
//! the maximum length: Llama 3's 128K positions would make a 64 MiB table.

use crate::device::Device;
use crate::dtype::DType;
use crate::error::{bail, Error, Result};
use crate::tensor::Tensor;

const OP: &str = "RotaryEmbedding";

/// How the inverse frequencies are rescaled for contexts longer than the
/// model was trained on (transformers' `rope_scaling` / `rope_parameters`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RopeScaling {
    /// `rope_type: "linear"`: every frequency divided by `factor`.
    Linear {
        /// The divisor.
        factor: f64,
    },
    /// `rope_type: "llama3"` (Llama 3.1's): wavelengths longer than
    /// `original_max_position_embeddings / low_freq_factor` are divided by
    /// `factor`, those shorter than `.. / high_freq_factor` kept, and those
    /// between interpolated smoothly.
    Llama3 {
        /// The divisor of the low frequencies (8 in Llama 3.1).
        factor: f64,
        /// 1 in Llama 3.1.
        low_freq_factor: f64,
        /// 4 in Llama 3.1.
        high_freq_factor: f64,
        /// The pretraining context (8192 in Llama 3.1).
        original_max_position_embeddings: usize,
    },
}

/// `[-x2, x1]` for `x = [x1, x2]` split in halves along the last
/// dimension (transformers' `rotate_half`); the last dimension must be
/// even.
pub fn rotate_half(x: &Tensor) -> Result<Tensor> {
    let d = check_even("rotate_half", x)?;
    let (x1, x2) = (x.narrow(-1, 0, d / 2)?, x.narrow(-1, d / 2, d / 2)?);
    Tensor::cat(&[&x2.neg()?, &x1], -1)
}

fn check_even(op: &'static str, x: &Tensor) -> Result<usize> {
    match x.shape().last() {
        Some(&d) if d % 2 == 0 => Ok(d),
        _ => bail!(Error::arg(
            op,
            format!(
                "expected an even last dimension (the rotated pairs), got shape {:?}",
                x.shape()
            )
        )),
    }
}

/// `x * cos + rotate_half(x) * sin` (transformers' `apply_rotary_pos_emb`
/// for one tensor): `x [B, H, L, D]`, `cos` and `sin` `[L, D]` (one set of
/// positions for the batch) or `[B, L, D]` (per sequence), as
/// [`RotaryEmbedding::cos_sin`] gives them, of `x`'s dtype and device.
/// Differentiable in `x`.
pub fn apply_rotary_pos_emb(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    const OP: &str = "apply_rotary_pos_emb";
    let d = check_even(OP, x)?;
    let r = x.rank();
    let ok = |t: &Tensor| {
        let s = t.shape();
        r >= 2
            && (s.len() == 2 || (s.len() == 3 && r == 4 && s[0] == x.shape()[0]))
            && s[s.len() - 2] == x.shape()[r - 2]
            && s[s.len() - 1] == d
            && t.dtype() == x.dtype()
            && t.device() == x.device()
    };
    if !ok(cos) || !ok(sin) || cos.shape() != sin.shape() {
        bail!(Error::arg(
            OP,
            format!(
                "expected cos and sin [L, D] or [B, L, D] of the input's dtype and device for x [B, H, L, D]; got x {:?} {} on {}, cos {:?} {} on {}, sin {:?} {} on {}",
                x.shape(),
                x.dtype(),
                x.device(),
                cos.shape(),
                cos.dtype(),
                cos.device(),
                sin.shape(),
                sin.dtype(),
                sin.device()
            )
        ));
    }
    // Per-sequence angles broadcast over the heads.
    let heads = |t: &Tensor| {
        if t.rank() == 3 {
            t.unsqueeze(1)
        } else {
            Ok(t.alias())
        }
    };
    let (cos, sin) = (heads(cos)?, heads(sin)?);
    x.mul(&cos)?.add(&rotate_half(x)?.mul(&sin)?)
}

/// Rotary position embeddings for heads of `head_dim` (transformers'
/// `LlamaRotaryEmbedding` and its kin): the inverse frequencies
/// `1 / theta^(2i / D)`, rescaled as [`RopeScaling`] says, on one device.
///
/// ```
/// use tensorscope::nn::RotaryEmbedding;
/// use tensorscope::{DType, Device, Tensor};
/// let rope = RotaryEmbedding::new(8, 10_000.0, None, Device::Cpu)?;
/// let q = Tensor::randn(&[1, 2, 3, 8], DType::F32, Device::Cpu)?; // [B, H, L, D]
/// // Positions 5, 6, 7: the three tokens after a cache of five.
/// let q = rope.apply(&q, 5)?;
/// assert_eq!(q.shape(), &[1, 2, 3, 8]);
/// # Ok::<(), tensorscope::Error>(())
/// ```
#[derive(Debug)]
pub struct RotaryEmbedding {
    inv_freq: Tensor,
    head_dim: usize,
}

impl RotaryEmbedding {
    /// The embedding of heads of `head_dim` (even), base `theta`
    /// (`rope_theta`: 10000 for Llama 2, 500000 for Llama 3), with an
    /// optional scaling, on `device`.
    pub fn new(
        head_dim: usize,
        theta: f64,
        scaling: Option<RopeScaling>,
        device: Device,
    ) -> Result<RotaryEmbedding> {
        if head_dim == 0 || !head_dim.is_multiple_of(2) || !(theta > 0.0 && theta.is_finite()) {
            bail!(Error::arg(
                OP,
                format!("expected an even head_dim > 0 and a finite theta > 0, got head_dim {head_dim}, theta {theta}")
            ));
        }
        let inv = inverse_frequencies(head_dim, theta, scaling)?;
        Ok(RotaryEmbedding {
            inv_freq: Tensor::from_slice(&inv, &[head_dim / 2], device)?,
            head_dim,
        })
    }

    /// The inverse frequencies, `[head_dim / 2]` f32 (transformers'
    /// `inv_freq` buffer).
    pub fn inv_freq(&self) -> &Tensor {
        &self.inv_freq
    }

    /// The head dimension rotated.
    pub fn head_dim(&self) -> usize {
        self.head_dim
    }

    /// `(cos, sin)` `[.., D]` in `dtype` for integer `positions` of any
    /// shape (`[L]`, or `[B, L]` for sequences at different offsets), as
    /// transformers computes them: `positions * inv_freq` in f32, repeated
    /// over both halves.
    pub fn cos_sin(&self, positions: &Tensor, dtype: DType) -> Result<(Tensor, Tensor)> {
        if positions.dtype().is_float() || positions.dtype() == DType::Bool {
            bail!(Error::arg(
                OP,
                format!("expected integer positions, got {}", positions.dtype())
            ));
        }
        if !dtype.is_float() {
            bail!(Error::arg(
                OP,
                format!("expected a float dtype for cos and sin, got {dtype}")
            ));
        }
        if positions.device() != self.inv_freq.device() {
            bail!(Error::DeviceMismatch {
                op: OP,
                lhs: self.inv_freq.device(),
                rhs: positions.device(),
            });
        }
        let freqs = positions
            .to_dtype(DType::F32)?
            .unsqueeze(-1)?
            .mul(&self.inv_freq)?;
        let emb = Tensor::cat(&[&freqs, &freqs], -1)?;
        Ok((emb.cos()?.to_dtype(dtype)?, emb.sin()?.to_dtype(dtype)?))
    }

    /// `x [B, H, L, D]` rotated for positions `offset..offset + L` (the
    /// tokens after `offset` cached ones).
    pub fn apply(&self, x: &Tensor, offset: usize) -> Result<Tensor> {
        self.check_input(x)?;
        let l = x.shape()[x.rank() - 2];
        let pos = Tensor::arange(
            offset as f64,
            (offset + l) as f64,
            1.0,
            DType::I64,
            x.device(),
        )?;
        let (cos, sin) = self.cos_sin(&pos, x.dtype())?;
        apply_rotary_pos_emb(x, &cos, &sin)
    }

    /// `x [B, H, L, D]` rotated for the positions `[L]` or `[B, L]`
    /// (transformers' `position_ids`, e.g. for left-padded batches).
    pub fn apply_at(&self, x: &Tensor, positions: &Tensor) -> Result<Tensor> {
        self.check_input(x)?;
        let (cos, sin) = self.cos_sin(positions, x.dtype())?;
        apply_rotary_pos_emb(x, &cos, &sin)
    }

    fn check_input(&self, x: &Tensor) -> Result<()> {
        if x.rank() < 2 || x.shape()[x.rank() - 1] != self.head_dim {
            bail!(Error::arg(
                OP,
                format!(
                    "expected an input [.., L, {}] (the head dimension), got shape {:?}",
                    self.head_dim,
                    x.shape()
                )
            ));
        }
        Ok(())
    }
}

/// transformers' inverse frequencies, computed in f32 in its order of
/// operations so that the angles match its to the rounding.
fn inverse_frequencies(d: usize, theta: f64, scaling: Option<RopeScaling>) -> Result<Vec<f32>> {
    let base: Vec<f32> = (0..d / 2)
        .map(|i| 1.0 / (theta as f32).powf((2 * i) as f32 / d as f32))
        .collect();
    let bad = |what: String| -> Result<Vec<f32>> { Err(Error::arg(OP, what)) };
    match scaling {
        None => Ok(base),
        Some(RopeScaling::Linear { factor }) => {
            if !(factor > 0.0 && factor.is_finite()) {
                return bad(format!("linear scaling needs a factor > 0, got {factor}"));
            }
            Ok(base.iter().map(|f| f / factor as f32).collect())
        }
        Some(RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position_embeddings: old,
        }) => {
            if !(factor > 0.0 && low_freq_factor > 0.0 && high_freq_factor > low_freq_factor)
                || old == 0
            {
                return bad(format!(
                    "llama3 scaling needs factor > 0, 0 < low_freq_factor < high_freq_factor and original_max_position_embeddings > 0, got {factor}, {low_freq_factor}, {high_freq_factor}, {old}"
                ));
            }
            let (factor, lo, hi, old) = (
                factor as f32,
                low_freq_factor as f32,
                high_freq_factor as f32,
                old as f32,
            );
            let (low_wavelen, high_wavelen) = (old / lo, old / hi);
            Ok(base
                .iter()
                .map(|&f| {
                    let wavelen = 2.0 * std::f32::consts::PI / f;
                    let scaled = if wavelen > low_wavelen { f / factor } else { f };
                    if wavelen < high_wavelen || wavelen > low_wavelen {
                        return scaled;
                    }
                    let smooth = (old / wavelen - lo) / (hi - lo);
                    (1.0 - smooth) * scaled / factor + smooth * scaled
                })
                .collect())
        }
    }
}
