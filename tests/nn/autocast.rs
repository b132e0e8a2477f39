//! Issue 49 items 1, 2 and 4: autocast regions (thread-local, nestable,
//! panic-safe, `enabled: false`), the per-device op lists, the cast cache
//! measured through the allocator, f32 gradients for f32 leaves through the
//! casts, gradient checkpointing inside a region, and the mixed-dtype norms.

use crate::common::{self, assert_close, read};
use tensorscope::autocast::{
    autocast, autocast_guard, autocast_guard_with, cached_casts, is_autocast_enabled, policies,
    AutocastOptions, CastPolicy,
};
use tensorscope::memory;
use tensorscope::nn::{
    binary_cross_entropy, cross_entropy, scaled_dot_product_attention, BatchNorm2d, GroupNorm,
    LayerNorm, Linear, Module, RMSNorm,
};
use tensorscope::{manual_seed, ConvOptions, DType, Device, DeviceType, Tensor};

/// The region's dtype in these tests: bf16 on the CPU (PyTorch's CPU
/// default), f16 on CUDA (its CUDA default).
fn low(dev: Device) -> DType {
    match dev {
        Device::Cpu => DType::BF16,
        Device::Cuda(_) => DType::F16,
    }
}

/// `m` moved to `dev`.
fn on<M: Module>(mut m: M, dev: Device) -> M {
    m.to_device(dev).unwrap();
    m
}

fn randn(shape: &[usize], dev: Device) -> Tensor {
    Tensor::randn(shape, DType::F32, dev).unwrap()
}

fn regions_nest_and_restore(dev: Device) {
    let dt = dev.device_type();
    let x = randn(&[4, 8], dev);
    assert!(!is_autocast_enabled(dt));
    {
        let _a = autocast_guard(dt, low(dev)).unwrap();
        assert!(is_autocast_enabled(dt));
        assert_eq!(x.matmul(&x.t().unwrap()).unwrap().dtype(), low(dev));
        {
            let off = AutocastOptions {
                enabled: false,
                ..Default::default()
            };
            let _b = autocast_guard_with(dt, off).unwrap();
            assert!(!is_autocast_enabled(dt));
            assert_eq!(x.matmul(&x.t().unwrap()).unwrap().dtype(), DType::F32);
        }
        assert!(
            is_autocast_enabled(dt),
            "the inner region's exit restores the outer"
        );
    }
    assert!(!is_autocast_enabled(dt));
    // A panic inside a region leaves the thread outside it.
    let r = std::panic::catch_unwind(|| {
        let _g = autocast_guard(dt, low(dev)).unwrap();
        panic!("inside a region");
    });
    assert!(r.is_err());
    assert!(!is_autocast_enabled(dt));
    assert_eq!(cached_casts(), 0);
    // Regions are per thread.
    let _g = autocast_guard(dt, low(dev)).unwrap();
    let other = std::thread::spawn(move || is_autocast_enabled(dt))
        .join()
        .unwrap();
    assert!(!other);
}

fn bad_regions_are_errors(dev: Device) {
    let dt = dev.device_type();
    for bad in [DType::F32, DType::F64, DType::I64, DType::Bool] {
        let e = autocast_guard(dt, bad)
            .err()
            .expect("a non-half dtype is refused");
        let m = e.to_string();
        assert!(
            m.contains("autocast") && m.contains(&bad.to_string()),
            "{m}"
        );
        assert!(!is_autocast_enabled(dt), "a refused region is not opened");
    }
    if !tensorscope::backend::cuda::is_available() {
        let e = autocast_guard(DeviceType::Cuda, DType::F16)
            .err()
            .expect("no CUDA device");
        assert!(e.to_string().contains("autocast"), "{e}");
    }
}

