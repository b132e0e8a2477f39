//! The CPU caching allocator and its statistics: reuse, no system allocation
//! after warm-up, exact byte counts, peaks, the limit and out-of-memory
//! recovery, empty_cache and the summary table.
//!
//! The statistics are global to the process, so every test here holds `LOCK`
//! (the tests of one binary run on parallel threads).

use tensorscope::memory::{self, round_size, MemoryLimit, MIN_BLOCK};
use tensorscope::{DType, Device, Error, Tensor};

const CPU: Device = Device::Cpu;
const MIB: usize = 1 << 20;

fn lock() -> crate::common::Guard {
    crate::common::serial()
}

/// Puts the limit back to Unlimited when dropped, even if the test fails.
fn reset_limit_on_exit() -> impl Drop {
    scopeguard::guard((), |_| {
        memory::set_memory_limit(CPU, MemoryLimit::Unlimited).unwrap();
    })
}

fn u8s(n: usize) -> Tensor {
    Tensor::empty(&[n], DType::U8, CPU).unwrap()
}

#[test]
fn freed_blocks_are_cached_and_reused() {
    let _g = lock();
    for bytes in [4000usize, 100_000, 3 * MIB, 16 * MIB] {
        let a = u8s(bytes);
        let p = a.data_ptr();
        drop(a);
        let b = u8s(bytes);
        assert_eq!(
            b.data_ptr(),
            p,
            "{bytes} B: the cached block is handed out again"
        );
        drop(b);
        // A request that rounds to the same size gets the same block too.
        let c = u8s(bytes - 100);
        assert_eq!(c.data_ptr(), p, "{bytes} B - 100");
    }
    // ... and through ops: a result freed each iteration lands in the same place.
    let x = Tensor::ones(&[256], DType::F32, CPU).unwrap();
    let p = x.add(&x).unwrap().data_ptr();
    for _ in 0..10 {
        assert_eq!(x.add(&x).unwrap().data_ptr(), p);
    }
}

#[test]
fn no_system_allocation_after_warm_up() {
    let _g = lock();
    // small pool, large pool (split 20 MiB segment), and a dedicated large segment
    for n in [1000usize, 200_000, 2 * MIB + 1, 12 * MIB] {
        let warm = u8s(n);
        drop(warm);
        let before = memory::memory_stats(CPU).num_sys_alloc;
        for _ in 0..1000 {
            let t = u8s(n);
            assert_eq!(t.numel(), n);
        }
        assert_eq!(
            memory::memory_stats(CPU).num_sys_alloc,
            before,
            "{n} B: a make/drop loop must be served from the cache"
        );
    }
    // A loop of ops: inputs, a temporary and the result, all cached.
    let a = Tensor::ones(&[64, 1024], DType::F32, CPU).unwrap();
    let b = Tensor::full(&[1024], 2.0, DType::F32, CPU).unwrap();
    let body = || {
        let c = a.add(&b).unwrap().mul(&a).unwrap();
        let d = c.t().unwrap().contiguous().unwrap();
        assert_eq!(d.shape(), &[1024, 64]);
    };
    body(); // warm-up
    let before = memory::memory_stats(CPU).num_sys_alloc;
    for _ in 0..1000 {
        body();
    }
    assert_eq!(memory::memory_stats(CPU).num_sys_alloc, before);
}

