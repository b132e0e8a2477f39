//! The fused optimizer kernels on CUDA (`kernels/optim.cu`): one Adam/AdamW
//! or SGD update per parameter in a single pass, and the sum of squares
//! behind `clip_grad_norm_`.
//!
//! The updates follow `cpu::optim` operation for operation (explicitly
//! rounded intrinsics, no FMA contraction: the PTX has no `fma`), so CUDA
//! and the CPU should agree to the bit on the same inputs (the tests only
//! require agreement to rounding; not yet run on a GPU). The hyper-parameters travel by value in
//! [`AdamK`] / [`SgdK`] (doubles, converted to the compute type in the
//! kernel as the CPU converts them); operands by base pointer and a
//! [`Geom`], so any layout works and the all-dense case takes the fast path.
//!
//! RMSprop, Adagrad and Lion share one kernel, `rule_step_<dt>`, with
//! their constants in [`RuleK`] and up to three state buffers.
//!
//! The sum of squares is accumulated in **f64** (each square of an f32, f16
//! or bf16 value is exact in f64; only the additions round), one partial per
//! block summed by the host in block order, so the result is deterministic
//! for a device and close to the CPU's (which also sums in f64, in another
//! order). The partials go to a small per-device scratch buffer allocated
//! once from the driver, outside the caching allocator, so
//! `clip_grad_norm_` allocates nothing from the device allocator on CUDA
//! either; the host waits for the read-back (one synchronisation per
//! gradient).

use super::device::{drv, gpu_of, Gpu};
use super::kernels;
use super::launch::{dptr, numel, Geom, BLOCK};
use super::stream::current;
use super::transfer;
use crate::backend::optim::{AdamHyper, SgdHyper, UpdateRule};
use crate::backend::Operand;
use crate::error::{Error, Result};
use cudarc::driver::{sys, DeviceRepr};
use std::sync::Mutex;

/// Adam's per-step constants, as `AdamK` in `kernels/optim.cu`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct AdamK {
    pub sign: f64,
    pub wd: f64,
    pub decay: f64,
    pub w1: f64,
    pub beta2: f64,
    pub one_minus_beta2: f64,
    pub bc2_sqrt: f64,
    pub eps: f64,
    pub neg_step: f64,
    pub l2: i32,
    pub w1_small: i32,
    pub ams: i32,
    pub pad: i32,
}

// SAFETY: plain old data with the C layout of `AdamK` in kernels/optim.cu.
unsafe impl DeviceRepr for AdamK {}

/// SGD's per-step constants, as `SgdK` in `kernels/optim.cu`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct SgdK {
    pub sign: f64,
    pub wd: f64,
    pub momentum: f64,
    pub one_minus_dampening: f64,
    pub neg_lr: f64,
    pub l2: i32,
    pub nesterov: i32,
    pub first: i32,
    pub has_buf: i32,
}

// SAFETY: plain old data with the C layout of `SgdK` in kernels/optim.cu.
unsafe impl DeviceRepr for SgdK {}

impl AdamK {
    /// The constants of `cpu::optim::AdamK::new`, before the conversion to
    /// the compute type (done in the kernel).
    pub(crate) fn new(h: &AdamHyper, ams: bool) -> Self {
        let w1 = 1.0 - h.beta1;
        AdamK {
            sign: if h.maximize { -1.0 } else { 1.0 },
            wd: h.weight_decay,
            decay: if h.decoupled {
                1.0 - h.lr * h.weight_decay
            } else {
                1.0
            },
            w1,
            beta2: h.beta2,
            one_minus_beta2: 1.0 - h.beta2,
            bc2_sqrt: h.bias_correction2.sqrt(),
            eps: h.eps,
            neg_step: -(h.lr / h.bias_correction1),
            l2: (!h.decoupled && h.weight_decay != 0.0) as i32,
            w1_small: (w1.abs() < 0.5) as i32,
            ams: ams as i32,
            pad: 0,
        }
    }
}

