//! The kernel sources (`kernels/*.cu`), their names, and their compilation.
//!
//! Every `kernels/<file>.cu` is compiled by NVRTC, with `kernels/prelude.cuh`
//! prepended (so no include path and no toolkit header is needed), the first
//! time a kernel of that file is needed on a device of a given architecture
//! (`compute_XY`, from the device's compute capability). The PTX is kept for
//! the life of the process, and the loaded module for the life of the
//! device.
//!
//! The PTX is also cached on disk, keyed by a hash of the program and the
//! compile options, the architecture and the NVRTC version, in
//! `$TENSORSCOPE_KERNEL_CACHE` if set (`0`, `off` or empty turn the disk
//! cache off), else `$XDG_CACHE_HOME/tensorscope/kernels`, else
//! `~/.cache/tensorscope/kernels`. A cache that cannot be read or written is
//! ignored.
//!
//! Kernels are named and typed here, in one table: a constructor per kernel
//! family gives the name (from the same [`UnaryOp`], [`BinaryOp`] and
//! [`ReduceOp`] names the CPU backend uses) and, as a tuple type, the Rust
//! types of the parameters, which every launch must pass. [`expected_kernels`]
//! lists every kernel with its parameter sizes, so `tests/cuda/nvrtc.rs` checks,
//! without a GPU, that each exists in the compiled PTX with that parameter
//! list, and that the PTX has no kernel the table lacks.

use super::device::{drv, Gpu};
use super::launch::{Args, Function, Geom};
use super::optim::{AdamK, RuleK, SgdK};
use super::reduce::RGeom;
use super::softmax::SGeom;
use crate::backend::{BinaryOp, ReduceOp, Reduction, UnaryOp};
use crate::dtype::DType;
use crate::error::{Error, Result};
use cudarc::driver::{CudaFunction, CudaModule};
use cudarc::nvrtc::{CompileError, CompileOptions, Ptx};
use std::collections::HashMap;
use std::marker::PhantomData;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};

/// The prelude prepended to every kernel file.
pub(crate) const PRELUDE: &str = include_str!("../../../kernels/prelude.cuh");

/// One `kernels/*.cu` file.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Module {
    Elementwise,
    Copy,
    Reduce,
    Softmax,
    Index,
    Random,
    Nn,
    Optim,
}

impl Module {
    pub(crate) const ALL: [Module; 8] = [
        Module::Elementwise,
        Module::Copy,
        Module::Reduce,
        Module::Softmax,
        Module::Index,
        Module::Random,
        Module::Nn,
        Module::Optim,
    ];

    pub(crate) fn file(self) -> &'static str {
        match self {
            Module::Elementwise => "elementwise.cu",
            Module::Copy => "copy.cu",
            Module::Reduce => "reduce.cu",
            Module::Softmax => "softmax.cu",
            Module::Index => "index.cu",
            Module::Random => "random.cu",
            Module::Nn => "nn.cu",
            Module::Optim => "optim.cu",
        }
    }

    pub(crate) fn source(self) -> &'static str {
        match self {
            Module::Elementwise => include_str!("../../../kernels/elementwise.cu"),
            Module::Copy => include_str!("../../../kernels/copy.cu"),
            Module::Reduce => include_str!("../../../kernels/reduce.cu"),
            Module::Softmax => include_str!("../../../kernels/softmax.cu"),
            Module::Index => include_str!("../../../kernels/index.cu"),
            Module::Random => include_str!("../../../kernels/random.cu"),
            Module::Nn => include_str!("../../../kernels/nn.cu"),
            Module::Optim => include_str!("../../../kernels/optim.cu"),
        }
    }
}

// ------------------------------------------------------------------ names ---

/// The kernel-name suffix of a dtype.
pub(crate) fn suffix(dt: DType) -> &'static str {
    match dt {
        DType::F32 => "f32",
        DType::F64 => "f64",
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        DType::I64 => "i64",
        DType::I32 => "i32",
        DType::U8 => "u8",
        DType::Bool => "bool",
    }
}

/// Every binary op, for the manifest.
pub(crate) const BINARY_OPS: [BinaryOp; 17] = {
    use BinaryOp::*;
    [
        Add,
        Sub,
        Mul,
        Div,
        Pow,
        Maximum,
        Minimum,
        Eq,
        Ne,
        Lt,
        Le,
        Gt,
        Ge,
        Atan2,
        Fmod,
        Remainder,
        FloorDivide,
    ]
};
#[allow(dead_code)]
fn _every_binary_op(op: BinaryOp) {
    use BinaryOp::*;
    match op {
        Add | Sub | Mul | Div | Pow | Maximum | Minimum | Eq | Ne | Lt | Le | Gt | Ge | Atan2
        | Fmod | Remainder | FloorDivide => {}
    }
}

/// Every reduction, for the manifest.
pub(crate) const REDUCE_OPS: [ReduceOp; 7] = {
    use ReduceOp::*;
    [Sum, Mean, Max, Min, ArgMax, ArgMin, Prod]
};

