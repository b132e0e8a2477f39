//! `Sequential`: a chain of modules that manages its intermediates' lifetimes
//! and donates buffers to layers that can work in place.

use super::prune::PruneTarget;
use super::Module;
use crate::autograd::needs_grad;
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use std::sync::atomic::{AtomicUsize, Ordering};

/// What a layer that can work in place may do with an owned input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Write in place: the only handle, no graph needs it, a float dtype and
    /// a layout without internal overlap.
    Taken,
    /// Another handle (an alias, a view, a saved tensor) shares the buffer.
    Shared,
    /// It requires grad in grad mode: a graph would need it.
    Autograd,
    /// Not a float dtype, or an expanded layout (one element at many places).
    Other,
}

/// The donation rule shared by every in-place-capable layer and by
/// [`Sequential`]'s statistics.
pub(crate) fn donation_verdict(x: &Tensor) -> Verdict {
    if !x.is_exclusive() {
        Verdict::Shared
    } else if needs_grad(&[x]) {
        Verdict::Autograd
    } else if !x.dtype().is_float() || x.layout().has_internal_overlap() {
        Verdict::Other
    } else {
        Verdict::Taken
    }
}

/// Donation counters of a [`Sequential`] (see [`Sequential::donation_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DonationStats {
    /// Owned intermediates handed to in-place-capable layers.
    pub offered: usize,
    /// Of those, buffers the layer could overwrite (no allocation).
    pub taken: usize,
    /// Refused: another handle (alias, view or saved-for-backward copy) shares the buffer.
    pub refused_shared: usize,
    /// Refused: the tensor requires grad in grad mode (a graph needs it).
    pub refused_autograd: usize,
    /// Refused: non-float dtype or a layout with internal overlap (expanded).
    pub refused_other: usize,
    /// Calls of an in-place-capable layer on a borrowed tensor (the first
    /// layer of [`forward`](Module::forward)): never written, not offered.
    pub borrowed: usize,
}

/// A chain of modules, applied in order.
///
/// * **Lifetimes.** The loop owns each intermediate and drops it as soon as
///   the next layer has consumed it, so nothing outlives its use unless
///   autograd saved it for backward. In inference a chain of equal-width
///   layers peaks at two activations whatever its length.
/// * **Donation.** Given an owned input ([`forward_owned`](Module::forward_owned)),
///   each layer whose [`can_work_in_place`](Module::can_work_in_place) is
///   `true` (activations, Dropout, nested all-in-place `Sequential`s) receives
///   the intermediate by value; it overwrites it when the handle is the only
///   one to its storage and no graph needs it, and allocates otherwise. Later
///   intermediates of [`forward`](Module::forward) are owned as well, but the
///   caller's borrowed tensor is never written.
/// * **Statistics.** [`donation_stats`](Sequential::donation_stats) counts the
///   decisions.
/// * **Parameters** are named `"{index}.{name}"`; `named_parameters_mut`
///   lists every child's trainable parameters first, then every child's
///   buffers (the contract of the [module docs](super)).
///
/// ```
/// use tensorscope::nn::{Linear, Module, ReLU, Sequential, Tanh};
/// use tensorscope::{autograd, DType, Device, Tensor};
/// let mut net = Sequential::new();
/// net.add(Linear::new(8, 8)?).add(ReLU).add(Tanh);
/// let x = Tensor::randn(&[2, 8], DType::F32, Device::Cpu)?;
/// let y = autograd::no_grad(|| net.forward_owned(x))?;
/// assert_eq!(y.shape(), &[2, 8]);
/// let s = net.donation_stats();
/// assert_eq!((s.offered, s.taken), (2, 2)); // ReLU and Tanh wrote in place
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub struct Sequential {
    layers: Vec<Box<dyn Module>>,
    /// Each layer's name: its index unless given by [`Sequential::add_named`].
    names: Vec<String>,
    training: bool,
    offered: AtomicUsize,
    taken: AtomicUsize,
    refused_shared: AtomicUsize,
    refused_autograd: AtomicUsize,
    refused_other: AtomicUsize,
    borrowed: AtomicUsize,
}

impl Sequential {
    /// An empty chain (the identity), in training mode.
    pub fn new() -> Sequential {
        Sequential {
            layers: Vec::new(),
            names: Vec::new(),
            training: true,
            offered: AtomicUsize::new(0),
            taken: AtomicUsize::new(0),
            refused_shared: AtomicUsize::new(0),
            refused_autograd: AtomicUsize::new(0),
            refused_other: AtomicUsize::new(0),
            borrowed: AtomicUsize::new(0),
        }
    }

