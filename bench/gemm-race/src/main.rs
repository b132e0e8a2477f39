//! The GEMM race of issue 47 (bench/run_gemm_race.sh runs it with
//! bench/torch_gemm_race.py, interleaved, and writes
//! bench/results/gemm-race.md).
//!
//! `race shapes` prints the shape list as JSON (the PyTorch side reads it,
//! so the shapes are written once); `race peak` prints the machine's clock
//! and FMA throughput; `race <lib> <level>` times one library at one level:
//! `gemm019` (the gemm 0.19 kernels the library calls today, any level),
//! `pgx` (private-gemm-x86: faer 0.23's x86-64 matmul), `openblas` and
//! `blis` (the Debian shared libraries, loaded at run time; the script caps
//! their level with OPENBLAS_CORETYPE and BLIS_ARCH_TYPE).
//!
//! f32, row-major operands, 2 threads unless RACE_THREADS says otherwise.
//! A `linear` shape multiplies by a transposed [n, k] weight, as
//! `x @ w.T` in a Linear layer does; `nn` multiplies [m, k] by [k, n].

use std::time::Instant;

struct Shape {
    name: &'static str,
    batch: usize,
    m: usize,
    k: usize,
    n: usize,
    linear: bool,
}

const fn s(name: &'static str, batch: usize, m: usize, k: usize, n: usize, linear: bool) -> Shape {
    Shape { name, batch, m, k, n, linear }
}

const SHAPES: &[Shape] = &[
    // The MLP service: LN, Linear 256->1024, GELU, Linear 1024->1024, GELU, Linear 1024->16.
    s("service_l1", 1, 512, 256, 1024, true),
    s("service_l2", 1, 512, 1024, 1024, true),
    s("service_l3", 1, 512, 1024, 16, true),
    // The MLP of benches/e2e.rs's mlp_serve rows (784-1024-1024-10) at batch 1, 8 and 64.
    s("serve_b1", 1, 1, 784, 1024, true),
    s("serve_b8", 1, 8, 784, 1024, true),
    s("serve_b64", 1, 64, 784, 1024, true),
    // The GUIDE's transformer (d128, 4 heads, seq 64, batch 16): qkv, MLP up, MLP down, head.
    s("transformer_qkv", 1, 1024, 128, 384, true),
    s("transformer_up", 1, 1024, 128, 512, true),
    s("transformer_down", 1, 1024, 512, 128, true),
    s("transformer_head", 1, 1024, 128, 65, true),
    // Skinny: n <= 64, and a skinny m.
    s("skinny_n64", 1, 4096, 1024, 64, true),
    s("skinny_n8", 1, 4096, 4096, 8, false),
    s("skinny_m16", 1, 16, 1024, 1024, true),
    // Square.
    s("square_256", 1, 256, 256, 256, false),
    s("square_512", 1, 512, 512, 512, false),
    s("square_1024", 1, 1024, 1024, 1024, false),
    s("square_2048", 1, 2048, 2048, 2048, false),
    s("square_4096", 1, 4096, 4096, 4096, false),
    // Batched: the transformer's attention scores and values, and a mid-size bmm.
    s("bmm_scores", 64, 64, 32, 64, false),
    s("bmm_values", 64, 64, 64, 32, false),
    s("bmm_128", 32, 128, 128, 128, false),
];

fn threads() -> usize {
    std::env::var("RACE_THREADS").ok().and_then(|v| v.parse().ok()).unwrap_or(2)
}

/// One product `c[b] = a[b] @ op(w[b])` for every `b`, the strides in elements.
trait Lib {
    /// # Safety
    /// The buffers hold `batch` matrices of the shape's sizes.
    unsafe fn run(&self, sh: &Shape, a: &[f32], w: &[f32], c: &mut [f32]);
}

fn w_strides(sh: &Shape) -> (isize, isize) {
    // (row stride, column stride) of op(w) as a [k, n] matrix.
    if sh.linear {
        (1, sh.k as isize)
    } else {
        (sh.n as isize, 1)
    }
}

/// Runs `one(b)` for every batch item: in parallel over the items (each
/// product single-threaded) when there are several, as the library's bmm
/// does for small products.
fn for_batch(sh: &Shape, one: impl Fn(usize, bool) + Sync) {
    if sh.batch == 1 {
        one(0, true);
    } else {
        use rayon::prelude::*;
        (0..sh.batch).into_par_iter().for_each(|b| one(b, false));
    }
}

struct Ptrs(*const f32, *const f32, *mut f32);
// SAFETY: each batch item writes its own disjoint slice of `c`.
unsafe impl Sync for Ptrs {}

struct Gemm019 {
    v4: bool,
}