/// A reduction's name in kernel names.
pub(crate) fn reduce_name(op: ReduceOp) -> &'static str {
    match op {
        ReduceOp::Sum => "sum",
        ReduceOp::Mean => "mean",
        ReduceOp::Max => "max",
        ReduceOp::Min => "min",
        ReduceOp::ArgMax => "argmax",
        ReduceOp::ArgMin => "argmin",
        ReduceOp::Prod => "prod",
    }
}

/// `true` if `unary_<op>_<dt>` exists (bool unary ops are copies).
pub(crate) fn has_unary(op: UnaryOp, dt: DType) -> bool {
    if dt == DType::Bool {
        return false;
    }
    !op.needs_float() || dt.is_float()
}

/// The output dtype of reduction `op` over `dt`, or `None` if there is no
/// kernel for it (see kernels/reduce.cu).
pub(crate) fn reduce_out_dtype(op: ReduceOp, dt: DType) -> Option<DType> {
    match (op, dt) {
        (ReduceOp::Sum | ReduceOp::Prod, d) if !d.is_float() => Some(DType::I64),
        (ReduceOp::Sum | ReduceOp::Prod, d) => Some(d),
        (ReduceOp::Mean, d) if d.is_float() => Some(d),
        (ReduceOp::Mean, _) => None,
        (ReduceOp::Max | ReduceOp::Min, d) => Some(d),
        (ReduceOp::ArgMax | ReduceOp::ArgMin, _) => Some(DType::I64),
    }
}

const FLOATS: [DType; 4] = [DType::F32, DType::F64, DType::F16, DType::BF16];
const NUMERIC: [DType; 7] = [
    DType::F32,
    DType::F64,
    DType::F16,
    DType::BF16,
    DType::I64,
    DType::I32,
    DType::U8,
];
const WIDTHS: [DType; 4] = [DType::U8, DType::F16, DType::F32, DType::F64];
const INTEGERS: [DType; 3] = [DType::I64, DType::I32, DType::U8];
/// The dtypes an index tensor may hold.
pub(crate) const INDEX_DTYPES: [DType; 2] = [DType::I64, DType::I32];

// ------------------------------------------------------ the kernel table ---
//
// Every kernel the Rust side launches is made by one of the constructors
// below, which give it its module, its name and, as the type parameter of
// [`Kernel`], the Rust types of its parameters. A launch goes through
// `Gpu::kernel(&Kernel<A>) -> Function<A>` and `Function<A>::launch(&A)`,
// so the compiler holds every launcher to the types listed here;
// [`expected_kernels`] lists every kernel of every file with the byte
// sizes of those types, and `tests/cuda/nvrtc.rs` checks them against the
// parameter lists NVRTC compiles (and that no compiled kernel is missing
// from the table).

