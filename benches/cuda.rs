//! Issue 6 benchmarks on CUDA device 0, side by side with
//! `bench/torch_cuda.py` (the same workloads in PyTorch on the same device):
//!
//! * elementwise add of two 256M f32 tensors into a preallocated output
//!   (GB/s counting 3 × 1 GiB moved), next to a device-to-device copy of
//!   the same 1 GiB (`copy_`, GB/s counting 2 × 1 GiB) measured in the same
//!   run: the target is add ≥ 0.85 × copy;
//! * a full sum of 256M f32 (GB/s; not one of the targets: it
//!   shows the split reduction);
//! * allocation + free served from the cache: `Tensor::empty(&[256], F32)`
//!   + drop (ns per pair, host clock), and the caching allocator alone;
//! * what cudarc's per-allocation event tracking costs (its `alloc` + drop
//!   with tracking on and off), which tensorscope turns off;
//! * matmul n × n × n for n in 1024, 2048, 4096, 8192, in f32 (TF32 off)
//!   and bf16 (TFLOP/s; target ≥ 0.9 × PyTorch's cuBLAS);
//! * softmax over the last dimension and LayerNorm (weight and bias) of a
//!   [4096, 4096] f32 tensor, forward under `no_grad` (GB/s counting one
//!   read and one write);
//! * the small-op launch overhead: 1,000 chained adds of 1-element tensors
//!   (host clock per op, the device waited for at the end);
//! * one Adam training step of the MLP 784-1024-1024-10 at batch 128 (ms)
//!   and its `max_memory_allocated` (bytes, peak reset before the step);
//! * conv2d 3x3 (padding 1, no bias) at three ResNet stage shapes, batch
//!   32, f32 (TF32 off on both sides, cuDNN's included): forward under
//!   `no_grad`, and forward + backward (input and weight gradients) with
//!   the backward's peak `max_memory_allocated` above its start
//!   (`bench/results/models.md`, issue 17 item 9).
//!
//! GPU work is timed with CUDA events on the current stream after warm-up,
//! one sample per call, and the median sample is the figure.
//!
//! Output: one `name value unit` line per figure (lines starting with `#`
//! are information), parsed by `bench/gpu/summary.py`. Without a usable CUDA
//! device it prints `skipped: no CUDA device (...)` and exits 0.
//!
//! `cargo bench --features cuda --bench cuda [-- --filter NAME]`; on a GPU
//! machine without a toolchain, `bench/gpu/run.sh` runs the carried binary.

use std::hint::black_box;
use std::time::Instant;
use tensorscope::autograd::no_grad_guard;
use tensorscope::backend::cuda::{self, Event};
use tensorscope::nn::{LayerNorm, Module};
use tensorscope::optim::{Adam, AdamConfig};
use tensorscope::{memory, ConvOptions, DType, Device, Padding, Tensor};

#[path = "common/mlp_model.rs"]
mod mlp_model;
#[path = "common/timing.rs"]
mod timing;
use mlp_model::{adam_step, batch, mlp};
use timing::median;

type R<T> = Result<T, Box<dyn std::error::Error>>;

const PAIRS: usize = 10_000;

/// Where and how big: the real run on CUDA device 0, or `--smoke`, which runs
/// every workload and check on the CPU at tiny sizes (each name prefixed
/// `smoke_`) so the code is exercised on machines without a GPU.
struct Cfg {
    dev: Device,
    /// Elements per add operand (256M: 1 GiB of f32).
    n_add: usize,
    /// Matmul sides.
    mm: &'static [usize],
    /// Rows and columns of the softmax / LayerNorm input.
    rows: usize,
    /// Prefix of every output name.
    pre: &'static str,
}

impl Cfg {
    /// `n` repetitions, or at most 2 in a smoke run.
    fn reps(&self, n: usize) -> usize {
        if self.pre.is_empty() {
            n
        } else {
            n.min(2)
        }
    }

    fn sync(&self) -> R<()> {
        if self.dev.is_cuda() {
            cuda::synchronize(self.dev)?;
        }
        Ok(())
    }
}

