//! Pruning, as `torch.nn.utils.prune`: a mask over a layer's parameter.
//!
//! Pruning `weight` moves the parameter to the name `weight_orig` (the
//! trainable tensor, unchanged), adds a buffer `weight_mask` (0 where an
//! entry is pruned, 1 elsewhere, in the parameter's dtype and on its
//! device), and from then on the layer's forward computes `weight_orig *
//! weight_mask` and uses that, so the gradient reaching `weight_orig` is
//! zero at the pruned entries. [`remove`] makes it permanent: the masked
//! values are written into the parameter, which is named `weight` again,
//! and the mask is freed.
//!
//! The modules are addressed by the dotted names of
//! [`named_parameters`](Module::named_parameters) (`"0.weight"` in a
//! [`Sequential`](super::Sequential)), so one `&mut` borrow of the model
//! reaches every layer. [`Linear`](super::Linear), the convolutions
//! ([`Conv1d`](super::Conv1d), [`Conv2d`](super::Conv2d),
//! [`ConvTranspose2d`](super::ConvTranspose2d)) and `Sequential` can be
//! pruned; a module of your own opts in through
//! [`Module::prune_target`] and a [`PruneMasks`] field.
//!
//! **Memory.** Masking saves no memory: a pruned layer holds its whole
//! parameter *and* a mask of the same size and dtype (one more
//! weight-sized buffer), and each forward makes one more weight-sized
//! temporary (the masked weight, which autograd saves for the backward in
//! training). [`remove`] gives the mask back, leaving the dense parameter
//! with zeros in it: the same bytes as before pruning. What does save
//! memory is a smaller dense layer: prune whole units with
//! [`ln_structured`], then build the layers without them
//! ([`drop_pruned_units`] for a pair of `Linear` layers). GUIDE chapter 15
//! shows the figures.
//!
//! **Iterating.** Pruning a parameter that is already pruned combines the
//! masks as PyTorch's `PruningContainer` does: the amount counts the
//! entries whose mask is 1 (or, for the structured methods, the channels
//! whose mask entries do not sum to 0) and the importance is that of the
//! masked weight, `weight_orig * weight_mask` (PyTorch's `module.weight`):
//! a second `ln_structured` ranks channels by the norms of what is left.
//!
//! **Where PyTorch's choice is unspecified** (several entries with the same
//! magnitude at the cut), the earlier entry in row-major order is pruned
//! first (and, for the structured methods, the lower channel is kept first);
//! PyTorch's `topk` leaves that order to its kernel. The random methods
//! draw from tensorscope's generator ([`manual_seed`](crate::manual_seed)),
//! not PyTorch's stream. The masks are computed on the host (a copy of the
//! parameter comes back from its device once per call) and sent to the
//! parameter's device.
//!
//! **Optimizers** key their state by the parameter's name without the
//! `_orig` suffix, so an optimizer keeps a parameter's state through
//! pruning and `remove`, as PyTorch's (which hold the parameter object,
//! and pruning keeps that object) do.
//!
//! ```
//! use tensorscope::nn::{prune, Linear, Module};
//! use tensorscope::memory;
//! use tensorscope::Device;
//! // The seed's scenario: prune 30% of the rows by their L2 norm, make it permanent.
//! let mut fc = Linear::new(100, 100)?;
//! let dense = memory::memory_allocated(Device::Cpu);
//! prune::ln_structured(&mut fc, "weight", 0.3, 2.0, 0)?;
//! assert_eq!(fc.named_buffers()[0].0, "weight_mask");
//! // The mask is one more weight-sized buffer (in the allocator's 512-byte
//! // blocks): masking saves nothing.
//! let mask_bytes = (100 * 100 * 4usize).next_multiple_of(512);
//! assert_eq!(memory::memory_allocated(Device::Cpu) - dense, mask_bytes);
//! prune::remove(&mut fc, "weight")?;
//! assert_eq!(memory::memory_allocated(Device::Cpu), dense);
//! let zeros = fc.weight.eq_scalar(0.0)?.sum_all()?.item::<i64>()?;
//! assert_eq!(zeros, 30 * 100);
//! # Ok::<(), tensorscope::Error>(())
//! ```

