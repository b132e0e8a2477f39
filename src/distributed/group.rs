//! [`ProcessGroup`]: collectives over tensors, checked on every rank before
//! any byte moves (Note [collective agreement]), staged through buffers the
//! group owns, and waited for with a deadline.

use super::transport::{Pending, Progress, Reduce, Single, Transport, Wire};
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How [`ProcessGroup::all_reduce`] combines the ranks' tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// The elementwise sum (bool: logical or).
    Sum,
    /// The sum divided by the world size (float dtypes only).
    Avg,
    /// The elementwise maximum (bool: logical or).
    Max,
    /// The elementwise minimum (bool: logical and).
    Min,
}

/// PyTorch's default collective timeout.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// A set of ranks that run collectives together, on CPU tensors (this
/// engine is MPI, or a single process). Every rank calls the same
/// collectives in the same order, as in `torch.distributed`. A clone is
/// another handle to the same group.
#[derive(Clone)]
pub struct ProcessGroup {
    inner: Arc<Mutex<Inner>>,
    rank: usize,
    size: usize,
}

struct Inner {
    engine: Box<dyn Transport>,
    /// Why the group stopped: a timed-out operation may still write into
    /// its buffers, so they were leaked and nothing more runs.
    failed: Option<String>,
    timeout: Duration,
    /// The staging bytes of the blocking collectives, kept and grown.
    stage: Option<Tensor>,
}

impl ProcessGroup {
    fn over(engine: Box<dyn Transport>) -> ProcessGroup {
        let (rank, size) = (engine.rank(), engine.size());
        ProcessGroup {
            inner: Arc::new(Mutex::new(Inner {
                engine,
                failed: None,
                timeout: DEFAULT_TIMEOUT,
                stage: None,
            })),
            rank,
            size,
        }
    }

    /// The world of this one process (rank 0 of 1): every collective is
    /// the identity, with every check of a real world.
    pub fn single() -> ProcessGroup {
        ProcessGroup::over(Box::new(Single))
    }

    /// The world of an `mpirun` job (`MPI_COMM_WORLD`), starting MPI. A
    /// process starts MPI once: a second call is an `Err`, and MPI stops
    /// when the last group made from this one is dropped.
    #[cfg(feature = "mpi")]
    pub fn mpi() -> Result<ProcessGroup> {
        Ok(ProcessGroup::over(Box::new(super::mpi::world(
            "ProcessGroup::mpi",
        )?)))
    }

    /// This process's rank in the group.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks.
    pub fn world_size(&self) -> usize {
        self.size
    }

