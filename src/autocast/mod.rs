//! Automatic mixed precision: inside an autocast region the matrix
//! products, convolutions and attention run in f16 or bf16, the ops that
//! need range run in f32, and the rest run in their inputs' dtypes
//! (PyTorch's `torch.autocast`).
//!
//! * A region is a guard ([`autocast_guard`]) or a closure ([`autocast`])
//!   for one device type. Regions are thread-local and nest; a guard
//!   restores the previous state when dropped, also during a panic. An
//!   `enabled: false` region turns autocast off inside an outer one.
//! * Each op's dtype per device type is [`policies`]: PyTorch 2.15's lists
//!   for that device type, which differ between the CPU and CUDA.
//! * An f32 leaf that requires grad (a parameter) is cast to the region's
//!   dtype once per region and the copy reused by every op inside it: the
//!   *cast cache*. The copies are freed when the outermost region exits.
//!   Backward through a cast gives the f32 leaf an f32 gradient.
//! * Inside a listed op, the ops it is made of are not cast again
//!   (PyTorch's dispatcher excludes the autocast key while the op runs).
//!
//! ```
//! use tensorscope::autocast::autocast;
//! use tensorscope::{DType, Device, DeviceType, Tensor};
//! let x = Tensor::randn(&[4, 8], DType::F32, Device::Cpu)?;
//! let w = Tensor::randn(&[8, 8], DType::F32, Device::Cpu)?.requires_grad_(true)?;
//! let y = autocast(DeviceType::Cpu, DType::BF16, || x.matmul(&w))?;
//! assert_eq!(y.dtype(), DType::BF16);
//! y.to_dtype(DType::F32)?.sum_all()?.backward()?;
//! assert_eq!(w.grad().unwrap().dtype(), DType::F32);
//! # Ok::<(), tensorscope::Error>(())
//! ```

mod policy;

pub(crate) use policy::*;
pub use policy::{policies, CastPolicy, OpPolicy};

use crate::device::DeviceType;
use crate::dtype::DType;
use crate::error::{bail, Error, Result};
use crate::tensor::{Tensor, TensorImpl};
use std::cell::{Cell, RefCell};
use std::sync::{Arc, Weak};

/// The autocast state of this thread.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct State {
    /// The CPU region's dtype; `None`: no CPU region (or a disabled one).
    cpu: Option<DType>,
    /// The CUDA region's dtype.
    cuda: Option<DType>,
    /// The region caches casts of parameters.
    cache: bool,
    /// Inside a listed op: its inner ops are not cast again.
    excluded: bool,
}

/// One cached cast: the source's address (the key, kept from reuse by the
/// weak reference), the dtype, and the copy.
struct Entry {
    key: *const TensorImpl,
    _keep: Weak<TensorImpl>,
    dtype: DType,
    /// Made with grad enabled (the copy is in the graph).
    graph: bool,
    cast: Tensor,
}

thread_local! {
    static STATE: Cell<State> = const {
        Cell::new(State { cpu: None, cuda: None, cache: true, excluded: false })
    };
    /// How many regions (enabled or not) are open: the cache is cleared
    /// when the outermost one exits.
    static NESTING: Cell<u32> = const { Cell::new(0) };
    static CACHE: RefCell<Vec<Entry>> = const { RefCell::new(Vec::new()) };
}

/// How a region is opened: [`autocast_guard_with`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct AutocastOptions {
    /// The lower-precision dtype, `DType::BF16` or `DType::F16`; `None`:
    /// the device type's default (bf16 on the CPU, f16 on CUDA, as
    /// PyTorch's).
    pub dtype: Option<DType>,
    /// `false`: autocast is off for this device type inside the region.
    pub enabled: bool,
    /// Cache the casts of f32 parameters for the region (PyTorch's
    /// `cache_enabled`).
    pub cache_enabled: bool,
}

impl Default for AutocastOptions {
    fn default() -> Self {
        AutocastOptions {
            dtype: None,
            enabled: true,
            cache_enabled: true,
        }
    }
}