use super::{Linear, Module};
use crate::autograd::no_grad;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{bail, Error, Result};
use crate::tensor::Tensor;

/// How much to prune: a fraction of the entries (channels, for the
/// structured methods) that are not pruned yet, rounded half to even as
/// Python's `round` (PyTorch's rule), or a count of them.
///
/// `0.3` converts to `Fraction(0.3)` and `30usize` to `Count(30)`. A
/// fraction outside `[0, 1]` (or NaN) and a count above the number of
/// unpruned entries are an `Err`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Amount {
    /// A fraction in `[0, 1]`.
    Fraction(f64),
    /// A number of entries (or channels).
    Count(usize),
}

impl From<f64> for Amount {
    fn from(f: f64) -> Amount {
        Amount::Fraction(f)
    }
}

impl From<usize> for Amount {
    fn from(n: usize) -> Amount {
        Amount::Count(n)
    }
}

impl Amount {
    /// How many of `n` to prune (PyTorch's `_compute_nparams_toprune` after
    /// `_validate_pruning_amount`).
    fn of(self, op: &'static str, n: usize) -> Result<usize> {
        match self {
            Amount::Fraction(f) if (0.0..=1.0).contains(&f) => {
                Ok((f * n as f64).round_ties_even() as usize)
            }
            Amount::Fraction(f) => Err(Error::arg(
                op,
                format!("amount = {f} should be a fraction in [0, 1] or a count"),
            )),
            Amount::Count(k) if k <= n => Ok(k),
            Amount::Count(k) => Err(Error::arg(
                op,
                format!("amount = {k} should be at most the number of unpruned entries ({n})"),
            )),
        }
    }
}

/// The unstructured importance of [`global_unstructured`]: PyTorch's
/// `prune.L1Unstructured` or `prune.RandomUnstructured`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unstructured {
    /// The smallest magnitudes go.
    L1,
    /// Uniformly random entries go.
    Random,
}

/// The masks of one module's pruned parameters (PyTorch's `<name>_mask`
/// buffers), kept by the module beside its parameters. A module of your
/// own that holds one lists [`named_buffers`](PruneMasks::named_buffers) in
/// its [`Module::named_buffers`] (and the `_mut` form in
/// [`Module::named_parameters_mut`]), names its parameters with
/// [`param_name`](PruneMasks::param_name), uses
/// [`masked`](PruneMasks::masked) in its forward, and returns a
/// [`PruneTarget`] from [`Module::prune_target`].
#[derive(Default)]
pub struct PruneMasks {
    masks: Vec<(&'static str, Tensor)>,
}

impl std::fmt::Debug for PruneMasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.masks.iter().map(|(n, _)| *n).collect();
        write!(f, "PruneMasks({names:?})")
    }
}

impl PruneMasks {
    /// The mask of parameter `name`, if it is pruned.
    pub fn get(&self, name: &str) -> Option<&Tensor> {
        self.masks.iter().find(|(n, _)| *n == name).map(|(_, m)| m)
    }

    /// `true` if no parameter is pruned.
    pub fn is_empty(&self) -> bool {
        self.masks.is_empty()
    }

    /// The name a module reports for its parameter `name`: `name_orig`
    /// while it is pruned, else `name`.
    pub fn param_name(&self, name: &'static str) -> String {
        if self.get(name).is_some() {
            format!("{name}_orig")
        } else {
            name.to_string()
        }
    }

    /// The masks as buffers: `("weight_mask", mask)`, in pruning order.
    pub fn named_buffers(&self) -> Vec<(String, &Tensor)> {
        self.masks
            .iter()
            .map(|(n, m)| (format!("{n}_mask"), m))
            .collect()
    }

    /// [`named_buffers`](PruneMasks::named_buffers), mutably (for
    /// [`Module::named_parameters_mut`]: moving and loading a module).
    pub fn named_buffers_mut(&mut self) -> Vec<(String, &mut Tensor)> {
        self.masks
            .iter_mut()
            .map(|(n, m)| (format!("{n}_mask"), m))
            .collect()
    }

    /// `param * mask` if `name` is pruned (a graph node in training: the
    /// gradient reaching `param` is masked), else `None`: use `param`.
    pub fn masked(&self, name: &str, param: &Tensor) -> Result<Option<Tensor>> {
        self.get(name).map(|m| param.mul(m)).transpose()
    }