impl Lib for Gemm019 {
    unsafe fn run(&self, sh: &Shape, a: &[f32], w: &[f32], c: &mut [f32]) {
        use gemm_common::Parallelism;
        let (m, k, n) = (sh.m, sh.k, sh.n);
        let (w_rs, w_cs) = w_strides(sh);
        let p = Ptrs(a.as_ptr(), w.as_ptr(), c.as_mut_ptr());
        let t = threads();
        let v4 = self.v4;
        for_batch(sh, |b, par| {
            let p = &p;
            let par = if par && t > 1 { Parallelism::Rayon(t) } else { Parallelism::None };
            // c^T = op(w)^T a^T: the column-major form gemm prefers, as
            // the library's backend/cpu/gemm.rs calls it. Argument order:
            // (m, n, k, dst, dst_cs, dst_rs, read_dst, lhs, lhs_cs, lhs_rs,
            // rhs, rhs_cs, rhs_rs, alpha, beta, conj x3, parallelism).
            let g = Gemm019Args {
                m: n,
                n: m,
                k,
                dst: p.2.add(b * m * n),
                dst_cs: n as isize,
                dst_rs: 1,
                lhs: p.1.add(b * k * n),
                lhs_cs: w_rs,
                lhs_rs: w_cs,
                rhs: p.0.add(b * m * k),
                rhs_cs: k as isize,
                rhs_rs: 1,
            };
            if v4 {
                gemm_f32::gemm::f32::get_gemm_fn()(
                    g.m, g.n, g.k, g.dst, g.dst_cs, g.dst_rs, false, g.lhs, g.lhs_cs, g.lhs_rs, g.rhs,
                    g.rhs_cs, g.rhs_rs, 0.0, 1.0, false, false, false, par,
                );
            } else {
                v3_gemm(&g, par);
            }
        });
    }
}

struct Gemm019Args {
    m: usize,
    n: usize,
    k: usize,
    dst: *mut f32,
    dst_cs: isize,
    dst_rs: isize,
    lhs: *const f32,
    lhs_cs: isize,
    lhs_rs: isize,
    rhs: *const f32,
    rhs_cs: isize,
    rhs_rs: isize,
}

/// gemm 0.19's AVX2+FMA kernels called directly: what `get_gemm_fn` picks
/// on a CPU without AVX-512.
unsafe fn v3_gemm(g: &Gemm019Args, par: gemm_common::Parallelism) {
    use gemm_common::simd::MixedSimd;
    use gemm_f32::microkernel::fma::f32::*;
    gemm_common::gemm::gemm_basic_generic::<_, f32, 8, { MR_DIV_N * 8 }, NR, MR_DIV_N, H_M, H_N>(
        <gemm_common::simd::V3 as MixedSimd<f32, f32, f32, f32>>::try_new().unwrap(),
        g.m, g.n, g.k, g.dst, g.dst_cs, g.dst_rs, false, g.lhs, g.lhs_cs, g.lhs_rs, g.rhs, g.rhs_cs,
        g.rhs_rs, 0.0, 1.0, false, false, false,
        |a, b, c| a * b + c,
        &UKR,
        &H_UKR,
        false,
        par,
    );
}

struct Pgx {
    v4: bool,
}

impl Lib for Pgx {
    unsafe fn run(&self, sh: &Shape, a: &[f32], w: &[f32], c: &mut [f32]) {
        use private_gemm_x86::*;
        let (m, k, n) = (sh.m, sh.k, sh.n);
        let (w_rs, w_cs) = w_strides(sh);
        let p = Ptrs(a.as_ptr(), w.as_ptr(), c.as_mut_ptr());
        let t = threads();
        let instr = if self.v4 { InstrSet::Avx512 } else { InstrSet::Avx256 };
        let alpha = 1.0f32;
        for_batch(sh, |b, par| {
            let p = &p;
            gemm(
                DType::F32,
                IType::U64,
                instr,
                m,
                n,
                k,
                p.2.add(b * m * n) as *mut (),
                n as isize,
                1,
                std::ptr::null(),
                std::ptr::null(),
                DstKind::Full,
                Accum::Replace,
                p.0.add(b * m * k) as *const (),
                k as isize,
                1,
                false,
                std::ptr::null(),
                0,
                p.1.add(b * k * n) as *const (),
                w_rs,
                w_cs,
                false,
                &raw const alpha as *const (),
                if par { t } else { 1 },
            );
        });
    }
}

type Sgemm = unsafe extern "C" fn(
    i32,
    i32,
    i32,
    i32,
    i32,
    i32,
    f32,
    *const f32,
    i32,
    *const f32,
    i32,
    f32,
    *mut f32,
    i32,
);

struct Cblas {
    sgemm: Sgemm,
    _lib: libloading::Library,
}