/// Ends its region when dropped. Not `Send`: the state is thread-local.
/// Bind it to a named variable (`let _ac = ...`), not `_`.
#[must_use = "the region lasts only while the guard lives; bind it with `let _ac = ...`"]
pub struct AutocastGuard {
    prev: State,
    _not_send: [*const (); 0],
}

impl Drop for AutocastGuard {
    fn drop(&mut self) {
        STATE.with(|s| s.set(self.prev));
        let left = NESTING.with(|n| {
            let v = n.get().saturating_sub(1);
            n.set(v);
            v
        });
        if left == 0 {
            // Taken out first: dropping a copy must not find the cache borrowed.
            let entries = CACHE.with(|c| std::mem::take(&mut *c.borrow_mut()));
            drop(entries);
        }
    }
}

/// The dtype a region on `device_type` runs in by default.
fn default_dtype(device_type: DeviceType) -> DType {
    match device_type {
        DeviceType::Cpu => DType::BF16,
        DeviceType::Cuda => DType::F16,
    }
}

/// Checks that `dtype` can be a region's dtype on `device_type`.
fn check_dtype(device_type: DeviceType, dtype: DType) -> Result<()> {
    const OP: &str = "autocast";
    if !matches!(dtype, DType::BF16 | DType::F16) {
        bail!(Error::dtype(
            OP,
            format!("bf16 or f16 (the lower-precision dtypes autocast runs {device_type} ops in)"),
            dtype
        ));
    }
    if device_type == DeviceType::Cuda {
        let cuda = crate::device::Device::Cuda(0);
        if !crate::backend::cuda::is_available() {
            bail!(Error::DeviceUnavailable {
                op: OP,
                device: cuda,
                reason: "autocast on CUDA needs a usable CUDA device".into(),
            });
        }
        let (major, minor) = crate::backend::cuda::compute_capability(cuda)?;
        if dtype == DType::BF16 && major < 8 {
            bail!(Error::DeviceUnavailable {
                op: OP,
                device: cuda,
                reason: format!(
                    "bf16 needs compute capability 8.0 or later; this device has {major}.{minor}"
                ),
            });
        }
    }
    Ok(())
}

/// Opens an autocast region on `device_type` in `dtype` (bf16 or f16) until
/// the guard drops. An `Err` for any other dtype, or for CUDA without a
/// usable device (or bf16 on one older than compute capability 8.0).
pub fn autocast_guard(device_type: DeviceType, dtype: DType) -> Result<AutocastGuard> {
    autocast_guard_with(
        device_type,
        AutocastOptions {
            dtype: Some(dtype),
            ..Default::default()
        },
    )
}

/// Opens a region with the given options; see [`autocast_guard`].
pub fn autocast_guard_with(
    device_type: DeviceType,
    opts: AutocastOptions,
) -> Result<AutocastGuard> {
    let dtype = opts.dtype.unwrap_or(default_dtype(device_type));
    if opts.enabled {
        check_dtype(device_type, dtype)?;
    }
    let prev = STATE.with(Cell::get);
    let mut next = prev;
    let on = opts.enabled.then_some(dtype);
    match device_type {
        DeviceType::Cpu => next.cpu = on,
        DeviceType::Cuda => next.cuda = on,
    }
    next.cache = opts.cache_enabled;
    STATE.with(|s| s.set(next));
    NESTING.with(|n| n.set(n.get() + 1));
    Ok(AutocastGuard {
        prev,
        _not_send: [],
    })
}

/// Runs `f` inside an autocast region on `device_type` in `dtype`.
pub fn autocast<R>(
    device_type: DeviceType,
    dtype: DType,
    f: impl FnOnce() -> Result<R>,
) -> Result<R> {
    let _ac = autocast_guard(device_type, dtype)?;
    f()
}

/// `true` inside an enabled region on `device_type`.
pub fn is_autocast_enabled(device_type: DeviceType) -> bool {
    region_dtype(device_type).is_some()
}