impl SgdK {
    /// The constants of `cpu::optim::SgdK::new`.
    pub(crate) fn new(h: &SgdHyper, has_buf: bool) -> Self {
        SgdK {
            sign: if h.maximize { -1.0 } else { 1.0 },
            wd: h.weight_decay,
            momentum: h.momentum,
            one_minus_dampening: 1.0 - h.dampening,
            neg_lr: -h.lr,
            l2: (h.weight_decay != 0.0) as i32,
            nesterov: h.nesterov as i32,
            first: h.first as i32,
            has_buf: has_buf as i32,
        }
    }
}

/// Every operand a float of `p`'s dtype and shape (the optimizers check
/// this; a wrong call is an error here, never a bad launch).
fn check(op: &'static str, p: &Operand, others: &[&Operand]) -> Result<()> {
    if !p.dtype.is_float() {
        return Err(Error::dtype(op, "a float parameter", p.dtype));
    }
    for o in others {
        if o.dtype != p.dtype {
            return Err(Error::dtype(op, p.dtype.name(), o.dtype));
        }
        if o.layout.shape() != p.layout.shape() {
            return Err(Error::shape(
                op,
                p.layout.shape(),
                o.layout.shape(),
                "the gradient and the optimizer state must have the parameter's shape",
            ));
        }
    }
    Ok(())
}

/// One fused Adam/AdamW update on CUDA (see
/// [`crate::backend::optim::adam_step`]); the caller holds the locks.
pub(crate) fn adam_step(
    op: &'static str,
    p: &Operand,
    g: &Operand,
    m: &Operand,
    v: &Operand,
    vmax: Option<&Operand>,
    h: &AdamHyper,
) -> Result<()> {
    let gpu = gpu_of(op, p.storage.device())?;
    let x = vmax.unwrap_or(v);
    check(op, p, &[g, m, v, x])?;
    let n = numel(p);
    if n == 0 {
        return Ok(());
    }
    let geom = Geom::<5>::new(op, [&p.layout, &g.layout, &m.layout, &v.layout, &x.layout])?;
    let k = AdamK::new(h, vmax.is_some());
    let f = gpu.kernel(op, &kernels::adam_step(p.dtype))?;
    let s = current(gpu);
    let args = (geom, n, dptr(p), dptr(g), dptr(m), dptr(v), dptr(x), k);
    // SAFETY: adam_step_<dt>(Geom<5>, i64, T*, const T*, T*, T*, T*, AdamK)
    // over n elements of five operands of one shape and dtype whose layouts
    // fit their storages (the optimizer checked), locked by the dispatcher;
    // vmax is only touched when k.ams.
    unsafe { f.launch(op, &s, gpu.grid(n), &args) }
}

/// One fused SGD update on CUDA (see [`crate::backend::optim::sgd_step`]).
pub(crate) fn sgd_step(
    op: &'static str,
    p: &Operand,
    g: &Operand,
    buf: Option<&Operand>,
    h: &SgdHyper,
) -> Result<()> {
    let gpu = gpu_of(op, p.storage.device())?;
    let b = buf.unwrap_or(p);
    check(op, p, &[g, b])?;
    let n = numel(p);
    if n == 0 {
        return Ok(());
    }
    let geom = Geom::<3>::new(op, [&p.layout, &g.layout, &b.layout])?;
    let k = SgdK::new(h, buf.is_some());
    let f = gpu.kernel(op, &kernels::sgd_step(p.dtype))?;
    let s = current(gpu);
    let args = (geom, n, dptr(p), dptr(g), dptr(b), k);
    // SAFETY: sgd_step_<dt>(Geom<3>, i64, T*, const T*, T*, SgdK) over n
    // elements of operands of one shape and dtype that fit their storages;
    // buf is only touched when k.has_buf.
    unsafe { f.launch(op, &s, gpu.grid(n), &args) }
}

/// Most blocks of one sum-of-squares launch (the scratch buffer holds one
/// f64 partial per block).
const MAX_BLOCKS: usize = 1024;

