//! Creating and freeing 1M small tensors in a scope, against dropping them one
//! by one. Run with `cargo bench --bench scope`; results go to
//! `bench/results/scope.md`.
//!
//! Every variant makes `N` tensors of shape [4] f32 (16 bytes, one 512-byte
//! block each) and frees them all:
//!
//! * `scope`: `s.zeros(..)` N times in one scope; all freed when it ends.
//! * `vec, drop one by one`: N owned tensors pushed to a Vec, then dropped one
//!   at a time (`pop` in a loop): the same peak as the scope.
//! * `create + drop at once`: each tensor dropped right after it is made
//!   (only one alive at a time: the allocator reuses one cached block).
//! * `one scope per tensor`: N scopes of one tensor each (the cost of opening
//!   and closing a scope).
//! * `scope, + a kept view of each`: as `scope`, also keeping a view of every
//!   tensor, so every storage is shared by two handles: the scope's
//!   storage-to-slots map (for counting bytes per storage) is in use.
//! * `vec, + a view of each`: the same handles, owned in a Vec.
//!
//! Each variant runs `REPS` times, interleaved with the others; the table shows the median and the best
//! run, split into the create phase and the free phase where they are
//! separate, and the cost per tensor.

use std::hint::black_box;
use std::time::{Duration, Instant};
use tensorscope::{leak, memory, scope, DType, Device, Tensor};

const N: usize = 1_000_000;
const REPS: usize = 7;
const CPU: Device = Device::Cpu;

fn small() -> Tensor {
    Tensor::zeros(&[4], DType::F32, CPU).expect("allocation")
}

/// (create, free) durations of one run.
type Run = (Duration, Duration);

/// A variant's name and its run function.
type Variant = (&'static str, fn() -> Run);

fn run_scope() -> Run {
    let t0 = Instant::now();
    let mut created = Duration::ZERO;
    scope(|s| {
        for _ in 0..N {
            black_box(s.zeros(&[4], DType::F32, CPU).expect("allocation"));
        }
        created = t0.elapsed();
    });
    (created, t0.elapsed() - created)
}

fn run_vec() -> Run {
    let t0 = Instant::now();
    let mut v = Vec::with_capacity(N);
    for _ in 0..N {
        v.push(small());
    }
    let created = t0.elapsed();
    let t1 = Instant::now();
    while let Some(t) = v.pop() {
        drop(black_box(t));
    }
    (created, t1.elapsed())
}

fn run_stream() -> Run {
    let t0 = Instant::now();
    for _ in 0..N {
        drop(black_box(small()));
    }
    (t0.elapsed(), Duration::ZERO)
}

fn run_scope_each() -> Run {
    let t0 = Instant::now();
    for _ in 0..N {
        scope(|s| {
            black_box(s.zeros(&[4], DType::F32, CPU).expect("allocation"));
        });
    }
    (t0.elapsed(), Duration::ZERO)
}

fn run_scope_views() -> Run {
    let t0 = Instant::now();
    let mut created = Duration::ZERO;
    scope(|s| {
        for _ in 0..N {
            let t = s.zeros(&[4], DType::F32, CPU).expect("allocation");
            black_box(s.keep(t.narrow(0, 0, 2).expect("view")));
        }
        created = t0.elapsed();
    });
    (created, t0.elapsed() - created)
}

fn run_vec_views() -> Run {
    let t0 = Instant::now();
    let mut v = Vec::with_capacity(2 * N);
    for _ in 0..N {
        let t = small();
        let view = t.narrow(0, 0, 2).expect("view");
        v.push(t);
        v.push(view);
    }
    let created = t0.elapsed();
    let t1 = Instant::now();
    while let Some(t) = v.pop() {
        drop(black_box(t));
    }
    (created, t1.elapsed())
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ns_per(d: Duration) -> f64 {
    d.as_nanos() as f64 / N as f64
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    // `cargo bench` passes `--bench`; any other argument is ignored.
    let variants: [Variant; 6] = [
        ("scope (freed at its end)", run_scope),
        ("vec, drop one by one", run_vec),
        ("create + drop at once", run_stream),
        ("one scope per tensor", run_scope_each),
        (
            "scope, + a kept view of each (2 handles per tensor)",
            run_scope_views,
        ),
        (
            "vec, + a view of each (2 handles per tensor)",
            run_vec_views,
        ),
    ];
    // Warm the allocator's cache so no variant pays for the first segments.
    run_vec();
    println!(
        "{N} tensors of shape [4] f32 per run, {REPS} runs per variant; reserved after warm-up: {}",
        memory::fmt_bytes(memory::memory_reserved(CPU))
    );
    println!();
    println!("| variant | create (median) | free (median) | total (median) | total (best) | per tensor (median) |");
    println!("|---|---|---|---|---|---|");
    // Interleaved (A B C D A B C D ...) so that a burst of load from other
    // processes hits every variant alike.
    let mut runs: Vec<Vec<Run>> = vec![Vec::new(); variants.len()];
    for _ in 0..REPS {
        for (i, (_, f)) in variants.iter().enumerate() {
            runs[i].push(f());
            assert_eq!(leak::live_tensors(), 0);
            assert_eq!(memory::memory_allocated(CPU), 0);
        }
    }
    for ((name, _), runs) in variants.iter().zip(runs) {
        let create = median(runs.iter().map(|r| r.0).collect());
        let free = median(runs.iter().map(|r| r.1).collect());
        let totals: Vec<Duration> = runs.iter().map(|r| r.0 + r.1).collect();
        let best = *totals.iter().min().expect("runs");
        let total = median(totals);
        let free_s = if free.is_zero() {
            "(in create)".to_string()
        } else {
            format!("{:.1} ms", ms(free))
        };
        println!(
            "| {name} | {:.1} ms | {free_s} | {:.1} ms | {:.1} ms | {:.1} ns |",
            ms(create),
            ms(total),
            ms(best),
            ns_per(total)
        );
    }
}
