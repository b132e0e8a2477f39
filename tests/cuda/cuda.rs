//! The same test bodies on the CPU and on CUDA device 0: creation, copies
//! and casts across devices, allocator statistics and random fills; then
//! the CUDA-only tests (streams, events, record_stream, pinned staging,
//! device information) and one that runs everywhere to check that a
//! missing GPU is an error, not a panic.
//!
//! The op families run on both devices in tests/cuda/cuda_elementwise.rs and
//! tests/cuda/cuda_ops/. `on_both!` and the shared helpers are in
//! tests/common/devices.rs: each body takes a `Device` and checks results
//! against naive f64 references (and, on CUDA, against the CPU). Allocator
//! statistics are global per device, so every test here takes `lock()`.
#![cfg(feature = "cuda")]

use crate::common;

use common::devices::{cast_ref, cuda_or_skip, lock, on_both, tensor};
use common::{read, ALL, FLOATS};
use tensorscope::backend::cuda;
use tensorscope::{memory, DType, Device, Error, Tensor};

on_both!(
    creation,
    copy_and_cast_round_trips,
    allocator_statistics_are_exact,
    random_fills,
    copy_non_blocking_writes_into_a_buffer_allocated_once,
    reading_a_contiguous_tensor_back_allocates_nothing_on_its_device,
);

// ------------------------------------------------------------- bodies ---

fn creation(dev: Device) {
    let z = Tensor::zeros(&[3, 4], DType::F32, dev).unwrap();
    assert_eq!(
        (z.shape(), z.dtype(), z.device()),
        (&[3usize, 4][..], DType::F32, dev)
    );
    assert_eq!(read(&z), vec![0.0; 12]);
    for dt in ALL {
        let f = Tensor::full(&[2, 5], 3.0, dt, dev).unwrap();
        assert_eq!(read(&f), vec![cast_ref(3.0, dt); 10], "full {dt}");
        let o = Tensor::ones(&[7], dt, dev).unwrap();
        assert_eq!(read(&o), vec![1.0; 7], "ones {dt}");
    }
    // A value whose bytes differ (not a memset pattern) in every width.
    let f = Tensor::full(&[1000], -1.5, DType::F32, dev).unwrap();
    assert!(read(&f).iter().all(|&x| x == -1.5));
    let a = Tensor::arange(0.0, 10.0, 1.5, DType::F32, dev).unwrap();
    assert_eq!(read(&a), vec![0.0, 1.5, 3.0, 4.5, 6.0, 7.5, 9.0]);
    let e = Tensor::eye(3, 4, DType::I32, dev).unwrap();
    let want: Vec<f64> = (0..12).map(|i| ((i / 4) == (i % 4)) as u8 as f64).collect();
    assert_eq!(read(&e), want, "eye fills a strided diagonal view");
    let l = Tensor::linspace(-1.0, 1.0, 5, DType::F64, dev).unwrap();
    assert_eq!(read(&l), vec![-1.0, -0.5, 0.0, 0.5, 1.0]);
    let s = Tensor::scalar(2.5f32, dev).unwrap();
    assert_eq!((s.rank(), s.item::<f64>().unwrap()), (0, 2.5));
    let empty = Tensor::zeros(&[0, 3], DType::F32, dev).unwrap();
    assert_eq!(read(&empty), Vec::<f64>::new());
    // A seed gives the same values on one device every time (random_fills
    // covers the rest).
    tensorscope::manual_seed(11);
    let r = Tensor::rand(&[64], DType::F32, dev).unwrap();
    tensorscope::manual_seed(11);
    let r2 = Tensor::rand(&[64], DType::F32, dev).unwrap();
    assert_eq!(read(&r), read(&r2));
    assert!(read(&r).iter().all(|&x| (0.0..1.0).contains(&x)));
}

