//! The seam under [`ProcessGroup`](super::ProcessGroup): an engine that
//! moves and reduces host buffers between ranks (MPI here; a world of one
//! without any engine). It sees pointers, element counts and wire types,
//! never a `Tensor`: the group checks, stages and converts before it calls.

use crate::error::Result;

/// An element type an engine reduces natively. f16 and bf16 travel as f32
/// (the group widens them), bool as u8.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wire {
    F32,
    F64,
    I32,
    I64,
    U8,
}

impl Wire {
    pub(crate) const fn size(self) -> usize {
        match self {
            Wire::F32 | Wire::I32 => 4,
            Wire::F64 | Wire::I64 => 8,
            Wire::U8 => 1,
        }
    }
}

/// A reduction an engine runs natively (the group builds `Avg` from `Sum`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reduce {
    Sum,
    Max,
    Min,
}

/// A started operation: the engine's request slot, tested until done.
#[derive(Debug)]
// Only an engine with requests in flight (MPI) reads the slot.
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub(crate) struct Pending(pub(crate) usize);

/// One communicator. Every method that takes pointers starts the operation
/// and returns at once; the buffers stay in use until [`test`](Transport::test)
/// says the operation is done.
///
/// # Safety (of the pointer methods)
/// Each pointer addresses the stated number of bytes, valid for reads
/// (`send`) or writes (`recv`, `buf`), and stays valid, and untouched by
/// anything else, until `test` returns `Ok(true)` for the returned
/// [`Pending`] (or forever, if it never does).
pub(crate) trait Transport: Send {
    /// This process's rank in the communicator.
    fn rank(&self) -> usize;
    /// The number of ranks.
    fn size(&self) -> usize;
    /// `recv[..count] = op over ranks of send[..count]`; `send == recv`
    /// reduces in place, and otherwise the two do not overlap.
    ///
    /// # Safety
    /// The trait's pointer contract (above).
    unsafe fn all_reduce(
        &mut self,
        send: *const u8,
        recv: *mut u8,
        count: usize,
        wire: Wire,
        op: Reduce,
    ) -> Result<Pending>;
    /// `buf[..bytes]` on every rank = the root's.
    ///
    /// # Safety
    /// The trait's pointer contract (above).
    unsafe fn broadcast(&mut self, buf: *mut u8, bytes: usize, root: usize) -> Result<Pending>;
    /// `recv[r * bytes..][..bytes]` = rank r's `send[..bytes]`.
    ///
    /// # Safety
    /// The trait's pointer contract (above).
    unsafe fn all_gather(
        &mut self,
        send: *const u8,
        recv: *mut u8,
        bytes: usize,
    ) -> Result<Pending>;
    /// `recv[..count]` = op over ranks of their `send[rank * count..][..count]`.
    ///
    /// # Safety
    /// The trait's pointer contract (above).
    unsafe fn reduce_scatter(
        &mut self,
        send: *const u8,
        recv: *mut u8,
        count: usize,
        wire: Wire,
        op: Reduce,
    ) -> Result<Pending>;
    /// `bytes` from `buf` to rank `dst`, matched by `tag`.
    ///
    /// # Safety
    /// The trait's pointer contract (above).
    unsafe fn send(
        &mut self,
        buf: *const u8,
        bytes: usize,
        dst: usize,
        tag: u16,
    ) -> Result<Pending>;
    /// Up to `bytes` into `buf` from rank `src` with `tag`.
    ///
    /// # Safety
    /// The trait's pointer contract (above).
    unsafe fn recv(&mut self, buf: *mut u8, bytes: usize, src: usize, tag: u16) -> Result<Pending>;
    /// Every rank has entered.
    fn barrier(&mut self) -> Result<Pending>;
    /// Whether `p` is done (a failed operation is an `Err`, and done).
    fn test(&mut self, p: &Pending) -> Result<Progress>;
    /// A communicator over `ranks` (positions in this one, in that order):
    /// `Some` on its members, `None` elsewhere. Every rank calls it.
    fn split(&mut self, ranks: &[usize]) -> Result<Option<Box<dyn Transport>>>;
    /// What the engine is, for messages ("MPI (Open MPI 4.1.4)").
    fn name(&self) -> String;
}

/// Where a started operation is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Progress {
    // Only an engine with requests in flight (MPI) is ever still running.
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    Running,
    /// Done; a receive says how many bytes arrived.
    Done(Option<usize>),
}

/// The world of one process: every collective is a copy, or nothing.
pub(crate) struct Single;

impl Transport for Single {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        1
    }
    unsafe fn all_reduce(
        &mut self,
        send: *const u8,
        recv: *mut u8,
        count: usize,
        wire: Wire,
        _: Reduce,
    ) -> Result<Pending> {
        if send != recv.cast_const() {
            // SAFETY: the trait's contract: both hold `count` elements of
            // `wire`, and do not overlap unless they are the same.
            unsafe { std::ptr::copy_nonoverlapping(send, recv, count * wire.size()) };
        }
        Ok(Pending(0))
    }
    unsafe fn broadcast(&mut self, _: *mut u8, _: usize, _: usize) -> Result<Pending> {
        Ok(Pending(0))
    }
    unsafe fn all_gather(
        &mut self,
        send: *const u8,
        recv: *mut u8,
        bytes: usize,
    ) -> Result<Pending> {
        // SAFETY: the trait's contract, with a world of one.
        unsafe { std::ptr::copy_nonoverlapping(send, recv, bytes) };
        Ok(Pending(0))
    }
    unsafe fn reduce_scatter(
        &mut self,
        send: *const u8,
        recv: *mut u8,
        count: usize,
        wire: Wire,
        _: Reduce,
    ) -> Result<Pending> {
        // SAFETY: the trait's contract, with a world of one.
        unsafe { std::ptr::copy_nonoverlapping(send, recv, count * wire.size()) };
        Ok(Pending(0))
    }
    unsafe fn send(&mut self, _: *const u8, _: usize, _: usize, _: u16) -> Result<Pending> {
        unreachable_peer()
    }
    unsafe fn recv(&mut self, _: *mut u8, _: usize, _: usize, _: u16) -> Result<Pending> {
        unreachable_peer()
    }
    fn barrier(&mut self) -> Result<Pending> {
        Ok(Pending(0))
    }
    fn test(&mut self, _: &Pending) -> Result<Progress> {
        Ok(Progress::Done(None))
    }
    fn split(&mut self, ranks: &[usize]) -> Result<Option<Box<dyn Transport>>> {
        Ok((ranks == [0]).then(|| Box::new(Single) as Box<dyn Transport>))
    }
    fn name(&self) -> String {
        "a single process".into()
    }
}

/// The group rejects a peer outside the world before calling, and a world
/// of one has no other rank.
fn unreachable_peer() -> Result<Pending> {
    Err(crate::error::Error::Collective {
        op: "send/recv",
        rank: 0,
        msg: "a world of one process has no peer".into(),
    })
}
