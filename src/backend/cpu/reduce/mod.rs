//! Reduction and softmax CPU kernels.
//!
//! A reduction splits the input's dimensions into *kept* ones (one output
//! element per index, in row-major order) and *reduced* ones. Both sets are
//! walked with [`Plan`]s, so any strides work. Three schedules:
//!
//! * **row**: per output element, fold the reduced elements (dense runs go
//!   through a reducer's vectorisable `run`);
//! * **lanes**: when the kept dimensions are denser in memory than the reduced
//!   ones (e.g. a sum over dim 0 of a row-major matrix), fold a block of
//!   neighbouring outputs together, so every load is of adjacent elements;
//! * **split**: few outputs with many inputs each (a full reduction): each
//!   output's reduced range is cut in chunks folded in parallel, and the
//!   partial results merged in a fixed order (results do not depend on timing).
//!
//! Float sums, means, variances and logsumexp accumulate in f64 (so a sum of
//! 16M f32 values keeps its accuracy: every element is widened to f64 before
//! it is added); integer sums and products wrap in i64.

use super::numeric_traits::{FastExp, Flt, Num};
use super::ptr;
use super::simd;
use super::strided::SendPtr;
use crate::backend::{Operand, Reduction};
use crate::dtype::{DType, Element};
use crate::layout::Layout;
use crate::with_float_dtype;
use half::{bf16, f16};

mod dense;
mod engine;
use dense::DenseSum;
pub(super) use engine::inner;
use engine::{run_reduction, split_dims};

/// Outputs folded together in the lane schedule.
const LANES: usize = 1024;

/// How an element is read from memory and compared or accumulated.
trait Load: Copy + Send + Sync + 'static {
    /// The value type (bool tensors are read as `u8` and normalised to 0/1).
    type V: Num;
    fn load(self) -> Self::V;
}

macro_rules! load_same {
    ($($t:ty),*) => {$(
        impl Load for $t {
            type V = $t;
            #[inline(always)]
            fn load(self) -> $t {
                self
            }
        }
    )*};
}
load_same!(f32, f64, f16, bf16, i64, i32, u8);

/// A bool element read as its byte: any non-zero byte is true.
#[derive(Copy, Clone)]
#[repr(transparent)]
struct B8(u8);
impl Load for B8 {
    type V = u8;
    #[inline(always)]
    fn load(self) -> u8 {
        (self.0 != 0) as u8
    }
}

/// Integer values widened to the i64 accumulator.
trait AsI64: Copy {
    fn as_i64(self) -> i64;
}
impl AsI64 for i64 {
    #[inline(always)]
    fn as_i64(self) -> i64 {
        self
    }
}
impl AsI64 for i32 {
    #[inline(always)]
    fn as_i64(self) -> i64 {
        self as i64
    }
}
impl AsI64 for u8 {
    #[inline(always)]
    fn as_i64(self) -> i64 {
        self as i64
    }
}

/// A fold over the reduced elements of one output element.
trait Reducer: Sync {
    type In: Copy;
    type Acc: Copy + Send;
    /// The widest SIMD level the reducer's loops run at.
    const CAP: simd::Cap = simd::Cap::Widest;
    /// Whether the loops are compiled above the baseline at all
    /// ([`simd::Kernel::WIDE`]).
    const WIDE: bool;
    /// The identity of `merge`.
    fn init(&self) -> Self::Acc;
    /// Folds element `x` with index `i` (its linear position in the walk of
    /// the reduced dimensions; for one reduced dimension, its index there).
    fn step(&self, a: Self::Acc, x: Self::In, i: usize) -> Self::Acc;
    /// Folds `len` elements `p[0], p[s], ...` with indices `i0, i0 + 1, ...`.
    ///
    /// # Safety
    /// Every element read is in bounds and initialised.
    #[inline(always)]
    unsafe fn run(
        &self,
        mut a: Self::Acc,
        p: *const Self::In,
        len: usize,
        s: usize,
        i0: usize,
    ) -> Self::Acc {
        for k in 0..len {
            // SAFETY: `k < len`: element `k * s` is in bounds and initialised (this fn's
            // contract).
            a = self.step(a, unsafe { p.add(k * s).read() }, i0 + k);
        }
        a
    }
    /// Combines the folds of two consecutive ranges (`a` comes first).
    fn merge(&self, a: Self::Acc, b: Self::Acc) -> Self::Acc;
    /// Writes the result for output element `o`, `n` elements having been folded.
    ///
    /// # Safety
    /// `o` is in bounds of the outputs and no other thread writes it.
    unsafe fn finish(&self, a: Self::Acc, n: usize, o: usize);
}