fn copy_and_cast_round_trips(dev: Device) {
    // Values exact in every float type, some out of range for u8 / i32.
    let v: Vec<f64> = vec![
        0.0, 1.0, -1.0, 2.5, -3.75, 255.0, 256.0, -129.0, 1e6, 0.125, 7.0, -0.5,
    ];
    for s in ALL {
        let x = tensor(&v, &[3, 4], s, dev);
        let xv = read(&x);
        for d in ALL {
            let y = x.to_dtype(d).unwrap();
            assert_eq!(y.dtype(), d);
            let want: Vec<f64> = xv.iter().map(|&e| cast_ref(e, d)).collect();
            assert_eq!(read(&y), want, "cast {s} -> {d}");
            // Strided sources: transposed, sliced with a step, expanded.
            let t = x.t().unwrap().to_dtype(d).unwrap();
            let want_t: Vec<f64> = (0..12)
                .map(|i| cast_ref(xv[(i % 3) * 4 + i / 3], d))
                .collect();
            assert_eq!(read(&t), want_t, "cast {s} -> {d}, transposed");
            let st = x.slice(1, 0, 4, 3).unwrap().to_dtype(d).unwrap();
            let want_s: Vec<f64> = [0, 3, 4, 7, 8, 11]
                .iter()
                .map(|&i| cast_ref(xv[i], d))
                .collect();
            assert_eq!(read(&st), want_s, "cast {s} -> {d}, stepped slice");
        }
        let ex = x
            .slice(0, 1, 2, 1)
            .unwrap()
            .expand(&[3, 4])
            .unwrap()
            .contiguous()
            .unwrap();
        let want_e: Vec<f64> = (0..12).map(|i| xv[4 + i % 4]).collect();
        assert_eq!(read(&ex), want_e, "expand {s}");
        // Host <-> device round trips of non-contiguous tensors, both ways.
        let back = x.t().unwrap().to_device(Device::Cpu).unwrap();
        assert_eq!(back.shape(), &[4, 3]);
        assert_eq!(
            read(&back),
            (0..12).map(|i| xv[(i % 3) * 4 + i / 3]).collect::<Vec<_>>()
        );
        let there = back.t().unwrap().to_device(dev).unwrap();
        assert_eq!(read(&there), xv, "round trip {s}");
    }
    // copy_ with a cast and a broadcast into a strided destination.
    let dst = Tensor::zeros(&[4, 6], DType::F64, dev).unwrap();
    let src = tensor(&[1.0, 2.0, 3.0], &[3], DType::I32, dev);
    {
        let mut view = dst.slice(1, 0, 6, 2).unwrap(); // [4, 3], stride 2
        view.copy_(&src).unwrap();
    }
    let want: Vec<f64> = (0..24)
        .map(|i| {
            if i % 2 == 0 {
                (i % 6 / 2 + 1) as f64
            } else {
                0.0
            }
        })
        .collect();
    assert_eq!(read(&dst), want, "copy_ into a stepped view");
    // copy_ across devices, from the CPU.
    let host = tensor(&[5.0, 6.0], &[2], DType::F32, Device::Cpu);
    dst.select(0, 3)
        .unwrap()
        .slice(0, 4, 6, 1)
        .unwrap()
        .copy_(&host)
        .unwrap();
    assert_eq!(read(&dst)[22..], [5.0, 6.0]);
    let big: Vec<f64> = (0..3_000_000).map(|i| (i % 1000) as f64).collect();
    let b = tensor(&big, &[1000, 3000], DType::F32, dev);
    let bt = b.t().unwrap().contiguous().unwrap().t().unwrap(); // same values, column-major
    assert_eq!(read(&bt), big, "a 12 MB strided round trip");
}

/// The naive f64 value of a unary op (with the CPU's conventions).
fn allocator_statistics_are_exact(dev: Device) {
    // Settle anything cached by earlier tests, then measure deltas.
    memory::empty_cache(dev);
    let base = memory::memory_allocated(dev);
    let base_stats = memory::memory_stats(dev);
    let a = Tensor::zeros(&[1000], DType::F32, dev).unwrap(); // 4000 B -> 4096
    let b = Tensor::zeros(&[3], DType::U8, dev).unwrap(); // 3 B -> 512
    assert_eq!(memory::memory_allocated(dev), base + 4096 + 512);
    let s = memory::memory_stats(dev);
    assert_eq!(
        s.allocation.all.current,
        base_stats.allocation.all.current + 2
    );
    assert_eq!(
        s.requested_bytes.all.current,
        base_stats.requested_bytes.all.current + 4003
    );
    assert!(memory::memory_reserved(dev) >= memory::memory_allocated(dev));
    // A view allocates nothing; a copy allocates its rounded size.
    let v = a.view(&[10, 100]).unwrap().t().unwrap();
    assert_eq!(memory::memory_allocated(dev), base + 4608);
    let c = v.contiguous().unwrap();
    assert_eq!(memory::memory_allocated(dev), base + 4608 + 4096);
    drop((v, c));
    // Large pool: 3 MiB + 1 byte rounds to 3 MiB + 512 in a 20 MiB segment.
    let big = Tensor::zeros(&[(3 << 20) + 1], DType::U8, dev).unwrap();
    assert_eq!(memory::memory_allocated(dev), base + 4608 + (3 << 20) + 512);
    let s = memory::memory_stats(dev);
    assert!(s.allocated_bytes.large.current >= ((3 << 20) + 512) as i64);
    memory::reset_peak_memory_stats(dev);
    drop(big);
    assert_eq!(memory::memory_allocated(dev), base + 4608);
    assert_eq!(
        memory::max_memory_allocated(dev),
        base + 4608 + (3 << 20) + 512,
        "the peak survives the drop"
    );
    drop((a, b));
    assert_eq!(memory::memory_allocated(dev), base, "every byte is back");
    // Cached memory goes back to the system on empty_cache.
    let reserved = memory::memory_reserved(dev);
    assert!(reserved > 0);
    memory::empty_cache(dev);
    assert!(memory::memory_reserved(dev) <= reserved);
    assert!(memory::memory_summary(dev).contains("Allocated memory"));
    // A limit below what a request needs is an OutOfMemory error with the figures.
    memory::set_memory_limit(
        dev,
        memory::MemoryLimit::Bytes(memory::memory_reserved(dev) + (4 << 20)),
    )
    .unwrap();
    let e = Tensor::zeros(&[64 << 20], DType::U8, dev).unwrap_err();
    memory::set_memory_limit(dev, memory::MemoryLimit::Unlimited).unwrap();
    assert!(
        matches!(e, Error::OutOfMemory { device, requested, limit: Some(_), .. } if device == dev && requested == 64 << 20),
        "{e:?}"
    );
    assert!(e.to_string().contains("out of memory"), "{e}");
}

