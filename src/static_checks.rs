//! Compile-time facts about the handle types, in one place.
//!
//! * `Tensor` is `Send` (data-loading threads hand tensors over) and `Sync`
//!   (shared `&Tensor` reads from many threads; storages are lock-protected).
//! * `Tensor` is neither `Copy` nor `Clone`: a second handle is always
//!   explicit (`alias`, a view, or `deep_clone`).
//! * A `Tensor` is one pointer wide.

use crate::tensor::Tensor;
use static_assertions::{assert_eq_size, assert_impl_all, assert_not_impl_any};

assert_impl_all!(Tensor: Send, Sync);
assert_not_impl_any!(Tensor: Copy, Clone);
assert_eq_size!(Tensor, usize);
assert_eq_size!(Option<Tensor>, usize);

// Scopes (src/scope.rs). A `Scoped<'s>` is a borrow of one arena slot: one
// pointer, not Copy/Clone (it is a unique handle: `move_out` consumes it), and
// neither Send nor Sync (a scope's handles stay on the thread that opened it;
// `&Tensor` obtained from it is still Send, since `Tensor: Sync`).
use crate::borrowed::{TensorView, TensorViewMut};
use crate::scope::{Scope, ScopeStats, Scoped};
assert_not_impl_any!(Scoped<'static>: Send, Sync, Copy, Clone);
assert_eq_size!(Scoped<'static>, usize);
assert_eq_size!(Option<Scoped<'static>>, usize);
// The scope itself is only ever lent as `&'s Scope<'s>`; it is not Sync, so
// that reference cannot reach another thread either.
assert_not_impl_any!(Scope<'static>: Sync, Copy, Clone);
assert_impl_all!(ScopeStats: Send, Sync, Copy);

// Borrowed views (src/borrowed.rs): one pointer, Send and Sync like Tensor
// (a view of a shared base can be read from `std::thread::scope` threads),
// not Copy/Clone (a second view is made on purpose, from the base).
assert_impl_all!(TensorView<'static>: Send, Sync);
assert_impl_all!(TensorViewMut<'static>: Send, Sync);
assert_not_impl_any!(TensorView<'static>: Copy, Clone);
assert_not_impl_any!(TensorViewMut<'static>: Copy, Clone);
assert_eq_size!(TensorView<'static>, usize);
assert_eq_size!(TensorViewMut<'static>, usize);

// Leak reports are plain data that can cross threads (e.g. be returned from a
// test thread).
assert_impl_all!(crate::leak::LeakReport: Send, Sync, std::error::Error);

// A copy in flight to the host can be handed to another thread (a data
// loader waits for it there), and cannot be duplicated: its tensor is
// reachable once, through `wait`.
assert_impl_all!(crate::ops::pinned::PendingHost: Send, Sync);
assert_not_impl_any!(crate::ops::pinned::PendingHost: Copy, Clone);