// ---------------------------------------------------------------- sum, mean, prod

/// Float sum or mean, accumulated in f64, written in the input's dtype.
struct SumF<T> {
    out: SendPtr<T>,
    mean: bool,
}
impl<T: DenseSum> Reducer for SumF<T> {
    const WIDE: bool = <T as simd::Hot>::HOT;
    type In = T;
    type Acc = f64;
    fn init(&self) -> f64 {
        0.0
    }
    #[inline(always)]
    fn step(&self, a: f64, x: T, _: usize) -> f64 {
        a + x.to_f64()
    }
    #[inline(always)]
    unsafe fn run(&self, a: f64, p: *const T, len: usize, s: usize, _: usize) -> f64 {
        if s == 1 {
            // SAFETY: `s == 1`: the `len` elements from `p` are contiguous and in bounds
            // (`run`'s contract).
            a + unsafe { T::dense_total(p, len) }
        } else {
            let mut a = a;
            for k in 0..len {
                // SAFETY: `k < len`: element `k * s` is in bounds (`run`'s contract).
                a += unsafe { p.add(k * s).read() }.to_f64();
            }
            a
        }
    }
    fn merge(&self, a: f64, b: f64) -> f64 {
        a + b
    }
    unsafe fn finish(&self, a: f64, n: usize, o: usize) {
        let v = if self.mean { a / n as f64 } else { a };
        // SAFETY: `o` is in bounds of the outputs and no other thread writes it (`finish`'s
        // contract).
        unsafe { self.out.get().add(o).write(T::from_f64(v)) }
    }
}

/// Integer or bool sum (`PROD = false`) or product (`PROD = true`) into i64,
/// wrapping as PyTorch does.
struct FoldI<L, const PROD: bool> {
    out: SendPtr<i64>,
    _l: std::marker::PhantomData<L>,
}
impl<L: Load, const PROD: bool> Reducer for FoldI<L, PROD>
where
    L::V: AsI64,
{
    const WIDE: bool = false;
    type In = L;
    type Acc = i64;
    fn init(&self) -> i64 {
        PROD as i64
    }
    #[inline(always)]
    fn step(&self, a: i64, x: L, _: usize) -> i64 {
        self.merge(a, x.load().as_i64())
    }
    #[inline(always)]
    fn merge(&self, a: i64, b: i64) -> i64 {
        if PROD {
            a.wrapping_mul(b)
        } else {
            a.wrapping_add(b)
        }
    }
    unsafe fn finish(&self, a: i64, _: usize, o: usize) {
        // SAFETY: `o` is in bounds of the outputs and no other thread writes it (`finish`'s
        // contract).
        unsafe { self.out.get().add(o).write(a) }
    }
}

/// Float product, accumulated in f64.
struct ProdF<T> {
    out: SendPtr<T>,
}
impl<T: Element> Reducer for ProdF<T> {
    const WIDE: bool = <T as simd::Hot>::HOT;
    type In = T;
    type Acc = f64;
    fn init(&self) -> f64 {
        1.0
    }
    #[inline(always)]
    fn step(&self, a: f64, x: T, _: usize) -> f64 {
        a * x.to_f64()
    }
    fn merge(&self, a: f64, b: f64) -> f64 {
        a * b
    }
    unsafe fn finish(&self, a: f64, _: usize, o: usize) {
        // SAFETY: `o` is in bounds of the outputs and no other thread writes it (`finish`'s
        // contract).
        unsafe { self.out.get().add(o).write(T::from_f64(a)) }
    }
}

// ---------------------------------------------------------------- max, min, argmax

