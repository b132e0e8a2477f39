//! Fused optimizer kernels: one pass per parameter.
//!
//! Adam reads `p, g, m, v` (and `vmax` with amsgrad) once and writes
//! `p, m, v` (and `vmax`); SGD reads `p, g` (and the momentum buffer) and
//! writes `p` (and the buffer). Each follows PyTorch's `_single_tensor_*`
//! equations in their order of operations, computed in [`Flt::C`] (f32 for
//! f32/f16/bf16, f64 for f64) with the scalars converted to that type as
//! ATen's CPU kernels do. RMSprop, Adagrad and Lion ([`rule`]) share one
//! kernel over the parameter, its gradient and up to three state buffers,
//! generic over the per-element [`Rule`]. Operands may have any strides (the gradient of a
//! transposed weight, an expanded gradient); large parameters are split over
//! the kernel pool by [`Plan::par_runs`].

use num_traits::Float;

use super::numeric_traits::Flt;
use super::ptr;
use super::strided::{Plan, SendPtr, PAR_CHUNK};
use super::thread_pool::par_map;
use crate::backend::optim::{AdamHyper, SgdHyper, UpdateRule};
use crate::backend::Operand;
use crate::with_float_dtype;

#[inline(always)]
fn c<C: Float>(v: f64) -> C {
    C::from(v).unwrap_or_else(C::nan)
}

/// Adam's per-element constants, in the compute type.
#[derive(Copy, Clone)]
struct AdamK<C> {
    /// 1 or -1 (`maximize`).
    sign: C,
    /// L2 weight decay (0 unless Adam with a decay).
    wd: C,
    l2: bool,
    /// `1 - lr * weight_decay` for AdamW (1 otherwise).
    decay: C,
    /// The lerp weight `1 - beta1` and which of ATen's two lerp forms it takes.
    w1: C,
    one_minus_w1: C,
    w1_small: bool,
    beta2: C,
    one_minus_beta2: C,
    bc2_sqrt: C,
    eps: C,
    neg_step: C,
}

impl<C: Float> AdamK<C> {
    fn new(h: &AdamHyper) -> Self {
        let w1 = 1.0 - h.beta1;
        AdamK {
            sign: c(if h.maximize { -1.0 } else { 1.0 }),
            wd: c(h.weight_decay),
            l2: !h.decoupled && h.weight_decay != 0.0,
            decay: c(if h.decoupled {
                1.0 - h.lr * h.weight_decay
            } else {
                1.0
            }),
            w1: c(w1),
            one_minus_w1: C::one() - c(w1),
            w1_small: w1.abs() < 0.5,
            beta2: c(h.beta2),
            one_minus_beta2: c(1.0 - h.beta2),
            bc2_sqrt: c(h.bias_correction2.sqrt()),
            eps: c(h.eps),
            neg_step: c(-(h.lr / h.bias_correction1)),
        }
    }

    /// One element: returns `(p, m, v, vmax)` from the old values (`vmax`
    /// is only meaningful with `AMS`).
    #[inline(always)]
    fn update<const AMS: bool>(&self, p: C, g: C, m: C, v: C, vmax: C) -> (C, C, C, C) {
        let g = g * self.sign;
        let g = if self.l2 { g + self.wd * p } else { g };
        let p = p * self.decay;
        // exp_avg.lerp_(grad, 1 - beta1)
        let m = if self.w1_small {
            m + self.w1 * (g - m)
        } else {
            g - (g - m) * self.one_minus_w1
        };
        // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        let v = v * self.beta2 + self.one_minus_beta2 * g * g;
        let (den, vmax) = if AMS {
            let vmax = if vmax.is_nan() || v.is_nan() {
                C::nan()
            } else {
                vmax.max(v)
            };
            (vmax, vmax)
        } else {
            (v, vmax)
        };
        // denom = sqrt(v) / sqrt(bc2) + eps; p.addcdiv_(m, denom, -step_size)
        let denom = den.sqrt() / self.bc2_sqrt + self.eps;
        (p + self.neg_step * m / denom, m, v, vmax)
    }
}

