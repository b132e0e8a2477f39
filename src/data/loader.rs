//! [`DataLoader`]: batches assembled in a fixed ring of buffers, by worker
//! threads that run ahead of the training loop.
//!
//! The ring holds `buffers` slots (2: double buffering, 3: triple), each a
//! tensor of `[batch_size, ...]` per field, allocated once when the loader
//! is built. A worker takes a free slot, then the next batch number, and
//! writes each sample of the batch straight into its rows
//! ([`Dataset::get`] on a [`Slot`] over them); [`Epoch::next`] hands the
//! batches out in order as borrowed [`Batch`]es, and a dropped batch gives
//! its slot back. Taking the slot *before* the batch number keeps the
//! batches in flight a contiguous run from the one the loop waits for, so
//! the ring cannot fill with later batches while the next one waits for a
//! slot.
//!
//! With `num_workers(0)` the calling thread fills each batch in `next`.
//! `prefetch(d)` bounds how far the workers run ahead of the loop.
//!
//! For a CUDA target the ring has a device half too (allocated once, see
//! `device_ring.rs`): `next` queues each batch's host-to-device copy on the
//! loader's own copy stream and makes the caller's current stream wait for
//! it with an event, so the copy of one batch overlaps the compute of the
//! one before. With `pin_memory(true)` the host half is page-locked and the
//! copies are asynchronous (from pageable memory the driver stages them and
//! `next` waits for each).

use super::device_ring::DeviceRing;
use super::sampler::{BatchSampler, DistributedSampler, RandomSampler, Sampler, SequentialSampler};
use super::{Dataset, Field, Slot};
use crate::borrowed::TensorView;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use smallvec::SmallVec;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

/// Settings of a [`DataLoader`] (PyTorch's `DataLoader` arguments).
pub struct DataLoaderBuilder<D: Dataset + 'static> {
    dataset: Arc<D>,
    batch_size: usize,
    sampler: Option<Box<dyn Sampler>>,
    shuffle: Option<u64>,
    /// `(rank, world_size)`: this rank's share only.
    distributed: Option<(usize, usize)>,
    drop_last: bool,
    num_workers: usize,
    buffers: usize,
    prefetch: Option<usize>,
    pin_memory: bool,
    device: Device,
}

