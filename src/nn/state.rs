//! Checkpoints: `state_dict`, `snapshot`, `load_state_dict`, and safetensors
//! files that PyTorch's `safetensors.torch.save_file` / `load_file` read and
//! write.
//!
//! Loading checks everything first (missing keys, unexpected keys, shapes,
//! dtypes, unsupported file dtypes) and returns one `Err` listing every
//! problem; only when nothing is wrong are the parameters overwritten, so a
//! failed load leaves the model exactly as it was.
//!
//! ```
//! use tensorscope::nn::{load_safetensors, save_safetensors, snapshot, Module};
//! use tensorscope::{DType, Device, Tensor};
//!
//! struct Line { w: Tensor }
//! impl Module for Line {
//!     fn forward(&self, x: &Tensor) -> tensorscope::Result<Tensor> { x.mul(&self.w) }
//!     fn named_parameters(&self) -> Vec<(String, &Tensor)> { vec![("w".into(), &self.w)] }
//!     fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> { vec![("w".into(), &mut self.w)] }
//! }
//!
//! let mut model = Line { w: Tensor::ones(&[2], DType::F32, Device::Cpu)?.requires_grad_(true)? };
//! let best = snapshot(&model)?;                      // independent copies
//! let path = std::env::temp_dir().join("tensorscope_doc_line.safetensors");
//! save_safetensors(&model, &path)?;
//! tensorscope::autograd::no_grad(|| model.w.fill_(5.0).map(|_| ()))?;
//! assert_eq!(best[0].1.to_vec::<f32>()?, vec![1.0, 1.0]); // the snapshot did not move
//! load_safetensors(&mut model, &path)?;
//! assert_eq!(model.w.to_vec::<f32>()?, vec![1.0, 1.0]);
//! # std::fs::remove_file(&path).ok();
//! # Ok::<(), tensorscope::Error>(())
//! ```

use std::collections::{HashMap, HashSet};
use std::path::Path;

use safetensors::tensor::{Dtype as StDtype, TensorView};

use super::Module;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{bail, Error, Result};
use crate::tensor::Tensor;

/// Every parameter and buffer of `model` (BatchNorm's running statistics)
/// as a detached, independent copy, in [`Module::named_state`] order (the
/// parameters, then the buffers). The copies share nothing with the model: a
/// later update does not change them.
pub fn state_dict(model: &dyn Module) -> Result<Vec<(String, Tensor)>> {
    let _g = crate::autograd::no_grad_guard();
    model
        .named_state()
        .into_iter()
        .map(|(n, p)| Ok((n, p.detach().deep_clone()?)))
        .collect()
}

/// The "best weights" pattern: a detached, independent copy of every
/// parameter (the same as [`state_dict`]), to restore later with
/// [`load_state_dict`].
pub fn snapshot(model: &dyn Module) -> Result<Vec<(String, Tensor)>> {
    state_dict(model)
}

/// How [`Checkpoint::load_into`](super::Checkpoint::load_into) maps a
/// module's parameters to a checkpoint's keys: PyTorch's
/// `load_state_dict(strict=...)` with a prefix and two hooks.
///
/// The key of parameter `name` is `prefix + rename(name)` (by default
/// `prefix + name`). Keys under the prefix that no parameter takes are
/// *unexpected*; parameters whose key is absent are *missing*. Strict (the
/// default) makes either an error; otherwise both are returned in the
/// [`LoadReport`] and the missing parameters keep their values. A shape
/// that does not match is an error either way (as in PyTorch). A dtype
/// that does not match is converted, as `param.copy_(value)` converts.
///
/// ```
/// use tensorscope::nn::LoadOptions;
/// // GPT-2's `Conv1D` stores `[in, out]`: transpose into a `Linear`'s
/// // `[out, in]` (a view: the copy into the parameter reads it strided).
/// let opts = LoadOptions::new()
///     .prefix("transformer.")
///     .strict(false)
///     .rename(|name| name.replace("blocks.", "h."))
///     .transform(|name, t| if name.ends_with("c_attn.weight") { t.t() } else { Ok(t) });
/// # let _ = opts;
/// ```
#[allow(clippy::type_complexity)]
pub struct LoadOptions<'a> {
    prefix: String,
    strict: bool,
    rename: Option<Box<dyn Fn(&str) -> String + 'a>>,
    transform: Option<Box<dyn Fn(&str, Tensor) -> Result<Tensor> + 'a>>,
}

