//! How many threads the CPU kernels use, and at which SIMD level.
//!
//! Every parallel CPU path (elementwise ops, reductions, optimizers, gemm
//! and batched matmul, gathers) shares one pool of threads. Its size is, in
//! order of precedence:
//!
//! 1. the last [`set_num_threads`] call;
//! 2. the environment variable `TENSORSCOPE_NUM_THREADS`, read once when the
//!    first kernel needs it (a positive integer; anything else is ignored);
//! 3. the CPUs this process may use: [`std::thread::available_parallelism`],
//!    which on Linux honours the affinity mask (`taskset`, `sched_setaffinity`)
//!    and a cgroup v1 or v2 CPU quota (a container's `--cpus`), not the
//!    host's CPU count.
//!
//! The thread that calls an op works on it as one of those threads (its
//! helpers are pool threads), so at most `num_threads()` threads compute at
//! once. After an op the helpers spin for the next one for up to
//! `TENSORSCOPE_SPIN_US` microseconds (default 500; 0 sends them to sleep at
//! once) before they sleep, as OpenMP's `OMP_WAIT_POLICY`/`KMP_BLOCKTIME`
//! do. An op called from inside a rayon
//! task of your own (a `par_iter` over requests, say) runs on that task's
//! thread alone, like an op inside PyTorch's `parallel_for`: no nested
//! parallelism, and no deadlock on a storage that another task holds.

use crate::backend::cpu::thread_pool;
use crate::error::{bail, Error, Result};

/// The number of threads CPU kernels use (PyTorch's `torch.get_num_threads`).
///
/// ```
/// assert!(tensorscope::num_threads() >= 1);
/// ```
pub fn num_threads() -> usize {
    thread_pool::num_threads()
}

/// Sets the number of threads CPU kernels use from now on (PyTorch's
/// `torch.set_num_threads`); `1` runs every kernel on its caller's thread.
/// It overrides `TENSORSCOPE_NUM_THREADS`. Ops already running finish on
/// the threads they started with. `0` is an error.
///
/// ```
/// let before = tensorscope::num_threads();
/// tensorscope::set_num_threads(1)?;
/// assert_eq!(tensorscope::num_threads(), 1);
/// assert!(tensorscope::set_num_threads(0).is_err());
/// tensorscope::set_num_threads(before)?;
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub fn set_num_threads(n: usize) -> Result<()> {
    if n == 0 {
        bail!(Error::arg(
            "set_num_threads",
            "the number of threads must be at least 1, got 0"
        ));
    }
    thread_pool::set_num_threads(n);
    Ok(())
}

/// The instruction set level the CPU kernels run at, matrix products
/// included (PyTorch's `torch.backends.cpu.get_cpu_capability()`):
/// `"v4"` (AVX-512), `"v3"` (AVX2+FMA), `"neon"` or `"scalar"`. The best
/// this CPU has, capped by `TENSORSCOPE_SIMD` when it names a level the CPU
/// has (read once, at the first kernel).
///
/// ```
/// let level = tensorscope::cpu_capability();
/// assert!(["v4", "v3", "neon", "scalar"].contains(&level));
/// ```
pub fn cpu_capability() -> &'static str {
    crate::backend::cpu::simd::level().short_name()
}
