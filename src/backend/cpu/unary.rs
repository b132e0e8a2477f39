//! The CPU kernels of the elementwise unary ops (touch point 2 of the op
//! table in `src/unary_table.rs`): one scalar function per op, named as the
//! op, and the dispatch generated from the table.
//!
//! * [`float`]: every op, over the compute type `C` (f32 for f32, f16 and
//!   bf16; f64 for f64); [`map_float`] runs the kernel at the CPU's best
//!   SIMD level (`simd::run`: the transcendentals are the branch-free
//!   polynomials of `vmath`, so the loop vectorises), converting each
//!   element up and rounding it once on the way down: in one pass over a
//!   dense run, through a stack block for a strided run or sin/cos.
//! * [`typed`]: in the storage type itself: the `numeric` ops on integers
//!   (wrapping) and the `exact` ops on every dtype.
//!
//! `clamp` (which takes bounds) is written out below the dispatch.

use super::elementwise::{dense_map1, dense_map2, map1};
use super::numeric_traits::{Flt, Num};
use super::simd;
use super::strided::{par_runs, SendPtr};
use super::vmath::VMath;
use crate::backend::{Operand, UnaryGrad, UnaryOp};
use crate::{with_float_dtype, with_numeric_dtype};
use std::mem::MaybeUninit;

/// The float kernels, over the compute type.
pub(crate) mod float {
    use crate::backend::cpu::vmath::VMath;
    use num_traits::Float;

    #[inline(always)]
    pub(crate) fn exp<C: VMath, const F: bool>(x: C) -> C {
        x.v_exp::<F>()
    }
    #[inline(always)]
    pub(crate) fn log<C: VMath, const F: bool>(x: C) -> C {
        x.v_log::<F>()
    }
    #[inline(always)]
    pub(crate) fn log1p<C: VMath, const F: bool>(x: C) -> C {
        x.v_log1p::<F>()
    }
    #[inline(always)]
    pub(crate) fn sqrt<C: Float, const F: bool>(x: C) -> C {
        x.sqrt()
    }
    #[inline(always)]
    pub(crate) fn rsqrt<C: Float, const F: bool>(x: C) -> C {
        C::one() / x.sqrt()
    }
    /// The vector kernel; the elements it leaves out (`VMath::v_trig_outside`)
    /// are recomputed by [`super::Trig`]'s fix-up.
    #[inline(always)]
    pub(crate) fn sin<C: VMath, const F: bool>(x: C) -> C {
        x.v_sin::<F>()
    }
    /// As [`sin`].
    #[inline(always)]
    pub(crate) fn cos<C: VMath, const F: bool>(x: C) -> C {
        x.v_cos::<F>()
    }
    #[inline(always)]
    pub(crate) fn tanh<C: VMath, const F: bool>(x: C) -> C {
        x.v_tanh::<F>()
    }
    #[inline(always)]
    pub(crate) fn sigmoid<C: VMath, const F: bool>(x: C) -> C {
        x.v_sigmoid::<F>()
    }
    #[inline(always)]
    pub(crate) fn silu<C: VMath, const F: bool>(x: C) -> C {
        x.v_silu::<F>()
    }
    #[inline(always)]
    pub(crate) fn softplus<C: VMath, const F: bool>(x: C) -> C {
        x.v_softplus::<F>()
    }
    #[inline(always)]
    pub(crate) fn gelu<C: VMath, const F: bool>(x: C) -> C {
        x.v_gelu::<F>()
    }
    #[inline(always)]
    pub(crate) fn gelu_tanh<C: VMath, const F: bool>(x: C) -> C {
        x.v_gelu_tanh::<F>()
    }
    #[inline(always)]
    pub(crate) fn erf<C: VMath, const F: bool>(x: C) -> C {
        x.v_erf::<F>()
    }
    #[inline(always)]
    pub(crate) fn floor<C: Float, const F: bool>(x: C) -> C {
        x.floor()
    }
    #[inline(always)]
    pub(crate) fn ceil<C: Float, const F: bool>(x: C) -> C {
        x.ceil()
    }
    #[inline(always)]
    pub(crate) fn trunc<C: Float, const F: bool>(x: C) -> C {
        x.trunc()
    }
    #[inline(always)]
    pub(crate) fn tan<C: VMath, const F: bool>(x: C) -> C {
        x.v_tan::<F>()
    }
    #[inline(always)]
    pub(crate) fn asin<C: VMath, const F: bool>(x: C) -> C {
        x.v_asin::<F>()
    }
    #[inline(always)]
    pub(crate) fn acos<C: VMath, const F: bool>(x: C) -> C {
        x.v_acos::<F>()
    }
    #[inline(always)]
    pub(crate) fn atan<C: VMath, const F: bool>(x: C) -> C {
        x.v_atan::<F>()
    }
    #[inline(always)]
    pub(crate) fn sinh<C: VMath, const F: bool>(x: C) -> C {
        x.v_sinh::<F>()
    }
    #[inline(always)]
    pub(crate) fn cosh<C: VMath, const F: bool>(x: C) -> C {
        x.v_cosh::<F>()
    }
    #[inline(always)]
    pub(crate) fn expm1<C: VMath, const F: bool>(x: C) -> C {
        x.v_expm1::<F>()
    }
    #[inline(always)]
    pub(crate) fn exp2<C: VMath, const F: bool>(x: C) -> C {
        x.v_exp2::<F>()
    }
    #[inline(always)]
    pub(crate) fn log2<C: VMath, const F: bool>(x: C) -> C {
        x.v_log2::<F>()
    }
    #[inline(always)]
    pub(crate) fn round<C: VMath, const F: bool>(x: C) -> C {
        x.v_round_even()
    }
    /// `(x > 0) - (x < 0)`, as PyTorch: NaN and -0 give 0.
    #[inline(always)]
    pub(crate) fn sign<C: Float, const F: bool>(x: C) -> C {
        if x > C::zero() {
            C::one()
        } else if x < C::zero() {
            -C::one()
        } else {
            C::zero()
        }
    }
    #[inline(always)]
    pub(crate) fn reciprocal<C: Float, const F: bool>(x: C) -> C {
        C::one() / x
    }
    #[inline(always)]
    pub(crate) fn square<C: Float, const F: bool>(x: C) -> C {
        x * x
    }
}

