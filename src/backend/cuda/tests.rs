//! Unit tests of the CUDA backend. The first group needs no GPU (geometry,
//! scalar encoding, the cuBLAS row/column-major plan against an emulated
//! column-major GEMM, the record_stream allocator over a fake source, the
//! kernel name manifest). The second group runs crate-internal kernels the
//! op layer does not reach through the dispatch (fused softmax backward,
//! random fills, layer norm, dropout) and the rank-2/3 cuBLAS entry point
//! against naive references, and prints a skip line without a GPU. The ops
//! behind the dispatch are tested on both devices in tests/cuda.rs,
//! tests/cuda_elementwise.rs and tests/cuda_ops.rs.

use super::alloc::{Fence, StreamAwareAllocator, StreamUse};
use super::blas::{plan, storage_order, GemmPlan, Mat};
use super::elementwise::scalar_bits;
use super::kernels::{self, Module};
use super::launch::{coalesce, Geom, MAX_RANK};
use crate::alloc::caching::SegmentSource;
use crate::alloc::{BlockSink, DeviceAllocator};
use crate::backend::{Operand, ReduceOp, Reduction};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::Error;
use crate::layout::Layout;
use crate::tensor::Tensor;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

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

/// A column-major GEMM exactly as cuBLAS defines it, over one f64 memory
/// (pointers and strides in elements).
fn emulate(p: &GemmPlan, mem: &mut [f64]) {
    for bt in 0..p.batch {
        let (a0, b0, c0) = (
            p.a as usize + bt * p.stride_a,
            p.b as usize + bt * p.stride_b,
            p.c as usize + bt * p.stride_c,
        );
        for i in 0..p.m {
            for j in 0..p.n {
                let mut acc = 0.0;
                for l in 0..p.k {
                    let av = if p.transa {
                        mem[a0 + l + i * p.lda]
                    } else {
                        mem[a0 + i + l * p.lda]
                    };
                    let bv = if p.transb {
                        mem[b0 + j + l * p.ldb]
                    } else {
                        mem[b0 + l + j * p.ldb]
                    };
                    acc += av * bv;
                }
                mem[c0 + i + j * p.ldc] = acc;
            }
        }
    }
}

fn elem(m: &Mat, b: usize, r: usize, c: usize) -> usize {
    m.ptr as usize + b * m.bs + r * m.rs + c * m.cs
}

/// Lays out A (M×K) and B (K×N) in memory with the given strides, runs the
/// plan through the emulator, and compares with a naive row-major product.
fn check_plan(
    m: usize,
    k: usize,
    n: usize,
    batch: usize,
    a_rc: (usize, usize, usize),
    b_rc: (usize, usize, usize),
) {
    let mem_len = 100_000;
    let mut mem = vec![f64::NAN; mem_len];
    let a = Mat {
        ptr: 10,
        rows: m,
        cols: k,
        rs: a_rc.0,
        cs: a_rc.1,
        bs: a_rc.2,
    };
    let b = Mat {
        ptr: 30_000,
        rows: k,
        cols: n,
        rs: b_rc.0,
        cs: b_rc.1,
        bs: b_rc.2,
    };
    let c = Mat {
        ptr: 60_000,
        rows: m,
        cols: n,
        rs: n + 3,
        cs: 1,
        bs: m * (n + 3),
    };
    for bt in 0..batch {
        for r in 0..m {
            for q in 0..k {
                mem[elem(&a, bt, r, q)] = (bt * 7 + r * 3 + q) as f64 * 0.5 - 4.0;
            }
        }
        for r in 0..k {
            for q in 0..n {
                mem[elem(&b, bt, r, q)] = ((bt + 1) * (r + 2 * q) % 11) as f64 - 5.0;
            }
        }
    }
    let p = plan(&a, &b, &c, batch).expect("expressible");
    emulate(&p, &mut mem);
    for bt in 0..batch {
        for r in 0..m {
            for q in 0..n {
                let want: f64 = (0..k)
                    .map(|l| mem[elem(&a, bt, r, l)] * mem[elem(&b, bt, l, q)])
                    .sum();
                assert_eq!(
                    mem[elem(&c, bt, r, q)],
                    want,
                    "batch {bt} [{r},{q}] (a {a_rc:?}, b {b_rc:?})"
                );
            }
        }
    }
}

