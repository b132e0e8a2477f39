//! Grad modes: `no_grad`, `enable_grad` and `inference_mode`, as RAII guards
//! and as closures. They are thread-local and nest; a guard restores the
//! previous mode when it is dropped, also during a panic.

use std::cell::Cell;
use std::marker::PhantomData;

thread_local! {
    static GRAD_ENABLED: Cell<bool> = const { Cell::new(true) };
    static INFERENCE: Cell<bool> = const { Cell::new(false) };
}

/// `true` when ops record a graph (the default; false under `no_grad` and
/// `inference_mode`).
pub fn is_grad_enabled() -> bool {
    GRAD_ENABLED.with(|g| g.get())
}

/// `true` inside `inference_mode`.
pub fn is_inference_mode() -> bool {
    INFERENCE.with(|g| g.get())
}

/// Restores the previous grad mode when dropped. Not `Send`: the mode is
/// thread-local. Bind it to a named variable (`let _g = ...`), not `_`, or it
/// is dropped at once.
#[must_use = "the mode lasts only while the guard lives; bind it with `let _guard = ...`"]
pub struct GradModeGuard {
    prev_grad: bool,
    prev_inference: bool,
    _not_send: PhantomData<*const ()>,
}

impl GradModeGuard {
    fn set(grad: bool, inference: bool) -> GradModeGuard {
        let g = GradModeGuard { prev_grad: is_grad_enabled(), prev_inference: is_inference_mode(), _not_send: PhantomData };
        GRAD_ENABLED.with(|c| c.set(grad));
        INFERENCE.with(|c| c.set(inference));
        g
    }
}

impl Drop for GradModeGuard {
    fn drop(&mut self) {
        GRAD_ENABLED.with(|c| c.set(self.prev_grad));
        INFERENCE.with(|c| c.set(self.prev_inference));
    }
}

/// Disables graph recording until the guard drops (PyTorch's `torch.no_grad()`).
pub fn no_grad_guard() -> GradModeGuard {
    GradModeGuard::set(false, is_inference_mode())
}

/// Enables graph recording until the guard drops (`torch.enable_grad()`);
/// inside inference mode it has no effect on inference tensors.
pub fn enable_grad_guard() -> GradModeGuard {
    GradModeGuard::set(true, false)
}

/// Inference mode until the guard drops (`torch.inference_mode()`): no graph,
/// and tensors made here are *inference tensors*, which autograd refuses to
/// save for backward later.
pub fn inference_mode_guard() -> GradModeGuard {
    GradModeGuard::set(false, true)
}

/// Runs `f` without recording a graph.
pub fn no_grad<R>(f: impl FnOnce() -> R) -> R {
    let _g = no_grad_guard();
    f()
}

/// Runs `f` with graph recording enabled.
pub fn enable_grad<R>(f: impl FnOnce() -> R) -> R {
    let _g = enable_grad_guard();
    f()
}

/// Runs `f` in inference mode.
pub fn inference_mode<R>(f: impl FnOnce() -> R) -> R {
    let _g = inference_mode_guard();
    f()
}
