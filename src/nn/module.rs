//! The `Module` trait.

use super::prune::PruneTarget;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{bail, Error, Result};
use crate::tensor::Tensor;

/// A layer or a model: something with a forward pass and named parameters.
///
/// Parameters are owned by the module. An optimizer updates them through
/// `&mut` access to the whole module
/// ([`named_parameters_mut`](Module::named_parameters_mut)), so while a
/// step runs nothing else can read or write them: the borrow checker, not
/// a convention, keeps a hand edit from racing an update.
pub trait Module: Send {
    /// The forward pass on a borrowed input.
    fn forward(&self, x: &Tensor) -> Result<Tensor>;

    /// The forward pass on an owned input. A layer that can compute in place
    /// overrides this to reuse `x`'s buffer when it is the only handle to its
    /// storage and nothing saved it for backward (see `Sequential`); the
    /// default borrows.
    fn forward_owned(&self, x: Tensor) -> Result<Tensor> {
        self.forward(&x)
    }

    /// `true` if [`forward_owned`](Module::forward_owned) may reuse its input's
    /// buffer (shape-preserving, elementwise layers).
    fn can_work_in_place(&self) -> bool {
        false
    }

    /// Every parameter with its dotted name (`"0.weight"`), in a fixed order.
    fn named_parameters(&self) -> Vec<(String, &Tensor)>;

    /// Mutable access to every parameter (and buffer that a checkpoint saves,
    /// such as BatchNorm's running statistics), in the same order.
    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)>;

    /// Every buffer a checkpoint saves besides the parameters (BatchNorm's
    /// `running_mean`, `running_var` and `num_batches_tracked`), with its
    /// dotted name, in the order
    /// [`named_parameters_mut`](Module::named_parameters_mut) lists them
    /// after the parameters. A module with buffers overrides this and lists
    /// them in `named_parameters_mut` too. None by default.
    fn named_buffers(&self) -> Vec<(String, &Tensor)> {
        Vec::new()
    }

    /// Every tensor a checkpoint holds:
    /// [`named_parameters`](Module::named_parameters) then
    /// [`named_buffers`](Module::named_buffers), the names and order of
    /// [`named_parameters_mut`](Module::named_parameters_mut) and of
    /// PyTorch's `state_dict`.
    fn named_state(&self) -> Vec<(String, &Tensor)> {
        let mut v = self.named_parameters();
        v.extend(self.named_buffers());
        v
    }

    /// Every parameter, in the order of [`named_parameters`](Module::named_parameters).
    fn parameters(&self) -> Vec<&Tensor> {
        self.named_parameters()
            .into_iter()
            .map(|(_, t)| t)
            .collect()
    }

    /// Switches training mode (dropout active, batch statistics used) on or off.
    fn train(&mut self, _on: bool) {}

    /// Evaluation mode: `train(false)`.
    fn eval(&mut self) {
        self.train(false)
    }

    /// `true` in training mode.
    fn is_training(&self) -> bool {
        false
    }

    /// Moves every parameter to `device` (a copy per parameter; the old
    /// storages are freed as their handles are replaced).
    fn to_device(&mut self, device: Device) -> Result<()> {
        for (_, p) in self.named_parameters_mut() {
            if p.device() != device {
                let moved = crate::autograd::no_grad(|| p.detach().to_device(device))?;
                *p = if p.requires_grad() {
                    moved.requires_grad_(true)?
                } else {
                    moved
                };
            }
        }
        Ok(())
    }

    /// Converts every float parameter and buffer to the float `dtype`
    /// (PyTorch's `module.to(dtype)`, `half()`, `bfloat16()`): a copy per
    /// tensor of another dtype, `requires_grad` kept, the old storages freed
    /// as their handles are replaced; integer buffers
    /// (`num_batches_tracked`) stay as they are. A dtype that is not a
    /// float is an `Err` naming `Module::to_dtype`, and nothing changes.
    ///
    /// ```
    /// use tensorscope::nn::{Linear, Module};
    /// use tensorscope::DType;
    /// let mut fc = Linear::new(4, 2)?;
    /// fc.to_dtype(DType::BF16)?;
    /// assert!(fc.parameters().iter().all(|p| p.dtype() == DType::BF16 && p.requires_grad()));
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    fn to_dtype(&mut self, dtype: DType) -> Result<()> {
        self.to_dtype_keeping(dtype, &|_| false)
    }

    /// [`to_dtype`](Module::to_dtype), except the parameters and buffers
    /// whose dotted name `keep` accepts, which keep their dtype: a half
    /// model whose norms stay f32 (`|n| n.contains("norm")`). A norm with
    /// f32 parameters takes the half input and returns its dtype (GUIDE 17).
    ///
    /// ```
    /// use tensorscope::nn::{LayerNorm, Linear, Module, Sequential};
    /// use tensorscope::{DType, Device, Tensor};
    /// let mut m = Sequential::new();
    /// m.add(Linear::new(4, 4)?).add(LayerNorm::new(&[4])?);
    /// m.to_dtype_keeping(DType::BF16, &|name| name.starts_with("1."))?;
    /// let dtypes: Vec<DType> = m.parameters().iter().map(|p| p.dtype()).collect();
    /// assert_eq!(dtypes, [DType::BF16, DType::BF16, DType::F32, DType::F32]);
    /// let x = Tensor::ones(&[2, 4], DType::BF16, Device::Cpu)?;
    /// assert_eq!(m.forward(&x)?.dtype(), DType::BF16);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    fn to_dtype_keeping(&mut self, dtype: DType, keep: &dyn Fn(&str) -> bool) -> Result<()> {
        if !dtype.is_float() {
            return Err(Error::dtype("Module::to_dtype", "a float dtype", dtype));
        }
        for (name, p) in self.named_parameters_mut() {
            if p.dtype().is_float() && p.dtype() != dtype && !keep(&name) {
                let cast = crate::autograd::no_grad(|| p.detach().to_dtype(dtype))?;
                *p = if p.requires_grad() {
                    cast.requires_grad_(true)?
                } else {
                    cast
                };
            }
        }
        Ok(())
    }

    /// The parameter `name` (a dotted name of
    /// [`named_parameters`](Module::named_parameters) as it reads before
    /// pruning: `"weight"`, `"0.weight"`) with the masks of the module that
    /// holds it, for [`nn::prune`](super::prune); `None` if there is no
    /// such parameter or the module cannot be pruned (the default).
    fn prune_target(&mut self, name: &str) -> Option<PruneTarget<'_>> {
        let _ = name;
        None
    }

    /// Sets every parameter's gradient to `None`, freeing it.
    fn zero_grad(&self) {
        for p in self.parameters() {
            p.zero_grad();
        }
    }
}