/// The dtype of the enabled region on `device_type`, if any.
pub fn region_dtype(device_type: DeviceType) -> Option<DType> {
    let s = STATE.with(Cell::get);
    match device_type {
        DeviceType::Cpu => s.cpu,
        DeviceType::Cuda => s.cuda,
    }
}

/// How many casts the cache holds now (0 outside every region).
pub fn cached_casts() -> usize {
    CACHE.with(|c| c.borrow().len())
}

/// The autocast regions open at some point, to be re-entered later:
/// gradient checkpointing recomputes a forward during backward in the
/// regions of the original forward, as PyTorch's `checkpoint` does.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Regions(State);

/// The regions open now.
pub(crate) fn regions() -> Regions {
    let mut s = STATE.with(Cell::get);
    s.excluded = false;
    Regions(s)
}

impl Regions {
    /// Re-enters the regions until the guard drops (with a cast cache of
    /// their own when no region is open now).
    pub(crate) fn enter(self) -> AutocastGuard {
        let prev = STATE.with(Cell::get);
        STATE.with(|s| s.set(self.0));
        NESTING.with(|n| n.set(n.get() + 1));
        AutocastGuard {
            prev,
            _not_send: [],
        }
    }
}

/// Restores the excluded flag when the listed op's call ends.
pub(crate) struct Exclude {
    prev: bool,
}

impl Drop for Exclude {
    fn drop(&mut self) {
        STATE.with(|s| {
            let mut v = s.get();
            v.excluded = self.prev;
            s.set(v);
        });
    }
}

/// An op's inputs as autocast cast them; the op's inner ops are not cast
/// again while this lives.
pub(crate) struct Casted {
    ts: Vec<Option<Tensor>>,
    _ex: Exclude,
}

impl Casted {
    /// Input `i`, which was given.
    pub(crate) fn get(&self, i: usize) -> &Tensor {
        // The op's own argument list fixes which inputs are `Some`.
        self.ts[i].as_ref().expect("autocast: a given input")
    }

    /// Optional input `i`.
    pub(crate) fn opt(&self, i: usize) -> Option<&Tensor> {
        self.ts[i].as_ref()
    }

    /// Every input, in order (for list ops such as `cat`).
    pub(crate) fn all(&self) -> Vec<&Tensor> {
        self.ts.iter().flatten().collect()
    }
}

/// The dtype of a region covering `t`, when `t` is one autocast casts
/// (a float other than f64, on the region's device type).
fn eligible(t: &Tensor, s: &State) -> Option<DType> {
    let dt = t.dtype();
    if !dt.is_float() || dt == DType::F64 {
        return None;
    }
    match t.device().device_type() {
        DeviceType::Cpu => s.cpu,
        DeviceType::Cuda => s.cuda,
    }
}

/// `inputs` cast per `p` when an enabled region covers the op's device
/// (that of its first input) and the op is not inside another listed op;
/// `None` otherwise, and the op runs as it is.
#[inline]
pub(crate) fn cast(p: &OpPolicy, inputs: &[Option<&Tensor>]) -> Result<Option<Casted>> {
    let s = STATE.with(Cell::get);
    if s.excluded || (s.cpu.is_none() && s.cuda.is_none()) {
        return Ok(None);
    }
    cast_slow(p, s, inputs)
}

/// [`cast`] for the unary op named `name` (its policy found only inside a
/// region).
#[inline]
pub(crate) fn cast_unary(name: &str, x: &Tensor) -> Result<Option<Casted>> {
    let s = STATE.with(Cell::get);
    if s.excluded || (s.cpu.is_none() && s.cuda.is_none()) {
        return Ok(None);
    }
    match policy::unary(name) {
        Some(p) => cast_slow(p, s, &[Some(x)]),
        None => Ok(None),
    }
}

