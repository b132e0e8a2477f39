//! Reverse-mode automatic differentiation with a deterministic graph lifetime.
//!
//! # Who owns the graph
//!
//! Every differentiable op whose inputs require grad (in grad mode) gives its
//! output a `grad_fn`: an `Arc<Node>` holding the backward function, the
//! tensors it saved, and edges to the nodes (or leaves) of its inputs. The
//! graph is therefore owned by the tensors that can reach it:
//!
//! * when the last handle that reaches a node is dropped, the node, its saved
//!   tensors and everything only it reaches go back to the allocator at once
//!   (iteratively, so a 100,000-op chain cannot overflow the stack);
//! * `backward()` without `retain_graph` releases each node's saved tensors
//!   right after using them, so a second `backward()` is an `Err`;
//! * `item()` and `detach()` give values with no graph at all.
//!
//! Saved tensors are *detached* handles (sharing storage, never the graph),
//! so a node never keeps its own output's node alive: there are no cycles.
//!
//! # Version checks
//!
//! A saved tensor records its storage's version counter. If an in-place op
//! changes the storage before backward, backward returns an `Err` naming the
//! tensor's dtype and shape, the op that saved it, and the expected and found
//! versions, as PyTorch does.

mod checkpoint;
mod engine;
pub(crate) mod formulas;
pub(crate) mod formulas_copy;
pub(crate) mod formulas_index;
pub(crate) mod formulas_matmul;
pub(crate) mod formulas_reduce;
pub(crate) mod formulas_unary;
pub(crate) mod leaf_sink;
pub mod mode;

pub use checkpoint::checkpoint;

pub use mode::{
    enable_grad, enable_grad_guard, inference_mode, inference_mode_guard, is_grad_enabled,
    is_inference_mode, no_grad, no_grad_guard, GradModeGuard,
};

use crate::error::{bail, Error, Result};
use crate::tensor::Tensor;
use crate::tensor::TensorImpl;
use std::sync::{Arc, Mutex};

/// A backward function: the gradient of the output in, one optional gradient
/// per input out (in the order of the inputs given to [`attach`]).
pub(crate) type BackwardFn = Box<dyn Fn(&Tensor) -> Result<Vec<Option<Tensor>>> + Send + Sync>;

/// Where an input's gradient goes.
pub(crate) enum Edge {
    /// Into another op's node.
    Node(Arc<Node>),
    /// Accumulated into a leaf's `grad`.
    Leaf(Arc<TensorImpl>),
}

/// One recorded op.
pub(crate) struct Node {
    pub(crate) name: &'static str,
    /// `None` once released (after a backward without `retain_graph`).
    pub(crate) backward: Mutex<Option<BackwardFn>>,
    /// One entry per input; `None` for inputs that need no gradient.
    pub(crate) next: Vec<Option<Edge>>,
}

impl Drop for Node {
    fn drop(&mut self) {
        // Free the chain iteratively: take our children, and for each one we
        // hold the last reference to, take its children too before it drops.
        let mut stack: Vec<Arc<Node>> = Vec::new();
        for e in self.next.drain(..).flatten() {
            if let Edge::Node(n) = e {
                stack.push(n);
            }
        }
        while let Some(n) = stack.pop() {
            if let Ok(mut node) = Arc::try_unwrap(n) {
                for e in node.next.drain(..).flatten() {
                    if let Edge::Node(c) = e {
                        stack.push(c);
                    }
                }
                // `node` drops here with no children left: no recursion.
            }
        }
    }
}

/// Autograd state of a tensor that requires grad.
pub(crate) struct AutogradMeta {
    /// The op that made this tensor; `None` for a leaf.
    pub(crate) grad_fn: Option<Arc<Node>>,
    /// The accumulated gradient (leaves).
    pub(crate) grad: Mutex<Option<Tensor>>,
    /// `true` for a view of a leaf that requires grad (in-place writes to it are refused).
    pub(crate) view_of_leaf: bool,
}

/// A tensor saved for backward: a detached handle plus the version it had.
pub(crate) struct Saved {
    tensor: Tensor,
    version: u64,
    op: &'static str,
}

impl Saved {
    /// Saves `t` for the backward of `op`. Inference tensors cannot be saved.
    pub(crate) fn new(t: &Tensor, op: &'static str) -> Result<Saved> {
        if t.is_inference() {
            bail!(Error::Autograd {
                op,
                msg: format!(
                    "inference tensors cannot be saved for backward (a {} tensor of shape {:?} made in inference_mode); \
                     make a deep_clone() outside inference_mode to get a normal tensor",
                    t.dtype(),
                    t.shape()
                ),
            });
        }
        Ok(Saved {
            tensor: t.detach_impl(),
            version: t.version(),
            op,
        })
    }