/// A device pointer: a kernel's `T*` or `const T*`.
pub(crate) type Ptr = u64;
/// `copy_b<B>`, `cast_<s>_<d>`, `unary_<op>_<dt>`: (geometry, n, out, in).
pub(crate) type UnaryArgs = (Geom<2>, i64, Ptr, Ptr);
/// `unary_clamp_<dt>`: (geometry, n, out, in, lo bits, hi bits, which bounds).
pub(crate) type ClampArgs = (Geom<2>, i64, Ptr, Ptr, u64, u64, i32);
/// `fill_b<B>`: (geometry, n, out, value bits).
pub(crate) type FillArgs = (Geom<1>, i64, Ptr, u64);
/// `masked_fill_b<B>`: (geometry, n, out, mask, value bits).
pub(crate) type MaskedFillArgs = (Geom<2>, i64, Ptr, Ptr, u64);
/// `where_b<B>`: (geometry, n, out, cond, a, b).
pub(crate) type WhereArgs = (Geom<4>, i64, Ptr, Ptr, Ptr, Ptr);
/// `binary_<op>_<dt>`: (geometry, n, out, a, b).
pub(crate) type BinaryArgs = (Geom<3>, i64, Ptr, Ptr, Ptr);
/// `bscalar_<op>_<dt>`: (geometry, n, out, a, scalar bits).
pub(crate) type ScalarArgs = (Geom<2>, i64, Ptr, Ptr, u64);
/// `reduce_<op>_<dt>`: (geometry, outputs, elements per output, out, in,
/// group, split workspace, splits).
pub(crate) type ReduceArgs = (RGeom, i64, i64, Ptr, Ptr, i32, Ptr, i64);
/// `reduce_var_<dt>`: (geometry, outputs, elements per output, out, in,
/// group, correction, take the root, split workspace, splits).
pub(crate) type VarArgs = (RGeom, i64, i64, Ptr, Ptr, i32, i64, i32, Ptr, i64);
/// `matmul_<dt>`: (geometry, n, out, a, b, k, a's k stride, b's k stride).
pub(crate) type MatmulArgs = (Geom<3>, i64, Ptr, Ptr, Ptr, i64, i64, i64);
/// `[log_]softmax_<dt>`: (geometry, rows, out, in, group).
pub(crate) type SoftmaxArgs = (SGeom<2>, i64, Ptr, Ptr, i32);
/// `[log_]softmax_bwd_<dt>`: (geometry, rows, dx, dy, y, group).
pub(crate) type SoftmaxBwdArgs = (SGeom<3>, i64, Ptr, Ptr, Ptr, i32);
/// `index_check_<I>`: (geometry, n, index, size, negative allowed, report).
pub(crate) type IndexCheckArgs = (Geom<1>, i64, Ptr, i64, i32, Ptr);
/// `gather_*`, `scatter_*`, `scatter_add_*`: (geometry, n, dst, src, index,
/// size, stride, report).
pub(crate) type GatherArgs = (Geom<3>, i64, Ptr, Ptr, Ptr, i64, i64, Ptr);
/// `scan_<dt>`: (x, a, out, rows, n, kind).
pub(crate) type ScanArgs = (Ptr, Ptr, Ptr, i64, i64, i32);
/// `argsort_<dt>`: (x, idx, rows, n, descending).
pub(crate) type ArgsortArgs = (Ptr, Ptr, i64, i64, i32);
/// `masked_count`: (geometry, n, mask, chunk, counts).
pub(crate) type MaskedCountArgs = (Geom<2>, i64, Ptr, i64, Ptr);
/// `masked_select_b<B>`: (geometry, n, out, src, mask, chunk, chunk
/// counts, out's length).
pub(crate) type MaskedSelectArgs = (Geom<2>, i64, Ptr, Ptr, Ptr, i64, Ptr, i64);
/// `rand_uniform_<dt>`, `rand_normal_<dt>`: (out, n, seed, offset, a, b).
pub(crate) type RandArgs = (Ptr, i64, u64, u64, f64, f64);
/// `rand_bernoulli_<dt>`: (out, n, seed, offset, p).
pub(crate) type BernoulliArgs = (Ptr, i64, u64, u64, f64);
/// `layer_norm_fwd_<dt>`: (x, gamma, beta, y, mean, rstd, rows, cols, eps).
pub(crate) type LayerNormArgs = (Ptr, Ptr, Ptr, Ptr, Ptr, Ptr, i64, i64, f64);
/// `layer_norm_bwd_<dt>` (dy, x, gamma, mean, rstd, dx, rows, cols) and
/// `layer_norm_bwd_params_<dt>` (dy, x, mean, rstd, dgamma, dbeta, rows, cols).
pub(crate) type LayerNormBwdArgs = (Ptr, Ptr, Ptr, Ptr, Ptr, Ptr, i64, i64);
/// `max_pool2d_<dt>`: (x, y, idx, planes, h, w, oh, ow, window).
pub(crate) type MaxPoolArgs = (Ptr, Ptr, Ptr, i64, i64, i64, i64, i64, PoolWindow);

/// `col2im_<dt>`: (cols, dx, n, c, h, w, oh, ow, window).
pub(crate) type Col2imArgs = (Ptr, Ptr, i64, i64, i64, i64, i64, i64, PoolWindow);

/// `im2col_<dt>`: (x, cols, n, c, h, w, oh, ow, row stride, window).
pub(crate) type Im2colArgs = (Ptr, Ptr, i64, i64, i64, i64, i64, i64, i64, PoolWindow);

/// `PoolWindow` of `kernels/nn.cu`: kernel, stride, padding and dilation,
/// rows then columns.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct PoolWindow {
    pub kernel: [i32; 2],
    pub stride: [i32; 2],
    pub pad: [i32; 2],
    pub dilation: [i32; 2],
}

// SAFETY: plain old data (eight i32s) with the C layout of `PoolWindow` in
// kernels/nn.cu.
unsafe impl cudarc::driver::DeviceRepr for PoolWindow {}
/// `rms_norm_fwd_<dt>`: (x, gamma, y, rstd, rows, cols, eps).
pub(crate) type RmsNormArgs = (Ptr, Ptr, Ptr, Ptr, i64, i64, f64);
/// `rms_norm_bwd_<dt>`: (dy, x, gamma, rstd, dx, rows, cols).
pub(crate) type RmsNormBwdArgs = (Ptr, Ptr, Ptr, Ptr, Ptr, i64, i64);
/// `rms_norm_bwd_params_<dt>`: (dy, x, rstd, dgamma, rows, cols).
pub(crate) type RmsNormBwdParamsArgs = (Ptr, Ptr, Ptr, Ptr, i64, i64);
/// `dropout_<dt>`: (x, y, mask, n, p, seed, offset).
pub(crate) type DropoutArgs = (Ptr, Ptr, Ptr, i64, f64, u64, u64);
/// `dropout_bwd_<dt>`: (dy, mask, dx, n, p).
pub(crate) type DropoutBwdArgs = (Ptr, Ptr, Ptr, i64, f64);
/// `adam_step_<dt>`: (geometry, n, p, grad, m, v, vmax, constants).
pub(crate) type AdamArgs = (Geom<5>, i64, Ptr, Ptr, Ptr, Ptr, Ptr, AdamK);
/// `sgd_step_<dt>`: (geometry, n, p, grad, momentum buffer, constants).
pub(crate) type SgdArgs = (Geom<3>, i64, Ptr, Ptr, Ptr, SgdK);
/// `rule_step_<dt>`: (geometry, n, p, grad, three state slots, constants).
pub(crate) type RuleArgs = (Geom<5>, i64, Ptr, Ptr, Ptr, Ptr, Ptr, RuleK);
/// `sum_squares_<dt>`: (geometry, n, x, one f64 partial per block).
pub(crate) type SumSquaresArgs = (Geom<1>, i64, Ptr, Ptr);
/// `unscale_check_<dt>`: (geometry, n, x, inverse scale, the f32 found-inf flag).
pub(crate) type UnscaleCheckArgs = (Geom<1>, i64, Ptr, f32, Ptr);

