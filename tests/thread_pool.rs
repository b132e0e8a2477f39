//! The CPU backend's one thread pool: its size follows
//! `TENSORSCOPE_NUM_THREADS`, `set_num_threads` and the affinity mask, and a
//! program of matmuls, elementwise ops and reductions runs on exactly that
//! many kernel threads (no second pool, no rayon global pool).
//!
//! The size is process state read once, so each case runs in a child
//! process: the test binary itself, running one `#[ignore]`d `child_*` test
//! with the environment set, which prints what it saw.

use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;
use tensorscope::{DType, Device, Tensor};

const CPU: Device = Device::Cpu;

/// Runs the `#[ignore]`d test `name` of this binary in a child process
/// (`env` added to its environment, `wrap` a command to run it under, e.g.
/// `taskset`) and returns its stdout; fails if the child fails.
fn child(name: &str, env: &[(&str, &str)], wrap: &[&str]) -> String {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = match wrap.split_first() {
        Some((w, rest)) => {
            let mut c = Command::new(w);
            c.args(rest).arg(&exe);
            c
        }
        None => Command::new(&exe),
    };
    cmd.args([
        "--exact",
        name,
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env_remove("TENSORSCOPE_NUM_THREADS")
    .env_remove("RAYON_NUM_THREADS");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "child {name} failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The value printed by a child as `key=value`.
fn field(out: &str, key: &str) -> usize {
    let pat = format!("{key}=");
    let i = out
        .find(&pat)
        .unwrap_or_else(|| panic!("no {key} in {out}"));
    out[i + pat.len()..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// (kernel-pool threads, all threads) of this process, from /proc.
fn thread_counts() -> (usize, usize) {
    let mut kernel = 0;
    let mut all = 0;
    for e in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        all += 1;
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        // comm holds the first 15 bytes of "tensorscope-kernel-{i}".
        if comm.starts_with("tensorscope-ker") {
            kernel += 1;
        }
    }
    (kernel, all)
}

/// A matmul (gemm on the pool), elementwise ops and a reduction large
/// enough to run in parallel, checked against values computed by hand.
fn program() {
    let x = Tensor::full(&[512, 1024], 0.5, DType::F32, CPU).unwrap();
    let w = Tensor::full(&[1024, 256], 0.25, DType::F32, CPU).unwrap();
    for _ in 0..3 {
        let y = x.matmul(&w).unwrap(); // every element 1024 * 0.125 = 128
        let z = y.add_scalar(-120.0).unwrap().relu().unwrap(); // 8
        let s = z.sum(&[1], false).unwrap(); // 256 * 8
        assert!(s.to_vec::<f32>().unwrap().iter().all(|&v| v == 2048.0));
        let b = x.add(&x.sum(&[1], true).unwrap()).unwrap(); // 0.5 + 512
        assert_eq!(b.max_all().unwrap().item::<f32>().unwrap(), 512.5);
        let bm = Tensor::ones(&[64, 128, 64], DType::F32, CPU)
            .unwrap()
            .matmul(&Tensor::ones(&[64, 64, 128], DType::F32, CPU).unwrap())
            .unwrap();
        assert_eq!(bm.min_all().unwrap().item::<f32>().unwrap(), 64.0);
    }
}

#[test]
#[ignore = "run by the tests below in a child process"]
fn child_reports_threads() {
    let n = tensorscope::num_threads();
    program();
    let (kernel, all) = thread_counts();
    println!("num_threads={n} kernel_threads={kernel} all_threads={all}");
}

#[test]
#[ignore = "run by the tests below in a child process"]
fn child_resizes() {
    program();
    tensorscope::set_num_threads(3).unwrap();
    assert_eq!(tensorscope::num_threads(), 3);
    program();
    // The pool of the old size winds down once its last kernel is done.
    let mut counts = thread_counts();
    for _ in 0..200 {
        if counts.0 == 3 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
        counts = thread_counts();
    }
    println!("kernel_threads={}", counts.0);
    tensorscope::set_num_threads(1).unwrap();
    program();
    let mut counts = thread_counts();
    for _ in 0..200 {
        if counts.0 == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
        counts = thread_counts();
    }
    println!("single_kernel_threads={}", counts.0);
}

#[test]
fn the_environment_sets_the_pool_size() {
    for n in [1usize, 2, 3] {
        let out = child(
            "child_reports_threads",
            &[("TENSORSCOPE_NUM_THREADS", &n.to_string())],
            &[],
        );
        assert_eq!(field(&out, "num_threads"), n, "{out}");
        // One pool: exactly n kernel threads (none for 1, where kernels run
        // on the caller), and nothing else but the test harness's threads
        // (the main thread and at most one test thread): no second pool
        // and no rayon global pool.
        let want_kernel = if n == 1 { 0 } else { n };
        assert_eq!(field(&out, "kernel_threads"), want_kernel, "{out}");
        assert!(
            field(&out, "all_threads") <= want_kernel + 2,
            "threads beyond the pool and the harness: {out}"
        );
    }
}

#[test]
fn a_bad_environment_value_falls_back_to_the_cpus() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    for bad in ["0", "two", ""] {
        let out = child(
            "child_reports_threads",
            &[("TENSORSCOPE_NUM_THREADS", bad)],
            &[],
        );
        assert_eq!(field(&out, "num_threads"), cpus, "{bad:?}: {out}");
    }
}

#[test]
fn the_default_size_follows_the_affinity_mask() {
    if Command::new("taskset").arg("-V").output().is_err() {
        eprintln!("taskset not installed: skipped");
        return;
    }
    // One CPU allowed: one thread, and no pool at all.
    let out = child("child_reports_threads", &[], &["taskset", "-c", "0"]);
    assert_eq!(field(&out, "num_threads"), 1, "{out}");
    assert_eq!(field(&out, "kernel_threads"), 0, "{out}");
    let out = child("child_reports_threads", &[], &[]);
    assert_eq!(
        field(&out, "num_threads"),
        std::thread::available_parallelism().unwrap().get(),
        "{out}"
    );
}

#[test]
fn set_num_threads_resizes_the_pool() {
    let out = child("child_resizes", &[("TENSORSCOPE_NUM_THREADS", "2")], &[]);
    assert_eq!(field(&out, "kernel_threads"), 3, "{out}");
    assert_eq!(field(&out, "single_kernel_threads"), 0, "{out}");
}

#[test]
fn set_num_threads_refuses_zero() {
    let e = tensorscope::set_num_threads(0).unwrap_err().to_string();
    assert!(e.contains("set_num_threads"), "{e}");
}

/// Matmuls (gemm's threads), reductions, gathers and elementwise ops
/// called from inside a user's rayon `par_iter`, on operands they share,
/// complete: each runs on its task's thread.
#[test]
fn ops_inside_a_users_par_iter_complete() {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let a = Tensor::full(&[256, 512], 1.0, DType::F32, CPU).unwrap();
        let w = Tensor::full(&[512, 512], 0.5, DType::F32, CPU).unwrap();
        let idx = Tensor::from_slice(&[3i64, 0, 255, 7], &[4], CPU).unwrap();
        let acc = Tensor::zeros(&[256, 512], DType::F32, CPU).unwrap();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(4)
            .build()
            .unwrap();
        let sums: Vec<f32> = pool.install(|| {
            use rayon::prelude::*;
            (0..32)
                .into_par_iter()
                .map(|_| {
                    let y = a.matmul(&w).unwrap(); // 256 each
                    let r = y.index_select(0, &idx).unwrap().sum(&[1], false).unwrap();
                    acc.alias().add_(&a).unwrap();
                    r.sum_all().unwrap().item::<f32>().unwrap()
                })
                .collect()
        });
        let total = acc.sum_all().unwrap().item::<f32>().unwrap();
        let _ = tx.send((sums, total));
    });
    let (sums, total) = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("deadlock or far too slow: the work did not finish in time");
    assert!(sums.iter().all(|&s| s == 4.0 * 512.0 * 256.0), "{sums:?}");
    assert_eq!(total, 32.0 * 256.0 * 512.0);
}