/// The fused Adam update (see [`crate::backend::optim::adam_step`]).
pub(crate) fn adam(
    p: &Operand,
    g: &Operand,
    m: &Operand,
    v: &Operand,
    vmax: Option<&Operand>,
    h: &AdamHyper,
) {
    with_float_dtype!(p.dtype, T => {
        // SAFETY: the dispatcher holds the locks; the optimizer checked that
        // every operand has `p`'s shape and dtype and fits its storage.
        unsafe {
            match vmax {
                Some(x) => adam_t::<T, true>(p, g, m, v, x, h),
                None => adam_t::<T, false>(p, g, m, v, v, h),
            }
        }
    }, _ => unreachable!("adam on a non-float parameter"))
}

/// # Safety
/// As for the elementwise kernels: CPU storages of dtype `T`, locked by the
/// caller, layouts of one shape that fit them; `p`, `m`, `v` and `x` have no
/// internal overlap. Without `AMS`, `x` is ignored.
unsafe fn adam_t<T: Flt, const AMS: bool>(
    p: &Operand,
    g: &Operand,
    m: &Operand,
    v: &Operand,
    x: &Operand,
    h: &AdamHyper,
) {
    let k = AdamK::<T::C>::new(h);
    let pp = SendPtr(ptr::<T>(p.storage));
    let pg = SendPtr(ptr::<T>(g.storage));
    let pm = SendPtr(ptr::<T>(m.storage));
    let pv = SendPtr(ptr::<T>(v.storage));
    let px = SendPtr(ptr::<T>(x.storage));
    // Distinct storages never overlap, so dense runs may be seen as slices.
    let ids = [
        p.storage.id(),
        g.storage.id(),
        m.storage.id(),
        v.storage.id(),
    ];
    let distinct = (0..4).all(|i| (i + 1..4).all(|j| ids[i] != ids[j]))
        && (!AMS || !ids.contains(&x.storage.id()));
    let plan = Plan::new([&p.layout, &g.layout, &m.layout, &v.layout, &x.layout]);
    // SAFETY: the plan's runs stay inside the five layouts, which fit their
    // `T` storages (this function's contract); parallel runs touch
    // disjoint elements; the slice fast path is taken only when the storages
    // are `distinct`, so no two slices alias.
    plan.par_runs(|o, len, s| unsafe {
        let (pp, pg, pm, pv, px) = (
            pp.get().add(o[0]),
            pg.get().add(o[1]),
            pm.get().add(o[2]),
            pv.get().add(o[3]),
            px.get().add(o[4]),
        );
        let dense = s[0] == 1 && s[1] == 1 && s[2] == 1 && s[3] == 1 && (!AMS || s[4] == 1);
        if dense && distinct {
            let xs: &mut [T] = if AMS {
                std::slice::from_raw_parts_mut(px, len)
            } else {
                &mut []
            };
            adam_dense::<T, AMS>(
                k,
                std::slice::from_raw_parts_mut(pp, len),
                std::slice::from_raw_parts(pg as *const T, len),
                std::slice::from_raw_parts_mut(pm, len),
                std::slice::from_raw_parts_mut(pv, len),
                xs,
            );
        } else {
            // Any strides; every element is read before it is written.
            for i in 0..len {
                let (a, b, cm, d) = (
                    pp.add(i * s[0]),
                    pg.add(i * s[1]),
                    pm.add(i * s[2]),
                    pv.add(i * s[3]),
                );
                let e = px.add(i * s[4]);
                let xo = if AMS {
                    e.read().up()
                } else {
                    <T::C as num_traits::Zero>::zero()
                };
                let (np, nm, nv, nx) = k.update::<AMS>(
                    a.read().up(),
                    b.read().up(),
                    cm.read().up(),
                    d.read().up(),
                    xo,
                );
                a.write(T::down(np));
                cm.write(T::down(nm));
                d.write(T::down(nv));
                if AMS {
                    e.write(T::down(nx));
                }
            }
        }
    });
}