#[test]
fn gemm_plan_matches_row_major_product() {
    let (m, k, n) = (5, 4, 3);
    // Row-major A and B.
    check_plan(m, k, n, 1, (k, 1, 0), (n, 1, 0));
    // Transposed (column-major) A, row-major B, and the reverse.
    check_plan(m, k, n, 1, (1, m, 0), (n, 1, 0));
    check_plan(m, k, n, 1, (k, 1, 0), (1, k, 0));
    check_plan(m, k, n, 1, (1, m, 0), (1, k, 0));
    // Padded leading dimensions.
    check_plan(m, k, n, 1, (k + 2, 1, 0), (1, k + 5, 0));
    // Batched, with B broadcast across the batch (batch stride 0).
    check_plan(m, k, n, 3, (k, 1, m * k + 1), (n, 1, 0));
    check_plan(m, k, n, 2, (1, m, m * k), (1, k, k * n));
    // Degenerate shapes: one row, one column, K = 1.
    check_plan(1, k, n, 1, (k, 1, 0), (n, 1, 0));
    check_plan(m, k, 1, 1, (k, 1, 0), (1, 1, 0));
    check_plan(m, 1, n, 1, (1, 1, 0), (n, 1, 0));
}

#[test]
fn gemm_plan_refuses_what_cublas_cannot_express() {
    let a = Mat {
        ptr: 0,
        rows: 4,
        cols: 4,
        rs: 8,
        cs: 2,
        bs: 0,
    };
    assert_eq!(storage_order(&a), None, "no unit stride");
    let ok = Mat {
        ptr: 0,
        rows: 4,
        cols: 4,
        rs: 4,
        cs: 1,
        bs: 0,
    };
    let ct = Mat {
        ptr: 0,
        rows: 4,
        cols: 4,
        rs: 1,
        cs: 4,
        bs: 0,
    };
    assert!(
        plan(&ok, &ok, &ct, 1).is_none(),
        "a column-major output is written through a copy"
    );
    assert!(plan(&a, &ok, &ok, 1).is_none());
    // A broadcast column (row stride 0) has no valid leading dimension.
    let bc = Mat {
        ptr: 0,
        rows: 4,
        cols: 1,
        rs: 0,
        cs: 1,
        bs: 0,
    };
    assert_eq!(storage_order(&bc), None);
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
    use super::pinned::size_class;
    assert_eq!(size_class(1), (4096, 12));
    assert_eq!(size_class(4096), (4096, 12));
    assert_eq!(size_class(4097), (8192, 13));
    assert_eq!(size_class(16 << 20), (16 << 20, 24));
}

#[test]
fn no_gpu_means_no_panic() {
    // Never panics, whatever this machine has.
    let libs = super::libraries();
    let n = super::device_count();
    assert_eq!(n, libs.devices);
    if n == 0 {
        assert!(!super::is_available());
        assert_eq!(Device::cuda_if_available(), Device::Cpu);
        let e = Tensor::zeros(&[3], DType::F32, Device::Cuda(0)).unwrap_err();
        assert!(
            matches!(
                e,
                Error::DeviceUnavailable {
                    op: "allocate",
                    device: Device::Cuda(0),
                    ..
                }
            ),
            "{e:?}"
        );
        assert_eq!(crate::memory::memory_allocated(Device::Cuda(0)), 0);
        assert!(super::Stream::new(Device::Cuda(0)).is_err());
        assert!(super::Event::new(Device::Cuda(0), true).is_err());
    }
    // Kernel compilation without NVRTC is an error, not a panic.
    if !libs.nvrtc {
        assert!(kernels::compile("copy.cu", Module::Copy.source(), "compute_90").is_err());
    }
}

// The record_stream allocator over a fake address space with fake fences.

struct FakeSource {
    next: AtomicUsize,
    live: AtomicUsize,
    cap: usize,
}
impl SegmentSource for FakeSource {
    fn device(&self) -> Device {
        Device::Cuda(7)
    }
    fn alloc_segment(&self, bytes: usize) -> Option<usize> {
        if self.live.load(Ordering::SeqCst) + bytes > self.cap {
            return None;
        }
        self.live.fetch_add(bytes, Ordering::SeqCst);
        Some(self.next.fetch_add(bytes + 4096, Ordering::SeqCst))
    }
    unsafe fn free_segment(&self, _addr: usize, bytes: usize) {
        self.live.fetch_sub(bytes, Ordering::SeqCst);
    }
    fn mem_info(&self) -> Option<(usize, usize)> {
        None
    }
}