/// Largest (`MAX`) or smallest value; NaN wins.
struct Extreme<L: Load, const MAX: bool> {
    out: SendPtr<L::V>,
}
impl<L: Load, const MAX: bool> Reducer for Extreme<L, MAX> {
    /// AVX2: the NaN-aware compares measured faster there than with
    /// AVX-512's mask registers (Note [AVX2 cap] in
    /// `bench/results/ops-why.md`).
    const CAP: simd::Cap = simd::Cap::NoAvx512;
    const WIDE: bool = <L::V as simd::Hot>::HOT;
    type In = L;
    type Acc = L::V;
    fn init(&self) -> L::V {
        Self::identity()
    }
    #[inline(always)]
    fn step(&self, a: L::V, x: L, _: usize) -> L::V {
        Self::pick(a, x.load())
    }
    #[inline(always)]
    unsafe fn run(&self, a: L::V, p: *const L, len: usize, s: usize, _: usize) -> L::V {
        // SAFETY: `run`'s contract, passed on.
        unsafe { Self::fold(a, p, len, s) }
    }
    fn merge(&self, a: L::V, b: L::V) -> L::V {
        Self::pick(a, b)
    }
    unsafe fn finish(&self, a: L::V, _: usize, o: usize) {
        // SAFETY: `o` is in bounds of the outputs and no other thread writes it (`finish`'s
        // contract).
        unsafe { self.out.get().add(o).write(a) }
    }
}

impl<L: Load, const MAX: bool> Extreme<L, MAX> {
    /// -inf / +inf for floats; saturates to MIN / MAX for integers.
    #[inline(always)]
    fn identity() -> L::V {
        L::V::from_f64(if MAX {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        })
    }

    /// The larger (smaller) of two; NaN wins.
    #[inline(always)]
    fn pick(a: L::V, b: L::V) -> L::V {
        if MAX {
            a.max(b)
        } else {
            a.min(b)
        }
    }

    /// `a` folded with `p[0], p[s], ...` (`len` elements), the stride made
    /// a constant for the dense case so that the loop vectorises.
    ///
    /// # Safety
    /// As for [`Reducer::run`]: `p[k * s]` for `k < len` is in bounds.
    #[inline(always)]
    unsafe fn fold(a: L::V, p: *const L, len: usize, s: usize) -> L::V {
        if s == 1 {
            // SAFETY: the contract, with the stride 1 this branch tested.
            unsafe { Self::fold_impl(a, p, len, 1) }
        } else {
            // SAFETY: the contract, passed on.
            unsafe { Self::fold_impl(a, p, len, s) }
        }
    }

    /// [`Extreme::fold`] with the stride as a parameter the callers fix.
    ///
    /// # Safety
    /// As for [`Reducer::run`]: `p[k * s]` for `k < len` is in bounds.
    #[inline(always)]
    unsafe fn fold_impl(a: L::V, p: *const L, len: usize, s: usize) -> L::V {
        // 32 independent accumulators: no dependency chain through one
        // (four AVX2 vectors of f32).
        const L: usize = 32;
        let mut l = [Self::identity(); L];
        let body = len / L * L;
        let mut k = 0;
        while k < body {
            if s == 1 {
                dense::prefetch_ahead(p.wrapping_add(k).cast(), L * std::mem::size_of::<L>());
            }
            for (j, lj) in l.iter_mut().enumerate() {
                // SAFETY: `k + j < body <= len`: element `(k + j) * s` is in bounds
                // (the contract).
                *lj = Self::pick(*lj, unsafe { p.add((k + j) * s).read() }.load());
            }
            k += L;
        }
        let mut a = a;
        for k in body..len {
            // SAFETY: `k < len`: in bounds (the contract).
            a = Self::pick(a, unsafe { p.add(k * s).read() }.load());
        }
        // Pairwise, lane `j` with `j + w` (whole vectors first): a chain
        // through the 32 lanes one by one held about a fifth of the samples
        // of `max` over a row (Note [max lanes folded pairwise] in
        // bench/results/ops-why.md). The order is fixed, so the result does
        // not depend on the level; it differs from an element-by-element fold
        // only in which zero a tie of `0` and `-0` returns.
        let mut w = L;
        while w > 1 {
            w /= 2;
            for j in 0..w {
                l[j] = Self::pick(l[j], l[j + w]);
            }
        }
        Self::pick(a, l[0])
    }
}

