//! The one internal interface every device implements.
//!
//! The op layer (`src/ops/`) validates arguments, works out dtypes and
//! layouts, allocates outputs and then calls the functions here. They take
//! [`Operand`]s (storage + layout + dtype) with layouts already broadcast to the
//! output's shape, lock the storages involved, and dispatch on the device.
//! Kernels are written against layouts, never against "contiguous slices".

pub(crate) mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
#[cfg(not(feature = "cuda"))]
#[path = "cuda_stub.rs"]
pub mod cuda;

use crate::alloc::DeviceAllocator;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::storage::{lock, Storage};
use std::borrow::Cow;

impl Device {
    /// CUDA device 0 if one is usable, otherwise the CPU. Never panics.
    /// (Here, not in `device.rs`: asking needs the backend, and the device
    /// type sits below it.)
    pub fn cuda_if_available() -> Device {
        if cuda::is_available() {
            Device::Cuda(0)
        } else {
            Device::Cpu
        }
    }
}

/// One operand of a kernel: a storage seen through a layout. (The op layer
/// makes them from tensors: `src/ops/operand.rs`.)
///
/// The layout is borrowed when it is the tensor's own (the common case: an
/// operand of the output's shape), and owned when it was made for the call
/// (broadcast, reshaped): no copy of a shape and strides per operand per op.
pub(crate) struct Operand<'a> {
    pub storage: &'a Storage,
    pub layout: Cow<'a, Layout>,
    pub dtype: DType,
}

macro_rules! define_unary_op {
    ($($variant:ident $name:ident $inplace:ident $out:ident $domain:ident $doc:literal
       $node:literal $saves:ident ($($arg:ident),*) $body:block);* $(;)?) => {
        /// Elementwise functions of one operand (defined in `src/unary_table.rs`).
        #[derive(Copy, Clone, Debug, PartialEq)]
        pub enum UnaryOp {
            $(
                #[doc = $doc]
                $variant,
            )*
            /// Clamp to `[min, max]`; either bound may be absent (NaN here means absent).
            Clamp(f64, f64),
        }

        impl UnaryOp {
            /// Every unary op (clamp with both bounds absent): the CUDA
            /// build's list of the kernels it expects.
            #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
            pub(crate) const ALL: &'static [UnaryOp] =
                &[$(UnaryOp::$variant,)* UnaryOp::Clamp(f64::NAN, f64::NAN)];

            /// The op's name (PyTorch's) in error messages and kernel names.
            pub fn name(self) -> &'static str {
                match self {
                    $(UnaryOp::$variant => stringify!($name),)*
                    UnaryOp::Clamp(..) => "clamp",
                }
            }

            /// Ops defined only on floats (integer inputs are promoted to f32
            /// first, as in PyTorch).
            pub fn needs_float(self) -> bool {
                match self {
                    $(UnaryOp::$variant => define_unary_op!(@float $domain),)*
                    UnaryOp::Clamp(..) => false,
                }
            }
        }
    };
    (@float float) => { true };
    (@float numeric) => { false };
    (@float exact) => { false };
}
crate::unary_table::unary_table!(define_unary_op);

/// Elementwise functions of two operands.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum BinaryOp {
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
    /// `atan2(a, b)`, the angle of the point `(b, a)`: float only.
    Atan2,
    /// C's `fmod`: the remainder of the division truncated toward zero (the
    /// sign of `a`).
    Fmod,
    /// Python's `%`: the remainder of the floor division (the sign of `b`).
    Remainder,
    /// Python's `//`: the quotient rounded toward minus infinity.
    FloorDivide,
}

impl BinaryOp {
    /// The op's name in error messages and kernel names.
    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Pow => "pow",
            BinaryOp::Maximum => "maximum",
            BinaryOp::Minimum => "minimum",
            BinaryOp::Eq => "eq",
            BinaryOp::Ne => "ne",
            BinaryOp::Lt => "lt",
            BinaryOp::Le => "le",
            BinaryOp::Gt => "gt",
            BinaryOp::Ge => "ge",
            BinaryOp::Atan2 => "atan2",
            BinaryOp::Fmod => "fmod",
            BinaryOp::Remainder => "remainder",
            BinaryOp::FloorDivide => "floor_divide",
        }
    }
    /// Whether the op has a kernel computing in `dt` (the op layer promotes
    /// or refuses the other dtypes): the float-only `atan2`, the
    /// numeric-only `fmod`, `remainder` and `floor_divide`, every dtype for
    /// the rest.
    pub(crate) fn computes_in(self, dt: DType) -> bool {
        match self {
            BinaryOp::Atan2 => dt.is_float(),
            BinaryOp::Fmod | BinaryOp::Remainder | BinaryOp::FloorDivide => dt != DType::Bool,
            _ => true,
        }
    }
    /// Comparisons return bool.
    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinaryOp::Eq | BinaryOp::Ne | BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge
        )
    }
}