    /// Runs `f` with the weight and bias a forward uses: each one masked if
    /// it is pruned, else as it is.
    pub(crate) fn with_weight_and_bias<R>(
        &self,
        weight: &Tensor,
        bias: Option<&Tensor>,
        f: impl FnOnce(&Tensor, Option<&Tensor>) -> Result<R>,
    ) -> Result<R> {
        let w = self.masked("weight", weight)?;
        let b = match bias {
            Some(b) => self.masked("bias", b)?,
            None => None,
        };
        f(w.as_ref().unwrap_or(weight), b.as_ref().or(bias))
    }

    fn set(&mut self, name: &'static str, mask: Tensor) {
        match self.masks.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = mask,
            None => self.masks.push((name, mask)),
        }
    }

    fn take(&mut self, name: &str) -> Option<Tensor> {
        let i = self.masks.iter().position(|(n, _)| *n == name)?;
        Some(self.masks.remove(i).1)
    }
}

/// One prunable parameter and the masks of the module that holds it:
/// what [`Module::prune_target`] hands to the functions of this module.
pub struct PruneTarget<'a> {
    param: &'a mut Tensor,
    masks: &'a mut PruneMasks,
    name: &'static str,
}

impl<'a> PruneTarget<'a> {
    /// The parameter `name` of a module (the tensor in its field: the
    /// original values, `name_orig`, while it is pruned) and that module's
    /// masks.
    pub fn new(param: &'a mut Tensor, masks: &'a mut PruneMasks, name: &'static str) -> Self {
        PruneTarget { param, masks, name }
    }
}

impl std::fmt::Debug for PruneTarget<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PruneTarget({} {:?})", self.name, self.param.shape())
    }
}

/// The four [`Module`] methods of a prunable layer whose fields are
/// `weight: Tensor`, `bias: Option<Tensor>` and `pruning: PruneMasks`:
/// `named_parameters`, `named_buffers`, `named_parameters_mut` and
/// `prune_target`.
macro_rules! prunable_weight_and_bias {
    () => {
        fn named_parameters(&self) -> Vec<(String, &Tensor)> {
            $crate::nn::prune::weight_and_bias(&self.pruning, &self.weight, self.bias.as_ref())
        }
        fn named_buffers(&self) -> Vec<(String, &Tensor)> {
            self.pruning.named_buffers()
        }
        fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
            $crate::nn::prune::weight_and_bias_mut(
                &mut self.pruning,
                &mut self.weight,
                self.bias.as_mut(),
            )
        }
        fn prune_target(&mut self, name: &str) -> Option<$crate::nn::prune::PruneTarget<'_>> {
            $crate::nn::prune::weight_or_bias(
                &mut self.pruning,
                &mut self.weight,
                self.bias.as_mut(),
                name,
            )
        }
    };
}
pub(crate) use prunable_weight_and_bias;

/// The `named_parameters` of a layer with a `weight` and an optional `bias`
/// (`weight_orig` / `bias_orig` while pruned).
pub(crate) fn weight_and_bias<'a>(
    masks: &PruneMasks,
    w: &'a Tensor,
    b: Option<&'a Tensor>,
) -> Vec<(String, &'a Tensor)> {
    let mut v = vec![(masks.param_name("weight"), w)];
    v.extend(b.map(|b| (masks.param_name("bias"), b)));
    v
}

/// The `named_parameters_mut` of such a layer: the parameters, then the
/// masks.
pub(crate) fn weight_and_bias_mut<'a>(
    masks: &'a mut PruneMasks,
    w: &'a mut Tensor,
    b: Option<&'a mut Tensor>,
) -> Vec<(String, &'a mut Tensor)> {
    let mut v = vec![(masks.param_name("weight"), w)];
    v.extend(b.map(|b| (masks.param_name("bias"), b)));
    v.extend(masks.named_buffers_mut());
    v
}

/// The `prune_target` of such a layer.
pub(crate) fn weight_or_bias<'a>(
    masks: &'a mut PruneMasks,
    w: &'a mut Tensor,
    b: Option<&'a mut Tensor>,
    name: &str,
) -> Option<PruneTarget<'a>> {
    match name {
        "weight" => Some(PruneTarget::new(w, masks, "weight")),
        "bias" => b.map(|b| PruneTarget::new(b, masks, "bias")),
        _ => None,
    }
}