/// Median milliseconds of `f` on the GPU: `warmup` calls, then `reps`
/// samples, each between two events recorded on the current stream. (On the
/// CPU, for `--smoke`: the host clock.)
fn gpu_ms(dev: Device, warmup: usize, reps: usize, mut f: impl FnMut() -> R<()>) -> R<f64> {
    for _ in 0..warmup {
        f()?;
    }
    if dev.is_cpu() {
        return Ok(host_ns(reps, 1, f)? * 1e-6);
    }
    cuda::synchronize(dev)?;
    let stream = cuda::current_stream(dev)?;
    let (start, end) = (Event::new(dev, true)?, Event::new(dev, true)?);
    let mut samples = Vec::with_capacity(reps);
    for _ in 0..reps {
        start.record(&stream)?;
        f()?;
        end.record(&stream)?;
        end.synchronize()?;
        samples.push(start.elapsed_ms(&end)? as f64);
    }
    Ok(median(samples))
}

/// Median nanoseconds per call of `f` on the host clock: batches of `batch`
/// calls after one warm-up batch.
fn host_ns(reps: usize, batch: usize, mut f: impl FnMut() -> R<()>) -> R<f64> {
    for _ in 0..batch {
        f()?;
    }
    let mut samples = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        for _ in 0..batch {
            f()?;
        }
        samples.push(t.elapsed().as_secs_f64() * 1e9 / batch as f64);
    }
    Ok(median(samples))
}

/// The first `n` elements of a flat tensor, as f64 on the host.
fn head(t: &Tensor, n: usize) -> R<Vec<f64>> {
    Ok(t.narrow(0, 0, n)?
        .to_dtype(DType::F64)?
        .to_device(Device::Cpu)?
        .to_vec::<f64>()?)
}

fn add_and_copy(cfg: &Cfg) -> R<()> {
    let (dev, n, pre) = (cfg.dev, cfg.n_add, cfg.pre);
    let a = Tensor::rand(&[n], DType::F32, dev)?;
    let b = Tensor::rand(&[n], DType::F32, dev)?;
    let mut c = Tensor::empty(&[n], DType::F32, dev)?;
    let add = gpu_ms(dev, cfg.reps(5), cfg.reps(30), || {
        a.add_out(&b, &mut c)?;
        Ok(())
    })?;
    let (ha, hb, hc) = (head(&a, 4096)?, head(&b, 4096)?, head(&c, 4096)?);
    for i in 0..4096 {
        let want = (ha[i] as f32 + hb[i] as f32) as f64;
        if hc[i] != want {
            return Err(format!("add_out: c[{i}] = {} but a + b = {want}", hc[i]).into());
        }
    }
    let copy = gpu_ms(dev, cfg.reps(5), cfg.reps(30), || {
        c.copy_(&a)?;
        Ok(())
    })?;
    if head(&c, 4096)? != ha {
        return Err("copy_ copied wrong values".into());
    }
    let bytes = (n * 4) as f64;
    let add_gbs = 3.0 * bytes / (add * 1e-3) / 1e9;
    let copy_gbs = 2.0 * bytes / (copy * 1e-3) / 1e9;
    println!("{pre}add_256M_f32 {add_gbs:.1} GB/s");
    println!("{pre}add_256M_f32_time {add:.4} ms");
    println!("{pre}copy_d2d_256M_f32 {copy_gbs:.1} GB/s");
    println!("{pre}copy_d2d_256M_f32_time {copy:.4} ms");
    println!(
        "{pre}add_over_copy_bandwidth {:.3} ratio",
        add_gbs / copy_gbs
    );
    Ok(())
}

/// A full sum of 256M f32 (GB/s counting the 1 GiB read): a reduction to
/// one output, which the CUDA backend splits across blocks.
fn full_sum(cfg: &Cfg) -> R<()> {
    let (dev, n, pre) = (cfg.dev, cfg.n_add, cfg.pre);
    let x = Tensor::rand(&[n], DType::F32, dev)?;
    let ms = gpu_ms(dev, cfg.reps(5), cfg.reps(30), || {
        black_box(x.sum_all()?);
        Ok(())
    })?;
    let got = x.sum_all()?.to_dtype(DType::F64)?.item::<f64>()?;
    let want = x.to_dtype(DType::F64)?.sum_all()?.item::<f64>()?;
    if (got - want).abs() > 1e-4 * want.abs() {
        return Err(format!("sum: {got} but {want} in f64").into());
    }
    println!(
        "{pre}sum_256M_f32 {:.1} GB/s",
        (n * 4) as f64 / (ms * 1e-3) / 1e9
    );
    println!("{pre}sum_256M_f32_time {ms:.4} ms");
    Ok(())
}

