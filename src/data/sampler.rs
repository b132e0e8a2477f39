//! Samplers: the order in which a loader visits a dataset's indices, one
//! epoch at a time.
//!
//! A [`Sampler`] is a function of the epoch number: `indices(epoch)` gives
//! that epoch's order, so a shuffled sampler draws a new permutation each
//! epoch (from its seed and the epoch, reproducibly: PyTorch's
//! `DistributedSampler.set_epoch` made part of every sampler), and a loader
//! restarted at epoch `e` sees the order it saw the first time.

use crate::error::{Error, Result};
use crate::random::Generator;

/// An order of indices for each epoch.
pub trait Sampler: Send + Sync {
    /// The indices of epoch `epoch`.
    fn indices(&self, epoch: u64) -> Vec<usize>;
    /// How many indices each epoch has.
    fn len(&self) -> usize;
    /// Whether an epoch is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<S: Sampler + ?Sized> Sampler for Box<S> {
    fn indices(&self, epoch: u64) -> Vec<usize> {
        (**self).indices(epoch)
    }
    fn len(&self) -> usize {
        (**self).len()
    }
}

/// `0, 1, ..., n - 1` every epoch.
#[derive(Clone, Debug)]
pub struct SequentialSampler {
    n: usize,
}

impl SequentialSampler {
    /// Over `n` samples.
    pub fn new(n: usize) -> SequentialSampler {
        SequentialSampler { n }
    }
}

impl Sampler for SequentialSampler {
    fn indices(&self, _epoch: u64) -> Vec<usize> {
        (0..self.n).collect()
    }
    fn len(&self) -> usize {
        self.n
    }
}

/// The generator of epoch `epoch` of a sampler seeded `seed`.
fn epoch_generator(seed: u64, epoch: u64) -> Generator {
    // Distinct, well-mixed streams per (seed, epoch) pair.
    Generator::new(seed ^ epoch.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17))
}

/// A uniform integer in `0..n` (`n > 0`), without modulo bias.
fn below(g: &mut Generator, n: usize) -> usize {
    let n = n as u64;
    // Rejection of the short last block of 2^64 mod n values.
    let zone = u64::MAX - (u64::MAX % n + 1) % n;
    loop {
        let r = g.next_u64();
        if r <= zone {
            return (r % n) as usize;
        }
    }
}

/// A uniformly random permutation of `0..n` (Fisher-Yates).
pub(crate) fn permutation(n: usize, g: &mut Generator) -> Vec<usize> {
    let mut p: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        p.swap(i, below(g, i + 1));
    }
    p
}

/// A new random permutation of `0..n` each epoch, from `seed` and the
/// epoch (PyTorch's `RandomSampler` without replacement, with a
/// generator).
#[derive(Clone, Debug)]
pub struct RandomSampler {
    n: usize,
    seed: u64,
}

impl RandomSampler {
    /// Over `n` samples.
    pub fn new(n: usize, seed: u64) -> RandomSampler {
        RandomSampler { n, seed }
    }
}

impl Sampler for RandomSampler {
    fn indices(&self, epoch: u64) -> Vec<usize> {
        permutation(self.n, &mut epoch_generator(self.seed, epoch))
    }
    fn len(&self) -> usize {
        self.n
    }
}

/// `num_samples` indices drawn with probability proportional to
/// `weights`, with or without replacement (PyTorch's
/// `WeightedRandomSampler`).
#[derive(Clone, Debug)]
pub struct WeightedRandomSampler {
    weights: Vec<f64>,
    num_samples: usize,
    replacement: bool,
    seed: u64,
}

impl WeightedRandomSampler {
    /// An error for a negative, NaN or infinite weight, for weights whose
    /// sum overflows, for weights that are all 0, and, without
    /// replacement, for more samples than non-zero weights.
    pub fn new(
        weights: Vec<f64>,
        num_samples: usize,
        replacement: bool,
        seed: u64,
    ) -> Result<WeightedRandomSampler> {
        let bad = |msg: String| Error::InvalidArgument {
            op: "WeightedRandomSampler::new",
            msg,
        };
        if let Some((i, w)) = weights
            .iter()
            .enumerate()
            .find(|(_, w)| !w.is_finite() || **w < 0.0)
        {
            return Err(bad(format!(
                "weight {i} is {w}: weights must be finite and >= 0"
            )));
        }
        let total: f64 = weights.iter().sum();
        if !total.is_finite() {
            return Err(bad(format!(
                "the weights add up to {total}: scale them down"
            )));
        }
        let positive = weights.iter().filter(|&&w| w > 0.0).count();
        if positive == 0 && num_samples > 0 {
            return Err(bad(format!(
                "all {} weights are 0: nothing to draw",
                weights.len()
            )));
        }
        if !replacement && num_samples > positive {
            return Err(bad(format!(
                "{num_samples} samples without replacement, but only {positive} weights are > 0"
            )));
        }
        Ok(WeightedRandomSampler {
            weights,
            num_samples,
            replacement,
            seed,
        })
    }
}