/// The target `name` of `module`, or an `Err` naming `op` and the
/// module's parameters.
fn target<'m>(op: &'static str, module: &'m mut dyn Module, name: &str) -> Result<PruneTarget<'m>> {
    if module.prune_target(name).is_none() {
        let names: Vec<String> = module
            .named_parameters()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        bail!(Error::arg(
            op,
            format!("no prunable parameter named '{name}' (the module's parameters: {names:?})")
        ));
    }
    Ok(module.prune_target(name).expect("checked above"))
}

/// The parameter as the forward uses it (`name_orig * name_mask`: PyTorch's
/// importance scores, `getattr(module, name)`) and its current mask (all
/// ones if unpruned), on the host in f64 (exact for every float dtype). An
/// `Err` if the field was given a tensor of another shape than its mask's.
fn host_state(op: &'static str, t: &PruneTarget<'_>) -> Result<(Vec<f64>, Vec<f64>)> {
    if let Some(m) = t.masks.get(t.name)
        && m.shape() != t.param.shape()
    {
        bail!(Error::shape(
            op,
            t.param.shape(),
            m.shape(),
            format!("parameter '{}' no longer has its mask's shape", t.name)
        ));
    }
    no_grad(|| {
        let w = t.param.detach().to_vec::<f64>()?;
        let m = match t.masks.get(t.name) {
            Some(m) => m.to_vec::<f64>()?,
            None => vec![1.0; w.len()],
        };
        let masked = w.iter().zip(&m).map(|(a, b)| a * b).collect();
        Ok((masked, m))
    })
}

/// The entries an unstructured method may still prune: those whose mask
/// is exactly 1 (PyTorch's `PruningContainer`; a `custom_from_mask` value
/// such as 0.5 is neither pruned nor prunable).
fn unpruned(m: &[f64]) -> usize {
    m.iter().filter(|&&v| v == 1.0).count()
}

/// Installs `mask` (host values, the parameter's shape) as the mask of the
/// target, in the parameter's dtype and on its device; a previous mask is
/// freed.
fn install(op: &'static str, t: PruneTarget<'_>, mask: Vec<f64>) -> Result<()> {
    let m = mask_tensor(op, &t, mask)?;
    t.masks.set(t.name, m);
    Ok(())
}

/// `mask` (host values) as a tensor of the target's shape, dtype and device.
fn mask_tensor(op: &'static str, t: &PruneTarget<'_>, mask: Vec<f64>) -> Result<Tensor> {
    let p = &*t.param;
    if !p.dtype().is_float() {
        bail!(Error::dtype(op, "a float parameter", p.dtype()));
    }
    no_grad(|| {
        Tensor::from_vec(mask, p.shape(), Device::Cpu)?
            .to_dtype(p.dtype())?
            .to_device(p.device())
    })
    .map_err(|e| e.in_op(op))
}

fn check_float(op: &'static str, t: &PruneTarget<'_>) -> Result<()> {
    if t.param.dtype().is_float() {
        Ok(())
    } else {
        Err(Error::dtype(op, "a float parameter", t.param.dtype()))
    }
}

/// Zeros the `k` unpruned entries (mask 1) with the smallest `score` (ties: the
/// earlier index first; NaN scores last, as PyTorch's `topk` orders NaN
/// above everything).
fn prune_smallest(mask: &mut [f64], score: &[f64], k: usize) {
    let mut live: Vec<usize> = (0..mask.len()).filter(|&i| mask[i] == 1.0).collect();
    live.sort_by(|&a, &b| score[a].total_cmp(&score[b]).then(a.cmp(&b)));
    for &i in live.iter().take(k) {
        mask[i] = 0.0;
    }
}

/// Uniform draws in `[0, 1)` from tensorscope's generator.
fn draws(n: usize) -> Result<Vec<f64>> {
    Tensor::rand(&[n], DType::F64, Device::Cpu)?.to_vec::<f64>()
}

