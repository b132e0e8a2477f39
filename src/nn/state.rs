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

use safetensors::tensor::{Dtype as StDtype, SafeTensors, TensorView};

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

/// Overwrites the model's parameters in place (under `no_grad`) with the
/// values of `state`. Everything is checked first; an `Err` lists every
/// missing key, unexpected key, shape mismatch and dtype mismatch, and
/// leaves the model untouched. Values on another device are moved to the
/// parameter's device before anything is written.
pub fn load_state_dict(model: &mut dyn Module, state: &[(String, Tensor)]) -> Result<()> {
    let refs: Vec<(String, &Tensor)> = state.iter().map(|(n, t)| (n.clone(), t)).collect();
    load_checked(model, refs, Vec::new(), &[], "load_state_dict")
}

fn load_checked(
    model: &mut dyn Module,
    state: Vec<(String, &Tensor)>,
    mut problems: Vec<String>,
    unusable: &[String],
    op: &'static str,
) -> Result<()> {
    let mut by_name: HashMap<&str, &Tensor> = HashMap::new();
    for (n, t) in &state {
        if by_name.insert(n.as_str(), *t).is_some() {
            problems.push(format!("duplicate key {n:?}"));
        }
    }
    let _g = crate::autograd::no_grad_guard();
    let mut params = model.named_parameters_mut();
    let known: HashSet<String> = params.iter().map(|(n, _)| n.clone()).collect();
    let mut missing = Vec::new();
    let mut sources: Vec<Option<Tensor>> = Vec::with_capacity(params.len());
    for (name, p) in params.iter() {
        let Some(src) = by_name.get(name.as_str()) else {
            if !unusable.contains(name) {
                missing.push(name.clone());
            }
            sources.push(None);
            continue;
        };
        if src.shape() != p.shape() {
            problems.push(format!(
                "{name:?}: shape {:?} in the checkpoint, {:?} in the model",
                src.shape(),
                p.shape()
            ));
        }
        if src.dtype() != p.dtype() {
            problems.push(format!(
                "{name:?}: dtype {} in the checkpoint, {} in the model",
                src.dtype(),
                p.dtype()
            ));
        }
        sources.push(if src.device() == p.device() {
            Some(src.alias())
        } else {
            match src.to_device(p.device()) {
                Ok(t) => Some(t),
                Err(e) => {
                    problems.push(format!("{name:?}: cannot move to {}: {e}", p.device()));
                    None
                }
            }
        });
    }
    let mut unexpected: Vec<&str> = by_name
        .keys()
        .copied()
        .chain(unusable.iter().map(String::as_str))
        .filter(|n| !known.contains(*n))
        .collect();
    unexpected.sort_unstable();
    if !missing.is_empty() {
        problems.insert(0, format!("missing keys {missing:?}"));
    }
    if !unexpected.is_empty() {
        problems.insert(
            usize::from(!missing.is_empty()),
            format!("unexpected keys {unexpected:?}"),
        );
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
    for ((_, p), src) in params.iter_mut().zip(sources) {
        p.copy_(&src.expect("checked above"))?;
    }
    Ok(())
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

/// A CPU tensor from little-endian bytes (the length was checked by the
/// safetensors parser).
fn tensor_from_bytes(dt: DType, shape: &[usize], b: &[u8]) -> Result<Tensor> {
    fn parse<T: crate::dtype::Element, const N: usize>(
        b: &[u8],
        shape: &[usize],
        f: impl Fn([u8; N]) -> T,
    ) -> Result<Tensor> {
        let v: Vec<T> = b
            .chunks_exact(N)
            .map(|c| f(c.try_into().expect("chunk of N bytes")))
            .collect();
        Tensor::from_vec(v, shape, Device::Cpu)
    }
    match dt {
        DType::F32 => parse(b, shape, f32::from_le_bytes),
        DType::F64 => parse(b, shape, f64::from_le_bytes),
        DType::F16 => parse(b, shape, crate::f16::from_le_bytes),
        DType::BF16 => parse(b, shape, crate::bf16::from_le_bytes),
        DType::I64 => parse(b, shape, i64::from_le_bytes),
        DType::I32 => parse(b, shape, i32::from_le_bytes),
        DType::U8 => parse(b, shape, |c: [u8; 1]| c[0]),
        DType::Bool => parse(b, shape, |c: [u8; 1]| c[0] != 0),
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
    safetensors::tensor::serialize_to_file(views, None, path).map_err(|e| Error::Backend {
        op,
        msg: format!("{}: {e}", path.display()),
    })
}

/// Reads a safetensors file (for example one written by PyTorch's
/// `safetensors.torch.save_file`) and loads it as [`load_state_dict`] does:
/// everything is checked first, one `Err` lists every problem (including
/// tensors of a dtype tensorscope does not have), and a failed load leaves
/// the model untouched. An unreadable or malformed file is an
/// [`Error::Backend`] naming `load_safetensors` and the path.
pub fn load_safetensors(model: &mut dyn Module, path: impl AsRef<Path>) -> Result<()> {
    let path = path.as_ref();
    let data = std::fs::read(path).map_err(|e| Error::Backend {
        op: "load_safetensors",
        msg: format!("{}: {e}", path.display()),
    })?;
    let st = SafeTensors::deserialize(&data).map_err(|e| Error::Backend {
        op: "load_safetensors",
        msg: format!("{}: {e}", path.display()),
    })?;
    let mut problems = Vec::new();
    let mut unusable = Vec::new();
    let mut tensors = Vec::new();
    let mut names: Vec<(String, TensorView)> = st.tensors();
    names.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, view) in names {
        match from_st_dtype(view.dtype()) {
            Some(dt) => tensors.push((name, tensor_from_bytes(dt, view.shape(), view.data())?)),
            None => {
                problems.push(format!(
                    "{name:?}: dtype {:?} is not supported by tensorscope",
                    view.dtype()
                ));
                unusable.push(name);
            }
        }
    }
    let refs: Vec<(String, &Tensor)> = tensors.iter().map(|(n, t)| (n.clone(), t)).collect();
    load_checked(model, refs, problems, &unusable, "load_safetensors")
}