/// Kernels in the storage type: the `numeric` ops on integers (wrapping
/// arithmetic) and the `exact` ops on every numeric dtype.
pub(crate) mod typed {
    use crate::backend::cpu::numeric_traits::Num;

    #[inline(always)]
    pub(crate) fn neg<T: Num>(x: T) -> T {
        x.neg()
    }
    #[inline(always)]
    pub(crate) fn abs<T: Num>(x: T) -> T {
        x.abs()
    }
    /// One compare and a select (NaN <= 0 is false: NaN passes through).
    #[inline(always)]
    pub(crate) fn relu<T: Num>(x: T) -> T {
        if x <= T::zero() {
            T::zero()
        } else {
            x
        }
    }
    #[inline(always)]
    pub(crate) fn floor<T: Num>(x: T) -> T {
        x
    }
    #[inline(always)]
    pub(crate) fn ceil<T: Num>(x: T) -> T {
        x
    }
    #[inline(always)]
    pub(crate) fn trunc<T: Num>(x: T) -> T {
        x
    }
    #[inline(always)]
    pub(crate) fn round<T: Num>(x: T) -> T {
        x
    }
    #[inline(always)]
    pub(crate) fn sign<T: Num>(x: T) -> T {
        let zero = T::zero();
        if x > zero {
            T::one()
        } else if x < zero {
            zero.sub(T::one())
        } else {
            zero
        }
    }
    #[inline(always)]
    pub(crate) fn square<T: Num>(x: T) -> T {
        x.mul(x)
    }
}