    /// Appends a layer; returns `self` for chaining.
    pub fn add<M: Module + 'static>(&mut self, layer: M) -> &mut Sequential {
        self.add_boxed(Box::new(layer))
    }

    /// Appends a boxed layer.
    pub fn add_boxed(&mut self, layer: Box<dyn Module>) -> &mut Sequential {
        self.names.push(self.layers.len().to_string());
        self.layers.push(layer);
        self
    }

    /// Appends a layer under `name` (PyTorch's `Sequential(OrderedDict(..))`):
    /// its parameters are `name.weight`, ... in
    /// [`named_parameters`](Module::named_parameters) and checkpoints, and
    /// the memory history's module path names it (`encoder.fc1`). An `Err`
    /// naming `Sequential::add_named` if `name` is empty, holds a `.`, or
    /// names another layer already.
    ///
    /// ```
    /// use tensorscope::nn::{Linear, Module, ReLU, Sequential};
    /// let mut net = Sequential::new();
    /// net.add_named("fc1", Linear::new(4, 8)?)?.add(ReLU);
    /// let names: Vec<String> = net.named_parameters().into_iter().map(|(n, _)| n).collect();
    /// assert_eq!(names, ["fc1.weight", "fc1.bias"]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn add_named<M: Module + 'static>(
        &mut self,
        name: &str,
        layer: M,
    ) -> Result<&mut Sequential> {
        let why = if name.is_empty() {
            Some("is empty".to_string())
        } else if name.contains('.') {
            Some("holds a '.', which separates a module path's parts".to_string())
        } else if name.bytes().all(|b| b.is_ascii_digit()) {
            Some("is a number, the name of an unnamed layer at that index".to_string())
        } else if self.names.iter().any(|n| n == name) {
            Some(format!(
                "names layer {} already",
                self.names.iter().position(|n| n == name).unwrap_or(0)
            ))
        } else {
            None
        };
        if let Some(why) = why {
            return Err(Error::InvalidArgument {
                op: "Sequential::add_named",
                msg: format!("the layer name {name:?} {why}"),
            });
        }
        self.add(layer);
        if let Some(last) = self.names.last_mut() {
            *last = name.to_string();
        }
        Ok(self)
    }

    /// The layers' names, in order (an index where none was given).
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Number of layers.
    pub fn len(&self) -> usize {
        self.layers.len()
    }

    /// `true` with no layers.
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    /// The layers.
    pub fn layers(&self) -> &[Box<dyn Module>] {
        &self.layers
    }

    /// The donation counters since creation or the last reset.
    pub fn donation_stats(&self) -> DonationStats {
        let l = |a: &AtomicUsize| a.load(Ordering::Relaxed);
        DonationStats {
            offered: l(&self.offered),
            taken: l(&self.taken),
            refused_shared: l(&self.refused_shared),
            refused_autograd: l(&self.refused_autograd),
            refused_other: l(&self.refused_other),
            borrowed: l(&self.borrowed),
        }
    }

    /// Sets every donation counter to 0.
    pub fn reset_donation_stats(&self) {
        for a in [
            &self.offered,
            &self.taken,
            &self.refused_shared,
            &self.refused_autograd,
            &self.refused_other,
            &self.borrowed,
        ] {
            a.store(0, Ordering::Relaxed);
        }
    }

    fn count(&self, v: Verdict) {
        self.offered.fetch_add(1, Ordering::Relaxed);
        let c = match v {
            Verdict::Taken => &self.taken,
            Verdict::Shared => &self.refused_shared,
            Verdict::Autograd => &self.refused_autograd,
            Verdict::Other => &self.refused_other,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Runs `layers` over the owned `x`; each intermediate is dropped as the
    /// next one is produced.
    fn run_owned<'a>(
        &self,
        layers: impl Iterator<Item = (usize, &'a Box<dyn Module>)>,
        mut cur: Tensor,
    ) -> Result<Tensor> {
        for (i, layer) in layers {
            // The memory history's module path ("2.0": layer 0 of the
            // `Sequential` at index 2; a layer's name if it has one).
            let _m = crate::alloc::history::module_context(|| self.names[i].clone());
            cur = if layer.can_work_in_place() {
                self.count(donation_verdict(&cur));
                layer.forward_owned(cur)?
            } else {
                // `cur` is dropped at the assignment, right after its use.
                layer.forward(&cur)?
            };
        }
        Ok(cur)
    }
}

impl Default for Sequential {
    fn default() -> Sequential {
        Sequential::new()
    }
}

impl Module for Sequential {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut it = self.layers.iter().enumerate();
        let Some((_, first)) = it.next() else {
            return Ok(x.alias());
        };
        if first.can_work_in_place() {
            self.borrowed.fetch_add(1, Ordering::Relaxed);
        }
        let cur = {
            let _m = crate::alloc::history::module_context(|| self.names[0].clone());
            first.forward(x)?
        };
        self.run_owned(it, cur)
    }

    fn forward_owned(&self, x: Tensor) -> Result<Tensor> {
        self.run_owned(self.layers.iter().enumerate(), x)
    }

    fn can_work_in_place(&self) -> bool {
        !self.layers.is_empty() && self.layers.iter().all(|l| l.can_work_in_place())
    }

    fn named_parameters(&self) -> Vec<(String, &Tensor)> {
        let mut v = Vec::new();
        for (i, l) in self.layers.iter().enumerate() {
            for (n, t) in l.named_parameters() {
                v.push((format!("{}.{n}", self.names[i]), t));
            }
        }
        v
    }

    fn named_buffers(&self) -> Vec<(String, &Tensor)> {
        let mut v = Vec::new();
        for (i, l) in self.layers.iter().enumerate() {
            for (n, t) in l.named_buffers() {
                v.push((format!("{}.{n}", self.names[i]), t));
            }
        }
        v
    }

    /// `"<layer>.<name>"`: the layer's own target `<name>`.
    fn prune_target(&mut self, name: &str) -> Option<PruneTarget<'_>> {
        let (layer, rest) = name.split_once('.')?;
        let i = self.names.iter().position(|n| n == layer)?;
        self.layers[i].prune_target(rest)
    }

    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
        let trainable: Vec<usize> = self
            .layers
            .iter()
            .map(|l| l.named_parameters().len())
            .collect();
        let mut params = Vec::new();
        let mut buffers = Vec::new();
        for (i, (l, name)) in self.layers.iter_mut().zip(&self.names).enumerate() {
            for (k, (n, t)) in l.named_parameters_mut().into_iter().enumerate() {
                let named = (format!("{name}.{n}"), t);
                if k < trainable[i] {
                    params.push(named);
                } else {
                    buffers.push(named);
                }
            }
        }
        params.extend(buffers);
        params
    }

    fn train(&mut self, on: bool) {
        self.training = on;
        for l in &mut self.layers {
            l.train(on);
        }
    }

    fn is_training(&self) -> bool {
        self.training
    }
}