// --------------------------------------------------------------- random ---

/// `copy_non_blocking_` from a pinned host buffer (on a GPU; a plain CPU
/// tensor on the CPU) into a buffer on `dev`: the bytes arrive, nothing is
/// allocated on `dev` by the copies, a source overwritten after its copy's
/// stream has finished does not change the result, and anything else falls
/// back to `copy_` with its errors.
fn copy_non_blocking_writes_into_a_buffer_allocated_once(dev: Device) {
    let n = 1 << 20;
    let v: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 * 0.5).collect();
    let host = Tensor::from_slice(&v, &[n / 4, 4], Device::Cpu).unwrap();
    let mut src = if dev.is_cuda() {
        host.pin_memory().unwrap()
    } else {
        host
    };
    let mut dst = Tensor::zeros(&[n / 4, 4], DType::F32, dev).unwrap();
    let allocs = memory::memory_stats(dev).allocation.all.allocated;
    for round in 0..3 {
        dst.copy_non_blocking_(&src).unwrap();
        if dev.is_cuda() {
            cuda::synchronize(dev).unwrap();
        }
        src.fill_(-(round as f64)).unwrap();
        let want: Vec<f32> = if round == 0 {
            v.clone()
        } else {
            vec![-(round as f32 - 1.0); n]
        };
        assert_eq!(dst.to_vec::<f32>().unwrap(), want, "round {round}");
    }
    assert_eq!(
        memory::memory_stats(dev).allocation.all.allocated,
        allocs,
        "copies into the buffer allocate nothing on {dev}"
    );
    // Rows of a view: a narrowed destination takes a narrowed source that
    // starts inside its pinned block (an offset into the block).
    let mut rows = dst.narrow(0, 2, 3).unwrap();
    let s = Tensor::arange(0.0, 16.0, 1.0, DType::F32, Device::Cpu)
        .unwrap()
        .view(&[4, 4])
        .unwrap();
    let s = if dev.is_cuda() {
        s.pin_memory().unwrap()
    } else {
        s
    };
    rows.copy_non_blocking_(&s.narrow(0, 1, 3).unwrap())
        .unwrap();
    let got = dst.to_vec::<f32>().unwrap();
    let want: Vec<f32> = (4..16).map(|v| v as f32).collect();
    assert_eq!(&got[8..20], &want[..]);
    assert_eq!(got[7], -1.0);
    // Broadcasting and conversion: the `copy_` fallback.
    let b = Tensor::from_slice(&[1i64, 2, 3, 4], &[4], Device::Cpu).unwrap();
    dst.copy_non_blocking_(&b).unwrap();
    assert_eq!(dst.to_vec::<f32>().unwrap()[4..8], [1.0, 2.0, 3.0, 4.0]);
    let e = dst
        .copy_non_blocking_(&Tensor::zeros(&[3], DType::F32, Device::Cpu).unwrap())
        .unwrap_err();
    assert!(
        e.to_string().contains("copy_") && e.to_string().contains("[3]"),
        "{e}"
    );
}

