//! Which dtype each op runs in inside an autocast region, per device type:
//! PyTorch 2.15's lists (`aten/src/ATen/autocast_mode.cpp` and `.h`:
//! `AutocastCPU` registers its own list, CUDA's is `AT_FORALL_*`),
//! restricted to the ops tensorscope has. An op in neither list runs in
//! the dtypes its inputs have, with ordinary type promotion. The GUIDE's
//! table in "Lower precision" is this table; a test compares the two.

/// What autocast does to an op's floating-point inputs.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum CastPolicy {
    /// Cast to the region's dtype (f16 or bf16): the matrix products,
    /// convolutions and attention, where lower precision pays.
    LowerPrecision,
    /// Cast to f32: ops whose range or accumulation lower precision
    /// endangers (losses, and on CUDA exp/log, the norms, softmax, sums).
    Fp32,
    /// Cast to the widest floating input (f32 if any input is f32).
    Promote,
    /// Refused inside a region (CUDA's `binary_cross_entropy`, which PyTorch
    /// bans there: its log of a rounded probability is unsafe).
    Refused,
}

/// One op's policy on each device type; `None`: not in that device's lists.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct OpPolicy {
    /// The op, by its tensorscope (and PyTorch) name.
    pub op: &'static str,
    /// Inside a CPU region.
    pub cpu: Option<CastPolicy>,
    /// Inside a CUDA region.
    pub cuda: Option<CastPolicy>,
}

use CastPolicy::{Fp32, LowerPrecision as Low, Promote, Refused};

const fn both(op: &'static str, p: CastPolicy) -> OpPolicy {
    OpPolicy {
        op,
        cpu: Some(p),
        cuda: Some(p),
    }
}

const fn cpu(op: &'static str, p: CastPolicy) -> OpPolicy {
    OpPolicy {
        op,
        cpu: Some(p),
        cuda: None,
    }
}

const fn cuda(op: &'static str, p: CastPolicy) -> OpPolicy {
    OpPolicy {
        op,
        cpu: None,
        cuda: Some(p),
    }
}

pub(crate) const MATMUL: OpPolicy = both("matmul", Low);
pub(crate) const MM: OpPolicy = both("mm", Low);
pub(crate) const BMM: OpPolicy = both("bmm", Low);
pub(crate) const ADDMM: OpPolicy = both("addmm", Low);
pub(crate) const LINEAR: OpPolicy = both("linear", Low);
pub(crate) const CONV1D: OpPolicy = both("conv1d", Low);
pub(crate) const CONV2D: OpPolicy = both("conv2d", Low);
pub(crate) const CONV_TRANSPOSE2D: OpPolicy = both("conv_transpose2d", Low);
pub(crate) const SDPA: OpPolicy = both("scaled_dot_product_attention", Low);
/// CPU: not listed; its products (`matmul`, `bmm`) are, so it runs in the
/// lower dtype there too.
pub(crate) const EINSUM: OpPolicy = cuda("einsum", Low);

pub(crate) const MSE_LOSS: OpPolicy = both("mse_loss", Fp32);
pub(crate) const L1_LOSS: OpPolicy = both("l1_loss", Fp32);
pub(crate) const SMOOTH_L1_LOSS: OpPolicy = both("smooth_l1_loss", Fp32);
pub(crate) const HUBER_LOSS: OpPolicy = both("huber_loss", Fp32);
pub(crate) const KL_DIV: OpPolicy = both("kl_div", Fp32);
pub(crate) const NLL_LOSS: OpPolicy = both("nll_loss", Fp32);
/// CUDA lists `log_softmax` and `nll_loss`, which PyTorch's composite
/// `cross_entropy` calls: f32 there too.
pub(crate) const CROSS_ENTROPY: OpPolicy = both("cross_entropy", Fp32);
pub(crate) const BCE_WITH_LOGITS: OpPolicy = both("binary_cross_entropy_with_logits", Fp32);
pub(crate) const BINARY_CROSS_ENTROPY: OpPolicy = OpPolicy {
    op: "binary_cross_entropy",
    cpu: Some(Fp32),
    cuda: Some(Refused),
};
pub(crate) const PROD: OpPolicy = both("prod", Fp32);
pub(crate) const QUANTILE: OpPolicy = cpu("quantile", Fp32);
pub(crate) const NANQUANTILE: OpPolicy = cpu("nanquantile", Fp32);
/// Reflect and replicate padding only (PyTorch lists `reflection_pad*`
/// and `replication_pad*`); constant and circular padding are not listed.
pub(crate) const PAD_REFLECT_REPLICATE: OpPolicy = cpu("pad (reflect, replicate)", Fp32);