/// conv2d 3x3, padding 1, at ResNet stage shapes `[32, c, hw, hw]` with
/// `c` output channels: forward (no graph), forward + backward, and the
/// peak allocation of forward + backward above its start.
fn conv2d(cfg: &Cfg) -> R<()> {
    let (dev, pre) = (cfg.dev, cfg.pre);
    let shapes: &[(usize, usize, usize)] = if pre.is_empty() {
        &[(32, 64, 56), (32, 128, 28), (32, 256, 14)]
    } else {
        &[(2, 4, 6)]
    };
    let pad = ConvOptions {
        padding: Padding::Explicit([1, 1]),
        ..ConvOptions::default()
    };
    for &(b, c, hw) in shapes {
        let name = format!("conv2d_{b}x{c}x{hw}x{hw}_3x3");
        let x = Tensor::randn(&[b, c, hw, hw], DType::F32, dev)?;
        let w = Tensor::randn(&[c, c, 3, 3], DType::F32, dev)?.mul_scalar(0.05)?;
        let ms = {
            let _g = no_grad_guard();
            gpu_ms(dev, cfg.reps(3), cfg.reps(20), || {
                black_box(x.conv2d(&w, None, &pad)?);
                Ok(())
            })?
        };
        // One output element against a direct sum on the host.
        let y = {
            let _g = no_grad_guard();
            x.conv2d(&w, None, &pad)?
        };
        let (oc, oy, ox) = (c / 2, hw / 2, hw / 3);
        let at = |v: usize| v as isize;
        let got = y
            .select(0, 0)?
            .select(0, at(oc))?
            .select(0, at(oy))?
            .select(0, at(ox))?;
        let got = got.to_dtype(DType::F64)?.item::<f64>()?;
        let xs = x
            .select(0, 0)?
            .to_dtype(DType::F64)?
            .to_device(Device::Cpu)?;
        let ws = w
            .select(0, at(oc))?
            .to_dtype(DType::F64)?
            .to_device(Device::Cpu)?;
        let (xv, wv) = (xs.to_vec::<f64>()?, ws.to_vec::<f64>()?);
        let mut want = 0.0;
        for ci in 0..c {
            for ky in 0..3 {
                for kx in 0..3 {
                    let (iy, ix) = ((oy + ky) as isize - 1, (ox + kx) as isize - 1);
                    if iy >= 0 && ix >= 0 && (iy as usize) < hw && (ix as usize) < hw {
                        want += xv[(ci * hw + iy as usize) * hw + ix as usize]
                            * wv[(ci * 3 + ky) * 3 + kx];
                    }
                }
            }
        }
        if (got - want).abs() > 1e-3 * (1.0 + want.abs()) {
            return Err(format!("{name}: y = {got} but the host says {want}").into());
        }
        println!("{pre}{name}_fwd {ms:.4} ms");
        let xg = x.detach().requires_grad_(true)?;
        let wg = w.detach().requires_grad_(true)?;
        let gy = Tensor::randn(&[b, c, hw, hw], DType::F32, dev)?;
        let mut step = || -> R<()> {
            xg.conv2d(&wg, None, &pad)?.backward_with(&gy, false)?;
            xg.zero_grad();
            wg.zero_grad();
            Ok(())
        };
        let ms = gpu_ms(dev, cfg.reps(3), cfg.reps(20), &mut step)?;
        println!("{pre}{name}_fwd_bwd {ms:.4} ms");
        if dev.is_cuda() {
            cfg.sync()?;
            memory::reset_peak_memory_stats(dev);
            let start = memory::memory_allocated(dev);
            step()?;
            cfg.sync()?;
            let peak = memory::max_memory_allocated(dev);
            println!(
                "{pre}{name}_fwd_bwd_peak_above_start {} bytes",
                peak - start
            );
        }
    }
    Ok(())
}