/// Index (and value) of the first largest (`MAX`) or smallest element; the
/// first NaN wins, as in PyTorch.
struct Arg<L: Load, const MAX: bool> {
    values: Option<SendPtr<L::V>>,
    indices: SendPtr<i64>,
}
impl<L: Load, const MAX: bool> Arg<L, MAX> {
    #[inline(always)]
    fn better(x: L::V, v: L::V) -> bool {
        let strictly = if MAX { x > v } else { x < v };
        strictly || (x.is_nan() && !v.is_nan())
    }
}
impl<L: Load, const MAX: bool> Reducer for Arg<L, MAX> {
    /// AVX2: at AVX-512 LLVM built the search for the found value from
    /// gathers, about twice as slow (Note [AVX2 cap] in
    /// `bench/results/ops-why.md`).
    const CAP: simd::Cap = simd::Cap::NoAvx512;
    const WIDE: bool = <L::V as simd::Hot>::HOT;
    type In = L;
    /// `(value, index)`; index `usize::MAX` means nothing folded yet.
    type Acc = (L::V, usize);
    fn init(&self) -> Self::Acc {
        (L::V::default(), usize::MAX)
    }
    #[inline(always)]
    fn step(&self, a: Self::Acc, x: L, i: usize) -> Self::Acc {
        let x = x.load();
        if a.1 == usize::MAX || Self::better(x, a.0) {
            (x, i)
        } else {
            a
        }
    }
    /// Two vectorised passes instead of a chain of compares and branches:
    /// the extreme value of the run ([`Extreme::fold`], NaN winning), then
    /// the first element equal to it (the first NaN if it is NaN), found 32
    /// elements at a time. The index is the same as the element-wise
    /// fold's: the first of the extreme values, ties (`-0` and `0`
    /// included) going to the earlier element; the value returned is that
    /// element's. An element-wise fold is slower than PyTorch's; this is
    /// several times faster (Note [argmax in two passes] in
    /// `bench/results/ops-why.md`).
    #[inline(always)]
    unsafe fn run(&self, a: Self::Acc, p: *const L, len: usize, s: usize, i0: usize) -> Self::Acc {
        if len == 0 {
            return a;
        }
        // SAFETY: `run`'s contract, passed on.
        let v = unsafe { Extreme::<L, MAX>::fold(Extreme::<L, MAX>::identity(), p, len, s) };
        let nan = v.is_nan();
        let at = |k: usize| {
            // SAFETY: called with `k < len` only: element `k * s` is in
            // bounds (`run`'s contract).
            unsafe { p.add(k * s).read() }.load()
        };
        let hit = |k: usize| if nan { at(k).is_nan() } else { at(k) == v };
        const W: usize = 32;
        let mut k = 0;
        // Whole blocks without an early exit inside (so the test vectorises).
        while k + W <= len && !(k..k + W).fold(false, |f, j| f | hit(j)) {
            k += W;
        }
        // `v` is one of the elements, so a hit exists at or after `k`.
        while k + 1 < len && !hit(k) {
            k += 1;
        }
        self.merge(a, (at(k), i0 + k))
    }
    fn merge(&self, a: Self::Acc, b: Self::Acc) -> Self::Acc {
        if a.1 == usize::MAX || (b.1 != usize::MAX && Self::better(b.0, a.0)) {
            b
        } else {
            a
        }
    }
    unsafe fn finish(&self, a: Self::Acc, _: usize, o: usize) {
        // SAFETY: `o` is in bounds of the index and value outputs and no other thread writes it
        // (`finish`'s contract).
        unsafe {
            self.indices.get().add(o).write(a.1 as i64);
            if let Some(v) = self.values {
                v.get().add(o).write(a.0);
            }
        }
    }
}

// ---------------------------------------------------------------- var, std, logsumexp

