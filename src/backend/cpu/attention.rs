//! Scaled dot-product attention on the CPU, forward and backward, blocked
//! as FlashAttention is: the `[L, S]` score matrix of a head is never
//! materialised. Memory beyond the outputs is per worker thread and
//! independent of the sequence length in the forward (`BQ x BK + BQ x Ev`
//! values in `T::C`, plus `BQ x E + BK x (E + Ev)` for f16 and bf16, which
//! are widened to f32 block by block; f32 and f64 are read in place); the
//! backward of one key/value head also keeps its query gradient and its
//! key and value gradients in `T::C` (and, for f16 and bf16, its queries
//! and output gradient widened): O(L + S), not O(L S). The block products are the `gemm` crate's, on one thread each
//! (the units of work are spread over the pool), with the score scale as
//! gemm's `beta`.
//!
//! Operands (the op layer makes them so): `q [N, L, E]`, `k [N / G, S, E]`,
//! `v [N / G, S, Ev]` (`G` query heads share a key/value head: query head
//! `n` reads head `n / G`) with dense rows within each head (heads at any distance:
//! a key/value cache's prefix is read in place), dense `out [N, L, Ev]`, all
//! of one float dtype `T`; `lse [N, L]`
//! dense in `T::C` (f32 for f32/f16/bf16, f64 for f64); an optional mask as
//! a strided `[batch.., L, S]` view over the `N` heads (stride 0 where it
//! broadcasts: a padding mask is never copied per head), bool (`true`:
//! may attend) or `T` (added to the scaled scores).
//!
//! Forward, per head `n` and block of `BQ` query rows: for each block of
//! `BK` keys, `s = scale * q k^T`, masked; the running row maximum
//! `m`, the running sum `l` of `exp(s - m)` and the unnormalised output
//! `acc` are rescaled by `exp(m_old - m_new)` (the online softmax), the
//! block's probabilities (dropped and rescaled when dropout is on) are
//! multiplied into `acc` (gemm). The output is `acc / l`, and
//! `lse = m + ln l` is saved for the backward. A row whose every key is
//! masked has `l = 0`: its output is 0 (PyTorch's safe softmax since 2.5)
//! and its `lse` is `+inf`, so the backward's `exp(s - lse)` is 0 there.
//!
//! Backward, per key/value head, per query head of its group, per key
//! block, per query block (FlashAttention-2's loop order on one thread: no
//! atomics; the group's `dK` and `dV` accumulate in one buffer): `p = exp(s - lse)`, `dV += pd^T
//! dO`, `dpd = dO V^T`, `ds = p (dp - D)` with `D = rowsum(dO * O)`,
//! `dQ += scale ds K`, `dK += scale ds^T Q`. Causal attention (row `i` sees
//! keys `j <= i + offset`) skips the key blocks after a query block
//! (forward) and the query blocks before a key block (backward).
//!
//! Dropout: element `(n, i, j)` is kept when a hash of the seed and
//! `(n L + i) S + j` (SplitMix64's finaliser) gives a uniform number
//! `>= p`, so the backward regenerates the forward's mask without storing
//! it.

use super::gemm::Parallelism;
use super::numeric_traits::{FastExp, Flt};
use super::ptr;
use super::simd;
use super::strided::SendPtr;
use super::thread_pool::par_for;
use crate::backend::attention::{MaskKind, SdpaArgs, SdpaGrads};
use crate::backend::Operand;
use crate::with_float_dtype;
use num_traits::{Float, One, Zero};

/// Query rows per block.
const BQ: usize = 64;
/// Keys per block.
const BK: usize = 64;

/// The sizes of a call.
#[derive(Clone, Copy)]
struct Dims {
    n: usize,
    /// Query heads per key/value head.
    group: usize,
    l: usize,
    s: usize,
    e: usize,
    ev: usize,
}

impl SdpaArgs<'_> {
    fn dims(&self) -> Dims {
        let (qs, vs) = (self.q.layout.shape(), self.v.layout.shape());
        Dims {
            n: qs[0],
            group: self.group,
            l: qs[1],
            s: self.k.layout.shape()[1],
            e: qs[2],
            ev: vs[2],
        }
    }
}