/// Reductions over a set of dimensions.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum ReduceOp {
    Sum,
    Mean,
    Max,
    Min,
    ArgMax,
    ArgMin,
    Prod,
}

/// The caching allocator of `device`, or an error if the device is not
/// usable. Each backend owns its devices' allocators.
#[inline]
pub(crate) fn allocator(device: Device) -> Result<&'static dyn DeviceAllocator> {
    match device {
        Device::Cpu => Ok(cpu::alloc::allocator()),
        Device::Cuda(i) => cuda::allocator(i),
    }
}

/// Fails unless every operand is on the device of the first.
fn device_of(op: &'static str, ops: &[&Operand]) -> Result<Device> {
    let d = ops[0].storage.device();
    for o in &ops[1..] {
        if o.storage.device() != d {
            return Err(Error::DeviceMismatch {
                op,
                lhs: d,
                rhs: o.storage.device(),
            });
        }
    }
    Ok(d)
}

/// Copies `src` into `dst` element by element, converting dtypes
/// (`src.layout` already has `dst`'s shape; it may be broadcast).
pub(crate) fn copy(src: &Operand, dst: &Operand) -> Result<()> {
    let d = (src.storage.device(), dst.storage.device());
    let _l = lock(&[src.storage], &[dst.storage]);
    match d {
        (Device::Cpu, Device::Cpu) => {
            cpu::copy(src, dst);
            Ok(())
        }
        _ => cuda::copy(src, dst),
    }
}

/// Writes `value` (converted to `dst`'s dtype) into every element of `dst`.
pub(crate) fn fill(dst: &Operand, value: f64) -> Result<()> {
    let _l = lock(&[], &[dst.storage]);
    match dst.storage.device() {
        Device::Cpu => {
            cpu::fill(dst, value);
            Ok(())
        }
        Device::Cuda(_) => cuda::fill(dst, value),
    }
}

/// `dst = op(src)`, same dtype.
pub(crate) fn unary(op: UnaryOp, src: &Operand, dst: &Operand) -> Result<()> {
    unary_locking(op, src, dst, true)
}

/// [`unary`], `dst` written without its storage lock when `exclusive`: the
/// caller holds the only handle to it (a fresh op result).
pub(crate) fn unary_into(op: UnaryOp, src: &Operand, dst: &Operand, exclusive: bool) -> Result<()> {
    unary_locking(op, src, dst, !exclusive)
}

fn unary_locking(op: UnaryOp, src: &Operand, dst: &Operand, lock_dst: bool) -> Result<()> {
    let d = device_of(op.name(), &[src, dst])?;
    let w = [dst.storage];
    let _l = lock(&[src.storage], if lock_dst { &w } else { &[] });
    match d {
        Device::Cpu => {
            cpu::unary(op, src, dst);
            Ok(())
        }
        Device::Cuda(_) => cuda::unary(op, src, dst),
    }
}

/// `dst = op(a, b)`; `a` and `b` share a dtype and are broadcast to `dst`'s shape.
pub(crate) fn binary(op: BinaryOp, a: &Operand, b: &Operand, dst: &Operand) -> Result<()> {
    binary_locking(op, a, b, dst, true)
}

/// [`binary`], `dst` written without its storage lock when `exclusive`
/// (as [`unary_into`]).
pub(crate) fn binary_into(
    op: BinaryOp,
    a: &Operand,
    b: &Operand,
    dst: &Operand,
    exclusive: bool,
) -> Result<()> {
    binary_locking(op, a, b, dst, !exclusive)
}

fn binary_locking(
    op: BinaryOp,
    a: &Operand,
    b: &Operand,
    dst: &Operand,
    lock_dst: bool,
) -> Result<()> {
    let d = device_of(op.name(), &[a, b, dst])?;
    let w = [dst.storage];
    let _l = lock(&[a.storage, b.storage], if lock_dst { &w } else { &[] });
    match d {
        Device::Cpu => {
            cpu::binary(op, a, b, dst);
            Ok(())
        }
        Device::Cuda(_) => cuda::binary(op, a, b, dst),
    }
}

/// `dst = op(a, scalar)`, the scalar converted to `a`'s dtype.
pub(crate) fn binary_scalar(op: BinaryOp, a: &Operand, scalar: f64, dst: &Operand) -> Result<()> {
    binary_scalar_locking(op, a, scalar, dst, true)
}

/// [`binary_scalar`], `dst` written without its storage lock when
/// `exclusive` (as [`unary_into`]).
pub(crate) fn binary_scalar_into(
    op: BinaryOp,
    a: &Operand,
    scalar: f64,
    dst: &Operand,
    exclusive: bool,
) -> Result<()> {
    binary_scalar_locking(op, a, scalar, dst, !exclusive)
}

