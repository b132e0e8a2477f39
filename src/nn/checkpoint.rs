//! [`Checkpoint`]: safetensors files opened as name -> tensor, memory-mapped,
//! the tensors made only when asked for.
//!
//! A Hugging Face model directory holds `model.safetensors`, or shards
//! listed by `model.safetensors.index.json`; [`Checkpoint::open`] takes
//! either, the directory, or one file. Opening reads each header with
//! ordinary reads, checks the file's length against it, then maps the file
//! read-only and validates the header again over the mapping with the
//! `safetensors` crate's own parser. Nothing is copied.
//!
//! [`Checkpoint::get`] gives a CPU tensor **over the mapping** (zero copy)
//! when the bytes are of a tensorscope dtype, aligned to its element size,
//! and the machine is little-endian; otherwise (a misaligned tensor, a bool
//! tensor whose bytes must be checked, a big-endian machine) a copy.
//! Each such tensor maps its own bytes privately (copy on write): it is an
//! ordinary CPU tensor, in-place ops included, whose writes reach neither
//! the file nor another tensor read from the same name. Its bytes are not
//! the caching allocator's: [`mapped_memory`](crate::memory::mapped_memory)
//! counts them, [`memory_allocated`](crate::memory::memory_allocated) does
//! not (as PyTorch's does not count a `torch.load(mmap=True)` storage).
//!
//! [`Checkpoint::load_into`] writes a module's parameters from the file
//! straight out of the mapping: by prefix, strict or not, with a renaming
//! and a transforming hook, converting dtypes as PyTorch's
//! `load_state_dict` does. It allocates nothing for a tensor of the
//! parameter's dtype and device (the test asserts the allocator's peak).
//!
//! [`Checkpoint::get_as`] onto a CUDA device copies each tensor's mapped
//! bytes into a pinned block (the pinned allocator's, cached and reused)
//! and queues an asynchronous copy from it on the device's stream, in the
//! file's dtype: the device holds the tensor and, while a conversion runs
//! there, its file-dtype upload; the host holds one tensor's pinned block
//! per copy in flight.
//!
//! # A file changed under the mapping
//!
//! As for [`SafetensorsDataset`](crate::data::SafetensorsDataset): pages
//! are read from the file when first touched, so a checkpoint file
//! truncated while a tensor over it is alive raises `SIGBUS` at the next
//! read of a lost page, which ends the process. tensorscope's own writers
//! ([`save_safetensors`](super::save_safetensors),
//! [`save_tensors`](super::save_tensors)) write a new file and rename it
//! over the old one, so saving to the path a model was loaded from is safe:
//! the mapping keeps the old file. Replace checkpoints the same way.
//!
//! ```
//! use tensorscope::nn::{save_tensors, Checkpoint};
//! use tensorscope::{DType, Device, Tensor};
//! let w = Tensor::arange(0.0, 6.0, 1.0, DType::F32, Device::Cpu)?.view(&[2, 3])?;
//! let path = std::env::temp_dir().join("tensorscope_doc_checkpoint.safetensors");
//! save_tensors(&[("layer.weight", &w)], &path)?;
//!
//! let ckpt = Checkpoint::open(&path)?;
//! assert_eq!(ckpt.names().collect::<Vec<_>>(), ["layer.weight"]);
//! assert_eq!(ckpt.info("layer.weight").unwrap().shape, &[2, 3]);
//! let t = ckpt.get("layer.weight")?;          // over the mapping: no copy
//! assert_eq!(t.to_vec::<f32>()?, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
//! let h = ckpt.get_as("layer.weight", DType::BF16, Device::Cpu)?;
//! assert_eq!(h.dtype(), DType::BF16);
//! assert!(ckpt.get("layer.bias").is_err());
//! # drop((t, h, ckpt)); std::fs::remove_file(&path).ok();
//! # Ok::<(), tensorscope::Error>(())
//! ```

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use safetensors::tensor::{Dtype as StDtype, Metadata, SafeTensors};

use super::state::{from_st_dtype, load_checked, LoadOptions, LoadReport, Sources};
use super::Module;
use crate::backend::cpu::mapped::mapped_storage;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::tensor::Tensor;

/// The largest header the safetensors format allows (its parser's limit).
const MAX_HEADER: u64 = 100_000_000;

/// The file a directory's single-file checkpoint is in.
const SINGLE: &str = "model.safetensors";
/// The index of a directory's sharded checkpoint.
const INDEX: &str = "model.safetensors.index.json";

/// One tensor of a checkpoint: where its bytes are and what they hold.
struct Entry {
    file: usize,
    file_dtype: StDtype,
    dtype: Option<DType>,
    shape: Vec<usize>,
    /// Byte range in the file (and its mapping).
    start: usize,
    len: usize,
}