/// Whether element `idx` of the score tensor survives dropout `p`.
#[inline(always)]
fn keep(seed: u64, idx: u64, p: f64) -> bool {
    let mut x = seed.wrapping_add(idx.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    ((x >> 11) as f64) * (1.0 / (1u64 << 53) as f64) >= p
}

/// `dst[m x n] = (acc ? dst : 0) + beta * A B` through gemm on this thread,
/// with `dst` row-major (row stride `d_rs`), `A[i, p]` at
/// `a[i a_st.0 + p a_st.1]` and `B[p, j]` at `b[p b_st.0 + j b_st.1]`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn mm<C: 'static + Copy + Zero + One>(
    (m, n, k): (usize, usize, usize),
    dst: &mut [C],
    d_rs: usize,
    a: &[C],
    a_st: (usize, usize),
    b: &[C],
    b_st: (usize, usize),
    acc: bool,
    beta: C,
) {
    if m == 0 || n == 0 {
        return;
    }
    let extent = |rows: usize, cols: usize, (rs, cs): (usize, usize)| {
        (rows.max(1) - 1) * rs + (cols.max(1) - 1) * cs + 1
    };
    // Checked in every build: the unsafe call below relies on it.
    assert!(
        extent(m, n, (d_rs, 1)) <= dst.len()
            && (k == 0 || (extent(m, k, a_st) <= a.len() && extent(k, n, b_st) <= b.len())),
        "attention gemm operands out of their scratch"
    );
    let alpha = if acc { C::one() } else { C::zero() };
    // SAFETY: the assertion above puts every element gemm reads or writes
    // (rows and columns with the given strides) inside the three slices;
    // `dst` is a `&mut` slice, so it overlaps neither `a` nor `b`; gemm
    // reads `dst` only when `acc` (then it is initialised: a slice of `C`).
    unsafe {
        super::gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            (1, d_rs as isize),
            acc,
            a.as_ptr(),
            (a_st.1 as isize, a_st.0 as isize),
            b.as_ptr(),
            (b_st.1 as isize, b_st.0 as isize),
            alpha,
            beta,
            Parallelism::None,
        )
    }
}

/// The dense rows `rows x cols` starting at element `base` of `p`, as
/// `T::C`: the tensor's own memory when `T` is `T::C` (f32, f64), else
/// widened into `scratch` (f16, bf16).
///
/// # Safety
/// The rows lie in one live allocation of `T` nobody writes while the
/// returned slice lives.
#[inline(always)]
unsafe fn rows<T: Flt>(
    p: SendPtr<T>,
    base: usize,
    rows: usize,
    cols: usize,
    scratch: &mut [T::C],
) -> &[T::C] {
    let n = rows * cols;
    // SAFETY: the caller's contract.
    let src = unsafe { std::slice::from_raw_parts(p.get().add(base), n) };
    if same_type::<T, T::C>() {
        // SAFETY: `T` and `T::C` are the same type (checked by TypeId), so
        // the slice of `T` is a slice of `T::C`, with the caller's lifetime.
        return unsafe { std::slice::from_raw_parts(src.as_ptr() as *const T::C, n) };
    }
    for (d, &x) in scratch[..n].iter_mut().zip(src) {
        *d = x.up();
    }
    &scratch[..n]
}

/// Whether `A` and `B` are one type.
#[inline(always)]
fn same_type<A: 'static, B: 'static>() -> bool {
    std::any::TypeId::of::<A>() == std::any::TypeId::of::<B>()
}

/// The mask and causal structure of one call, read per block.
struct Masker<T> {
    mask: Option<MaskView>,
    causal: Option<isize>,
    _t: std::marker::PhantomData<T>,
}

/// A mask operand `[batch.., L, S]` (any strides, 0 where it broadcasts):
/// head `n` is the row-major index over the batch dimensions.
struct MaskView {
    p: SendPtr<u8>,
    offset: usize,
    batch: Vec<(usize, usize)>,
    /// The strides of the rows and the keys.
    si: usize,
    sj: usize,
    kind: MaskKind,
}