/// Mean and standard deviation (population).
/// `to_vec` of a contiguous tensor (whole, or a leading narrow of one, as
/// a loader's batch field is) copies straight to the host: its device
/// allocates nothing. (Session 7 saw one device allocation per read of a
/// loader field on the H200; this pins down whether a plain read does.)
fn reading_a_contiguous_tensor_back_allocates_nothing_on_its_device(dev: Device) {
    let t = Tensor::arange(0.0, 128.0, 1.0, DType::F32, dev)
        .unwrap()
        .reshape(&[16, 8])
        .unwrap();
    let i = Tensor::arange(0.0, 64.0, 1.0, DType::I64, dev)
        .unwrap()
        .reshape(&[16, 4])
        .unwrap();
    let before = memory::memory_stats(dev).allocation.all.allocated;
    let whole = t.to_vec::<f32>().unwrap();
    let head = t.narrow(0, 0, 4).unwrap().to_vec::<f32>().unwrap();
    let ints = i.narrow(0, 0, 4).unwrap().to_vec::<i64>().unwrap();
    assert_eq!(
        memory::memory_stats(dev).allocation.all.allocated,
        before,
        "device allocations during three reads"
    );
    assert_eq!(whole[127], 127.0);
    assert_eq!(head, (0..32).map(|v| v as f32).collect::<Vec<_>>());
    assert_eq!(ints, (0..16).collect::<Vec<i64>>());
}

fn moments(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    (mean, var.sqrt())
}