/// What a checkpoint says of one tensor ([`Checkpoint::info`]).
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo<'a> {
    /// Its shape.
    pub shape: &'a [usize],
    /// Its dtype, `None` for a safetensors dtype tensorscope does not have
    /// (`file_dtype` names it).
    pub dtype: Option<DType>,
    /// The safetensors dtype as the file names it (`F32`, `BF16`, `I8`, ...).
    pub file_dtype: String,
    /// The file it is in.
    pub file: &'a Path,
}

/// One file of a checkpoint, open, and mapped read-only: the header's
/// validation and the tensors that are copied read the mapping; tensors
/// over the file map their own bytes.
struct Shard {
    path: PathBuf,
    file: File,
    map: Mmap,
}

/// Safetensors files opened as name -> tensor (module docs).
pub struct Checkpoint {
    shards: Vec<Shard>,
    entries: BTreeMap<String, Entry>,
}

impl std::fmt::Debug for Checkpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpoint")
            .field(
                "files",
                &self.shards.iter().map(|f| &f.path).collect::<Vec<_>>(),
            )
            .field("tensors", &self.entries.len())
            .finish()
    }
}

/// Reads and checks one file's header with ordinary reads (nothing mapped
/// yet): the parsed metadata, the offset of the data and the file's
/// length. An `Err` saying what is wrong (unreadable, malformed or
/// truncated), for the caller to report under its own op.
pub(crate) fn read_header(file: &mut File) -> std::result::Result<(Metadata, usize, u64), String> {
    let len = file.metadata().map_err(|e| e.to_string())?.len();
    let mut n = [0u8; 8];
    file.read_exact(&mut n)
        .map_err(|e| format!("no safetensors header ({e})"))?;
    let n = u64::from_le_bytes(n);
    if n > MAX_HEADER || 8 + n > len {
        return Err(format!("a header of {n} bytes in a file of {len} bytes"));
    }
    let mut header = vec![0u8; n as usize];
    file.read_exact(&mut header).map_err(|e| e.to_string())?;
    let metadata: Metadata = serde_json::from_slice(&header)
        .map_err(|e| format!("a malformed safetensors header ({e})"))?;
    let want = 8 + n + metadata.data_len() as u64;
    if len != want {
        return Err(format!(
            "{len} bytes, but its header describes {want}{}",
            if len < want { " (truncated)" } else { "" }
        ));
    }
    Ok((metadata, 8 + n as usize, len))
}

impl Checkpoint {
    /// Opens a checkpoint: a `.safetensors` file, a
    /// `model.safetensors.index.json` (its shards are read from the index's
    /// folder), or a folder holding either (the index first). An `Err`
    /// naming `Checkpoint::open` for a path that is none of these, an
    /// unreadable, malformed or truncated file, an index naming a tensor
    /// its shard lacks, or a tensor name in two files.
    pub fn open(path: impl AsRef<Path>) -> Result<Checkpoint> {
        const OP: &str = "Checkpoint::open";
        let path = path.as_ref();
        if path.is_dir() {
            for (name, index) in [(INDEX, true), (SINGLE, false)] {
                let p = path.join(name);
                if p.is_file() {
                    return if index {
                        Checkpoint::open_index(&p)
                    } else {
                        Checkpoint::open_files(&[p])
                    };
                }
            }
            return Err(Error::file(
                OP,
                path,
                format!("a folder without {INDEX} or {SINGLE}"),
            ));
        }
        if path.extension().is_some_and(|e| e == "json") {
            return Checkpoint::open_index(path);
        }
        Checkpoint::open_files(&[path])
    }