impl<D: Dataset + 'static> DataLoaderBuilder<D> {
    /// Samples per batch (default 1).
    pub fn batch_size(mut self, n: usize) -> Self {
        self.batch_size = n;
        self
    }
    /// A new random order each epoch, from `seed` and the epoch.
    pub fn shuffle(mut self, seed: u64) -> Self {
        self.shuffle = Some(seed);
        self
    }
    /// The order of the samples (instead of `shuffle`).
    pub fn sampler(mut self, s: impl Sampler + 'static) -> Self {
        self.sampler = Some(Box::new(s));
        self
    }
    /// Only rank `rank`'s share of the samples, of `world_size` ranks
    /// training data-parallel: a [`DistributedSampler`](super::DistributedSampler)
    /// over the dataset, shuffled the same on every rank if `shuffle` is
    /// given, padded to equal shares (or cut, with `drop_last`), so that
    /// every rank runs the same number of steps. With a group at hand:
    /// `.distributed(pg.rank(), pg.world_size())`.
    pub fn distributed(mut self, rank: usize, world_size: usize) -> Self {
        self.distributed = Some((rank, world_size));
        self
    }
    /// Drop the last batch when it is short (default: keep it).
    pub fn drop_last(mut self, yes: bool) -> Self {
        self.drop_last = yes;
        self
    }
    /// Worker threads filling batches ahead (default 0: the caller's thread).
    pub fn num_workers(mut self, n: usize) -> Self {
        self.num_workers = n;
        self
    }
    /// Ring slots: 2 for double buffering (the default), 3 for triple.
    pub fn buffers(mut self, n: usize) -> Self {
        self.buffers = n;
        self
    }
    /// How many batches the workers may load ahead of the loop: batch `j`
    /// is started only once the loop has asked `next` for batch
    /// `j - prefetch` (1 to `buffers`; the default, `buffers`, lets the
    /// ring alone bound it; 1 is classic double buffering: one batch loads
    /// while the loop works on the one before).
    /// Lower it to leave the loop more of a small machine's cores. The
    /// ring's memory does not depend on it. (PyTorch's `prefetch_factor`
    /// counts per worker; here it counts for the loader.)
    pub fn prefetch(mut self, batches: usize) -> Self {
        self.prefetch = Some(batches);
        self
    }
    /// Page-locked host buffers for a CUDA target (PyTorch's
    /// `pin_memory=True`), so that each batch's copy to the device runs
    /// asynchronously on the loader's copy stream. Ignored for a CPU
    /// target, where nothing is copied (PyTorch pins there too when a GPU
    /// is present, for copies the loader does not make).
    pub fn pin_memory(mut self, yes: bool) -> Self {
        self.pin_memory = yes;
        self
    }
    /// Where batches are delivered (default: the CPU).
    pub fn device(mut self, d: Device) -> Self {
        self.device = d;
        self
    }

    /// The loader, its ring allocated: an error for a batch size or ring
    /// of 0, a prefetch depth outside `1..=buffers`, or a sampler and
    /// `shuffle` both given. (A sampler may visit fewer or more indices
    /// than the dataset has, as a distributed or weighted one does; an
    /// index past the end is the dataset's error.)
    pub fn build(self) -> Result<DataLoader<D>> {
        const OP: &str = "DataLoader::build";
        let bad = |msg: String| Error::InvalidArgument { op: OP, msg };
        if self.buffers == 0 {
            return Err(bad("a ring of 0 buffers".into()));
        }
        let prefetch = self.prefetch.unwrap_or(self.buffers);
        if prefetch == 0 || prefetch > self.buffers {
            return Err(bad(format!(
                "prefetch {prefetch} with {} buffers: it must be 1 to the number of buffers",
                self.buffers
            )));
        }
        let n = self.dataset.len();
        let sampler: Box<dyn Sampler> = match (self.sampler, self.shuffle, self.distributed) {
            (Some(_), Some(_), _) => return Err(bad("both a sampler and shuffle".into())),
            (Some(_), _, Some(_)) => return Err(bad("both a sampler and distributed".into())),
            (Some(s), None, None) => s,
            (None, shuffle, Some((rank, world))) => Box::new(
                DistributedSampler::new(
                    n,
                    rank,
                    world,
                    shuffle.is_some(),
                    shuffle.unwrap_or(0),
                    self.drop_last,
                )
                .map_err(|e| e.reported_as(OP))?,
            ),
            (None, Some(seed), None) => Box::new(RandomSampler::new(n, seed)),
            (None, None, None) => Box::new(SequentialSampler::new(n)),
        };
        let batches = BatchSampler::new(sampler, self.batch_size, self.drop_last)
            .map_err(|_| bad("batch_size 0".into()))?;
        let pinned = self.pin_memory && self.device.is_cuda();
        let host = (0..self.buffers)
            .map(|_| {
                self.dataset
                    .fields()
                    .iter()
                    .map(|f| {
                        let mut shape = vec![self.batch_size];
                        shape.extend_from_slice(&f.shape);
                        let t = Tensor::zeros(&shape, f.dtype, Device::Cpu)?;
                        if pinned {
                            t.pin_memory()
                        } else {
                            Ok(t)
                        }
                    })
                    .collect::<Result<Vec<_>>>()
            })
            .collect::<Result<Vec<_>>>()
            .map_err(|e| e.reported_as(OP))?;
        let device_ring = if self.device.is_cpu() {
            None
        } else {
            Some(Arc::new(
                DeviceRing::new(self.device, &host).map_err(|e| e.reported_as(OP))?,
            ))
        };
        Ok(DataLoader {
            fields: Arc::new(self.dataset.fields().to_vec()),
            dataset: self.dataset,
            batches,
            host,
            device_ring,
            pinned,
            num_workers: self.num_workers,
            prefetch,
            epoch: 0,
            last: None,
        })
    }
}

