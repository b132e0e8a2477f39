//! Long-running processes, with memory checked exactly through the
//! allocator: (a) training steps return to the same allocated baseline and
//! stop reserving after step 2; (b) a model built and dropped 1,000 times
//! leaves nothing allocated and `empty_cache` returns every segment; (c) an
//! inference loop of varying batch sizes keeps reserved memory flat; (d) a
//! chunked service takes nothing from the system after its first request.
//!
//! Sizes are chosen so the file runs in a few seconds in debug mode: (a)
//! 2,000 Adam steps of a 16-32-4 MLP at batch 32; (b) 1,000 builds of a
//! 32-64-8 MLP with one forward/backward each; (c) 2,000 requests of batch
//! 1..=64 through a 64-128-10 MLP. `examples/long_running.rs` runs the full
//! counts (10,000 steps, 10,000 requests) and prints the figures.

use tensorscope::autograd::no_grad_guard;
use tensorscope::nn::{Linear, Module, ReLU, Sequential};
use tensorscope::optim::{Adam, AdamConfig, Optimizer};
use tensorscope::{memory, DType, Device, Generator, Result, Tensor};
fn lock() -> crate::common::Guard {
    crate::common::serial()
}

const CPU: Device = Device::Cpu;

/// An `i`-`h`-`o` MLP (Linear, ReLU, Linear) with PyTorch's default
/// initialisation, drawn from the global generator seeded with `seed`.
fn mlp(i: usize, h: usize, o: usize, seed: u64) -> Result<Sequential> {
    tensorscope::manual_seed(seed);
    let mut net = Sequential::new();
    net.add(Linear::new(i, h)?)
        .add(ReLU)
        .add(Linear::new(h, o)?);
    Ok(net)
}

/// A small deterministic integer generator (xorshift64*), independent of
/// the library.
struct Xs(u64);
impl Xs {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545F4914F6CDD1D) % n
    }
}

#[test]
fn a_training_steps_return_to_the_same_baseline() {
    let _l = lock();
    let mut g = Generator::new(1);
    let mut model = mlp(16, 32, 4, 1).unwrap();
    let x = Tensor::randn_with(&[32, 16], DType::F32, CPU, &mut g).unwrap();
    let y = x.narrow(1, 0, 4).unwrap().sin().unwrap();
    let mut opt = Adam::new(AdamConfig {
        lr: 1e-2,
        ..Default::default()
    })
    .unwrap();
    let mut step = || -> f32 {
        let loss = model
            .forward(&x)
            .unwrap()
            .sub(&y)
            .unwrap()
            .square()
            .unwrap()
            .mean_all()
            .unwrap();
        loss.backward().unwrap();
        opt.step(&mut model).unwrap();
        opt.zero_grad(&model);
        loss.item::<f32>().unwrap()
    };
    let first_loss = step();
    let baseline = memory::memory_allocated(CPU);
    step();
    let reserved = memory::memory_reserved(CPU);
    let mut last_loss = 0.0;
    for i in 3..=2000 {
        last_loss = step();
        assert_eq!(
            memory::memory_allocated(CPU),
            baseline,
            "allocated after step {i}"
        );
        assert_eq!(
            memory::memory_reserved(CPU),
            reserved,
            "reserved after step {i}"
        );
    }
    assert!(
        last_loss < first_loss * 0.2,
        "it trained: {first_loss} -> {last_loss}"
    );
}

#[test]
fn b_build_and_drop_a_model_1000_times() {
    let _l = lock();
    let start = memory::memory_allocated(CPU);
    let mut g = Generator::new(2);
    let mut reserved_after_first = 0;
    let mut max_reserved = 0;
    for i in 0..1000 {
        {
            let model = mlp(32, 64, 8, 2).unwrap();
            let x = Tensor::randn_with(&[16, 32], DType::F32, CPU, &mut g).unwrap();
            model
                .forward(&x)
                .unwrap()
                .square()
                .unwrap()
                .sum_all()
                .unwrap()
                .backward()
                .unwrap();
            assert!(model.parameters().iter().all(|p| p.grad().is_some()));
        }
        assert_eq!(
            memory::memory_allocated(CPU),
            start,
            "allocated after model {i}"
        );
        let r = memory::memory_reserved(CPU);
        if i == 0 {
            reserved_after_first = r;
        }
        max_reserved = max_reserved.max(r);
    }
    assert!(reserved_after_first > 0);
    assert_eq!(
        max_reserved, reserved_after_first,
        "reserved stays at what the first model needed"
    );
    // every test in this file drops what it made, so nothing is live here
    assert_eq!(start, 0);
    memory::empty_cache(CPU);
    assert_eq!(
        memory::memory_reserved(CPU),
        0,
        "empty_cache with nothing live releases everything"
    );
}

