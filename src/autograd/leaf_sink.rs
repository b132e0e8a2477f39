//! Note [leaf sink]: a backward that reports its leaves as it goes, which
//! is how data-parallel training starts reducing a bucket of gradients
//! while backward is still computing the others (PyTorch's reducer hooks
//! each parameter's gradient accumulator the same way).
//!
//! The sink lives in a thread-local for one backward, so that a backward
//! nested inside it (a checkpointed segment recomputing) reports its
//! accumulations too. Only the outermost backward knows when a leaf has
//! received its last gradient: it counts the graph's edges into each leaf
//! before it starts, and reports a leaf finished when the count reaches
//! zero. A leaf reached only through a nested backward is never reported
//! finished; the sink's owner deals with it after the backward.

use super::engine;
use crate::error::{bail, Error, Result};
use crate::tensor::{Tensor, TensorImpl};
use std::any::Any;
use std::cell::RefCell;

/// Told about every leaf gradient a backward accumulates.
pub(crate) trait LeafSink: Any {
    /// Before `leaf` ([`leaf_key`]) receives a gradient, at any depth of
    /// the backward. An `Err` stops the backward.
    fn accumulating(&mut self, leaf: usize) -> Result<()>;
    /// After the outermost backward gave `leaf` its last gradient.
    fn finished(&mut self, leaf: usize, grad: Option<Tensor>) -> Result<()>;
}

thread_local! {
    static SINK: RefCell<Option<Box<dyn LeafSink>>> = const { RefCell::new(None) };
}

/// The key a sink is told for a leaf: the address of its implementation,
/// shared by every handle that reaches the same autograd state.
pub(crate) fn leaf_key(t: &Tensor) -> usize {
    key_of(&t.inner)
}

pub(super) fn key_of(leaf: &TensorImpl) -> usize {
    leaf as *const TensorImpl as usize
}

/// `f` on the current sink, if a backward is being observed.
pub(super) fn with_sink<R>(f: impl FnOnce(&mut dyn LeafSink) -> R) -> Option<R> {
    SINK.with(|s| s.borrow_mut().as_deref_mut().map(f))
}

/// Whether a backward is being observed on this thread.
pub(super) fn observing() -> bool {
    SINK.with(|s| s.borrow().is_some())
}

/// `root.backward()` with `sink` told of the leaves; gives the sink back
/// with the backward's result. `op` names the caller in errors.
pub(crate) fn backward_observed<S: LeafSink>(
    op: &'static str,
    root: &Tensor,
    sink: S,
) -> (Result<()>, S) {
    if observing() {
        let e = Error::Autograd {
            op,
            msg: "a backward is already reporting to a reducer on this thread".into(),
        };
        return (Err(e), sink);
    }
    SINK.with(|s| *s.borrow_mut() = Some(Box::new(sink)));
    // Taken back on every exit, a panic included, so the thread is clean.
    let take = scopeguard::guard((), |_| {
        SINK.with(|s| s.borrow_mut().take());
    });
    let r = run(op, root);
    let boxed = SINK
        .with(|s| s.borrow_mut().take())
        .expect("installed above, taken only here");
    scopeguard::ScopeGuard::into_inner(take);
    let any: Box<dyn Any> = boxed;
    let sink = *any.downcast::<S>().expect("the sink installed above");
    (r, sink)
}

fn run(op: &'static str, root: &Tensor) -> Result<()> {
    let _op = crate::alloc::history::op_context(op);
    if root.numel() != 1 {
        bail!(Error::Autograd {
            op,
            msg: format!(
                "the loss must have one element to backward from, got shape {:?}",
                root.shape()
            ),
        });
    }
    let one = super::no_grad(|| root.ones_like())?;
    engine::run_backward_observed(root, one)
}