/// Prunes `amount` of the unpruned entries of `module`'s parameter `name`
/// with the smallest absolute values (`prune.l1_unstructured`).
///
/// ```
/// use tensorscope::nn::{prune, Linear, Module};
/// let mut fc = Linear::new(10, 10)?;
/// prune::l1_unstructured(&mut fc, "weight", 0.5)?;
/// let names: Vec<String> = fc.named_parameters().into_iter().map(|(n, _)| n).collect();
/// assert_eq!(names, ["weight_orig", "bias"]);
/// let mask = &fc.named_buffers()[0].1;
/// assert_eq!(mask.sum_all()?.item::<f64>()?, 50.0);
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub fn l1_unstructured(
    module: &mut dyn Module,
    name: &str,
    amount: impl Into<Amount>,
) -> Result<()> {
    unstructured("prune::l1_unstructured", module, name, amount.into(), |w| {
        Ok(w.iter().map(|v| v.abs()).collect())
    })
}

/// The unstructured methods' common part: `amount` of the unpruned entries
/// with the smallest `score` (of the masked weight) go.
fn unstructured(
    op: &'static str,
    module: &mut dyn Module,
    name: &str,
    amount: Amount,
    score: impl FnOnce(&[f64]) -> Result<Vec<f64>>,
) -> Result<()> {
    let t = target(op, module, name)?;
    check_float(op, &t)?;
    let (w, mut m) = host_state(op, &t)?;
    let k = amount.of(op, unpruned(&m))?;
    prune_smallest(&mut m, &score(&w)?, k);
    install(op, t, m)
}

/// Prunes `amount` of the unpruned entries of `module`'s parameter `name`,
/// chosen uniformly at random (`prune.random_unstructured`).
pub fn random_unstructured(
    module: &mut dyn Module,
    name: &str,
    amount: impl Into<Amount>,
) -> Result<()> {
    unstructured(
        "prune::random_unstructured",
        module,
        name,
        amount.into(),
        |w| draws(w.len()),
    )
}

/// The channel of every entry of a row-major `shape` along `dim`.
fn channel_of(shape: &[usize], dim: usize) -> impl Fn(usize) -> usize + '_ {
    let inner = crate::layout::numel(&shape[dim + 1..]);
    move |i| (i / inner.max(1)) % shape[dim]
}

/// The structured methods' common part: among the channels along `dim`
/// with an unpruned entry, keeps those with the largest `score` (ties: the
/// lower channel) and zeros the others' entries, `amount` of them.
fn prune_channels(
    op: &'static str,
    t: PruneTarget<'_>,
    amount: Amount,
    dim: isize,
    score: impl FnOnce(&[f64], usize, &dyn Fn(usize) -> usize) -> Result<Vec<f64>>,
) -> Result<()> {
    check_float(op, &t)?;
    let shape = t.param.shape().to_vec();
    let rank = shape.len();
    if rank <= 1 {
        bail!(Error::arg(
            op,
            format!(
                "structured pruning needs a parameter of two or more dimensions, got shape {shape:?}"
            )
        ));
    }
    let d = if dim < 0 { dim + rank as isize } else { dim };
    if d < 0 || d >= rank as isize {
        bail!(Error::DimOutOfRange { op, dim, rank });
    }
    let d = d as usize;
    let (w, mut m) = host_state(op, &t)?;
    let channels = shape[d];
    let ch = channel_of(&shape, d);
    // A channel is unpruned while its mask entries do not sum to 0
    // (PyTorch's `PruningContainer`).
    let mut sums = vec![0.0; channels];
    for (i, &v) in m.iter().enumerate() {
        sums[ch(i)] += v;
    }
    let live_channels: Vec<usize> = (0..channels).filter(|&c| sums[c] != 0.0).collect();
    let k = amount.of(op, live_channels.len())?;
    if k > 0 {
        let s = score(&w, channels, &ch)?;
        let mut order = live_channels.clone();
        // Kept first: the largest scores, then the lower channel.
        order.sort_by(|&a, &b| s[b].total_cmp(&s[a]).then(a.cmp(&b)));
        let keep = live_channels.len() - k;
        let mut pruned = vec![false; channels];
        for &c in &order[keep..] {
            pruned[c] = true;
        }
        for (i, v) in m.iter_mut().enumerate() {
            if pruned[ch(i)] {
                *v = 0.0;
            }
        }
    }
    install(op, t, m)
}