fn ops_follow_the_device_lists(dev: Device) {
    manual_seed(3);
    let dt = dev.device_type();
    let lo = low(dev);
    let cpu = dev.is_cpu();
    let x = randn(&[4, 8], dev);
    let w = randn(&[8, 8], dev).requires_grad_(true).unwrap();
    let b = randn(&[8], dev);
    let img = randn(&[1, 2, 5, 5], dev);
    let k = randn(&[3, 2, 3, 3], dev);
    let q = randn(&[1, 2, 4, 8], dev);
    let xl = x.to_dtype(lo).unwrap();
    let targets = Tensor::from_slice(&[1i64, 2, 3, 4], &[4], dev).unwrap();
    let _ac = autocast_guard(dt, lo).unwrap();
    // Lower precision on both devices, with the values of the cast inputs.
    let y = x.matmul(&w).unwrap();
    assert_eq!(y.dtype(), lo);
    let want = autocast_guard_with(
        dt,
        AutocastOptions {
            enabled: false,
            ..Default::default()
        },
    )
    .map(|_off| xl.matmul(&w.to_dtype(lo).unwrap()).unwrap())
    .unwrap();
    assert_eq!(read(&y), read(&want), "matmul runs on the rounded inputs");
    assert_eq!(x.linear(&w, Some(&b)).unwrap().dtype(), lo);
    assert_eq!(x.mm(&w).unwrap().dtype(), lo);
    let c = img.conv2d(&k, None, &ConvOptions::default()).unwrap();
    assert_eq!(c.dtype(), lo);
    assert_eq!(
        scaled_dot_product_attention(&q, &q, &q).unwrap().dtype(),
        lo
    );
    // f32 on both: the losses.
    assert_eq!(cross_entropy(&x, &targets).unwrap().dtype(), DType::F32);
    assert_eq!(cross_entropy(&xl, &targets).unwrap().dtype(), DType::F32);
    // Listed on CUDA only: softmax, exp, sum, layer_norm stay in the
    // input's dtype on the CPU.
    let other = if cpu { lo } else { DType::F32 };
    assert_eq!(xl.softmax(-1).unwrap().dtype(), other);
    assert_eq!(xl.exp().unwrap().dtype(), other);
    assert_eq!(xl.sum_all().unwrap().dtype(), other);
    let ln = on(LayerNorm::new(&[8]).unwrap(), dev);
    assert_eq!(ln.forward(&xl).unwrap().dtype(), other);
    // Not listed anywhere: the input's dtype, and ordinary promotion.
    assert_eq!(xl.relu().unwrap().dtype(), lo);
    assert_eq!(xl.add(&x).unwrap().dtype(), DType::F32);
    assert_eq!(Tensor::cat(&[&x, &xl], 0).unwrap().dtype(), DType::F32);
    // f64 and integer tensors are never cast.
    let xd = x.to_dtype(DType::F64).unwrap();
    assert_eq!(xd.matmul(&xd.t().unwrap()).unwrap().dtype(), DType::F64);
    let xi = Tensor::ones(&[3, 3], DType::I64, dev).unwrap();
    assert_eq!(xi.matmul(&xi).unwrap().dtype(), DType::I64);
    // binary_cross_entropy: f32 on the CPU, refused on CUDA (PyTorch bans it).
    let p = xl.sigmoid().unwrap();
    match binary_cross_entropy(&p, &p) {
        Ok(l) => {
            assert!(cpu);
            assert_eq!(l.dtype(), DType::F32);
        }
        Err(e) => {
            assert!(!cpu);
            assert!(
                e.to_string().contains("binary_cross_entropy_with_logits"),
                "{e}"
            );
        }
    }
}

