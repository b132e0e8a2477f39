//! The MPI engine (feature `mpi`): rsmpi for starting and stopping MPI and
//! for splitting communicators, its raw `ffi` for the non-blocking calls,
//! which the group tests until done (so a lost peer is a timeout, not a
//! hang). Errors return (`MPI_ERRORS_RETURN`) instead of aborting.

use super::transport::{Pending, Progress, Reduce, Transport, Wire};
use crate::error::{Error, Result};
use mpi::ffi;
use mpi::raw::AsRaw;
use mpi::topology::{Color, Communicator, SimpleCommunicator};
use std::ffi::c_int;
use std::mem::MaybeUninit;
use std::sync::{Arc, Mutex};

/// MPI itself: initialised once per process, finalised when the last
/// communicator made from it is dropped.
struct Runtime(#[allow(dead_code)] mpi::environment::Universe);

// SAFETY: the universe is a token for MPI's process-wide state. MPI runs at
// `MPI_THREAD_SERIALIZED` or above (checked in `world`), and every call
// through it is made under a group's mutex, one at a time, from any thread.
unsafe impl Send for Runtime {}
// SAFETY: as for `Send`: no method of the universe is called through a
// shared reference.
unsafe impl Sync for Runtime {}

/// Whether this process has initialised MPI already (MPI allows it once).
static STARTED: Mutex<bool> = Mutex::new(false);

/// One communicator and its requests in flight.
pub(crate) struct Mpi {
    // Dropped before `_runtime`: a communicator is freed before MPI stops.
    comm: SimpleCommunicator,
    requests: Vec<Option<ffi::MPI_Request>>,
    /// Per request slot: the copy an in-place reduction sends from, where
    /// this MPI's `MPI_IN_PLACE` is unknown.
    copies: Vec<Option<Vec<u8>>>,
    /// This MPI's `MPI_IN_PLACE`, if known ([`in_place_marker`]).
    in_place: Option<usize>,
    rank: usize,
    size: usize,
    _runtime: Arc<Runtime>,
}

// SAFETY: `MPI_Request` and the communicator are handles into MPI, which
// runs at MPI_THREAD_SERIALIZED or above; a `Mpi` is only used under its
// group's mutex, so calls on it are serialised across threads.
unsafe impl Send for Mpi {}

/// Starts MPI and returns the world communicator.
pub(crate) fn world(op: &'static str) -> Result<Mpi> {
    let mut started = STARTED.lock().unwrap_or_else(|e| e.into_inner());
    if *started {
        return Err(Error::Collective {
            op,
            rank: 0,
            msg: "MPI was started already in this process, and MPI starts once per process: \
                  make sub-groups from the first group (new_group)"
                .into(),
        });
    }
    let (universe, level) =
        mpi::initialize_with_threading(mpi::Threading::Serialized).ok_or_else(|| {
            Error::Collective {
                op,
                rank: 0,
                msg: "MPI was initialised by other code in this process".into(),
            }
        })?;
    *started = true;
    let runtime = Arc::new(Runtime(universe));
    if level < mpi::Threading::Serialized {
        return Err(Error::Collective {
            op,
            rank: 0,
            msg: format!("this MPI offers threading level {level:?}; tensorscope needs Serialized"),
        });
    }
    let comm = SimpleCommunicator::world();
    Mpi::new(comm, runtime, op)
}

impl Mpi {
    fn new(comm: SimpleCommunicator, runtime: Arc<Runtime>, op: &'static str) -> Result<Mpi> {
        // SAFETY: a valid communicator and a predefined error handler.
        let rc = unsafe { ffi::MPI_Comm_set_errhandler(comm.as_raw(), ffi::RSMPI_ERRORS_RETURN) };
        let (rank, size) = (comm.rank() as usize, comm.size() as usize);
        let m = Mpi {
            comm,
            requests: Vec::new(),
            copies: Vec::new(),
            in_place: in_place_marker(),
            rank,
            size,
            _runtime: runtime,
        };
        m.check(op, rc)?;
        Ok(m)
    }

    /// An MPI return code as a `Result`, with MPI's own message.
    fn check(&self, op: &'static str, rc: c_int) -> Result<()> {
        if rc == ffi::MPI_SUCCESS as c_int {
            return Ok(());
        }
        let mut buf = vec![0u8; ffi::MPI_MAX_ERROR_STRING as usize + 1];
        let mut len: c_int = 0;
        // SAFETY: `buf` holds MPI_MAX_ERROR_STRING bytes, as the call needs.
        unsafe { ffi::MPI_Error_string(rc, buf.as_mut_ptr().cast(), &mut len) };
        buf.truncate(len.max(0) as usize);
        Err(Error::Collective {
            op,
            rank: self.rank,
            msg: format!("MPI error {rc}: {}", String::from_utf8_lossy(&buf)),
        })
    }

    /// Starts one non-blocking call, keeping its request in a free slot.
    fn start(
        &mut self,
        op: &'static str,
        call: impl FnOnce(ffi::MPI_Comm, *mut ffi::MPI_Request) -> c_int,
    ) -> Result<Pending> {
        let mut req = MaybeUninit::<ffi::MPI_Request>::uninit();
        let rc = call(self.comm.as_raw(), req.as_mut_ptr());
        self.check(op, rc)?;
        // SAFETY: a successful non-blocking call has written its request.
        let req = unsafe { req.assume_init() };
        let slot = match self.requests.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.requests.push(None);
                self.requests.len() - 1
            }
        };
        self.requests[slot] = Some(req);
        if self.copies.len() < self.requests.len() {
            self.copies.resize_with(self.requests.len(), || None);
        }
        Ok(Pending(slot))
    }
}