    /// The saved tensor, if it was not modified in place since.
    pub(crate) fn get(&self) -> Result<&Tensor> {
        let now = self.tensor.version();
        if now != self.version {
            bail!(Error::Autograd {
                op: "backward",
                msg: format!(
                    "one of the variables needed for gradient computation has been modified by an inplace operation: \
                     [{} {:?}], which was saved by {}, is at version {}; expected version {} instead",
                    self.tensor.dtype(),
                    self.tensor.shape(),
                    self.op,
                    now,
                    self.version
                ),
            });
        }
        Ok(&self.tensor)
    }
}

/// `true` if an op over `inputs` must record a graph now.
pub(crate) fn needs_grad(inputs: &[&Tensor]) -> bool {
    is_grad_enabled() && inputs.iter().any(|t| t.requires_grad())
}

/// Refuses, in grad mode, an op whose result autograd does not record (an
/// `out=` form, or an in-place write) when one of `inputs` requires grad:
/// the gradient would be lost without a word. PyTorch refuses `out=` with
/// such inputs too; the out-of-place forms record the gradient.
pub(crate) fn check_unrecorded_inputs(op: &'static str, inputs: &[&Tensor]) -> Result<()> {
    if !is_grad_enabled() {
        return Ok(());
    }
    if let Some(t) = inputs.iter().find(|t| t.requires_grad()) {
        bail!(Error::Autograd {
            op,
            msg: format!(
                "an input ({} {:?}) requires grad, and writes into an existing tensor (out= forms, in-place ops) \
                 are not recorded by tensorscope's autograd; use the out-of-place form (it records the gradient), \
                 or write under no_grad",
                t.dtype(),
                t.shape()
            ),
        });
    }
    Ok(())
}

fn edge_of(t: &Tensor) -> Option<Edge> {
    let m = t.inner.autograd.as_ref()?;
    match &m.grad_fn {
        Some(n) => Some(Edge::Node(Arc::clone(n))),
        None => Some(Edge::Leaf(Arc::clone(&t.inner))),
    }
}

/// Gives `out` a node for op `name` over `inputs` with backward `f`, if any
/// input requires grad in grad mode; otherwise returns `out` as it is.
/// `view_of_leaf` marks views of leaves (their in-place writes are refused).
pub(crate) fn attach(out: Tensor, name: &'static str, inputs: &[&Tensor], f: BackwardFn) -> Tensor {
    if !needs_grad(inputs) {
        return out;
    }
    let view_of_leaf = false;
    attach_node(out, name, inputs, f, view_of_leaf)
}

/// [`attach`] for view ops: the output is marked as a view of a leaf when
/// its input is a leaf that requires grad.
pub(crate) fn attach_view(
    out: Tensor,
    name: &'static str,
    input: &Tensor,
    f: BackwardFn,
) -> Tensor {
    if !needs_grad(&[input]) {
        return out;
    }
    let view_of_leaf = input.is_leaf()
        || input
            .inner
            .autograd
            .as_ref()
            .is_some_and(|m| m.view_of_leaf);
    attach_node(out, name, &[input], f, view_of_leaf)
}

pub(crate) fn attach_node(
    out: Tensor,
    name: &'static str,
    inputs: &[&Tensor],
    f: BackwardFn,
    view_of_leaf: bool,
) -> Tensor {
    let node = Arc::new(Node {
        name,
        backward: Mutex::new(Some(f)),
        next: inputs
            .iter()
            .map(|t| if t.requires_grad() { edge_of(t) } else { None })
            .collect(),
    });
    out.with_autograd(AutogradMeta {
        grad_fn: Some(node),
        grad: Mutex::new(None),
        view_of_leaf,
    })
}

impl Tensor {
    /// `true` if gradients flow to or through this tensor.
    pub fn requires_grad(&self) -> bool {
        self.inner.autograd.is_some()
    }

    /// `true` for a tensor not produced by a recorded op (every tensor that
    /// does not require grad, and every `requires_grad` leaf).
    pub fn is_leaf(&self) -> bool {
        self.inner
            .autograd
            .as_ref()
            .is_none_or(|m| m.grad_fn.is_none())
    }