/// The cast cache, through the allocator: an f32 weight is cast once per
/// region however many ops read it, its copy lives until the region ends,
/// and the bytes are back after.
fn the_cast_cache_lives_for_the_region(dev: Device) {
    manual_seed(4);
    let dt = dev.device_type();
    let lo = low(dev);
    let w = randn(&[256, 256], dev).requires_grad_(true).unwrap();
    let x = randn(&[8, 256], dev);
    let cast_bytes = 256 * 256 * 2;
    let before = memory::memory_allocated(dev);
    {
        let _ac = autocast_guard(dt, lo).unwrap();
        let y1 = x.matmul(&w).unwrap();
        let after1 = memory::memory_allocated(dev);
        assert_eq!(cached_casts(), 1);
        let y2 = x.matmul(&w).unwrap();
        let after2 = memory::memory_allocated(dev);
        assert_eq!(cached_casts(), 1, "the second use hits the cache");
        assert!(after1 - before >= cast_bytes);
        assert_eq!(
            after2 - after1,
            after1 - before - cast_bytes,
            "the second matmul costs the first's bytes less the weight's cast"
        );
        drop((y1, y2));
        assert_eq!(
            memory::memory_allocated(dev),
            before + cast_bytes,
            "inside the region only the cached cast remains"
        );
        // A nested region shares the outer cache.
        let _inner = autocast_guard(dt, lo).unwrap();
        drop(x.matmul(&w).unwrap());
        assert_eq!(cached_casts(), 1);
    }
    assert_eq!(cached_casts(), 0);
    assert_eq!(
        memory::memory_allocated(dev),
        before,
        "the region's exit frees the cache"
    );
    // Without the cache, the cast is made per op and freed with it.
    let off = AutocastOptions {
        dtype: Some(lo),
        cache_enabled: false,
        ..Default::default()
    };
    let _ac = autocast_guard_with(dt, off).unwrap();
    drop(x.matmul(&w).unwrap());
    assert_eq!(cached_casts(), 0);
    assert_eq!(memory::memory_allocated(dev), before);
}

/// Backward through the casts: f32 leaves get f32 gradients, close to the
/// f32 run's.
fn f32_leaves_get_f32_gradients(dev: Device) {
    manual_seed(5);
    let dt = dev.device_type();
    let fc = Linear::with_options(16, 4, true, DType::F32, dev).unwrap();
    let x = randn(&[32, 16], dev);
    let t = Tensor::from_vec((0..32).map(|i| i % 4).collect::<Vec<i64>>(), &[32], dev).unwrap();
    cross_entropy(&fc.forward(&x).unwrap(), &t)
        .unwrap()
        .backward()
        .unwrap();
    let (gw, gb) = (
        read(&fc.weight.grad().unwrap()),
        read(&fc.bias.as_ref().unwrap().grad().unwrap()),
    );
    fc.zero_grad();
    let loss = autocast(dt, low(dev), || cross_entropy(&fc.forward(&x)?, &t)).unwrap();
    assert_eq!(loss.dtype(), DType::F32);
    loss.backward().unwrap();
    let w = fc.weight.grad().unwrap();
    assert_eq!(w.dtype(), DType::F32);
    assert_close(&read(&w), &gw, 2e-2, "weight gradient under autocast");
    let b = fc.bias.as_ref().unwrap().grad().unwrap();
    assert_eq!(b.dtype(), DType::F32);
    assert_close(&read(&b), &gb, 2e-2, "bias gradient under autocast");
}

/// A checkpointed segment is recomputed in the region of its forward, so
/// its gradients equal those of the same region without checkpointing.
fn checkpoint_recomputes_inside_the_region(dev: Device) {
    manual_seed(6);
    let dt = dev.device_type();
    let w = randn(&[8, 8], dev).requires_grad_(true).unwrap();
    let x = randn(&[4, 8], dev);
    let plain = autocast(dt, low(dev), || x.matmul(&w)?.tanh()).unwrap();
    plain
        .to_dtype(DType::F32)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    let want = read(&w.grad().unwrap());
    w.zero_grad();
    let w2 = w.alias();
    let y = autocast(dt, low(dev), || {
        tensorscope::autograd::checkpoint(move |xs: &[Tensor]| xs[0].matmul(&w2)?.tanh(), &[&x])
    })
    .unwrap();
    assert_eq!(y.dtype(), low(dev));
    y.to_dtype(DType::F32)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(read(&w.grad().unwrap()), want);
}