/// A kernel of `kernels/`: its file, its name, and its parameter types `A`
/// (a tuple). Made only by the constructors of this table.
pub(crate) struct Kernel<A> {
    module: Module,
    name: String,
    _args: PhantomData<fn(A)>,
}

impl<A: Args> Kernel<A> {
    fn new(module: Module, name: String) -> Self {
        Kernel {
            module,
            name,
            _args: PhantomData,
        }
    }

    /// The kernel's name in the PTX.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The name and the byte size of each parameter: a row of
    /// [`expected_kernels`].
    fn entry(self) -> (String, Vec<usize>) {
        (self.name, A::sizes())
    }
}

/// `copy_b<B>` for one dtype (bits only), else `cast_<src>_<dst>`.
pub(crate) fn copy(src: DType, dst: DType) -> Kernel<UnaryArgs> {
    let name = if src == dst {
        format!("copy_{}", bits_suffix(src))
    } else {
        format!("cast_{}_{}", suffix(src), suffix(dst))
    };
    Kernel::new(Module::Copy, name)
}
/// `fill_b<B>`.
pub(crate) fn fill(dt: DType) -> Kernel<FillArgs> {
    Kernel::new(Module::Copy, format!("fill_{}", bits_suffix(dt)))
}
/// `masked_fill_b<B>` (compiled; the op layer goes through `where` today).
pub(crate) fn masked_fill(dt: DType) -> Kernel<MaskedFillArgs> {
    Kernel::new(Module::Copy, format!("masked_fill_{}", bits_suffix(dt)))
}
/// `where_b<B>`.
pub(crate) fn where_cond(dt: DType) -> Kernel<WhereArgs> {
    Kernel::new(Module::Copy, format!("where_{}", bits_suffix(dt)))
}

/// A unary kernel: clamp takes its bounds, the others nothing more.
pub(crate) enum Unary {
    Plain(Kernel<UnaryArgs>),
    Clamp(Kernel<ClampArgs>),
}
/// `unary_<op>_<dt>` (see [`has_unary`]).
pub(crate) fn unary(op: UnaryOp, dt: DType) -> Unary {
    let name = format!("unary_{}_{}", op.name(), suffix(dt));
    match op {
        UnaryOp::Clamp(..) => Unary::Clamp(Kernel::new(Module::Elementwise, name)),
        _ => Unary::Plain(Kernel::new(Module::Elementwise, name)),
    }
}
/// `binary_<op>_<dt>`.
pub(crate) fn binary(op: BinaryOp, dt: DType) -> Kernel<BinaryArgs> {
    let name = format!("binary_{}_{}", op.name(), suffix(dt));
    Kernel::new(Module::Elementwise, name)
}
/// `bscalar_<op>_<dt>`.
pub(crate) fn bscalar(op: BinaryOp, dt: DType) -> Kernel<ScalarArgs> {
    let name = format!("bscalar_{}_{}", op.name(), suffix(dt));
    Kernel::new(Module::Elementwise, name)
}

/// `reduce_<op>_<dt>` (see [`reduce_out_dtype`]).
pub(crate) fn reduce(op: ReduceOp, dt: DType) -> Kernel<ReduceArgs> {
    let name = format!("reduce_{}_{}", reduce_name(op), suffix(dt));
    Kernel::new(Module::Reduce, name)
}
/// The kernel of a dispatch-level [`Reduction`]: var and std share
/// `reduce_var_<dt>` (a run-time flag takes the root), which takes the
/// correction too.
pub(crate) enum ReductionKernel {
    Plain(Kernel<ReduceArgs>),
    Var(Kernel<VarArgs>),
}
/// `reduce_<op>_<dt>` for a [`Reduction`].
pub(crate) fn reduction(op: Reduction, dt: DType) -> ReductionKernel {
    let name = |n: &str| format!("reduce_{n}_{}", suffix(dt));
    let plain = |n: &str| ReductionKernel::Plain(Kernel::new(Module::Reduce, name(n)));
    match op {
        Reduction::Sum => plain("sum"),
        Reduction::Mean => plain("mean"),
        Reduction::Prod => plain("prod"),
        Reduction::Max => plain("max"),
        Reduction::Min => plain("min"),
        Reduction::LogSumExp => plain("logsumexp"),
        Reduction::Var(_) | Reduction::Std(_) => {
            ReductionKernel::Var(Kernel::new(Module::Reduce, name("var")))
        }
    }
}
impl ReductionKernel {
    /// The kernel's name.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn name(&self) -> &str {
        match self {
            ReductionKernel::Plain(k) => k.name(),
            ReductionKernel::Var(k) => k.name(),
        }
    }
}
/// `matmul_<dt>`: the integer matmul (floats go to cuBLAS).
pub(crate) fn matmul(dt: DType) -> Kernel<MatmulArgs> {
    Kernel::new(Module::Reduce, format!("matmul_{}", suffix(dt)))
}