fn random_fills(dev: Device) {
    // The CPU draws on the host (xoshiro256++), CUDA on the device (Philox
    // at the generator's offset): each device is reproducible for a seed,
    // but the two give different values (as in PyTorch).
    let n = 20_000;
    for dt in FLOATS {
        let draw = |seed: u64| {
            tensorscope::manual_seed(seed);
            let u = Tensor::rand(&[40, n / 40], dt, dev).unwrap();
            let z = Tensor::randn(&[n / 40, 40], dt, dev).unwrap();
            let w = Tensor::zeros(&[6, 20], dt, dev).unwrap();
            w.slice(1, 0, 20, 2).unwrap().uniform_(-2.0, 2.0).unwrap();
            let mut nrm = Tensor::zeros(&[n], dt, dev).unwrap();
            nrm.normal_(1.0, 0.5).unwrap();
            let mut g = tensorscope::Generator::new(5);
            let r = Tensor::rand_with(&[30], dt, dev, &mut g).unwrap();
            [u, z, w, nrm, r].map(|t| read(&t))
        };
        let [u, z, w, nrm, r] = draw(41);
        // Same seed, same values on this device.
        let again = draw(41);
        for (a, b, what) in [
            (&u, &again[0], "rand"),
            (&z, &again[1], "randn"),
            (&w, &again[2], "uniform_"),
            (&nrm, &again[3], "normal_"),
            (&r, &again[4], "rand_with"),
        ] {
            assert_eq!(a, b, "{what} {dt} on {dev}: same seed, same values");
        }
        // Another seed, other values (the explicit generator is untouched).
        let other = draw(42);
        assert_ne!(u, other[0], "rand {dt}: seeds 41 and 42");
        assert_ne!(z, other[1], "randn {dt}: seeds 41 and 42");
        assert_eq!(r, other[4], "rand_with does not use the global generator");
        // Ranges: rand in [0, 1) (f16/bf16 never round up to 1), uniform_
        // of a stepped view in [-2, 2) and nothing written between.
        assert!(u.iter().all(|x| (0.0..1.0).contains(x)), "rand {dt}");
        assert!(
            w.iter().enumerate().all(|(i, &x)| if i % 2 == 0 {
                (-2.0..2.0).contains(&x)
            } else {
                x == 0.0
            }),
            "uniform_ of a stepped view {dt}: {w:?}"
        );
        // Moments: uniform mean 1/2, sd 1/sqrt(12); normals as asked.
        let (m, sd) = moments(&u);
        assert!(
            (m - 0.5).abs() < 0.02 && (sd - 0.2887).abs() < 0.02,
            "rand {dt}: {m} {sd}"
        );
        let (m, sd) = moments(&z);
        assert!(
            m.abs() < 0.05 && (sd - 1.0).abs() < 0.05,
            "randn {dt}: {m} {sd}"
        );
        let (m, sd) = moments(&nrm);
        assert!(
            (m - 1.0).abs() < 0.03 && (sd - 0.5).abs() < 0.03,
            "normal_ {dt}: {m} {sd}"
        );
        // Successive fills differ: the stream (or the Philox offset) moves.
        tensorscope::manual_seed(7);
        let a = read(&Tensor::rand(&[64], dt, dev).unwrap());
        let b = read(&Tensor::rand(&[64], dt, dev).unwrap());
        assert_ne!(a, b, "two rand calls after one seed {dt}");
        if dev.is_cuda() {
            let cpu = {
                tensorscope::manual_seed(41);
                read(&Tensor::rand(&[40, n / 40], dt, Device::Cpu).unwrap())
            };
            assert_ne!(u, cpu, "CUDA and CPU values differ for one seed");
        }
    }
    if dev.is_cuda() {
        // The Philox offset advances by the counters each fill used: 4
        // elements a counter (f32), rounded up. rand(6) uses counters 0-1,
        // then rand(4) counter 2: elements 0..6 and 8..12 of one rand(12).
        tensorscope::manual_seed(3);
        let a = read(&Tensor::rand(&[6], DType::F32, dev).unwrap());
        let b = read(&Tensor::rand(&[4], DType::F32, dev).unwrap());
        tensorscope::manual_seed(3);
        let c = read(&Tensor::rand(&[12], DType::F32, dev).unwrap());
        assert_eq!(a, c[..6], "first fill at offset 0");
        assert_eq!(b, c[8..], "second fill at offset 2");
        // A CPU fill does not move the CUDA offset.
        tensorscope::manual_seed(3);
        Tensor::rand(&[100], DType::F32, Device::Cpu).unwrap();
        let a2 = read(&Tensor::rand(&[6], DType::F32, dev).unwrap());
        assert_eq!(a, a2, "CPU draws leave the CUDA offset alone");
    }
    // Dropout (training mode): 0 or 1/(1-p), about 1-p kept, the same mask
    // for the same seed on this device.
    use tensorscope::nn::{Dropout, Module};
    let drop = Dropout::new(0.25).unwrap();
    let f = |seed: u64| {
        tensorscope::manual_seed(seed);
        read(
            &drop
                .forward(&Tensor::ones(&[1000], DType::F32, dev).unwrap())
                .unwrap(),
        )
    };
    let y = f(42);
    assert!(y.iter().all(|&x| x == 0.0 || (x - 4.0 / 3.0).abs() < 1e-6));
    let kept = y.iter().filter(|&&x| x != 0.0).count();
    assert!((650..=850).contains(&kept), "dropout kept {kept} of 1000");
    assert_eq!(y, f(42), "dropout: same seed, same mask");
    assert_ne!(y, f(43), "dropout: another seed, another mask");
    // The backward uses the saved mask: with x = 1, dL/dx of sum(dropout(x))
    // is the output itself. A transposed (non-contiguous) input, f64 and
    // f16; for_owned (donation) goes the same way.
    for dt in [DType::F32, DType::F64, DType::F16] {
        tensorscope::manual_seed(5);
        let x = Tensor::ones(&[20, 50], dt, dev)
            .unwrap()
            .requires_grad_(true)
            .unwrap();
        let y = drop.forward(&x.t().unwrap()).unwrap();
        assert_eq!(y.shape(), &[50, 20]);
        y.sum_all().unwrap().backward().unwrap();
        let g = read(&x.grad().unwrap());
        let yt = read(&y.t().unwrap());
        assert_eq!(g, yt, "dropout {dt}: the gradient is the saved scaled mask");
        let kept = yt.iter().filter(|&&v| v != 0.0).count();
        assert!(
            (600..=900).contains(&kept),
            "dropout {dt} kept {kept} of 1000"
        );
        let owned = drop
            .forward_owned(Tensor::ones(&[1000], dt, dev).unwrap())
            .unwrap();
        assert!(read(&owned)
            .iter()
            .all(|&v| v == 0.0 || (v - 4.0 / 3.0).abs() < 1e-3));
    }
    let e = Tensor::rand(&[2], DType::I32, dev).unwrap_err();
    assert!(
        matches!(e, Error::DTypeMismatch { op: "rand", .. }),
        "{e:?}"
    );
}

// ------------------------------------------------------- CUDA only ---