    /// How long a collective waits for the other ranks before it returns
    /// an `Err` (default 30 minutes, as PyTorch's). After a timeout the
    /// group refuses further work.
    pub fn set_timeout(&self, timeout: Duration) {
        self.lock().timeout = timeout;
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `t` = the ranks' `t`s combined by `op`, on every rank, in place.
    pub fn all_reduce(&self, t: &mut Tensor, op: ReduceOp) -> Result<()> {
        const OP: &str = "all_reduce";
        let local = self
            .check_local(OP, t, true)
            .and_then(|_| wire_for(OP, t.dtype(), op));
        let mut g = self.agreed(OP, &local, fingerprint(OP, t, op as u64))?;
        let wire = local?;
        let n = t.numel();
        let bytes = n * wire.size();
        let stage = g.stage(OP, 2 * bytes)?;
        // SAFETY: the stage holds 2 * bytes; `t` is a contiguous CPU tensor
        // of n elements, under the write lock for the whole call.
        unsafe {
            let _l = crate::storage::lock(&[], &[t.storage()]);
            let (send, recv) = (stage, stage.add(bytes));
            pack(t, send);
            g.run(OP, |e| e.all_reduce(send, recv, n, wire, reduce(op)))?;
            if op == ReduceOp::Avg {
                scale(recv, n, wire, 1.0 / self.size as f64);
            }
            unpack(recv, t);
        }
        t.storage().bump_version();
        Ok(())
    }

    /// [`all_reduce`](Self::all_reduce) started in the background: the
    /// tensor moves into the returned [`Work`] until [`Work::wait`] gives it
    /// back, so nothing can read it while it is being reduced. The tensor
    /// must be its storage's only handle.
    pub fn all_reduce_async(&self, t: Tensor, op: ReduceOp) -> Result<Work> {
        const OP: &str = "all_reduce_async";
        let local = self
            .check_local(OP, &t, true)
            .and_then(|_| exclusive(OP, &t))
            .and_then(|_| wire_for(OP, t.dtype(), op));
        let mut g = self.agreed(OP, &local, fingerprint(OP, &t, op as u64))?;
        let wire = local?;
        let n = t.numel();
        let stage = Tensor::alloc(&[2 * n * wire.size()], DType::U8, Device::Cpu)?;
        let s = host(&stage);
        // SAFETY: `t` and `stage` are this work's alone (exclusive handles,
        // moved into the work below) and stay alive until it finishes.
        let pending = unsafe {
            let (send, recv) = (s, s.add(n * wire.size()));
            pack(&t, send);
            g.start(OP, |e| e.all_reduce(send, recv, n, wire, reduce(op)))?
        };
        drop(g);
        let scale = (op == ReduceOp::Avg).then_some(1.0 / self.size as f64);
        Ok(Work {
            group: self.inner.clone(),
            op: OP,
            pending: Some(pending),
            tensor: Some(t),
            stage: Some(stage),
            finish: Finish::Unpack { wire, scale },
        })
    }

    /// `t` = the root's `t`, on every rank, in place.
    pub fn broadcast(&self, t: &mut Tensor, root: usize) -> Result<()> {
        const OP: &str = "broadcast";
        let local = self
            .check_local(OP, t, true)
            .and_then(|_| self.check_rank(OP, "root", root));
        let mut g = self.agreed(OP, &local, fingerprint(OP, t, root as u64))?;
        local?;
        let bytes = t.nbytes();
        let stage = g.stage(OP, bytes)?;
        // SAFETY: as in `all_reduce`, with bytes-wide buffers.
        unsafe {
            let _l = crate::storage::lock(&[], &[t.storage()]);
            std::ptr::copy_nonoverlapping(host(t), stage, bytes);
            g.run(OP, |e| e.broadcast(stage, bytes, root))?;
            std::ptr::copy_nonoverlapping(stage, host(t), bytes);
        }
        t.storage().bump_version();
        Ok(())
    }

    /// Every rank's `t`, stacked: `[world_size, ..t's shape]`, on every rank.
    pub fn all_gather(&self, t: &Tensor) -> Result<Tensor> {
        const OP: &str = "all_gather";
        let local = self.check_local(OP, t, false);
        let mut g = self.agreed(OP, &local, fingerprint(OP, t, 0))?;
        local?;
        let mut shape = vec![self.size];
        shape.extend_from_slice(t.shape());
        let out = Tensor::alloc(&shape, t.dtype(), Device::Cpu)?;
        let bytes = t.nbytes();
        let stage = g.stage(OP, bytes * (self.size + 1))?;
        // SAFETY: the stage holds bytes * (size + 1); `t` is read under its
        // read lock, `out` is fresh and this call's alone.
        unsafe {
            let _l = crate::storage::lock(&[t.storage()], &[]);
            std::ptr::copy_nonoverlapping(host(t), stage, bytes);
            let recv = stage.add(bytes);
            g.run(OP, |e| e.all_gather(stage, recv, bytes))?;
            std::ptr::copy_nonoverlapping(recv, host(&out), bytes * self.size);
        }
        Ok(out)
    }

    /// The ranks' `t`s combined by `op`, cut along dim 0 into
    /// `world_size` pieces: rank r gets piece r (`t.shape[0]` must be a
    /// multiple of the world size).
    pub fn reduce_scatter(&self, t: &Tensor, op: ReduceOp) -> Result<Tensor> {
        const OP: &str = "reduce_scatter";
        let local = self
            .check_local(OP, t, false)
            .and_then(|_| self.check_splits(OP, t))
            .and_then(|_| wire_for(OP, t.dtype(), op));
        let mut g = self.agreed(OP, &local, fingerprint(OP, t, op as u64))?;
        let wire = local?;
        let mut shape = t.shape().to_vec();
        shape[0] /= self.size;
        let out = Tensor::alloc(&shape, t.dtype(), Device::Cpu)?;
        let (n, piece) = (t.numel(), out.numel());
        let stage = g.stage(OP, (n + piece) * wire.size())?;
        // SAFETY: the stage holds n + piece elements of `wire`; `t` is read
        // under its read lock; `out` is fresh and this call's alone.
        unsafe {
            let _l = crate::storage::lock(&[t.storage()], &[]);
            let recv = stage.add(n * wire.size());
            pack(t, stage);
            g.run(OP, |e| {
                e.reduce_scatter(stage, recv, piece, wire, reduce(op))
            })?;
            if op == ReduceOp::Avg {
                scale(recv, piece, wire, 1.0 / self.size as f64);
            }
            unpack(recv, &out);
        }
        Ok(out)
    }

    /// Waits until every rank has called it.
    pub fn barrier(&self) -> Result<()> {
        let mut g = self.agreed("barrier", &Ok(()), Fnv::new("barrier").0)?;
        // SAFETY: no buffers.
        unsafe { g.run("barrier", |e| e.barrier()) }
    }

    /// Sends `t` to rank `dst`, where a [`recv`](Self::recv) with the same
    /// `tag` and a tensor of the same shape and dtype takes it.
    pub fn send(&self, t: &Tensor, dst: usize, tag: u16) -> Result<()> {
        const OP: &str = "send";
        self.check_local(OP, t, false)?;
        self.check_peer(OP, "dst", dst)?;
        let mut g = self.ready(OP)?;
        let head = fingerprint("p2p", t, 0).to_le_bytes();
        let bytes = t.nbytes();
        let stage = g.stage(OP, 8 + bytes)?;
        // SAFETY: the stage holds 8 + bytes; `t` is read under its lock.
        unsafe {
            let _l = crate::storage::lock(&[t.storage()], &[]);
            std::ptr::copy_nonoverlapping(head.as_ptr(), stage, 8);
            std::ptr::copy_nonoverlapping(host(t), stage.add(8), bytes);
            g.run(OP, |e| e.send(stage, 8 + bytes, dst, tag))?;
        }
        Ok(())
    }

    /// Receives into `t` what rank `src` sent with `tag`: an `Err` if the
    /// sent tensor's shape or dtype differs (and `t` is left as it was).
    pub fn recv(&self, t: &mut Tensor, src: usize, tag: u16) -> Result<()> {
        const OP: &str = "recv";
        self.check_local(OP, t, true)?;
        self.check_peer(OP, "src", src)?;
        let mut g = self.ready(OP)?;
        let want = fingerprint("p2p", t, 0).to_le_bytes();
        let bytes = t.nbytes();
        let stage = g.stage(OP, 8 + bytes)?;
        // SAFETY: the stage holds 8 + bytes; `t` is written under its lock.
        unsafe {
            let got = g.run_counted(OP, |e| e.recv(stage, 8 + bytes, src, tag))?;
            let head = std::slice::from_raw_parts(stage, 8);
            if got != Some(8 + bytes) || head != want {
                return Err(Error::Collective {
                    op: OP,
                    rank: self.rank,
                    msg: format!(
                        "rank {src} sent a tensor other than {:?} {} (tag {tag}); {} was left as it was",
                        t.shape(),
                        t.dtype(),
                        "the receiving tensor"
                    ),
                });
            }
            let _l = crate::storage::lock(&[], &[t.storage()]);
            std::ptr::copy_nonoverlapping(stage.add(8), host(t), bytes);
        }
        t.storage().bump_version();
        Ok(())
    }

    /// A group of `ranks` (ranks of this group; the new group numbers them
    /// 0.. in that order): `Some` on its members, `None` on the others.
    /// Every rank of this group calls it, with the same list.
    pub fn new_group(&self, ranks: &[usize]) -> Result<Option<ProcessGroup>> {
        const OP: &str = "new_group";
        let local = self.check_members(OP, ranks);
        let mut fp = Fnv::new(OP);
        ranks.iter().for_each(|&r| fp.add(r as u64));
        let mut g = self.agreed(OP, &local, fp.0)?;
        local?;
        Ok(g.engine.split(ranks)?.map(ProcessGroup::over))
    }

    fn check_local(&self, op: &'static str, t: &Tensor, write: bool) -> Result<()> {
        if t.device() != Device::Cpu {
            return Err(Error::DeviceMismatch {
                op,
                lhs: Device::Cpu,
                rhs: t.device(),
            });
        }
        if !t.is_contiguous() {
            return Err(Error::InvalidArgument {
                op,
                msg: format!(
                    "the tensor must be contiguous, as in torch.distributed (shape {:?}, strides {:?})",
                    t.shape(),
                    t.strides()
                ),
            });
        }
        if write {
            t.check_writable(op)?;
        }
        Ok(())
    }

    fn check_rank(&self, op: &'static str, what: &str, r: usize) -> Result<()> {
        if r >= self.size {
            return Err(Error::InvalidArgument {
                op,
                msg: format!("{what} {r} is not a rank of this group of {}", self.size),
            });
        }
        Ok(())
    }

    fn check_peer(&self, op: &'static str, what: &str, r: usize) -> Result<()> {
        self.check_rank(op, what, r)?;
        if r == self.rank {
            return Err(Error::InvalidArgument {
                op,
                msg: format!("{what} {r} is this rank itself"),
            });
        }
        Ok(())
    }

    fn check_splits(&self, op: &'static str, t: &Tensor) -> Result<()> {
        if t.rank() == 0 || !t.shape()[0].is_multiple_of(self.size) {
            return Err(Error::InvalidArgument {
                op,
                msg: format!(
                    "dim 0 of shape {:?} must be a multiple of the world size {}",
                    t.shape(),
                    self.size
                ),
            });
        }
        Ok(())
    }

    fn check_members(&self, op: &'static str, ranks: &[usize]) -> Result<()> {
        for (i, &r) in ranks.iter().enumerate() {
            self.check_rank(op, "rank", r)?;
            if ranks[..i].contains(&r) {
                return Err(Error::InvalidArgument {
                    op,
                    msg: format!("rank {r} is listed twice in {ranks:?}"),
                });
            }
        }
        if ranks.is_empty() {
            return Err(Error::InvalidArgument {
                op,
                msg: "a group needs at least one rank".into(),
            });
        }
        Ok(())
    }

    fn ready(&self, op: &'static str) -> Result<MutexGuard<'_, Inner>> {
        let g = self.lock();
        if let Some(why) = &g.failed {
            return Err(Error::Collective {
                op,
                rank: self.rank,
                msg: format!("the group stopped after an earlier failure: {why}"),
            });
        }
        Ok(g)
    }

    /// Note [collective agreement]: before a collective moves any data, the
    /// ranks all-reduce its fingerprint (the op, dtype, shape and arguments;
    /// 0 for a rank whose own checks failed) as `[max(f), max(!f)]`. The
    /// two agree exactly when every rank passed the same fingerprint, so
    /// mismatched calls are an `Err` on every rank instead of corrupted
    /// memory or a hang, at the price of one 16-byte all-reduce.
    fn agreed<T>(
        &self,
        op: &'static str,
        local: &Result<T>,
        fp: u64,
    ) -> Result<MutexGuard<'_, Inner>> {
        let mut g = self.ready(op)?;
        let f = if local.is_ok() { fp | 1 } else { 0 };
        let stage = g.stage(op, 32)?.cast::<i64>();
        // SAFETY: the stage holds 32 bytes (4 i64s, 8-aligned as every
        // allocator block), the group's alone; a timeout leaks it.
        let got = unsafe {
            stage.write(f as i64);
            stage.add(1).write(!f as i64);
            g.run(op, |e| {
                e.all_reduce(stage.cast(), stage.add(2).cast(), 2, Wire::I64, Reduce::Max)
            })?;
            [stage.add(2).read(), stage.add(3).read()]
        };
        if got[0] != !got[1] && local.is_ok() {
            return Err(Error::Collective {
                op,
                rank: self.rank,
                msg: "the ranks called it with different tensors or arguments (a shape, dtype, op \
                      or root differs, or another rank's own checks failed); nothing was sent"
                    .into(),
            });
        }
        Ok(g)
    }
}

/// The pieces [`DistributedDataParallel`](super::DistributedDataParallel)
/// builds its reduction from: it agrees on its buckets once, then sums
/// them in place every step with no per-call agreement.
impl ProcessGroup {
    /// Note [collective agreement] for a sequence of calls the caller
    /// fingerprinted itself: an `Err` on every rank unless all passed `fp`
    /// and their own checks (`local`).
    pub(crate) fn agree(&self, op: &'static str, local: &Result<()>, fp: u64) -> Result<()> {
        self.agreed(op, local, fp).map(|_| ())
    }