impl Sampler for WeightedRandomSampler {
    fn indices(&self, epoch: u64) -> Vec<usize> {
        let mut g = epoch_generator(self.seed, epoch);
        if self.replacement {
            // Inverse CDF on the running sums.
            let cdf: Vec<f64> = self
                .weights
                .iter()
                .scan(0.0, |s, &w| {
                    *s += w;
                    Some(*s)
                })
                .collect();
            let total = cdf.last().copied().unwrap_or(0.0);
            (0..self.num_samples)
                .map(|_| {
                    let u = g.next_f64() * total;
                    // The first index whose running sum passes u, skipping
                    // zero weights (their sum equals the previous one).
                    cdf.partition_point(|&c| c <= u).min(cdf.len() - 1)
                })
                .collect()
        } else {
            // Without replacement: the `num_samples` smallest keys
            // -ln(u) / w (exponential races, Efraimidis-Spirakis), which
            // draw in proportion to the remaining weights.
            let mut keys: Vec<(f64, usize)> = self
                .weights
                .iter()
                .enumerate()
                .filter(|&(_, &w)| w > 0.0)
                .map(|(i, &w)| (-(1.0 - g.next_f64()).ln() / w, i))
                .collect();
            keys.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            keys.into_iter()
                .take(self.num_samples)
                .map(|(_, i)| i)
                .collect()
        }
    }
    fn len(&self) -> usize {
        self.num_samples
    }
}

/// This rank's share of `n` samples, for data parallelism over
/// `world_size` processes (PyTorch's `DistributedSampler`): every rank
/// shuffles with the same seed and epoch, the order is padded by repeating
/// its start to a multiple of `world_size` (or cut down to one, with
/// `drop_last`), and rank `r` takes every `world_size`-th index from `r`.
/// The ranks' shares are then disjoint (but for the padding) and equal in
/// size, so that no rank waits at a collective for another's extra batch.
#[derive(Clone, Debug)]
pub struct DistributedSampler {
    n: usize,
    rank: usize,
    world_size: usize,
    shuffle: bool,
    seed: u64,
    drop_last: bool,
}

impl DistributedSampler {
    /// An error for `world_size == 0` or `rank >= world_size`.
    pub fn new(
        n: usize,
        rank: usize,
        world_size: usize,
        shuffle: bool,
        seed: u64,
        drop_last: bool,
    ) -> Result<DistributedSampler> {
        if world_size == 0 || rank >= world_size {
            return Err(Error::InvalidArgument {
                op: "DistributedSampler::new",
                msg: format!("rank {rank} of a world of size {world_size}"),
            });
        }
        Ok(DistributedSampler {
            n,
            rank,
            world_size,
            shuffle,
            seed,
            drop_last,
        })
    }

    /// The length of the padded (or cut) order all ranks share.
    fn total(&self) -> usize {
        if self.drop_last {
            self.n / self.world_size * self.world_size
        } else {
            self.n.div_ceil(self.world_size) * self.world_size
        }
    }
}

impl Sampler for DistributedSampler {
    fn indices(&self, epoch: u64) -> Vec<usize> {
        let mut order = if self.shuffle {
            permutation(self.n, &mut epoch_generator(self.seed, epoch))
        } else {
            (0..self.n).collect()
        };
        let total = self.total();
        if order.is_empty() {
            return Vec::new();
        }
        // Pad by repeating from the start (as many times as needed).
        let mut k = 0;
        while order.len() < total {
            order.push(order[k]);
            k += 1;
        }
        order.truncate(total);
        order
            .into_iter()
            .skip(self.rank)
            .step_by(self.world_size)
            .collect()
    }
    fn len(&self) -> usize {
        self.total() / self.world_size
    }
}

/// Groups another sampler's indices into batches of `batch_size`; the
/// last, shorter batch is kept unless `drop_last`.
pub struct BatchSampler<S> {
    sampler: S,
    batch_size: usize,
    drop_last: bool,
}

impl<S: Sampler> BatchSampler<S> {
    /// An error for `batch_size == 0`.
    pub fn new(sampler: S, batch_size: usize, drop_last: bool) -> Result<BatchSampler<S>> {
        if batch_size == 0 {
            return Err(Error::InvalidArgument {
                op: "BatchSampler::new",
                msg: "batch_size 0".into(),
            });
        }
        Ok(BatchSampler {
            sampler,
            batch_size,
            drop_last,
        })
    }

    /// The batches of epoch `epoch`.
    pub fn batches(&self, epoch: u64) -> Vec<Vec<usize>> {
        let idx = self.sampler.indices(epoch);
        idx.chunks(self.batch_size)
            .filter(|c| !self.drop_last || c.len() == self.batch_size)
            .map(<[usize]>::to_vec)
            .collect()
    }

    /// Batches per epoch.
    pub fn len(&self) -> usize {
        let n = self.sampler.len();
        if self.drop_last {
            n / self.batch_size
        } else {
            n.div_ceil(self.batch_size)
        }
    }

    /// Whether an epoch has no batch.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The batch size.
    pub fn batch_size(&self) -> usize {
        self.batch_size
    }
}