#[test]
fn without_a_gpu_cuda_is_an_error_not_a_panic() {
    let _g = lock();
    let n = cuda::device_count();
    if n > 0 {
        eprintln!("skipped: this machine has {n} CUDA device(s)");
        return;
    }
    assert!(!cuda::is_available());
    assert_eq!(Device::cuda_if_available(), Device::Cpu);
    let e = Tensor::zeros(&[2], DType::F32, Device::Cuda(0)).unwrap_err();
    assert!(
        matches!(
            e,
            Error::DeviceUnavailable {
                op: "zeros",
                device: Device::Cuda(0),
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("cuda:0"), "{e}");
    let cpu = Tensor::ones(&[2], DType::F32, Device::Cpu).unwrap();
    assert!(matches!(
        cpu.to_device(Device::Cuda(3)).unwrap_err(),
        Error::DeviceUnavailable { .. }
    ));
    assert_eq!(memory::memory_allocated(Device::Cuda(0)), 0);
    assert!(cuda::Stream::new(Device::Cuda(0)).is_err());
    assert!(cuda::device_name(Device::Cuda(0)).is_err());
}

#[test]
fn streams_events_and_wait_stream() {
    let _g = lock();
    let Some(dev) = cuda_or_skip("streams_events_and_wait_stream") else {
        return;
    };
    let main = cuda::current_stream(dev).unwrap();
    assert_eq!(main.id(), 0, "the default stream");
    let side = cuda::Stream::new(dev).unwrap();
    assert_ne!(side.id(), 0);
    let x = Tensor::full(&[1 << 20], 2.0, DType::F32, dev).unwrap();
    side.wait_stream(&main).unwrap();
    let (start, end) = (
        cuda::Event::new(dev, true).unwrap(),
        cuda::Event::new(dev, true).unwrap(),
    );
    let y = cuda::with_stream(&side, || {
        assert_eq!(cuda::current_stream(dev).unwrap(), side);
        start.record(&side).unwrap();
        let y = x.mul_scalar(3.0).unwrap();
        end.record(&side).unwrap();
        y
    });
    assert_eq!(cuda::current_stream(dev).unwrap(), main, "restored");
    main.wait_stream(&side).unwrap();
    assert!(read(&y).iter().all(|&v| v == 6.0));
    end.synchronize().unwrap();
    assert!(end.query().unwrap());
    assert!(start.elapsed_ms(&end).unwrap() >= 0.0);
    {
        let _guard = cuda::StreamGuard::new(&side);
        assert_eq!(cuda::current_stream(dev).unwrap(), side);
    }
    assert_eq!(cuda::current_stream(dev).unwrap(), main);
    side.synchronize().unwrap();
    assert!(side.query().unwrap());
}

#[test]
fn blocks_are_pooled_per_stream_and_record_stream_defers_reuse() {
    let _g = lock();
    let Some(dev) = cuda_or_skip("blocks_are_pooled_per_stream_and_record_stream_defers_reuse")
    else {
        return;
    };
    // A fresh stream's pool holds one segment: a freed block is reused.
    let s2 = cuda::Stream::new(dev).unwrap();
    let a = cuda::with_stream(&s2, || Tensor::zeros(&[1000], DType::F32, dev).unwrap());
    let addr = a.data_ptr();
    drop(a);
    let b = cuda::with_stream(&s2, || Tensor::zeros(&[1000], DType::F32, dev).unwrap());
    assert_eq!(b.data_ptr(), addr, "same stream: the freed block is reused");
    drop(b);
    // Another stream never gets it.
    let side = cuda::Stream::new(dev).unwrap();
    let c = cuda::with_stream(&side, || Tensor::zeros(&[1000], DType::F32, dev).unwrap());
    assert_ne!(c.data_ptr(), addr, "another stream has its own pool");
    drop(c);
    // record_stream: the block leaves `allocated` at the drop but stays
    // active (pending) until an allocation finds the event completed.
    let pending = || {
        let s = memory::memory_stats(dev);
        s.active_bytes.all.current - s.allocated_bytes.all.current
    };
    let base = memory::memory_allocated(dev);
    let d0 = pending();
    let x = Tensor::zeros(&[1000], DType::F32, dev).unwrap();
    x.record_stream(&side).unwrap();
    drop(x);
    assert_eq!(
        memory::memory_allocated(dev),
        base,
        "not allocated after the drop"
    );
    assert_eq!(
        pending(),
        d0 + 4096,
        "still active: waiting for the other stream"
    );
    side.synchronize().unwrap();
    let y = Tensor::zeros(&[1000], DType::F32, dev).unwrap();
    assert_eq!(pending(), d0, "released once the event completed");
    drop(y);
    let e = Tensor::zeros(&[1], DType::F32, Device::Cpu)
        .unwrap()
        .record_stream(&side)
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::DeviceMismatch {
                op: "record_stream",
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn large_copies_are_staged_through_pinned_memory() {
    let _g = lock();
    let Some(dev) = cuda_or_skip("large_copies_are_staged_through_pinned_memory") else {
        return;
    };
    // 40 MB: three 16 MiB staging chunks each way.
    let n = 10_000_000;
    let v: Vec<f32> = (0..n).map(|i| (i % 65_536) as f32).collect();
    let t = Tensor::from_slice(&v, &[n], dev).unwrap();
    let s = cuda::pinned_memory_stats();
    assert!(s.reserved_bytes >= 16 << 20, "{s:?}");
    assert_eq!(
        s.allocated_bytes, 0,
        "staging buffers are back in the cache"
    );
    assert_eq!(t.to_vec::<f32>().unwrap(), v);
    let calls = cuda::pinned_memory_stats().num_host_alloc;
    let _t2 = Tensor::from_slice(&v, &[n], dev).unwrap();
    assert_eq!(
        cuda::pinned_memory_stats().num_host_alloc,
        calls,
        "cached pinned buffers are reused"
    );
    cuda::empty_pinned_cache();
    assert_eq!(cuda::pinned_memory_stats().reserved_bytes, 0);
}

#[test]
fn copies_work_with_one_staging_buffer_or_none() {
    let _g = lock();
    let Some(dev) = cuda_or_skip("copies_work_with_one_staging_buffer_or_none") else {
        return;
    };
    // 40 MB: three 16 MiB chunks each way.
    let n = 10_000_000;
    let v: Vec<f32> = (0..n).map(|i| (i % 65_521) as f32 - 7.0).collect();
    cuda::empty_pinned_cache();
    // No cap afterwards, whatever happens here.
    let _reset = scopeguard::guard((), |_| cuda::set_pinned_memory_limit(None));
    // Room for one 16 MiB buffer: chunk by chunk through it.
    cuda::set_pinned_memory_limit(Some(16 << 20));
    let t = Tensor::from_slice(&v, &[n], dev).unwrap();
    assert_eq!(t.to_vec::<f32>().unwrap(), v, "one buffer");
    let s = cuda::pinned_memory_stats();
    assert!(s.reserved_bytes <= 16 << 20, "{s:?}");
    // No page-locked memory at all: straight from and into pageable memory.
    cuda::empty_pinned_cache();
    cuda::set_pinned_memory_limit(Some(0));
    let before = cuda::pinned_memory_stats().num_host_alloc;
    let t = Tensor::from_slice(&v, &[n], dev).unwrap();
    let back = t.to_vec::<f32>().unwrap();
    let small = Tensor::from_slice(&[1.5f32, -2.0], &[2], dev).unwrap();
    // Read back while the cap is still 0 (the first GPU run read it after
    // lifting the cap, and the read page-locked a staging buffer).
    let small_back = small.to_vec::<f32>().unwrap();
    cuda::set_pinned_memory_limit(None);
    assert_eq!(back, v, "no buffer");
    assert_eq!(small_back, vec![1.5, -2.0]);
    assert_eq!(
        cuda::pinned_memory_stats().num_host_alloc,
        before,
        "nothing was page-locked"
    );
}

#[test]
fn device_information() {
    let _g = lock();
    let Some(dev) = cuda_or_skip("device_information") else {
        return;
    };
    assert!(!cuda::device_name(dev).unwrap().is_empty());
    let (major, _) = cuda::compute_capability(dev).unwrap();
    assert!(major >= 7);
    cuda::synchronize(dev).unwrap();
    let libs = cuda::libraries();
    assert!(libs.driver && libs.nvrtc && libs.devices >= 1);
    let e = Tensor::zeros(&[1], DType::F32, Device::Cuda(libs.devices)).unwrap_err();
    assert!(matches!(e, Error::DeviceUnavailable { .. }), "{e:?}");
}

#[test]
fn elapsed_time_of_events_without_timing_is_an_error() {
    let _g = lock();
    let Some(dev) = cuda_or_skip("elapsed_time_of_events_without_timing_is_an_error") else {
        return;
    };
    let s = cuda::current_stream(dev).unwrap();
    let (plain, timed) = (
        cuda::Event::new(dev, false).unwrap(),
        cuda::Event::new(dev, true).unwrap(),
    );
    plain.record(&s).unwrap();
    timed.record(&s).unwrap();
    for e in [
        plain.elapsed_ms(&timed).unwrap_err(),
        timed.elapsed_ms(&plain).unwrap_err(),
    ] {
        assert!(
            matches!(
                e,
                Error::InvalidArgument {
                    op: "Event::elapsed_ms",
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("timing"), "{e}");
    }
    let t2 = s.record_event().unwrap();
    assert!(timed.elapsed_ms(&t2).unwrap() >= 0.0);
    plain.synchronize().unwrap();
    assert!(
        plain.query().unwrap(),
        "a timing-less event still orders work"
    );
}

// ------------------------------------------------------ pinned tensors ---

/// Without a usable GPU, pinning is an error naming the op (never a
/// panic); wrong devices are errors everywhere; the non-blocking copies
/// degrade to plain ones where nothing is pinned.
#[test]
fn pinned_tensors_errors_and_fallbacks() {
    let _g = lock();
    let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3], Device::Cpu).unwrap();
    match x.pin_memory() {
        Ok(p) => {
            assert!(cuda::is_available());
            assert!(p.is_pinned() && !x.is_pinned());
        }
        Err(e) => {
            assert!(!cuda::is_available(), "{e}");
            assert!(
                matches!(
                    e,
                    Error::DeviceUnavailable {
                        op: "pin_memory",
                        ..
                    }
                ),
                "{e:?}"
            );
        }
    }
    // A CPU tensor "to the host": already there, nothing to wait for.
    let h = x.to_host_non_blocking().unwrap();
    assert!(h.is_done());
    assert_eq!(
        h.wait().unwrap().to_vec::<f32>().unwrap(),
        vec![1.0, 2.0, 3.0]
    );
    // An unpinned tensor to the CPU: a plain to_device.
    let y = x.to_device_non_blocking(Device::Cpu).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0]);
    if let Some(dev) = common::devices::gpu() {
        let d = x.to_device(dev).unwrap();
        let e = d.pin_memory().unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidArgument {
                    op: "pin_memory",
                    ..
                }
            ),
            "{e:?}"
        );
    } else {
        let e = x.to_device_non_blocking(Device::Cuda(0)).unwrap_err();
        assert!(matches!(e, Error::DeviceUnavailable { .. }), "{e:?}");
    }
}