    /// Starts summing `t` across the ranks in place.
    ///
    /// # Safety
    /// `t` is a contiguous f32 or f64 CPU tensor, and nothing reads or
    /// writes its elements, nor frees them, until [`finish`](Self::finish)
    /// returns `Ok` for the result (forever, if it returns an `Err`). Every
    /// rank starts the same sums in the same order.
    pub(crate) unsafe fn start_sum(&self, op: &'static str, t: &Tensor) -> Result<Pending> {
        let wire = match t.dtype() {
            DType::F32 => Wire::F32,
            DType::F64 => Wire::F64,
            d => return Err(Error::dtype(op, "an f32 or f64 bucket", d)),
        };
        let mut g = self.ready(op)?;
        let p = host(t);
        // SAFETY: the caller's contract; send and receive are the same buffer.
        unsafe { g.start(op, |e| e.all_reduce(p, p, t.numel(), wire, Reduce::Sum)) }
    }

    /// Whether a started sum is done, letting the engine progress.
    pub(crate) fn poll(&self, op: &'static str, p: &Pending) -> Result<bool> {
        let mut g = self.lock();
        match g.engine.test(p) {
            Ok(Progress::Done(_)) => Ok(true),
            Ok(Progress::Running) => Ok(false),
            Err(e) => {
                g.fail(format!("{op}: {e}"));
                Err(e)
            }
        }
    }