fn alloc_free(cfg: &Cfg) -> R<()> {
    let (dev, pre) = (cfg.dev, cfg.pre);
    let ns = host_ns(cfg.reps(50), PAIRS, || {
        black_box(Tensor::empty(&[256], DType::F32, dev)?);
        Ok(())
    })?;
    println!("{pre}alloc_free_cached {ns:.1} ns");
    let raw = host_ns(cfg.reps(50), PAIRS, || {
        memory::bench_alloc_free(dev, 1024)?;
        Ok(())
    })?;
    println!("{pre}alloc_free_raw {raw:.1} ns");
    Ok(())
}

/// What cudarc's own per-allocation event tracking costs, which
/// tensorscope turns off (src/backend/cuda/device.rs): cudarc's
/// `CudaStream::alloc` + drop of 1 KiB on two fresh handles to device 0's
/// primary context, one with tracking on (cudarc's default: two
/// `cuEventCreate` per allocation and two `cuEventDestroy` per free) and one
/// with it off. Both go through cudarc's stream-ordered
/// `cuMemAllocAsync`/`cuMemFreeAsync`, so the difference is the tracking.
/// CUDA only (a smoke run prints a note).
fn cudarc_tracking(cfg: &Cfg) -> R<()> {
    let Device::Cuda(ordinal) = cfg.dev else {
        println!("# {}cudarc_tracking: CUDA only", cfg.pre);
        return Ok(());
    };
    for (name, tracking) in [("on", true), ("off", false)] {
        let ctx = cudarc::driver::CudaContext::new(ordinal)?;
        if !tracking {
            // SAFETY: this context's slices are used on its default stream only.
            unsafe { ctx.disable_event_tracking() };
        }
        let stream = ctx.default_stream();
        let ns = host_ns(cfg.reps(50), PAIRS, || {
            // SAFETY: the slice is never read or written; it is freed at once.
            let s = unsafe { stream.alloc::<f32>(256) }?;
            drop(black_box(s));
            Ok(())
        })?;
        stream.synchronize()?;
        println!("cudarc_alloc_free_tracking_{name} {ns:.1} ns");
    }
    Ok(())
}

/// Every matmul side of `cfg` in `dt`; `tag` is "f32" or "bf16".
fn matmuls(cfg: &Cfg, dt: DType, tag: &str) -> R<()> {
    for &mm in cfg.mm {
        // About 0.2 s of samples at the slowest (f32 8192: ~25 ms each).
        let reps = (30usize * 8192 * 8192 / (mm * mm)).clamp(10, 200);
        matmul(cfg, dt, mm, &format!("matmul_{mm}_{tag}"), reps)?;
    }
    Ok(())
}

fn matmul(cfg: &Cfg, dt: DType, mm: usize, name: &str, reps: usize) -> R<()> {
    let (dev, pre) = (cfg.dev, cfg.pre);
    let a = Tensor::randn(&[mm, mm], DType::F32, dev)?.to_dtype(dt)?;
    let b = Tensor::randn(&[mm, mm], DType::F32, dev)?.to_dtype(dt)?;
    let mut c = Tensor::empty(&[mm, mm], dt, dev)?;
    let ms = gpu_ms(dev, cfg.reps(3), cfg.reps(reps), || {
        a.matmul_out(&b, &mut c)?;
        Ok(())
    })?;
    // One row of the result against a host dot product in f64 (the inputs
    // are exact in f64; the tolerance covers accumulation order and, for
    // bf16, the output's rounding).
    let row = |t: &Tensor| -> R<Vec<f64>> { head(&t.select(0, 0)?, mm) };
    let a0 = row(&a)?;
    let c0 = row(&c)?;
    let bt = b
        .narrow(1, 0, 4)?
        .to_dtype(DType::F64)?
        .to_device(Device::Cpu)?;
    let bt = bt.to_vec::<f64>()?; // [mm, 4] row-major
    for j in 0..4 {
        let want: f64 = (0..mm).map(|k| a0[k] * bt[k * 4 + j]).sum();
        let tol = if dt == DType::F32 { 1e-3 } else { 0.25 };
        if (c0[j] - want).abs() > tol * (1.0 + want.abs()) {
            return Err(format!("{name}: c[0, {j}] = {} but the host says {want}", c0[j]).into());
        }
    }
    let tflops = 2.0 * (mm as f64).powi(3) / (ms * 1e-3) / 1e12;
    println!("{pre}{name} {tflops:.2} TFLOP/s");
    println!("{pre}{name}_time {ms:.4} ms");
    Ok(())
}

