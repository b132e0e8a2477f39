//! Dynamic loss scaling for f16 training (PyTorch's `torch.amp.GradScaler`).

use super::{check_range, Optimizer};
use crate::backend::optim::unscale_check;
use crate::backend::Operand;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{bail, Error, Result};
use crate::nn::Module;
use crate::tensor::Tensor;

/// A [`GradScaler`]'s options, with PyTorch's defaults.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct GradScalerConfig {
    /// The first scale (2^16).
    pub init_scale: f64,
    /// The scale is multiplied by this after `growth_interval` steps in a
    /// row without an inf or NaN gradient (2; must be > 1).
    pub growth_factor: f64,
    /// ... and by this after a step with one, which is skipped (0.5; must
    /// be in (0, 1)).
    pub backoff_factor: f64,
    /// Steps without an inf or NaN between growths (2000; > 0).
    pub growth_interval: u64,
    /// `false`: `scale` returns the loss, `step` always steps, `update`
    /// does nothing (one code path with scaling on or off).
    pub enabled: bool,
}

impl Default for GradScalerConfig {
    fn default() -> Self {
        GradScalerConfig {
            init_scale: 65536.0,
            growth_factor: 2.0,
            backoff_factor: 0.5,
            growth_interval: 2000,
            enabled: true,
        }
    }
}

/// Where one optimizer is in the current iteration.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Stage {
    Unscaled,
    Stepped,
}

/// Multiplies the loss by a scale before backward, so that small f16
/// gradients do not flush to zero, and divides the gradients by it before
/// the optimizer steps; a step whose gradients hold an inf or NaN is
/// skipped and the scale backs off.
///
/// Each iteration: `scaler.scale(&loss)?.backward()?`, optionally
/// `scaler.unscale_(&opt, &model)?` (to clip the true gradients), then
/// `scaler.step(&mut opt, &mut model)?` and `scaler.update()?`.
///
/// * The unscale and the inf/NaN check are one pass over each gradient,
///   in place (`backend::optim::unscale_check`); a one-element flag per
///   device is made on the first step and reused, so later steps allocate
///   nothing. On CUDA the flags are read once per `unscale_` (one wait).
/// * Errors, each before anything changes: `unscale_` twice in one
///   iteration or after `step`, `step` twice, `step` or `unscale_` with no
///   scaled backward since the last `update` (or no gradient at all), and
///   `update` with no step.
///
/// ```
/// use tensorscope::nn::{Linear, Module};
/// use tensorscope::optim::{GradScaler, Optimizer, Sgd, SgdConfig};
/// use tensorscope::{DType, Device, Tensor};
/// let mut model = Linear::new(4, 1)?;
/// let mut opt = Sgd::new(SgdConfig { lr: 0.1, ..Default::default() })?;
/// let mut scaler = GradScaler::new();
/// let x = Tensor::ones(&[2, 4], DType::F32, Device::Cpu)?;
/// let loss = model.forward(&x)?.sum_all()?;
/// scaler.scale(&loss)?.backward()?;
/// assert!(scaler.step(&mut opt, &mut model)?); // finite: stepped
/// scaler.update()?;
/// assert_eq!(scaler.scale_factor(), 65536.0);
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub struct GradScaler {
    cfg: GradScalerConfig,
    scale: f64,
    /// Steps in a row without an inf or NaN.
    growth_tracker: u64,
    /// `scale` was called since the last `update`.
    scaled: bool,
    /// This iteration's optimizers (by address): their stage and whether
    /// their gradients held an inf or NaN.
    per_opt: Vec<(usize, Stage, bool)>,
    /// One f32 `[1]` found-inf flag per device, kept across steps.
    flags: Vec<Tensor>,
}

impl Default for GradScaler {
    fn default() -> Self {
        GradScaler::new()
    }
}

/// The key of an optimizer in `per_opt`: its address.
fn key(opt: &dyn Optimizer) -> usize {
    opt as *const dyn Optimizer as *const () as usize
}

impl GradScaler {
    /// A scaler with PyTorch's defaults.
    pub fn new() -> GradScaler {
        GradScaler::from_checked(GradScalerConfig::default())
    }

    /// A scaler with the given options; an `Err` naming the option for a
    /// scale that is not positive and finite, `growth_factor <= 1`,
    /// `backoff_factor` outside (0, 1), or `growth_interval` 0.
    pub fn with_config(cfg: GradScalerConfig) -> Result<GradScaler> {
        check_config(&cfg)?;
        Ok(GradScaler::from_checked(cfg))
    }

    fn from_checked(cfg: GradScalerConfig) -> GradScaler {
        GradScaler {
            cfg,
            scale: cfg.init_scale,
            growth_tracker: 0,
            scaled: false,
            per_opt: Vec::new(),
            flags: Vec::new(),
        }
    }