    /// Waits for a started sum, within the group's timeout.
    pub(crate) fn finish(&self, op: &'static str, p: &Pending) -> Result<()> {
        self.lock().wait(op, p).map(|_| ())
    }
}

impl Inner {
    /// At least `bytes` of this group's staging, as a pointer.
    fn stage(&mut self, _op: &'static str, bytes: usize) -> Result<*mut u8> {
        if self.stage.as_ref().is_none_or(|s| s.numel() < bytes) {
            self.stage = None;
            self.stage = Some(Tensor::alloc(&[bytes.max(64)], DType::U8, Device::Cpu)?);
        }
        Ok(host(self.stage.as_ref().expect("just made")))
    }

    /// Starts one operation.
    ///
    /// # Safety
    /// As [`Transport`]'s pointer methods.
    unsafe fn start(
        &mut self,
        _op: &'static str,
        f: impl FnOnce(&mut dyn Transport) -> Result<Pending>,
    ) -> Result<Pending> {
        f(self.engine.as_mut())
    }

    /// Starts one operation and waits for it.
    ///
    /// # Safety
    /// As [`Transport`]'s pointer methods: on a timeout the group stops and
    /// leaks its stage, so buffers other than the stage must be leaked by
    /// the caller.
    unsafe fn run(
        &mut self,
        op: &'static str,
        f: impl FnOnce(&mut dyn Transport) -> Result<Pending>,
    ) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { self.run_counted(op, f) }.map(|_| ())
    }

