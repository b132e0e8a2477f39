//! Fork-join for [`super::par_for`] with helpers that stay awake between
//! ops, as an OpenMP team's threads do.
//!
//! **Why.** With rayon's `in_place_scope` every kernel waited until each
//! helper job it had spawned had *run*: a pool thread asleep in the kernel
//! must be woken first (a futex wake, tens of microseconds on a VM), so a
//! kernel whose caller had already done all the work still paid the wake-up:
//! a cheap op ran slower on two threads than on one, where PyTorch's OpenMP
//! team, whose threads spin between parallel regions, ran it in half the
//! time; this module does as well (Note [spinning helpers] in
//! `bench/results/ops-why.md`).
//!
//! **How.** A caller publishes its job in one global slot ([`CURRENT`]) and
//! takes indices from the job's counter itself. Helpers are jobs on the
//! kernel pool (so every thread is still that one pool's): each serves
//! published jobs and, between them, spins for up to [`spin_window`] before
//! it returns its thread to the pool. The caller waits only for helpers that
//! have *joined* its job ([`ACTIVE`]); a helper that wakes late finds the job
//! gone and costs the caller nothing. `install` (gemm's own threads, for
//! the largest products) and the rayon-scope fallback of `par_for` first
//! send the spinners home ([`quiet`]), so they never hold a thread that
//! the pool's other work waits for. At most `threads - 1` helpers are
//! alive at once ([`ALIVE`] only grows below that bound), so the spinners
//! and the caller never outnumber the pool.
//!
//! **The protocol.** A helper increments [`ACTIVE`] *before* it reads
//! [`CURRENT`]; the caller clears [`CURRENT`] *before* it reads [`ACTIVE`]
//! (all `SeqCst`). So either the helper sees the slot empty and never touches
//! the job, or the caller sees the helper and waits for it: the job (on the
//! caller's stack) outlives every access. One job is published at a time;
//! a second caller (another user thread, or a kernel nested in a chunk)
//! finds the slot taken and uses rayon's scope instead ([`super::par_for`]).
//!
//! **A helper never spins on its caller's CPU.** Linux places a thread
//! on an idle CPU when it *wakes*, but moves a thread that never sleeps
//! only by load balancing, which leaves a running task alone while it is
//! "cache hot". So once a spinning helper and its caller came to share a
//! CPU (the helper woke while the other CPU was still busy), they stayed
//! there, taking turns: every op ran at one thread's speed, the other CPU
//! idle, in a few processes in ten (`perf sched` showed the caller and the
//! spinning helper on one CPU for the whole run). Sleeping did not fix it: a
//! sleeping helper was woken on the caller's CPU again each time.
//! (Note [helper on the caller's CPU] in `bench/results/ops-why.md`.) So the
//! caller notes its CPU in the job ([`current_cpu`]: Linux's `sched_getcpu`,
//! a read of the thread's rseq area or the vDSO), and a helper that finds
//! itself there takes no indices and moves: it narrows its own affinity to
//! its other CPUs, which migrates it before the call returns, and restores
//! the mask at once ([`move_off`]). Where it cannot (one CPU allowed, or not
//! Linux) it sleeps [`STEP_OFF`], so that at least the caller has the CPU.
//! Processes at about twice the time still occur, rarely, but with the work
//! split evenly and each index at half its usual speed: that is the VM (its
//! two vCPUs sharing one core's bandwidth, as far as one can tell without
//! hardware counters), not this module (the same Note).
//!
//! `TENSORSCOPE_SPIN_US` sets the window in microseconds; the default is
//! [`DEFAULT_SPIN_US`] (500). With 0 a helper returns its thread after its
//! job, and each job spawns its helpers again. The window matters once the
//! products of a training step run here too (`matmul`'s blocks): between
//! two parallel ops the caller does a little serial work (dispatch,
//! autograd bookkeeping, small ops), and a helper asleep by then joins the
//! next op late: the training steps of the e2e bench ran faster with a window
//! of a few hundred microseconds than with none (Note [spin window] in
//! `bench/results/ops-why.md`). A spinning helper takes a core from whatever
//! else the process runs for at most the window after an op, as OpenMP's
//! threads do (libgomp's `GOMP_SPINCOUNT`, Intel's `KMP_BLOCKTIME`); a
//! service that wants its idle cores back at once sets 0.

use std::any::Any;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// The environment variable that sets the spin window.
pub(crate) const SPIN_ENV: &str = "TENSORSCOPE_SPIN_US";

/// The spin window, in microseconds, when [`SPIN_ENV`] is not set.
pub(crate) const DEFAULT_SPIN_US: u64 = 500;

