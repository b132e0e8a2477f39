//! The one thread pool of the CPU backend.
//!
//! Every parallel CPU path runs on this pool: the strided kernels
//! ([`super::strided`]), reductions, the optimizer kernels, batched matmul
//! and gemm's own threads (gemm parallelises with rayon, in whatever pool it
//! is called from, so it is called inside [`install`]). Nothing in the CPU
//! backend uses rayon's global pool, which stays the user's.
//!
//! **Size.** `TENSORSCOPE_NUM_THREADS` (read once, on first use) if it is a
//! positive integer, else [`std::thread::available_parallelism`]: on Linux
//! that is the CPUs of the process's affinity mask (`sched_getaffinity`)
//! capped by its cgroup CPU quota, v2 (`cpu.max`) and v1
//! (`cpu.cfs_quota_us` / `cpu.cfs_period_us`), rounded down, at least 1
//! (the `cgroups::quota` helper of std's Unix `available_parallelism`, and
//! the 1.95 documentation of that function, which notes the v1 mountpoint
//! scan), so there is no cgroup code here. [`set_num_threads`] changes the
//! size at run time (the next kernel builds a pool of the new size; kernels
//! running on the old one finish there). With one thread there is no pool.
//!
//! **Deadlock avoidance.** Kernels run while holding storage locks, so
//! their chunks must never wait for a thread that could itself be blocked
//! on a storage lock:
//! * chunks run on this private pool, whose threads run nothing else (never
//!   user code), so they always make progress;
//! * a kernel called from any rayon worker thread (a tensor op inside the
//!   user's own `par_iter`, or a kernel nested in one of ours) runs on that
//!   thread alone, as PyTorch's `parallel_for` does inside a parallel
//!   region. Otherwise the waiting worker could steal another task that
//!   blocks on the lock it holds.
//!
//! A caller of [`par_for`] works as one of the op's threads (with at most
//! `num_threads - 1` helper jobs on the pool); a caller of [`install`]
//! (gemm's own threads, for products too large to cut into blocks; see
//! `matmul`) sleeps until the pool's threads are done. Either way one op
//! computes on at most [`num_threads`] threads.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

mod team;

/// The environment variable that sets the pool's size.
pub(crate) const ENV: &str = "TENSORSCOPE_NUM_THREADS";

/// The configured size; 0 until first read.
static THREADS: AtomicUsize = AtomicUsize::new(0);

/// The pool for the configured size, built on first use (`None` before
/// that, after a resize, or when its threads could not be spawned).
static POOL: RwLock<Option<Arc<rayon::ThreadPool>>> = RwLock::new(None);

/// The size from the environment, else the CPUs this process may use.
fn default_threads() -> usize {
    std::env::var(ENV)
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&n| n >= 1)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// The number of threads CPU kernels use (see the module docs).
pub(crate) fn num_threads() -> usize {
    match THREADS.load(Ordering::Relaxed) {
        0 => {
            let n = default_threads();
            // Another thread may have set it first: keep theirs.
            match THREADS.compare_exchange(0, n, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => n,
                Err(set) => set,
            }
        }
        n => n,
    }
}

/// Sets the number of threads (`n >= 1`, checked by the caller). The pool
/// of the old size is dropped once the kernels running on it finish.
pub(crate) fn set_num_threads(n: usize) {
    let mut pool = POOL.write().unwrap_or_else(PoisonError::into_inner);
    THREADS.store(n, Ordering::Relaxed);
    *pool = None;
    team::quiet();
}

/// The pool kernels split their work over, or `None` to run on the calling
/// thread: inside any rayon worker, with one thread, or when the pool's
/// threads cannot be spawned.
///
/// Any kernel that parallelises under storage locks must do so inside this
/// pool's `install` (or [`install`] / [`par_for`]), or run sequentially when
/// this is `None`.
pub(crate) fn kernel_pool() -> Option<Arc<rayon::ThreadPool>> {
    if rayon::current_thread_index().is_some() {
        return None;
    }
    let n = num_threads();
    if n <= 1 {
        return None;
    }
    if let Some(p) = POOL.read().unwrap_or_else(PoisonError::into_inner).as_ref() {
        return Some(p.clone());
    }
    let mut slot = POOL.write().unwrap_or_else(PoisonError::into_inner);
    if slot.is_none() {
        // Read the size again under the lock: `set_num_threads` may have
        // run since.
        let n = THREADS.load(Ordering::Relaxed).max(1);
        if n <= 1 {
            return None;
        }
        *slot = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .thread_name(|i| format!("tensorscope-kernel-{i}"))
            .build()
            .ok()
            .map(Arc::new);
    }
    slot.clone()
}

/// Runs `f(threads)` on the pool when `parallel` (work worth splitting),
/// or on this thread with `threads == 1` (also when [`kernel_pool`] is
/// `None`). `threads` is what `f` may split its work into, e.g. gemm's
/// `Parallelism::Rayon(threads)`. Small work passes `false`: handing it to
/// the pool costs a wake-up of its threads.
pub(crate) fn install<R: Send>(parallel: bool, f: impl FnOnce(usize) -> R + Send) -> R {
    match if parallel { kernel_pool() } else { None } {
        Some(pool) => install_on(&pool, f),
        None => f(1),
    }
}