/// Batches of a [`Dataset`] in a fixed ring of buffers (see the module
/// docs).
///
/// ```
/// use std::sync::Arc;
/// use tensorscope::data::{DataLoader, TensorDataset};
/// use tensorscope::{memory, Device, Tensor};
/// let x = Tensor::arange(0.0, 20.0, 1.0, tensorscope::DType::F32, Device::Cpu)?.view(&[10, 2])?;
/// let ds = Arc::new(TensorDataset::new(vec![x])?);
/// let mut loader = DataLoader::builder(ds).batch_size(4).num_workers(2).build()?;
/// let before = memory::memory_stats(Device::Cpu).allocation.all.allocated;
/// let mut rows = 0;
/// let mut epoch = loader.epoch();
/// while let Some(batch) = epoch.next() {
///     let batch = batch?;
///     rows += batch.len();            // 4, 4, then the short last batch of 2
///     let _x = batch.field(0)?;       // a view borrowing the batch
/// }
/// assert_eq!(rows, 10);
/// drop(epoch);
/// // The ring was allocated by `build`: the epoch allocated no tensor memory.
/// assert_eq!(memory::memory_stats(Device::Cpu).allocation.all.allocated, before);
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub struct DataLoader<D: Dataset + 'static> {
    dataset: Arc<D>,
    /// The dataset's fields when the ring was sized (what every slot is
    /// written as, whatever `fields()` says later).
    fields: Arc<Vec<Field>>,
    batches: BatchSampler<Box<dyn Sampler>>,
    /// Ring slots on the host: per slot, one `[batch_size, ...]` per field.
    host: Vec<Vec<Tensor>>,
    /// The device half of the ring (a CUDA target).
    device_ring: Option<Arc<DeviceRing>>,
    /// Whether the host slots are page-locked.
    pinned: bool,
    num_workers: usize,
    prefetch: usize,
    epoch: u64,
    /// The latest epoch's bookkeeping (see `epoch_at`).
    last: Option<Arc<Shared>>,
}

impl<D: Dataset + 'static> DataLoader<D> {
    /// A builder over `dataset`.
    pub fn builder(dataset: Arc<D>) -> DataLoaderBuilder<D> {
        DataLoaderBuilder {
            dataset,
            batch_size: 1,
            sampler: None,
            shuffle: None,
            distributed: None,
            drop_last: false,
            num_workers: 0,
            buffers: 2,
            prefetch: None,
            pin_memory: false,
            device: Device::Cpu,
        }
    }

    /// Batches per epoch.
    pub fn len(&self) -> usize {
        self.batches.len()
    }

    /// Whether an epoch has no batch.
    pub fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }

    /// Whether the ring's host buffers are page-locked (asked with
    /// `pin_memory(true)`, for a CUDA target).
    pub fn is_pinned(&self) -> bool {
        self.pinned
    }

    /// Bytes the ring holds (host and device halves together).
    pub fn ring_bytes(&self) -> usize {
        let device: &[Vec<Tensor>] = match &self.device_ring {
            Some(r) => r.slots(),
            None => &[],
        };
        self.host
            .iter()
            .chain(device)
            .flatten()
            .map(|t| t.numel() * t.dtype().size_in_bytes())
            .sum()
    }

    /// The next epoch's batches (epochs count from 0; each call moves on).
    pub fn epoch(&mut self) -> Epoch<'_, D> {
        let e = self.epoch;
        self.epoch += 1;
        self.epoch_at(e)
    }

    /// The batches of epoch `epoch` (a shuffled order depends on it).
    pub fn epoch_at(&mut self, epoch: u64) -> Epoch<'_, D> {
        let jobs = Arc::new(self.batches.batches(epoch));
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                free: (0..self.host.len()).rev().collect(),
                next_job: 0,
                asked: 0,
                done: BTreeMap::new(),
                live_workers: self.num_workers.min(jobs.len()),
            }),
            cv: Condvar::new(),
            halt: AtomicBool::new(false),
        });
        // An earlier epoch's workers are gone, even if that epoch was leaked
        // (`mem::forget`) instead of dropped: they must not write the ring
        // this epoch fills.
        if let Some(old) = self.last.replace(shared.clone()) {
            old.halt_and_wait();
        }
        let workers = (0..self.num_workers.min(jobs.len()))
            .map(|_| {
                let (shared, jobs, ds) = (shared.clone(), jobs.clone(), self.dataset.clone());
                let owned_shared = shared.clone();
                let fields = self.fields.clone();
                let (ring, prefetch) = (self.device_ring.clone(), self.prefetch);
                let host: Vec<Vec<Tensor>> = self
                    .host
                    .iter()
                    .map(|s| s.iter().map(Tensor::alias).collect())
                    .collect();
                std::thread::spawn(move || {
                    // Counted out however the worker ends (a panic outside
                    // the dataset's `get` would be a bug of the ring), and
                    // only after its handles to the ring and the dataset
                    // are gone: whoever waits for `live_workers == 0` (a
                    // leaked epoch's successor) then sees their bytes
                    // freed.
                    let owned = scopeguard::guard((host, ring, ds), |owned| {
                        drop(owned);
                        shared.lock().live_workers -= 1;
                        shared.cv.notify_all();
                    });
                    let (host, ring, ds) = &*owned;
                    let ctx = Worker {
                        shared: &owned_shared,
                        jobs: &jobs,
                        ds: &**ds,
                        fields: &fields,
                        host,
                        ring: ring.as_deref(),
                        prefetch,
                    };
                    ctx.run()
                })
            })
            .collect();
        Epoch {
            loader: self,
            jobs,
            shared,
            workers,
            next: 0,
            failed: false,
        }
    }
}

