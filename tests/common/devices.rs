//! What the CPU-and-CUDA test files (tests/cuda/cuda.rs, tests/cuda/cuda_elementwise.rs,
//! tests/cuda/cuda_ops/) share: `on_both!`, which makes a `cpu::<name>` and a
//! `gpu::<name>` test of each body taking a `Device` (the CUDA one prints a
//! skip line and returns when no GPU is usable), the per-binary `LOCK` every
//! test takes (allocator statistics are global per device), and the test
//! data and reference helpers the bodies use.

use tensorscope::backend::cuda;
use tensorscope::{DType, Device, Tensor};

use super::{assert_close, read};

/// The binary's one lock, alone ([`super::serial`]).
pub fn lock() -> super::Guard {
    super::serial()
}

/// CUDA device 0 when one is usable.
pub fn gpu() -> Option<Device> {
    if cuda::is_available() {
        Some(Device::Cuda(0))
    } else {
        None
    }
}

/// CUDA device 0, or `None` after printing a skip line for `test`.
pub fn cuda_or_skip(test: &str) -> Option<Device> {
    let d = gpu();
    if d.is_none() {
        eprintln!("skipped {test}: no CUDA device");
    }
    d
}

/// `on_both!(a, b)` makes tests `cpu::a`, `gpu::a`, `cpu::b`, `gpu::b`
/// calling the bodies `a(Device)`, `b(Device)` of the invoking module, each
/// under `lock()`; the `gpu` ones skip with a printed line without a GPU.
#[allow(unused_macros)] // test binaries that include tests/common without using it
macro_rules! on_both {
    ($($name:ident),* $(,)?) => {
        mod cpu {
            $(#[test] fn $name() {
                let _g = $crate::common::devices::lock();
                super::$name(tensorscope::Device::Cpu)
            })*
        }
        mod gpu {
            $(#[test] fn $name() {
                let _g = $crate::common::devices::lock();
                match $crate::common::devices::gpu() {
                    Some(d) => super::$name(d),
                    None => eprintln!(
                        "skipped gpu::{}: no CUDA device ({:?})",
                        stringify!($name),
                        tensorscope::backend::cuda::libraries().error
                    ),
                }
            })*
        }
    };
}
#[allow(unused_imports)]
pub(crate) use on_both;

pub use super::tensor;

/// Deterministic test values: multiples of 0.25 in [-4, 4) for floats,
/// integers in a small range for the integer types.
pub fn sample(n: usize, dt: DType, seed: u64) -> Vec<f64> {
    let mut g = tensorscope::Generator::new(seed);
    (0..n)
        .map(|_| {
            let u = g.next_f64();
            match dt {
                DType::U8 => (u * 12.0).floor(),
                DType::Bool => (u < 0.5) as u8 as f64,
                d if d.is_float() => (u * 32.0).floor() / 4.0 - 4.0,
                _ => (u * 13.0).floor() - 6.0,
            }
        })
        .collect()
}

/// `v` as Rust's `as` would convert it to `dt`, through f64 (what every
/// cast in tensorscope does), for values exactly representable in the
/// float types or out of range for the integer ones (which saturate, unlike
/// `super::store`, which wraps).
pub fn cast_ref(v: f64, dt: DType) -> f64 {
    match dt {
        DType::Bool => (v != 0.0) as u8 as f64,
        // PyTorch's casts: truncated into i64, then wrapped to the width.
        DType::U8 => v as i64 as u8 as f64,
        DType::I32 => v as i64 as i32 as f64,
        DType::I64 => v as i64 as f64,
        DType::F32 => v as f32 as f64,
        DType::F16 => tensorscope::f16::from_f64(v).to_f64(),
        DType::BF16 => tensorscope::bf16::from_f64(v).to_f64(),
        DType::F64 => v,
    }
}

/// Wraps an exact integer result to `dt`'s width (integer arithmetic wraps).
pub fn wrap(v: i128, dt: DType) -> f64 {
    match dt {
        DType::U8 => (v as u8) as f64,
        DType::I32 => (v as i32) as f64,
        DType::I64 => (v as i64) as f64,
        _ => v as f64,
    }
}

/// The CPU result of the same computation, when `dev` is not the CPU:
/// CUDA must agree with it as with the naive reference.
pub fn also_cpu(dev: Device, f: impl Fn(Device) -> Tensor, got: &Tensor, tol: f64, what: &str) {
    if dev.is_cuda() {
        let c = f(Device::Cpu);
        assert_eq!(c.dtype(), got.dtype(), "{what}: dtype");
        assert_eq!(c.shape(), got.shape(), "{what}: shape");
        assert_close(&read(got), &read(&c), tol, &format!("{what} (CUDA vs CPU)"));
    }
}

/// The layouts a reduction, softmax or index test runs on, all of shape
/// `[4, 5, 6]` over `v` (120 values, or 24 for "expanded"): contiguous,
/// permuted (transposed), sliced with a step, and expanded (a stride 0).
pub fn layout_456(v: &[f64], dt: DType, dev: Device, which: usize) -> (&'static str, Tensor) {
    layouts_456(v, dt, dev).swap_remove(which)
}

/// All four of `layout_456`'s layouts, named.
pub fn layouts_456(v: &[f64], dt: DType, dev: Device) -> Vec<(&'static str, Tensor)> {
    let base = tensor(&v[..120], &[4, 5, 6], dt, dev);
    let perm = tensor(&v[..120], &[6, 4, 5], dt, dev)
        .permute(&[1, 2, 0])
        .unwrap();
    let wide: Vec<f64> = (0..240).map(|i| v[i % v.len()]).collect();
    let stepped = tensor(&wide, &[4, 10, 6], dt, dev)
        .slice(1, 1, 10, 2)
        .unwrap();
    let expanded = tensor(&v[..24], &[4, 1, 6], dt, dev)
        .expand(&[4, 5, 6])
        .unwrap();
    vec![
        ("contiguous", base),
        ("permuted", perm),
        ("stepped", stepped),
        ("expanded", expanded),
    ]
}