impl Cblas {
    fn load(path: &str, set_threads: &str) -> Cblas {
        // SAFETY: the Debian BLAS libraries' initialisers are plain C, and
        // the symbols have the CBLAS signatures declared here.
        unsafe {
            let lib = libloading::Library::new(path).expect(path);
            let sgemm: Sgemm = *lib.get::<Sgemm>(b"cblas_sgemm\0").unwrap();
            let set: unsafe extern "C" fn(i32) = *lib.get(set_threads.as_bytes()).unwrap();
            set(threads() as i32);
            if let Ok(name) = lib.get::<unsafe extern "C" fn() -> *const i8>(b"openblas_get_corename\0") {
                eprintln!("openblas core: {:?}", std::ffi::CStr::from_ptr(name()));
            }
            if let (Ok(q), Ok(s)) = (
                lib.get::<unsafe extern "C" fn() -> i32>(b"bli_arch_query_id\0"),
                lib.get::<unsafe extern "C" fn(i32) -> *const i8>(b"bli_arch_string\0"),
            ) {
                eprintln!("blis arch: {:?}", std::ffi::CStr::from_ptr(s(q())));
            }
            Cblas { sgemm, _lib: lib }
        }
    }
}

impl Lib for Cblas {
    unsafe fn run(&self, sh: &Shape, a: &[f32], w: &[f32], c: &mut [f32]) {
        const ROW_MAJOR: i32 = 101;
        const NO_TRANS: i32 = 111;
        const TRANS: i32 = 112;
        let (m, k, n) = (sh.m, sh.k, sh.n);
        for b in 0..sh.batch {
            (self.sgemm)(
                ROW_MAJOR,
                NO_TRANS,
                if sh.linear { TRANS } else { NO_TRANS },
                m as i32,
                n as i32,
                k as i32,
                1.0,
                a.as_ptr().add(b * m * k),
                k as i32,
                w.as_ptr().add(b * k * n),
                if sh.linear { k } else { n } as i32,
                0.0,
                c.as_mut_ptr().add(b * m * n),
                n as i32,
            );
        }
    }
}

fn fill(len: usize, seed: u32) -> Vec<f32> {
    let mut x = seed.wrapping_mul(2654435761).max(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        })
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The median of samples of `batch` calls each, the batch sized to about
/// 2 ms and the samples to the row's budget (3 at least, 40 at most).
fn time(mut f: impl FnMut()) -> f64 {
    f();
    let t0 = Instant::now();
    f();
    let est = t0.elapsed().as_secs_f64().max(1e-7);
    let batch = (2e-3 / est).ceil() as usize;
    for _ in 1..batch {
        f();
    }
    let budget = 0.4f64;
    let n = ((budget / (est * batch as f64)) as usize).clamp(3, 40);
    median(
        (0..n)
            .map(|_| {
                let t = Instant::now();
                for _ in 0..batch {
                    f();
                }
                t.elapsed().as_secs_f64() / batch as f64
            })
            .collect(),
    )
}

/// A reference product in f64 at a few sampled entries: a library that
/// returns a wrong answer fast must not win the race.
fn check(sh: &Shape, a: &[f32], w: &[f32], c: &[f32]) {
    let (m, k, n) = (sh.m, sh.k, sh.n);
    let (w_rs, w_cs) = w_strides(sh);
    for t in 0..16usize {
        let (b, i, j) = (t * 7 % sh.batch, t * 131 % m, t * 37 % n);
        let mut r = 0f64;
        for p in 0..k {
            let wv = w[b * k * n + (p as isize * w_rs + j as isize * w_cs) as usize];
            r += a[b * m * k + i * k + p] as f64 * wv as f64;
        }
        let got = c[b * m * n + i * n + j] as f64;
        assert!((got - r).abs() <= 1e-4 * (k as f64).sqrt() + 1e-4 * r.abs(), "{}: c[{b},{i},{j}] = {got}, want {r}", sh.name);
    }
}