impl MaskView {
    /// The element offset of head `n`'s `[0, 0]`.
    fn head(&self, mut n: usize) -> usize {
        let mut off = self.offset;
        for &(size, stride) in self.batch.iter().rev() {
            off += (n % size) * stride;
            n /= size;
        }
        off
    }
}

impl<T: Flt> Masker<T> {
    fn new(a: &SdpaArgs) -> Masker<T> {
        let mask = a.mask.map(|(m, kind)| {
            let (sh, st) = (m.layout.shape(), m.layout.strides());
            let r = sh.len();
            MaskView {
                p: SendPtr(ptr::<u8>(m.storage)),
                offset: m.layout.offset(),
                batch: sh[..r - 2]
                    .iter()
                    .copied()
                    .zip(st[..r - 2].iter().copied())
                    .collect(),
                si: st[r - 2],
                sj: st[r - 1],
                kind,
            }
        });
        Masker {
            mask,
            causal: a.causal,
            _t: std::marker::PhantomData,
        }
    }

    /// Applies the masks to the scores `s [bq x bk]` of head `n`, rows from
    /// `i0`, keys from `j0`.
    ///
    /// # Safety
    /// The mask operand's layout `[batch.., L, S]` (batch elements `N`)
    /// covers `n`, the rows and keys.
    #[inline(always)]
    unsafe fn apply(
        &self,
        s: &mut [T::C],
        n: usize,
        (i0, bq): (usize, usize),
        (j0, bk): (usize, usize),
    ) {
        let ninf = <T::C as Float>::neg_infinity();
        if let Some(off) = self.causal {
            for r in 0..bq {
                // Keys from `i + off + 1` on are masked.
                let first = ((i0 + r) as isize + off + 1 - j0 as isize).clamp(0, bk as isize);
                for x in s[r * bk..(r + 1) * bk].iter_mut().skip(first as usize) {
                    *x = ninf;
                }
            }
        }
        let Some(m) = &self.mask else {
            return;
        };
        let head = m.head(n);
        for r in 0..bq {
            let row = head + (i0 + r) * m.si + j0 * m.sj;
            let out = &mut s[r * bk..(r + 1) * bk];
            match m.kind {
                MaskKind::Keep => {
                    for (c, x) in out.iter_mut().enumerate() {
                        // SAFETY: the caller's contract: element (n, i0 + r, j0 + c).
                        if unsafe { *m.p.get().add(row + c * m.sj) } == 0 {
                            *x = ninf;
                        }
                    }
                }
                MaskKind::Add => {
                    let pt = m.p.get() as *const T;
                    for (c, x) in out.iter_mut().enumerate() {
                        // SAFETY: as above; the mask has the queries' dtype `T`.
                        *x = *x + unsafe { *pt.add(row + c * m.sj) }.up();
                    }
                }
            }
        }
    }
}

/// Everything a unit of work needs, shared by the threads.
struct Shared<T> {
    pq: SendPtr<T>,
    pk: SendPtr<T>,
    pv: SendPtr<T>,
    /// The distance between heads of q, k and v, in elements (their rows
    /// are dense within a head; k and v may be views of a longer cache).
    heads: [usize; 3],
    d: Dims,
    scale: f64,
    dropout: Option<(f64, u64)>,
    masker: Masker<T>,
}

impl<T: Flt> Shared<T> {
    fn new(a: &SdpaArgs) -> Shared<T> {
        let base = |o: &Operand| SendPtr(ptr::<T>(o.storage).wrapping_add(o.layout.offset()));
        Shared {
            pq: base(a.q),
            pk: base(a.k),
            pv: base(a.v),
            heads: [a.q, a.k, a.v].map(|o| o.layout.strides()[0]),
            d: a.dims(),
            scale: a.scale,
            dropout: a.dropout,
            masker: Masker::new(a),
        }
    }

    /// The end of the keys that rows `i0..i0 + bq` see: causal attention
    /// stops after the last row's diagonal.
    fn key_end(&self, i0: usize, bq: usize) -> usize {
        match self.masker.causal {
            Some(off) => ((i0 + bq) as isize + off).clamp(0, self.d.s as isize) as usize,
            None => self.d.s,
        }
    }