/// Softmax over the last dimension and LayerNorm over the last dimension
/// (weight and bias) of a [rows, rows] f32 tensor, forward only, into fresh
/// outputs as a user calls them (GB/s counting one read and one write).
fn softmax_layernorm(cfg: &Cfg) -> R<()> {
    let (dev, n, pre) = (cfg.dev, cfg.rows, cfg.pre);
    let _g = no_grad_guard();
    let x = Tensor::randn(&[n, n], DType::F32, dev)?;
    let bytes = 2.0 * (n * n * 4) as f64;
    let ms = gpu_ms(dev, cfg.reps(5), cfg.reps(50), || {
        black_box(x.softmax(-1)?);
        Ok(())
    })?;
    // Row 0 against a host softmax in f64.
    let got = head(&x.softmax(-1)?.select(0, 0)?, n)?;
    let row = head(&x.select(0, 0)?, n)?;
    let m = row.iter().cloned().fold(f64::MIN, f64::max);
    let z: f64 = row.iter().map(|v| (v - m).exp()).sum();
    for (j, (g, v)) in got.iter().zip(&row).enumerate() {
        let want = (v - m).exp() / z;
        if (g - want).abs() > 1e-6 + 1e-4 * want {
            return Err(format!("softmax: y[0, {j}] = {g} but the host says {want}").into());
        }
    }
    println!(
        "{pre}softmax_{n}x{n}_f32 {:.1} GB/s",
        bytes / (ms * 1e-3) / 1e9
    );
    println!("{pre}softmax_{n}x{n}_f32_time {ms:.4} ms");

    let ln = LayerNorm::with_options(&[n], 1e-5, DType::F32, dev)?;
    let ms = gpu_ms(dev, cfg.reps(5), cfg.reps(50), || {
        black_box(ln.forward(&x)?);
        Ok(())
    })?;
    let got = head(&ln.forward(&x)?.select(0, 0)?, n)?;
    let mean = row.iter().sum::<f64>() / n as f64;
    let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n as f64;
    for (j, (g, v)) in got.iter().zip(&row).enumerate() {
        let want = (v - mean) / (var + 1e-5).sqrt();
        if (g - want).abs() > 1e-4 * (1.0 + want.abs()) {
            return Err(format!("layer_norm: y[0, {j}] = {g} but the host says {want}").into());
        }
    }
    println!(
        "{pre}layernorm_{n}x{n}_f32 {:.1} GB/s",
        bytes / (ms * 1e-3) / 1e9
    );
    println!("{pre}layernorm_{n}x{n}_f32_time {ms:.4} ms");
    Ok(())
}

/// The small-op launch overhead: 1,000 chained adds of 1-element tensors
/// (`c = c + one`), host clock per op, the device waited for at the end of
/// each batch, so the figure is what a user's loop of tiny ops costs.
fn launch_overhead(cfg: &Cfg) -> R<()> {
    let (dev, pre) = (cfg.dev, cfg.pre);
    let _g = no_grad_guard();
    let one = Tensor::ones(&[1], DType::F32, dev)?;
    const CHAIN: usize = 1000;
    let ns = host_ns(cfg.reps(20), 1, || {
        let mut c = Tensor::zeros(&[1], DType::F32, dev)?;
        for _ in 0..CHAIN {
            c = c.add(&one)?;
        }
        cfg.sync()?;
        let v = c.to_device(Device::Cpu)?.item::<f32>()?;
        if v != CHAIN as f32 {
            return Err(format!("chained adds: {v}, not {CHAIN}").into());
        }
        Ok(())
    })? / CHAIN as f64;
    println!("{pre}chain_add_1elem {:.2} us", ns * 1e-3);
    Ok(())
}