struct FakeFence(Arc<AtomicBool>);
impl Fence for FakeFence {
    fn is_done(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
    fn wait(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A stream whose fences all share one "completed" flag.
struct FakeStream {
    id: u64,
    done: Arc<AtomicBool>,
    recorded: Arc<AtomicUsize>,
}
impl StreamUse for FakeStream {
    fn id(&self) -> u64 {
        self.id
    }
    fn record(&self) -> Box<dyn Fence> {
        self.recorded.fetch_add(1, Ordering::SeqCst);
        Box::new(FakeFence(self.done.clone()))
    }
}

fn fake_alloc(cap: usize) -> StreamAwareAllocator<FakeSource> {
    StreamAwareAllocator::with_source(FakeSource {
        next: AtomicUsize::new(1 << 20),
        live: AtomicUsize::new(0),
        cap,
    })
}

#[test]
fn record_stream_defers_reuse_until_the_event_completes() {
    let a = fake_alloc(usize::MAX);
    let done = Arc::new(AtomicBool::new(false));
    let recorded = Arc::new(AtomicUsize::new(0));
    let b = a.allocate(1000, 1).unwrap();
    let addr = b.addr;
    // Used on stream 2 (twice: recorded once).
    for _ in 0..2 {
        a.record_use(
            addr,
            Box::new(FakeStream {
                id: 2,
                done: done.clone(),
                recorded: recorded.clone(),
            }),
        );
    }
    a.free(b);
    assert_eq!(
        recorded.load(Ordering::SeqCst),
        1,
        "one event per using stream"
    );
    let s = a.stats();
    assert_eq!(
        s.allocated_bytes.all.current, 0,
        "freed bytes stop counting as allocated at once"
    );
    assert_eq!(
        s.active_bytes.all.current, 1024,
        "but stay active until the event completes"
    );
    // Not reusable yet, even on its own stream.
    let c = a.allocate(1000, 1).unwrap();
    assert_ne!(c.addr, addr);
    a.free(c);
    // The event completes: the next allocation polls it and reuses the block.
    done.store(true, Ordering::SeqCst);
    let d = a.allocate(1000, 1).unwrap();
    assert_eq!(d.addr, addr, "reused after the event");
    a.free(d);
    let s = a.stats();
    assert_eq!(s.allocated_bytes.all.current, 0);
    assert_eq!(s.active_bytes.all.current, 0);
    assert_eq!(s.allocation.all.allocated, 3);
    assert_eq!(s.allocation.all.freed, 3);
}

#[test]
fn record_stream_on_the_allocation_stream_changes_nothing() {
    let a = fake_alloc(usize::MAX);
    let done = Arc::new(AtomicBool::new(false));
    let recorded = Arc::new(AtomicUsize::new(0));
    let b = a.allocate(1000, 3).unwrap();
    let addr = b.addr;
    a.record_use(
        addr,
        Box::new(FakeStream {
            id: 3,
            done: done.clone(),
            recorded: recorded.clone(),
        }),
    );
    a.free(b);
    assert_eq!(recorded.load(Ordering::SeqCst), 0, "no event recorded");
    assert_eq!(a.stats().active_bytes.all.current, 0, "back in the pool");
    let c = a.allocate(1000, 3).unwrap();
    assert_eq!(c.addr, addr, "reused at once, the fence never completed");
    a.free(c);
}

#[test]
fn record_stream_pending_blocks_are_waited_for_before_empty_cache_and_oom() {
    let a = fake_alloc(2 << 20); // room for exactly one small segment
    let done = Arc::new(AtomicBool::new(false));
    let recorded = Arc::new(AtomicUsize::new(0));
    let b = a.allocate(SMALL, 0).unwrap();
    a.record_use(
        b.addr,
        Box::new(FakeStream {
            id: 9,
            done: done.clone(),
            recorded: recorded.clone(),
        }),
    );
    a.free(b);
    // The only segment is pending: a request on another stream needs it
    // released, which waits for the fence (the failed first try counts as
    // one OOM and one retry).
    let c = a.allocate(SMALL, 5).unwrap();
    assert!(
        done.load(Ordering::SeqCst),
        "the pending fence was waited for"
    );
    a.free(c);
    // empty_cache also waits for pending blocks before releasing.
    let done2 = Arc::new(AtomicBool::new(false));
    let d = a.allocate(100, 0).unwrap();
    a.record_use(
        d.addr,
        Box::new(FakeStream {
            id: 9,
            done: done2.clone(),
            recorded,
        }),
    );
    a.free(d);
    a.empty_cache();
    assert!(done2.load(Ordering::SeqCst));
    assert_eq!(a.stats().reserved_bytes.all.current, 0);
}

const SMALL: usize = 1 << 20;

// --------------------------------------------------------------- GPU ---

fn gpu() -> Option<Device> {
    if super::is_available() {
        Some(Device::Cuda(0))
    } else {
        eprintln!("skipped: no CUDA device (the CUDA variant of this test did not run)");
        None
    }
}

fn t(data: &[f64], shape: &[usize], dt: DType, dev: Device) -> Tensor {
    Tensor::from_slice(data, shape, Device::Cpu)
        .unwrap()
        .to_dtype(dt)
        .unwrap()
        .to_device(dev)
        .unwrap()
}

fn host(x: &Tensor) -> Vec<f64> {
    x.to_vec::<f64>().unwrap()
}

fn close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan()) || (g - w).abs() <= tol * (1.0 + w.abs());
        assert!(ok, "{what}: element {i}: got {g}, want {w}");
    }
}