macro_rules! cpu_unary_dispatch {
    ($($variant:ident $name:ident $inplace:ident $out:ident $domain:ident $doc:literal
       $node:literal $saves:ident ($($arg:ident),*) $body:block);* $(;)?) => {
        fn float_unary<T: Flt>(op: UnaryOp, src: &Operand, dst: &Operand) {
            // SAFETY: `unary` checked that both operands have dtype `T`; the
            // caller holds the locks and the layouts fit the storages.
            unsafe {
                match op {
                    $(UnaryOp::$variant => cpu_unary_dispatch!(@float $domain $name, T, src, dst),)*
                    UnaryOp::Clamp(lo, hi) => clamp_float::<T>(src, dst, lo, hi),
                }
            }
        }

        fn int_unary<T: Num>(op: UnaryOp, src: &Operand, dst: &Operand) {
            match op {
                $(UnaryOp::$variant => cpu_unary_dispatch!(@int $domain $name, T, src, dst),)*
                UnaryOp::Clamp(lo, hi) => {
                    // SAFETY: as in `float_unary`.
                    unsafe { clamp::<T>(src, dst, lo, hi) }
                }
            }
        }
    };
    (@float exact $name:ident, $T:ident, $src:ident, $dst:ident) => {
        map1::<$T, $T>($src, $dst, typed::$name)
    };
    // sin and cos: the vector kernel plus the libm fix-up of `Trig`.
    (@float $domain:ident sin, $T:ident, $src:ident, $dst:ident) => {
        map_float::<$T, _>($src, $dst, Trig::<SIN>)
    };
    (@float $domain:ident cos, $T:ident, $src:ident, $dst:ident) => {
        map_float::<$T, _>($src, $dst, Trig::<COS>)
    };
    (@float $domain:ident tan, $T:ident, $src:ident, $dst:ident) => {
        map_float::<$T, _>($src, $dst, Trig::<TAN>)
    };
    // gelu: the vector kernel, and a table at AVX-512 (`GeluExact`).
    (@float $domain:ident gelu, $T:ident, $src:ident, $dst:ident) => {
        map_float::<$T, _>($src, $dst, GeluExact)
    };
    (@float $domain:ident $name:ident, $T:ident, $src:ident, $dst:ident) => {{
        #[derive(Clone, Copy)]
        struct K;
        impl<C: crate::backend::cpu::vmath::VMath + num_traits::Float> FloatFn<C> for K {
            #[inline(always)]
            fn apply<const F: bool>(self, x: C) -> C {
                float::$name::<C, F>(x)
            }
        }
        map_float::<$T, _>($src, $dst, K)
    }};
    (@int float $name:ident, $T:ident, $src:ident, $dst:ident) => {
        unreachable!(
            "float op {} on an integer dtype: the op layer promotes first",
            stringify!($name)
        )
    };
    (@int $domain:ident $name:ident, $T:ident, $src:ident, $dst:ident) => {
        // SAFETY: `unary` checked that both operands have dtype `T`; the
        // caller holds the locks and the layouts fit the storages.
        unsafe { map1::<$T, $T>($src, $dst, typed::$name) }
    };
}
crate::unary_table::unary_table!(cpu_unary_dispatch);

/// Elements per block of [`map_float`]: 4 KiB of f32, in L1 with the input.
const BLOCK: usize = 1024;

/// A kernel on one element of the compute type, as a type whose `apply`
/// is `#[inline(always)]`: a closure or fn item would reach the SIMD
/// level's function through `Fn::call`, which LLVM leaves out of line once
/// the polynomial is inlined into it (seen in the disassembly: a scalar
/// call per element).
///
/// A kernel exact only on a range says which inputs lie outside it
/// ([`FloatFn::outside`]); [`map_float`] recomputes those with
/// [`FloatFn::scalar`] in a pass after the vector loop, which runs only in
/// blocks that have such an element. The default (never outside) folds
/// the check away.
pub(crate) trait FloatFn<C>: Copy + Sync {
    /// Whether [`FloatFn::outside`] can be true (then [`map_float`] keeps
    /// the input of a block until the fix-up has read it).
    const FIXES: bool = false;
    fn apply<const F: bool>(self, x: C) -> C;
    /// Whether `apply` is inexact at `x`.
    #[inline(always)]
    fn outside(self, _x: C) -> bool {
        false
    }
    /// The exact value at an `x` that is `outside` (scalar code).
    #[inline(always)]
    fn scalar(self, x: C) -> C
    where
        C: Copy,
    {
        self.fix(x, self.apply::<false>(x))
    }
    /// Whether `fix` does anything: as [`FloatFn2::SPLIT`], `apply` and
    /// `fix` then run as two loops over each block of a dense disjoint run.
    const SPLIT: bool = false;
    /// `apply`'s result `r` at `x` made right for every input.
    #[inline(always)]
    fn fix(self, _x: C, r: C) -> C {
        r
    }
    /// A hand-written kernel for dense f32 runs at AVX-512, which
    /// [`map_float`] runs instead of `apply` when the process runs at that
    /// level (`simd::level()`: `TENSORSCOPE_SIMD=v3` turns it off) and the
    /// output is the input or shares no byte with it. Its contract is
    /// [`gelu_f32`](super::vmath::gelu_avx512::gelu_f32)'s.
    #[cfg(target_arch = "x86_64")]
    const DENSE_F32_AVX512: Option<unsafe fn(*const f32, *mut f32, usize)> = None;
}

/// GELU, exact form: `vmath`'s kernel, and at AVX-512 the table of
/// [`gelu_avx512`](super::vmath::gelu_avx512) for dense f32 runs (2.5
/// ulps; less than half the vector kernel's time: Note [gelu table] in
/// `bench/results/ops-why.md`). Strided runs, f16, bf16 and f64 take the
/// vector kernel.
#[derive(Clone, Copy)]
struct GeluExact;

