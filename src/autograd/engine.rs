//! The backward pass: topological order over the nodes reachable from the
//! root, gradients summed per node, leaves accumulated, saved tensors released
//! as soon as their node has run (unless the graph is retained).

use super::leaf_sink::{key_of, observing, with_sink};
use super::{Edge, Node};
use crate::error::{bail, Error, Result};
use crate::tensor::Tensor;
use crate::tensor::TensorImpl;
use std::collections::HashMap;
use std::sync::Arc;

fn key(n: &Arc<Node>) -> usize {
    Arc::as_ptr(n) as usize
}

/// Adds `g` into a leaf's gradient. The first gradient is stored as it is
/// unless its storage is shared (then it is copied, so that a later in-place
/// accumulation can never write into someone else's tensor).
fn accumulate_leaf(leaf: &TensorImpl, g: Tensor) -> Result<()> {
    let Some(m) = leaf.autograd.as_ref() else {
        return Ok(());
    };
    if let Some(r) = with_sink(|s| s.accumulating(key_of(leaf))) {
        r?;
    }
    if g.shape() != leaf.layout.shape() {
        bail!(Error::shape(
            "backward",
            leaf.layout.shape(),
            g.shape(),
            "gradient shape differs from its leaf's shape"
        ));
    }
    let mut slot = m.grad.lock().unwrap_or_else(|e| e.into_inner());
    match slot.as_mut() {
        Some(existing) => {
            existing.add_(&g)?;
        }
        None => {
            let g = if g.storage_use_count() > 1 || !g.is_contiguous() || g.dtype() != leaf.dtype {
                g.to_dtype(leaf.dtype)?.deep_clone()?
            } else {
                g
            };
            *slot = Some(g);
        }
    }
    Ok(())
}

fn add_grad(slot: &mut Option<Tensor>, g: Tensor) -> Result<()> {
    *slot = Some(match slot.take() {
        None => g,
        Some(prev) => prev.add(&g)?,
    });
    Ok(())
}

/// Tells the sink that `leaf` has all its gradient (Note [leaf sink]).
fn finished(leaf: &TensorImpl) -> Result<()> {
    let grad = leaf.autograd.as_ref().and_then(|m| {
        let slot = m.grad.lock().unwrap_or_else(|e| e.into_inner());
        slot.as_ref().map(Tensor::alias)
    });
    with_sink(|s| s.finished(key_of(leaf), grad)).unwrap_or(Ok(()))
}

pub(crate) fn run_backward(root: &Tensor, grad: Tensor, retain_graph: bool) -> Result<()> {
    run(root, grad, retain_graph, false)
}

/// [`run_backward`] as the outermost backward of an observed one: it tells
/// the sink when each leaf is finished (Note [leaf sink]).
pub(super) fn run_backward_observed(root: &Tensor, grad: Tensor) -> Result<()> {
    run(root, grad, false, observing())
}

fn run(root: &Tensor, grad: Tensor, retain_graph: bool, report: bool) -> Result<()> {
    let _no_grad = super::no_grad_guard();
    // Backward runs in the dtypes the forward chose, also inside a region.
    let _no_autocast = crate::autocast::exclude();
    let Some(meta) = root.inner.autograd.as_ref() else {
        bail!(Error::Autograd {
            op: "backward",
            msg: "element 0 of tensors does not require grad and does not have a grad_fn".into(),
        });
    };
    let Some(root_node) = meta.grad_fn.clone() else {
        // A leaf: its gradient is the given one.
        accumulate_leaf(&root.inner, grad)?;
        return if report {
            finished(&root.inner)
        } else {
            Ok(())
        };
    };

    // Count, for every node, how many edges from reachable nodes point at
    // it (and, when reporting, at every leaf).
    let mut deps: HashMap<usize, usize> = HashMap::new();
    let mut leaf_deps: HashMap<usize, usize> = HashMap::new();
    let mut seen: HashMap<usize, ()> = HashMap::new();
    let mut stack = vec![Arc::clone(&root_node)];
    seen.insert(key(&root_node), ());
    while let Some(n) = stack.pop() {
        for e in n.next.iter().flatten() {
            match e {
                Edge::Node(c) => {
                    *deps.entry(key(c)).or_insert(0) += 1;
                    if seen.insert(key(c), ()).is_none() {
                        stack.push(Arc::clone(c));
                    }
                }
                Edge::Leaf(l) if report => *leaf_deps.entry(key_of(l)).or_insert(0) += 1,
                Edge::Leaf(_) => {}
            }
        }
    }

    // Kahn's algorithm from the root.
    let mut grads: HashMap<usize, Option<Tensor>> = HashMap::new();
    grads.insert(key(&root_node), Some(grad));
    let mut ready = vec![root_node];
    while let Some(node) = ready.pop() {
        let g = grads.remove(&key(&node)).flatten();
        let input_grads = {
            let mut f = node.backward.lock().unwrap_or_else(|e| e.into_inner());
            let Some(func) = f.as_ref() else {
                bail!(Error::Autograd {
                    op: "backward",
                    msg: format!(
                        "trying to backward through the graph a second time ({} already released its saved tensors); \
                         pass retain_graph = true to the first backward_with if you need to backward twice",
                        node.name
                    ),
                });
            };
            let out = match g {
                Some(g) => func(&g)?,
                None => (0..node.next.len()).map(|_| None).collect(),
            };
            if !retain_graph {
                *f = None; // release saved tensors now
            }
            out
        };
        if input_grads.len() != node.next.len() {
            bail!(Error::Autograd {
                op: "backward",
                msg: format!(
                    "{} returned {} gradients for {} inputs",
                    node.name,
                    input_grads.len(),
                    node.next.len()
                ),
            });
        }
        for (edge, ig) in node.next.iter().zip(input_grads) {
            match edge {
                None => {}
                Some(Edge::Leaf(leaf)) => {
                    if let Some(ig) = ig {
                        accumulate_leaf(leaf, ig)?;
                    }
                    if report {
                        let d = leaf_deps.get_mut(&key_of(leaf)).expect("counted above");
                        *d -= 1;
                        if *d == 0 {
                            finished(leaf)?;
                        }
                    }
                }
                Some(Edge::Node(c)) => {
                    let k = key(c);
                    let slot = grads.entry(k).or_insert(None);
                    if let Some(ig) = ig {
                        add_grad(slot, ig)?;
                    }
                    let d = deps.get_mut(&k).expect("counted above");
                    *d -= 1;
                    if *d == 0 {
                        ready.push(Arc::clone(c));
                    }
                }
            }
        }
    }
    Ok(())
}