/// Variance (or standard deviation) by Welford's algorithm in f64; dense runs
/// are folded two-pass and merged with Chan's formula.
struct Var<T> {
    out: SendPtr<T>,
    correction: usize,
    std: bool,
}
/// `(count, mean, sum of squared deviations)`.
type Welford = (f64, f64, f64);
impl<T: DenseSum> Reducer for Var<T> {
    const WIDE: bool = <T as simd::Hot>::HOT;
    type In = T;
    type Acc = Welford;
    fn init(&self) -> Welford {
        (0.0, 0.0, 0.0)
    }
    #[inline(always)]
    fn step(&self, (n, mean, m2): Welford, x: T, _: usize) -> Welford {
        let x = x.to_f64();
        let n = n + 1.0;
        let d = x - mean;
        let mean = mean + d / n;
        (n, mean, m2 + d * (x - mean))
    }
    #[inline(always)]
    unsafe fn run(&self, a: Welford, p: *const T, len: usize, s: usize, _: usize) -> Welford {
        if s != 1 || len < 16 {
            let mut a = a;
            for k in 0..len {
                // SAFETY: `k < len`: in bounds (`run`'s contract).
                a = self.step(a, unsafe { p.add(k * s).read() }, 0);
            }
            return a;
        }
        // SAFETY: `s == 1` in this branch: `len` contiguous elements from `p`, in bounds
        // (`run`'s contract).
        let mean = unsafe { T::dense_sum(p, len, |x| x) } / len as f64;
        // SAFETY: as above.
        let m2 = unsafe {
            T::dense_sum(p, len, |x| {
                let d = x - mean;
                d * d
            })
        };
        self.merge(a, (len as f64, mean, m2))
    }
    fn merge(&self, a: Welford, b: Welford) -> Welford {
        if a.0 == 0.0 {
            return b;
        }
        if b.0 == 0.0 {
            return a;
        }
        let n = a.0 + b.0;
        let d = b.1 - a.1;
        (n, a.1 + d * (b.0 / n), a.2 + b.2 + d * d * (a.0 * b.0 / n))
    }
    unsafe fn finish(&self, a: Welford, _: usize, o: usize) {
        // PyTorch: divide by max(0, N - correction) (0/0 is NaN, x/0 is inf).
        let dof = (a.0 - self.correction as f64).max(0.0);
        let var = a.2 / dof;
        let v = if self.std { var.sqrt() } else { var };
        // SAFETY: `o` is in bounds of the outputs and no other thread writes it (`finish`'s
        // contract).
        unsafe { self.out.get().add(o).write(T::from_f64(v)) }
    }
}

/// Stable `log(sum(exp(x)))` as a running `(max, sum of exp(x - max))` in f64.
struct Lse<T> {
    out: SendPtr<T>,
}
/// `exp(x - m)`, with `exp(0)` when both are the same infinity.
#[inline(always)]
fn exp_rel(x: f64, m: f64) -> f64 {
    if x == m {
        1.0
    } else {
        (x - m).exp()
    }
}
impl<T: Flt> Reducer for Lse<T>
where
    T::C: FastExp,
{
    const WIDE: bool = <T as simd::Hot>::HOT;
    type In = T;
    type Acc = (f64, f64);
    fn init(&self) -> (f64, f64) {
        (f64::NEG_INFINITY, 0.0)
    }
    #[inline(always)]
    fn step(&self, (m, s): (f64, f64), x: T, _: usize) -> (f64, f64) {
        let x = x.to_f64();
        if x > m {
            (x, s * exp_rel(m, x) + 1.0)
        } else {
            // NaN lands here and makes the sum NaN.
            (m, s + exp_rel(x, m))
        }
    }
    #[inline(always)]
    unsafe fn run(&self, a: (f64, f64), p: *const T, len: usize, s: usize, _: usize) -> (f64, f64) {
        if s == 1 {
            // SAFETY: `run`'s contract, with the stride 1 this branch tested.
            unsafe { self.run_impl(a, p, len, 1) }
        } else {
            // SAFETY: `run`'s contract, passed on.
            unsafe { self.run_impl(a, p, len, s) }
        }
    }
    fn merge(&self, a: (f64, f64), b: (f64, f64)) -> (f64, f64) {
        // A NaN sum wins; then an infinite one (from a +inf element, whose
        // run max was replaced by 0), which no finite max may scale down.
        if a.1.is_nan() || b.1.is_nan() {
            return (0.0, f64::NAN);
        }
        if a.1 == f64::INFINITY || b.1 == f64::INFINITY {
            return (0.0, f64::INFINITY);
        }
        let m = if b.0 > a.0 { b.0 } else { a.0 };
        (m, a.1 * exp_rel(a.0, m) + b.1 * exp_rel(b.0, m))
    }
    unsafe fn finish(&self, (m, s): (f64, f64), _: usize, o: usize) {
        let v = if s == 0.0 {
            f64::NEG_INFINITY
        } else {
            m + s.ln()
        };
        // SAFETY: `o` is in bounds of the outputs and no other thread writes it (`finish`'s
        // contract).
        unsafe { self.out.get().add(o).write(T::from_f64(v)) }
    }
}