/// `softmax_<dt>` or `log_softmax_<dt>`.
pub(crate) fn softmax(dt: DType, log: bool) -> Kernel<SoftmaxArgs> {
    let f = if log { "log_softmax" } else { "softmax" };
    Kernel::new(Module::Softmax, format!("{f}_{}", suffix(dt)))
}
/// `softmax_bwd_<dt>` or `log_softmax_bwd_<dt>`.
pub(crate) fn softmax_bwd(dt: DType, log: bool) -> Kernel<SoftmaxBwdArgs> {
    let f = if log {
        "log_softmax_bwd"
    } else {
        "softmax_bwd"
    };
    Kernel::new(Module::Softmax, format!("{f}_{}", suffix(dt)))
}

/// `index_check_<I>` for index dtype `index` (i64 or i32).
pub(crate) fn index_check(index: DType) -> Kernel<IndexCheckArgs> {
    Kernel::new(Module::Index, format!("index_check_{}", suffix(index)))
}
/// `gather_<I>_b<B>`.
pub(crate) fn gather(index: DType, dt: DType) -> Kernel<GatherArgs> {
    let name = format!("gather_{}_{}", suffix(index), bits_suffix(dt));
    Kernel::new(Module::Index, name)
}
/// `scatter_<I>_b<B>`.
pub(crate) fn scatter(index: DType, dt: DType) -> Kernel<GatherArgs> {
    let name = format!("scatter_{}_{}", suffix(index), bits_suffix(dt));
    Kernel::new(Module::Index, name)
}
/// The combining scatters' kernel names: `scatter_<op>_<I>_<dt>`.
pub(crate) const SCATTER_COMBINE: [&str; 4] = ["add", "mul", "max", "min"];
/// `scatter_<op>_<I>_<dt>`, `op` one of [`SCATTER_COMBINE`] (numeric `dt`;
/// a bool destination takes the u8 kernels, which on 0 and 1 are `or` for
/// max and `and` for min and mul).
pub(crate) fn scatter_combine(op: &str, index: DType, dt: DType) -> Kernel<GatherArgs> {
    let dt = if dt == DType::Bool { DType::U8 } else { dt };
    let name = format!("scatter_{op}_{}_{}", suffix(index), suffix(dt));
    Kernel::new(Module::Index, name)
}
/// `scan_<dt>` (floats and i64): one thread per row.
pub(crate) fn scan(dt: DType) -> Kernel<ScanArgs> {
    Kernel::new(Module::Reduce, format!("scan_{}", suffix(dt)))
}
/// `argsort_<dt>` (every dtype): one thread per row.
pub(crate) fn argsort(dt: DType) -> Kernel<ArgsortArgs> {
    Kernel::new(Module::Index, format!("argsort_{}", suffix(dt)))
}
/// `masked_count`.
pub(crate) fn masked_count() -> Kernel<MaskedCountArgs> {
    Kernel::new(Module::Index, "masked_count".into())
}
/// `masked_select_b<B>`.
pub(crate) fn masked_select(dt: DType) -> Kernel<MaskedSelectArgs> {
    Kernel::new(Module::Index, format!("masked_select_{}", bits_suffix(dt)))
}

/// `rand_uniform_<dt>` (floats).
pub(crate) fn rand_uniform(dt: DType) -> Kernel<RandArgs> {
    Kernel::new(Module::Random, format!("rand_uniform_{}", suffix(dt)))
}
/// `rand_normal_<dt>` (floats).
pub(crate) fn rand_normal(dt: DType) -> Kernel<RandArgs> {
    Kernel::new(Module::Random, format!("rand_normal_{}", suffix(dt)))
}
/// `rand_bernoulli_<dt>` (every dtype).
pub(crate) fn rand_bernoulli(dt: DType) -> Kernel<BernoulliArgs> {
    Kernel::new(Module::Random, format!("rand_bernoulli_{}", suffix(dt)))
}