/// The published job, or null.
static CURRENT: AtomicPtr<Job<'static>> = AtomicPtr::new(std::ptr::null_mut());
/// Helpers between their increment and decrement around a job (see the
/// protocol in the module docs).
static ACTIVE: AtomicUsize = AtomicUsize::new(0);
/// Counts publications, so a spinner notices a new job without touching
/// [`CURRENT`]'s job.
static EPOCH: AtomicU64 = AtomicU64::new(0);
/// Helper loops running (spinning or working) on the pool.
static ALIVE: AtomicUsize = AtomicUsize::new(0);
/// Bumped by [`quiet`] (and a resize): spinners of an older generation
/// return their thread to the pool.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// How long a helper that found itself on its caller's CPU, and could not
/// move off it, sleeps. Linux rounds a shorter sleep up to its default
/// timer slack (50 us) anyway.
const STEP_OFF: Duration = Duration::from_micros(50);

/// The CPU the calling thread is running on, where the OS tells (Linux);
/// `None` elsewhere.
fn current_cpu() -> Option<usize> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: `sched_getcpu` takes no arguments and only reports the
        // calling thread's CPU (-1 on failure, handled below).
        let cpu = unsafe { libc::sched_getcpu() };
        if let Ok(cpu) = usize::try_from(cpu) {
            return Some(cpu);
        }
    }
    None
}

/// The calling thread's affinity mask, or `None` if the OS refused it.
#[cfg(target_os = "linux")]
fn affinity() -> Option<libc::cpu_set_t> {
    // SAFETY: `cpu_set_t` is a plain bit array (all zeros: empty), and
    // `sched_getaffinity(0, ..)` writes at most its size into it, for the
    // calling thread.
    unsafe {
        let mut mask: libc::cpu_set_t = std::mem::zeroed();
        (libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut mask) == 0)
            .then_some(mask)
    }
}

/// Sets the calling thread's affinity mask; `false` if the OS refused it
/// (the mask is then unchanged). A running thread outside its new mask is
/// migrated before this returns.
#[cfg(target_os = "linux")]
fn set_affinity(mask: &libc::cpu_set_t) -> bool {
    // SAFETY: `sched_setaffinity(0, ..)` reads `size_of::<cpu_set_t>()`
    // bytes of the mask and changes the calling thread only.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), mask) == 0 }
}

/// Moves the calling thread off `cpu`, if its affinity allows another CPU:
/// narrowing the mask to the others migrates it ([`set_affinity`]); the
/// old mask is then restored (which moves nothing). `true` when the thread
/// now runs on another CPU.
#[cfg(target_os = "linux")]
fn move_off(cpu: usize) -> bool {
    if cpu >= libc::CPU_SETSIZE as usize {
        return false;
    }
    let Some(mask) = affinity() else {
        return false;
    };
    let mut others = mask;
    // SAFETY: `CPU_CLR` and `CPU_COUNT` touch the bits of a local mask;
    // `cpu` is below `CPU_SETSIZE` (checked above).
    let left = unsafe {
        libc::CPU_CLR(cpu, &mut others);
        libc::CPU_COUNT(&others)
    };
    if left == 0 || !set_affinity(&others) {
        return false;
    }
    // Asked under the narrowed mask: once the mask is restored the
    // scheduler may put the thread back on `cpu` at any moment.
    let moved = current_cpu().is_some_and(|c| c != cpu);
    // Restoring the mask just read fails only if the process's own
    // affinity shrank meanwhile; the helper then keeps the narrower mask,
    // which still lets it run.
    set_affinity(&mask);
    moved
}

/// Not Linux: no way to move; the helper sleeps instead.
#[cfg(not(target_os = "linux"))]
fn move_off(_cpu: usize) -> bool {
    false
}

/// How long a helper spins for the next job before it returns its thread.
fn spin_window() -> Duration {
    static WINDOW: OnceLock<Duration> = OnceLock::new();
    *WINDOW.get_or_init(|| {
        let us = std::env::var(SPIN_ENV)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(DEFAULT_SPIN_US);
        Duration::from_micros(us)
    })
}

/// One parallel loop `f(i)` for `i < n`, shared by the caller and helpers.
struct Job<'a> {
    next: AtomicUsize,
    n: usize,
    f: &'a (dyn Fn(usize) + Sync),
    /// The CPU the caller ran on when it published the job.
    caller_cpu: Option<usize>,
    /// The first panic of a helper's chunk, re-raised by the caller.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