fn peak() {
    // Clock: a chain of dependent adds retires one per cycle.
    let iters = 1_000_000_000u64;
    let t = Instant::now();
    #[cfg(target_arch = "x86_64")]
    // SAFETY: register-only arithmetic on a scratch register.
    unsafe {
        std::arch::asm!(
            "2:",
            "add {x}, 1", "add {x}, 1", "add {x}, 1", "add {x}, 1", "add {x}, 1",
            "add {x}, 1", "add {x}, 1", "add {x}, 1", "add {x}, 1", "add {x}, 1",
            "sub {n}, 10",
            "jnz 2b",
            x = inout(reg) 0u64 => _,
            n = inout(reg) iters => _,
            options(nomem, nostack),
        );
    }
    let ghz = iters as f64 / t.elapsed().as_secs_f64() / 1e9;
    println!("{{\"clock_ghz\": {ghz:.3}}}");
    #[cfg(target_arch = "x86_64")]
    for (name, lanes) in [("avx2_fma", 8usize), ("avx512_fma", 16)] {
        if lanes == 16 && !is_x86_feature_detected!("avx512f") {
            continue;
        }
        for th in [1usize, threads()] {
            let t = Instant::now();
            let n: u64 = 200_000_000;
            std::thread::scope(|s| {
                for _ in 0..th {
                    s.spawn(move || {
                        // SAFETY: the level was detected above (AVX2+FMA is
                        // checked by the caller's choice of machine).
                        unsafe {
                            if lanes == 8 {
                                fma_loop_256(n / 10)
                            } else {
                                fma_loop_512(n / 10)
                            }
                        }
                    });
                }
            });
            let gflops = (th as u64 * n * lanes as u64 * 2) as f64 / t.elapsed().as_secs_f64() / 1e9;
            println!("{{\"fma\": \"{name}\", \"threads\": {th}, \"gflops\": {gflops:.1}}}");
        }
    }
}

macro_rules! fma_loop {
    ($name:ident, $feat:literal, $ty:ty, $set:ident, $fma:ident, $add:ident, $store:ident, $w:literal) => {
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $feat)]
        unsafe fn $name(n: u64) {
            use std::arch::x86_64::*;
            let a: $ty = $set(1.0000001);
            let b: $ty = $set(0.9999999);
            let mut acc = [$set(0.0); 10];
            for _ in 0..n {
                for r in acc.iter_mut() {
                    *r = $fma(*r, a, b);
                }
            }
            let mut s = acc[0];
            for r in &acc[1..] {
                s = $add(s, *r);
            }
            let mut out = [0f32; $w];
            $store(out.as_mut_ptr(), s);
            std::hint::black_box(out);
        }
    };
}
fma_loop!(fma_loop_256, "avx2,fma", __m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps, _mm256_storeu_ps, 8);
fma_loop!(fma_loop_512, "avx512f", __m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps, _mm512_storeu_ps, 16);

fn main() {
    let args: Vec<String> = std::env::args().collect();
    rayon::ThreadPoolBuilder::new().num_threads(threads()).build_global().unwrap();
    match args.get(1).map(String::as_str) {
        Some("shapes") => {
            let rows: Vec<String> = SHAPES
                .iter()
                .map(|s| {
                    format!(
                        "{{\"name\": \"{}\", \"batch\": {}, \"m\": {}, \"k\": {}, \"n\": {}, \"linear\": {}}}",
                        s.name, s.batch, s.m, s.k, s.n, s.linear
                    )
                })
                .collect();
            println!("[{}]", rows.join(", "));
        }
        Some("peak") => peak(),
        Some(lib) => {
            let level = args.get(2).map(String::as_str).unwrap_or("v4");
            let filter = args.get(3).cloned().unwrap_or_default();
            let v4 = level == "v4";
            let lib: Box<dyn Lib> = match lib {
                "gemm019" => Box::new(Gemm019 { v4 }),
                "pgx" => Box::new(Pgx { v4 }),
                "openblas" => Box::new(Cblas::load(
                    "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
                    "openblas_set_num_threads\0",
                )),
                "blis" => Box::new(Cblas::load(
                    "/usr/lib/x86_64-linux-gnu/blis-pthread/libblis.so.4",
                    "bli_thread_set_num_threads\0",
                )),
                other => panic!("unknown library {other}"),
            };
            for sh in SHAPES.iter().filter(|s| filter.is_empty() || filter.split(',').any(|f| s.name.starts_with(f))) {
                let a = fill(sh.batch * sh.m * sh.k, 1);
                let w = fill(sh.batch * sh.k * sh.n, 2);
                let mut c = vec![f32::NAN; sh.batch * sh.m * sh.n];
                // SAFETY: the buffers are the shape's sizes.
                unsafe { lib.run(sh, &a, &w, &mut c) };
                check(sh, &a, &w, &c);
                // SAFETY: as above.
                let secs = time(|| unsafe { lib.run(sh, &a, &w, &mut c) });
                let gflops = 2.0 * (sh.batch * sh.m * sh.k * sh.n) as f64 / secs / 1e9;
                println!(
                    "{{\"lib\": \"{}\", \"level\": \"{level}\", \"shape\": \"{}\", \"seconds\": {secs:.6e}, \"gflops\": {gflops:.2}}}",
                    args[1], sh.name
                );
            }
        }
        None => eprintln!("usage: race shapes | peak | gemm019|pgx|openblas|blis v4|v3 [filter]"),
    }
}
