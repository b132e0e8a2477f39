//! Feeding the model: datasets that write samples where the caller says, and
//! the samplers that order them.
//!
//! The design follows from the loader this module is building towards: a
//! `DataLoader` whose batches live in a fixed ring of buffers allocated
//! once (two for double buffering, three for triple), so that an epoch
//! allocates nothing per batch. A [`Dataset`] therefore never returns a
//! fresh tensor: [`Dataset::get`] writes sample `i` into a [`Slot`], one
//! byte buffer per [`Field`] of the sample, which the loader points at the
//! sample's place inside the batch buffer (the collate step is the write
//! itself). PyTorch's `Dataset.__getitem__` returns new tensors that its
//! collate function then copies again.
//!
//! What is here: the [`Dataset`] trait, [`TensorDataset`], the lazy
//! [`SafetensorsDataset`] (a memory-mapped file, read per sample),
//! [`Subset`], [`ConcatDataset`] and [`random_split`]; the samplers
//! ([`SequentialSampler`], [`RandomSampler`], [`WeightedRandomSampler`],
//! [`DistributedSampler`], [`BatchSampler`]); and the [`DataLoader`]: worker
//! threads, a prefetch depth, and a ring of batch buffers allocated once,
//! with a device half filled on its own CUDA stream from pinned host
//! buffers for a GPU target.
//!
//! ```
//! use tensorscope::data::{Dataset, TensorDataset};
//! use tensorscope::{Device, Tensor};
//! let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2], Device::Cpu)?;
//! let y = Tensor::from_slice(&[0i64, 1, 0], &[3], Device::Cpu)?;
//! let ds = TensorDataset::new(vec![x, y])?;
//! assert_eq!(ds.len(), 3);
//! // Sample 1 into caller-owned buffers, one per field.
//! let (mut xb, mut yb) = ([0u8; 8], [0u8; 8]);
//! ds.get(1, &mut ds.slot(&mut [&mut xb[..], &mut yb[..]])?)?;
//! assert_eq!(f32::from_ne_bytes(xb[4..].try_into().unwrap()), 4.0);
//! assert_eq!(i64::from_ne_bytes(yb), 1);
//! # Ok::<(), tensorscope::Error>(())
//! ```

mod dataset;
mod device_ring;
mod lazy;
mod loader;
mod sampler;

pub use dataset::{random_split, ConcatDataset, Subset, TensorDataset};
pub use lazy::SafetensorsDataset;
pub use loader::{Batch, DataLoader, DataLoaderBuilder, Epoch};
pub use sampler::{
    BatchSampler, DistributedSampler, RandomSampler, Sampler, SequentialSampler,
    WeightedRandomSampler,
};

use crate::dtype::{DType, Element};
use crate::error::{Error, Result};

/// One field of a sample (an input, a label, ...): its shape without the
/// batch dimension, and its dtype. Every sample of a dataset has the same
/// fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    /// A name for messages (`"x"`, `"label"`, ...).
    pub name: String,
    /// The shape of one sample of this field.
    pub shape: Vec<usize>,
    /// Its dtype.
    pub dtype: DType,
}

impl Field {
    /// A field.
    pub fn new(name: impl Into<String>, shape: &[usize], dtype: DType) -> Field {
        Field {
            name: name.into(),
            shape: shape.to_vec(),
            dtype,
        }
    }

    /// Elements in one sample of the field.
    pub fn numel(&self) -> usize {
        crate::layout::numel(&self.shape)
    }

    /// Bytes in one sample of the field.
    pub fn nbytes(&self) -> usize {
        self.numel() * self.dtype.size_in_bytes()
    }
}

/// Where [`Dataset::get`] writes one sample: one buffer of exactly
/// [`Field::nbytes`] bytes per field, in the dataset's field order.
pub struct Slot<'a> {
    fields: &'a [Field],
    bufs: &'a mut [&'a mut [u8]],
}