/// `layer_norm_fwd_<dt>`.
pub(crate) fn layer_norm_fwd(dt: DType) -> Kernel<LayerNormArgs> {
    Kernel::new(Module::Nn, format!("layer_norm_fwd_{}", suffix(dt)))
}
/// `layer_norm_bwd_<dt>`.
pub(crate) fn layer_norm_bwd(dt: DType) -> Kernel<LayerNormBwdArgs> {
    Kernel::new(Module::Nn, format!("layer_norm_bwd_{}", suffix(dt)))
}
/// `layer_norm_bwd_params_<dt>`.
pub(crate) fn layer_norm_bwd_params(dt: DType) -> Kernel<LayerNormBwdArgs> {
    let name = format!("layer_norm_bwd_params_{}", suffix(dt));
    Kernel::new(Module::Nn, name)
}
/// `max_pool2d_<dt>`.
pub(crate) fn max_pool2d(dt: DType) -> Kernel<MaxPoolArgs> {
    Kernel::new(Module::Nn, format!("max_pool2d_{}", suffix(dt)))
}
/// `col2im_<dt>`.
pub(crate) fn col2im(dt: DType) -> Kernel<Col2imArgs> {
    Kernel::new(Module::Nn, format!("col2im_{}", suffix(dt)))
}
/// `im2col_<dt>`.
pub(crate) fn im2col(dt: DType) -> Kernel<Im2colArgs> {
    Kernel::new(Module::Nn, format!("im2col_{}", suffix(dt)))
}
/// `rms_norm_fwd_<dt>`.
pub(crate) fn rms_norm_fwd(dt: DType) -> Kernel<RmsNormArgs> {
    Kernel::new(Module::Nn, format!("rms_norm_fwd_{}", suffix(dt)))
}
/// `rms_norm_bwd_<dt>`.
pub(crate) fn rms_norm_bwd(dt: DType) -> Kernel<RmsNormBwdArgs> {
    Kernel::new(Module::Nn, format!("rms_norm_bwd_{}", suffix(dt)))
}
/// `rms_norm_bwd_params_<dt>`.
pub(crate) fn rms_norm_bwd_params(dt: DType) -> Kernel<RmsNormBwdParamsArgs> {
    let name = format!("rms_norm_bwd_params_{}", suffix(dt));
    Kernel::new(Module::Nn, name)
}
/// `dropout_<dt>`.
pub(crate) fn dropout(dt: DType) -> Kernel<DropoutArgs> {
    Kernel::new(Module::Nn, format!("dropout_{}", suffix(dt)))
}
/// `dropout_bwd_<dt>`.
pub(crate) fn dropout_bwd(dt: DType) -> Kernel<DropoutBwdArgs> {
    Kernel::new(Module::Nn, format!("dropout_bwd_{}", suffix(dt)))
}

/// `adam_step_<dt>` (floats).
pub(crate) fn adam_step(dt: DType) -> Kernel<AdamArgs> {
    Kernel::new(Module::Optim, format!("adam_step_{}", suffix(dt)))
}
/// `sgd_step_<dt>` (floats).
pub(crate) fn sgd_step(dt: DType) -> Kernel<SgdArgs> {
    Kernel::new(Module::Optim, format!("sgd_step_{}", suffix(dt)))
}
/// `rule_step_<dt>` (floats): RMSprop, Adagrad, Lion.
pub(crate) fn rule_step(dt: DType) -> Kernel<RuleArgs> {
    Kernel::new(Module::Optim, format!("rule_step_{}", suffix(dt)))
}
/// `sum_squares_<dt>` (floats).
pub(crate) fn sum_squares(dt: DType) -> Kernel<SumSquaresArgs> {
    Kernel::new(Module::Optim, format!("sum_squares_{}", suffix(dt)))
}

/// `unscale_check_<dt>` (floats): GradScaler's unscale and inf check.
pub(crate) fn unscale_check(dt: DType) -> Kernel<UnscaleCheckArgs> {
    Kernel::new(Module::Optim, format!("unscale_check_{}", suffix(dt)))
}

/// `b<element bytes>`: the suffix of kernels that only move bits.
fn bits_suffix(dt: DType) -> String {
    format!("b{}", dt.size_in_bytes())
}

