//! Helpers shared by the integration tests: deterministic data, tensors with
//! non-contiguous layouts built from logical values, and naive f64 references.
#![allow(dead_code)]

pub mod conv_ref;
#[cfg(feature = "cuda")]
pub mod devices;
pub mod grad;
pub mod layouts;
pub mod optim_ref;
pub mod optim_steps;

use tensorscope::nn::Module;

/// The one lock of a test binary. A test that reads the allocator's global
/// statistics, the global generator or a global setting holds it alone
/// ([`serial`]: `on_both!`, `on_cpu!` and each module's `lock()` take it);
/// every other test holds it shared ([`shared`]), so those still run in
/// parallel with each other but never beside a test that counts. A
/// poisoned lock is taken anyway: the test that panicked already failed.
static LOCK: std::sync::RwLock<()> = std::sync::RwLock::new(());

thread_local! {
    /// How many [`Guard`]s (alone) and shared guards this thread holds: a
    /// thread that holds the lock alone takes it again for free (`on_both!`
    /// takes it, then the body calls its module's `lock()`).
    static HELD: std::cell::Cell<(usize, usize)> = const { std::cell::Cell::new((0, 0)) };
}

/// What [`serial`] returns: the lock held alone, released when the
/// outermost guard of the thread is dropped.
pub struct Guard(#[allow(dead_code)] Option<std::sync::RwLockWriteGuard<'static, ()>>);

impl Drop for Guard {
    fn drop(&mut self) {
        HELD.with(|h| h.set((h.get().0 - 1, h.get().1)));
    }
}

/// What [`shared`] returns.
pub struct SharedGuard(#[allow(dead_code)] Option<std::sync::RwLockReadGuard<'static, ()>>);

impl Drop for SharedGuard {
    fn drop(&mut self) {
        HELD.with(|h| h.set((h.get().0, h.get().1 - 1)));
    }
}

/// This test alone in its binary (see [`LOCK`]).
pub fn serial() -> Guard {
    let (alone, shared) = HELD.with(|h| h.get());
    assert!(
        shared == 0 || alone > 0,
        "a test that holds the test lock shared asked for it alone: take `serial()` first"
    );
    let g = (alone == 0).then(|| LOCK.write().unwrap_or_else(|e| e.into_inner()));
    HELD.with(|h| h.set((alone + 1, shared)));
    Guard(g)
}

/// This test beside any other that holds the lock shared (see [`LOCK`]).
pub fn shared() -> SharedGuard {
    let (alone, shared) = HELD.with(|h| h.get());
    let g = (alone == 0 && shared == 0).then(|| LOCK.read().unwrap_or_else(|e| e.into_inner()));
    HELD.with(|h| h.set((alone, shared + 1)));
    SharedGuard(g)
}

/// The CPU-only build's twin of `devices::on_both!`: `on_cpu!(a, b)` makes
/// tests `cpu::a`, `cpu::b` calling the bodies `a(Device::Cpu)`,
/// `b(Device::Cpu)` of the invoking module, each under [`serial`].
#[allow(unused_macros)] // test binaries that include tests/common without using it
macro_rules! on_cpu {
    ($($name:ident),* $(,)?) => {
        mod cpu {
            $(#[test] fn $name() {
                let _g = $crate::common::serial();
                super::$name(tensorscope::Device::Cpu)
            })*
        }
    };
}
#[allow(unused_imports)]
pub(crate) use on_cpu;

/// `on_both!` in the build with the `cuda` feature, `on_cpu!` without: one
/// list of test bodies for both builds.
#[allow(unused_macros)] // test binaries that include tests/common without using it
macro_rules! on_devices {
    ($($name:ident),* $(,)?) => {
        #[cfg(feature = "cuda")]
        $crate::common::devices::on_both!($($name),*);
        #[cfg(not(feature = "cuda"))]
        $crate::common::on_cpu!($($name),*);
    };
}
#[allow(unused_imports)]
pub(crate) use on_devices;
use tensorscope::{bf16, f16, DType, Device, Result, Tensor};

/// A module that is only its named parameters (its forward is the
/// identity): optimizers and checkpoints run on it without a network.
pub struct Params(pub Vec<(String, Tensor)>);

impl Module for Params {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(x.alias())
    }
    fn named_parameters(&self) -> Vec<(String, &Tensor)> {
        self.0.iter().map(|(n, t)| (n.clone(), t)).collect()
    }
    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
        self.0.iter_mut().map(|(n, t)| (n.clone(), t)).collect()
    }
}

/// The CPU.
pub const CPU: Device = Device::Cpu;

/// The float dtypes.
pub const FLOATS: [DType; 4] = [DType::F32, DType::F64, DType::F16, DType::BF16];
/// The integer dtypes (not bool).
pub const INTS: [DType; 3] = [DType::I64, DType::I32, DType::U8];
/// Every numeric (non-bool) dtype.
pub const NUMERIC: [DType; 7] = [
    DType::F32,
    DType::F64,
    DType::F16,
    DType::BF16,
    DType::I64,
    DType::I32,
    DType::U8,
];
/// Every dtype.
pub const ALL: [DType; 8] = [
    DType::F32,
    DType::F64,
    DType::F16,
    DType::BF16,
    DType::I64,
    DType::I32,
    DType::U8,
    DType::Bool,
];