impl<D: Dataset + 'static> Drop for DataLoader<D> {
    /// The workers of an epoch leaked with `mem::forget` (a dropped epoch
    /// has joined its own) would otherwise wait for slots forever, keeping
    /// the ring and the dataset alive.
    fn drop(&mut self) {
        if let Some(last) = self.last.take() {
            last.halt_and_wait();
        }
    }
}

/// The ring's bookkeeping, shared by an epoch and its workers.
struct Shared {
    state: Mutex<State>,
    cv: Condvar,
    /// Set when the epoch ends early: workers take no more batches, and
    /// `fill` checks it before each sample, so the end waits for one
    /// sample per worker, not for whole batches. Set under the state's
    /// lock (see [`Shared::halt`]), so a worker about to wait sees it or
    /// gets the notification.
    halt: AtomicBool,
}

struct State {
    /// Slots no batch holds.
    free: Vec<usize>,
    /// The next batch number to hand to a worker.
    next_job: usize,
    /// The batch number `next` last asked for (workers start batches up to
    /// `asked + prefetch`).
    asked: usize,
    /// Filled batches not yet handed out: batch number -> (slot, result).
    done: BTreeMap<usize, (usize, Result<()>)>,
    live_workers: usize,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
    /// Ends the epoch: sets `halt` under the lock and wakes every waiter;
    /// returns the lock.
    fn halt(&self) -> MutexGuard<'_, State> {
        let g = self.lock();
        self.halt.store(true, Ordering::Relaxed);
        self.cv.notify_all();
        g
    }
    fn wait<'a>(&self, g: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.cv.wait(g).unwrap_or_else(PoisonError::into_inner)
    }
    /// Ends the epoch and waits until its workers have counted themselves
    /// out (having dropped their handles to the ring and the dataset).
    fn halt_and_wait(&self) {
        let mut g = self.halt();
        while g.live_workers > 0 {
            g = self.wait(g);
        }
    }
}

/// Writes the samples `indices` into the rows of ring slot `slot`, whose
/// tensors were sized from `fields`. Bumps the slot storages' versions, so
/// that autograd refuses a backward through a tensor it saved from the
/// batch this slot held before (an owned handle kept past its batch).
fn fill(
    ds: &dyn Dataset,
    fields: &[Field],
    slot: &[Tensor],
    indices: &[usize],
    halt: &AtomicBool,
) -> Result<()> {
    for t in slot {
        t.storage().bump_version();
    }
    for (row, &i) in indices.iter().enumerate() {
        if halt.load(Ordering::Relaxed) {
            // Nobody will read this batch: the epoch has ended.
            return Ok(());
        }
        // (A `Vec`, not an inline `SmallVec`: `Slot` borrows it for as long
        // as the slices in it live, which only `Vec`'s drop allows.)
        let mut bufs: Vec<&mut [u8]> = Vec::with_capacity(fields.len());
        let mut locks: SmallVec<[_; 4]> = SmallVec::with_capacity(fields.len());
        for (t, f) in slot.iter().zip(fields) {
            let n = f.nbytes();
            locks.push(crate::storage::lock(&[], &[t.storage()]));
            let start = t.storage_offset() * f.dtype.size_in_bytes() + row * n;
            assert!(
                start + n <= t.storage().nbytes(),
                "ring slot sized from the same fields"
            );
            let p = crate::backend::cpu::ptr::<u8>(t.storage());
            // SAFETY: `t` is a contiguous `[batch_size, ...f.shape]` CPU
            // tensor of the ring, made by `build` from these `fields`, and
            // `row < batch_size`, so the `n` bytes at `start` lie inside its
            // storage (asserted above); the write
            // lock keeps every other reader and writer out while they are
            // written; no batch holds this slot (the ring's protocol: a slot
            // is one worker's until it is done).
            bufs.push(unsafe { std::slice::from_raw_parts_mut(p.add(start), n) });
        }
        let mut slot = Slot::new(fields, &mut bufs)?;
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ds.get(i, &mut slot)));
        if let Ok(Ok(())) = r {
            // A dataset may write any byte into a bool field; the tensor's
            // elements must be 0 or 1.
            slot.normalise_bools();
        }
        drop(locks);
        let msg = match r {
            Ok(Ok(())) => continue,
            Ok(Err(e)) => e.to_string(),
            Err(p) => format!(
                "the dataset panicked: {}",
                p.downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "(no message)".into())
            ),
        };
        return Err(Error::Data {
            op: "DataLoader::next",
            index: i,
            msg,
        });
    }
    Ok(())
}

