//! Compile-time facts about the handle types, in one place.
//!
//! * `Tensor` is `Send` (data-loading threads hand tensors over) and `Sync`
//!   (shared `&Tensor` reads from many threads; storages are lock-protected).
//! * `Tensor` is neither `Copy` nor `Clone`: a second handle is always
//!   explicit (`alias`, a view, or `deep_clone`).
//! * A `Tensor` is one pointer wide.

use crate::Tensor;
use static_assertions::{assert_eq_size, assert_impl_all, assert_not_impl_any};

assert_impl_all!(Tensor: Send, Sync);
assert_not_impl_any!(Tensor: Copy, Clone);
assert_eq_size!(Tensor, usize);
assert_eq_size!(Option<Tensor>, usize);