impl<'a> Slot<'a> {
    /// A slot over `bufs`; an error unless there is one buffer per field,
    /// each of the field's size.
    pub fn new(fields: &'a [Field], bufs: &'a mut [&'a mut [u8]]) -> Result<Slot<'a>> {
        if bufs.len() != fields.len() {
            return Err(Error::InvalidArgument {
                op: "Slot::new",
                msg: format!(
                    "{} buffers for a sample of {} fields ({:?})",
                    bufs.len(),
                    fields.len(),
                    fields.iter().map(|f| &f.name).collect::<Vec<_>>()
                ),
            });
        }
        for (f, b) in fields.iter().zip(bufs.iter()) {
            if b.len() != f.nbytes() {
                return Err(Error::InvalidArgument {
                    op: "Slot::new",
                    msg: format!(
                        "a buffer of {} bytes for field `{}` ({:?} {}, {} bytes)",
                        b.len(),
                        f.name,
                        f.shape,
                        f.dtype,
                        f.nbytes()
                    ),
                });
            }
        }
        Ok(Slot { fields, bufs })
    }

    /// The fields this slot holds.
    pub fn fields(&self) -> &[Field] {
        self.fields
    }

    /// Makes every byte of each bool field 0 or 1 (nonzero is true), as a
    /// bool tensor's elements must be: [`bytes_mut`](Self::bytes_mut)
    /// lets a dataset write any byte.
    pub(crate) fn normalise_bools(&mut self) {
        for (f, b) in self.fields.iter().zip(self.bufs.iter_mut()) {
            if f.dtype == DType::Bool {
                for v in b.iter_mut() {
                    *v = u8::from(*v != 0);
                }
            }
        }
    }

    /// The raw bytes of field `k` (native byte order; for a bool field,
    /// 0 is false and any other byte true).
    pub fn bytes_mut(&mut self, k: usize) -> Result<&mut [u8]> {
        let n = self.bufs.len();
        self.bufs
            .get_mut(k)
            .map(|b| &mut **b)
            .ok_or(Error::IndexOutOfRange {
                op: "Slot::bytes_mut",
                index: k as i64,
                dim: 0,
                size: n,
            })
    }

    /// Writes `values` into field `k`: an error unless `T` is the field's
    /// dtype and `values` holds exactly one sample of it.
    pub fn write<T: Element>(&mut self, k: usize, values: &[T]) -> Result<()> {
        let f = self.fields.get(k).cloned();
        let buf = self.bytes_mut(k)?;
        let f = f.expect("bytes_mut checked k");
        if T::DTYPE != f.dtype {
            return Err(Error::DTypeMismatch {
                op: "Slot::write",
                expected: f.dtype.to_string(),
                got: T::DTYPE,
            });
        }
        if values.len() != f.numel() {
            return Err(Error::InvalidArgument {
                op: "Slot::write",
                msg: format!(
                    "{} values for field `{}` of shape {:?} ({} elements)",
                    values.len(),
                    f.name,
                    f.shape,
                    f.numel()
                ),
            });
        }
        // SAFETY: `values` is `values.len() * size_of::<T>()` initialised bytes
        // (Element types are plain numbers without padding), and `buf` has
        // exactly that many (checked: `f.nbytes()` at `Slot::new`).
        let src = unsafe {
            std::slice::from_raw_parts(values.as_ptr() as *const u8, std::mem::size_of_val(values))
        };
        buf.copy_from_slice(src);
        Ok(())
    }
}

/// A collection of samples of fixed [`Field`]s, read by index into a
/// caller-given [`Slot`]. `Send + Sync`: loader workers read one dataset
/// from several threads.
pub trait Dataset: Send + Sync {
    /// The number of samples.
    fn len(&self) -> usize;

    /// Whether there are no samples.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The fields of every sample.
    fn fields(&self) -> &[Field];

    /// Writes sample `index` into `slot`; an `Err` (naming the index) for an
    /// index out of range or a sample that cannot be read.
    fn get(&self, index: usize, slot: &mut Slot<'_>) -> Result<()>;

    /// A [`Slot`] over `bufs` for this dataset's fields.
    fn slot<'a>(&'a self, bufs: &'a mut [&'a mut [u8]]) -> Result<Slot<'a>> {
        Slot::new(self.fields(), bufs)
    }
}

/// An error unless `slot` is for exactly `fields` (a slot made for another
/// dataset's samples).
pub(crate) fn check_slot(op: &'static str, slot: &Slot<'_>, fields: &[Field]) -> Result<()> {
    if slot.fields() == fields {
        return Ok(());
    }
    Err(Error::InvalidArgument {
        op,
        msg: format!(
            "a slot for fields {:?}, the dataset has {:?}",
            slot.fields(),
            fields
        ),
    })
}

/// The error for an index past a dataset's end.
pub(crate) fn index_error(op: &'static str, index: usize, len: usize) -> Error {
    Error::IndexOutOfRange {
        op,
        index: index as i64,
        dim: 0,
        size: len,
    }
}