#[test]
fn allocated_is_exactly_the_rounded_sizes_of_live_storages() {
    let _g = lock();
    let s0 = memory::memory_stats(CPU);
    let specs: [(&[usize], DType); 7] = [
        (&[1], DType::F32),             // 4 B -> 512
        (&[1000], DType::F32),          // 4000 -> 4096
        (&[129], DType::F64),           // 1032 -> 1536
        (&[0], DType::F32),             // empty: no block at all
        (&[300_000], DType::F32),       // 1_200_000 -> 1_200_128 (large pool)
        (&[3, 5, 7], DType::BF16),      // 210 -> 512
        (&[512 * 1024 + 1], DType::U8), // just over 512 KiB: small pool
    ];
    let mut live = Vec::new();
    let (mut want, mut want_small, mut want_large, mut want_req, mut blocks) = (0, 0, 0, 0, 0);
    for (shape, dt) in specs {
        let t = Tensor::zeros(shape, dt, CPU).unwrap();
        let bytes = t.nbytes();
        assert_eq!(t.storage_nbytes(), bytes);
        if bytes > 0 {
            let r = round_size(bytes);
            assert_eq!(r % MIN_BLOCK, 0);
            assert!(r >= bytes && r < bytes + MIN_BLOCK);
            want += r;
            want_req += bytes;
            blocks += 1;
            if r <= memory::SMALL_SIZE {
                want_small += r;
            } else {
                want_large += r;
            }
        }
        live.push(t);
        // Views and aliases add nothing.
        live.push(live.last().unwrap().alias());
    }
    let s = memory::memory_stats(CPU);
    let d = |a: i64, b: i64| (a - b) as usize;
    assert_eq!(
        want,
        512 + 4096 + 1536 + 1_200_128 + 512 + (512 * 1024 + 512)
    );
    assert_eq!(
        memory::memory_allocated(CPU) - s0.allocated_bytes.all.current as usize,
        want
    );
    assert_eq!(
        d(
            s.allocated_bytes.small.current,
            s0.allocated_bytes.small.current
        ),
        want_small
    );
    assert_eq!(
        d(
            s.allocated_bytes.large.current,
            s0.allocated_bytes.large.current
        ),
        want_large
    );
    assert_eq!(
        d(
            s.requested_bytes.all.current,
            s0.requested_bytes.all.current
        ),
        want_req
    );
    assert_eq!(
        d(s.allocation.all.current, s0.allocation.all.current),
        blocks
    );
    assert_eq!(
        d(s.active_bytes.all.current, s0.active_bytes.all.current),
        want
    );
    assert!(memory::memory_reserved(CPU) >= memory::memory_allocated(CPU));
    drop(live);
    let s = memory::memory_stats(CPU);
    assert_eq!(
        s.allocated_bytes.all.current, s0.allocated_bytes.all.current,
        "back to the exact baseline"
    );
    assert_eq!(
        s.allocated_bytes.small.current,
        s0.allocated_bytes.small.current
    );
    assert_eq!(
        s.allocated_bytes.large.current,
        s0.allocated_bytes.large.current
    );
    assert_eq!(s.allocation.all.current, s0.allocation.all.current);
    assert_eq!(
        s.requested_bytes.all.current,
        s0.requested_bytes.all.current
    );
    assert_eq!(s.active_bytes.all.current, s0.active_bytes.all.current);
    assert_eq!(
        s.allocated_bytes.all.allocated - s0.allocated_bytes.all.allocated,
        want as u64,
        "running total of allocations"
    );
    assert_eq!(
        s.allocated_bytes.all.freed - s0.allocated_bytes.all.freed,
        want as u64
    );
}

#[test]
fn when_every_tensor_is_dropped_allocated_is_zero() {
    let _g = lock();
    {
        let a = Tensor::randn(&[100, 100], DType::F32, CPU).unwrap();
        let b = a.t().unwrap().contiguous().unwrap();
        let c = a
            .mul(&b)
            .unwrap()
            .sigmoid()
            .unwrap()
            .add_scalar(1.0)
            .unwrap();
        assert!(memory::memory_allocated(CPU) >= 3 * 40_000);
        drop(c);
    }
    assert_eq!(memory::memory_allocated(CPU), 0, "no tensor is live");
    let s = memory::memory_stats(CPU);
    assert_eq!(s.allocation.all.current, 0);
    assert_eq!(s.requested_bytes.all.current, 0);
}

#[test]
fn peak_and_reset_peak_memory_stats() {
    let _g = lock();
    memory::reset_peak_memory_stats(CPU);
    let base = memory::memory_allocated(CPU);
    assert_eq!(
        memory::max_memory_allocated(CPU),
        base,
        "reset: peak == current"
    );
    assert_eq!(
        memory::max_memory_reserved(CPU),
        memory::memory_reserved(CPU)
    );
    let a = u8s(3 * MIB);
    let b = u8s(5 * MIB);
    drop(a);
    let c = u8s(MIB);
    let want_peak = base + 8 * MIB;
    assert_eq!(memory::max_memory_allocated(CPU), want_peak);
    assert_eq!(memory::memory_allocated(CPU), base + 6 * MIB);
    drop(b);
    drop(c);
    assert_eq!(memory::memory_allocated(CPU), base);
    assert_eq!(
        memory::max_memory_allocated(CPU),
        want_peak,
        "the peak stays"
    );
    let s = memory::memory_stats(CPU);
    assert_eq!(s.allocated_bytes.all.peak as usize, want_peak);
    assert!(s.allocation.all.peak >= 2);
    assert!(memory::max_memory_reserved(CPU) >= want_peak);
    memory::reset_peak_memory_stats(CPU);
    assert_eq!(memory::max_memory_allocated(CPU), base);
    let s = memory::memory_stats(CPU);
    assert_eq!(s.allocation.all.peak, s.allocation.all.current);
    // accumulated totals reset separately
    memory::reset_accumulated_memory_stats(CPU);
    let s = memory::memory_stats(CPU);
    assert_eq!(s.allocated_bytes.all.allocated, 0);
    assert_eq!(
        (s.num_sys_alloc, s.num_ooms, s.num_alloc_retries),
        (0, 0, 0)
    );
    assert_eq!(
        s.allocated_bytes.all.current as usize, base,
        "current values are kept"
    );
}

