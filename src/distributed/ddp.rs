//! [`DistributedDataParallel`]: one model replica per rank, kept identical
//! by broadcasting rank 0's parameters and buffers once and averaging the
//! gradients of every step, the reductions overlapping backward.

use super::group::{Fnv, ProcessGroup};
use super::reducer::Reducer;
use crate::autograd::leaf_sink::backward_observed;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::nn::Module;
use crate::tensor::Tensor;

/// How [`DistributedDataParallel`] buckets and synchronises.
#[derive(Clone, Debug)]
pub struct DdpOptions {
    /// The size of a gradient bucket in MiB (PyTorch's `bucket_cap_mb`,
    /// 25). The first bucket, which backward fills first, holds at most
    /// 1 MiB, as PyTorch's does.
    pub bucket_cap_mb: f64,
    /// Broadcast the module's buffers (BatchNorm's running statistics)
    /// from rank 0 before every forward in training mode, as PyTorch does
    /// by default.
    pub broadcast_buffers: bool,
}

impl Default for DdpOptions {
    fn default() -> Self {
        DdpOptions {
            bucket_cap_mb: 25.0,
            broadcast_buffers: true,
        }
    }
}

/// A module trained data-parallel: every rank holds a replica, runs its
/// own batch, and [`backward`](Self::backward) leaves every replica with
/// the gradients averaged over the ranks, so one optimizer step per rank
/// keeps them identical (PyTorch's `DistributedDataParallel`).
///
/// Gradients are copied into flat buckets that are allocated once, when
/// the module is wrapped, and each bucket's sum starts as soon as backward
/// has finished its last gradient. A step allocates nothing besides what
/// the backward of the module itself allocates.
///
/// ```
/// use tensorscope::distributed::{DistributedDataParallel, ProcessGroup};
/// use tensorscope::nn::{Linear, Module};
/// use tensorscope::{DType, Device, Tensor};
/// // Under `mpirun -np N`: `ProcessGroup::mpi()?` (feature `mpi`).
/// let pg = ProcessGroup::single();
/// let mut ddp = DistributedDataParallel::new(Linear::new(4, 2)?, &pg)?;
/// let x = Tensor::randn(&[8, 4], DType::F32, Device::Cpu)?;
/// let loss = ddp.forward(&x)?.square()?.mean_all()?;
/// ddp.backward(&loss)?;
/// assert!(ddp.module().parameters().iter().all(|p| p.grad().is_some()));
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub struct DistributedDataParallel<M: Module> {
    module: M,
    pg: ProcessGroup,
    /// `None` only while a backward holds it, or after a panic in one.
    reducer: Option<Reducer>,
    broadcast_buffers: bool,
    sync: bool,
}

/// The trainable parameters, in the module's order.
fn trainable(m: &dyn Module) -> Vec<(String, &Tensor)> {
    m.named_parameters()
        .into_iter()
        .filter(|(_, p)| p.requires_grad())
        .collect()
}

impl<M: Module> DistributedDataParallel<M> {
    /// Wraps `module` with the default options: see
    /// [`with_options`](Self::with_options).
    pub fn new(module: M, pg: &ProcessGroup) -> Result<Self> {
        Self::with_options(module, pg, DdpOptions::default())
    }

    /// Wraps `module`. Every rank calls it with the same architecture: the
    /// ranks agree on every parameter's and buffer's name, shape and dtype
    /// (an `Err` on every rank if one differs), then take rank 0's values.
    /// The module must be on the CPU (the group's engine is MPI).
    pub fn with_options(mut module: M, pg: &ProcessGroup, opts: DdpOptions) -> Result<Self> {
        const OP: &str = "DistributedDataParallel::new";
        let local = check_local(OP, &module, &opts);
        let cap = (opts.bucket_cap_mb * (1 << 20) as f64) as usize;
        let reducer = Reducer::new(pg.clone(), &trainable(&module), cap.max(1))?;
        let mut fp = Fnv::new(OP);
        for (name, t) in module.named_state() {
            name.bytes().for_each(|b| fp.add(b.into()));
            fp.add(t.dtype() as u64);
            t.shape().iter().for_each(|&d| fp.add(d as u64));
        }
        reducer.layout_words().for_each(|w| fp.add(w));
        pg.agree(OP, &local, fp.0)?;
        local?;
        crate::autograd::no_grad(|| {
            for (_, t) in module.named_parameters_mut() {
                pg.broadcast(t, 0)?;
            }
            Ok::<(), Error>(())
        })
        .map_err(|e| e.reported_as(OP))?;
        Ok(DistributedDataParallel {
            module,
            pg: pg.clone(),
            reducer: Some(reducer),
            broadcast_buffers: opts.broadcast_buffers,
            sync: true,
        })
    }