impl<T: Flt> Lse<T>
where
    T::C: FastExp,
{
    /// [`Reducer::run`] with the stride as a parameter the callers fix.
    ///
    /// # Safety
    /// As for [`Reducer::run`]: `p[k * s]` for `k < len` is in bounds.
    #[inline(always)]
    unsafe fn run_impl(&self, a: (f64, f64), p: *const T, len: usize, s: usize) -> (f64, f64) {
        // Two passes over the run: its max, then the sum of exponentials
        // relative to it (computed in `T::C` a chunk at a time, summed in f64).
        use num_traits::{Float, Zero};
        const CHUNK: usize = 256;
        // SAFETY: called with `k < len` only: in bounds (`run_impl`'s contract).
        let rd = |k: usize| unsafe { p.add(k * s).read() }.up();
        let ninf = <T::C as Float>::neg_infinity();
        let mut ml = [ninf; 8];
        let body = len / 8 * 8;
        for k in (0..body).step_by(8) {
            for (j, m) in ml.iter_mut().enumerate() {
                let x = rd(k + j);
                if x > *m {
                    *m = x;
                }
            }
        }
        let mut m = ml.iter().fold(ninf, |a, &b| if b > a { b } else { a });
        for k in body..len {
            let x = rd(k);
            if x > m {
                m = x;
            }
        }
        // An infinite max is replaced by 0 (as PyTorch does): the sum is then
        // inf for +inf and 0 for an all -inf run, and merges stay exact.
        if m.is_infinite() {
            m = <T::C as Zero>::zero();
        }
        let mut buf = [<T::C as Zero>::zero(); CHUNK];
        let mut l = [0f64; 8];
        let mut c0 = 0;
        while c0 < len {
            let n = CHUNK.min(len - c0);
            for (i, b) in buf[..n].iter_mut().enumerate() {
                *b = (rd(c0 + i) - m).fexp::<false>();
            }
            for b in &mut buf[n..n.next_multiple_of(8)] {
                *b = <T::C as Zero>::zero();
            }
            for c in buf[..n.next_multiple_of(8)].chunks_exact(8) {
                for (lj, &v) in l.iter_mut().zip(c) {
                    *lj += v.wide();
                }
            }
            c0 += n;
        }
        let acc = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
        self.merge(a, (m.wide(), acc))
    }
}

/// Typed pointer to an operand's first element.
fn at<T>(o: &Operand) -> SendPtr<T> {
    // SAFETY: the layout's offset is within the storage.
    SendPtr(unsafe { ptr::<T>(o.storage).add(o.layout.offset()) })
}

fn float_reduce<T: Flt + Load<V = T> + DenseSum>(
    op: Reduction,
    src: &Operand,
    kept: &Layout,
    red: &Layout,
    dst: &Operand,
) where
    T::C: FastExp,
{
    let s = ptr::<T>(src.storage) as *const T;
    let out = at::<T>(dst);
    // SAFETY: (every arm) dtypes match; the caller holds the locks; `dst` is contiguous.
    unsafe {
        match op {
            Reduction::Sum => run_reduction(&SumF { out, mean: false }, s, kept, red),
            Reduction::Mean => run_reduction(&SumF { out, mean: true }, s, kept, red),
            Reduction::Prod => run_reduction(&ProdF { out }, s, kept, red),
            Reduction::Max => run_reduction(&Extreme::<T, true> { out }, s, kept, red),
            Reduction::Min => run_reduction(&Extreme::<T, false> { out }, s, kept, red),
            Reduction::Var(c) | Reduction::Std(c) => run_reduction(
                &Var {
                    out,
                    correction: c,
                    std: matches!(op, Reduction::Std(_)),
                },
                s,
                kept,
                red,
            ),
            Reduction::LogSumExp => run_reduction(&Lse { out }, s, kept, red),
        }
    }
}