/// PyTorch's `torch.norm(x, p)` of the entries `xs`: `p = 0` counts the
/// non-zeros, `±inf` takes the largest / smallest magnitude.
fn ln_norm(xs: impl Iterator<Item = f64>, p: f64) -> f64 {
    // NaN propagates, as in torch.norm (f64::max and min would drop it).
    let pick = |a: f64, x: f64, f: fn(f64, f64) -> f64| {
        if a.is_nan() || x.is_nan() {
            f64::NAN
        } else {
            f(a, x.abs())
        }
    };
    if p == f64::INFINITY {
        xs.fold(0.0, |a, x| pick(a, x, f64::max))
    } else if p == f64::NEG_INFINITY {
        xs.fold(f64::INFINITY, |a, x| pick(a, x, f64::min))
    } else if p == 0.0 {
        xs.filter(|&x| x != 0.0).count() as f64
    } else {
        xs.map(|x| x.abs().powf(p)).sum::<f64>().powf(1.0 / p)
    }
}

/// Prunes `amount` of the unpruned channels of `module`'s parameter `name`
/// along `dim` (rows of a `Linear` weight for `dim = 0`, output channels of
/// a convolution), those with the smallest L`n` norm over the other
/// dimensions (`prune.ln_structured`; `n` may be `f64::INFINITY`, `0`
/// counts non-zeros). The norms are those of the masked weight (NaN
/// propagates, as in `torch.norm`).
pub fn ln_structured(
    module: &mut dyn Module,
    name: &str,
    amount: impl Into<Amount>,
    n: f64,
    dim: isize,
) -> Result<()> {
    const OP: &str = "prune::ln_structured";
    if n.is_nan() {
        bail!(Error::arg(OP, "the norm's order n is NaN"));
    }
    let t = target(OP, module, name)?;
    prune_channels(OP, t, amount.into(), dim, |w, channels, ch| {
        let mut per: Vec<Vec<f64>> = vec![Vec::new(); channels];
        for (i, &x) in w.iter().enumerate() {
            per[ch(i)].push(x);
        }
        Ok(per
            .into_iter()
            .map(|xs| ln_norm(xs.into_iter(), n))
            .collect())
    })
}

/// Prunes `amount` of the unpruned channels along `dim`, chosen uniformly
/// at random (`prune.random_structured`).
pub fn random_structured(
    module: &mut dyn Module,
    name: &str,
    amount: impl Into<Amount>,
    dim: isize,
) -> Result<()> {
    const OP: &str = "prune::random_structured";
    let t = target(OP, module, name)?;
    prune_channels(OP, t, amount.into(), dim, |_, channels, _| draws(channels))
}

/// Prunes `amount` of the unpruned entries of all the parameters `names`
/// of `module` together (`prune.global_unstructured`): with
/// [`Unstructured::L1`], the smallest magnitudes across all of them, so a
/// layer with small weights loses more than one with large weights.
///
/// ```
/// use tensorscope::nn::{prune, Linear, Module, ReLU, Sequential};
/// let mut net = Sequential::new();
/// net.add(Linear::new(20, 20)?).add(ReLU).add(Linear::new(20, 5)?);
/// prune::global_unstructured(&mut net, &["0.weight", "2.weight"], prune::Unstructured::L1, 0.5)?;
/// let kept: f64 = net.named_buffers().iter().map(|(_, m)| m.sum_all().unwrap().item::<f64>().unwrap()).sum();
/// assert_eq!(kept, 250.0); // half of 400 + 100
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub fn global_unstructured(
    module: &mut dyn Module,
    names: &[&str],
    method: Unstructured,
    amount: impl Into<Amount>,
) -> Result<()> {
    const OP: &str = "prune::global_unstructured";
    if names.is_empty() {
        bail!(Error::arg(OP, "no parameters to prune"));
    }
    for (i, n) in names.iter().enumerate() {
        if names[..i].contains(n) {
            bail!(Error::arg(OP, format!("parameter '{n}' is named twice")));
        }
    }
    // Every parameter's state first, so that an Err leaves all unpruned.
    let mut states = Vec::with_capacity(names.len());
    for n in names {
        let t = target(OP, module, n)?;
        check_float(OP, &t)?;
        states.push(host_state(OP, &t)?);
    }
    let (mut w, mut m) = (Vec::new(), Vec::new());
    for (sw, sm) in &states {
        w.extend_from_slice(sw);
        m.extend_from_slice(sm);
    }
    let live = unpruned(&m);
    let k = amount.into().of(OP, live)?;
    let score = match method {
        Unstructured::L1 => w.iter().map(|v| v.abs()).collect(),
        Unstructured::Random => draws(w.len())?,
    };
    prune_smallest(&mut m, &score, k);
    // Every mask tensor is made before any is installed: an Err leaves
    // every parameter as it was.
    let mut made = Vec::with_capacity(names.len());
    let mut start = 0;
    for (n, (sw, _)) in names.iter().zip(&states) {
        let part = m[start..start + sw.len()].to_vec();
        start += sw.len();
        made.push(mask_tensor(OP, &target(OP, module, n)?, part)?);
    }
    for (n, mask) in names.iter().zip(made) {
        let t = target(OP, module, n)?;
        t.masks.set(t.name, mask);
    }
    Ok(())
}

