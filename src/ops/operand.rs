//! How a tensor becomes a backend [`Operand`]: the backend sees storage,
//! layout and dtype, never a `Tensor`, so the op layer makes its operands.

use crate::backend::Operand;
use crate::error::Result;
use crate::layout::{dims_eq, Layout};
use crate::tensor::Tensor;
use std::borrow::Cow;

impl<'a> Operand<'a> {
    /// The tensor through its own layout (borrowed: nothing is built).
    #[inline]
    pub(crate) fn of(t: &'a Tensor) -> Self {
        Operand {
            storage: t.storage(),
            layout: Cow::Borrowed(t.layout()),
            dtype: t.dtype(),
        }
    }

    /// `t` as the output of an `_into` kernel, with whether the kernel may
    /// write it without its storage lock ([`Tensor::is_exclusive`]). The
    /// `&mut` borrow lasts as long as the operand, so no other handle to
    /// `t` can be made meanwhile and the answer cannot go stale.
    #[inline]
    pub(crate) fn output(t: &'a mut Tensor) -> (Self, bool) {
        let t: &'a Tensor = t;
        (Operand::of(t), t.is_exclusive())
    }

    /// The tensor seen through another layout (e.g. broadcast).
    #[inline]
    pub(crate) fn with(t: &'a Tensor, layout: Layout) -> Self {
        Operand {
            storage: t.storage(),
            layout: Cow::Owned(layout),
            dtype: t.dtype(),
        }
    }

    /// The tensor broadcast to `shape`: its own layout, borrowed, when it
    /// already has that shape (no layout is built).
    #[inline]
    pub(crate) fn broadcast(t: &'a Tensor, shape: &[usize]) -> Result<Self> {
        if dims_eq(t.shape(), shape) {
            Ok(Operand::of(t))
        } else {
            Ok(Operand::with(t, t.layout().broadcast_to(shape)?))
        }
    }
}