#[test]
fn reserved_counts_cached_segments_allocated_only_live_blocks() {
    let _g = lock();
    memory::empty_cache(CPU);
    let (a0, r0) = (memory::memory_allocated(CPU), memory::memory_reserved(CPU));
    assert_eq!((a0, r0), (0, 0), "nothing live, nothing cached");
    let t = u8s(1000); // small pool: a 2 MiB segment
    assert_eq!(memory::memory_allocated(CPU), a0 + 1024);
    assert_eq!(memory::memory_reserved(CPU), r0 + 2 * MIB);
    let l = u8s(3 * MIB); // large pool: a 20 MiB segment
    assert_eq!(memory::memory_reserved(CPU), r0 + 2 * MIB + 20 * MIB);
    drop(t);
    drop(l);
    assert_eq!(memory::memory_allocated(CPU), a0);
    assert_eq!(
        memory::memory_reserved(CPU),
        r0 + 22 * MIB,
        "freed blocks stay cached"
    );
    memory::empty_cache(CPU);
    assert_eq!(memory::memory_reserved(CPU), r0);
}

#[test]
fn empty_cache_leaves_only_segments_with_live_blocks() {
    let _g = lock();
    assert_eq!(
        memory::memory_allocated(CPU),
        0,
        "nothing is live between tests"
    );
    let garbage: Vec<Tensor> = (0..8).map(|i| u8s((i + 1) * 700_000)).collect();
    drop(garbage);
    assert!(memory::memory_reserved(CPU) > 0);
    memory::empty_cache(CPU);
    assert_eq!(
        memory::memory_reserved(CPU),
        0,
        "nothing live: nothing reserved"
    );
    let s = memory::memory_stats(CPU);
    assert_eq!(s.segment.all.current, 0);
    // With live blocks: their segments stay, nothing else.
    let small = u8s(10_000); // 2 MiB segment
    let big = u8s(12 * MIB); // its own 12 MiB segment
    let spare = u8s(30 * MIB);
    drop(spare);
    assert_eq!(memory::memory_reserved(CPU), 2 * MIB + 12 * MIB + 30 * MIB);
    let frees = memory::memory_stats(CPU).num_sys_free;
    memory::empty_cache(CPU);
    assert_eq!(memory::memory_reserved(CPU), 2 * MIB + 12 * MIB);
    assert_eq!(memory::memory_stats(CPU).num_sys_free, frees + 1);
    assert_eq!(memory::memory_allocated(CPU), round_size(10_000) + 12 * MIB);
    drop((small, big));
    memory::empty_cache(CPU);
    assert_eq!(memory::memory_reserved(CPU), 0);
}