fn mlp_adam(cfg: &Cfg) -> R<()> {
    let (dev, pre) = (cfg.dev, cfg.pre);
    tensorscope::manual_seed(0);
    let mut net = mlp()?;
    net.to_device(dev)?;
    let (x, y) = batch(dev)?;
    let mut opt = Adam::new(AdamConfig::default())?;
    let ms = gpu_ms(dev, cfg.reps(10), cfg.reps(50), || {
        Ok(adam_step(&mut net, &mut opt, &x, &y)?)
    })?;
    println!("{pre}mlp_adam_step {ms:.4} ms");
    cfg.sync()?;
    memory::reset_peak_memory_stats(dev);
    let start = memory::memory_allocated(dev);
    adam_step(&mut net, &mut opt, &x, &y)?;
    cfg.sync()?;
    let peak = memory::max_memory_allocated(dev);
    println!("{pre}mlp_adam_step_max_memory_allocated {peak} bytes");
    println!("{pre}mlp_adam_step_memory_at_start {start} bytes");
    println!("{pre}mlp_adam_step_peak_above_start {} bytes", peak - start);
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let filter = args
        .iter()
        .position(|a| a == "--filter")
        .and_then(|i| args.get(i + 1).cloned());
    let cfg = if args.iter().any(|a| a == "--smoke") {
        println!("# smoke run: every workload and check on the CPU at tiny sizes (not a result)");
        Cfg {
            dev: Device::Cpu,
            n_add: 1 << 16,
            mm: &[32, 64],
            rows: 64,
            pre: "smoke_",
        }
    } else if cuda::is_available() {
        Cfg {
            dev: Device::Cuda(0),
            n_add: 256 << 20,
            mm: &[1024, 2048, 4096, 8192],
            rows: 4096,
            pre: "",
        }
    } else {
        let lib = cuda::libraries();
        let why = lib.error.unwrap_or_else(|| {
            format!(
                "driver {}, nvrtc {}, {} device(s)",
                lib.driver, lib.nvrtc, lib.devices
            )
        });
        println!("skipped: no CUDA device ({why})");
        return;
    };
    if let Err(e) = run(&cfg, filter.as_deref()) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

/// Runs every wanted workload; one that fails prints `error NAME: ...` and
/// the others still run (a GPU session is short). `Err` if any failed.
fn run(cfg: &Cfg, filter: Option<&str>) -> R<()> {
    let want = |n: &str| filter.is_none_or(|f| n.contains(f));
    let dev = cfg.dev;
    if dev.is_cuda() {
        let (major, minor) = cuda::compute_capability(dev)?;
        let lib = cuda::libraries();
        println!(
            "# device {} (sm_{major}{minor}), driver {:?}, nvrtc {:?}, tensorscope {}",
            cuda::device_name(dev)?,
            lib.driver_version,
            lib.nvrtc_version,
            env!("CARGO_PKG_VERSION")
        );
        cuda::set_allow_tf32(false);
        println!("# allow_tf32 {}", cuda::allow_tf32());
    }
    let workloads: [(&str, &dyn Fn() -> R<()>); 10] = [
        ("add", &|| add_and_copy(cfg)),
        ("sum", &|| full_sum(cfg)),
        ("alloc", &|| alloc_free(cfg)),
        ("cudarc_tracking", &|| cudarc_tracking(cfg)),
        ("matmul_f32", &|| matmuls(cfg, DType::F32, "f32")),
        ("matmul_bf16", &|| matmuls(cfg, DType::BF16, "bf16")),
        ("softmax_layernorm", &|| softmax_layernorm(cfg)),
        ("launch", &|| launch_overhead(cfg)),
        ("mlp", &|| mlp_adam(cfg)),
        ("conv", &|| conv2d(cfg)),
    ];
    let mut failed = Vec::new();
    for (name, f) in workloads {
        if !want(name) {
            continue;
        }
        if let Err(e) = f() {
            println!("error {name}: {e}");
            failed.push(name);
        }
        memory::empty_cache(dev);
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("failed: {}", failed.join(", ")).into())
    }
}