/// `pool.install(|| f(threads))` on a pool from [`kernel_pool`], after
/// sending [`par_for`]'s spinning helpers back to it, so that every one of
/// its threads can take `f`'s work.
pub(crate) fn install_on<R: Send>(
    pool: &rayon::ThreadPool,
    f: impl FnOnce(usize) -> R + Send,
) -> R {
    team::quiet();
    let n = pool.current_num_threads();
    pool.install(|| f(n))
}

/// Calls `f(i)` for every `i < n`: in parallel when `n > 1` and there is a
/// pool, else in order on this thread.
///
/// The calling thread works too, as the first thread of an OpenMP team
/// does: it publishes the loop to the pool's helpers ([`team`]: they spin
/// between jobs for a short window, as OpenMP's threads do) and takes
/// indices from the same counter as they do, so the work starts at once and
/// a helper that wakes late just finds fewer indices left, or none. It
/// waits only for helpers that joined. When another loop holds the team
/// (a second user thread calling ops at the same time), the loop runs on
/// rayon's scope instead: the caller and `threads - 1` helper jobs.
#[inline]
pub(crate) fn par_for(n: usize, f: impl Fn(usize) + Sync + Send) {
    par_for_dyn(n, &f)
}

/// [`par_for`]'s body, compiled once: each index is a chunk of work, so the
/// indirect call per index costs nothing measurable, and one copy of the
/// pool and scope code replaces one per kernel closure (Note [cold
/// kernels] in ARCHITECTURE.md).
fn par_for_dyn(n: usize, f: &(dyn Fn(usize) + Sync)) {
    match if n > 1 { kernel_pool() } else { None } {
        Some(pool) => {
            let helpers = (pool.current_num_threads().saturating_sub(1)).min(n - 1);
            if team::try_run(&pool, helpers, n, f) {
                return;
            }
            // The scope waits for every job it spawns to *finish*, queued
            // ones too: send the team's spinners home, or they would hold
            // the pool's threads for as long as the other caller keeps
            // publishing.
            team::quiet();
            let next = AtomicUsize::new(0);
            let work = || loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                f(i);
            };
            pool.in_place_scope(|s| {
                for _ in 0..helpers {
                    s.spawn(|_| work());
                }
                work();
            });
        }
        None => (0..n).for_each(f),
    }
}

/// `(0..n).map(f).collect()`, computed as [`par_for`] does (the calling
/// thread and the pool's helpers share the indices), in index order.
pub(crate) fn par_map<R: Send>(n: usize, f: impl Fn(usize) -> R + Sync + Send) -> Vec<R> {
    let slots: Vec<std::sync::Mutex<Option<R>>> =
        (0..n).map(|_| std::sync::Mutex::new(None)).collect();
    par_for(n, |i| {
        let r = f(i);
        *slots[i].lock().unwrap_or_else(PoisonError::into_inner) = Some(r);
    });
    slots
        .into_iter()
        .filter_map(|m| m.into_inner().unwrap_or_else(PoisonError::into_inner))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Nested use runs inline: a kernel inside the pool (or inside any rayon
    /// worker) gets no pool and one thread.
    #[test]
    fn nested_kernels_run_inline() {
        let outer = install(true, |n| {
            let inner = install(true, |m| m);
            (n, inner, kernel_pool().is_none())
        });
        assert_eq!(outer.1, 1);
        assert!(outer.2);
        assert_eq!(outer.0, if num_threads() > 1 { num_threads() } else { 1 });
        let user = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        assert!(user.install(kernel_pool).is_none());
        assert_eq!(user.install(|| install(true, |n| n)), 1);
        assert_eq!(install(false, |n| n), 1);
    }

    #[test]
    fn par_for_visits_each_index_once() {
        let seen: Vec<AtomicUsize> = (0..1000).map(|_| AtomicUsize::new(0)).collect();
        par_for(seen.len(), |i| {
            seen[i].fetch_add(1, Ordering::Relaxed);
        });
        assert!(seen.iter().all(|c| c.load(Ordering::Relaxed) == 1));
    }

    /// `par_map` keeps index order whoever computed each index (the caller
    /// or a helper; which one is timing, so not asserted).
    #[test]
    fn par_map_keeps_index_order() {
        let v = par_map(64, |i| {
            // Enough work per index that both threads get some.
            let noise = (0..2000u64).fold(i as u64, |a, k| a.wrapping_mul(31).wrapping_add(k));
            noise % 7 + i as u64 * 10
        });
        for (i, x) in v.iter().enumerate() {
            assert_eq!(*x / 10, i as u64, "index {i} out of order");
        }
    }

    /// A panic in a chunk (on the caller or on a helper) reaches the caller
    /// after every helper job has finished, and the pool stays usable.
    #[test]
    fn a_panicking_chunk_propagates_and_the_pool_survives() {
        let r = std::panic::catch_unwind(|| {
            par_for(100, |i| {
                if i == 37 {
                    panic!("chunk 37");
                }
            })
        });
        assert!(r.is_err());
        let n = AtomicUsize::new(0);
        par_for(100, |_| {
            n.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(n.load(Ordering::Relaxed), 100);
    }
}
