//! [`SafetensorsDataset`]: samples read lazily from a memory-mapped
//! safetensors file, only the rows asked for.
//!
//! A file holds one tensor per field, each `[len, ...sample shape]` (as
//! `safetensors.torch.save_file({"x": x, "y": y}, path)` or
//! [`save_tensors`](crate::nn::save_tensors) writes it). Opening reads and
//! checks the header with ordinary reads, then checks the file's length
//! against it *before* mapping; [`Dataset::get`] copies sample `i`'s row of
//! each field from the mapping into the loader's slot, so only the pages of
//! the samples read are ever loaded from disk. Several files (shards) are a
//! [`ConcatDataset`](super::ConcatDataset) of one dataset each.
//!
//! # A file changed under the mapping
//!
//! Reading a page of a mapped file past its end raises `SIGBUS`, which
//! ends the process. Before each sample, `get` compares the open file's
//! length and modification time with those it mapped, and a difference is
//! an [`Error::Data`] naming the sample and the file: a file truncated or
//! rewritten between samples is reported, not read. What remains: a
//! truncation *during* the copy of one sample (between the check and the
//! read, a window of microseconds) still raises `SIGBUS`, and no check can
//! close it without giving up the mapping; a rewrite in place that keeps
//! the length within the file system's time resolution (nanoseconds on
//! ext4 and xfs, 2 s on FAT) goes unseen, and the samples read show the
//! new bytes. Replace dataset files
//! atomically (write a new file, then rename it over the old one): an open
//! dataset keeps reading the old file's pages, which stay valid.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use memmap2::Mmap;

use super::{check_slot, index_error, Dataset, Field, Slot};
use crate::error::{Error, Result};

/// Samples read lazily from a memory-mapped safetensors file (see the
/// module docs for what the checks before each sample cover).
///
/// ```
/// use std::sync::Arc;
/// use tensorscope::data::{DataLoader, Dataset, SafetensorsDataset};
/// use tensorscope::{nn::save_tensors, DType, Device, Tensor};
/// let x = Tensor::arange(0.0, 12.0, 1.0, DType::F32, Device::Cpu)?.view(&[6, 2])?;
/// let y = Tensor::arange(0.0, 6.0, 1.0, DType::I64, Device::Cpu)?;
/// let path = std::env::temp_dir().join("tensorscope_doc_lazy.safetensors");
/// save_tensors(&[("x", &x), ("y", &y)], &path)?;
///
/// let ds = Arc::new(SafetensorsDataset::open(&path, &["x", "y"])?);
/// assert_eq!(ds.len(), 6);
/// let mut loader = DataLoader::builder(ds).batch_size(4).num_workers(1).build()?;
/// let mut epoch = loader.epoch();
/// let batch = epoch.next().unwrap()?;
/// assert_eq!(batch.field(0)?.to_vec::<f32>()?, (0..8).map(|v| v as f32).collect::<Vec<_>>());
/// assert_eq!(batch.field(1)?.to_vec::<i64>()?, vec![0, 1, 2, 3]);
/// # drop(batch); drop(epoch); std::fs::remove_file(&path).ok();
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub struct SafetensorsDataset {
    path: PathBuf,
    file: File,
    map: Mmap,
    len: usize,
    fields: Vec<Field>,
    /// Per field: the file offset of its first sample.
    starts: Vec<usize>,
    /// The file's length and modification time when it was mapped.
    stamp: (u64, Option<SystemTime>),
}