    /// The name of the op that produced this tensor in the graph, if any
    /// (e.g. `"MulBackward"`).
    pub fn grad_fn_name(&self) -> Option<&'static str> {
        self.inner
            .autograd
            .as_ref()?
            .grad_fn
            .as_ref()
            .map(|n| n.name)
    }

    /// This tensor as a leaf that requires (or does not require) grad,
    /// consuming the handle: `Tensor::randn(..)?.requires_grad_(true)?`.
    /// An `Err` for a non-leaf (PyTorch: "you can only change requires_grad
    /// flags of leaf variables").
    pub fn requires_grad_(self, yes: bool) -> Result<Tensor> {
        if !self.is_leaf() {
            bail!(Error::Autograd {
                op: "requires_grad_",
                msg: format!(
                    "you can only change requires_grad of leaf tensors; this one was made by {}",
                    self.grad_fn_name().unwrap_or("?")
                ),
            });
        }
        if yes == self.requires_grad() {
            return Ok(self);
        }
        if yes && !(self.dtype().is_float()) {
            bail!(Error::dtype(
                "requires_grad_",
                "a float dtype (only floating point tensors can require gradients)",
                self.dtype()
            ));
        }
        let plain = self.detach_impl();
        Ok(if yes {
            plain.with_autograd(AutogradMeta {
                grad_fn: None,
                grad: Mutex::new(None),
                view_of_leaf: false,
            })
        } else {
            plain
        })
    }

    /// The accumulated gradient (a new handle to it), if any.
    pub fn grad(&self) -> Option<Tensor> {
        let m = self.inner.autograd.as_ref()?;
        m.grad
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|g| g.alias())
    }

    /// Replaces the accumulated gradient (`None` frees it). An `Err` on a
    /// tensor that does not require grad, or for a gradient of another shape.
    pub fn set_grad(&self, grad: Option<Tensor>) -> Result<()> {
        let Some(m) = self.inner.autograd.as_ref() else {
            bail!(Error::Autograd {
                op: "set_grad",
                msg: "the tensor does not require grad".into()
            });
        };
        if let Some(g) = &grad {
            if g.shape() != self.shape() {
                bail!(Error::shape(
                    "set_grad",
                    self.shape(),
                    g.shape(),
                    "a gradient must have the tensor's shape"
                ));
            }
            // As PyTorch: a gradient of another dtype or device is refused
            // at assignment, not found wrong at the next optimizer step.
            if g.dtype() != self.dtype() {
                bail!(Error::dtype(
                    "set_grad",
                    format!("{} (the tensor's dtype) for its gradient", self.dtype()),
                    g.dtype()
                ));
            }
            if g.device() != self.device() {
                bail!(Error::DeviceMismatch {
                    op: "set_grad",
                    lhs: self.device(),
                    rhs: g.device(),
                });
            }
        }
        *m.grad.lock().unwrap_or_else(|e| e.into_inner()) = grad;
        Ok(())
    }

    /// Sets the gradient to `None`, freeing its memory (PyTorch's default
    /// `zero_grad(set_to_none=True)`). A no-op on tensors without grad.
    pub fn zero_grad(&self) {
        if let Some(m) = self.inner.autograd.as_ref() {
            *m.grad.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
    }

    /// Backpropagates from this one-element tensor (gradient 1), freeing the
    /// graph's saved tensors as it goes.
    pub fn backward(&self) -> Result<()> {
        let _op = crate::alloc::history::op_context("backward");
        if self.numel() != 1 {
            bail!(Error::Autograd {
                op: "backward",
                msg: format!("grad can be implicitly created only for one-element outputs, got shape {:?}; use backward_with", self.shape()),
            });
        }
        let one = crate::autograd::no_grad(|| self.ones_like())?;
        engine::run_backward(self, one, false)
    }

    /// Backpropagates `grad` (of this tensor's shape) from this tensor.
    /// With `retain_graph` the saved tensors are kept for another backward.
    pub fn backward_with(&self, grad: &Tensor, retain_graph: bool) -> Result<()> {
        let _op = crate::alloc::history::op_context("backward");
        if grad.shape() != self.shape() {
            bail!(Error::shape(
                "backward",
                self.shape(),
                grad.shape(),
                "the gradient must have the output's shape"
            ));
        }
        let g = crate::autograd::no_grad(|| grad.to_dtype(self.dtype()))?;
        engine::run_backward(self, g, retain_graph)
    }

    /// `true` if this tensor was made in inference mode.
    pub fn is_inference(&self) -> bool {
        self.inner.inference
    }
}

/// The autograd rules for an in-place write to `t`, checked before anything
/// is written. Under `no_grad` every write is allowed (that is how optimizers
/// update parameters); the version counter still records it, so a saved
/// tensor modified this way is caught at backward.
pub(crate) fn check_inplace(t: &Tensor, op: &'static str) -> Result<()> {
    if !is_grad_enabled() {
        return Ok(());
    }
    let Some(m) = t.inner.autograd.as_ref() else {
        return Ok(());
    };
    let what = if m.grad_fn.is_none() {
        "a leaf tensor that requires grad is being used in an in-place operation"
    } else if m.view_of_leaf {
        "a view of a leaf tensor that requires grad is being used in an in-place operation"
    } else {
        "in-place operations on tensors that require grad are not recorded by tensorscope's autograd; \
         use the out-of-place form, or write under no_grad"
    };
    bail!(Error::Autograd {
        op,
        msg: format!("{what} ({} {:?})", t.dtype(), t.shape())
    })
}