fn int_reduce<L: Load>(op: Reduction, src: &Operand, kept: &Layout, red: &Layout, dst: &Operand)
where
    L::V: AsI64,
{
    let s = ptr::<L>(src.storage) as *const L;
    let _m = std::marker::PhantomData;
    // SAFETY: (every arm) `L` matches the source dtype, the output's dtype is
    // i64 for sum/prod and the value type for max/min; locks are held.
    unsafe {
        match op {
            Reduction::Sum => run_reduction(
                &FoldI::<L, false> {
                    out: at(dst),
                    _l: _m,
                },
                s,
                kept,
                red,
            ),
            Reduction::Prod => run_reduction(
                &FoldI::<L, true> {
                    out: at(dst),
                    _l: _m,
                },
                s,
                kept,
                red,
            ),
            Reduction::Max => run_reduction(&Extreme::<L, true> { out: at(dst) }, s, kept, red),
            Reduction::Min => run_reduction(&Extreme::<L, false> { out: at(dst) }, s, kept, red),
            _ => unreachable!("{} on {}: the op layer refuses it", op.name(), src.dtype),
        }
    }
}

/// Reduces `src` over `dims` into the contiguous `dst` (see the dispatch function).
pub(crate) fn reduce(op: Reduction, src: &Operand, dims: &[usize], dst: &Operand) {
    debug_assert!(dst.layout.is_contiguous());
    let (kept, red) = split_dims(&src.layout, dims);
    with_float_dtype!(src.dtype, T => float_reduce::<T>(op, src, &kept, &red, dst), _ => {
        match src.dtype {
            DType::I64 => int_reduce::<i64>(op, src, &kept, &red, dst),
            DType::I32 => int_reduce::<i32>(op, src, &kept, &red, dst),
            DType::U8 => int_reduce::<u8>(op, src, &kept, &red, dst),
            _ => int_reduce::<B8>(op, src, &kept, &red, dst),
        }
    })
}

fn arg_typed<L: Load>(
    max: bool,
    src: &Operand,
    dim: usize,
    values: Option<&Operand>,
    idx: &Operand,
) {
    let (kept, red) = split_dims(&src.layout, &[dim]);
    let s = ptr::<L>(src.storage) as *const L;
    let (values, indices) = (values.map(at::<L::V>), at::<i64>(idx));
    // SAFETY: dtypes match; locks are held; outputs are contiguous.
    unsafe {
        if max {
            run_reduction(&Arg::<L, true> { values, indices }, s, &kept, &red)
        } else {
            run_reduction(&Arg::<L, false> { values, indices }, s, &kept, &red)
        }
    }
}

/// Index (and value) of the extreme element along `dim`.
pub(crate) fn arg_reduce(
    max: bool,
    src: &Operand,
    dim: usize,
    values: Option<&Operand>,
    indices: &Operand,
) {
    match src.dtype {
        DType::F32 => arg_typed::<f32>(max, src, dim, values, indices),
        DType::F64 => arg_typed::<f64>(max, src, dim, values, indices),
        DType::F16 => arg_typed::<f16>(max, src, dim, values, indices),
        DType::BF16 => arg_typed::<bf16>(max, src, dim, values, indices),
        DType::I64 => arg_typed::<i64>(max, src, dim, values, indices),
        DType::I32 => arg_typed::<i32>(max, src, dim, values, indices),
        DType::U8 => arg_typed::<u8>(max, src, dim, values, indices),
        DType::Bool => arg_typed::<B8>(max, src, dim, values, indices),
    }
}