/// A small deterministic generator (xorshift64*), independent of the crate's.
pub struct Rng(u64);
impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64)
    }
    /// An integer in [lo, hi].
    pub fn int(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next_u64() % ((hi - lo + 1) as u64)) as i64
    }
}

/// A tensor of `dt` with `v` (converted) on `dev`.
pub fn tensor<T: tensorscope::Element>(v: &[T], shape: &[usize], dt: DType, dev: Device) -> Tensor {
    Tensor::from_slice(v, shape, Device::Cpu)
        .unwrap()
        .to_dtype(dt)
        .unwrap()
        .to_device(dev)
        .unwrap()
}

/// `n` values uniform in [lo, hi).
pub fn uniform(n: usize, seed: u64, lo: f64, hi: f64) -> Vec<f64> {
    let mut r = Rng::new(seed);
    (0..n).map(|_| r.uniform(lo, hi)).collect()
}

/// `n` integer values in [lo, hi], as f64.
pub fn ints(n: usize, seed: u64, lo: i64, hi: i64) -> Vec<f64> {
    let mut r = Rng::new(seed);
    (0..n).map(|_| r.int(lo, hi) as f64).collect()
}

/// Values suited to `dt`: integers in a small range for integer dtypes (u8
/// non-negative), 0/1 for bool, uniform in [lo, hi) for floats.
pub fn data_for(dt: DType, n: usize, seed: u64, lo: f64, hi: f64) -> Vec<f64> {
    match dt {
        DType::Bool => ints(n, seed, 0, 1),
        DType::U8 => ints(n, seed, 0, hi.max(1.0) as i64),
        d if d.is_int() => ints(n, seed, lo.floor() as i64, hi.ceil() as i64),
        _ => uniform(n, seed, lo, hi),
    }
}

/// `v` as a tensor of dtype `dt` stores it: rounded for floats, wrapped
/// (two's complement) for integers, `!= 0` for bool.
pub fn store(dt: DType, v: f64) -> f64 {
    match dt {
        DType::F64 => v,
        DType::F32 => v as f32 as f64,
        DType::F16 => f16::from_f64(v).to_f64(),
        DType::BF16 => bf16::from_f64(v).to_f64(),
        DType::I64 => v as i64 as f64,
        DType::I32 => (v as i64) as i32 as f64,
        DType::U8 => (v as i64) as u8 as f64,
        DType::Bool => (v != 0.0) as u8 as f64,
    }
}

/// Machine epsilon of a float dtype (1 for integers: they are exact).
pub fn eps(dt: DType) -> f64 {
    match dt {
        DType::F64 => f64::EPSILON,
        DType::F32 => f32::EPSILON as f64,
        DType::F16 => 9.765625e-4,
        DType::BF16 => 7.8125e-3,
        _ => 0.0,
    }
}

/// How a test tensor is laid out over its storage.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Lay {
    /// Row-major at offset 0.
    Contig,
    /// The transpose of a contiguous tensor (last two dims swapped); rank >= 2.
    Transposed,
    /// Every other element of a wider last dimension, from offset 1.
    Stepped,
}

/// The layouts every op is run over.
pub const LAYS: [Lay; 3] = [Lay::Contig, Lay::Transposed, Lay::Stepped];

/// Row-major strides.
pub fn row_major(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// The multi-index of linear index `lin` in `shape`.
pub fn unravel(mut lin: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        idx[d] = lin % shape[d];
        lin /= shape[d];
    }
    idx
}

