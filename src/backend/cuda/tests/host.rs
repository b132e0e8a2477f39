//! Host-side unit tests that need no GPU: launch geometry, scalar encoding,
//! the kernel name manifest, the NVRTC program, pinned size classes, errors
//! without a device, events and stream guards, and the split-reduction plan.

use super::*;

// ------------------------------------------------------------ no GPU ---

fn strided(shape: &[usize], strides: &[usize], offset: usize) -> Layout {
    Layout::from_parts(shape.into(), strides.into(), offset)
}

#[test]
fn geometry_dense_and_strided() {
    let c = Layout::contiguous(&[4, 5, 6]);
    let g = Geom::<2>::new("t", [&c, &c]).unwrap();
    assert!(g.is_dense(), "contiguous operands take the fast path");
    // A transposed input: no merging possible.
    let t = strided(&[6, 4], &[1, 6], 0);
    let o = Layout::contiguous(&[6, 4]);
    let g = Geom::<2>::new("t", [&o, &t]).unwrap();
    assert_eq!(g.rank, 2);
    assert_eq!(&g.shape[..2], &[6, 4]);
    assert_eq!(&g.strides[0][..2], &[4, 1]);
    assert_eq!(&g.strides[1][..2], &[1, 6]);
    // Broadcast along dim 0 (stride 0) and size-1 dims dropped.
    let b = strided(&[3, 1, 5], &[0, 7, 1], 2);
    let o = Layout::contiguous(&[3, 1, 5]);
    let g = Geom::<2>::new("t", [&o, &b]).unwrap();
    assert_eq!(g.rank, 2);
    assert_eq!(&g.shape[..2], &[3, 5]);
    assert_eq!(&g.strides[1][..2], &[0, 1]);
    // Slicing with a step keeps one merged dimension with stride 2.
    let s = strided(&[10], &[2], 1);
    let g = Geom::<2>::new("t", [&Layout::contiguous(&[10]), &s]).unwrap();
    assert_eq!((g.rank, g.shape[0], g.strides[1][0]), (1, 10, 2));
}

#[test]
fn geometry_merges_contiguous_runs() {
    // [2, 3, 4] viewed with the last two dims contiguous but dim 0 padded.
    let l = strided(&[2, 3, 4], &[20, 4, 1], 0);
    let (shape, [st]) = coalesce([&l]);
    assert_eq!(shape, vec![2, 12]);
    assert_eq!(st, vec![20, 1]);
}

#[test]
fn geometry_rank_limit_is_an_error() {
    // MAX_RANK + 1 dimensions of size 2 with strides that never merge
    // (MAX_RANK of them are fine).
    let n = MAX_RANK as u32 + 1;
    let strides: Vec<usize> = (0..n).map(|i| 3usize.pow(n - i)).collect();
    let ok = strided(&[2; MAX_RANK], &strides[1..], 0);
    let g = Geom::<1>::new("myop", [&ok]).unwrap();
    assert_eq!(g.rank as usize, MAX_RANK);
    assert_eq!(g.strides[0][MAX_RANK - 1], 3);
    let l = strided(&[2; MAX_RANK + 1], &strides, 0);
    let e = Geom::<1>::new("myop", [&l]).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { op: "myop", .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("myop"));
}

#[test]
fn scalar_bits_follow_from_f64() {
    assert_eq!(scalar_bits(DType::F32, 1.5), 1.5f32.to_bits() as u64);
    assert_eq!(scalar_bits(DType::F64, -2.25), (-2.25f64).to_bits());
    assert_eq!(scalar_bits(DType::F16, 1.5), 0x3e00);
    assert_eq!(scalar_bits(DType::BF16, 1.0), 0x3f80);
    assert_eq!(scalar_bits(DType::I32, -1.0), 0xffff_ffff);
    assert_eq!(scalar_bits(DType::I64, -1.0), u64::MAX);
    assert_eq!(scalar_bits(DType::U8, 300.0), 255, "saturating, as `as`");
    assert_eq!(scalar_bits(DType::U8, -3.0), 0);
    assert_eq!(scalar_bits(DType::Bool, 2.0), 1);
    assert_eq!(scalar_bits(DType::Bool, 0.0), 0);
    assert_eq!(scalar_bits(DType::I32, f64::NAN), 0);
}