/// Every kernel of `file` (a `kernels/*.cu` file name) with the byte size
/// of each parameter the Rust side passes it, or `None` for an unknown
/// file: the kernel table, checked against the PTX by `tests/cuda/nvrtc.rs`.
#[doc(hidden)]
pub fn expected_kernels(file: &str) -> Option<Vec<(String, Vec<usize>)>> {
    let m = Module::ALL.into_iter().find(|m| m.file() == file)?;
    let mut v = Vec::new();
    match m {
        Module::Elementwise => {
            for &op in UnaryOp::ALL {
                for dt in DType::ALL {
                    if has_unary(op, dt) {
                        v.push(match unary(op, dt) {
                            Unary::Plain(k) => k.entry(),
                            Unary::Clamp(k) => k.entry(),
                        });
                    }
                }
            }
            for op in BINARY_OPS {
                for dt in DType::ALL.into_iter().filter(|&dt| op.computes_in(dt)) {
                    v.push(binary(op, dt).entry());
                    v.push(bscalar(op, dt).entry());
                }
            }
        }
        Module::Copy => {
            for dt in WIDTHS {
                v.push(copy(dt, dt).entry());
                v.push(fill(dt).entry());
                v.push(where_cond(dt).entry());
                v.push(masked_fill(dt).entry());
            }
            for s in DType::ALL {
                for d in DType::ALL {
                    if s != d {
                        v.push(copy(s, d).entry());
                    }
                }
            }
        }
        Module::Reduce => {
            for dt in FLOATS.into_iter().chain([DType::I64]) {
                v.push(scan(dt).entry());
            }
            for op in REDUCE_OPS {
                for dt in DType::ALL {
                    if reduce_out_dtype(op, dt).is_some() {
                        v.push(reduce(op, dt).entry());
                    }
                }
            }
            for dt in FLOATS {
                for op in [Reduction::Var(0), Reduction::LogSumExp] {
                    v.push(match reduction(op, dt) {
                        ReductionKernel::Plain(k) => k.entry(),
                        ReductionKernel::Var(k) => k.entry(),
                    });
                }
            }
            for dt in INTEGERS {
                v.push(matmul(dt).entry());
            }
        }
        Module::Softmax => {
            for dt in FLOATS {
                for log in [false, true] {
                    v.push(softmax(dt, log).entry());
                    v.push(softmax_bwd(dt, log).entry());
                }
            }
        }
        Module::Index => {
            for idx in INDEX_DTYPES {
                v.push(index_check(idx).entry());
                for dt in WIDTHS {
                    v.push(gather(idx, dt).entry());
                    v.push(scatter(idx, dt).entry());
                }
                for dt in NUMERIC {
                    for op in SCATTER_COMBINE {
                        v.push(scatter_combine(op, idx, dt).entry());
                    }
                }
            }
            for dt in WIDTHS {
                v.push(masked_select(dt).entry());
            }
            v.push(masked_count().entry());
            for dt in DType::ALL {
                v.push(argsort(dt).entry());
            }
        }
        Module::Random => {
            for dt in FLOATS {
                v.push(rand_uniform(dt).entry());
                v.push(rand_normal(dt).entry());
            }
            for dt in DType::ALL {
                v.push(rand_bernoulli(dt).entry());
            }
        }
        Module::Nn => {
            for dt in FLOATS {
                v.push(layer_norm_fwd(dt).entry());
                v.push(layer_norm_bwd(dt).entry());
                v.push(layer_norm_bwd_params(dt).entry());
                v.push(rms_norm_fwd(dt).entry());
                v.push(rms_norm_bwd(dt).entry());
                v.push(rms_norm_bwd_params(dt).entry());
                v.push(dropout(dt).entry());
                v.push(dropout_bwd(dt).entry());
                v.push(max_pool2d(dt).entry());
                v.push(col2im(dt).entry());
                v.push(im2col(dt).entry());
            }
        }
        Module::Optim => {
            for dt in FLOATS {
                v.push(adam_step(dt).entry());
                v.push(sgd_step(dt).entry());
                v.push(rule_step(dt).entry());
                v.push(sum_squares(dt).entry());
                v.push(unscale_check(dt).entry());
            }
        }
    }
    Some(v)
}

/// The `kernels/*.cu` files the crate embeds.
#[doc(hidden)]
pub fn embedded_files() -> Vec<&'static str> {
    Module::ALL.iter().map(|m| m.file()).collect()
}

// ------------------------------------------------------------ compilation ---

/// The program NVRTC compiles for `file`: the prelude, then the file, with
/// `#line` markers so that errors name the right file and line.
#[doc(hidden)]
pub fn program(file: &str, body: &str) -> String {
    format!("#line 1 \"prelude.cuh\"\n{PRELUDE}\n#line 1 \"{file}\"\n{body}")
}

fn options(arch: &str) -> Vec<String> {
    vec![
        format!("--gpu-architecture={arch}"),
        "--std=c++17".into(),
        "--generate-line-info".into(),
    ]
}

/// `true` if libnvrtc can be loaded (checked without calling into it).
#[doc(hidden)]
pub fn nvrtc_present() -> bool {
    super::probe::probe().nvrtc
}

/// NVRTC's `(major, minor)` version, if it is present.
#[doc(hidden)]
pub fn nvrtc_version() -> Option<(i32, i32)> {
    super::probe::probe().nvrtc_version
}

