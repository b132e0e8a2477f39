//! Leak checks users can call: live tensors and live bytes, for the whole
//! process and per device, and an assertion helper for tests.
//!
//! * [`live_tensors`] / [`live_tensors_on`]: tensors alive now. A tensor is
//!   counted once however many handles [`alias`](crate::Tensor::alias) made
//!   for it; every view, [`detach`](crate::Tensor::detach) and op result is a
//!   tensor of its own.
//! * [`live_bytes`] / [`live_bytes_on`]: bytes the device's caching allocator
//!   has handed to live storages (rounded block sizes, exactly
//!   [`memory_allocated`](crate::memory::memory_allocated)). Bytes the
//!   allocator keeps cached for reuse are not live and never count as a leak.
//! * [`live_scoped_tensors`]: tensors held by [`scope`](crate::scope()) blocks
//!   that are still open, on every thread. A number that grows while a program
//!   runs means a scope around a long loop: open one scope per iteration.
//! * [`assert_no_leaks`], [`check_leaks`] and [`LeakCheck`]: "this block
//!   returns every tensor and every byte it took".
//!
//! ```
//! use tensorscope::{leak, DType, Device, Tensor};
//! let sum = leak::assert_no_leaks(|| -> tensorscope::Result<f64> {
//!     let x = Tensor::ones(&[64, 64], DType::F32, Device::Cpu)?;
//!     let y = x.mul_scalar(2.0)?.add(&x)?;   // temporaries die with the statement
//!     y.narrow(0, 0, 1)?.narrow(1, 0, 1)?.item::<f64>()
//! });
//! assert_eq!(sum?, 3.0);
//! # Ok::<(), tensorscope::Error>(())
//! ```
//!
//! The counters are global to the process: a check is exact only while no
//! other thread creates or frees tensors (in a test binary, take one shared
//! `static` mutex in every test that counts, or run with `--test-threads=1`).

use crate::device::Device;
use std::fmt;
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// CUDA ordinals with a counter of their own; higher ordinals share the last one.
const CUDA_SLOTS: usize = 16;
const SLOTS: usize = 1 + CUDA_SLOTS;

/// Live-tensor counters per device, `[cpu, cuda:0, ..., cuda:15+]`: tensors
/// made minus tensors dropped. A tensor made on one thread and dropped on
/// another counts +1 in one set and -1 in another; only the sum means
/// anything.
struct Counts([AtomicIsize; SLOTS]);

impl Counts {
    const fn new() -> Counts {
        Counts([const { AtomicIsize::new(0) }; SLOTS])
    }
}

/// The counters of every running thread that has made or dropped a tensor.
/// Each thread writes only its own set, with plain loads and stores (no
/// atomic read-modify-write, no shared cache line: making and dropping a
/// tensor is a few instructions); readers sum every set under this lock.
static THREADS: Mutex<Vec<Arc<Counts>>> = Mutex::new(Vec::new());

/// Counts of threads that have exited, and of changes made while a thread's
/// own set was unavailable (during its thread-local destructors).
static RETIRED: Counts = Counts::new();

/// A thread's set, registered in [`THREADS`] on first use and folded into
/// [`RETIRED`] when the thread exits.
struct Local(Arc<Counts>);