impl<C: VMath + num_traits::Float> FloatFn<C> for GeluExact {
    #[inline(always)]
    fn apply<const F: bool>(self, x: C) -> C {
        float::gelu::<C, F>(x)
    }
    #[cfg(target_arch = "x86_64")]
    const DENSE_F32_AVX512: Option<unsafe fn(*const f32, *mut f32, usize)> =
        Some(super::vmath::gelu_avx512::gelu_f32);
}

/// [`Trig`]'s functions.
const SIN: u8 = 0;
const COS: u8 = 1;
const TAN: u8 = 2;

/// `sin`, `cos` or `tan` (`K`): `vmath`'s vector kernel, and libm for the
/// inputs it leaves out (|x| > 2^20, infinities, NaN: `vmath::trig`).
#[derive(Clone, Copy)]
struct Trig<const K: u8>;

impl<C: VMath + num_traits::Float + Sync, const K: u8> FloatFn<C> for Trig<K> {
    const FIXES: bool = true;
    #[inline(always)]
    fn apply<const F: bool>(self, x: C) -> C {
        match K {
            SIN => float::sin::<C, F>(x),
            COS => float::cos::<C, F>(x),
            _ => float::tan::<C, F>(x),
        }
    }
    #[inline(always)]
    fn outside(self, x: C) -> bool {
        x.v_trig_outside()
    }
    #[inline(always)]
    fn scalar(self, x: C) -> C {
        match K {
            SIN => x.sin(),
            COS => x.cos(),
            _ => x.tan(),
        }
    }
}

/// [`FloatFn`] with two arguments (gradient and saved value, or base and
/// exponent).
///
/// A kernel may split into `apply`, right for the common inputs, and
/// `fix`, which patches `apply`'s result `r` at the rest (special cases by
/// selects). With `SPLIT`, a dense disjoint run computes `apply` over a
/// block into a stack buffer, then `fix` in a second loop over the same
/// block (still in L1): the main loop then carries none of the special
/// cases' compare masks, which had run out of AVX-512's eight mask
/// registers in `pow` and spilled one to the stack (see [`Pow`]).
pub(crate) trait FloatFn2<C>: Copy + Sync {
    /// Whether `fix` does anything (then dense runs take two loops).
    const SPLIT: bool = false;
    fn apply<const F: bool>(self, a: C, b: C) -> C;
    /// `apply`'s result `r` at `(a, b)` made right for every input.
    #[inline(always)]
    fn fix(self, _a: C, _b: C, r: C) -> C {
        r
    }
}

/// One block of [`map_float`]: gather `n = buf.len()` elements of the input
/// (stride `ss`) up into `buf`, apply `f`, round down into the output
/// (stride `sd`), recomputing the elements `f` leaves out
/// ([`FloatFn::outside`]) with its scalar code before rounding down.
/// `call` is inlined into each SIMD level's function. The
/// buffer starts uninitialised (zeroing 4 KiB per run would cost more than
/// the work of a tiled walk's short runs); `call` writes every element
/// before it reads it.
struct Block1<'a, T: Flt, F> {
    src: *const T,
    ss: usize,
    dst: *mut T,
    sd: usize,
    buf: &'a mut [MaybeUninit<T::C>],
    f: F,
}

impl<T: Flt, F: FloatFn<T::C>> simd::Kernel for Block1<'_, T, F> {
    type Output = ();
    const WIDE: bool = <T as simd::Hot>::HOT;
    #[inline(always)]
    fn call<const FMA: bool>(self) {
        // SAFETY: the constructor (`map_float`) gives pointers whose
        // `buf.len()` elements at the strides lie inside their runs of
        // the plan (so inside the storages, which the caller has locked),
        // and the output run is this thread's alone; `assume_init` reads
        // only elements the first loop wrote; the fix-up re-reads input
        // elements the first loop read, before any output is written.
        unsafe {
            for (i, v) in self.buf.iter_mut().enumerate() {
                v.write(self.src.add(i * self.ss).read().up());
            }
            // Every element of `buf` is initialised from here on.
            // A scan without early exit (so it vectorises; constant false
            // for most kernels, and then gone).
            let f = self.f;
            let fix = self
                .buf
                .iter()
                .fold(false, |a, v| a | f.outside(v.assume_init()));
            for v in self.buf.iter_mut() {
                let x = v.assume_init();
                v.write(f.fix(x, f.apply::<FMA>(x)));
            }
            if fix {
                // The input is still there: the output is written below
                // (the input and output may be one buffer).
                for (i, v) in self.buf.iter_mut().enumerate() {
                    let x = self.src.add(i * self.ss).read().up();
                    if f.outside(x) {
                        v.write(f.scalar(x));
                    }
                }
            }
            for (i, v) in self.buf.iter().enumerate() {
                self.dst.add(i * self.sd).write(T::down(v.assume_init()));
            }
        }
    }
}

