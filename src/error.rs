//! The one error type of tensorscope.
//!
//! Every fallible operation returns [`Result<T>`]. Each variant carries the name
//! of the operation that failed and the offending values (shapes, dtypes,
//! devices, indices), so the message alone says what went wrong.

use crate::device::Device;
use crate::dtype::DType;

/// Shorthand for `std::result::Result<T, tensorscope::Error>`.
pub type Result<T> = std::result::Result<T, Error>;

/// Everything that can go wrong in tensorscope.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Two shapes that had to agree (or broadcast) did not.
    #[error("{op}: shape mismatch: {lhs:?} vs {rhs:?}{}", fmt_note(.note))]
    ShapeMismatch {
        /// The operation.
        op: &'static str,
        /// The first shape.
        lhs: Vec<usize>,
        /// The second shape.
        rhs: Vec<usize>,
        /// What was expected, in words.
        note: String,
    },
    /// A dtype that the operation does not accept, or two dtypes that had to agree.
    #[error("{op}: dtype mismatch: expected {expected}, got {got}")]
    DTypeMismatch {
        /// The operation.
        op: &'static str,
        /// What was required (a dtype or a family, e.g. "a float dtype").
        expected: String,
        /// The dtype that was given.
        got: DType,
    },
    /// Operands on different devices.
    #[error("{op}: device mismatch: {lhs} vs {rhs}")]
    DeviceMismatch {
        /// The operation.
        op: &'static str,
        /// The first operand's device.
        lhs: Device,
        /// The second operand's device.
        rhs: Device,
    },
    /// A dimension index out of range for the tensor's rank.
    #[error("{op}: dimension {dim} out of range for a tensor of rank {rank}")]
    DimOutOfRange {
        /// The operation.
        op: &'static str,
        /// The dimension asked for (negative counts from the end).
        dim: isize,
        /// The tensor's rank.
        rank: usize,
    },
    /// An element index out of range.
    #[error("{op}: index {index} out of range for dimension {dim} of size {size}")]
    IndexOutOfRange {
        /// The operation.
        op: &'static str,
        /// The offending index.
        index: i64,
        /// The dimension indexed.
        dim: usize,
        /// That dimension's size.
        size: usize,
    },
    /// A new shape with a different number of elements.
    #[error("{op}: cannot reshape a tensor of shape {from:?} ({from_numel} elements) into {to:?}")]
    ElementCount {
        /// The operation.
        op: &'static str,
        /// The original shape.
        from: Vec<usize>,
        /// Its element count.
        from_numel: usize,
        /// The requested shape (`-1` shown as `usize::MAX` is never shown: it is resolved first).
        to: Vec<isize>,
    },
    /// A view that the tensor's strides cannot express without a copy.
    #[error("{op}: view size {shape:?} is not compatible with input strides {strides:?} (shape {from:?}); use reshape(), which copies when it must")]
    NotViewable {
        /// The operation.
        op: &'static str,
        /// The requested shape.
        shape: Vec<isize>,
        /// The input's shape.
        from: Vec<usize>,
        /// The input's strides.
        strides: Vec<usize>,
    },
    /// `item()` on a tensor that does not hold exactly one element.
    #[error(
        "{op}: a tensor with {numel} elements (shape {shape:?}) cannot be converted to a scalar"
    )]
    NotAScalar {
        /// The operation.
        op: &'static str,
        /// The tensor's shape.
        shape: Vec<usize>,
        /// Its element count.
        numel: usize,
    },
    /// The allocator could not serve a request, even after releasing its cache.
    #[error("{device}: out of memory: tried to allocate {} ({requested} bytes); {} allocated, {} reserved, limit {}{}",
        crate::bytes::fmt_bytes(*.requested), crate::bytes::fmt_bytes(*.allocated),
        crate::bytes::fmt_bytes(*.reserved), fmt_limit(.limit), fmt_free_total(.device_free, .device_total))]
    OutOfMemory {
        /// The device.
        device: Device,
        /// Bytes requested (before rounding).
        requested: usize,
        /// Bytes allocated to live tensors at the time.
        allocated: usize,
        /// Bytes reserved by the caching allocator at the time.
        reserved: usize,
        /// The limit in force, if any.
        limit: Option<usize>,
        /// The device's free bytes as the driver reports them, where known.
        device_free: Option<usize>,
        /// The device's total bytes, where known.
        device_total: Option<usize>,
    },
    /// An in-place write that would be ill-defined, such as a write to an
    /// expanded tensor in which several elements share one memory location.
    #[error("{op}: {msg}")]
    InvalidInPlace {
        /// The operation.
        op: &'static str,
        /// Why it was refused.
        msg: String,
    },
    /// An argument out of its domain (a negative size, a step of 0, ...).
    #[error("{op}: invalid argument: {msg}")]
    InvalidArgument {
        /// The operation.
        op: &'static str,
        /// What was wrong.
        msg: String,
    },
    /// A device that is not available in this build or on this machine.
    #[error("{op}: device {device} is not available: {reason}")]
    DeviceUnavailable {
        /// The operation.
        op: &'static str,
        /// The device asked for.
        device: Device,
        /// Why (e.g. "tensorscope was built without the `cuda` feature").
        reason: String,
    },
    /// An autograd rule was broken (second backward, in-place on a leaf that
    /// requires grad, a saved tensor modified in place, ...).
    #[error("{op}: {msg}")]
    Autograd {
        /// The operation.
        op: &'static str,
        /// What happened.
        msg: String,
    },
    /// A sample could not be loaded (a dataset's error or panic in a loader
    /// worker, a file that cannot be read).
    #[error("{op}: sample {index}: {msg}")]
    Data {
        /// The operation.
        op: &'static str,
        /// The sample's index in its dataset.
        index: usize,
        /// What happened (the dataset's own error, a panic's message).
        msg: String,
    },
    /// A collective across processes failed: the ranks called it
    /// differently, a rank did not answer in time, or the engine (MPI)
    /// reported an error.
    #[error("{op}: rank {rank}: {msg}")]
    Collective {
        /// The operation.
        op: &'static str,
        /// This process's rank in the group.
        rank: usize,
        /// What happened.
        msg: String,
    },
    /// A backend (driver, compiler, library) reported an error.
    #[error("{op}: backend error: {msg}")]
    Backend {
        /// The operation.
        op: &'static str,
        /// The backend's message.
        msg: String,
    },
}