impl Default for LoadOptions<'_> {
    fn default() -> Self {
        LoadOptions::new()
    }
}

impl<'a> LoadOptions<'a> {
    /// Strict, no prefix, names as they are.
    pub fn new() -> Self {
        LoadOptions {
            prefix: String::new(),
            strict: true,
            rename: None,
            transform: None,
        }
    }

    /// Keys are `prefix` followed by the parameter's (renamed) name; only
    /// keys under `prefix` can be unexpected.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// `false` reports missing and unexpected keys instead of refusing them.
    pub fn strict(mut self, strict: bool) -> Self {
        self.strict = strict;
        self
    }

    /// Maps a parameter's name to its key (before the prefix).
    pub fn rename(mut self, f: impl Fn(&str) -> String + 'a) -> Self {
        self.rename = Some(Box::new(f));
        self
    }

    /// Turns the checkpoint's tensor for parameter `name` into the value
    /// to copy (a transpose, a slice, a reshape); its shape is then checked
    /// against the parameter's. An `Err` from it is listed with the others.
    pub fn transform(mut self, f: impl Fn(&str, Tensor) -> Result<Tensor> + 'a) -> Self {
        self.transform = Some(Box::new(f));
        self
    }

    fn key(&self, name: &str) -> String {
        match &self.rename {
            Some(f) => format!("{}{}", self.prefix, f(name)),
            None => format!("{}{name}", self.prefix),
        }
    }
}

/// What a load left out: PyTorch's `_IncompatibleKeys`. Both lists are
/// empty after a strict load (which refuses otherwise).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// Keys the model's parameters asked for that the checkpoint lacks
    /// (those parameters kept their values), in the model's order.
    pub missing_keys: Vec<String>,
    /// Keys under the prefix that no parameter took, sorted.
    pub unexpected_keys: Vec<String>,
    /// The number of parameters and buffers written.
    pub loaded: usize,
}

/// Overwrites the model's parameters in place (under `no_grad`) with the
/// values of `state`: a strict [`LoadOptions::new`] load. Everything is
/// checked first; an `Err` lists every missing key, unexpected key and
/// shape mismatch, and leaves the model untouched. A value of another dtype
/// is converted, one on another device copied across, as PyTorch's
/// `load_state_dict` does (each straight into its parameter: nothing is
/// staged on the parameter's device first).
pub fn load_state_dict(model: &mut dyn Module, state: &[(String, Tensor)]) -> Result<()> {
    load_state_dict_with(model, state, &LoadOptions::new()).map(|_| ())
}

/// [`load_state_dict`] with [`LoadOptions`] (prefix, strictness, hooks).
pub fn load_state_dict_with(
    model: &mut dyn Module,
    state: &[(String, Tensor)],
    options: &LoadOptions,
) -> Result<LoadReport> {
    const OP: &str = "load_state_dict";
    let mut by_name: HashMap<&str, &Tensor> = HashMap::new();
    let mut dups = Vec::new();
    for (n, t) in state {
        if by_name.insert(n.as_str(), t).is_some() {
            dups.push(format!("duplicate key {n:?}"));
        }
    }
    let mut keys: Vec<&str> = by_name.keys().copied().collect();
    keys.sort_unstable();
    let mut fetch = |k: &str| by_name.get(k).map(|t| Ok(t.alias()));
    load_checked(
        model,
        Sources {
            keys: &keys,
            fetch: &mut fetch,
            unusable: &|_| None,
        },
        options,
        OP,
        dups,
    )
}

/// The tensors a load reads: every key (sorted), and each key's tensor, or
/// why it cannot be used (a dtype tensorscope does not have).
#[allow(clippy::type_complexity)]
pub(crate) struct Sources<'a, 'k> {
    pub keys: &'a [&'k str],
    pub fetch: &'a mut dyn FnMut(&str) -> Option<std::result::Result<Tensor, String>>,
    /// Why a key's tensor cannot be used, without making it.
    pub unusable: &'a dyn Fn(&str) -> Option<String>,
}