    /// [`run`](Self::run), giving a receive's byte count.
    ///
    /// # Safety
    /// As [`run`](Self::run).
    unsafe fn run_counted(
        &mut self,
        op: &'static str,
        f: impl FnOnce(&mut dyn Transport) -> Result<Pending>,
    ) -> Result<Option<usize>> {
        let p = f(self.engine.as_mut())?;
        self.wait(op, &p)
    }

    fn wait(&mut self, op: &'static str, p: &Pending) -> Result<Option<usize>> {
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            match self.engine.test(p) {
                Ok(Progress::Done(n)) => return Ok(n),
                Ok(Progress::Running) => {}
                Err(e) => {
                    self.fail(format!("{e}"));
                    return Err(e);
                }
            }
            if start.elapsed() > self.timeout {
                let msg = format!(
                    "timed out after {:?} waiting for the other ranks of {} (one may have died or \
                     called another collective)",
                    self.timeout,
                    self.engine.name()
                );
                self.fail(msg.clone());
                return Err(Error::Collective {
                    op,
                    rank: self.engine.rank(),
                    msg,
                });
            }
            spins += 1;
            if spins < 1000 {
                std::hint::spin_loop();
            } else if spins < 2000 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    /// Stops the group: the stage may still be written by the engine.
    fn fail(&mut self, why: String) {
        if let Some(s) = self.stage.take() {
            std::mem::forget(s);
        }
        self.failed.get_or_insert(why);
    }
}

/// A collective running in the background ([`ProcessGroup::all_reduce_async`]).
/// Dropping it waits for it.
pub struct Work {
    group: Arc<Mutex<Inner>>,
    op: &'static str,
    pending: Option<Pending>,
    tensor: Option<Tensor>,
    stage: Option<Tensor>,
    finish: Finish,
}

enum Finish {
    Unpack { wire: Wire, scale: Option<f64> },
}

impl Work {
    /// Whether it has finished (an `Err` if it failed).
    pub fn is_completed(&mut self) -> Result<bool> {
        let Some(p) = &self.pending else {
            return Ok(true);
        };
        let mut g = self.group.lock().unwrap_or_else(|e| e.into_inner());
        match g.engine.test(p) {
            Ok(Progress::Done(_)) => {}
            Ok(Progress::Running) => return Ok(false),
            Err(e) => {
                g.fail(format!("{e}"));
                drop(g);
                self.leak();
                return Err(e);
            }
        }
        self.pending = None;
        Ok(true)
    }