    /// Opens the shards listed by a `model.safetensors.index.json`
    /// (`{"weight_map": {name: file}}`) and checks each named tensor is in
    /// its file.
    fn open_index(index: &Path) -> Result<Checkpoint> {
        const OP: &str = "Checkpoint::open";
        let text = std::fs::read(index).map_err(|e| Error::file(OP, index, e))?;
        let not_index =
            |why: String| Error::file(OP, index, format!("not a safetensors index ({why})"));
        let json: serde_json::Value =
            serde_json::from_slice(&text).map_err(|e| not_index(e.to_string()))?;
        let map = json
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| not_index("no \"weight_map\" object".into()))?;
        let mut weight_map: HashMap<String, String> = HashMap::with_capacity(map.len());
        for (name, shard) in map {
            let shard = shard
                .as_str()
                .ok_or_else(|| not_index(format!("{name:?} maps to {shard}, not a file name")))?;
            weight_map.insert(name.clone(), shard.to_string());
        }
        let dir = index.parent().unwrap_or(Path::new("."));
        let mut shards: Vec<&String> = weight_map.values().collect();
        shards.sort();
        shards.dedup();
        let paths: Vec<PathBuf> = shards.iter().map(|s| dir.join(s)).collect();
        let ckpt = Checkpoint::open_files(&paths)?;
        let mut wrong: Vec<String> = weight_map
            .iter()
            .filter(|(name, shard)| {
                ckpt.entries
                    .get(*name)
                    .is_none_or(|e| ckpt.shards[e.file].path != dir.join(shard))
            })
            .map(|(name, shard)| format!("{name:?} (in {shard})"))
            .collect();
        if !wrong.is_empty() {
            wrong.sort();
            return Err(Error::file(
                OP,
                index,
                format!(
                    "the index names tensors its shards lack: {}",
                    wrong.join(", ")
                ),
            ));
        }
        Ok(ckpt)
    }

    /// Opens `paths` as one checkpoint (shards of one model, for example).
    /// Errors as [`open`](Checkpoint::open).
    pub fn open_files(paths: &[impl AsRef<Path>]) -> Result<Checkpoint> {
        const OP: &str = "Checkpoint::open";
        let mut ckpt = Checkpoint {
            shards: Vec::with_capacity(paths.len()),
            entries: BTreeMap::new(),
        };
        for (k, path) in paths.iter().enumerate() {
            let path = path.as_ref();
            let mut file = File::open(path).map_err(|e| Error::file(OP, path, e))?;
            let (_, data_start, len) =
                read_header(&mut file).map_err(|e| Error::file(OP, path, e))?;
            // SAFETY: the file's length was checked against its header just
            // above; a truncation while the mapping lives is the hazard the
            // module docs state (tensorscope's own writers rename instead).
            let map = unsafe { Mmap::map(&file) }.map_err(|e| Error::file(OP, path, e))?;
            if map.len() as u64 != len {
                return Err(Error::file(
                    OP,
                    path,
                    "the file changed while it was opened",
                ));
            }
            // The full validation (offsets contiguous, sizes matching the
            // shapes), over the mapped bytes.
            let (_, metadata) =
                SafeTensors::read_metadata(&map).map_err(|e| Error::file(OP, path, e))?;
            for (name, info) in metadata.tensors() {
                let (s, e) = info.data_offsets;
                let entry = Entry {
                    file: k,
                    file_dtype: info.dtype,
                    dtype: from_st_dtype(info.dtype),
                    shape: info.shape.clone(),
                    start: data_start + s,
                    len: e - s,
                };
                if let Some(other) = ckpt.entries.insert(name.clone(), entry) {
                    return Err(Error::file(
                        OP,
                        path,
                        format!(
                            "tensor {name:?} is also in {}",
                            ckpt.shards[other.file].path.display()
                        ),
                    ));
                }
            }
            ckpt.shards.push(Shard {
                path: path.to_path_buf(),
                file,
                map,
            });
        }
        Ok(ckpt)
    }

    /// The files read, in the order their tensors were indexed.
    pub fn files(&self) -> impl ExactSizeIterator<Item = &Path> {
        self.shards.iter().map(|f| f.path.as_path())
    }

    /// The number of tensors.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// `true` when the files hold no tensor.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The tensors' names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// `true` when a tensor of this name is in the files.
    pub fn contains(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }

    /// The shape and dtype of `name`, without reading its bytes.
    pub fn info(&self, name: &str) -> Option<TensorInfo<'_>> {
        self.entries.get(name).map(|e| TensorInfo {
            shape: &e.shape,
            dtype: e.dtype,
            file_dtype: format!("{:?}", e.file_dtype),
            file: &self.shards[e.file].path,
        })
    }

    /// The bytes of every tensor in the files.
    pub fn nbytes(&self) -> usize {
        self.entries.values().map(|e| e.len).sum()
    }

    /// Tensor `name` as a CPU tensor of the file's dtype, over the mapping
    /// where the module docs say so, a copy otherwise. An `Err` naming
    /// `Checkpoint::get` for a name the files lack (with the nearest names)
    /// or a dtype tensorscope does not have.
    pub fn get(&self, name: &str) -> Result<Tensor> {
        self.tensor("Checkpoint::get", name)
    }

    /// Tensor `name` converted to `dtype` on `device` (the mapping's tensor
    /// itself when both already match). For a CUDA device the file's bytes
    /// go up in the file's dtype through a pinned staging block and an
    /// asynchronous copy on the device's stream, and the conversion runs on
    /// the device (see the module docs). Errors as [`get`](Checkpoint::get),
    /// and the conversion's or the copy's.
    pub fn get_as(&self, name: &str, dtype: DType, device: Device) -> Result<Tensor> {
        const OP: &str = "Checkpoint::get_as";
        let t = self.tensor(OP, name)?;
        if !device.is_cuda() {
            // Both are the tensor itself (an alias) when nothing changes.
            return t.to_dtype(dtype)?.to_device(device);
        }
        // A pinned block from the pinned allocator's cache (reused once its
        // copy has run), so the copy is a DMA and not the driver's own
        // staging of pageable memory; where pinning fails, the plain copy.
        let up = match t.contiguous()?.pin_memory() {
            Ok(pinned) => pinned.to_device_non_blocking(device),
            Err(_) => t.to_device(device),
        }
        .map_err(|e| e.reported_as(OP))?;
        up.to_dtype(dtype)
    }

    /// Writes `model`'s parameters and buffers from this checkpoint (module
    /// docs, [`LoadOptions`]); returns the keys that were missing and
    /// unexpected. Everything is checked before anything is written: one
    /// `Err` naming `Checkpoint::load_into` lists every problem, and the
    /// model is then untouched.
    pub fn load_into(&self, model: &mut dyn Module, options: &LoadOptions) -> Result<LoadReport> {
        self.load_as("Checkpoint::load_into", model, options)
    }

    /// [`load_into`](Checkpoint::load_into) with the op its errors name.
    pub(crate) fn load_as(
        &self,
        op: &'static str,
        model: &mut dyn Module,
        options: &LoadOptions,
    ) -> Result<LoadReport> {
        let keys: Vec<&str> = self.names().collect();
        let unusable = |key: &str| {
            let e = self.entries.get(key)?;
            match e.dtype {
                Some(_) => None,
                None => Some(format!(
                    "dtype {:?} is not supported by tensorscope",
                    e.file_dtype
                )),
            }
        };
        let mut fetch = |key: &str| -> Option<std::result::Result<Tensor, String>> {
            self.entries.get(key)?;
            Some(match unusable(key) {
                Some(why) => Err(why),
                None => self.tensor(op, key).map_err(|err| err.to_string()),
            })
        };
        load_checked(
            model,
            Sources {
                keys: &keys,
                fetch: &mut fetch,
                unusable: &unusable,
            },
            options,
            op,
            Vec::new(),
        )
    }

    fn tensor(&self, op: &'static str, name: &str) -> Result<Tensor> {
        let e = self
            .entries
            .get(name)
            .ok_or_else(|| self.no_such(op, name))?;
        let dtype = e.dtype.ok_or_else(|| {
            Error::arg(
                op,
                format!(
                    "tensor {name:?} has dtype {:?}, which tensorscope does not have",
                    e.file_dtype
                ),
            )
        })?;
        let shard = &self.shards[e.file];
        let layout = Layout::contiguous(&e.shape);
        let size = dtype.size_in_bytes();
        // A mapping starts on a page, so the tensor's address is aligned as
        // its offset in the file is.
        let zero_copy =
            cfg!(target_endian = "little") && dtype != DType::Bool && e.start % size == 0;
        if zero_copy {
            // SAFETY: the range is inside the file (validated against its
            // length at open); truncation is the hazard the module docs state.
            let storage = unsafe { mapped_storage(&shard.file, e.start as u64, e.len) }
                .map_err(|err| Error::file(op, &shard.path, err))?;
            return Ok(Tensor::from_parts(storage, layout, dtype));
        }
        let out = Tensor::alloc(&e.shape, dtype, Device::Cpu)?;
        let src = &shard.map[e.start..e.start + e.len];
        // SAFETY: `out` was just allocated: contiguous, `e.len` bytes (the
        // header's size, validated against the shape and dtype by
        // `read_metadata`), and no other handle to it exists.
        let dst = unsafe { std::slice::from_raw_parts_mut(out.storage().addr() as *mut u8, e.len) };
        dst.copy_from_slice(src);
        if dtype == DType::Bool {
            // A bool element must be 0 or 1; the file may hold any byte.
            for b in dst.iter_mut() {
                *b = u8::from(*b != 0);
            }
        } else if cfg!(target_endian = "big") {
            for c in dst.chunks_exact_mut(size) {
                c.reverse();
            }
        }
        Ok(out)
    }

    fn no_such(&self, op: &'static str, name: &str) -> Error {
        // The names sharing the longest prefix with the one asked for.
        let common = |k: &str| {
            k.bytes()
                .zip(name.bytes())
                .take_while(|(a, b)| a == b)
                .count()
        };
        let best = self.names().map(common).max().unwrap_or(0);
        let near: Vec<&str> = self.names().filter(|k| common(k) == best).take(5).collect();
        Error::arg(
            op,
            format!(
                "no tensor {name:?} in the checkpoint ({} tensors; nearest {near:?})",
                self.len()
            ),
        )
    }
}