/// Checks every parameter's key, value and shape, and only when nothing is
/// wrong (`problems`, found by the caller, included) copies the values in.
/// The copies come after every check, so only a device failing during one
/// (a lost GPU) can leave the parameters partly written.
pub(crate) fn load_checked(
    model: &mut dyn Module,
    src: Sources,
    options: &LoadOptions,
    op: &'static str,
    mut problems: Vec<String>,
) -> Result<LoadReport> {
    let _g = crate::autograd::no_grad_guard();
    let mut params = model.named_parameters_mut();
    let mut missing = Vec::new();
    let mut taken: HashSet<String> = HashSet::new();
    let mut values: Vec<Option<Tensor>> = Vec::with_capacity(params.len());
    for (name, p) in params.iter() {
        let key = options.key(name);
        let label = if key == *name {
            format!("{name:?}")
        } else {
            format!("{key:?} (parameter {name:?})")
        };
        let got = (src.fetch)(&key);
        if got.is_some() {
            taken.insert(key.clone());
        }
        let value = match got {
            None => {
                missing.push(key);
                None
            }
            Some(Err(why)) => {
                problems.push(format!("{label}: {why}"));
                None
            }
            Some(Ok(t)) => match &options.transform {
                Some(f) => match f(name, t) {
                    Ok(t) => Some(t),
                    Err(e) => {
                        problems.push(format!("{label}: the transform failed: {e}"));
                        None
                    }
                },
                None => Some(t),
            },
        };
        if let Some(v) = value.as_ref().filter(|v| v.shape() != p.shape()) {
            problems.push(format!(
                "{label}: shape {:?} in the checkpoint, {:?} in the model",
                v.shape(),
                p.shape()
            ));
        }
        values.push(value);
    }
    let unexpected: Vec<String> = src
        .keys
        .iter()
        .filter(|k| k.starts_with(options.prefix.as_str()) && !taken.contains(**k))
        .map(|k| k.to_string())
        .collect();
    if options.strict {
        for k in &unexpected {
            if let Some(why) = (src.unusable)(k) {
                problems.push(format!("{k:?}: {why}"));
            }
        }
        if !unexpected.is_empty() {
            problems.insert(0, format!("unexpected keys {unexpected:?}"));
        }
        if !missing.is_empty() {
            problems.insert(0, format!("missing keys {missing:?}"));
        }
    }
    if !problems.is_empty() {
        bail!(Error::arg(
            op,
            format!(
                "the checkpoint does not fit the model: {}",
                problems.join("; ")
            )
        ));
    }
    let mut loaded = 0;
    for ((_, p), v) in params.iter_mut().zip(values) {
        if let Some(v) = v {
            p.copy_(&v)?;
            loaded += 1;
        }
    }
    Ok(LoadReport {
        missing_keys: missing,
        unexpected_keys: unexpected,
        loaded,
    })
}

fn to_st_dtype(d: DType) -> StDtype {
    match d {
        DType::F32 => StDtype::F32,
        DType::F64 => StDtype::F64,
        DType::F16 => StDtype::F16,
        DType::BF16 => StDtype::BF16,
        DType::I64 => StDtype::I64,
        DType::I32 => StDtype::I32,
        DType::U8 => StDtype::U8,
        DType::Bool => StDtype::BOOL,
    }
}

/// tensorscope's dtype for a safetensors dtype, if it has one.
pub(crate) fn from_st_dtype(d: StDtype) -> Option<DType> {
    Some(match d {
        StDtype::F32 => DType::F32,
        StDtype::F64 => DType::F64,
        StDtype::F16 => DType::F16,
        StDtype::BF16 => DType::BF16,
        StDtype::I64 => DType::I64,
        StDtype::I32 => DType::I32,
        StDtype::U8 => DType::U8,
        StDtype::BOOL => DType::Bool,
        _ => return None,
    })
}

/// The little-endian bytes of `t` in row-major order.
fn tensor_bytes(t: &Tensor) -> Result<Vec<u8>> {
    let t = t.to_device(Device::Cpu)?;
    fn le<T: crate::dtype::Element, const N: usize>(
        t: &Tensor,
        f: impl Fn(T) -> [u8; N],
    ) -> Result<Vec<u8>> {
        Ok(t.to_vec::<T>()?.into_iter().flat_map(f).collect())
    }
    match t.dtype() {
        DType::F32 => le(&t, f32::to_le_bytes),
        DType::F64 => le(&t, f64::to_le_bytes),
        DType::F16 => le(&t, crate::f16::to_le_bytes),
        DType::BF16 => le(&t, crate::bf16::to_le_bytes),
        DType::I64 => le(&t, i64::to_le_bytes),
        DType::I32 => le(&t, i32::to_le_bytes),
        DType::U8 => le(&t, |v: u8| [v]),
        DType::Bool => le(&t, |v: bool| [u8::from(v)]),
    }
}