#[test]
fn pinned_tensors_copy_without_waiting() {
    let _g = lock();
    let Some(dev) = cuda_or_skip("pinned_tensors_copy_without_waiting") else {
        return;
    };
    // 40 MB: the DMA takes long enough for the host to run ahead.
    let n = 10_000_000;
    let v: Vec<f32> = (0..n).map(|i| (i % 65_521) as f32 - 3.0).collect();
    let x = Tensor::from_slice(&v, &[n], Device::Cpu).unwrap();
    let cpu_before = memory::memory_allocated(Device::Cpu);
    let pinned_before = cuda::pinned_memory_stats().allocated_bytes;
    let p = x.pin_memory().unwrap();
    assert!(p.is_pinned() && p.is_contiguous());
    assert!(p.narrow(0, 5, 10).unwrap().is_pinned(), "views of it too");
    assert_eq!(
        memory::memory_allocated(Device::Cpu),
        cpu_before,
        "pinned bytes are not the CPU allocator's"
    );
    assert!(cuda::pinned_memory_stats().allocated_bytes >= pinned_before + n * 4);
    assert!(p.pin_memory().unwrap().is_pinned());
    // Host to device, then the source dropped at once: its block must not be
    // reused (and overwritten) before the DMA has read it.
    let d = p.to_device_non_blocking(dev).unwrap();
    drop(p);
    let mut q = Tensor::zeros(&[n], DType::F32, Device::Cpu)
        .unwrap()
        .pin_memory()
        .unwrap();
    q.fill_(-1.0).unwrap();
    assert_eq!(d.to_vec::<f32>().unwrap(), v, "host to device");
    drop(q);
    assert_eq!(
        cuda::pinned_memory_stats().allocated_bytes,
        pinned_before,
        "both pinned blocks are back in the cache"
    );
    // Device to host, contiguous and transposed sources.
    let h = d.to_host_non_blocking().unwrap();
    let got = h.wait().unwrap();
    assert!(got.is_pinned());
    assert_eq!(got.to_vec::<f32>().unwrap(), v, "device to host");
    let m = d
        .narrow(0, 0, 12)
        .unwrap()
        .view(&[3, 4])
        .unwrap()
        .t()
        .unwrap();
    let ht = m.to_host_non_blocking().unwrap().wait().unwrap();
    assert_eq!(ht.shape(), &[4, 3]);
    let want: Vec<f32> = (0..12).map(|i| v[(i % 3) * 4 + i / 3]).collect();
    assert_eq!(ht.to_vec::<f32>().unwrap(), want, "transposed source");
    // A pending copy dropped unwaited leaves nothing behind.
    drop(d.to_host_non_blocking().unwrap());
    drop((got, ht));
    cuda::synchronize(dev).unwrap();
    assert_eq!(cuda::pinned_memory_stats().allocated_bytes, pinned_before);
    // Autograd sees both copies.
    let leaf = Tensor::ones(&[4], DType::F64, Device::Cpu)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let y = leaf
        .pin_memory()
        .unwrap()
        .to_device_non_blocking(dev)
        .unwrap()
        .mul_scalar(3.0)
        .unwrap();
    y.sum_all().unwrap().backward().unwrap();
    assert_eq!(read(&leaf.grad().unwrap()), vec![3.0; 4]);
}
