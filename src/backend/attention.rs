//! Dispatch of the fused scaled dot-product attention kernel, forward and
//! backward. It is a CPU kernel (`cpu::attention`); CUDA answers
//! [`Error::DeviceUnavailable`], and the op layer composes the same blocked
//! algorithm from device ops there (`nn::attention_blocked`).

use super::{cpu, device_of, Operand};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::storage::lock;

/// How the optional mask reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MaskKind {
    /// bool: `true` where a query may attend a key.
    Keep,
    /// The queries' dtype: added to the scaled scores.
    Add,
}

/// The operands and options of one attention call (see the module docs).
pub(crate) struct SdpaArgs<'a> {
    pub q: &'a Operand<'a>,
    pub k: &'a Operand<'a>,
    pub v: &'a Operand<'a>,
    pub mask: Option<(&'a Operand<'a>, MaskKind)>,
    /// Causal attention: query row `i` attends keys `j <= i + offset` only
    /// (0: top-left aligned; `S - L`: bottom-right).
    pub causal: Option<isize>,
    /// Query heads per key/value head (grouped-query attention): query
    /// head `n` reads key/value head `n / group`.
    pub group: usize,
    pub scale: f64,
    /// `(p, seed)` when dropout is on (`0 < p < 1`).
    pub dropout: Option<(f64, u64)>,
}

/// The backward's own operands (dense; see the module docs).
pub(crate) struct SdpaGrads<'a> {
    pub out: &'a Operand<'a>,
    pub lse: &'a Operand<'a>,
    pub dout: &'a Operand<'a>,
    pub dq: &'a Operand<'a>,
    pub dk: &'a Operand<'a>,
    pub dv: &'a Operand<'a>,
}

impl SdpaArgs<'_> {
    /// The operands read, mask included.
    fn inputs(&self) -> Vec<&Operand<'_>> {
        let mut v = vec![self.q, self.k, self.v];
        v.extend(self.mask.map(|(m, _)| m));
        v
    }
}

fn unavailable(op: &'static str, device: Device) -> Error {
    Error::DeviceUnavailable {
        op,
        device,
        reason: "the fused attention is a CPU kernel (CUDA composes it by key blocks)".into(),
    }
}

/// The attention forward into dense `out [N, L, Ev]` and, when given,
/// `lse [N, L]` (f32, f64 for f64 inputs).
pub(crate) fn sdpa_forward(a: &SdpaArgs, out: &Operand, lse: Option<&Operand>) -> Result<()> {
    const OP: &str = "scaled_dot_product_attention";
    let ins = a.inputs();
    let mut outs = vec![out];
    outs.extend(lse);
    let d = device_of(OP, &[ins.clone(), outs.clone()].concat())?;
    if d != Device::Cpu {
        return Err(unavailable(OP, d));
    }
    let _l = lock(
        &ins.iter().map(|o| o.storage).collect::<Vec<_>>(),
        &outs.iter().map(|o| o.storage).collect::<Vec<_>>(),
    );
    cpu::attention::forward(a, out, lse);
    Ok(())
}

/// The attention backward: `dq`, `dk`, `dv` from the forward's output, its
/// `lse` and the output's gradient.
pub(crate) fn sdpa_backward(a: &SdpaArgs, g: &SdpaGrads) -> Result<()> {
    const OP: &str = "scaled_dot_product_attention_backward";
    let mut ins = a.inputs();
    ins.extend([g.out, g.lse, g.dout]);
    let outs = [g.dq, g.dk, g.dv];
    let d = device_of(OP, &[ins.clone(), outs.to_vec()].concat())?;
    if d != Device::Cpu {
        return Err(unavailable(OP, d));
    }
    let _l = lock(
        &ins.iter().map(|o| o.storage).collect::<Vec<_>>(),
        &outs.iter().map(|o| o.storage).collect::<Vec<_>>(),
    );
    cpu::attention::backward(a, g);
    Ok(())
}