    /// `true` unless made with `enabled: false`.
    pub fn is_enabled(&self) -> bool {
        self.cfg.enabled
    }

    /// The current scale (1 when disabled, as PyTorch's `get_scale`).
    pub fn scale_factor(&self) -> f64 {
        if self.cfg.enabled {
            self.scale
        } else {
            1.0
        }
    }

    /// Steps in a row without an inf or NaN since the last growth or
    /// backoff.
    pub fn growth_tracker(&self) -> u64 {
        self.growth_tracker
    }

    /// `loss * scale`, in the loss's dtype, to call `backward` on. An `Err`
    /// for a loss that is not a float tensor.
    pub fn scale(&mut self, loss: &Tensor) -> Result<Tensor> {
        const OP: &str = "GradScaler::scale";
        if !loss.dtype().is_float() {
            bail!(Error::dtype(OP, "a float loss", loss.dtype()));
        }
        if !self.cfg.enabled {
            return Ok(loss.alias());
        }
        self.scaled = true;
        loss.mul_scalar(self.scale)
    }

    /// Divides every gradient of `model` by the scale in place and records
    /// whether one held an inf or NaN, for `opt`'s coming `step`. Call it
    /// before clipping (`clip_grad_norm_`) so the clip sees true gradients.
    pub fn unscale_(&mut self, opt: &dyn Optimizer, model: &dyn Module) -> Result<()> {
        const OP: &str = "GradScaler::unscale_";
        if !self.cfg.enabled {
            return Ok(());
        }
        match self.stage(key(opt)) {
            Some(Stage::Unscaled) => bail!(Error::arg(
                OP,
                "unscale_() has already been called on this optimizer since the last update()"
            )),
            Some(Stage::Stepped) => {
                bail!(Error::arg(OP, "unscale_() is being called after step()"))
            }
            None => {}
        }
        let found = self.unscale_grads(OP, model)?;
        self.per_opt.push((key(opt), Stage::Unscaled, found));
        Ok(())
    }

    /// Unscales (unless `unscale_` did) and steps `opt` over `model`,
    /// unless a gradient held an inf or NaN: then the step is skipped.
    /// `true` when it stepped.
    pub fn step(&mut self, opt: &mut dyn Optimizer, model: &mut dyn Module) -> Result<bool> {
        const OP: &str = "GradScaler::step";
        if !self.cfg.enabled {
            opt.step(model)?;
            return Ok(true);
        }
        let k = key(opt);
        let found = match self.stage(k) {
            Some(Stage::Stepped) => bail!(Error::arg(
                OP,
                "step() has already been called since the last update()"
            )),
            Some(Stage::Unscaled) => self.per_opt.iter().any(|e| e.0 == k && e.2),
            None => {
                let f = self.unscale_grads(OP, model)?;
                self.per_opt.push((k, Stage::Unscaled, f));
                f
            }
        };
        if !found {
            opt.step(model)?;
        }
        if let Some(e) = self.per_opt.iter_mut().find(|e| e.0 == k) {
            e.1 = Stage::Stepped;
        }
        Ok(!found)
    }

    /// Adjusts the scale after this iteration's steps: times
    /// `backoff_factor` if any gradient held an inf or NaN, times
    /// `growth_factor` after `growth_interval` clean iterations in a row
    /// (unless that would overflow), as PyTorch's `_amp_update_scale_`.
    pub fn update(&mut self) -> Result<()> {
        if !self.cfg.enabled {
            return Ok(());
        }
        if self.per_opt.is_empty() {
            bail!(Error::arg(
                "GradScaler::update",
                "no inf checks were recorded prior to update(): call step() (or unscale_()) first"
            ));
        }
        if self.per_opt.iter().any(|e| e.2) {
            self.scale *= self.cfg.backoff_factor;
            self.growth_tracker = 0;
        } else {
            let clean = self.growth_tracker + 1;
            if clean == self.cfg.growth_interval {
                let grown = self.scale * self.cfg.growth_factor;
                if grown.is_finite() {
                    self.scale = grown;
                }
                self.growth_tracker = 0;
            } else {
                self.growth_tracker = clean;
            }
        }
        self.per_opt.clear();
        self.scaled = false;
        Ok(())
    }

    /// The scaler's state under PyTorch's keys (`scale`, `growth_factor`,
    /// `backoff_factor`, `growth_interval`, `_growth_tracker`), as rank-0
    /// f64 CPU tensors: save them with the model's state
    /// (`nn::save_tensors`).
    pub fn state_dict(&self) -> Result<Vec<(String, Tensor)>> {
        let v = [
            ("scale", self.scale_factor()),
            ("growth_factor", self.cfg.growth_factor),
            ("backoff_factor", self.cfg.backoff_factor),
            ("growth_interval", self.cfg.growth_interval as f64),
            ("_growth_tracker", self.growth_tracker as f64),
        ];
        v.iter()
            .map(|&(k, x)| Ok((k.to_string(), Tensor::scalar(x, Device::Cpu)?)))
            .collect()
    }

