//! The op layer: validation, dtype promotion and output allocation, then a
//! call into [`crate::backend`]. One file per family.

mod activations;
pub(crate) mod attention;
mod attention_blocked;
mod construct;
pub(crate) mod conv;
pub(crate) mod cross_entropy;
mod einsum;
mod elementwise;
mod elementwise_composed;
pub(crate) mod fused_norm;
mod index;
mod index_put;
mod interpolate;
pub use interpolate::{InterpolateMode, InterpolateSize};
mod matmul;
mod matmul_forms;
mod operand;
mod operators;
mod pad;
pub use pad::PadMode;
pub(crate) mod pinned;
pub(crate) mod pool;
mod reductions_composed;
pub use pinned::PendingHost;
#[cfg(feature = "cuda")]
mod record_stream;
mod reduce;
mod sampling;
mod scan;
mod scatter_reduce;
pub(crate) use scatter_reduce::mean_counts;
pub use scatter_reduce::ScatterReduce;
mod shape;
mod softmax;
mod sort;
mod triangles_and_flips;
pub use sort::Interpolation;
mod unique;
pub use unique::UniqueParts;
mod views;

use crate::dtype::DType;
use crate::error::{Error, Result};

/// `Err` unless `op` can store the number `value` into `dtype` the way
/// PyTorch does (see `DType::scalar_fits`): `full(.., 300, u8)` is an
/// overflow error, `full(.., -1, u8)` gives 255. Fills, `masked_fill`,
/// `index_fill`, `scatter` with a value, and an integer tensor's
/// arithmetic with a scalar check this first.
pub(crate) fn check_fill_value(op: &'static str, dtype: DType, value: f64) -> Result<()> {
    if dtype.scalar_fits(value) {
        return Ok(());
    }
    Err(Error::arg(
        op,
        format!("value {value} cannot be converted to {dtype} without overflow"),
    ))
}