/// One scratch buffer of [`MAX_BLOCKS`] f64 per device, allocated from the
/// driver on first use and kept for the life of the process; the mutex is
/// held from the launch to the end of the read-back.
static SCRATCH: Mutex<Vec<(usize, u64)>> = Mutex::new(Vec::new());

fn scratch(op: &'static str, g: &Gpu, held: &mut Vec<(usize, u64)>) -> Result<u64> {
    if let Some(&(_, p)) = held.iter().find(|(o, _)| *o == g.ordinal) {
        return Ok(p);
    }
    g.bind(op)?;
    let mut p: sys::CUdeviceptr = 0;
    // SAFETY: the device's context is current; `p` receives the address.
    unsafe { sys::cuMemAlloc_v2(&mut p, MAX_BLOCKS * 8) }
        .result()
        .map_err(drv(op))?;
    held.push((g.ordinal, p));
    Ok(p)
}

/// `sum(x * x)` over a float tensor on CUDA, accumulated in f64 and read
/// back (the call waits for it).
pub(crate) fn sum_squares(op: &'static str, src: &Operand) -> Result<f64> {
    let g = gpu_of(op, src.storage.device())?;
    if !src.dtype.is_float() {
        return Err(Error::dtype(op, "a float tensor", src.dtype));
    }
    let n = numel(src);
    if n == 0 {
        return Ok(0.0);
    }
    let geom = Geom::<1>::new(op, [&src.layout])?;
    let blocks = (n as usize)
        .div_ceil(BLOCK as usize)
        .min(g.sm_count as usize * 4)
        .clamp(1, MAX_BLOCKS);
    let f = g.kernel(op, &kernels::sum_squares(src.dtype))?;
    let s = current(g);
    let mut held = SCRATCH.lock().unwrap_or_else(|e| e.into_inner());
    let partials = scratch(op, g, &mut held)?;
    let args = (geom, n, dptr(src), partials);
    // SAFETY: sum_squares_<dt>(Geom<1>, i64, const T*, double*) over n
    // elements of `src` (read-locked by the dispatcher), one partial per
    // block into the scratch buffer of MAX_BLOCKS doubles (blocks <=
    // MAX_BLOCKS), which the held mutex reserves until the read-back ends.
    unsafe { f.launch(op, &s, g.blocks(blocks as u64), &args)? };
    let mut host = vec![0.0f64; blocks];
    // SAFETY: `blocks` f64 on both sides; the copy is ordered after the
    // launch on `s` and waited for.
    unsafe { transfer::device_to_host(g, &s, host.as_mut_ptr() as *mut u8, partials, blocks * 8)? };
    drop(held);
    Ok(host.iter().sum())
}

/// GradScaler's pass on CUDA (see [`crate::backend::optim::unscale_check`]):
/// one launch, nothing waited for.
pub(crate) fn unscale_check(
    op: &'static str,
    x: &Operand,
    inv_scale: f32,
    found: &Operand,
) -> Result<()> {
    let g = gpu_of(op, x.storage.device())?;
    if !x.dtype.is_float() {
        return Err(Error::dtype(op, "a float gradient", x.dtype));
    }
    if found.dtype != crate::dtype::DType::F32 || numel(found) != 1 {
        return Err(Error::dtype(op, "an f32 [1] found-inf flag", found.dtype));
    }
    let n = numel(x);
    if n == 0 {
        return Ok(());
    }
    let geom = Geom::<1>::new(op, [&x.layout])?;
    let f = g.kernel(op, &kernels::unscale_check(x.dtype))?;
    let s = current(g);
    let args = (geom, n, dptr(x), inv_scale, dptr(found));
    // SAFETY: unscale_check_<dt>(Geom<1>, i64, T*, float, float*) over n
    // elements of `x`, whose layout fits its storage and does not overlap
    // (the caller checked it is writable), write-locked by the dispatcher
    // with `found`, one f32 (checked above) that the kernel only sets to 1.
    unsafe { f.launch(op, &s, g.grid(n), &args) }
}