fn data(n: usize, seed: u64) -> Vec<f64> {
    let mut g = crate::random::Generator::new(seed);
    (0..n)
        .map(|_| (g.next_f64() * 8.0 - 4.0).round() / 2.0 + g.next_f64() * 0.1)
        .collect()
}

#[test]
fn gpu_softmax_matches_naive() {
    let Some(dev) = gpu() else { return };
    let (r, n) = (5, 2000);
    let v = data(r * n, 2);
    for log in [false, true] {
        let x = t(&v, &[r, n], DType::F32, dev);
        let y = Tensor::alloc(&[r, n], DType::F32, dev).unwrap();
        super::reduce::softmax(&Operand::of(&x), 1, &Operand::of(&y), log).unwrap();
        let mut want = Vec::new();
        for i in 0..r {
            let row = &v[i * n..(i + 1) * n];
            let m = row.iter().cloned().fold(f64::MIN, f64::max);
            let s: f64 = row.iter().map(|x| (x - m).exp()).sum();
            want.extend(row.iter().map(|x| {
                if log {
                    x - m - s.ln()
                } else {
                    (x - m).exp() / s
                }
            }));
        }
        close(&host(&y), &want, 1e-4, "softmax");
        // Backward, with dy = x: softmax dx = y * (dy - sum(dy * y)),
        // log_softmax dx = dy - exp(y) * sum(dy).
        let dx = Tensor::alloc(&[r, n], DType::F32, dev).unwrap();
        super::reduce::softmax_backward(
            &Operand::of(&x),
            &Operand::of(&y),
            1,
            &Operand::of(&dx),
            log,
        )
        .unwrap();
        let mut want_dx = Vec::new();
        for i in 0..r {
            let (dyr, yr) = (&v[i * n..(i + 1) * n], &want[i * n..(i + 1) * n]);
            if log {
                let sg: f64 = dyr.iter().sum();
                want_dx.extend((0..n).map(|j| dyr[j] - yr[j].exp() * sg));
            } else {
                let sg: f64 = (0..n).map(|j| dyr[j] * yr[j]).sum();
                want_dx.extend((0..n).map(|j| yr[j] * (dyr[j] - sg)));
            }
        }
        close(&host(&dx), &want_dx, 1e-3, "softmax backward");
        // Along dim 0 of the same data (strided rows).
        let y0 = Tensor::alloc(&[r, n], DType::F32, dev).unwrap();
        super::reduce::softmax(&Operand::of(&x), 0, &Operand::of(&y0), log).unwrap();
        let h = host(&y0);
        for j in (0..n).step_by(97) {
            let col: Vec<f64> = (0..r).map(|i| v[i * n + j]).collect();
            let m = col.iter().cloned().fold(f64::MIN, f64::max);
            let s: f64 = col.iter().map(|x| (x - m).exp()).sum();
            for i in 0..r {
                let w = if log {
                    col[i] - m - s.ln()
                } else {
                    (col[i] - m).exp() / s
                };
                close(&[h[i * n + j]], &[w], 1e-4, "softmax dim 0");
            }
        }
    }
}