fn fmt_note(note: &str) -> String {
    if note.is_empty() {
        String::new()
    } else {
        format!(" ({note})")
    }
}

fn fmt_limit(limit: &Option<usize>) -> String {
    match limit {
        Some(l) => format!("{} allowed", crate::bytes::fmt_bytes(*l)),
        None => "none set".to_string(),
    }
}

fn fmt_free_total(free: &Option<usize>, total: &Option<usize>) -> String {
    match (free, total) {
        (Some(f), Some(t)) => format!(
            "; the device has {} total, of which {} is free",
            crate::bytes::fmt_bytes(*t),
            crate::bytes::fmt_bytes(*f)
        ),
        _ => String::new(),
    }
}

/// Internal step names an error may carry from deep inside an op; the op
/// the user called replaces them ([`Error::in_op`]).
const INTERNAL_OPS: [&str; 2] = ["alloc", "allocate"];

impl Error {
    /// The op an error names, mutably (`None` for an out-of-memory error,
    /// which names its device).
    fn op_mut(&mut self) -> Option<&mut &'static str> {
        match self {
            Error::ShapeMismatch { op, .. }
            | Error::DTypeMismatch { op, .. }
            | Error::DeviceMismatch { op, .. }
            | Error::DimOutOfRange { op, .. }
            | Error::IndexOutOfRange { op, .. }
            | Error::ElementCount { op, .. }
            | Error::NotViewable { op, .. }
            | Error::NotAScalar { op, .. }
            | Error::InvalidInPlace { op, .. }
            | Error::InvalidArgument { op, .. }
            | Error::DeviceUnavailable { op, .. }
            | Error::Autograd { op, .. }
            | Error::Data { op, .. }
            | Error::Collective { op, .. }
            | Error::Backend { op, .. } => Some(op),
            Error::OutOfMemory { .. } => None,
        }
    }

    /// This error as the public op `op` reports it: an internal step's name
    /// (`alloc`, `allocate`) becomes `op`, so `Tensor::zeros` of an
    /// impossible shape says `zeros:`; any other name is kept.
    /// This error as the public constructor `op` reports it (a layer's
    /// `new` builds its parameters with other ops: their names become `op`).
    pub(crate) fn reported_as(mut self, op: &'static str) -> Error {
        if let Some(o) = self.op_mut() {
            *o = op;
        }
        self
    }

    pub(crate) fn in_op(mut self, op: &'static str) -> Error {
        if let Some(o) = self.op_mut()
            && INTERNAL_OPS.contains(o)
        {
            *o = op;
        }
        self
    }
}

impl Error {
    pub(crate) fn shape(
        op: &'static str,
        lhs: &[usize],
        rhs: &[usize],
        note: impl Into<String>,
    ) -> Self {
        Error::ShapeMismatch {
            op,
            lhs: lhs.to_vec(),
            rhs: rhs.to_vec(),
            note: note.into(),
        }
    }
    pub(crate) fn arg(op: &'static str, msg: impl Into<String>) -> Self {
        Error::InvalidArgument {
            op,
            msg: msg.into(),
        }
    }
    /// A file that could not be read or used: [`Error::Backend`] with the
    /// path before the message.
    pub(crate) fn file(
        op: &'static str,
        path: &std::path::Path,
        msg: impl std::fmt::Display,
    ) -> Self {
        Error::Backend {
            op,
            msg: format!("{}: {msg}", path.display()),
        }
    }
    pub(crate) fn dtype(op: &'static str, expected: impl Into<String>, got: DType) -> Self {
        Error::DTypeMismatch {
            op,
            expected: expected.into(),
            got,
        }
    }
}

/// Returns early with an `Err` built from the given expression.
macro_rules! bail {
    ($e:expr) => {
        return Err($e.into())
    };
}
pub(crate) use bail;