/// A dense run of [`map_float`] in one pass: `dst[i] = down(f(up(src[i])))`
/// for `i < len`, at the level `simd::run` picks (`dense_map1` makes the
/// loop vectorise in place too). For kernels without a fix-up.
struct Dense1F<T, F> {
    src: *const T,
    dst: *mut T,
    len: usize,
    f: F,
}

impl<T: Flt, F: FloatFn<T::C>> simd::Kernel for Dense1F<T, F> {
    type Output = ();
    const WIDE: bool = <T as simd::Hot>::HOT;
    #[inline(always)]
    fn call<const FMA: bool>(self) {
        let f = self.f;
        if F::SPLIT {
            // SAFETY: as below; `split_blocks` asks the same of its caller.
            if unsafe { self.split_blocks::<FMA>() } {
                return;
            }
        }
        // SAFETY: `map_float` builds it from a dense run of `len` elements
        // of each operand inside their locked storages; the output run is
        // this thread's alone.
        unsafe {
            dense_map1!(self.dst, self.src, self.len, |x| {
                let x = x.up();
                T::down(f.fix(x, f.apply::<FMA>(x)))
            })
        }
    }
}

impl<T: Flt, F: FloatFn<T::C>> Dense1F<T, F> {
    /// [`FloatFn::SPLIT`]'s two loops per block, as
    /// [`Dense2F::split_blocks`]; `false` (nothing done) when the output
    /// shares a byte with the input. (The two are written out rather than
    /// one helper taking the loops as closures: a closure's body may stay
    /// out of line, compiled for the baseline, see `simd`.)
    ///
    /// # Safety
    /// As for [`Dense2F::split_blocks`].
    #[inline(always)]
    unsafe fn split_blocks<const FMA: bool>(&self) -> bool {
        use super::elementwise::Overlap;
        let (a, d, len, f) = (self.src, self.dst, self.len, self.f);
        if Overlap::of(d, a, len) != Overlap::Disjoint {
            return false;
        }
        // SAFETY: the caller's contract; the runs are disjoint (checked
        // above).
        let (a, d) = unsafe {
            (
                std::slice::from_raw_parts(a, len),
                std::slice::from_raw_parts_mut(d, len),
            )
        };
        let mut buf = [<T::C as num_traits::Zero>::zero(); BLOCK];
        for (a, d) in a.chunks(BLOCK).zip(d.chunks_mut(BLOCK)) {
            let r = &mut buf[..a.len()];
            for (r, &x) in r.iter_mut().zip(a) {
                *r = f.apply::<FMA>(x.up());
            }
            for ((d, &x), &r) in d.iter_mut().zip(a).zip(r.iter()) {
                *d = T::down(f.fix(x.up(), r));
            }
        }
        true
    }
}

/// A dense run of [`map2_float`] in one pass, as [`Dense1F`].
struct Dense2F<T, F> {
    a: *const T,
    b: *const T,
    dst: *mut T,
    len: usize,
    f: F,
}

impl<T: Flt, F: FloatFn2<T::C>> simd::Kernel for Dense2F<T, F> {
    type Output = ();
    const WIDE: bool = <T as simd::Hot>::HOT;
    #[inline(always)]
    fn call<const FMA: bool>(self) {
        let f = self.f;
        if F::SPLIT {
            // SAFETY: as below; `split_blocks` asks the same of its caller.
            if unsafe { self.split_blocks::<FMA>() } {
                return;
            }
        }
        // SAFETY: as in `Dense1F::call`, for both inputs.
        unsafe {
            dense_map2!(self.dst, self.a, self.b, self.len, |x, y| {
                let (x, y) = (x.up(), y.up());
                T::down(f.fix(x, y, f.apply::<FMA>(x, y)))
            })
        }
    }
}

