//! [`ZeroRedundancyOptimizer`]: ZeRO stage 1. Each rank keeps the
//! optimizer state of its own share of the parameters only, steps that
//! share, and every parameter is then broadcast from the rank that owns it.

use super::group::{Fnv, ProcessGroup};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::nn::Module;
use crate::nn::{save_tensors, Checkpoint};
use crate::optim::Optimizer;
use crate::tensor::Tensor;
use std::path::{Path, PathBuf};

/// A shard file read back: the owners and the inner optimizer's state.
type ShardFile = (Vec<usize>, Vec<(String, Tensor)>);

/// The name of rank `rank`'s shard of `world` in a checkpoint folder.
fn shard_file(dir: &Path, rank: usize, world: usize) -> PathBuf {
    dir.join(format!("zero-rank{rank}-of-{world}.safetensors"))
}

/// An optimizer whose state is sharded over the ranks of a group
/// (PyTorch's `ZeroRedundancyOptimizer`): with gradients already averaged
/// (by [`DistributedDataParallel`](super::DistributedDataParallel)), rank
/// r runs `inner` on the parameters it owns, so the state of Adam's
/// moments is made for those alone: about 1/world of one process's. The
/// updated parameters are then broadcast from their owners, and every
/// replica is the same again.
///
/// Parameters are assigned when the first step sees the model, largest
/// first, each to the rank with the fewest elements so far (ties to the
/// lowest rank), and keep their owner for the optimizer's life.
pub struct ZeroRedundancyOptimizer<O: Optimizer> {
    inner: O,
    pg: ProcessGroup,
    /// Per trainable parameter (in the module's order), its owner.
    owners: Option<Vec<usize>>,
}

/// Rank `rank`'s share of a module, as a module the inner optimizer steps.
struct Shard<'a> {
    params: Vec<(String, &'a mut Tensor)>,
}

impl Module for Shard<'_> {
    fn forward(&self, _: &Tensor) -> Result<Tensor> {
        Err(Error::arg(
            "ZeroRedundancyOptimizer::step",
            "a shard of a module is stepped, never run",
        ))
    }
    fn named_parameters(&self) -> Vec<(String, &Tensor)> {
        self.params.iter().map(|(n, t)| (n.clone(), &**t)).collect()
    }
    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
        self.params
            .iter_mut()
            .map(|(n, t)| (n.clone(), &mut **t))
            .collect()
    }
}

/// Greedy assignment: largest first, each to the least loaded rank.
fn partition(sizes: &[usize], world: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..sizes.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(sizes[i]));
    let mut load = vec![0usize; world];
    let mut owners = vec![0usize; sizes.len()];
    for i in order {
        let r = (0..world).min_by_key(|&r| load[r]).unwrap_or(0);
        owners[i] = r;
        load[r] += sizes[i];
    }
    owners
}

impl<O: Optimizer> ZeroRedundancyOptimizer<O> {
    /// Shards `inner` over `pg`'s ranks. Every rank makes one, with the
    /// same kind of optimizer and settings.
    pub fn new(inner: O, pg: &ProcessGroup) -> Self {
        ZeroRedundancyOptimizer {
            inner,
            pg: pg.clone(),
            owners: None,
        }
    }

    /// The owner of each trainable parameter, in the module's order, once
    /// a step has seen the module.
    pub fn owners(&self) -> Option<&[usize]> {
        self.owners.as_deref()
    }

    /// The optimizer of this rank's share.
    pub fn inner(&self) -> &O {
        &self.inner
    }

    /// Writes this rank's shard of the optimizer state, with the owner of
    /// every parameter, to `dir/zero-rank<r>-of-<world>.safetensors` (the
    /// folder is made if needed) and returns the path. Every rank calls it,
    /// after a step; if any rank fails, every rank gets an `Err`.
    pub fn save_shard(&self, dir: impl AsRef<Path>) -> Result<PathBuf> {
        const OP: &str = "ZeroRedundancyOptimizer::save_shard";
        let path = shard_file(dir.as_ref(), self.pg.rank(), self.pg.world_size());
        let local = self.write_shard(OP, dir.as_ref(), &path);
        self.pg.agree(OP, &local, 0)?;
        local.map(|()| path)
    }

    fn write_shard(&self, op: &'static str, dir: &Path, path: &Path) -> Result<()> {
        let Some(owners) = &self.owners else {
            return Err(Error::arg(op, "no step has run: there is no state to save"));
        };
        std::fs::create_dir_all(dir).map_err(|e| Error::Backend {
            op,
            msg: format!("{}: {e}", dir.display()),
        })?;
        let owners: Vec<i64> = owners.iter().map(|&o| o as i64).collect();
        let mut state = self.inner.state_dict().map_err(|e| e.reported_as(op))?;
        state.push((
            "_zero.owners".into(),
            Tensor::from_slice(&owners, &[owners.len()], Device::Cpu)?,
        ));
        let named: Vec<(&str, &Tensor)> = state.iter().map(|(n, t)| (n.as_str(), t)).collect();
        save_tensors(&named, path).map_err(|e| e.reported_as(op))
    }