/// An f16/bf16 input to a norm with f32 parameters (a model kept in f32
/// under a CPU region, or `to_dtype` keeping norms in f32): the result has
/// the input's dtype, as PyTorch's mixed kernels; the parameters get f32
/// gradients; BatchNorm's running statistics stay f32.
fn mixed_dtype_norms(dev: Device) {
    manual_seed(7);
    let lo = low(dev);
    let x = randn(&[4, 6, 3, 3], dev);
    let xl = x.to_dtype(lo).unwrap();
    let x32 = xl.to_dtype(DType::F32).unwrap();
    let tol = if lo == DType::BF16 { 3e-2 } else { 4e-3 };
    let rows = xl.reshape(&[4, 54]).unwrap();
    let ln = on(LayerNorm::new(&[54]).unwrap(), dev);
    let y = ln.forward(&rows).unwrap();
    assert_eq!(y.dtype(), lo);
    let want = read(&ln.forward(&x32.reshape(&[4, 54]).unwrap()).unwrap());
    assert_close(&read(&y), &want, tol, "LayerNorm, mixed");
    y.to_dtype(DType::F32)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(ln.weight.grad().unwrap().dtype(), DType::F32);
    let rms = on(RMSNorm::new(&[54]).unwrap(), dev);
    assert_eq!(rms.forward(&rows).unwrap().dtype(), lo);
    let gn = on(GroupNorm::new(2, 6).unwrap(), dev);
    let y = gn.forward(&xl).unwrap();
    assert_eq!(y.dtype(), lo);
    assert_close(
        &read(&y),
        &read(&gn.forward(&x32).unwrap()),
        tol,
        "GroupNorm, mixed",
    );
    let bn = on(BatchNorm2d::new(6).unwrap(), dev);
    let y = bn.forward(&xl).unwrap();
    assert_eq!(y.dtype(), lo);
    let rm = bn
        .named_buffers()
        .into_iter()
        .find(|(n, _)| n == "running_mean")
        .unwrap()
        .1;
    assert_eq!(rm.dtype(), DType::F32);
    assert!(
        read(rm).iter().any(|&v| v != 0.0),
        "the running mean was updated"
    );
    let bn32 = on(BatchNorm2d::new(6).unwrap(), dev);
    assert_close(
        &read(&y),
        &read(&bn32.forward(&x32).unwrap()),
        tol,
        "BatchNorm2d, mixed",
    );
}

common::on_devices!(
    regions_nest_and_restore,
    bad_regions_are_errors,
    ops_follow_the_device_lists,
    the_cast_cache_lives_for_the_region,
    f32_leaves_get_f32_gradients,
    checkpoint_recomputes_inside_the_region,
    mixed_dtype_norms,
);

/// The GUIDE's table in "Lower precision" is the code's: one row per op,
/// `| op | CPU | CUDA |`.
#[test]
fn the_guide_table_is_the_policy_table() {
    let _shared = crate::common::shared();
    let guide = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/GUIDE.md")).unwrap();
    let start = guide
        .find("<!-- autocast table -->")
        .expect("the GUIDE marks its autocast table");
    let end = guide[start..].find("<!-- end autocast table -->").unwrap() + start;
    let name = |p: Option<CastPolicy>| match p {
        None => "-",
        Some(CastPolicy::LowerPrecision) => "lower",
        Some(CastPolicy::Fp32) => "f32",
        Some(CastPolicy::Promote) => "promote",
        Some(CastPolicy::Refused) => "refused",
    };
    let rows: Vec<String> = guide[start..end]
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            l.split('|')
                .map(|c| c.trim().trim_matches('`'))
                .collect::<Vec<_>>()[1..4]
                .join(" ")
        })
        .collect();
    let want: Vec<String> = policies()
        .iter()
        .map(|p| format!("{} {} {}", p.op, name(p.cpu), name(p.cuda)))
        .collect();
    assert_eq!(rows, want);
}