impl<T: Flt, F: FloatFn2<T::C>> Dense2F<T, F> {
    /// [`FloatFn2::SPLIT`]'s two loops per block of [`BLOCK`] elements, when
    /// the output shares no byte with either input (`false`, and nothing
    /// done, otherwise: the one-loop form then handles the overlap).
    ///
    /// # Safety
    /// As for `Dense1F::call`: `a`, `b` and `dst` hold `len` elements
    /// inside their locked storages, and the output run is this thread's.
    #[inline(always)]
    unsafe fn split_blocks<const FMA: bool>(&self) -> bool {
        use super::elementwise::Overlap;
        let (a, b, d, len, f) = (self.a, self.b, self.dst, self.len, self.f);
        if Overlap::of(d, a, len) != Overlap::Disjoint
            || Overlap::of(d, b, len) != Overlap::Disjoint
        {
            return false;
        }
        // SAFETY: the caller's contract; the runs are disjoint from the
        // output (checked above), so the input slices and the output
        // slice may coexist.
        let (a, b, d) = unsafe {
            (
                std::slice::from_raw_parts(a, len),
                std::slice::from_raw_parts(b, len),
                std::slice::from_raw_parts_mut(d, len),
            )
        };
        let mut buf = [<T::C as num_traits::Zero>::zero(); BLOCK];
        for ((a, b), d) in a
            .chunks(BLOCK)
            .zip(b.chunks(BLOCK))
            .zip(d.chunks_mut(BLOCK))
        {
            let r = &mut buf[..a.len()];
            for ((r, &x), &y) in r.iter_mut().zip(a).zip(b) {
                *r = f.apply::<FMA>(x.up(), y.up());
            }
            for (((d, &x), &y), &r) in d.iter_mut().zip(a).zip(b).zip(r.iter()) {
                *d = T::down(f.fix(x.up(), y.up(), r));
            }
        }
        true
    }
}

/// `dst[i] = down(f(up(src[i])))` over any layouts of one shape. A dense
/// run is one pass ([`Dense1F`]); a strided run (a transposed operand) or
/// a kernel with a fix-up goes through a stack block in the compute type,
/// so that the kernel loop sees one dense, unaliased slice and vectorises
/// at the level `simd::run` picks. (A dense run through the block would store
/// three times where one pass stores once: Note [one pass, not two] in
/// `bench/results/ops-why.md`.)
///
/// # Safety
/// As for [`map1`] with `A = O = T`.
#[inline]
unsafe fn map_float<T: Flt, F: FloatFn<T::C>>(src: &Operand, dst: &Operand, f: F) {
    let ps = SendPtr(super::ptr::<T>(src.storage));
    let pd = SendPtr(super::ptr::<T>(dst.storage));
    // SAFETY: as in `map1`: `par_runs` hands each call a disjoint run of the
    // output, with offsets and strides inside layouts that fit the
    // storages; the caller's locks keep other writers out. Each element is
    // read before the same element is written, so src == dst is fine.
    par_runs([&dst.layout, &src.layout], |o, len, st| unsafe {
        let (pd, ps) = (pd.get().add(o[0]), ps.get().add(o[1]) as *const T);
        if st == [1, 1] && !F::FIXES {
            #[cfg(target_arch = "x86_64")]
            if let Some(k) = F::DENSE_F32_AVX512 {
                use super::elementwise::Overlap;
                if T::DTYPE == crate::dtype::DType::F32
                    && simd::level() == simd::Level::V4
                    && Overlap::of(pd, ps, len) != Overlap::Partial
                {
                    // SAFETY: `T` is f32 (its dtype), so both are f32 runs
                    // of `len` elements as above; the process runs at V4,
                    // so the CPU has AVX-512 F; the runs are the same or
                    // disjoint (checked); the output run is this thread's.
                    k(ps as *const f32, pd as *mut f32, len);
                    return;
                }
            }
            simd::run(Dense1F {
                src: ps,
                dst: pd,
                len,
                f,
            });
            return;
        }
        let mut buf = [MaybeUninit::<T::C>::uninit(); BLOCK];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(BLOCK);
            simd::run(Block1::<T, _> {
                src: ps.add(done * st[1]),
                ss: st[1],
                dst: pd.add(done * st[0]),
                sd: st[0],
                buf: &mut buf[..n],
                f,
            });
            done += n;
        }
    });
}

/// One block of [`map2_float`], as [`Block1`] with two inputs.
struct Block2<'a, T: Flt, F> {
    a: *const T,
    sa: usize,
    b: *const T,
    sb: usize,
    dst: *mut T,
    sd: usize,
    ba: &'a mut [MaybeUninit<T::C>],
    bb: &'a mut [MaybeUninit<T::C>],
    f: F,
}

impl<T: Flt, F: FloatFn2<T::C>> simd::Kernel for Block2<'_, T, F> {
    type Output = ();
    const WIDE: bool = <T as simd::Hot>::HOT;
    #[inline(always)]
    fn call<const FMA: bool>(self) {
        // SAFETY: as in `Block1::call`, for both inputs (`ba` and `bb`
        // have the same length).
        unsafe {
            for (i, (va, vb)) in self.ba.iter_mut().zip(self.bb.iter_mut()).enumerate() {
                va.write(self.a.add(i * self.sa).read().up());
                vb.write(self.b.add(i * self.sb).read().up());
            }
            // Every element of both buffers is initialised from here on.
            for (va, vb) in self.ba.iter_mut().zip(self.bb.iter()) {
                let (x, y) = (va.assume_init(), vb.assume_init());
                va.write(self.f.fix(x, y, self.f.apply::<FMA>(x, y)));
            }
            for (i, v) in self.ba.iter().enumerate() {
                self.dst.add(i * self.sd).write(T::down(v.assume_init()));
            }
        }
    }
}