#[test]
fn set_memory_limit_in_bytes_and_as_a_fraction() {
    let _g = lock();
    let _reset = reset_limit_on_exit();
    memory::set_memory_limit(CPU, MemoryLimit::Bytes(100 * MIB)).unwrap();
    assert_eq!(memory::memory_stats(CPU).limit, Some(100 * MIB));
    let total = std::fs::read_to_string("/proc/meminfo")
        .unwrap()
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<usize>().ok())
        .unwrap()
        * 1024;
    memory::set_memory_limit(CPU, MemoryLimit::Fraction(0.5)).unwrap();
    let lim = memory::memory_stats(CPU).limit.unwrap();
    assert!(lim.abs_diff(total / 2) <= 2, "{lim} vs half of {total}");
    memory::set_per_process_memory_fraction(CPU, 0.25).unwrap();
    assert!(memory::memory_stats(CPU).limit.unwrap().abs_diff(total / 4) <= 2);
    for bad in [0.0, -0.5, 1.5, f64::NAN] {
        let e = memory::set_memory_limit(CPU, MemoryLimit::Fraction(bad)).unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidArgument {
                    op: "set_memory_limit",
                    ..
                }
            ),
            "{e}"
        );
    }
    // a lower limit releases cached memory above it at once
    memory::set_memory_limit(CPU, MemoryLimit::Unlimited).unwrap();
    drop(u8s(30 * MIB));
    assert!(memory::memory_reserved(CPU) >= 30 * MIB);
    memory::set_memory_limit(CPU, MemoryLimit::Bytes(8 * MIB)).unwrap();
    assert!(
        memory::memory_reserved(CPU) <= memory::memory_allocated(CPU).div_ceil(2 * MIB) * 2 * MIB
    );
    memory::set_memory_limit(CPU, MemoryLimit::Unlimited).unwrap();
    assert_eq!(memory::memory_stats(CPU).limit, None);
    // a device this machine lacks (cuda:0 without a GPU): its own error
    let absent = Device::Cuda(tensorscope::backend::cuda::device_count());
    let e = memory::set_memory_limit(absent, MemoryLimit::Bytes(1)).unwrap_err();
    assert!(matches!(e, Error::DeviceUnavailable { .. }), "{e}");
}

#[test]
fn out_of_memory_past_the_limit_then_recovery() {
    let _g = lock();
    let _reset = reset_limit_on_exit();
    memory::empty_cache(CPU);
    let live = u8s(4 * MIB); // a 20 MiB large segment
    drop(u8s(1000)); // a cached 2 MiB small segment the retry can release
    let s0 = memory::memory_stats(CPU);
    memory::set_memory_limit(CPU, MemoryLimit::Bytes(64 * MIB)).unwrap();
    let e = Tensor::zeros(&[100 * MIB], DType::U8, CPU).unwrap_err();
    let Error::OutOfMemory {
        device,
        requested,
        allocated,
        reserved,
        limit,
        ..
    } = e.clone()
    else {
        panic!("expected OutOfMemory, got {e}");
    };
    assert_eq!(device, CPU);
    assert_eq!(requested, 100 * MIB);
    assert_eq!(allocated, s0.allocated_bytes.all.current as usize);
    assert!(allocated >= 4 * MIB);
    assert_eq!(limit, Some(64 * MIB));
    assert_eq!(s0.reserved_bytes.all.current as usize, 22 * MIB);
    assert_eq!(
        reserved,
        20 * MIB,
        "the retry released the cached small segment"
    );
    let msg = e.to_string();
    for part in [
        "out of memory",
        "100.00 MiB",
        "104857600 bytes",
        "allocated",
        "reserved",
        "64.00 MiB allowed",
        "cpu",
    ] {
        assert!(msg.contains(part), "{part:?} missing from {msg:?}");
    }
    let s = memory::memory_stats(CPU);
    assert_eq!(s.num_ooms, s0.num_ooms + 1);
    assert_eq!(s.num_alloc_retries, s0.num_alloc_retries + 1);
    // The process keeps working: smaller allocations succeed under the same limit.
    let ok = Tensor::ones(&[MIB], DType::F32, CPU).unwrap();
    assert_eq!(ok.to_vec::<f32>().unwrap()[MIB - 1], 1.0);
    assert_eq!(live.numel(), 4 * MIB);
    drop(ok);
    // Several failures in a row, then a success: still consistent.
    for _ in 0..3 {
        assert!(matches!(u8s_try(70 * MIB), Err(Error::OutOfMemory { .. })));
    }
    assert_eq!(memory::memory_stats(CPU).num_ooms, s0.num_ooms + 4);
    drop(live);
    memory::set_memory_limit(CPU, MemoryLimit::Unlimited).unwrap();
    let big = u8s(100 * MIB);
    assert_eq!(big.numel(), 100 * MIB);
}

fn u8s_try(n: usize) -> tensorscope::Result<Tensor> {
    Tensor::empty(&[n], DType::U8, CPU)
}