#[test]
fn c_inference_service_keeps_reserved_flat() {
    let _l = lock();
    let mut g = Generator::new(3);
    let model = mlp(64, 128, 10, 3).unwrap();
    let _ng = no_grad_guard();
    let base = memory::memory_allocated(CPU);
    let mut rng = Xs(0x9E3779B97F4A7C15);
    let n = 2000;
    let warmup = 200;
    let mut reserved = Vec::with_capacity(n);
    let mut served = 0usize;
    for _ in 0..n {
        let b = 1 + rng.below(64) as usize;
        let x = Tensor::randn_with(&[b, 64], DType::F32, CPU, &mut g).unwrap();
        let pred = model
            .forward(&x)
            .unwrap()
            .argmax(1, false)
            .unwrap()
            .to_vec::<i64>()
            .unwrap();
        served += pred.len();
        drop(x);
        assert_eq!(
            memory::memory_allocated(CPU),
            base,
            "every request frees what it used"
        );
        reserved.push(memory::memory_reserved(CPU));
    }
    assert!(served > n * 20);
    let after = &reserved[warmup..];
    let peak = *after.iter().max().unwrap();
    let low = *after.iter().min().unwrap();
    assert!(
        low as f64 >= 0.9 * peak as f64,
        "reserved within 10% of its peak: {low}..{peak}"
    );
    let q = after.len() / 4;
    let first_q = *after[..q].iter().max().unwrap();
    let last_q = *after[after.len() - q..].iter().max().unwrap();
    assert!(
        last_q <= first_q,
        "no growth: max of first quarter {first_q}, of last quarter {last_q}"
    );
}

/// (d) The `mlp_service` row of benches/e2e.rs, scaled down for a debug
/// build: one request cut into 512-row chunks, each chunk's output copied
/// into the request's output tensor. From the second request on, a chunk
/// takes nothing from the system and reserves nothing new; each chunk
/// returns `allocated` to the baseline; and a chunk allocates one buffer
/// per layer that cannot reuse its input (LayerNorm, reading a view of the
/// request, and the three Linears), since `forward_owned` donates each
/// owned activation to the GELU after it.
#[test]
fn d_chunked_service_takes_nothing_from_the_system_after_the_first_request() {
    use tensorscope::nn::{LayerNorm, GELU};
    let _l = lock();
    tensorscope::manual_seed(4);
    let mut net = Sequential::new();
    net.add(LayerNorm::new(&[64]).unwrap())
        .add(Linear::new(64, 128).unwrap())
        .add(GELU)
        .add(Linear::new(128, 128).unwrap())
        .add(GELU)
        .add(Linear::new(128, 16).unwrap());
    let _ng = no_grad_guard();
    const ROWS: usize = 2_000;
    const CHUNK: usize = 512;
    let mut g = Generator::new(4);
    let x = Tensor::randn_with(&[ROWS, 64], DType::F32, CPU, &mut g).unwrap();
    let out = Tensor::zeros(&[ROWS, 16], DType::F32, CPU).unwrap();
    let serve = |check: &mut dyn FnMut(usize)| {
        for start in (0..ROWS).step_by(CHUNK) {
            let len = CHUNK.min(ROWS - start);
            let y = net.forward_owned(x.narrow(0, start, len).unwrap()).unwrap();
            out.narrow(0, start, len).unwrap().copy_(&y).unwrap();
            drop(y);
            check(len);
        }
    };
    serve(&mut |_| {});
    let first = out.to_vec::<f32>().unwrap();
    let base = memory::memory_stats(CPU);
    let mut last = base.clone();
    let mut chunks = 0;
    serve(&mut |len| {
        let s = memory::memory_stats(CPU);
        assert_eq!(
            s.num_sys_alloc, base.num_sys_alloc,
            "chunk of {len} rows: no system allocation"
        );
        assert_eq!(
            s.reserved_bytes.all.current, base.reserved_bytes.all.current,
            "reserved flat"
        );
        assert_eq!(
            s.allocated_bytes.all.current, base.allocated_bytes.all.current,
            "back to baseline"
        );
        assert_eq!(
            s.allocation.all.allocated - last.allocation.all.allocated,
            4,
            "chunk of {len} rows: LayerNorm and three Linears allocate, the GELUs reuse"
        );
        last = s;
        chunks += 1;
    });
    assert_eq!(chunks, ROWS.div_ceil(CHUNK));
    assert_eq!(
        out.to_vec::<f32>().unwrap(),
        first,
        "the second request answers as the first"
    );
    assert!(first.iter().all(|v| v.is_finite()) && first.iter().any(|&v| v != 0.0));
}