/// The constants of an [`UpdateRule`], as `RuleK` in `kernels/optim.cu`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct RuleK {
    pub sign: f64,
    pub wd: f64,
    pub decay: f64,
    pub a: f64,
    pub one_minus_a: f64,
    pub b: f64,
    pub one_minus_b: f64,
    pub eps: f64,
    pub neg_lr: f64,
    pub kind: i32,
    pub l2: i32,
    pub mom: i32,
    pub centered: i32,
    pub w_small: i32,
    pub pad: i32,
}

// SAFETY: plain old data with the C layout of `RuleK` in kernels/optim.cu.
unsafe impl DeviceRepr for RuleK {}

impl RuleK {
    /// The constants `cpu::optim::rule` gives its rule, before the
    /// conversion to the compute type (done in the kernel).
    pub(crate) fn new(r: &UpdateRule) -> Self {
        let sign = |m: bool| if m { -1.0 } else { 1.0 };
        let zero = RuleK {
            sign: 1.0,
            wd: 0.0,
            decay: 1.0,
            a: 0.0,
            one_minus_a: 0.0,
            b: 0.0,
            one_minus_b: 0.0,
            eps: 0.0,
            neg_lr: 0.0,
            kind: 0,
            l2: 0,
            mom: 0,
            centered: 0,
            w_small: 0,
            pad: 0,
        };
        match *r {
            UpdateRule::RmsProp {
                lr,
                alpha,
                eps,
                weight_decay,
                momentum,
                centered,
                maximize,
            } => RuleK {
                sign: sign(maximize),
                wd: weight_decay,
                a: alpha,
                one_minus_a: 1.0 - alpha,
                b: momentum,
                eps,
                neg_lr: -lr,
                l2: (weight_decay != 0.0) as i32,
                mom: (momentum > 0.0) as i32,
                centered: centered as i32,
                w_small: ((1.0 - alpha).abs() < 0.5) as i32,
                ..zero
            },
            UpdateRule::Adagrad {
                clr,
                eps,
                weight_decay,
                maximize,
            } => RuleK {
                sign: sign(maximize),
                wd: weight_decay,
                eps,
                neg_lr: -clr,
                kind: 1,
                l2: (weight_decay != 0.0) as i32,
                ..zero
            },
            UpdateRule::Lion {
                lr,
                beta1,
                beta2,
                weight_decay,
                maximize,
            } => RuleK {
                sign: sign(maximize),
                decay: 1.0 - lr * weight_decay,
                a: beta1,
                one_minus_a: 1.0 - beta1,
                b: beta2,
                one_minus_b: 1.0 - beta2,
                neg_lr: -lr,
                kind: 2,
                ..zero
            },
        }
    }
}

/// One fused update of an [`UpdateRule`] on CUDA (see
/// [`crate::backend::optim::rule_step`]); the caller holds the locks.
pub(crate) fn rule_step(
    op: &'static str,
    p: &Operand,
    g: &Operand,
    states: [Option<&Operand>; 3],
    r: &UpdateRule,
) -> Result<()> {
    let gpu = gpu_of(op, p.storage.device())?;
    let [s0, s1, s2] = states.map(|s| s.unwrap_or(p));
    check(op, p, &[g, s0, s1, s2])?;
    let n = numel(p);
    if n == 0 {
        return Ok(());
    }
    let geom = Geom::<5>::new(
        op,
        [&p.layout, &g.layout, &s0.layout, &s1.layout, &s2.layout],
    )?;
    let f = gpu.kernel(op, &kernels::rule_step(p.dtype))?;
    let s = current(gpu);
    let args = (
        geom,
        n,
        dptr(p),
        dptr(g),
        dptr(s0),
        dptr(s1),
        dptr(s2),
        RuleK::new(r),
    );
    // SAFETY: rule_step_<dt>(Geom<5>, i64, T*, const T*, T*, T*, T*, RuleK)
    // over n elements of operands of one shape and dtype whose layouts fit
    // their storages (the optimizer checked), locked by the dispatcher; the
    // kernel touches exactly the slots the rule uses, which the optimizer
    // gave as `Some`.
    unsafe { f.launch(op, &s, gpu.grid(n), &args) }
}