/// A tensor of dtype `dt` whose logical row-major values are `v` (converted
/// to `dt`), laid out as `lay` says: the base is built in `dt` and the view
/// taken of it, so the layout survives for every dtype. The base handle is
/// dropped: the view keeps the storage alive.
pub fn make(v: &[f64], shape: &[usize], dt: DType, lay: Lay) -> Tensor {
    let n: usize = shape.iter().product();
    assert_eq!(v.len(), n);
    let lay = match lay {
        _ if shape.is_empty() => Lay::Contig,
        Lay::Transposed if shape.len() < 2 => Lay::Stepped,
        l => l,
    };
    let r = shape.len();
    let (base, bshape) = match lay {
        Lay::Contig => (v.to_vec(), shape.to_vec()),
        Lay::Transposed => {
            let mut bshape = shape.to_vec();
            bshape.swap(r - 2, r - 1);
            let bstrides = row_major(&bshape);
            let mut base = vec![0.0; n];
            for (lin, &x) in v.iter().enumerate() {
                let mut idx = unravel(lin, shape);
                idx.swap(r - 2, r - 1);
                let off: usize = idx.iter().zip(&bstrides).map(|(i, s)| i * s).sum();
                base[off] = x;
            }
            (base, bshape)
        }
        Lay::Stepped => {
            let last = shape[r - 1];
            let mut bshape = shape.to_vec();
            bshape[r - 1] = 2 * last + 1;
            let bn: usize = bshape.iter().product();
            let mut base = vec![-7.0; bn];
            let bstrides = row_major(&bshape);
            for (lin, &x) in v.iter().enumerate() {
                let mut idx = unravel(lin, shape);
                idx[r - 1] = 2 * idx[r - 1] + 1;
                let off: usize = idx.iter().zip(&bstrides).map(|(i, s)| i * s).sum();
                base[off] = x;
            }
            (base, bshape)
        }
    };
    let b = Tensor::from_slice(&base, &bshape, CPU)
        .unwrap()
        .to_dtype(dt)
        .unwrap();
    let t = match lay {
        Lay::Contig => b,
        Lay::Transposed => b.transpose(-2, -1).unwrap(),
        Lay::Stepped => b.slice(-1, 1, 2 * shape[r - 1] + 1, 2).unwrap(),
    };
    assert_eq!(t.shape(), shape);
    assert_eq!(t.dtype(), dt);
    let strided = match lay {
        Lay::Contig => false,
        Lay::Transposed => shape[r - 1] > 1 && shape[r - 2] > 1,
        Lay::Stepped => shape[r - 1] > 1,
    };
    if strided {
        assert!(
            !t.is_contiguous(),
            "{lay:?} {shape:?} should not be contiguous"
        );
    }
    t
}

/// The logical values of any tensor, as f64.
pub fn read(t: &Tensor) -> Vec<f64> {
    t.to_vec::<f64>().unwrap()
}

/// The broadcast shape of two shapes (panics if they do not broadcast).
pub fn bshape(a: &[usize], b: &[usize]) -> Vec<usize> {
    let r = a.len().max(b.len());
    (0..r)
        .map(|i| {
            let da = if i + a.len() >= r {
                a[i + a.len() - r]
            } else {
                1
            };
            let db = if i + b.len() >= r {
                b[i + b.len() - r]
            } else {
                1
            };
            if da == db || db == 1 {
                da
            } else if da == 1 {
                db
            } else {
                panic!("{a:?} and {b:?} do not broadcast")
            }
        })
        .collect()
}

/// The linear index into a tensor of `in_shape` that broadcasting maps
/// output multi-index `idx` to.
pub fn bindex(idx: &[usize], in_shape: &[usize]) -> usize {
    let lead = idx.len() - in_shape.len();
    let strides = row_major(in_shape);
    in_shape
        .iter()
        .enumerate()
        .map(|(d, &n)| {
            if n == 1 {
                0
            } else {
                idx[lead + d] * strides[d]
            }
        })
        .sum()
}

/// Naive broadcast binary op on logical values.
pub fn ref_binary(
    a: &[f64],
    sa: &[usize],
    b: &[f64],
    sb: &[usize],
    f: impl Fn(f64, f64) -> f64,
) -> (Vec<f64>, Vec<usize>) {
    let s = bshape(sa, sb);
    let n: usize = s.iter().product();
    let v = (0..n)
        .map(|lin| {
            let idx = unravel(lin, &s);
            f(a[bindex(&idx, sa)], b[bindex(&idx, sb)])
        })
        .collect();
    (v, s)
}

/// `true` when `got` equals `want` within `tol * max(1, |want|)` (NaN equals
/// NaN, infinities must match exactly).
pub fn close(got: f64, want: f64, tol: f64) -> bool {
    if want.is_nan() {
        return got.is_nan();
    }
    if want.is_infinite() || got.is_infinite() {
        return got == want;
    }
    (got - want).abs() <= tol * want.abs().max(1.0)
}

/// Asserts elementwise closeness, printing the first mismatches.
#[track_caller]
pub fn assert_close(got: &[f64], want: &[f64], tol: f64, ctx: &str) {
    assert_eq!(got.len(), want.len(), "{ctx}: lengths differ");
    let bad: Vec<String> = got
        .iter()
        .zip(want)
        .enumerate()
        .filter(|(_, (g, w))| !close(**g, **w, tol))
        .take(5)
        .map(|(i, (g, w))| format!("[{i}] got {g}, want {w}"))
        .collect();
    assert!(bad.is_empty(), "{ctx}: {} (tol {tol})", bad.join("; "));
}

/// Asserts exact equality (NaN equals NaN), printing the first mismatches.
#[track_caller]
pub fn assert_exact(got: &[f64], want: &[f64], ctx: &str) {
    assert_close(got, want, 0.0, ctx)
}

/// Relative tolerance of one rounding in `dt` (plus slack for the device's
/// transcendental functions).
pub fn tol(dt: DType) -> f64 {
    match dt {
        DType::F64 => 1e-12,
        DType::F32 => 1e-5,
        DType::F16 => 2e-3,
        DType::BF16 => 1.6e-2,
        _ => 0.0,
    }
}