impl SafetensorsDataset {
    /// Opens `path` with the tensors named in `fields` as the fields of each
    /// sample, in that order. An `Err` naming `SafetensorsDataset::open` and
    /// the file for a file that cannot be read, a malformed or truncated
    /// one, a name the file lacks, a dtype tensorscope does not have, a
    /// scalar tensor, or tensors of different lengths.
    pub fn open(path: impl AsRef<Path>, fields: &[&str]) -> Result<SafetensorsDataset> {
        let path = path.as_ref().to_path_buf();
        let bad = |msg: String| Error::InvalidArgument {
            op: "SafetensorsDataset::open",
            msg: format!("{}: {msg}", path.display()),
        };
        let io = |e: std::io::Error| bad(e.to_string());
        let mut file = File::open(&path).map_err(io)?;
        let (metadata, data_start, len) =
            crate::nn::checkpoint::read_header(&mut file).map_err(bad)?;
        let stamp = (len, file.metadata().map_err(io)?.modified().ok());
        let mut out_fields = Vec::with_capacity(fields.len());
        let mut starts = Vec::with_capacity(fields.len());
        let mut len = None;
        for &name in fields {
            let info = metadata.info(name).ok_or_else(|| {
                let mut have: Vec<String> = metadata.tensors().into_keys().collect();
                have.sort();
                bad(format!("no tensor {name:?} (it has {have:?})"))
            })?;
            let dtype = crate::nn::state::from_st_dtype(info.dtype).ok_or_else(|| {
                bad(format!(
                    "tensor {name:?} has dtype {:?}, which tensorscope does not have",
                    info.dtype
                ))
            })?;
            let Some((&rows, sample)) = info.shape.split_first() else {
                return Err(bad(format!(
                    "tensor {name:?} is a scalar: a field needs a first dimension of samples"
                )));
            };
            match len {
                Some(l) if l != rows => {
                    return Err(bad(format!(
                        "tensor {name:?} has {rows} samples, {:?} has {l}",
                        fields[0]
                    )))
                }
                _ => len = Some(rows),
            }
            // The ring sizes its buffers from this: a product that cannot
            // overflow later (a tensor of 0 samples passes safetensors'
            // own size check whatever its other dimensions).
            sample
                .iter()
                .try_fold(dtype.size_in_bytes(), |a, &d| a.checked_mul(d))
                .ok_or_else(|| bad(format!("tensor {name:?}: a sample of {sample:?} overflows")))?;
            out_fields.push(Field::new(name, sample, dtype));
            starts.push(data_start + info.data_offsets.0);
        }
        let len = len.ok_or_else(|| bad("no fields asked for".into()))?;
        // SAFETY: the mapping is read-only and private to this dataset. The
        // file may still be changed by another process while it is mapped
        // (memmap2's reason for `unsafe`): its length was checked against
        // the header just above, and `get` re-checks length and time
        // before each read; the module docs state the window that remains.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        if map.len() as u64 != stamp.0 {
            return Err(bad("the file changed while it was opened".into()));
        }
        Ok(SafetensorsDataset {
            path,
            file,
            map,
            len,
            fields: out_fields,
            starts,
            stamp,
        })
    }

    /// The file read.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn data_error(&self, index: usize, msg: String) -> Error {
        Error::Data {
            op: "SafetensorsDataset::get",
            index,
            msg: format!("{}: {msg}", self.path.display()),
        }
    }
}

impl Dataset for SafetensorsDataset {
    fn len(&self) -> usize {
        self.len
    }

    fn fields(&self) -> &[Field] {
        &self.fields
    }

    fn get(&self, index: usize, slot: &mut Slot<'_>) -> Result<()> {
        if index >= self.len {
            return Err(index_error("SafetensorsDataset::get", index, self.len));
        }
        check_slot("SafetensorsDataset::get", slot, &self.fields)?;
        let meta = self
            .file
            .metadata()
            .map_err(|e| self.data_error(index, e.to_string()))?;
        let now = (meta.len(), meta.modified().ok());
        if now != self.stamp {
            return Err(self.data_error(
                index,
                format!(
                    "the file changed after it was opened ({} bytes then, {} now{}): \
                     reopen it (and replace dataset files by renaming, not in place)",
                    self.stamp.0,
                    now.0,
                    if now.0 == self.stamp.0 {
                        ", modified"
                    } else {
                        ""
                    }
                ),
            ));
        }
        for (k, (f, &start)) in self.fields.iter().zip(&self.starts).enumerate() {
            let n = f.nbytes();
            let from = start + index * n;
            // In bounds: `open` checked that the file holds `len` rows of
            // every field at these offsets, and the length has not changed.
            let src = &self.map[from..from + n];
            let dst = slot.bytes_mut(k)?;
            dst.copy_from_slice(src);
            if cfg!(target_endian = "big") {
                // safetensors is little-endian; slots hold native order.
                for e in dst.chunks_exact_mut(f.dtype.size_in_bytes()) {
                    e.reverse();
                }
            }
        }
        Ok(())
    }
}