/// `dst[i] = f(a[i], b[i])` in the compute type, like [`map_float`] with
/// two inputs.
///
/// # Safety
/// As for [`map1`], all three operands of dtype `T`.
#[inline]
unsafe fn map2_float<T: Flt>(a: &Operand, b: &Operand, dst: &Operand, f: impl FloatFn2<T::C>) {
    let pa = SendPtr(super::ptr::<T>(a.storage));
    let pb = SendPtr(super::ptr::<T>(b.storage));
    let pd = SendPtr(super::ptr::<T>(dst.storage));
    // SAFETY: as in `map_float`, with a second input read at its own
    // offsets and strides (inside its layout, which fits its storage).
    par_runs([&dst.layout, &a.layout, &b.layout], |o, len, st| unsafe {
        let pd = pd.get().add(o[0]);
        let pa = pa.get().add(o[1]) as *const T;
        let pb = pb.get().add(o[2]) as *const T;
        if st == [1, 1, 1] {
            simd::run(Dense2F {
                a: pa,
                b: pb,
                dst: pd,
                len,
                f,
            });
            return;
        }
        const HALF: usize = BLOCK / 2;
        let mut ba = [MaybeUninit::<T::C>::uninit(); HALF];
        let mut bb = [MaybeUninit::<T::C>::uninit(); HALF];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(HALF);
            simd::run(Block2::<T, _> {
                a: pa.add(done * st[1]),
                sa: st[1],
                b: pb.add(done * st[2]),
                sb: st[2],
                dst: pd.add(done * st[0]),
                sd: st[0],
                ba: &mut ba[..n],
                bb: &mut bb[..n],
                f,
            });
            done += n;
        }
    });
}

/// `g * which(s)` with `which` a constant (`UnaryGrad as u8`), so that the
/// derivative's `match` folds away.
#[derive(Clone, Copy)]
struct GradTimes<const W: u8>;

impl<C: VMath + num_traits::Float, const W: u8> FloatFn2<C> for GradTimes<W> {
    #[inline(always)]
    fn apply<const F: bool>(self, g: C, s: C) -> C {
        use UnaryGrad::*;
        let which = match W {
            x if x == Tanh as u8 => Tanh,
            x if x == Sigmoid as u8 => Sigmoid,
            x if x == Silu as u8 => Silu,
            x if x == Softplus as u8 => Softplus,
            x if x == Gelu as u8 => Gelu,
            x if x == GeluTanh as u8 => GeluTanh,
            _ => Erf,
        };
        g * s.v_grad::<F>(which)
    }
}

/// The fused backward of the transcendental unary ops:
/// `dst = g * which(saved)` (all three of one float dtype).
pub(crate) fn unary_grad(which: UnaryGrad, g: &Operand, saved: &Operand, dst: &Operand) {
    debug_assert!(g.dtype == dst.dtype && saved.dtype == dst.dtype);
    // One arm per derivative, so that each loop is compiled with its
    // derivative constant (no match per element).
    macro_rules! arms {
        ($T:ident, $($v:ident),*) => {
            match which {
                // SAFETY: the backend seam checked the devices and holds the
                // locks; the op layer gives three operands of dtype `T`
                // with layouts of one shape that fit their storages.
                $(UnaryGrad::$v => unsafe {
                    map2_float::<$T>(g, saved, dst, GradTimes::<{ UnaryGrad::$v as u8 }>)
                },)*
            }
        };
    }
    with_float_dtype!(dst.dtype, T => arms!(T, Tanh, Sigmoid, Silu, Softplus, Gelu, GeluTanh, Erf), _ => {
        unreachable!("unary_grad on {:?}: the formulas call it for float dtypes only", dst.dtype)
    })
}

/// `x^y` in the compute type f32: `apply` is
/// [`pow_core`](super::vmath::float32::pow_core), `fix` is
/// [`pow_fix`](super::vmath::float32::pow_fix) (C's special cases). In one
/// loop, their compare masks outnumbered AVX-512's eight mask registers and
/// one was spilled to the stack every iteration, and that loop ran slower, at
/// one of two speeds by the process (Note [pow in two loops] in
/// `bench/results/ops-why.md`).
#[derive(Clone, Copy)]
struct Pow;