    /// Restores a [`state_dict`](GradScaler::state_dict). An `Err` (and
    /// nothing changed) for a missing key, a tensor that is not one number,
    /// or values a config would refuse.
    pub fn load_state_dict(&mut self, state: &[(String, Tensor)]) -> Result<()> {
        const OP: &str = "GradScaler::load_state_dict";
        let get = |name: &str| -> Result<f64> {
            let Some((_, t)) = state.iter().find(|(k, _)| k == name) else {
                bail!(Error::arg(OP, format!("the state has no {name:?}")));
            };
            if t.numel() != 1 {
                bail!(Error::shape(
                    OP,
                    t.shape(),
                    &[],
                    format!("{name:?} must be one number")
                ));
            }
            t.to_dtype(DType::F64)?.reshape(&[])?.item::<f64>()
        };
        let count = |name: &str| -> Result<u64> {
            let v = get(name)?;
            if !(v >= 0.0 && v.fract() == 0.0 && v < 2f64.powi(53)) {
                bail!(Error::arg(OP, format!("{name:?} must be a count, got {v}")));
            }
            Ok(v as u64)
        };
        let cfg = GradScalerConfig {
            init_scale: get("scale")?,
            growth_factor: get("growth_factor")?,
            backoff_factor: get("backoff_factor")?,
            growth_interval: count("growth_interval")?,
            enabled: self.cfg.enabled,
        };
        check_config(&cfg).map_err(|e| e.reported_as(OP))?;
        let tracker = count("_growth_tracker")?;
        self.cfg = cfg;
        self.scale = cfg.init_scale;
        self.growth_tracker = tracker;
        Ok(())
    }

    fn stage(&self, k: usize) -> Option<Stage> {
        self.per_opt.iter().find(|e| e.0 == k).map(|e| e.1)
    }

    /// The fused pass over every gradient of `model`; `true` if one held
    /// an inf or NaN. Every gradient is checked before any is changed.
    fn unscale_grads(&mut self, op: &'static str, model: &dyn Module) -> Result<bool> {
        if !self.scaled {
            bail!(Error::arg(
                op,
                "no scaled backward since the last update(): call backward() on scale(loss) first"
            ));
        }
        let _g = crate::autograd::no_grad_guard();
        let params = model.parameters();
        let grads: Vec<Tensor> = params.iter().filter_map(|p| p.grad()).collect();
        if grads.is_empty() {
            bail!(Error::arg(
                op,
                "no inf checks were recorded: no parameter of the model has a gradient"
            ));
        }
        for g in &grads {
            if !g.dtype().is_float() {
                bail!(Error::dtype(op, "a float gradient", g.dtype()));
            }
            g.check_writable(op)?;
        }
        for g in &grads {
            self.flag(g.device())?;
        }
        for f in &mut self.flags {
            f.zero_()?;
        }
        // PyTorch's inverse: the f64 reciprocal rounded to f32.
        let inv = (1.0 / self.scale) as f32;
        for g in &grads {
            let f = self.flag(g.device())?;
            unscale_check(op, &Operand::of(g), inv, &Operand::of(f))?;
        }
        let mut found = false;
        for f in &self.flags {
            found |= f.item::<f32>()? != 0.0;
        }
        Ok(found)
    }

    /// The found-inf flag of `dev`, made on its first use.
    fn flag(&mut self, dev: Device) -> Result<&Tensor> {
        let i = match self.flags.iter().position(|f| f.device() == dev) {
            Some(i) => i,
            None => {
                self.flags.push(Tensor::zeros(&[1], DType::F32, dev)?);
                self.flags.len() - 1
            }
        };
        Ok(&self.flags[i])
    }
}

fn check_config(cfg: &GradScalerConfig) -> Result<()> {
    const OP: &str = "GradScaler";
    check_range(
        OP,
        "init_scale",
        cfg.init_scale,
        f64::MIN_POSITIVE,
        f64::INFINITY,
        false,
    )?;
    check_range(
        OP,
        "growth_factor",
        cfg.growth_factor,
        1.0,
        f64::INFINITY,
        false,
    )?;
    if cfg.growth_factor == 1.0 {
        bail!(Error::arg(
            OP,
            "growth_factor must be greater than 1, got 1"
        ));
    }
    check_range(
        OP,
        "backoff_factor",
        cfg.backoff_factor,
        f64::MIN_POSITIVE,
        1.0,
        false,
    )?;
    if cfg.growth_interval == 0 {
        bail!(Error::arg(OP, "growth_interval must be positive, got 0"));
    }
    Ok(())
}