#[test]
fn out_of_memory_from_the_system_names_the_device_memory() {
    let _g = lock();
    let s0 = memory::memory_stats(CPU);
    // 2^60 bytes: no system can map it.
    let e = u8s_try(1 << 60).unwrap_err();
    assert!(
        matches!(e, Error::OutOfMemory { requested, limit: None, .. } if requested == 1 << 60),
        "{e}"
    );
    let msg = e.to_string();
    assert!(msg.contains("total") && msg.contains("free"), "{msg}");
    // Past isize::MAX: refused up front as a shape no tensor can have.
    let e = u8s_try(usize::MAX - 10).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { .. }) && e.to_string().contains("too large"),
        "{e}"
    );
    let s = memory::memory_stats(CPU);
    // Only the 2^60 request reached the allocator (the other is a shape error).
    assert_eq!(s.num_ooms, s0.num_ooms + 1);
    assert_eq!(
        s.allocated_bytes.all.current,
        s0.allocated_bytes.all.current
    );
    // and the allocator still works
    assert_eq!(u8s(1000).numel(), 1000);
}

#[test]
fn memory_summary_has_the_rows_and_aligned_borders() {
    let _g = lock();
    let _reset = reset_limit_on_exit();
    let t = u8s(3000);
    memory::set_memory_limit(CPU, MemoryLimit::Bytes(3 << 30)).unwrap();
    let s = memory::memory_summary(CPU);
    for row in [
        "memory summary, device cpu",
        "OOMs:",
        "retries:",
        "system allocs:",
        "limit: 3.00 GiB",
        "Metric",
        "Cur Usage",
        "Peak Usage",
        "Tot Alloc",
        "Tot Freed",
        "Allocated memory",
        "Active memory",
        "Requested memory",
        "Reserved memory",
        "Non-releasable memory",
        "Allocations",
        "Active allocs",
        "Reserved segments",
        "Non-releasable allocs",
        "from large pool",
        "from small pool",
    ] {
        assert!(s.contains(row), "{row:?} missing from\n{s}");
    }
    let widths: Vec<usize> = s.lines().map(|l| l.chars().count()).collect();
    assert!(widths.len() > 30);
    assert!(
        widths.iter().all(|&w| w == widths[0]),
        "every line must have the same width: {widths:?}\n{s}"
    );
    for l in s.lines() {
        assert!(l.starts_with('|') && l.ends_with('|'), "{l:?}");
    }
    assert!(s.lines().next().unwrap().contains("===="));
    assert!(s.lines().last().unwrap().contains("===="));
    // The table shows the live numbers: the "Allocated memory" row's current
    // value is memory_allocated, formatted.
    let row = s.lines().find(|l| l.contains("Allocated memory")).unwrap();
    let cur = row.split('|').nth(2).unwrap().trim();
    assert_eq!(cur, memory::fmt_bytes(memory::memory_allocated(CPU)));
    drop(t);
    // Huge values widen the box but keep it aligned.
    memory::set_memory_limit(CPU, MemoryLimit::Bytes(usize::MAX / 2)).unwrap();
    let s = memory::memory_summary(CPU);
    let widths: Vec<usize> = s.lines().map(|l| l.chars().count()).collect();
    assert!(widths.iter().all(|&w| w == widths[0]), "{s}");
}

/// The fused CPU backward of a transcendental activation allocates exactly
/// one buffer, the input's gradient: no temporaries (the composite formula
/// of gelu' built seven).
#[test]
fn fused_activation_backward_allocates_only_the_gradient() {
    let _g = lock();
    let n = 1 << 16;
    let bytes = (n * 4) as i64;
    for op in [
        "gelu",
        "gelu_tanh",
        "silu",
        "softplus",
        "tanh",
        "sigmoid",
        "erf",
    ] {
        let x = Tensor::randn(&[n], DType::F32, CPU)
            .unwrap()
            .requires_grad_(true)
            .unwrap();
        let y = match op {
            "gelu" => x.gelu(),
            "gelu_tanh" => x.gelu_tanh(),
            "silu" => x.silu(),
            "softplus" => x.softplus(),
            "tanh" => x.tanh(),
            "sigmoid" => x.sigmoid(),
            _ => x.erf(),
        }
        .unwrap();
        let g = Tensor::ones(&[n], DType::F32, CPU).unwrap();
        let s0 = memory::memory_stats(CPU);
        memory::reset_peak_memory_stats(CPU);
        y.backward_with(&g, false).unwrap();
        let s = memory::memory_stats(CPU);
        assert_eq!(
            s.allocation.all.allocated - s0.allocation.all.allocated,
            1,
            "{op}: allocations in backward"
        );
        assert_eq!(
            s.allocated_bytes.all.peak - s0.allocated_bytes.all.current,
            bytes,
            "{op}: peak above the start"
        );
        assert_eq!(x.grad().unwrap().shape(), &[n]);
    }
}