/// One part of the memory history's module path, for a [`Module`] of your
/// own (PyTorch names submodules by their attributes; Rust cannot see a
/// field's name, so a forward says it): while the guard lives, the
/// allocations the calling thread makes are recorded under `name`, after
/// the path of the modules around it. A [`Sequential`](super::Sequential)
/// adds its layers' names (or indices) itself.
///
/// ```
/// use tensorscope::nn::{self, Linear, Module, Sequential};
/// use tensorscope::{memory, DType, Device, Tensor};
/// let mut encoder = Sequential::new();
/// encoder.add_named("fc1", Linear::new(4, 8)?)?;
/// memory::record_history(Device::Cpu, true, 1000)?;
/// let x = Tensor::ones(&[2, 4], DType::F32, Device::Cpu)?;
/// let y = {
///     let _m = nn::module_scope("encoder"); // in your module's forward
///     encoder.forward(&x)?
/// };
/// let snap = memory::snapshot(Device::Cpu)?;
/// memory::record_history(Device::Cpu, false, 0)?;
/// assert!(snap.trace.iter().any(|e| e.module.as_deref() == Some("encoder.fc1")));
/// # drop(y);
/// # Ok::<(), tensorscope::Error>(())
/// ```
#[must_use = "the module path part ends when the guard drops"]
pub struct ModuleScope {
    _part: crate::alloc::history::ContextGuard,
}

impl std::fmt::Debug for ModuleScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ModuleScope")
    }
}

/// Opens a [`ModuleScope`] named `name` (`memory::scope` labels a region of
/// work instead, apart from the module path).
pub fn module_scope(name: &str) -> ModuleScope {
    ModuleScope {
        _part: crate::alloc::history::module_context(|| name.to_string()),
    }
}

/// For a layer's `from_parts`: `weight` of a float dtype, and `part` (a
/// bias) of the `shape` given, `weight`'s dtype and its device. The errors
/// name `op`, the shapes, dtypes or devices.
pub(crate) fn check_parts(
    op: &'static str,
    weight: &Tensor,
    part: Option<(&Tensor, &[usize], &str)>,
) -> Result<()> {
    if !weight.dtype().is_float() {
        bail!(Error::dtype(op, "a float dtype", weight.dtype()));
    }
    let Some((b, shape, what)) = part else {
        return Ok(());
    };
    if b.shape() != shape {
        bail!(Error::shape(op, weight.shape(), b.shape(), what));
    }
    if b.dtype() != weight.dtype() {
        bail!(Error::dtype(op, weight.dtype().name(), b.dtype()));
    }
    if b.device() != weight.device() {
        bail!(Error::DeviceMismatch {
            op,
            lhs: weight.device(),
            rhs: b.device()
        });
    }
    Ok(())
}