#[test]
fn gpu_random_fills_have_the_right_moments() {
    let Some(dev) = gpu() else { return };
    let n = 1 << 20;
    for dt in [DType::F32, DType::F64, DType::BF16] {
        let u = Tensor::alloc(&[n], dt, dev).unwrap();
        let used = super::nn::rand_uniform(&Operand::of(&u), 2.0, 4.0, 42, 0).unwrap();
        assert_eq!(used, super::nn::counters(n, dt, true));
        let h = host(&u);
        assert!(h.iter().all(|&x| (2.0..4.0).contains(&x)));
        let mean = h.iter().sum::<f64>() / n as f64;
        assert!((mean - 3.0).abs() < 0.01, "{dt} uniform mean {mean}");
        let z = Tensor::alloc(&[n], dt, dev).unwrap();
        super::nn::rand_normal(&Operand::of(&z), 1.0, 2.0, 42, used).unwrap();
        let h = host(&z);
        let mean = h.iter().sum::<f64>() / n as f64;
        let var = h.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        assert!(
            (mean - 1.0).abs() < 0.02 && (var.sqrt() - 2.0).abs() < 0.03,
            "{dt} normal {mean} {var}"
        );
    }
    let bern = Tensor::alloc(&[n], DType::U8, dev).unwrap();
    super::nn::rand_bernoulli(&Operand::of(&bern), 0.3, 5, 0).unwrap();
    let h = host(&bern);
    assert!(h.iter().all(|&x| x == 0.0 || x == 1.0));
    let frac = h.iter().sum::<f64>() / n as f64;
    assert!((frac - 0.3).abs() < 0.01, "bernoulli fraction {frac}");
    // Same seed and offset, same values; another offset, other values.
    let a = Tensor::alloc(&[1000], DType::F32, dev).unwrap();
    let b = Tensor::alloc(&[1000], DType::F32, dev).unwrap();
    super::nn::rand_uniform(&Operand::of(&a), 0.0, 1.0, 7, 3).unwrap();
    super::nn::rand_uniform(&Operand::of(&b), 0.0, 1.0, 7, 3).unwrap();
    assert_eq!(host(&a), host(&b));
    super::nn::rand_uniform(&Operand::of(&b), 0.0, 1.0, 7, 4).unwrap();
    assert_ne!(host(&a), host(&b));
}