impl Local {
    fn register() -> Local {
        let c = Arc::new(Counts::new());
        threads().push(Arc::clone(&c));
        Local(c)
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        // Under the lock, so a reader sees these counts exactly once.
        let mut all = threads();
        for (r, c) in RETIRED.0.iter().zip(&self.0 .0) {
            r.fetch_add(c.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        all.retain(|c| !Arc::ptr_eq(c, &self.0));
    }
}

thread_local! {
    static LOCAL: Local = Local::register();
}

fn threads() -> std::sync::MutexGuard<'static, Vec<Arc<Counts>>> {
    THREADS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Adds `d` to this thread's counter of `slot`.
#[inline]
fn bump(slot: usize, d: isize) {
    let done = LOCAL.try_with(|l| {
        // Only this thread writes its set: load + store is exact.
        let c = &l.0 .0[slot];
        c.store(c.load(Ordering::Relaxed) + d, Ordering::Relaxed);
    });
    if done.is_err() {
        RETIRED.0[slot].fetch_add(d, Ordering::Relaxed);
    }
}

/// Tensors held by open scopes, all threads.
pub(crate) static SCOPED: AtomicUsize = AtomicUsize::new(0);

fn slot(device: Device) -> usize {
    match device {
        Device::Cpu => 0,
        Device::Cuda(i) => 1 + i.min(CUDA_SLOTS - 1),
    }
}

/// Called when a tensor implementation is made.
#[inline]
pub(crate) fn tensor_created(device: Device) {
    bump(slot(device), 1);
}

/// Called when a tensor implementation is dropped.
#[inline]
pub(crate) fn tensor_dropped(device: Device) {
    bump(slot(device), -1);
}

/// Live tensors per slot: every thread's counters and the retired ones.
fn live() -> [usize; SLOTS] {
    let all = threads();
    let mut sum = [0isize; SLOTS];
    for c in all.iter().map(|c| &**c).chain(std::iter::once(&RETIRED)) {
        for (s, v) in sum.iter_mut().zip(&c.0) {
            *s += v.load(Ordering::Relaxed);
        }
    }
    // Negative only transiently, while other threads make and drop tensors.
    sum.map(|s| s.max(0) as usize)
}

/// Tensors alive now, on every device.
pub fn live_tensors() -> usize {
    live().iter().sum()
}

/// Tensors alive now on `device` (CUDA ordinals of 15 and above share one counter).
pub fn live_tensors_on(device: Device) -> usize {
    live()[slot(device)]
}

/// Bytes held by live tensors on `device`: the allocator's
/// [`memory_allocated`](crate::memory::memory_allocated). 0 for a device that
/// is not usable.
pub fn live_bytes_on(device: Device) -> usize {
    crate::memory::memory_allocated(device)
}

/// Bytes held by live tensors on every usable device.
pub fn live_bytes() -> usize {
    devices().into_iter().map(live_bytes_on).sum()
}

/// Tensors held by [`scope`](crate::scope()) blocks that are still open (all threads).
pub fn live_scoped_tensors() -> usize {
    SCOPED.load(Ordering::Relaxed)
}

/// The CPU, every CUDA device this build can see, and any CUDA counter that
/// is not zero.
fn devices() -> Vec<Device> {
    let n = crate::backend::cuda::device_count();
    let live = live();
    let mut out = vec![Device::Cpu];
    out.extend((0..n.max(CUDA_SLOTS)).filter_map(|i| {
        let d = Device::Cuda(i);
        (i < n || (i < CUDA_SLOTS && live[slot(d)] > 0)).then_some(d)
    }));
    out
}

/// Live tensors and bytes on one device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceUsage {
    /// The device.
    pub device: Device,
    /// Live tensors (see [`live_tensors_on`]).
    pub tensors: usize,
    /// Live bytes (see [`live_bytes_on`]).
    pub bytes: usize,
}

/// Live tensors and bytes on every device at one moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeakSnapshot {
    /// One entry per device, the CPU first.
    pub devices: Vec<DeviceUsage>,
    /// Tensors held by open scopes (see [`live_scoped_tensors`]).
    pub scoped: usize,
}

impl LeakSnapshot {
    /// The counts now.
    pub fn now() -> LeakSnapshot {
        LeakSnapshot {
            devices: devices()
                .into_iter()
                .map(|device| DeviceUsage {
                    device,
                    tensors: live_tensors_on(device),
                    bytes: live_bytes_on(device),
                })
                .collect(),
            scoped: live_scoped_tensors(),
        }
    }

    /// The entry of `device` (zeros if the snapshot has none).
    pub fn on(&self, device: Device) -> DeviceUsage {
        self.devices
            .iter()
            .find(|u| u.device == device)
            .copied()
            .unwrap_or(DeviceUsage {
                device,
                tensors: 0,
                bytes: 0,
            })
    }

    /// Live tensors, all devices.
    pub fn tensors(&self) -> usize {
        self.devices.iter().map(|u| u.tensors).sum()
    }

    /// Live bytes, all devices.
    pub fn bytes(&self) -> usize {
        self.devices.iter().map(|u| u.bytes).sum()
    }
}

/// The counts now (same as [`LeakSnapshot::now`]).
pub fn snapshot() -> LeakSnapshot {
    LeakSnapshot::now()
}