    /// Reads this rank's shard written by [`save_shard`](Self::save_shard)
    /// with the same world size: the owners and the inner optimizer's
    /// state. Everything is checked first, and if any rank fails every rank
    /// gets an `Err` with nothing changed.
    pub fn load_shard(&mut self, dir: impl AsRef<Path>) -> Result<()> {
        const OP: &str = "ZeroRedundancyOptimizer::load_shard";
        let (rank, world) = (self.pg.rank(), self.pg.world_size());
        let path = shard_file(dir.as_ref(), rank, world);
        let read = || -> Result<ShardFile> {
            let ckpt = Checkpoint::open(&path)?;
            let mut owners = None;
            let mut state = Vec::new();
            for name in ckpt.names() {
                let t = ckpt.get(name)?;
                if name == "_zero.owners" {
                    owners = Some(t.to_vec::<i64>()?);
                } else {
                    state.push((name.to_string(), t));
                }
            }
            let owners = owners.ok_or_else(|| {
                Error::arg(OP, format!("{} holds no _zero.owners", path.display()))
            })?;
            if let Some(o) = owners.iter().find(|&&o| o < 0 || o as usize >= world) {
                return Err(Error::arg(
                    OP,
                    format!(
                        "{}: owner {o} is no rank of a world of {world}",
                        path.display()
                    ),
                ));
            }
            Ok((owners.into_iter().map(|o| o as usize).collect(), state))
        };
        let local = read().map_err(|e| e.reported_as(OP));
        let checked = local.as_ref().map(|_| ()).map_err(Clone::clone);
        self.pg.agree(OP, &checked, 0)?;
        let (owners, state) = local?;
        self.inner
            .load_state_dict(&state)
            .map_err(|e| e.reported_as(OP))?;
        self.owners = Some(owners);
        Ok(())
    }
}

impl<O: Optimizer> Optimizer for ZeroRedundancyOptimizer<O> {
    /// This rank's share stepped by the inner optimizer, then every
    /// parameter broadcast from its owner. Every rank calls it in every
    /// step; if any rank's share fails to step, every rank gets an `Err`
    /// before any parameter is broadcast.
    fn step(&mut self, model: &mut dyn Module) -> Result<()> {
        const OP: &str = "ZeroRedundancyOptimizer::step";
        let (rank, world) = (self.pg.rank(), self.pg.world_size());
        let trainable: Vec<(String, &mut Tensor)> = model
            .named_parameters_mut()
            .into_iter()
            .filter(|(_, p)| p.requires_grad())
            .collect();
        let first = self.owners.is_none();
        let owners = match &self.owners {
            Some(o) if o.len() == trainable.len() => o.clone(),
            Some(o) => {
                return Err(Error::arg(
                    OP,
                    format!(
                        "the module has {} trainable parameters now, {} at the first step",
                        trainable.len(),
                        o.len()
                    ),
                ));
            }
            None => {
                let sizes: Vec<usize> = trainable.iter().map(|(_, p)| p.numel()).collect();
                partition(&sizes, world)
            }
        };
        // The first step also agrees on the parameters; later ones agree
        // only that every rank's share stepped.
        let mut fp = Fnv::new(OP);
        if first {
            for (name, p) in &trainable {
                name.bytes().for_each(|b| fp.add(b.into()));
                p.shape().iter().for_each(|&d| fp.add(d as u64));
                fp.add(p.dtype() as u64);
            }
        }
        let mut shard = Shard { params: Vec::new() };
        let mut rest = Vec::with_capacity(trainable.len());
        for ((name, p), &o) in trainable.into_iter().zip(&owners) {
            if o == rank {
                shard.params.push((name, p));
            } else {
                rest.push((name, p));
            }
        }
        let local = self.inner.step(&mut shard);
        self.pg.agree(OP, &local, fp.0)?;
        local?;
        drop((shard, rest));
        let _g = crate::autograd::no_grad_guard();
        let trainable = model
            .named_parameters_mut()
            .into_iter()
            .filter(|(_, p)| p.requires_grad());
        for ((_, p), &o) in trainable.zip(&owners) {
            self.pg.broadcast(p, o).map_err(|e| e.reported_as(OP))?;
        }
        self.owners = Some(owners);
        Ok(())
    }

    fn zero_grad(&self, model: &dyn Module) {
        self.inner.zero_grad(model)
    }

    fn lr(&self) -> f64 {
        self.inner.lr()
    }

    fn set_lr(&mut self, lr: f64) {
        self.inner.set_lr(lr)
    }
}