#[test]
fn gpu_layer_norm_and_dropout_match_naive() {
    let Some(dev) = gpu() else { return };
    let (r, c) = (6, 300);
    let v = data(r * c, 5);
    let gv = data(c, 6);
    let bv = data(c, 7);
    let x = t(&v, &[r, c], DType::F32, dev);
    let gamma = t(&gv, &[c], DType::F32, dev);
    let beta = t(&bv, &[c], DType::F32, dev);
    let y = Tensor::alloc(&[r, c], DType::F32, dev).unwrap();
    let mean = Tensor::alloc(&[r], DType::F32, dev).unwrap();
    let rstd = Tensor::alloc(&[r], DType::F32, dev).unwrap();
    let (ox, oy, om, or) = (
        Operand::of(&x),
        Operand::of(&y),
        Operand::of(&mean),
        Operand::of(&rstd),
    );
    super::nn::layer_norm(
        &ox,
        Some(&Operand::of(&gamma)),
        Some(&Operand::of(&beta)),
        &oy,
        &om,
        &or,
        1e-5,
    )
    .unwrap();
    let mut want = Vec::new();
    let mut xhat = Vec::new();
    let mut rs = Vec::new();
    for i in 0..r {
        let row = &v[i * c..(i + 1) * c];
        let mu = row.iter().sum::<f64>() / c as f64;
        let var = row.iter().map(|x| (x - mu).powi(2)).sum::<f64>() / c as f64;
        let s = 1.0 / (var + 1e-5).sqrt();
        rs.push(s);
        for j in 0..c {
            xhat.push((row[j] - mu) * s);
            want.push((row[j] - mu) * s * gv[j] + bv[j]);
        }
    }
    close(&host(&y), &want, 1e-4, "layer_norm");
    // Backward with dy = 1 + x/10.
    let dyv: Vec<f64> = v.iter().map(|x| 1.0 + x / 10.0).collect();
    let dy = t(&dyv, &[r, c], DType::F32, dev);
    let dx = Tensor::alloc(&[r, c], DType::F32, dev).unwrap();
    let dg = Tensor::alloc(&[c], DType::F32, dev).unwrap();
    let db = Tensor::alloc(&[c], DType::F32, dev).unwrap();
    super::nn::layer_norm_backward(
        &Operand::of(&dy),
        &ox,
        Some(&Operand::of(&gamma)),
        &om,
        &or,
        &Operand::of(&dx),
        Some(&Operand::of(&dg)),
        Some(&Operand::of(&db)),
    )
    .unwrap();
    let mut want_dx = Vec::new();
    for i in 0..r {
        let gg: Vec<f64> = (0..c).map(|j| dyv[i * c + j] * gv[j]).collect();
        let m1 = gg.iter().sum::<f64>() / c as f64;
        let m2 = (0..c).map(|j| gg[j] * xhat[i * c + j]).sum::<f64>() / c as f64;
        want_dx.extend((0..c).map(|j| rs[i] * (gg[j] - m1 - xhat[i * c + j] * m2)));
    }
    close(&host(&dx), &want_dx, 1e-3, "layer_norm dx");
    let want_dg: Vec<f64> = (0..c)
        .map(|j| (0..r).map(|i| dyv[i * c + j] * xhat[i * c + j]).sum())
        .collect();
    let want_db: Vec<f64> = (0..c)
        .map(|j| (0..r).map(|i| dyv[i * c + j]).sum())
        .collect();
    close(&host(&dg), &want_dg, 1e-3, "layer_norm dgamma");
    close(&host(&db), &want_db, 1e-4, "layer_norm dbeta");
    // Dropout: kept elements are scaled, dropped ones are 0, the rate is p.
    let n = 1 << 18;
    let xv = vec![1.5; n];
    let x = t(&xv, &[n], DType::F32, dev);
    let y = Tensor::alloc(&[n], DType::F32, dev).unwrap();
    let mask = Tensor::alloc(&[n], DType::Bool, dev).unwrap();
    super::nn::dropout(
        &Operand::of(&x),
        &Operand::of(&y),
        &Operand::of(&mask),
        0.25,
        1,
        0,
    )
    .unwrap();
    let (hy, hm) = (host(&y), host(&mask));
    for i in 0..n {
        assert_eq!(hy[i], if hm[i] != 0.0 { 2.0 } else { 0.0 });
    }
    let kept = hm.iter().sum::<f64>() / n as f64;
    assert!((kept - 0.75).abs() < 0.01, "kept fraction {kept}");
    let dx = Tensor::alloc(&[n], DType::F32, dev).unwrap();
    super::nn::dropout_backward(
        &Operand::of(&x),
        &Operand::of(&mask),
        &Operand::of(&dx),
        0.25,
    )
    .unwrap();
    assert_eq!(host(&dx), hy);
}