fn binary_scalar_locking(
    op: BinaryOp,
    a: &Operand,
    scalar: f64,
    dst: &Operand,
    lock_dst: bool,
) -> Result<()> {
    let d = device_of(op.name(), &[a, dst])?;
    let w = [dst.storage];
    let _l = lock(&[a.storage], if lock_dst { &w } else { &[] });
    match d {
        Device::Cpu => {
            cpu::binary_scalar(op, a, scalar, dst);
            Ok(())
        }
        Device::Cuda(_) => cuda::binary_scalar(op, a, scalar, dst),
    }
}

/// `dst = cond ? a : b`; all broadcast to `dst`'s shape.
pub(crate) fn where_cond(cond: &Operand, a: &Operand, b: &Operand, dst: &Operand) -> Result<()> {
    let d = device_of("where", &[cond, a, b, dst])?;
    let _l = lock(&[cond.storage, a.storage, b.storage], &[dst.storage]);
    match d {
        Device::Cpu => {
            cpu::where_cond(cond, a, b, dst);
            Ok(())
        }
        Device::Cuda(_) => cuda::where_cond(cond, a, b, dst),
    }
}

/// `dst = x @ wt (+ bias)`: `x: [m, k]`, `wt: [k, n]`, a bias broadcast to
/// `[m, n]`, a fresh `dst: [m, n]` (Linear's forward): the CPU's fused
/// kernel, or on CUDA the bias copied into `dst` and one GEMM adding to it.
pub(crate) fn linear(
    x: &Operand,
    wt: &Operand,
    bias: Option<&Operand>,
    dst: &Operand,
) -> Result<()> {
    // Fixed arrays sliced to the operands present: no allocation per call.
    let n = 3 + bias.is_some() as usize;
    let ops = [x, wt, dst, bias.unwrap_or(x)];
    let d = device_of("linear", &ops[..n])?;
    let reads = [x.storage, wt.storage, bias.map_or(x.storage, |b| b.storage)];
    let _l = lock(&reads[..n - 1], &[dst.storage]);
    match d {
        Device::Cpu => {
            cpu::matmul::linear(x, wt, bias, dst);
            Ok(())
        }
        Device::Cuda(_) => cuda::linear(x, wt, bias, dst),
    }
}

/// ReLU's backward `dst = y <= 0 ? 0 : g` (one float dtype); CPU only.
pub(crate) fn relu_backward(g: &Operand, y: &Operand, dst: &Operand) -> Result<()> {
    cpu_only_backward("relu_backward", g, y, dst, cpu::fused::relu_backward)
}

/// Runs a CPU-only fused backward kernel `f(g, saved, dst)` under the
/// locks, or refuses another device (callers fall back to composite ops).
fn cpu_only_backward(
    op: &'static str,
    g: &Operand,
    saved: &Operand,
    dst: &Operand,
    f: impl FnOnce(&Operand, &Operand, &Operand),
) -> Result<()> {
    let d = device_of(op, &[g, saved, dst])?;
    let _l = lock(&[g.storage, saved.storage], &[dst.storage]);
    match d {
        Device::Cpu => {
            f(g, saved, dst);
            Ok(())
        }
        device => Err(Error::DeviceUnavailable {
            op,
            device,
            reason: "a CPU-only fused kernel (callers use the composite ops elsewhere)".into(),
        }),
    }
}

/// An elementwise derivative that [`unary_grad`] multiplies the incoming
/// gradient by: of the op's saved output (`y`) or input (`x`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum UnaryGrad {
    /// `1 - y^2`, from tanh's output.
    Tanh,
    /// `y (1 - y)`, from sigmoid's output.
    Sigmoid,
    /// silu' of the input.
    Silu,
    /// softplus' of the input (1 above the threshold 20).
    Softplus,
    /// gelu' (exact form) of the input.
    Gelu,
    /// gelu' (tanh form) of the input, PyTorch's formula.
    GeluTanh,
    /// erf' of the input.
    Erf,
}

/// `dst = g * which(saved)` in one pass: the fused backward of the
/// transcendental unary ops. CPU only, like [`relu_backward`]: callers fall
/// back to the composite ops elsewhere.
pub(crate) fn unary_grad(
    which: UnaryGrad,
    g: &Operand,
    saved: &Operand,
    dst: &Operand,
) -> Result<()> {
    cpu_only_backward("unary_grad", g, saved, dst, |g, s, d| {
        cpu::unary::unary_grad(which, g, s, d)
    })
}

pub(crate) mod attention;
mod index;
pub(crate) mod nn;
pub(crate) mod optim;
pub(crate) mod pool_im2col;
mod random;
mod reduce;
pub(crate) mod scan;
pub(crate) mod softmax;
pub(crate) mod sort;
pub(crate) mod winograd;
#[allow(unused_imports)]
pub(crate) use index::*;
pub(crate) use random::*;
#[allow(unused_imports)]
pub(crate) use reduce::*;