/// Runs `$body` (an expression over the function's arguments) compiled
/// for AVX2 when the CPU has it, and for the baseline otherwise. No FMA is
/// enabled, so both give the same bits.
macro_rules! multiversion {
    ($(#[$m:meta])* fn $name:ident<$T:ident, const $B:ident: bool>($($a:ident: $t:ty),*) $body:block) => {
        $(#[$m])*
        fn $name<$T: Flt, const $B: bool>($($a: $t),*) {
            #[cfg(target_arch = "x86_64")]
            {
                /// # Safety
                /// The CPU supports AVX2 (and the arguments meet the
                /// wrapped function's own contract).
                #[target_feature(enable = "avx2")]
                unsafe fn avx2<$T: Flt, const $B: bool>($($a: $t),*) $body
                // A cold dtype's update is one baseline copy (Note [cold
                // kernels]); the constant is tested alone, so that rustc
                // does not instantiate `avx2` for it.
                if <$T as crate::backend::cpu::simd::Hot>::HOT {
                    if std::arch::is_x86_feature_detected!("avx2") {
                        // SAFETY: the CPU has AVX2.
                        return unsafe { avx2::<$T, $B>($($a),*) };
                    }
                }
            }
            $body
        }
    };
    ($(#[$m:meta])* fn $name:ident<$T:ident, $R:ident: $Rb:path>($($a:ident: $t:ty),*) $body:block) => {
        $(#[$m])*
        fn $name<$T: Flt, $R: $Rb>($($a: $t),*) {
            #[cfg(target_arch = "x86_64")]
            {
                /// # Safety
                /// The CPU supports AVX2 (and the arguments meet the
                /// wrapped function's own contract).
                #[target_feature(enable = "avx2")]
                unsafe fn avx2<$T: Flt, $R: $Rb>($($a: $t),*) $body
                // A cold dtype's update is one baseline copy (Note [cold
                // kernels]); the constant is tested alone, so that rustc
                // does not instantiate `avx2` for it.
                if <$T as crate::backend::cpu::simd::Hot>::HOT {
                    if std::arch::is_x86_feature_detected!("avx2") {
                        // SAFETY: the CPU has AVX2.
                        return unsafe { avx2::<$T, $R>($($a),*) };
                    }
                }
            }
            $body
        }
    };
}

multiversion! {
    /// Adam over dense runs of distinct storages (`x` is empty without `AMS`).
    fn adam_dense<T, const AMS: bool>(k: AdamK<T::C>, p: &mut [T], g: &[T], m: &mut [T], v: &mut [T], x: &mut [T]) {
        let n = p.len();
        let (g, m, v) = (&g[..n], &mut m[..n], &mut v[..n]);
        if AMS {
            let x = &mut x[..n];
            for i in 0..n {
                let (np, nm, nv, nx) =
                    k.update::<true>(p[i].up(), g[i].up(), m[i].up(), v[i].up(), x[i].up());
                p[i] = T::down(np);
                m[i] = T::down(nm);
                v[i] = T::down(nv);
                x[i] = T::down(nx);
            }
        } else {
            let zero = <T::C as num_traits::Zero>::zero();
            for i in 0..n {
                let (np, nm, nv, _) = k.update::<false>(p[i].up(), g[i].up(), m[i].up(), v[i].up(), zero);
                p[i] = T::down(np);
                m[i] = T::down(nm);
                v[i] = T::down(nv);
            }
        }
    }
}

multiversion! {
    /// SGD over dense runs of distinct storages (`b` is empty without `MOM`).
    fn sgd_dense<T, const MOM: bool>(k: SgdK<T::C>, p: &mut [T], g: &[T], b: &mut [T]) {
        let n = p.len();
        let g = &g[..n];
        if MOM {
            let b = &mut b[..n];
            for i in 0..n {
                let (np, nb) = k.update::<true>(p[i].up(), g[i].up(), b[i].up());
                p[i] = T::down(np);
                b[i] = T::down(nb);
            }
        } else {
            let zero = <T::C as num_traits::Zero>::zero();
            for i in 0..n {
                p[i] = T::down(k.update::<false>(p[i].up(), g[i].up(), zero).0);
            }
        }
    }
}

/// SGD's per-element constants, in the compute type.
#[derive(Copy, Clone)]
struct SgdK<C> {
    sign: C,
    wd: C,
    l2: bool,
    momentum: C,
    one_minus_dampening: C,
    nesterov: bool,
    first: bool,
    neg_lr: C,
}

impl<C: Float> SgdK<C> {
    fn new(h: &SgdHyper) -> Self {
        SgdK {
            sign: c(if h.maximize { -1.0 } else { 1.0 }),
            wd: c(h.weight_decay),
            l2: h.weight_decay != 0.0,
            momentum: c(h.momentum),
            one_minus_dampening: c(1.0 - h.dampening),
            nesterov: h.nesterov,
            first: h.first,
            neg_lr: c(-h.lr),
        }
    }

    /// One element: returns `(p, buf)` (`buf` only meaningful with `MOM`).
    #[inline(always)]
    fn update<const MOM: bool>(&self, p: C, g: C, buf: C) -> (C, C) {
        let g = g * self.sign;
        let g = if self.l2 { g + self.wd * p } else { g };
        if MOM {
            // buf = clone(g) on the first step, else buf.mul_(momentum).add_(g, alpha=1 - dampening)
            let b = if self.first {
                g
            } else {
                buf * self.momentum + self.one_minus_dampening * g
            };
            let d = if self.nesterov {
                g + self.momentum * b
            } else {
                b
            };
            (p + self.neg_lr * d, b)
        } else {
            (p + self.neg_lr * g, buf)
        }
    }
}

/// The fused SGD update (see [`crate::backend::optim::sgd_step`]).
pub(crate) fn sgd(p: &Operand, g: &Operand, buf: Option<&Operand>, h: &SgdHyper) {
    with_float_dtype!(p.dtype, T => {
        // SAFETY: as for `adam`.
        unsafe {
            match buf {
                Some(b) => sgd_t::<T, true>(p, g, b, h),
                None => sgd_t::<T, false>(p, g, p, h),
            }
        }
    }, _ => unreachable!("sgd on a non-float parameter"))
}

/// # Safety
/// As for [`adam_t`]; without `MOM`, `b` is ignored.
unsafe fn sgd_t<T: Flt, const MOM: bool>(p: &Operand, g: &Operand, b: &Operand, h: &SgdHyper) {
    let k = SgdK::<T::C>::new(h);
    let pp = SendPtr(ptr::<T>(p.storage));
    let pg = SendPtr(ptr::<T>(g.storage));
    let pb = SendPtr(ptr::<T>(b.storage));
    let distinct = p.storage.id() != g.storage.id()
        && (!MOM || (b.storage.id() != p.storage.id() && b.storage.id() != g.storage.id()));
    let plan = Plan::new([&p.layout, &g.layout, &b.layout]);
    // SAFETY: as in `adam_t`: runs inside layouts that fit the storages,
    // disjoint per thread, slices only over `distinct` storages.
    plan.par_runs(|o, len, s| unsafe {
        let (pp, pg, pb) = (pp.get().add(o[0]), pg.get().add(o[1]), pb.get().add(o[2]));
        let dense = s[0] == 1 && s[1] == 1 && (!MOM || s[2] == 1);
        if dense && distinct {
            let bs: &mut [T] = if MOM {
                std::slice::from_raw_parts_mut(pb, len)
            } else {
                &mut []
            };
            sgd_dense::<T, MOM>(
                k,
                std::slice::from_raw_parts_mut(pp, len),
                std::slice::from_raw_parts(pg as *const T, len),
                bs,
            );
        } else {
            for i in 0..len {
                let (a, gg, bb) = (pp.add(i * s[0]), pg.add(i * s[1]), pb.add(i * s[2]));
                let bo = if MOM {
                    bb.read().up()
                } else {
                    <T::C as num_traits::Zero>::zero()
                };
                let (np, nb) = k.update::<MOM>(a.read().up(), gg.read().up(), bo);
                a.write(T::down(np));
                if MOM {
                    bb.write(T::down(nb));
                }
            }
        }
    });
}

/// `sum(x * x)` over a float tensor, accumulated in f64; the same result
/// whatever the thread count (fixed chunks, summed in order).
pub(crate) fn sum_squares(src: &Operand) -> f64 {
    with_float_dtype!(src.dtype, T => {
        // SAFETY: the dispatcher holds the read lock; the layout fits.
        unsafe { sum_squares_t::<T>(src) }
    }, _ => unreachable!("sum_squares on a non-float tensor"))
}

/// # Safety
/// A CPU storage of dtype `T`, read-locked, with a layout that fits it.
unsafe fn sum_squares_t<T: Flt>(src: &Operand) -> f64 {
    const L: usize = 8;
    let base = SendPtr(ptr::<T>(src.storage));
    let plan = Plan::new([&src.layout]);
    let n = plan.numel();
    let part = |start: usize, end: usize| -> f64 {
        let mut acc = [0.0f64; L];
        // SAFETY: runs inside the layout, which fits the read-locked
        // storage of `T` (the contract); reads only.
        plan.runs(start, end, &mut |o, len, s| unsafe {
            let p = base.get().add(o[0]) as *const T;
            if s[0] == 1 {
                let xs = std::slice::from_raw_parts(p, len);
                let mut blocks = xs.chunks_exact(L);
                for b in &mut blocks {
                    for j in 0..L {
                        let x = b[j].to_f64();
                        acc[j] += x * x;
                    }
                }
                for (j, x) in blocks.remainder().iter().enumerate() {
                    let x = x.to_f64();
                    acc[j] += x * x;
                }
            } else {
                for i in 0..len {
                    let x = p.add(i * s[0]).read().to_f64();
                    acc[i % L] += x * x;
                }
            }
        });
        acc.iter().sum()
    };
    let chunks = n.div_ceil(PAR_CHUNK);
    let chunk = |c: usize| part(c * PAR_CHUNK, ((c + 1) * PAR_CHUNK).min(n));
    if n < 2 * PAR_CHUNK {
        (0..chunks).map(chunk).sum()
    } else {
        // In chunk order: the sum does not depend on timing.
        par_map(chunks, chunk).iter().sum()
    }
}

/// GradScaler's pass over one float gradient (PyTorch's
/// `_amp_non_finite_check_and_unscale_`): `x *= inv_scale` in the compute
/// type, in place; `true` when an element was inf or NaN. Each element is
/// read once and written once.
pub(crate) fn unscale_check(x: &Operand, inv_scale: f32) -> bool {
    with_float_dtype!(x.dtype, T => {
        // SAFETY: the dispatcher holds the write lock; the layout fits.
        unsafe { unscale_check_t::<T>(x, inv_scale) }
    }, _ => unreachable!("unscale_check on a non-float tensor"))
}

/// # Safety
/// A CPU storage of dtype `T`, write-locked, with a layout whose elements
/// do not overlap (the caller checks `check_writable`).
unsafe fn unscale_check_t<T: Flt>(x: &Operand, inv_scale: f32) -> bool {
    let base = SendPtr(ptr::<T>(x.storage));
    let s: T::C = c(inv_scale as f64);
    let found = std::sync::atomic::AtomicBool::new(false);
    let plan = Plan::new([&x.layout]);
    // SAFETY: runs inside the layout, which fits the write-locked storage
    // of `T`; the runs of different threads are disjoint elements.
    plan.par_runs(|o, len, st| unsafe {
        let p = base.get().add(o[0]);
        let mut bad = false;
        for i in 0..len {
            let e = p.add(i * st[0]);
            let v = e.read().up();
            bad |= !v.is_finite();
            e.write(T::down(v * s));
        }
        if bad {
            found.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    });
    found.into_inner()
}

/// The per-element step of an optimizer run by [`rule`], in the compute
/// type.
trait Rule<C: Float>: Copy + Send + Sync {
    /// The new parameter from `p` and the gradient `g`; reads and writes
    /// the used slots of `s` (see [`UpdateRule::slots`]).
    fn update(&self, p: C, g: C, s: &mut [C; 3]) -> C;
}

/// `weight < 0.5 ? s + w * (e - s) : e - (e - s) * (1 - w)`: ATen's lerp.
#[inline(always)]
fn lerp<C: Float>(s: C, e: C, w: C, one_minus_w: C, w_small: bool) -> C {
    if w_small {
        s + w * (e - s)
    } else {
        e - (e - s) * one_minus_w
    }
}

/// RMSprop's constants (`_single_tensor_rmsprop`).
#[derive(Copy, Clone)]
struct RmsK<C> {
    sign: C,
    wd: C,
    l2: bool,
    alpha: C,
    /// `1 - alpha`: the squares' weight and the lerp weight of `grad_avg`.
    w: C,
    one_minus_w: C,
    w_small: bool,
    eps: C,
    momentum: C,
    mom: bool,
    centered: bool,
    neg_lr: C,
}

impl<C: Float + Send + Sync> Rule<C> for RmsK<C> {
    #[inline(always)]
    fn update(&self, p: C, g: C, s: &mut [C; 3]) -> C {
        let g = g * self.sign;
        let g = if self.l2 { g + self.wd * p } else { g };
        // square_avg.mul_(alpha).addcmul_(grad, grad, value=1 - alpha)
        let sq = s[0] * self.alpha + self.w * g * g;
        s[0] = sq;
        let avg = if self.centered {
            // grad_avg.lerp_(grad, 1 - alpha);
            // avg = square_avg.addcmul(grad_avg, grad_avg, value=-1).sqrt_()
            let ga = lerp(s[2], g, self.w, self.one_minus_w, self.w_small);
            s[2] = ga;
            (sq - ga * ga).sqrt()
        } else {
            sq.sqrt()
        };
        let avg = avg + self.eps;
        if self.mom {
            // buf.mul_(momentum).addcdiv_(grad, avg); param.add_(buf, alpha=-lr)
            let b = s[1] * self.momentum + g / avg;
            s[1] = b;
            p + self.neg_lr * b
        } else {
            // param.addcdiv_(grad, avg, value=-lr)
            p + self.neg_lr * g / avg
        }
    }
}

/// Adagrad's constants (`_single_tensor_adagrad`, the step's lr decayed).
#[derive(Copy, Clone)]
struct AdagradK<C> {
    sign: C,
    wd: C,
    l2: bool,
    eps: C,
    neg_clr: C,
}

impl<C: Float + Send + Sync> Rule<C> for AdagradK<C> {
    #[inline(always)]
    fn update(&self, p: C, g: C, s: &mut [C; 3]) -> C {
        let g = g * self.sign;
        let g = if self.l2 { g + self.wd * p } else { g };
        // state_sum.addcmul_(grad, grad, value=1)
        let sum = s[0] + g * g;
        s[0] = sum;
        // std = state_sum.sqrt().add_(eps); param.addcdiv_(grad, std, value=-clr)
        p + self.neg_clr * g / (sum.sqrt() + self.eps)
    }
}

/// Lion's constants (`lion-pytorch`'s update).
#[derive(Copy, Clone)]
struct LionK<C> {
    sign: C,
    /// `1 - lr * weight_decay`.
    decay: C,
    beta1: C,
    one_minus_beta1: C,
    beta2: C,
    one_minus_beta2: C,
    neg_lr: C,
}

/// `torch.sign`: 1, -1, or 0 for ±0 and NaN.
#[inline(always)]
fn sign_of<C: Float>(x: C) -> C {
    if x > C::zero() {
        C::one()
    } else if x < C::zero() {
        -C::one()
    } else {
        C::zero()
    }
}

impl<C: Float + Send + Sync> Rule<C> for LionK<C> {
    #[inline(always)]
    fn update(&self, p: C, g: C, s: &mut [C; 3]) -> C {
        let g = g * self.sign;
        // p.mul_(1 - lr * wd)
        let p = p * self.decay;
        // update = exp_avg.mul(beta1).add(grad, alpha=1 - beta1).sign_()
        let u = sign_of(s[0] * self.beta1 + self.one_minus_beta1 * g);
        // exp_avg.mul_(beta2).add_(grad, alpha=1 - beta2)
        s[0] = s[0] * self.beta2 + self.one_minus_beta2 * g;
        // p.add_(update, alpha=-lr)
        p + self.neg_lr * u
    }
}

/// The fused update of an [`UpdateRule`] (see
/// [`crate::backend::optim::rule_step`]).
pub(crate) fn rule(p: &Operand, g: &Operand, states: [Option<&Operand>; 3], r: &UpdateRule) {
    fn sign<C: Float>(maximize: bool) -> C {
        c(if maximize { -1.0 } else { 1.0 })
    }
    with_float_dtype!(p.dtype, T => {
        // SAFETY: the dispatcher holds the locks; the optimizer checked that
        // every operand has `p`'s shape and dtype and fits its storage, and
        // gives exactly the slots the rule uses.
        unsafe {
            match *r {
                UpdateRule::RmsProp { lr, alpha, eps, weight_decay, momentum, centered, maximize } => {
                    let w = 1.0 - alpha;
                    rule_t::<T, _>(p, g, states, RmsK {
                        sign: sign(maximize),
                        wd: c(weight_decay),
                        l2: weight_decay != 0.0,
                        alpha: c(alpha),
                        w: c(w),
                        one_minus_w: c::<<T as Flt>::C>(1.0) - c::<<T as Flt>::C>(w),
                        w_small: w.abs() < 0.5,
                        eps: c(eps),
                        momentum: c(momentum),
                        mom: momentum > 0.0,
                        centered,
                        neg_lr: c(-lr),
                    })
                }
                UpdateRule::Adagrad { clr, eps, weight_decay, maximize } => {
                    rule_t::<T, _>(p, g, states, AdagradK {
                        sign: sign(maximize),
                        wd: c(weight_decay),
                        l2: weight_decay != 0.0,
                        eps: c(eps),
                        neg_clr: c(-clr),
                    })
                }
                UpdateRule::Lion { lr, beta1, beta2, weight_decay, maximize } => {
                    rule_t::<T, _>(p, g, states, LionK {
                        sign: sign(maximize),
                        decay: c(1.0 - lr * weight_decay),
                        beta1: c(beta1),
                        one_minus_beta1: c(1.0 - beta1),
                        beta2: c(beta2),
                        one_minus_beta2: c(1.0 - beta2),
                        neg_lr: c(-lr),
                    })
                }
            }
        }
    }, _ => unreachable!("an optimizer step on a non-float parameter"))
}

/// # Safety
/// As for [`adam_t`], for `p`, `g` and the `Some` states (the `None` slots
/// are never touched); `k` uses exactly the `Some` slots.
unsafe fn rule_t<T: Flt, R: Rule<T::C>>(
    p: &Operand,
    g: &Operand,
    states: [Option<&Operand>; 3],
    k: R,
) {
    let used = states.map(|s| s.is_some());
    let s = states.map(|s| s.unwrap_or(p));
    let pp = SendPtr(ptr::<T>(p.storage));
    let pg = SendPtr(ptr::<T>(g.storage));
    let ps = s.map(|o| SendPtr(ptr::<T>(o.storage)));
    let mut ids = vec![p.storage.id(), g.storage.id()];
    ids.extend(states.iter().flatten().map(|o| o.storage.id()));
    let distinct = (0..ids.len()).all(|i| (i + 1..ids.len()).all(|j| ids[i] != ids[j]));
    let plan = Plan::new([
        &p.layout,
        &g.layout,
        &s[0].layout,
        &s[1].layout,
        &s[2].layout,
    ]);
    // SAFETY: the plan's runs stay inside the five layouts, which fit their
    // `T` storages (this function's contract); parallel runs touch
    // disjoint elements; unused slots are neither read nor written; the
    // slice fast path is taken only when the storages are `distinct`.
    plan.par_runs(|o, len, st| unsafe {
        let (pp, pg) = (pp.get().add(o[0]), pg.get().add(o[1]));
        let ps = [0, 1, 2].map(|j| ps[j].get().add(o[2 + j]));
        let dense = st[0] == 1 && st[1] == 1 && (0..3).all(|j| !used[j] || st[2 + j] == 1);
        if dense && distinct {
            let slot = |j: usize| -> &mut [T] {
                if used[j] {
                    std::slice::from_raw_parts_mut(ps[j], len)
                } else {
                    &mut []
                }
            };
            rule_dense::<T, R>(
                k,
                used,
                std::slice::from_raw_parts_mut(pp, len),
                std::slice::from_raw_parts(pg as *const T, len),
                [slot(0), slot(1), slot(2)],
            );
        } else {
            // Any strides; every element is read before it is written.
            let zero = <T::C as num_traits::Zero>::zero();
            for i in 0..len {
                let mut sv = [zero; 3];
                for j in 0..3 {
                    if used[j] {
                        sv[j] = ps[j].add(i * st[2 + j]).read().up();
                    }
                }
                let a = pp.add(i * st[0]);
                let np = k.update(a.read().up(), pg.add(i * st[1]).read().up(), &mut sv);
                a.write(T::down(np));
                for j in 0..3 {
                    if used[j] {
                        ps[j].add(i * st[2 + j]).write(T::down(sv[j]));
                    }
                }
            }
        }
    });
}

multiversion! {
    /// An [`UpdateRule`] over dense runs of distinct storages (the unused
    /// slots of `s` are empty).
    fn rule_dense<T, R: Rule<T::C>>(k: R, used: [bool; 3], p: &mut [T], g: &[T], s: [&mut [T]; 3]) {
        let n = p.len();
        let g = &g[..n];
        let zero = <T::C as num_traits::Zero>::zero();
        let [s0, s1, s2] = s;
        for i in 0..n {
            let mut sv = [zero; 3];
            if used[0] {
                sv[0] = s0[i].up();
            }
            if used[1] {
                sv[1] = s1[i].up();
            }
            if used[2] {
                sv[2] = s2[i].up();
            }
            p[i] = T::down(k.update(p[i].up(), g[i].up(), &mut sv));
            if used[0] {
                s0[i] = T::down(sv[0]);
            }
            if used[1] {
                s1[i] = T::down(sv[1]);
            }
            if used[2] {
                s2[i] = T::down(sv[2]);
            }
        }
    }
}