#[test]
fn gpu_matmul_matches_naive() {
    let Some(dev) = gpu() else { return };
    let (m, k, n) = (33, 70, 17);
    let av = data(m * k, 8);
    let bv = data(k * n, 9);
    let want: Vec<f64> = (0..m)
        .flat_map(|i| (0..n).map(move |j| (i, j)))
        .map(|(i, j)| (0..k).map(|l| av[i * k + l] * bv[l * n + j]).sum())
        .collect();
    for (dt, tol) in [
        (DType::F32, 1e-4),
        (DType::F64, 1e-12),
        (DType::F16, 1e-2),
        (DType::BF16, 3e-2),
    ] {
        let a = t(&av, &[m, k], dt, dev);
        let b = t(&bv, &[k, n], dt, dev);
        let c = Tensor::alloc(&[m, n], dt, dev).unwrap();
        super::blas::matmul(&Operand::of(&a), &Operand::of(&b), &Operand::of(&c)).unwrap();
        close(&host(&c), &want, tol, &format!("matmul {dt}"));
        // A transposed A (stored [k, m]) and a sliced-with-step B (copied).
        let at = t(&av, &[m, k], dt, dev)
            .t()
            .unwrap()
            .contiguous()
            .unwrap()
            .t()
            .unwrap();
        let bb = t(
            &bv.iter().flat_map(|&x| [x, -1.0]).collect::<Vec<_>>(),
            &[k, n, 2],
            dt,
            dev,
        )
        .select(2, 0)
        .unwrap();
        let c2 = Tensor::alloc(&[m, n], dt, dev).unwrap();
        super::blas::matmul(&Operand::of(&at), &Operand::of(&bb), &Operand::of(&c2)).unwrap();
        close(
            &host(&c2),
            &want,
            tol,
            &format!("matmul {dt}, strided operands"),
        );
    }
    // Batched with B broadcast (batch stride 0).
    let a = t(
        &av.iter().chain(av.iter()).cloned().collect::<Vec<_>>(),
        &[2, m, k],
        DType::F32,
        dev,
    );
    let b = t(&bv, &[1, k, n], DType::F32, dev)
        .expand(&[2, k as isize, n as isize])
        .unwrap();
    let c = Tensor::alloc(&[2, m, n], DType::F32, dev).unwrap();
    super::blas::matmul(&Operand::of(&a), &Operand::of(&b), &Operand::of(&c)).unwrap();
    close(
        &host(&c),
        &[want.clone(), want].concat(),
        1e-4,
        "batched matmul",
    );
    let i = Tensor::alloc(&[m, k], DType::I32, dev).unwrap();
    let e = super::blas::matmul(&Operand::of(&i), &Operand::of(&i), &Operand::of(&i)).unwrap_err();
    assert!(e.to_string().contains("matmul"), "{e}");
}

// ------------------------------------------- host-side review (rev-host) ---

/// cuBLAS's own argument checks for `cublasGemmStridedBatchedEx` (it answers
/// `CUBLAS_STATUS_INVALID_VALUE` otherwise): `m, n, k >= 0`, and each
/// leading dimension at least the row count of the matrix as stored.
fn cublas_accepts(p: &GemmPlan) -> bool {
    let rows_a = if p.transa { p.k } else { p.m };
    let rows_b = if p.transb { p.n } else { p.k };
    p.lda >= rows_a.max(1) && p.ldb >= rows_b.max(1) && p.ldc >= p.m.max(1)
}