    /// The first query row that sees key `j0` (causal: `i + off >= j0`).
    fn first_row(&self, j0: usize) -> usize {
        match self.masker.causal {
            Some(off) => (j0 as isize - off).clamp(0, self.d.l as isize) as usize,
            None => 0,
        }
    }
}

/// One forward unit: head `n`, query block `qb`.
struct FwdUnit<'a, T: Flt> {
    sh: &'a Shared<T>,
    po: SendPtr<T>,
    plse: Option<SendPtr<T::C>>,
    n: usize,
    qb: usize,
}

impl<T: Flt> simd::Kernel for FwdUnit<'_, T>
where
    T: Flt,
    T::C: FastExp,
{
    type Output = ();
    const WIDE: bool = <T as simd::Hot>::HOT;

    #[inline(always)]
    fn call<const F: bool>(self) {
        let FwdUnit {
            sh,
            po,
            plse,
            n,
            qb,
        } = self;
        let Dims { l, s, e, ev, .. } = sh.d;
        let (zero, one) = (<T::C as Zero>::zero(), <T::C as One>::one());
        let ninf = <T::C as Float>::neg_infinity();
        let i0 = qb * BQ;
        let bq = BQ.min(l - i0);
        let scale: T::C = num_traits::cast(sh.scale).unwrap_or(one);
        // Scratch for f16 / bf16 only (f32 and f64 are read in place).
        let widen = !same_type::<T, T::C>();
        let scratch = |len: usize| vec![zero; if widen { len } else { 0 }];
        let (mut qbuf, mut kbuf) = (scratch(bq * e), scratch(BK * e));
        let mut vbuf = scratch(BK * ev);
        let mut sc = vec![zero; bq * BK];
        let mut acc = vec![zero; bq * ev];
        let mut m = vec![ninf; bq];
        let mut lsum = vec![zero; bq];
        // SAFETY: rows i0..i0 + bq of head n are inside the dense q [N, L, E].
        let qs = unsafe { rows::<T>(sh.pq, n * sh.heads[0] + i0 * e, bq, e, &mut qbuf) };
        let kend = sh.key_end(i0, bq);
        let mut j0 = 0;
        while j0 < kend {
            let bk = BK.min(kend - j0);
            let kv = n / sh.d.group;
            // SAFETY: keys j0..j0 + bk of head kv are inside k [N / G, S, E] and v [N / G, S, Ev].
            let (kb, vb) = unsafe {
                (
                    rows::<T>(sh.pk, kv * sh.heads[1] + j0 * e, bk, e, &mut kbuf),
                    rows::<T>(sh.pv, kv * sh.heads[2] + j0 * ev, bk, ev, &mut vbuf),
                )
            };
            let sblk = &mut sc[..bq * bk];
            mm((bq, bk, e), sblk, bk, qs, (e, 1), kb, (1, e), false, scale);
            // SAFETY: the op layer made the mask's layout [batch.., L, S] over N heads.
            unsafe { sh.masker.apply(sblk, n, (i0, bq), (j0, bk)) };
            for r in 0..bq {
                let row = &mut sblk[r * bk..(r + 1) * bk];
                let bmax = row_max(row);
                let m_new = if bmax > m[r] || bmax.is_nan() {
                    bmax
                } else {
                    m[r]
                };
                if m_new == ninf {
                    // Every key so far is masked: nothing to add.
                    row.iter_mut().for_each(|x| *x = zero);
                    continue;
                }
                let alpha = (m[r] - m_new).fexp_neg::<F>();
                for x in row.iter_mut() {
                    *x = (*x - m_new).fexp_neg::<F>();
                }
                lsum[r] = lsum[r] * alpha + lane_sum(row);
                if alpha != one {
                    acc[r * ev..(r + 1) * ev]
                        .iter_mut()
                        .for_each(|a| *a = *a * alpha);
                }
                m[r] = m_new;
                if let Some((p, seed)) = sh.dropout {
                    let inv: T::C = num_traits::cast(1.0 / (1.0 - p)).unwrap_or(one);
                    let base = ((n * l + i0 + r) * s + j0) as u64;
                    for (c, x) in row.iter_mut().enumerate() {
                        *x = if keep(seed, base + c as u64, p) {
                            *x * inv
                        } else {
                            zero
                        };
                    }
                }
            }
            mm(
                (bq, ev, bk),
                &mut acc,
                ev,
                sblk,
                (bk, 1),
                vb,
                (ev, 1),
                true,
                one,
            );
            j0 += bk;
        }
        for r in 0..bq {
            let (o, lse) = if lsum[r] == zero {
                (zero, <T::C as Float>::infinity())
            } else {
                (one / lsum[r], m[r] + lsum[r].ln())
            };
            let ob = (n * l + i0 + r) * ev;
            for c in 0..ev {
                // SAFETY: row i0 + r of head n in the dense out [N, L, Ev], written by this unit only.
                unsafe { po.get().add(ob + c).write(T::down(acc[r * ev + c] * o)) };
            }
            if let Some(pl) = plse {
                // SAFETY: element (n, i0 + r) of the dense lse [N, L], this unit's alone.
                unsafe { pl.get().add(n * l + i0 + r).write(lse) };
            }
        }
    }
}