    /// Waits for it and gives the tensor back, reduced.
    pub fn wait(mut self) -> Result<Tensor> {
        self.finish_now()?;
        Ok(self
            .tensor
            .take()
            .expect("a work holds its tensor until wait"))
    }

    fn finish_now(&mut self) -> Result<()> {
        if let Some(p) = self.pending.take() {
            let mut g = self.group.lock().unwrap_or_else(|e| e.into_inner());
            if let Err(e) = g.wait(self.op, &p) {
                drop(g);
                self.leak();
                return Err(e);
            }
        }
        if let (Some(t), Some(stage)) = (&self.tensor, self.stage.take()) {
            let Finish::Unpack { wire, scale: s } = self.finish;
            // SAFETY: the operation is done; `stage` holds the packed send
            // half and then the result, `t` is this work's alone.
            unsafe {
                let recv = host(&stage).add(t.numel() * wire.size());
                if let Some(s) = s {
                    scale(recv, t.numel(), wire, s);
                }
                unpack(recv, t);
            }
            t.storage().bump_version();
        }
        Ok(())
    }

    /// After a failure the engine may still write the buffers: never free them.
    fn leak(&mut self) {
        self.pending = None;
        if let Some(t) = self.tensor.take() {
            std::mem::forget(t);
        }
        if let Some(s) = self.stage.take() {
            std::mem::forget(s);
        }
    }
}

impl Drop for Work {
    fn drop(&mut self) {
        // A dropped work still owns buffers the engine writes: wait for
        // it (a failure has stopped the group and leaked them).
        let _ = self.finish_now();
    }
}

fn exclusive(op: &'static str, t: &Tensor) -> Result<()> {
    if !t.is_exclusive() {
        return Err(Error::InvalidArgument {
            op,
            msg: "another handle (an alias or a view) reaches this tensor's storage; the \
                  background reduction needs the only one"
                .into(),
        });
    }
    Ok(())
}

/// The first byte of a CPU tensor's elements.
pub(super) fn host(t: &Tensor) -> *mut u8 {
    let s = t.storage();
    (s.addr() + t.storage_offset() * t.dtype().size_in_bytes()) as *mut u8
}

/// The wire type `dtype` travels as under `op`.
fn wire_for(op: &'static str, dtype: DType, r: ReduceOp) -> Result<Wire> {
    if r == ReduceOp::Avg && !dtype.is_float() {
        return Err(Error::DTypeMismatch {
            op,
            expected: "a float dtype (ReduceOp::Avg)".into(),
            got: dtype,
        });
    }
    Ok(match dtype {
        DType::F32 | DType::F16 | DType::BF16 => Wire::F32,
        DType::F64 => Wire::F64,
        DType::I64 => Wire::I64,
        DType::I32 => Wire::I32,
        DType::U8 | DType::Bool => Wire::U8,
    })
}

fn reduce(r: ReduceOp) -> Reduce {
    match r {
        ReduceOp::Sum | ReduceOp::Avg => Reduce::Sum,
        ReduceOp::Max => Reduce::Max,
        ReduceOp::Min => Reduce::Min,
    }
}

/// `t`'s elements as its wire type at `dst` (halves widened to f32).
///
/// # Safety
/// `t` is a contiguous CPU tensor, not written meanwhile; `dst` holds its
/// elements at the wire size.
unsafe fn pack(t: &Tensor, dst: *mut u8) {
    let n = t.numel();
    // SAFETY: the contract; halves occupy 2 bytes each at `host(t)`.
    unsafe {
        match t.dtype() {
            DType::F16 => std::slice::from_raw_parts(host(t) as *const f16, n)
                .convert_to_f32_slice(std::slice::from_raw_parts_mut(dst as *mut f32, n)),
            DType::BF16 => std::slice::from_raw_parts(host(t) as *const bf16, n)
                .convert_to_f32_slice(std::slice::from_raw_parts_mut(dst as *mut f32, n)),
            d => std::ptr::copy_nonoverlapping(host(t), dst, n * d.size_in_bytes()),
        }
    }
}

/// The inverse of [`pack`]: `src`'s wire elements into `t`, rounded to
/// halves where `t` is one; a bool is any nonzero byte.
///
/// # Safety
/// As [`pack`], with `t` writable.
unsafe fn unpack(src: *const u8, t: &Tensor) {
    let n = t.numel();
    // SAFETY: the contract.
    unsafe {
        match t.dtype() {
            DType::F16 => std::slice::from_raw_parts_mut(host(t) as *mut f16, n)
                .convert_from_f32_slice(std::slice::from_raw_parts(src as *const f32, n)),
            DType::BF16 => std::slice::from_raw_parts_mut(host(t) as *mut bf16, n)
                .convert_from_f32_slice(std::slice::from_raw_parts(src as *const f32, n)),
            DType::Bool => {
                let (s, d) = (std::slice::from_raw_parts(src, n), host(t));
                for (i, &b) in s.iter().enumerate() {
                    d.add(i).write((b != 0) as u8);
                }
            }
            d => std::ptr::copy_nonoverlapping(src, host(t), n * d.size_in_bytes()),
        }
    }
}

/// `buf[..n] *= s` for a float wire type (Avg).
///
/// # Safety
/// `buf` holds `n` elements of `wire`, this call's alone.
unsafe fn scale(buf: *mut u8, n: usize, wire: Wire, s: f64) {
    // SAFETY: the contract.
    unsafe {
        match wire {
            Wire::F32 => std::slice::from_raw_parts_mut(buf as *mut f32, n)
                .iter_mut()
                .for_each(|x| *x = (*x as f64 * s) as f32),
            Wire::F64 => std::slice::from_raw_parts_mut(buf as *mut f64, n)
                .iter_mut()
                .for_each(|x| *x *= s),
            _ => unreachable!("Avg is refused for integer dtypes by `wire_for`"),
        }
    }
}

/// FNV-1a over 64-bit words: a call's fingerprint.
pub(super) struct Fnv(pub(super) u64);

impl Fnv {
    pub(super) fn new(op: &str) -> Fnv {
        let mut f = Fnv(0xcbf2_9ce4_8422_2325);
        op.bytes().for_each(|b| f.add(b.into()));
        f
    }
    pub(super) fn add(&mut self, x: u64) {
        for b in x.to_le_bytes() {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }
}

fn fingerprint(op: &str, t: &Tensor, arg: u64) -> u64 {
    let mut f = Fnv::new(op);
    f.add(t.dtype() as u64);
    f.add(t.rank() as u64);
    t.shape().iter().for_each(|&d| f.add(d as u64));
    f.add(arg);
    f.0
}
