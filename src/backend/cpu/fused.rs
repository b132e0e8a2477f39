//! Fused CPU kernels for autograd formulas: one pass where the composite
//! would take several (and allocate their temporaries).

use super::elementwise::map2;
use crate::backend::Operand;
use crate::with_float_dtype;

/// ReLU's backward (PyTorch's `threshold_backward(g, y, 0)`):
/// `dst = y <= 0 ? 0 : g`, where `y` is ReLU's output (so a NaN output passes
/// its gradient on, as in PyTorch). All operands share one float dtype and
/// `dst`'s shape.
pub(crate) fn relu_backward(g: &Operand, y: &Operand, dst: &Operand) {
    debug_assert!(g.dtype == y.dtype && g.dtype == dst.dtype);
    with_float_dtype!(g.dtype, T => {
        let zero = <T as crate::dtype::Element>::zero();
        // SAFETY: dtypes match the operands; the caller holds the locks.
        unsafe { map2::<T, T, T>(g, y, dst, move |g, y| if y <= zero { zero } else { g }) }
    }, _ => unreachable!("relu_backward on a non-float dtype: the formula checks"))
}