#[test]
fn every_gemm_plan_is_one_cublas_accepts_and_computes_the_product() {
    // Every small shape and every stride pattern (0 = broadcast, 1 = unit,
    // larger = padded or transposed): whatever `plan` accepts must pass
    // cuBLAS's checks and compute the row-major product.
    let strides = [0usize, 1, 2, 3, 7];
    let mut accepted = 0;
    for (m, k, n) in [
        (1, 1, 1),
        (1, 3, 2),
        (3, 1, 2),
        (2, 3, 1),
        (3, 2, 4),
        (4, 4, 4),
    ] {
        for &ars in &strides {
            for &acs in &strides {
                for &brs in &strides {
                    for &bcs in &strides {
                        let a = Mat {
                            ptr: 10,
                            rows: m,
                            cols: k,
                            rs: ars,
                            cs: acs,
                            bs: 0,
                        };
                        let b = Mat {
                            ptr: 500,
                            rows: k,
                            cols: n,
                            rs: brs,
                            cs: bcs,
                            bs: 0,
                        };
                        let c = Mat {
                            ptr: 1000,
                            rows: m,
                            cols: n,
                            rs: n,
                            cs: 1,
                            bs: 0,
                        };
                        let Some(p) = plan(&a, &b, &c, 1) else {
                            continue;
                        };
                        accepted += 1;
                        assert!(cublas_accepts(&p), "{a:?} {b:?}: {p:?}");
                        let mut mem = vec![0.0; 2000];
                        for r in 0..m {
                            for q in 0..k {
                                mem[elem(&a, 0, r, q)] = (r * 5 + q) as f64 - 3.0;
                            }
                        }
                        for r in 0..k {
                            for q in 0..n {
                                mem[elem(&b, 0, r, q)] = (r * 2 + q * 3) as f64 - 4.0;
                            }
                        }
                        // Aliased elements (stride 0 or overlapping rows)
                        // hold the last value written: read the inputs back.
                        let av: Vec<f64> =
                            (0..m * k).map(|i| mem[elem(&a, 0, i / k, i % k)]).collect();
                        let bv: Vec<f64> =
                            (0..k * n).map(|i| mem[elem(&b, 0, i / n, i % n)]).collect();
                        emulate(&p, &mut mem);
                        for r in 0..m {
                            for q in 0..n {
                                let want: f64 = (0..k).map(|l| av[r * k + l] * bv[l * n + q]).sum();
                                assert_eq!(mem[elem(&c, 0, r, q)], want, "{a:?} {b:?} [{r},{q}]");
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(accepted > 100, "only {accepted} layouts accepted");
}

#[test]
fn elapsed_time_needs_two_timing_events_and_a_driver_with_the_v2_entry_point() {
    use super::event::elapsed_unsupported;
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
    if !super::probe::probe().driver {
        assert!(!super::probe::has_elapsed_v2());
    }
}

#[test]
fn a_pinned_block_whose_event_cannot_be_queried_is_not_reused() {
    use super::pinned::first_reusable;
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
    <super::StreamGuard as AmbiguousIfSend<_>>::check();
    // ... while a stream itself may be shared across threads.
    fn send_sync<T: Send + Sync>() {}
    send_sync::<super::Stream>();
}

#[test]
fn gpu_dropping_a_stream_releases_its_cublas_handle() {
    let Some(dev) = gpu() else { return };
    let g = super::device::gpu("test", 0).unwrap();
    let side = super::Stream::new(dev).unwrap();
    let id = side.id();
    let a = Tensor::ones(&[4, 3], DType::F32, dev).unwrap();
    let b = Tensor::ones(&[3, 5], DType::F32, dev).unwrap();
    side.wait_stream(&super::current_stream(dev).unwrap())
        .unwrap();
    let c = super::with_stream(&side, || a.matmul(&b).unwrap());
    side.synchronize().unwrap();
    assert!(
        g.blas.lock().unwrap().contains_key(&id),
        "made on first use"
    );
    assert_eq!(host(&c), vec![3.0; 20]);
    drop(side);
    assert!(
        !g.blas.lock().unwrap().contains_key(&id),
        "the handle (which holds the stream) goes with the stream"
    );
}

// ------------------------------------------- kernel review (no GPU) ---

/// The scalar of `binary_scalar` reaches the kernel converted as the CPU's
/// `Num::scalar` converts it: integers wrap through i64 (`u8 + (-2)` adds
/// 254), where `scalar_bits` (fill, clamp) saturates.
#[test]
fn arith_scalar_bits_wrap_like_the_cpu() {
    use super::elementwise::arith_scalar_bits;
    use crate::backend::cpu::num::Num;
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
            <u8 as Num>::scalar(v) as u64,
            "u8 {v}"
        );
        assert_eq!(
            arith_scalar_bits(DType::I32, v),
            <i32 as Num>::scalar(v) as u32 as u64,
            "i32 {v}"
        );
        assert_eq!(
            arith_scalar_bits(DType::I64, v),
            <i64 as Num>::scalar(v) as u64,
            "i64 {v}"
        );
        for dt in [DType::F32, DType::F64, DType::F16, DType::BF16, DType::Bool] {
            assert_eq!(arith_scalar_bits(dt, v), scalar_bits(dt, v), "{dt} {v}");
        }
    }
    assert_eq!(arith_scalar_bits(DType::U8, -2.0), 254);
    assert_eq!(arith_scalar_bits(DType::I32, 4294967301.0), 5);
    assert_eq!(scalar_bits(DType::U8, -2.0), 0, "fill saturates");
}

// ------------------------------------------------ split reductions ---

#[test]
fn split_count_fills_the_device_only_for_few_long_reductions() {
    use super::reduce::split_count;
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