/// Prunes with a mask of your own (`prune.custom_from_mask`): the new mask
/// is the current one times `mask` (same shape as the parameter; any
/// dtype and device, converted).
pub fn custom_from_mask(module: &mut dyn Module, name: &str, mask: &Tensor) -> Result<()> {
    const OP: &str = "prune::custom_from_mask";
    let t = target(OP, module, name)?;
    check_float(OP, &t)?;
    if mask.shape() != t.param.shape() {
        bail!(Error::shape(
            OP,
            t.param.shape(),
            mask.shape(),
            "the mask must have the parameter's shape"
        ));
    }
    let (_, mut m) = host_state(OP, &t)?;
    let given = no_grad(|| mask.detach().to_vec::<f64>())?;
    for (a, b) in m.iter_mut().zip(given) {
        *a *= b;
    }
    install(OP, t, m)
}

/// Prunes nothing, but makes `name` pruned (a mask of ones if it had
/// none): `prune.identity`.
pub fn identity(module: &mut dyn Module, name: &str) -> Result<()> {
    const OP: &str = "prune::identity";
    let t = target(OP, module, name)?;
    check_float(OP, &t)?;
    let (_, m) = host_state(OP, &t)?;
    install(OP, t, m)
}

/// Makes the pruning of `name` permanent (`prune.remove`): the masked
/// values are written into the parameter in place (no new buffer; every
/// handle to the parameter's storage sees them, where PyTorch rebinds the
/// parameter to a new tensor), the
/// parameter is named `name` again, and its mask is freed. An `Err` if
/// `name` is not pruned.
pub fn remove(module: &mut dyn Module, name: &str) -> Result<()> {
    const OP: &str = "prune::remove";
    let t = target(OP, module, name)?;
    let Some(mask) = t.masks.get(t.name) else {
        bail!(Error::arg(
            OP,
            format!("parameter '{name}' has to be pruned before its pruning can be removed")
        ));
    };
    no_grad(|| t.param.mul_(mask).map(|_| ())).map_err(|e| e.in_op(OP))?;
    t.masks.take(t.name);
    Ok(())
}

/// The value a pruned layer's forward uses for `name`: `name_orig *
/// name_mask` (recorded in the graph if grad mode is on), or the parameter
/// itself if it is not pruned. PyTorch keeps this tensor as the module's
/// attribute `name`; here the layer's field holds `name_orig` while it is
/// pruned (deviation 18 in `tests/agreement/deviations.rs`).
pub fn masked(module: &dyn Module, name: &str) -> Result<Tensor> {
    const OP: &str = "prune::masked";
    let params = module.named_parameters();
    let find = |n: &str| params.iter().find(|(p, _)| p == n).map(|(_, t)| *t);
    if let Some(p) = find(name) {
        return Ok(p.alias());
    }
    let orig = find(&format!("{name}_orig"));
    let buffers = module.named_buffers();
    let mask = buffers
        .iter()
        .find(|(b, _)| *b == format!("{name}_mask"))
        .map(|(_, t)| *t);
    match (orig, mask) {
        (Some(o), Some(m)) => o.mul(m).map_err(|e| e.in_op(OP)),
        _ => Err(Error::arg(
            OP,
            format!("the module has no parameter named '{name}'"),
        )),
    }
}