impl FloatFn2<f32> for Pow {
    const SPLIT: bool = true;
    #[inline(always)]
    fn apply<const F: bool>(self, x: f32, y: f32) -> f32 {
        super::vmath::float32::pow_core::<F>(x, y)
    }
    #[inline(always)]
    fn fix(self, x: f32, y: f32, r: f32) -> f32 {
        super::vmath::float32::pow_fix(x, y, r)
    }
}

/// `x^s` for a constant `s`, as [`Pow`].
#[derive(Clone, Copy)]
struct PowScalar(f32);

impl FloatFn<f32> for PowScalar {
    const SPLIT: bool = true;
    #[inline(always)]
    fn apply<const F: bool>(self, x: f32) -> f32 {
        super::vmath::float32::pow_core::<F>(x, self.0)
    }
    #[inline(always)]
    fn fix(self, x: f32, r: f32) -> f32 {
        super::vmath::float32::pow_fix(x, self.0, r)
    }
}

/// `dst = a^b` (`b` a tensor, or the scalar `s` when `b` is `None`) for
/// f32, f16 and bf16, vectorised (in f32 with f64 lanes inside, see
/// `vmath::float32::pow`); `false` for any other dtype, which the caller
/// then computes with libm's `pow` (f64) or integer powers.
pub(crate) fn pow(a: &Operand, b: Result<&Operand, f64>, dst: &Operand) -> bool {
    macro_rules! go {
        ($T:ty) => {
            // SAFETY: the backend seam checked the devices and holds the
            // locks; the op layer gives operands of dtype `T` (`a`, `b`,
            // `dst` alike) with layouts of one shape that fit their storages.
            unsafe {
                match b {
                    Ok(b) => map2_float::<$T>(a, b, dst, Pow),
                    Err(s) => map_float::<$T, _>(a, dst, PowScalar(s as f32)),
                }
            }
        };
    }
    match a.dtype {
        crate::dtype::DType::F32 => go!(f32),
        crate::dtype::DType::F16 => go!(half::f16),
        crate::dtype::DType::BF16 => go!(half::bf16),
        _ => return false,
    }
    true
}

/// Clamp of a float dtype to `[lo, hi]`, branch-free in the compute type
/// (the bounds are rounded to `T` first, so it equals clamping in `T`); a
/// NaN bound is absent, a NaN input stays NaN.
///
/// # Safety
/// As for [`map1`].
unsafe fn clamp_float<T: Flt>(src: &Operand, dst: &Operand, lo: f64, hi: f64) {
    use num_traits::Float;
    let bound = |b: f64, absent: T::C| {
        if b.is_nan() {
            absent
        } else {
            T::from_f64(b).up()
        }
    };
    let lo = bound(lo, T::C::neg_infinity());
    let hi = bound(hi, T::C::infinity());
    #[derive(Clone, Copy)]
    struct Clamp<C>(C, C);
    impl<C: num_traits::Float + Sync> FloatFn<C> for Clamp<C> {
        #[inline(always)]
        fn apply<const F: bool>(self, x: C) -> C {
            let x = if x < self.0 { self.0 } else { x };
            if x > self.1 {
                self.1
            } else {
                x
            }
        }
    }
    // SAFETY: the caller's contract.
    unsafe { map_float::<T, _>(src, dst, Clamp(lo, hi)) }
}

/// Clamp to `[lo, hi]` in the storage type; a NaN bound is absent.
///
/// # Safety
/// As for [`map1`].
unsafe fn clamp<T: Num>(src: &Operand, dst: &Operand, lo: f64, hi: f64) {
    let lo = (!lo.is_nan()).then(|| T::from_f64(lo));
    let hi = (!hi.is_nan()).then(|| T::from_f64(hi));
    // SAFETY: the caller's contract.
    unsafe {
        map1::<T, T>(src, dst, move |x| {
            let mut x = x;
            if let Some(l) = lo
                && x < l
            {
                x = l;
            }
            if let Some(h) = hi
                && x > h
            {
                x = h;
            }
            x
        })
    }
}

/// `dst = op(src)`; both operands have one dtype (the op layer promotes
/// float-only ops on integers to f32 first, and allows only the identity
/// ops on bool).
pub(crate) fn unary(op: UnaryOp, src: &Operand, dst: &Operand) {
    debug_assert_eq!(src.dtype, dst.dtype);
    with_float_dtype!(src.dtype, T => float_unary::<T>(op, src, dst), _ => {
        with_numeric_dtype!(src.dtype, T => int_unary::<T>(op, src, dst), _ => {
            // bool: only the identity-like ops make sense; the op layer refuses the rest.
            // SAFETY: both operands are bool; the caller holds the locks.
            unsafe { map1::<bool, bool>(src, dst, |x| x) }
        })
    })
}