/// What a failed leak check found: the counts before and after the block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeakReport {
    /// Counts when the check began.
    pub before: LeakSnapshot,
    /// Counts when it ended.
    pub after: LeakSnapshot,
}

impl LeakReport {
    /// The devices on which tensors or bytes grew, with the growth
    /// (`after - before`, both as signed numbers).
    pub fn leaks(&self) -> Vec<(Device, i64, i64)> {
        let mut devs: Vec<Device> = self.before.devices.iter().map(|u| u.device).collect();
        for u in &self.after.devices {
            if !devs.contains(&u.device) {
                devs.push(u.device);
            }
        }
        devs.into_iter()
            .filter_map(|d| {
                let (b, a) = (self.before.on(d), self.after.on(d));
                let dt = a.tensors as i64 - b.tensors as i64;
                let db = a.bytes as i64 - b.bytes as i64;
                (dt > 0 || db > 0).then_some((d, dt, db))
            })
            .collect()
    }
}

impl fmt::Display for LeakReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "leak check: the block did not return everything it took:"
        )?;
        for (d, dt, db) in self.leaks() {
            let b = self.before.on(d);
            let a = self.after.on(d);
            write!(
                f,
                " {d}: {dt:+} tensor(s) ({} -> {}), {db:+} bytes ({} -> {});",
                b.tensors,
                a.tensors,
                crate::memory::fmt_bytes(b.bytes),
                crate::memory::fmt_bytes(a.bytes)
            )?;
        }
        write!(
            f,
            " tensors held by open scopes: {} -> {}",
            self.before.scoped, self.after.scoped
        )
    }
}

impl std::error::Error for LeakReport {}

/// A leak check spanning a stretch of code: [`begin`](LeakCheck::begin)
/// takes a snapshot, [`finish`](LeakCheck::finish) compares.
///
/// ```
/// use tensorscope::{leak::LeakCheck, DType, Device, Tensor};
/// let check = LeakCheck::begin();
/// let t = Tensor::zeros(&[16], DType::F32, Device::Cpu)?;
/// let report = check.finish().unwrap_err();   // `t` is still alive
/// assert_eq!(report.leaks()[0].1, 1);          // one tensor more on the CPU
/// drop(t);
/// assert!(check.finish().is_ok());
/// # Ok::<(), tensorscope::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct LeakCheck {
    before: LeakSnapshot,
}

impl LeakCheck {
    /// Takes the "before" snapshot.
    pub fn begin() -> LeakCheck {
        LeakCheck {
            before: LeakSnapshot::now(),
        }
    }

    /// The snapshot taken by [`begin`](LeakCheck::begin).
    pub fn before(&self) -> &LeakSnapshot {
        &self.before
    }

    /// `Ok` if no device holds more live tensors or more live bytes than at
    /// [`begin`](LeakCheck::begin) (fewer is fine: the code freed something
    /// older). Otherwise the report.
    pub fn finish(&self) -> Result<(), LeakReport> {
        let report = LeakReport {
            before: self.before.clone(),
            after: LeakSnapshot::now(),
        };
        if report.leaks().is_empty() {
            Ok(())
        } else {
            Err(report)
        }
    }

    /// Panics with the report if [`finish`](LeakCheck::finish) finds a leak.
    #[track_caller]
    pub fn assert_clean(&self) {
        if let Err(r) = self.finish() {
            panic!("{r}");
        }
    }
}

/// Runs `f` and checks that it returned every tensor and byte it took
/// (whatever it returns counts as still taken). Returns `f`'s value and the
/// outcome.
pub fn check_leaks<R>(f: impl FnOnce() -> R) -> (R, Result<(), LeakReport>) {
    let check = LeakCheck::begin();
    let r = f();
    (r, check.finish())
}

/// Runs `f` and panics with a [`LeakReport`] if, once it has returned, any
/// device holds more live tensors or bytes than before. Whatever `f` returns
/// is still alive at the check: return plain values, not tensors.
#[track_caller]
pub fn assert_no_leaks<R>(f: impl FnOnce() -> R) -> R {
    let (r, outcome) = check_leaks(f);
    if let Err(report) = outcome {
        panic!("{report}");
    }
    r
}
