//! Datasets: [`TensorDataset`] over tensors of equal length, and the
//! compositions [`Subset`], [`ConcatDataset`] and [`random_split`].

use super::{check_slot, index_error, Dataset, Field, Slot};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::random::Generator;
use crate::tensor::Tensor;
use std::sync::Arc;

/// Samples along the first dimension of tensors of equal length (PyTorch's
/// `TensorDataset`): field `k` of sample `i` is `tensors[k][i]`.
///
/// The tensors are kept on the host as contiguous owned handles (a CUDA
/// tensor or a strided view is copied once, here), so `get` is one
/// `memcpy` per field under the storage's read lock.
pub struct TensorDataset {
    tensors: Vec<Tensor>,
    fields: Vec<Field>,
    len: usize,
}

impl TensorDataset {
    /// A dataset over `tensors`: an error for none, for a 0-d tensor, or
    /// for first dimensions that differ (naming every shape).
    pub fn new(tensors: Vec<Tensor>) -> Result<TensorDataset> {
        const OP: &str = "TensorDataset::new";
        let shapes: Vec<Vec<usize>> = tensors.iter().map(|t| t.shape().to_vec()).collect();
        let bad = |msg: String| Error::InvalidArgument { op: OP, msg };
        let Some(first) = shapes.first() else {
            return Err(bad("no tensors".into()));
        };
        if shapes.iter().any(|s| s.is_empty()) {
            return Err(bad(format!(
                "a 0-d tensor has no samples to index (shapes {shapes:?})"
            )));
        }
        let len = first[0];
        if shapes.iter().any(|s| s[0] != len) {
            return Err(bad(format!(
                "the tensors' first dimensions differ: shapes {shapes:?}"
            )));
        }
        let mut host = Vec::with_capacity(tensors.len());
        let mut fields = Vec::with_capacity(tensors.len());
        for (k, t) in tensors.into_iter().enumerate() {
            let t = if t.device().is_cpu() {
                t
            } else {
                t.to_device(Device::Cpu).map_err(|e| e.reported_as(OP))?
            };
            let t = t.contiguous().map_err(|e| e.reported_as(OP))?;
            fields.push(Field::new(
                format!("tensor {k}"),
                &t.shape()[1..],
                t.dtype(),
            ));
            host.push(t);
        }
        Ok(TensorDataset {
            tensors: host,
            fields,
            len,
        })
    }

    /// The host tensors the samples are read from.
    pub fn tensors(&self) -> &[Tensor] {
        &self.tensors
    }
}

impl Dataset for TensorDataset {
    fn len(&self) -> usize {
        self.len
    }

    fn fields(&self) -> &[Field] {
        &self.fields
    }

    fn get(&self, index: usize, slot: &mut Slot<'_>) -> Result<()> {
        if index >= self.len {
            return Err(index_error("TensorDataset::get", index, self.len));
        }
        check_slot("TensorDataset::get", slot, &self.fields)?;
        for (k, (t, f)) in self.tensors.iter().zip(&self.fields).enumerate() {
            let n = f.nbytes();
            let start = t.storage_offset() * t.dtype().size_in_bytes() + index * n;
            let _l = crate::storage::lock(&[t.storage()], &[]);
            // SAFETY: `t` is a contiguous CPU tensor whose storage holds its
            // `len * n` bytes from `storage_offset` (so `start + n` is inside,
            // `index < len`); every byte of a CPU storage is initialised
            // (zeroed segments); the read lock keeps writers out while the
            // bytes are copied.
            let src = unsafe { crate::backend::cpu::slice::<u8>(t.storage(), start, n) };
            slot.bytes_mut(k)?.copy_from_slice(src);
        }
        Ok(())
    }
}

/// The samples of `dataset` at `indices`, in that order (PyTorch's `Subset`).
pub struct Subset<D: ?Sized> {
    dataset: Arc<D>,
    indices: Vec<usize>,
}