/// Writes every parameter and buffer of `model` ([`Module::named_state`]) to
/// a safetensors file at `path` (PyTorch's `safetensors.torch.load_file`
/// reads it, and `load_state_dict(strict=True)` accepts it). An `Err`
/// (naming `save_safetensors`) if the file cannot be written.
pub fn save_safetensors(model: &dyn Module, path: impl AsRef<Path>) -> Result<()> {
    let _g = crate::autograd::no_grad_guard();
    let params = model.named_state();
    let named: Vec<(&str, &Tensor)> = params.iter().map(|(n, p)| (n.as_str(), *p)).collect();
    write_file("save_safetensors", &named, path.as_ref())
}

/// Writes named tensors (of any device, layout and dtype) to a safetensors
/// file at `path`: PyTorch's `safetensors.torch.save_file(dict, path)`. For
/// example a dataset for [`SafetensorsDataset`](crate::data::SafetensorsDataset)
/// to read lazily. An `Err` naming `save_tensors` for two tensors of one
/// name or a file that cannot be written.
///
/// ```
/// use tensorscope::{nn::save_tensors, DType, Device, Tensor};
/// let x = Tensor::zeros(&[4, 3], DType::F32, Device::Cpu)?;
/// let path = std::env::temp_dir().join("tensorscope_doc_save_tensors.safetensors");
/// save_tensors(&[("x", &x)], &path)?;
/// assert!(save_tensors(&[("x", &x), ("x", &x)], &path).is_err());
/// # std::fs::remove_file(&path).ok();
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub fn save_tensors(tensors: &[(&str, &Tensor)], path: impl AsRef<Path>) -> Result<()> {
    write_file("save_tensors", tensors, path.as_ref())
}

fn write_file(op: &'static str, tensors: &[(&str, &Tensor)], path: &Path) -> Result<()> {
    let mut names = HashSet::new();
    if let Some((dup, _)) = tensors.iter().find(|(n, _)| !names.insert(*n)) {
        bail!(Error::InvalidArgument {
            op,
            msg: format!("two tensors named {dup:?}"),
        });
    }
    let mut bytes = Vec::with_capacity(tensors.len());
    for (n, p) in tensors {
        bytes.push((
            n.to_string(),
            p.dtype(),
            p.shape().to_vec(),
            tensor_bytes(p)?,
        ));
    }
    let views = bytes
        .iter()
        .map(|(n, d, s, b)| {
            TensorView::new(to_st_dtype(*d), s.clone(), b)
                .map(|v| (n.clone(), v))
                .map_err(|e| Error::Backend {
                    op,
                    msg: format!("{n:?}: {e}"),
                })
        })
        .collect::<Result<Vec<_>>>()?;
    // A new file renamed over the old one: a checkpoint mapped from `path`
    // keeps reading the old file, where a write in place would truncate
    // it under the mapping (`checkpoint`'s module docs).
    let name = path.file_name().ok_or_else(|| Error::Backend {
        op,
        msg: format!("{}: not a file name", path.display()),
    })?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".tmp{}", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let written = safetensors::tensor::serialize_to_file(views, None, &tmp)
        .map_err(|e| e.to_string())
        .and_then(|()| std::fs::rename(&tmp, path).map_err(|e| e.to_string()));
    written.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        Error::Backend {
            op,
            msg: format!("{}: {e}", path.display()),
        }
    })
}

/// Reads a safetensors file (for example one written by PyTorch's
/// `safetensors.torch.save_file`) and loads it as [`load_state_dict`] does:
/// everything is checked first, one `Err` lists every problem (including
/// tensors of a dtype tensorscope does not have), and a failed load leaves
/// the model untouched. An unreadable or malformed file is an
/// [`Error::Backend`] naming `load_safetensors` and the path. For a
/// prefix, a non-strict load or a sharded checkpoint, open a
/// [`Checkpoint`](super::Checkpoint).
pub fn load_safetensors(model: &mut dyn Module, path: impl AsRef<Path>) -> Result<()> {
    let path = path.as_ref();
    let ckpt = super::Checkpoint::open_files(&[path]).map_err(|e| match e {
        Error::Backend { msg, .. } => Error::Backend {
            op: "load_safetensors",
            msg,
        },
        e => e,
    })?;
    ckpt.load_as("load_safetensors", model, &LoadOptions::new())
        .map(|_| ())
}