#[test]
fn kernel_names_are_unique_and_well_formed() {
    // The names of the kernel table's rows for `file`.
    let names = |file: &str| -> Vec<String> {
        kernels::expected_kernels(file)
            .unwrap()
            .into_iter()
            .map(|(n, _)| n)
            .collect()
    };
    // Unique across files too: a device caches loaded functions by name.
    let mut all = HashSet::new();
    for m in Module::ALL {
        let names = names(m.file());
        assert!(!names.is_empty());
        for n in &names {
            assert!(
                all.insert(n.clone()),
                "{n} appears twice (last in {})",
                m.file()
            );
            assert!(n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
        }
    }
    assert!(kernels::expected_kernels("nope.cu").is_none());
    let e = names("elementwise.cu");
    assert!(
        e.contains(&"unary_reciprocal_f16".to_string()),
        "names follow UnaryOp::name()"
    );
    assert!(e.contains(&"binary_maximum_bool".to_string()));
    assert!(
        !e.contains(&"unary_exp_i32".to_string()),
        "float-only ops have no integer kernel"
    );
    let r = names("reduce.cu");
    assert!(r.contains(&"reduce_argmax_bf16".to_string()));
    assert!(r.contains(&"reduce_argmax_bool".to_string()));
    assert!(!r.contains(&"reduce_mean_i64".to_string()));
    assert!(r.contains(&"reduce_var_f16".to_string()));
    assert!(r.contains(&"reduce_logsumexp_f64".to_string()));
    assert!(!r.contains(&"reduce_var_i32".to_string()));
    assert!(r.contains(&"matmul_u8".to_string()) && !r.contains(&"matmul_f32".to_string()));
    for (op, name) in [
        (Reduction::Var(1), "reduce_var_f32"),
        (Reduction::Std(0), "reduce_var_f32"),
        (Reduction::LogSumExp, "reduce_logsumexp_f32"),
        (Reduction::Sum, "reduce_sum_f32"),
    ] {
        assert_eq!(kernels::reduction(op, DType::F32).name(), name);
        assert!(r.contains(&name.to_string()), "{name} is in the manifest");
    }
    let i = names("index.cu");
    for n in [
        "index_check_i32",
        "gather_i64_b2",
        "scatter_i32_b8",
        "scatter_add_i64_bf16",
        "masked_select_b1",
        "masked_count",
    ] {
        assert!(i.contains(&n.to_string()), "{n}");
    }
    assert!(!i.contains(&"scatter_add_i64_bool".to_string()));
    assert_eq!(
        kernels::reduce_out_dtype(ReduceOp::Sum, DType::Bool),
        Some(DType::I64)
    );
    assert_eq!(
        kernels::reduce_out_dtype(ReduceOp::Max, DType::F16),
        Some(DType::F16)
    );
}

#[test]
fn program_has_prelude_and_line_markers() {
    let p = kernels::program("x.cu", "KERNEL void k() {}");
    assert!(p.starts_with("#line 1 \"prelude.cuh\""));
    assert!(p.contains("#line 1 \"x.cu\"\nKERNEL void k() {}"));
    assert!(p.contains("struct __align__(2) f16"));
}

#[test]
fn pinned_sizes_are_powers_of_two() {
    use cuda::pinned::size_class;
    assert_eq!(size_class(1), (4096, 12));
    assert_eq!(size_class(4096), (4096, 12));
    assert_eq!(size_class(4097), (8192, 13));
    assert_eq!(size_class(16 << 20), (16 << 20, 24));
}

#[test]
fn no_gpu_means_no_panic() {
    // Never panics, whatever this machine has.
    let libs = cuda::libraries();
    let n = cuda::device_count();
    assert_eq!(n, libs.devices);
    if n == 0 {
        assert!(!cuda::is_available());
        assert_eq!(Device::cuda_if_available(), Device::Cpu);
        assert!(cuda::Stream::new(Device::Cuda(0)).is_err());
        assert!(cuda::Event::new(Device::Cuda(0), true).is_err());
    }
    // Kernel compilation without NVRTC is an error, not a panic.
    if !libs.nvrtc {
        assert!(kernels::compile("copy.cu", Module::Copy.source(), "compute_90").is_err());
    }
}

#[test]
fn elapsed_time_needs_two_timing_events_and_a_driver_with_the_v2_entry_point() {
    use cuda::event::elapsed_unsupported;
    assert_eq!(elapsed_unsupported(true, true, true), None);
    for (s, e, v2, word) in [
        (false, true, true, "start"),
        (true, false, true, "end"),
        (false, false, true, "neither"),
        // cudarc's CUDA 13 bindings call cuEventElapsedTime_v2 and panic
        // on a driver without it: that must be an Err instead.
        (true, true, false, "cuEventElapsedTime_v2"),
    ] {
        let why = elapsed_unsupported(s, e, v2).expect("unsupported");
        assert!(why.contains(word), "{why}");
    }
    // Without a driver there is no symbol to call (and no panic looking).
    if !cuda::probe::probe().driver {
        assert!(!cuda::probe::has_elapsed_v2());
    }
}

#[test]
fn a_pinned_block_whose_event_cannot_be_queried_is_not_reused() {
    use cuda::pinned::first_reusable;
    use cudarc::driver::{sys::CUresult, DriverError};
    let err = || Err(DriverError(CUresult::CUDA_ERROR_INVALID_CONTEXT));
    // An error used to count as "complete": the block was handed out while
    // a DMA might still be using it.
    assert_eq!(
        first_reusable([err(), Ok(false), Ok(true)].into_iter()),
        Some(2)
    );
    assert_eq!(first_reusable([err(), Ok(false)].into_iter()), None);
    assert_eq!(first_reusable([Ok(true), err()].into_iter()), Some(0));
    assert_eq!(first_reusable(std::iter::empty()), None);
}

#[test]
fn a_stream_guard_cannot_leave_its_thread() {
    // The current stream is a thread-local: a guard dropped on another
    // thread would restore *that* thread's stream and leave its own
    // thread's side stream current for good. `StreamGuard` must not be
    // `Send` (this fails to compile, "type annotations needed", if it is).
    trait AmbiguousIfSend<A> {
        fn check() {}
    }
    impl<T: ?Sized> AmbiguousIfSend<()> for T {}
    impl<T: ?Sized + Send> AmbiguousIfSend<u8> for T {}
    <cuda::StreamGuard as AmbiguousIfSend<_>>::check();
    // ... while a stream itself may be shared across threads.
    fn send_sync<T: Send + Sync>() {}
    send_sync::<cuda::Stream>();
}

// ------------------------------------------- kernel review (no GPU) ---

/// The scalar of `binary_scalar` (and a fill value) reaches the kernel as
/// PyTorch stores a number: integers wrap through i64 (`u8 + (-2)` adds
/// 254), checked against plain two's-complement casts, where `scalar_bits`
/// (clamp bounds) saturates.
#[test]
fn arith_scalar_bits_wrap_like_the_cpu() {
    use cuda::elementwise::arith_scalar_bits;
    let vals = [
        -2.0,
        -1.0,
        0.0,
        3.0,
        255.0,
        256.0,
        300.0,
        -300.0,
        4294967301.0,
        -4294967301.0,
        1e19,
        -1e19,
        f64::NAN,
    ];
    for v in vals {
        assert_eq!(
            arith_scalar_bits(DType::U8, v),
            (v as i64 as u8) as u64,
            "u8 {v}"
        );
        assert_eq!(
            arith_scalar_bits(DType::I32, v),
            (v as i64 as i32) as u32 as u64,
            "i32 {v}"
        );
        assert_eq!(
            arith_scalar_bits(DType::I64, v),
            (v as i64) as u64,
            "i64 {v}"
        );
        for dt in [DType::F32, DType::F64, DType::F16, DType::BF16, DType::Bool] {
            assert_eq!(arith_scalar_bits(dt, v), scalar_bits(dt, v), "{dt} {v}");
        }
    }
    assert_eq!(arith_scalar_bits(DType::U8, -2.0), 254);
    assert_eq!(arith_scalar_bits(DType::I32, 4294967301.0), 5);
    assert_eq!(scalar_bits(DType::U8, -2.0), 0, "clamp bounds saturate");
}

// ------------------------------------------------ split reductions ---

#[test]
fn split_count_fills_the_device_only_for_few_long_reductions() {
    use cuda::reduce::split_count;
    // 132 multiprocessors (an H100): 528 blocks is the target.
    // A full sum of 256M elements: 528 blocks of ~508k elements each.
    assert_eq!(split_count(1, 256 << 20, 132), 528);
    // Three long rows: 176 blocks per row.
    assert_eq!(split_count(3, 1 << 24, 132), 176);
    // Not long enough to share: each block must fold at least 4096.
    assert_eq!(split_count(1, 8191, 132), 1);
    assert_eq!(split_count(1, 8192, 132), 2);
    assert_eq!(split_count(1, 100_000, 132), 24);
    // Enough outputs to fill the device on their own: one group each.
    assert_eq!(split_count(528, 1 << 20, 132), 1);
    assert_eq!(split_count(10_000, 1 << 20, 132), 1);
    // 527 outputs: 2 blocks each.
    assert_eq!(split_count(527, 1 << 20, 132), 2);
    // A device that reports no multiprocessors still gets a plan.
    assert_eq!(split_count(1, 1 << 20, 0), 4);
    for (n_out, n_red) in [(1i64, 1i64 << 30), (7, 123_457), (100, 1 << 22)] {
        let s = split_count(n_out, n_red, 108);
        assert!(
            s >= 1 && (s == 1 || n_red / s >= 4096),
            "{n_out} {n_red}: {s}"
        );
        assert!(n_out * s <= 108 * 4 + n_out, "{n_out} {n_red}: {s}");
    }
}

/// The host staging buffer of a strided or casting host <-> device copy
/// comes from the CPU's allocator (it once asked the CUDA allocator for a
/// CPU block, and `x.t().to_device(cuda)` failed with "allocate: expected a
/// CUDA tensor": first GPU run).
#[test]
fn host_staging_comes_from_the_cpu_allocator() {
    let (st, l) =
        crate::backend::cuda::elementwise::temp(Device::Cpu, &[3, 4], DType::F64).unwrap();
    assert_eq!(st.device(), Device::Cpu);
    assert_eq!(l.shape(), &[3, 4]);
    assert_eq!(st.nbytes(), 96);
}