fn cast_slow(p: &OpPolicy, s: State, inputs: &[Option<&Tensor>]) -> Result<Option<Casted>> {
    let Some(first) = inputs.iter().flatten().next() else {
        return Ok(None);
    };
    let (region, policy) = match first.device().device_type() {
        DeviceType::Cpu => (s.cpu, p.cpu),
        DeviceType::Cuda => (s.cuda, p.cuda),
    };
    let (Some(region), Some(policy)) = (region, policy) else {
        return Ok(None);
    };
    let target = match policy {
        CastPolicy::LowerPrecision => region,
        CastPolicy::Fp32 => DType::F32,
        CastPolicy::Promote => {
            let mut to = region;
            for t in inputs.iter().flatten() {
                match eligible(t, &s).map(|_| t.dtype()) {
                    Some(DType::F32) => to = DType::F32,
                    Some(d) if d == region || to == DType::F32 => {}
                    Some(d) => bail!(Error::dtype(
                        p.op,
                        format!("f32 or {region} inputs inside a {region} autocast region"),
                        d
                    )),
                    None => {}
                }
            }
            to
        }
        CastPolicy::Refused => bail!(Error::arg(
            p.op,
            format!(
                "{} is unsafe to autocast on {}: most models put a sigmoid right before it; \
                 combine the two with binary_cross_entropy_with_logits (BCEWithLogitsLoss), which is safe to autocast",
                p.op,
                first.device().device_type()
            )
        )),
    };
    let ex = exclude();
    let mut ts = Vec::with_capacity(inputs.len());
    for t in inputs {
        ts.push(match t {
            Some(t) if eligible(t, &s).is_some() && t.dtype() != target => {
                Some(cached_cast(t, target, region, s.cache)?)
            }
            Some(t) => Some(t.alias()),
            None => None,
        });
    }
    Ok(Some(Casted { ts, _ex: ex }))
}

/// Marks the thread as inside a listed op (or a backward pass) until the
/// result drops: no op is cast meanwhile.
pub(crate) fn exclude() -> Exclude {
    STATE.with(|s| {
        let mut v = s.get();
        let prev = v.excluded;
        v.excluded = true;
        s.set(v);
        Exclude { prev }
    })
}

/// `t` in `to`, from the cache when `t` is a parameter (an f32 leaf that
/// requires grad) cast to the region's dtype `region`; PyTorch's
/// `cached_cast`.
fn cached_cast(t: &Tensor, to: DType, region: DType, cache: bool) -> Result<Tensor> {
    let cacheable = cache
        && to == region
        && t.dtype() == DType::F32
        && t.requires_grad()
        && t.is_leaf()
        && NESTING.with(Cell::get) > 0;
    if !cacheable {
        return t.to_dtype(to);
    }
    let key = Arc::as_ptr(&*t.inner);
    // A cast made under no_grad has no graph: it serves only no_grad ops.
    let graph = crate::autograd::is_grad_enabled();
    let hit = CACHE.with(|c| {
        c.borrow()
            .iter()
            .find(|e| e.key == key && e.dtype == to && (e.graph || !graph))
            .map(|e| e.cast.alias())
    });
    if let Some(cast) = hit {
        return Ok(cast);
    }
    let cast = t.to_dtype(to)?;
    let old = CACHE.with(|c| {
        let mut c = c.borrow_mut();
        let old = c
            .iter()
            .position(|e| e.key == key && e.dtype == to)
            .map(|i| c.swap_remove(i));
        c.push(Entry {
            key,
            _keep: Arc::downgrade(&*t.inner),
            dtype: to,
            graph,
            cast: cast.alias(),
        });
        old
    });
    // Dropped outside the borrow.
    drop(old);
    Ok(cast)
}

/// A norm's weight or bias `t` in the dtype `to` of a lower-precision
/// input: from the cast cache inside a region on its device type, else a
/// fresh cast. Mixed-dtype norms apply their affine parameters in the
/// input's dtype (GUIDE, deviation 34).
pub(crate) fn param_as(t: &Tensor, to: DType) -> Result<Tensor> {
    if t.dtype() == to {
        return Ok(t.alias());
    }
    let s = STATE.with(Cell::get);
    match eligible(t, &s) {
        Some(region) => cached_cast(t, to, region, s.cache),
        None => t.to_dtype(to),
    }
}