/// How this MPI spells `MPI_IN_PLACE`, which rsmpi does not export: the
/// value its `mpi.h` defines, a fixed part of each implementation's ABI
/// (Open MPI `(void *) 1`; MPICH and its derivatives `(void *) -1`).
fn in_place_marker() -> Option<usize> {
    let v = mpi::environment::library_version().ok()?;
    if v.starts_with("Open MPI") {
        Some(1)
    } else if v.contains("MPICH") || v.contains("Intel(R) MPI") {
        Some(usize::MAX)
    } else {
        None
    }
}

fn count(op: &'static str, rank: usize, n: usize) -> Result<c_int> {
    c_int::try_from(n).map_err(|_| Error::Collective {
        op,
        rank,
        msg: format!(
            "{n} elements is more than MPI's count type holds ({})",
            c_int::MAX
        ),
    })
}

fn datatype(w: Wire) -> ffi::MPI_Datatype {
    // SAFETY: reading rsmpi's constants, initialised by its C shim.
    unsafe {
        match w {
            Wire::F32 => ffi::RSMPI_FLOAT,
            Wire::F64 => ffi::RSMPI_DOUBLE,
            Wire::I32 => ffi::RSMPI_INT32_T,
            Wire::I64 => ffi::RSMPI_INT64_T,
            Wire::U8 => ffi::RSMPI_UINT8_T,
        }
    }
}

fn reduction(r: Reduce) -> ffi::MPI_Op {
    // SAFETY: reading rsmpi's constants, initialised by its C shim.
    unsafe {
        match r {
            Reduce::Sum => ffi::RSMPI_SUM,
            Reduce::Max => ffi::RSMPI_MAX,
            Reduce::Min => ffi::RSMPI_MIN,
        }
    }
}