/// Lanes of the row reductions (a plain loop over them vectorises).
const LANES: usize = 8;

/// The maximum of a row of scores (NaN if any is), in [`LANES`] lanes of a
/// plain maximum and a NaN flag (a NaN-sticky maximum would not vectorise).
#[inline(always)]
fn row_max<C: Float>(x: &[C]) -> C {
    let mut ml = [C::neg_infinity(); LANES];
    let mut nan = [false; LANES];
    let mut it = x.chunks_exact(LANES);
    for c in &mut it {
        for j in 0..LANES {
            ml[j] = if c[j] > ml[j] { c[j] } else { ml[j] };
            nan[j] |= c[j].is_nan();
        }
    }
    let mut m = C::neg_infinity();
    for &v in ml.iter().chain(it.remainder()) {
        m = if v > m { v } else { m };
    }
    if nan.iter().any(|&n| n) || it.remainder().iter().any(|v| v.is_nan()) {
        C::nan()
    } else {
        m
    }
}

/// The sum of a row in [`LANES`] lanes.
#[inline(always)]
fn lane_sum<C: Float>(x: &[C]) -> C {
    let mut sl = [C::zero(); LANES];
    let mut it = x.chunks_exact(LANES);
    for c in &mut it {
        for j in 0..LANES {
            sl[j] = sl[j] + c[j];
        }
    }
    let tail = it.remainder().iter().fold(C::zero(), |a, &b| a + b);
    ((sl[0] + sl[1]) + (sl[2] + sl[3])) + ((sl[4] + sl[5]) + (sl[6] + sl[7])) + tail
}

fn forward_typed<T: Flt>(a: &SdpaArgs, out: &Operand, lse: Option<&Operand>)
where
    T::C: FastExp,
{
    let sh = Shared::<T>::new(a);
    let Dims { n, l, .. } = sh.d;
    if n == 0 || l == 0 {
        return;
    }
    let po = SendPtr(ptr::<T>(out.storage).wrapping_add(out.layout.offset()));
    let plse = lse.map(|o| SendPtr(ptr::<T::C>(o.storage).wrapping_add(o.layout.offset())));
    let blocks = l.div_ceil(BQ);
    par_for(n * blocks, |u| {
        simd::run(FwdUnit {
            sh: &sh,
            po,
            plse,
            n: u / blocks,
            qb: u % blocks,
        })
    });
}

/// The attention forward: `out` and, when given, `lse` (see the module docs).
pub(crate) fn forward(a: &SdpaArgs, out: &Operand, lse: Option<&Operand>) {
    with_float_dtype!(a.q.dtype, T => forward_typed::<T>(a, out, lse), _ => {
        unreachable!("attention on {}: the op layer refuses it", a.q.dtype)
    })
}

/// One backward unit: key/value head `kv` and its group of query heads.
struct BwdUnit<'a, T: Flt> {
    sh: &'a Shared<T>,
    po: SendPtr<T>,
    pdo: SendPtr<T>,
    plse: SendPtr<T::C>,
    pdq: SendPtr<T>,
    pdk: SendPtr<T>,
    pdv: SendPtr<T>,
    kv: usize,
}