    /// The module's forward pass, after broadcasting its buffers from
    /// rank 0 in training mode (unless [`DdpOptions::broadcast_buffers`]
    /// is off). Every rank calls it the same number of times.
    pub fn forward(&mut self, x: &Tensor) -> Result<Tensor> {
        if self.broadcast_buffers && self.module.is_training() && self.pg.world_size() > 1 {
            let buffers: Vec<String> = self
                .module
                .named_buffers()
                .into_iter()
                .map(|(n, _)| n)
                .collect();
            if !buffers.is_empty() {
                let pg = &self.pg;
                crate::autograd::no_grad(|| {
                    for (name, t) in self.module.named_parameters_mut() {
                        if buffers.contains(&name) {
                            pg.broadcast(t, 0)?;
                        }
                    }
                    Ok::<(), Error>(())
                })
                .map_err(|e| e.reported_as("DistributedDataParallel::forward"))?;
            }
        }
        self.module.forward(x)
    }

    /// Backpropagates from the one-element `loss` and averages the
    /// gradients across the ranks (unless inside [`no_sync`](Self::no_sync)).
    /// Every rank calls it in every step. A parameter that this rank did
    /// not use still gets the average of the ranks that did; one that no
    /// rank used keeps no gradient (PyTorch needs
    /// `find_unused_parameters=True` for both: GUIDE 10).
    ///
    /// If any rank fails to compute its gradients, every rank gets an
    /// `Err`, and the gradients hold the rank's own values.
    pub fn backward(&mut self, loss: &Tensor) -> Result<()> {
        const OP: &str = "DistributedDataParallel::backward";
        if !self.sync {
            return loss.backward().map_err(|e| e.reported_as(OP));
        }
        let Some(mut reducer) = self.reducer.take() else {
            return Err(Error::Collective {
                op: OP,
                rank: self.pg.rank(),
                msg: "an earlier backward panicked; wrap the module again".into(),
            });
        };
        let params = trainable(&self.module);
        let (local, reducer_back) = match reducer.begin(&params) {
            Ok(()) => backward_observed(OP, loss, reducer),
            Err(e) => (Err(e), reducer),
        };
        reducer = reducer_back;
        let all = reducer.flush(&params, local.is_err());
        let out = match (local, all) {
            (_, Err(e)) | (Err(e), _) => Err(e),
            (Ok(()), Ok(false)) => Err(Error::Collective {
                op: OP,
                rank: self.pg.rank(),
                msg: "another rank failed to compute its gradients in this step; the \
                      gradients hold this rank's own values, not the average"
                    .into(),
            }),
            (Ok(()), Ok(true)) => reducer.write_back(&params),
        };
        self.reducer = Some(reducer);
        out
    }

    /// Runs `f` with gradient averaging off: backwards inside it only
    /// accumulate this rank's gradients, and the first synchronised
    /// backward after it averages the accumulated sums (gradient
    /// accumulation, PyTorch's `no_sync`).
    pub fn no_sync<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> R {
        let was = std::mem::replace(&mut self.sync, false);
        let mut this = scopeguard::guard(self, move |s| s.sync = was);
        f(&mut **this)
    }

    /// The parameters no rank had a gradient for in the last averaged step.
    pub fn unused_parameters(&self) -> Result<Vec<String>> {
        match &self.reducer {
            Some(r) => r.unused(),
            None => Ok(Vec::new()),
        }
    }

    /// How many buckets the gradients are reduced in.
    pub fn bucket_count(&self) -> usize {
        self.reducer.as_ref().map_or(0, Reducer::bucket_count)
    }

    /// The bytes the buckets hold: the whole memory data parallelism adds.
    pub fn bucket_bytes(&self) -> usize {
        self.reducer.as_ref().map_or(0, Reducer::bytes)
    }

    /// The process group.
    pub fn process_group(&self) -> &ProcessGroup {
        &self.pg
    }

    /// The wrapped module.
    pub fn module(&self) -> &M {
        &self.module
    }

    /// The wrapped module, for an optimizer step. Its parameters must keep
    /// their shapes and dtypes (a backward checks).
    pub fn module_mut(&mut self) -> &mut M {
        &mut self.module
    }

    /// The module back, unwrapped.
    pub fn into_inner(self) -> M {
        self.module
    }
}

fn check_local(op: &'static str, m: &dyn Module, opts: &DdpOptions) -> Result<()> {
    if !(opts.bucket_cap_mb.is_finite() && opts.bucket_cap_mb > 0.0) {
        return Err(Error::arg(
            op,
            format!(
                "bucket_cap_mb must be a positive number of MiB, got {}",
                opts.bucket_cap_mb
            ),
        ));
    }
    for (name, t) in m.named_state() {
        if t.device() != Device::Cpu {
            return Err(Error::arg(
                op,
                format!(
                    "{name:?} is on {}; the process group reduces CPU tensors (MPI)",
                    t.device()
                ),
            ));
        }
    }
    Ok(())
}