impl Job<'_> {
    /// The caller's CPU if the calling thread (a helper) runs on it too
    /// (module docs: such a helper moves off it).
    fn shared_cpu(&self) -> Option<usize> {
        self.caller_cpu.filter(|&c| current_cpu() == Some(c))
    }

    /// Takes indices until none are left.
    fn work(&self) {
        loop {
            let i = self.next.fetch_add(1, Relaxed);
            if i >= self.n {
                return;
            }
            (self.f)(i);
        }
    }

    /// [`Job::work`] for a helper: a panic is kept for the caller and stops
    /// the other threads from taking more indices.
    fn help(&self) {
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| self.work())) {
            self.next.store(self.n, Relaxed);
            let mut slot = self.panic.lock().unwrap_or_else(PoisonError::into_inner);
            slot.get_or_insert(p);
        }
    }
}

/// Runs `f(i)` for every `i < n` with up to `helpers` helpers of `pool`;
/// `false` (and nothing run) when another job holds the slot.
pub(super) fn try_run(
    pool: &rayon::ThreadPool,
    helpers: usize,
    n: usize,
    f: &(dyn Fn(usize) + Sync),
) -> bool {
    let job = Job {
        next: AtomicUsize::new(0),
        n,
        f,
        caller_cpu: current_cpu(),
        panic: Mutex::new(None),
    };
    // SAFETY: only the lifetime is erased. The job is removed from the slot
    // below before this function returns, and the wait for `ACTIVE == 0`
    // after that outlasts every helper that read the pointer (module docs).
    let ptr =
        unsafe { std::mem::transmute::<*const Job<'_>, *mut Job<'static>>(&job as *const Job<'_>) };
    if CURRENT
        .compare_exchange(std::ptr::null_mut(), ptr, SeqCst, Relaxed)
        .is_err()
    {
        return false;
    }
    EPOCH.fetch_add(1, SeqCst);
    let generation = GENERATION.load(SeqCst);
    // A helper leaving at this moment may re-join (`helper`): both sides
    // raise `ALIVE` only below a bound, so the helpers never outnumber the
    // pool's other threads.
    let most = pool.current_num_threads().saturating_sub(1);
    while join(helpers) {
        pool.spawn(move || helper(generation, most));
    }
    let mine = catch_unwind(AssertUnwindSafe(|| job.work()));
    if mine.is_err() {
        job.next.store(n, Relaxed);
    }
    CURRENT.store(std::ptr::null_mut(), SeqCst);
    let mut spins = 0u32;
    while ACTIVE.load(SeqCst) != 0 {
        // A helper is inside a chunk (or just looking): it finishes soon,
        // unless it was descheduled, when yielding lets it run.
        spins += 1;
        if spins < 1 << 12 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
    if let Err(p) = mine {
        resume_unwind(p);
    }
    if let Some(p) = job
        .panic
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner)
    {
        resume_unwind(p);
    }
    true
}

/// Sends every spinning helper back to the pool (before `install` hands
/// the pool other work, and on a resize). Helpers inside a job finish it.
pub(super) fn quiet() {
    GENERATION.fetch_add(1, SeqCst);
}

/// Counts one more helper alive if fewer than `most` are: `true` when it
/// did.
fn join(most: usize) -> bool {
    ALIVE
        .fetch_update(SeqCst, SeqCst, |a| (a < most).then_some(a + 1))
        .is_ok()
}

/// A helper's loop: serve each new job, spin up to the window between jobs,
/// return when the window passes or the generation changes. `most`: the
/// pool's threads less one (the bound on [`ALIVE`]).
fn helper(generation: u64, most: usize) {
    let window = spin_window();
    let mut seen = 0u64;
    loop {
        serve(generation, window, &mut seen);
        ALIVE.fetch_sub(1, SeqCst);
        // A caller that published after the last look, but counted this
        // helper as alive, spawned no replacement: serve it too (the caller
        // finishes its job alone if this helper comes late).
        if GENERATION.load(SeqCst) != generation || EPOCH.load(SeqCst) == seen || !join(most) {
            return;
        }
    }
}

/// Joins the published job, if any: helps with it, or, on the caller's
/// CPU, moves off that CPU (or sleeps where it cannot). `true` when the
/// helper moved, so that it looks at the slot again from its new CPU.
fn visit() -> bool {
    ACTIVE.fetch_add(1, SeqCst);
    let p = CURRENT.load(SeqCst);
    let mut shared = None;
    if !p.is_null() {
        // SAFETY: `ACTIVE` was raised before the slot was read, so the
        // job's caller has not yet passed its wait (module docs): the job
        // is alive until the decrement below.
        let job = unsafe { &*p };
        shared = job.shared_cpu();
        if shared.is_none() {
            job.help();
        }
    }
    ACTIVE.fetch_sub(1, SeqCst);
    let Some(cpu) = shared else {
        return false;
    };
    if move_off(cpu) {
        return true;
    }
    std::thread::sleep(STEP_OFF);
    false
}

/// Serves jobs until `window` passes without one or the generation changes.
fn serve(generation: u64, window: Duration, seen: &mut u64) {
    let mut idle_since = Instant::now();
    let mut spins = 0u32;
    loop {
        let epoch = EPOCH.load(SeqCst);
        if epoch != *seen {
            *seen = epoch;
            // Once more after a move: the job may still be there.
            while visit() {}
            idle_since = Instant::now();
            continue;
        }
        if GENERATION.load(Relaxed) != generation {
            return;
        }
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(64) && idle_since.elapsed() >= window {
            return;
        }
        std::hint::spin_loop();
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// The CPUs this process may run on.
    fn allowed_cpus() -> Vec<usize> {
        let Some(mask) = affinity() else {
            return Vec::new();
        };
        (0..libc::CPU_SETSIZE as usize)
            // SAFETY: `CPU_ISSET` reads a bit below `CPU_SETSIZE` of a local mask.
            .filter(|&c| unsafe { libc::CPU_ISSET(c, &mask) })
            .collect()
    }

    /// Pins the calling thread to `cpu` (one of [`allowed_cpus`]); `false`
    /// where the process may not set its affinity.
    fn pin_to(cpu: usize) -> bool {
        // SAFETY: all zeros is the empty mask; `CPU_SET` writes the bit of
        // `cpu`, below `CPU_SETSIZE`.
        let one = unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            set
        };
        set_affinity(&one)
    }

    /// Whether this process may set a thread's affinity (tried on a thread
    /// of its own); the tests that need it are skipped where it may not.
    fn may_pin() -> bool {
        let Some(&first) = allowed_cpus().first() else {
            return false;
        };
        std::thread::spawn(move || pin_to(first))
            .join()
            .unwrap_or(false)
    }

    /// Runs 20 jobs of 64 indices (20 us of work each) from a thread pinned
    /// to `caller`, with a pool pinned to `helpers`; returns the indices the
    /// pool's threads ran. The pool has more threads than the kernel pool,
    /// so at least one of its helpers joins whatever other tests run.
    fn indices_run_by_helpers(caller: usize, helpers: usize) -> usize {
        std::thread::spawn(move || {
            assert!(pin_to(caller), "the caller's pin worked in the test");
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(super::super::num_threads() + 2)
                .thread_name(|i| format!("team-test-{i}"))
                .start_handler(move |_| {
                    // The caller's pin worked, so this one does too (a
                    // panic here would abort the process).
                    pin_to(helpers);
                })
                .build()
                .expect("test pool");
            let by_pool = AtomicUsize::new(0);
            let work = |_: usize| {
                let t = Instant::now();
                while t.elapsed() < Duration::from_micros(20) {
                    std::hint::spin_loop();
                }
                let name = std::thread::current().name().map(str::to_owned);
                if name.is_some_and(|n| n.starts_with("team-test-")) {
                    by_pool.fetch_add(1, Relaxed);
                }
            };
            for _ in 0..20 {
                // Another test's job may hold the slot: try again.
                while !try_run(&pool, pool.current_num_threads() - 1, 64, &work) {
                    std::thread::yield_now();
                }
            }
            quiet();
            by_pool.load(Relaxed)
        })
        .join()
        .expect("test thread")
    }

    /// `move_off` leaves the CPU and keeps the thread's affinity.
    #[test]
    fn move_off_changes_the_cpu_and_restores_the_mask() {
        if allowed_cpus().len() < 2 || !may_pin() {
            return;
        }
        std::thread::spawn(|| {
            let before = allowed_cpus();
            let cpu = current_cpu().expect("sched_getcpu");
            // Only `move_off`'s own answer is checked: after the restore
            // the scheduler may move the thread back at any moment.
            assert!(move_off(cpu));
            assert_eq!(allowed_cpus(), before);
            // Pinned to one CPU, there is nowhere to go.
            assert!(pin_to(before[0]));
            assert!(!move_off(before[0]));
        })
        .join()
        .expect("test thread");
    }

    /// Helpers pinned to the caller's CPU take no indices (without the
    /// step-off they spin there and take some whenever the scheduler runs
    /// them), and helpers on another CPU do.
    #[test]
    fn a_helper_on_its_callers_cpu_steps_off() {
        let cpus = allowed_cpus();
        let Some(&first) = cpus.first() else { return };
        if !may_pin() {
            return;
        }
        assert_eq!(indices_run_by_helpers(first, first), 0);
        if let Some(&other) = cpus.get(1) {
            assert!(indices_run_by_helpers(first, other) > 0);
        }
    }
}