pub(crate) const CAT: OpPolicy = cpu("cat", Promote);
pub(crate) const STACK: OpPolicy = cpu("stack", Promote);
pub(crate) const INDEX_COPY: OpPolicy = cpu("index_copy", Promote);
pub(crate) const DOT: OpPolicy = cuda("dot", Promote);
pub(crate) const INDEX_PUT: OpPolicy = cuda("index_put", Promote);
pub(crate) const SCATTER_ADD: OpPolicy = cuda("scatter_add", Promote);

pub(crate) const LAYER_NORM: OpPolicy = cuda("layer_norm", Fp32);
pub(crate) const RMS_NORM: OpPolicy = cuda("rms_norm", Fp32);
pub(crate) const GROUP_NORM: OpPolicy = cuda("group_norm", Fp32);
pub(crate) const SOFTMAX: OpPolicy = cuda("softmax", Fp32);
pub(crate) const LOG_SOFTMAX: OpPolicy = cuda("log_softmax", Fp32);
pub(crate) const LOGSUMEXP: OpPolicy = cuda("logsumexp", Fp32);
pub(crate) const SUM: OpPolicy = cuda("sum", Fp32);
pub(crate) const CUMSUM: OpPolicy = cuda("cumsum", Fp32);
pub(crate) const CUMPROD: OpPolicy = cuda("cumprod", Fp32);
pub(crate) const NORM: OpPolicy = cuda("norm", Fp32);
pub(crate) const VECTOR_NORM: OpPolicy = cuda("vector_norm", Fp32);
pub(crate) const INTERPOLATE: OpPolicy = cuda("interpolate", Fp32);
pub(crate) const POW: OpPolicy = cuda("pow", Fp32);

/// CUDA's f32 list among the unary ops of `unary_table.rs`.
const UNARY_FP32: [OpPolicy; 13] = [
    cuda("exp", Fp32),
    cuda("expm1", Fp32),
    cuda("log", Fp32),
    cuda("log1p", Fp32),
    cuda("log2", Fp32),
    cuda("reciprocal", Fp32),
    cuda("rsqrt", Fp32),
    cuda("sinh", Fp32),
    cuda("cosh", Fp32),
    cuda("tan", Fp32),
    cuda("asin", Fp32),
    cuda("acos", Fp32),
    cuda("softplus", Fp32),
];

/// The policy of the unary op named `name`, if it has one.
pub(crate) fn unary(name: &str) -> Option<&'static OpPolicy> {
    UNARY_FP32.iter().find(|p| p.op == name)
}

/// Every op with a policy on some device type, in the GUIDE table's order.
pub fn policies() -> Vec<OpPolicy> {
    let mut v = vec![
        MATMUL,
        MM,
        BMM,
        ADDMM,
        LINEAR,
        CONV1D,
        CONV2D,
        CONV_TRANSPOSE2D,
        SDPA,
        EINSUM,
        MSE_LOSS,
        L1_LOSS,
        SMOOTH_L1_LOSS,
        HUBER_LOSS,
        KL_DIV,
        NLL_LOSS,
        CROSS_ENTROPY,
        BCE_WITH_LOGITS,
        BINARY_CROSS_ENTROPY,
        PROD,
        QUANTILE,
        NANQUANTILE,
        PAD_REFLECT_REPLICATE,
        CAT,
        STACK,
        INDEX_COPY,
        DOT,
        INDEX_PUT,
        SCATTER_ADD,
        LAYER_NORM,
        RMS_NORM,
        GROUP_NORM,
        SOFTMAX,
        LOG_SOFTMAX,
        LOGSUMEXP,
        SUM,
        CUMSUM,
        CUMPROD,
        NORM,
        VECTOR_NORM,
        INTERPOLATE,
        POW,
    ];
    v.extend(UNARY_FP32);
    v
}