impl Transport for Mpi {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    unsafe fn all_reduce(
        &mut self,
        send: *const u8,
        recv: *mut u8,
        n: usize,
        wire: Wire,
        op: Reduce,
    ) -> Result<Pending> {
        let c = count("all_reduce", self.rank, n)?;
        let mut copy = None;
        let send = if send != recv.cast_const() {
            send
        } else if let Some(marker) = self.in_place {
            marker as *const u8
        } else {
            // SAFETY: the trait's contract: `send` holds n elements.
            let v = unsafe { std::slice::from_raw_parts(send, n * wire.size()) }.to_vec();
            copy.insert(v).as_ptr()
        };
        let p = self.start("all_reduce", |comm, req| {
            // SAFETY: the trait's contract on the buffers (or MPI_IN_PLACE,
            // or a copy kept with the request until it is done); valid
            // handles.
            unsafe {
                ffi::MPI_Iallreduce(
                    send.cast(),
                    recv.cast(),
                    c,
                    datatype(wire),
                    reduction(op),
                    comm,
                    req,
                )
            }
        })?;
        self.copies[p.0] = copy;
        Ok(p)
    }
    unsafe fn broadcast(&mut self, buf: *mut u8, bytes: usize, root: usize) -> Result<Pending> {
        let n = count("broadcast", self.rank, bytes)?;
        self.start("broadcast", |comm, req| {
            // SAFETY: the trait's contract on the buffer; valid handles.
            unsafe { ffi::MPI_Ibcast(buf.cast(), n, datatype(Wire::U8), root as c_int, comm, req) }
        })
    }
    unsafe fn all_gather(
        &mut self,
        send: *const u8,
        recv: *mut u8,
        bytes: usize,
    ) -> Result<Pending> {
        let n = count("all_gather", self.rank, bytes)?;
        count("all_gather", self.rank, bytes * self.size)?;
        let t = datatype(Wire::U8);
        self.start("all_gather", |comm, req| {
            // SAFETY: the trait's contract on the buffers; valid handles.
            unsafe { ffi::MPI_Iallgather(send.cast(), n, t, recv.cast(), n, t, comm, req) }
        })
    }
    unsafe fn reduce_scatter(
        &mut self,
        send: *const u8,
        recv: *mut u8,
        n: usize,
        wire: Wire,
        op: Reduce,
    ) -> Result<Pending> {
        let c = count("reduce_scatter", self.rank, n)?;
        count("reduce_scatter", self.rank, n * self.size)?;
        self.start("reduce_scatter", |comm, req| {
            // SAFETY: the trait's contract on the buffers; valid handles.
            unsafe {
                ffi::MPI_Ireduce_scatter_block(
                    send.cast(),
                    recv.cast(),
                    c,
                    datatype(wire),
                    reduction(op),
                    comm,
                    req,
                )
            }
        })
    }
    unsafe fn send(
        &mut self,
        buf: *const u8,
        bytes: usize,
        dst: usize,
        tag: u16,
    ) -> Result<Pending> {
        let n = count("send", self.rank, bytes)?;
        self.start("send", |comm, req| {
            // SAFETY: the trait's contract on the buffer; valid handles.
            unsafe {
                ffi::MPI_Isend(
                    buf.cast(),
                    n,
                    datatype(Wire::U8),
                    dst as c_int,
                    tag.into(),
                    comm,
                    req,
                )
            }
        })
    }
    unsafe fn recv(&mut self, buf: *mut u8, bytes: usize, src: usize, tag: u16) -> Result<Pending> {
        let n = count("recv", self.rank, bytes)?;
        self.start("recv", |comm, req| {
            // SAFETY: the trait's contract on the buffer; valid handles.
            unsafe {
                ffi::MPI_Irecv(
                    buf.cast(),
                    n,
                    datatype(Wire::U8),
                    src as c_int,
                    tag.into(),
                    comm,
                    req,
                )
            }
        })
    }
    fn barrier(&mut self) -> Result<Pending> {
        self.start("barrier", |comm, req| {
            // SAFETY: valid handles.
            unsafe { ffi::MPI_Ibarrier(comm, req) }
        })
    }
    fn test(&mut self, p: &Pending) -> Result<Progress> {
        let Some(req) = self.requests.get_mut(p.0).and_then(Option::as_mut) else {
            return Ok(Progress::Done(None));
        };
        let mut flag: c_int = 0;
        let mut status = MaybeUninit::<ffi::MPI_Status>::zeroed();
        // SAFETY: a live request from `start`; `status` is writable.
        let rc = unsafe { ffi::MPI_Test(req, &mut flag, status.as_mut_ptr()) };
        if rc != ffi::MPI_SUCCESS as c_int {
            self.requests[p.0] = None;
            // MPI may still read a failed request's copy: never free it.
            std::mem::forget(self.copies[p.0].take());
            self.check("test", rc)?;
        }
        if flag == 0 {
            return Ok(Progress::Running);
        }
        self.requests[p.0] = None;
        self.copies[p.0] = None;
        let mut got: c_int = 0;
        // SAFETY: the status of a completed request; for operations other
        // than a receive MPI reports a count of 0, which is not used.
        unsafe { ffi::MPI_Get_count(status.as_ptr(), datatype(Wire::U8), &mut got) };
        Ok(Progress::Done(Some(got.max(0) as usize)))
    }
    fn split(&mut self, ranks: &[usize]) -> Result<Option<Box<dyn Transport>>> {
        let key = ranks.iter().position(|&r| r == self.rank);
        let color = key.map_or_else(Color::undefined, |_| Color::with_value(0));
        let sub = self
            .comm
            .split_by_color_with_key(color, key.unwrap_or(0) as c_int);
        match sub {
            Some(c) => Ok(Some(Box::new(Mpi::new(
                c,
                self._runtime.clone(),
                "new_group",
            )?))),
            None => Ok(None),
        }
    }
    fn name(&self) -> String {
        let (major, minor) = mpi::environment::version();
        format!("MPI {major}.{minor}")
    }
}

impl Drop for Mpi {
    fn drop(&mut self) {
        // The group waits for (or leaks the buffers of) everything it
        // started, so a request left here is one whose wait timed out:
        // free the handle, MPI finishes it in the background.
        for r in self.requests.iter_mut().filter_map(Option::take) {
            let mut r = r;
            // SAFETY: a live request; freeing it leaves completion to MPI.
            unsafe { ffi::MPI_Request_free(&mut r) };
        }
        // ... still reading the copies of in-place reductions.
        std::mem::forget(std::mem::take(&mut self.copies));
    }
}