impl<D: Dataset + ?Sized> Subset<D> {
    /// A view of `dataset` through `indices`: an error for an index past
    /// its end (naming the first such index).
    pub fn new(dataset: Arc<D>, indices: Vec<usize>) -> Result<Subset<D>> {
        if let Some(&i) = indices.iter().find(|&&i| i >= dataset.len()) {
            return Err(index_error("Subset::new", i, dataset.len()));
        }
        Ok(Subset { dataset, indices })
    }

    /// The indices into the underlying dataset.
    pub fn indices(&self) -> &[usize] {
        &self.indices
    }
}

impl<D: Dataset + ?Sized> Dataset for Subset<D> {
    fn len(&self) -> usize {
        self.indices.len()
    }

    fn fields(&self) -> &[Field] {
        self.dataset.fields()
    }

    fn get(&self, index: usize, slot: &mut Slot<'_>) -> Result<()> {
        match self.indices.get(index) {
            Some(&i) => self.dataset.get(i, slot),
            None => Err(index_error("Subset::get", index, self.indices.len())),
        }
    }
}

/// Datasets of the same fields, one after the other (PyTorch's
/// `ConcatDataset`).
pub struct ConcatDataset {
    parts: Vec<Arc<dyn Dataset>>,
    /// `ends[k]`: the samples in parts `0..=k`.
    ends: Vec<usize>,
}

impl ConcatDataset {
    /// The concatenation of `parts`: an error for none, or for parts whose
    /// fields differ (naming both).
    pub fn new(parts: Vec<Arc<dyn Dataset>>) -> Result<ConcatDataset> {
        const OP: &str = "ConcatDataset::new";
        let Some(first) = parts.first() else {
            return Err(Error::InvalidArgument {
                op: OP,
                msg: "no datasets".into(),
            });
        };
        if let Some((k, p)) = parts
            .iter()
            .enumerate()
            .find(|(_, p)| p.fields() != first.fields())
        {
            return Err(Error::InvalidArgument {
                op: OP,
                msg: format!(
                    "part {k} has fields {:?}, part 0 {:?}",
                    p.fields(),
                    first.fields()
                ),
            });
        }
        let ends = parts
            .iter()
            .scan(0usize, |n, p| {
                *n += p.len();
                Some(*n)
            })
            .collect();
        Ok(ConcatDataset { parts, ends })
    }
}

impl Dataset for ConcatDataset {
    fn len(&self) -> usize {
        self.ends.last().copied().unwrap_or(0)
    }

    fn fields(&self) -> &[Field] {
        self.parts[0].fields()
    }

    fn get(&self, index: usize, slot: &mut Slot<'_>) -> Result<()> {
        // The first part whose end is past `index`.
        let k = self.ends.partition_point(|&e| e <= index);
        if k == self.parts.len() {
            return Err(index_error("ConcatDataset::get", index, self.len()));
        }
        let start = if k == 0 { 0 } else { self.ends[k - 1] };
        self.parts[k].get(index - start, slot)
    }
}

/// Splits `dataset` into random, disjoint [`Subset`]s of the given
/// `lengths`, which must add up to its length (PyTorch's `random_split`
/// with integer lengths): a permutation drawn from `Generator::new(seed)`,
/// so one seed gives one split.
pub fn random_split<D: Dataset + ?Sized>(
    dataset: Arc<D>,
    lengths: &[usize],
    seed: u64,
) -> Result<Vec<Subset<D>>> {
    let total = lengths.iter().try_fold(0usize, |a, &n| a.checked_add(n));
    if total != Some(dataset.len()) {
        return Err(Error::InvalidArgument {
            op: "random_split",
            msg: format!(
                "lengths {lengths:?} add up to {}, the dataset has {} samples",
                total.map_or("more than usize::MAX".to_string(), |t| t.to_string()),
                dataset.len()
            ),
        });
    }
    let perm = super::sampler::permutation(dataset.len(), &mut Generator::new(seed));
    let mut start = 0;
    lengths
        .iter()
        .map(|&n| {
            let part = perm[start..start + n].to_vec();
            start += n;
            Subset::new(dataset.clone(), part)
        })
        .collect()
}