/// `true` if any parameter of `module` is pruned (`prune.is_pruned`).
pub fn is_pruned(module: &dyn Module) -> bool {
    let params = module.named_parameters();
    module.named_buffers().iter().any(|(b, _)| {
        b.strip_suffix("_mask").is_some_and(|base| {
            let orig = format!("{base}_orig");
            params.iter().any(|(p, _)| *p == orig)
        })
    })
}

/// The smaller dense pair that structured pruning pays for: from `first`
/// (whose weight rows were pruned, e.g. by [`ln_structured`] with `dim =
/// 0`; pruned or removed), the elementwise `activation` between the two
/// (ReLU, GELU, ..., or [`Identity`](super::Identity)) and the `second`
/// layer that reads its output, two new dense layers without the units
/// whose row of `first`'s masked weight is all zero. Such a unit outputs
/// the constant `activation(bias)`; its contribution is folded into the
/// second layer's bias (which is created if it is needed and absent), so
/// the pair computes the same function as before with `kept * (in + 1 +
/// out)` parameters where there were `units * (in + 1 + out)`. The
/// originals are left as they are: drop them to free their memory. The new
/// parameters require grad.
///
/// ```
/// use tensorscope::nn::{prune, Linear, Module, ReLU};
/// let mut fc1 = Linear::new(8, 10)?;
/// let fc2 = Linear::new(10, 3)?;
/// prune::ln_structured(&mut fc1, "weight", 0.4, 2.0, 0)?;
/// let (a, b) = prune::drop_pruned_units(&fc1, &ReLU, &fc2)?;
/// assert_eq!((a.out_features(), b.in_features()), (6, 6));
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub fn drop_pruned_units(
    first: &Linear,
    activation: &dyn Module,
    second: &Linear,
) -> Result<(Linear, Linear)> {
    const OP: &str = "prune::drop_pruned_units";
    if first.out_features() != second.in_features() {
        bail!(Error::shape(
            OP,
            first.weight.shape(),
            second.weight.shape(),
            "the first layer's out_features must be the second's in_features"
        ));
    }
    no_grad(|| {
        let w1 = masked(first, "weight")?;
        let b1 = match &first.bias {
            Some(_) => Some(masked(first, "bias")?),
            None => None,
        };
        let w2 = masked(second, "weight")?;
        let b2 = match &second.bias {
            Some(_) => Some(masked(second, "bias")?),
            None => None,
        };
        let dev = w1.device();
        let live = w1.ne_scalar(0.0)?.sum(&[1], false)?.to_vec::<f64>()?;
        let (kept, dead): (Vec<i64>, Vec<i64>) =
            (0..live.len() as i64).partition(|&u| live[u as usize] != 0.0);
        let index = |v: Vec<i64>| -> Result<Tensor> {
            let n = v.len();
            Tensor::from_vec(v, &[n], Device::Cpu)?.to_device(dev)
        };
        let (nd, dead) = (dead.len(), index(dead)?);
        let kept = index(kept)?;
        let leaf = |t: Tensor| t.contiguous()?.detach().deep_clone()?.requires_grad_(true);
        // What the dead units feed the second layer: W2[:, dead] act(b1[dead]).
        let fold = if nd == 0 {
            None
        } else {
            let c = match &b1 {
                Some(b) => b.index_select(0, &dead)?,
                None => Tensor::zeros(&[nd], w1.dtype(), dev)?,
            };
            let c = activation.forward(&c)?.reshape(&[-1, 1])?;
            let f = w2.index_select(1, &dead)?.matmul(&c)?;
            Some(f.reshape(&[-1])?)
        };
        let b2 = match (b2, fold) {
            (Some(b), Some(f)) => Some(b.add(&f)?),
            (b, f) => b.or(f),
        };
        let a = Linear::from_parts(
            leaf(w1.index_select(0, &kept)?)?,
            b1.map(|b| leaf(b.index_select(0, &kept)?)).transpose()?,
        )?;
        let b = Linear::from_parts(leaf(w2.index_select(1, &kept)?)?, b2.map(leaf).transpose()?)?;
        Ok((a, b))
    })
    .map_err(|e: Error| e.in_op(OP))
}