impl<T: Flt> simd::Kernel for BwdUnit<'_, T>
where
    T::C: FastExp,
{
    type Output = ();
    const WIDE: bool = <T as simd::Hot>::HOT;

    #[inline(always)]
    fn call<const F: bool>(self) {
        let BwdUnit {
            sh,
            po,
            pdo,
            plse,
            pdq,
            pdk,
            pdv,
            kv,
        } = self;
        let Dims {
            l, s, e, ev, group, ..
        } = sh.d;
        let (zero, one) = (<T::C as Zero>::zero(), <T::C as One>::one());
        let scale: T::C = num_traits::cast(sh.scale).unwrap_or(one);
        let widen = !same_type::<T, T::C>();
        let scratch = |len: usize| vec![zero; if widen { len } else { 0 }];
        let (mut qbuf, mut dobuf) = (scratch(l * e), scratch(l * ev));
        let (mut kbuf, mut vbuf) = (scratch(BK * e), scratch(BK * ev));
        let mut dq = vec![zero; l * e];
        let mut dd = vec![zero; l];
        // The whole head's dK and dV: the group's query heads add to them in turn.
        let mut dk = vec![zero; s * e];
        let mut dv = vec![zero; s * ev];
        let blk = BQ.min(l) * BK.min(s);
        let (mut p, mut pd, mut dp) = (vec![zero; blk], vec![zero; blk], vec![zero; blk]);
        let inv: T::C = sh.dropout.map_or(one, |(p, _)| {
            num_traits::cast(1.0 / (1.0 - p)).unwrap_or(one)
        });
        for n in kv * group..(kv + 1) * group {
            // SAFETY: head n's rows of the dense q, dout and out [N, L, _], and of lse [N, L].
            let (qs, dob, lse) = unsafe {
                let qs = rows::<T>(sh.pq, n * sh.heads[0], l, e, &mut qbuf);
                let dob = rows::<T>(pdo, n * l * ev, l, ev, &mut dobuf);
                let o = std::slice::from_raw_parts(po.get().add(n * l * ev), l * ev);
                for (i, d) in dd.iter_mut().enumerate() {
                    let mut acc = zero;
                    for c in 0..ev {
                        acc = acc + dob[i * ev + c] * o[i * ev + c].up();
                    }
                    *d = acc;
                }
                (
                    qs,
                    dob,
                    std::slice::from_raw_parts(plse.get().add(n * l), l),
                )
            };
            dq.iter_mut().for_each(|x| *x = zero);
            let mut j0 = 0;
            while j0 < s {
                let bk = BK.min(s - j0);
                // SAFETY: keys j0..j0 + bk of head kv in k [N / G, S, E] and v [N / G, S, Ev].
                let (kb, vb) = unsafe {
                    (
                        rows::<T>(sh.pk, kv * sh.heads[1] + j0 * e, bk, e, &mut kbuf),
                        rows::<T>(sh.pv, kv * sh.heads[2] + j0 * ev, bk, ev, &mut vbuf),
                    )
                };
                let (dkb, dvb) = (&mut dk[j0 * e..], &mut dv[j0 * ev..]);
                // Causal: the rows before the first that sees j0 see none of these keys.
                let mut i0 = sh.first_row(j0);
                while i0 < l {
                    let bq = BQ.min(l - i0);
                    let (pb, pdb, dpb) =
                        (&mut p[..bq * bk], &mut pd[..bq * bk], &mut dp[..bq * bk]);
                    mm(
                        (bq, bk, e),
                        pb,
                        bk,
                        &qs[i0 * e..],
                        (e, 1),
                        kb,
                        (1, e),
                        false,
                        scale,
                    );
                    // SAFETY: the op layer made the mask's layout [batch.., L, S] over N heads.
                    unsafe { sh.masker.apply(pb, n, (i0, bq), (j0, bk)) };
                    for r in 0..bq {
                        let lr = lse[i0 + r];
                        let (row, drow) = (
                            &mut pb[r * bk..(r + 1) * bk],
                            &mut pdb[r * bk..(r + 1) * bk],
                        );
                        for (x, d) in row.iter_mut().zip(drow.iter_mut()) {
                            *x = (*x - lr).fexp_neg::<F>();
                            *d = *x;
                        }
                        if let Some((pr, seed)) = sh.dropout {
                            let base = ((n * l + i0 + r) * s + j0) as u64;
                            for (c, d) in drow.iter_mut().enumerate() {
                                *d = if keep(seed, base + c as u64, pr) {
                                    *d * inv
                                } else {
                                    zero
                                };
                            }
                        }
                    }
                    // dV += pd^T dO
                    mm(
                        (bk, ev, bq),
                        dvb,
                        ev,
                        pdb,
                        (1, bk),
                        &dob[i0 * ev..],
                        (ev, 1),
                        true,
                        one,
                    );
                    // dpd = dO V^T
                    mm(
                        (bq, bk, ev),
                        dpb,
                        bk,
                        &dob[i0 * ev..],
                        (ev, 1),
                        vb,
                        (1, ev),
                        false,
                        one,
                    );
                    for r in 0..bq {
                        let di = dd[i0 + r];
                        let base = ((n * l + i0 + r) * s + j0) as u64;
                        let (row, drow) =
                            (&mut pb[r * bk..(r + 1) * bk], &dpb[r * bk..(r + 1) * bk]);
                        for (c, (x, &g)) in row.iter_mut().zip(drow).enumerate() {
                            let g = match sh.dropout {
                                Some((pr, seed)) if !keep(seed, base + c as u64, pr) => zero,
                                Some(_) => g * inv,
                                None => g,
                            };
                            // ds = p (dp - D); a masked p is 0.
                            *x = *x * (g - di);
                        }
                    }
                    // dQ += scale ds K;  dK += scale ds^T Q
                    mm(
                        (bq, e, bk),
                        &mut dq[i0 * e..],
                        e,
                        pb,
                        (bk, 1),
                        kb,
                        (e, 1),
                        true,
                        scale,
                    );
                    mm(
                        (bk, e, bq),
                        dkb,
                        e,
                        pb,
                        (1, bk),
                        &qs[i0 * e..],
                        (e, 1),
                        true,
                        scale,
                    );
                    i0 += bq;
                }
                j0 += bk;
            }
            for (idx, &x) in dq.iter().enumerate() {
                // SAFETY: head n's rows of the dense dq [N, L, E], this unit's alone (n is in kv's group).
                unsafe { pdq.get().add(n * l * e + idx).write(T::down(x)) };
            }
        }
        for (idx, &x) in dk.iter().enumerate() {
            // SAFETY: head kv's rows of the dense dk [N / G, S, E], this unit's alone.
            unsafe { pdk.get().add(kv * s * e + idx).write(T::down(x)) };
        }
        for (idx, &x) in dv.iter().enumerate() {
            // SAFETY: as above, in dv [N / G, S, Ev].
            unsafe { pdv.get().add(kv * s * ev + idx).write(T::down(x)) };
        }
    }
}

fn backward_typed<T: Flt>(a: &SdpaArgs, g: &SdpaGrads)
where
    T::C: FastExp,
{
    let sh = Shared::<T>::new(a);
    let base = |o: &Operand| SendPtr(ptr::<T>(o.storage).wrapping_add(o.layout.offset()));
    let (po, pdo, pdq, pdk, pdv) = (
        base(g.out),
        base(g.dout),
        base(g.dq),
        base(g.dk),
        base(g.dv),
    );
    let plse = SendPtr(ptr::<T::C>(g.lse.storage).wrapping_add(g.lse.layout.offset()));
    par_for(sh.d.n / sh.d.group, |kv| {
        simd::run(BwdUnit {
            sh: &sh,
            po,
            pdo,
            plse,
            pdq,
            pdk,
            pdv,
            kv,
        })
    });
}

/// The attention backward: `dq`, `dk`, `dv` (see the module docs).
pub(crate) fn backward(a: &SdpaArgs, g: &SdpaGrads) {
    with_float_dtype!(a.q.dtype, T => backward_typed::<T>(a, g), _ => {
        unreachable!("attention on {}: the op layer refuses it", a.q.dtype)
    })
}