/// What a worker thread works with.
struct Worker<'a> {
    shared: &'a Shared,
    jobs: &'a [Vec<usize>],
    ds: &'a dyn Dataset,
    fields: &'a [Field],
    host: &'a [Vec<Tensor>],
    ring: Option<&'a DeviceRing>,
    prefetch: usize,
}

impl Worker<'_> {
    /// Take a free slot, then the next batch number (within the prefetch
    /// depth); fill; repeat.
    fn run(&self) {
        let (shared, jobs) = (self.shared, self.jobs);
        loop {
            let mut g = shared.lock();
            let halted = || shared.halt.load(Ordering::Relaxed);
            while (g.free.is_empty() || g.next_job > g.asked + self.prefetch)
                && !halted()
                && g.next_job < jobs.len()
            {
                g = shared.wait(g);
            }
            if halted() || g.next_job >= jobs.len() {
                return;
            }
            let slot = g.free.pop().expect("checked non-empty");
            let job = g.next_job;
            g.next_job += 1;
            drop(g);
            let r = self.fill_slot(slot, job);
            let mut g = shared.lock();
            g.done.insert(job, (slot, r));
            shared.cv.notify_all();
        }
    }

    fn fill_slot(&self, slot: usize, job: usize) -> Result<()> {
        if let Some(ring) = self.ring {
            ring.host_free(slot)?;
        }
        // `fill` catches a panic in `get`; this catches any other, so that
        // the batch is reported instead of waited for.
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            fill(
                self.ds,
                self.fields,
                &self.host[slot],
                &self.jobs[job],
                &self.shared.halt,
            )
        }))
        .unwrap_or_else(|_| {
            Err(Error::Data {
                op: "DataLoader::next",
                index: self.jobs[job].first().copied().unwrap_or(0),
                msg: "a loader worker panicked".into(),
            })
        })
    }
}

/// One epoch's batches, in order: `while let Some(b) = epoch.next()`.
/// Dropping it early stops and joins the workers.
pub struct Epoch<'a, D: Dataset + 'static> {
    loader: &'a mut DataLoader<D>,
    jobs: Arc<Vec<Vec<usize>>>,
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    next: usize,
    failed: bool,
}