/// Compiles `file`'s `body` (prelude prepended) to PTX for `arch` (e.g.
/// `"compute_90"`). `Err` holds NVRTC's log, or why NVRTC is unusable.
/// Never panics when NVRTC is missing.
#[doc(hidden)]
pub fn compile(file: &str, body: &str, arch: &str) -> std::result::Result<String, String> {
    if !nvrtc_present() {
        return Err("the NVRTC library (libnvrtc.so) was not found".into());
    }
    if body.contains('\0') {
        return Err(format!("{file} contains a NUL byte"));
    }
    let opts = CompileOptions {
        options: options(arch),
        name: Some(file.to_string()),
        ..Default::default()
    };
    match cudarc::nvrtc::compile_ptx_with_opts(program(file, body), opts) {
        Ok(ptx) => Ok(ptx.to_src()),
        Err(CompileError::CompileError { nvrtc, log, .. }) => Err(format!(
            "NVRTC {nvrtc:?} compiling {file} for {arch}:\n{}",
            log.to_string_lossy()
        )),
        Err(e) => Err(format!("NVRTC error compiling {file} for {arch}: {e:?}")),
    }
}

/// FNV-1a, 64 bits: a stable hash for cache keys.
fn fnv1a(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.bytes().chain(std::iter::once(0xff)) {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

fn disk_cache_dir() -> Option<PathBuf> {
    match std::env::var_os("TENSORSCOPE_KERNEL_CACHE") {
        Some(v) if v.is_empty() || v == "0" || v == "off" => None,
        Some(v) => Some(PathBuf::from(v)),
        None => {
            let base = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
            Some(base.join("tensorscope").join("kernels"))
        }
    }
}

/// The disk cache file for a program, if there is a cache.
fn disk_cache_path(m: Module, arch: &str) -> Option<PathBuf> {
    let (maj, min) = nvrtc_version()?;
    let prog = program(m.file(), m.source());
    let opts = options(arch).join(" ");
    let h = fnv1a(&[&prog, &opts]);
    let stem = m.file().trim_end_matches(".cu");
    Some(disk_cache_dir()?.join(format!("{stem}-{arch}-nvrtc{maj}.{min}-{h:016x}.ptx")))
}

/// PTX per (module, architecture), for the life of the process.
type PtxCache = Vec<((Module, String), Arc<str>)>;
static PTX: Mutex<PtxCache> = Mutex::new(Vec::new());

/// The PTX of `m` for `arch`: from memory, from the disk cache, or compiled.
fn ptx_for(op: &'static str, m: Module, arch: &str) -> Result<Arc<str>> {
    // Held while compiling: concurrent first uses compile once.
    let mut cache = PTX.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, p)) = cache.iter().find(|(k, _)| k.0 == m && k.1 == arch) {
        return Ok(p.clone());
    }
    let path = disk_cache_path(m, arch);
    let from_disk = path
        .as_ref()
        .and_then(|p| std::fs::read_to_string(p).ok())
        .filter(|s| s.contains(".entry"));
    let ptx: Arc<str> = match from_disk {
        Some(s) => s.into(),
        None => {
            let s = compile(m.file(), m.source(), arch).map_err(|log| Error::Backend {
                op,
                msg: format!("compiling kernels/{}: {log}", m.file()),
            })?;
            if let Some(p) = &path {
                // Best effort: write a temporary file, then rename it.
                if let Some(dir) = p.parent() {
                    let _ = std::fs::create_dir_all(dir);
                }
                let tmp = p.with_extension(format!("tmp{}", std::process::id()));
                if std::fs::write(&tmp, &s).is_ok() {
                    let _ = std::fs::rename(&tmp, p);
                }
            }
            s.into()
        }
    };
    cache.push(((m, arch.to_string()), ptx.clone()));
    Ok(ptx)
}

/// The modules loaded on one device and the functions looked up in them.
#[derive(Default)]
pub(crate) struct ModuleCache {
    modules: Mutex<HashMap<Module, Arc<CudaModule>>>,
    functions: RwLock<HashMap<String, CudaFunction>>,
}

impl Gpu {
    /// `compute_XY` for this device.
    pub(crate) fn arch(&self) -> String {
        format!("compute_{}{}", self.cc.0, self.cc.1)
    }

    /// Kernel `k`, compiled and loaded on first use.
    pub(crate) fn kernel<A: Args>(&self, op: &'static str, k: &Kernel<A>) -> Result<Function<A>> {
        self.function(op, k.module, &k.name).map(Function::new)
    }

    /// The kernel `name` of module `m`, compiled and loaded on first use.
    fn function(&self, op: &'static str, m: Module, name: &str) -> Result<CudaFunction> {
        if let Some(f) = self
            .modules
            .functions
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
        {
            return Ok(f.clone());
        }
        let module = {
            let mut mods = self
                .modules
                .modules
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            match mods.get(&m) {
                Some(md) => md.clone(),
                None => {
                    let ptx = ptx_for(op, m, &self.arch())?;
                    let md = self
                        .ctx
                        .load_module(Ptx::from_src(ptx.to_string()))
                        .map_err(drv(op))?;
                    mods.insert(m, md.clone());
                    md
                }
            }
        };
        let f = module.load_function(name).map_err(|e| Error::Backend {
            op,
            msg: format!("kernel {name} not found in kernels/{}: {e:?}", m.file()),
        })?;
        self.modules
            .functions
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_string(), f.clone());
        Ok(f)
    }
}