impl<D: Dataset + 'static> Epoch<'_, D> {
    /// The next batch, borrowing this epoch until it is dropped; `None` at
    /// the end of the epoch and after an error. A sample that cannot be
    /// loaded is an `Err` ([`Error::Data`], naming its index).
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<Result<Batch<'_>>> {
        if self.failed || self.next >= self.jobs.len() {
            return None;
        }
        let job = self.next;
        self.next += 1;
        let (slot, r) = if self.workers.is_empty() {
            // A batch holds at most one slot, and only until it is dropped
            // (a batch leaked with `mem::forget` keeps its slot).
            let Some(slot) = self.shared.lock().free.pop() else {
                self.failed = true;
                return Some(Err(Error::InvalidArgument {
                    op: "DataLoader::next",
                    msg: "no free ring slot: a batch of this epoch was leaked".into(),
                }));
            };
            let ds: &dyn Dataset = &*self.loader.dataset;
            let fields: &[Field] = &self.loader.fields;
            let free = match &self.loader.device_ring {
                Some(ring) => ring.host_free(slot),
                None => Ok(()),
            };
            let r = free.and_then(|()| {
                fill(
                    ds,
                    fields,
                    &self.loader.host[slot],
                    &self.jobs[job],
                    &self.shared.halt,
                )
            });
            (slot, r)
        } else {
            let mut g = self.shared.lock();
            g.asked = job;
            self.shared.cv.notify_all();
            loop {
                if let Some(d) = g.done.remove(&job) {
                    break d;
                }
                if g.free.is_empty() && g.next_job <= job {
                    // No worker has this batch and none can get a slot:
                    // every slot is held by a batch of this epoch that was
                    // leaked (`mem::forget`), as this call needs none held.
                    drop(g);
                    self.failed = true;
                    self.stop();
                    return Some(Err(Error::InvalidArgument {
                        op: "DataLoader::next",
                        msg: "no free ring slot: a batch of this epoch was leaked".into(),
                    }));
                }
                if g.live_workers == 0 {
                    drop(g);
                    self.failed = true;
                    self.stop();
                    return Some(Err(Error::Data {
                        op: "DataLoader::next",
                        index: self.jobs[job].first().copied().unwrap_or(0),
                        msg: "the loader's workers stopped before this batch".into(),
                    }));
                }
                g = self.shared.wait(g);
            }
        };
        let rows = self.jobs[job].len();
        let r = r.and_then(|()| self.load(slot, rows));
        match r {
            Ok(views) => Some(Ok(Batch {
                views,
                indices: &self.jobs[job],
                slot,
                shared: &self.shared,
                ring: self.loader.device_ring.as_deref(),
            })),
            Err(e) => {
                self.failed = true;
                self.shared.lock().free.push(slot);
                self.stop();
                Some(Err(e))
            }
        }
    }

    /// The first `rows` rows of slot `slot`, filled on the host: copied to
    /// the device half of the ring for a CUDA target; a view per field.
    fn load(&self, slot: usize, rows: usize) -> Result<Vec<Tensor>> {
        let host = &self.loader.host[slot];
        let fields: &[Tensor] = match self.loader.device_ring.as_deref() {
            Some(ring) => {
                ring.load(slot, host, rows)?;
                ring.slot(slot)
            }
            None => host,
        };
        fields.iter().map(|t| t.narrow(0, 0, rows)).collect()
    }

    fn stop(&mut self) {
        drop(self.shared.halt());
        for w in self.workers.drain(..) {
            // A worker's panic is caught inside `fill`; a join error would
            // mean a bug in the ring, and there is nothing left to undo.
            let _ = w.join();
        }
    }
}

impl<D: Dataset + 'static> Drop for Epoch<'_, D> {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One batch: a view per field (`[rows, ...]`, rows = the batch size but
/// for a short last batch) into a ring slot, which returns to the ring when
/// the batch is dropped. The views borrow the batch: the compiler stops
/// one from outliving it; `to_owned` copies. An owned handle made on
/// purpose (`alias`, `into_owned`, or a tensor an op's autograd saved)
/// sees the slot's next batch once the ring reuses it: refilling a slot
/// bumps its version, so a backward through such a saved tensor is an
/// error rather than a wrong gradient. A batch leaked with `mem::forget`
/// keeps its slot for the rest of the epoch (`next` says so when no slot
/// is left), and on a GPU the kernels queued on it are not waited for
/// before a later epoch copies into its slot.
pub struct Batch<'a> {
    views: Vec<Tensor>,
    indices: &'a [usize],
    slot: usize,
    shared: &'a Shared,
    /// The device half of the ring (a CUDA target), told when the batch is
    /// dropped.
    ring: Option<&'a DeviceRing>,
}

impl Batch<'_> {
    /// Samples in the batch.
    pub fn len(&self) -> usize {
        self.indices.len()
    }

    /// Whether the batch is empty (never, for a batch `next` returned).
    pub fn is_empty(&self) -> bool {
        self.indices.is_empty()
    }

    /// The dataset indices of the batch's samples, in row order.
    pub fn indices(&self) -> &[usize] {
        self.indices
    }

    /// Field `k` of every sample, as a view borrowing the batch.
    pub fn field(&self, k: usize) -> Result<TensorView<'_>> {
        let n = self.views.len();
        let t = self.views.get(k).ok_or(Error::IndexOutOfRange {
            op: "Batch::field",
            index: k as i64,
            dim: 0,
            size: n,
        })?;
        Ok(t.as_view())
    }

    /// Independent copies of every field, which may outlive the batch.
    pub fn to_owned(&self) -> Result<Vec<Tensor>> {
        self.views.iter().map(Tensor::deep_clone).collect()
    }
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        self.views.clear();
        if let Some(ring) = self.ring {
            ring.release(self.slot);
        }
        self.shared.lock().free.push(self.slot);
        self.shared.cv.notify_all();
    }
}
