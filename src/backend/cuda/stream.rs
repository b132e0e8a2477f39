//! Streams, and the current stream of each device on each thread.
//!
//! As in PyTorch, every thread has a *current stream* per device, initially
//! the device's default (legacy NULL) stream. Kernels, copies and
//! allocations on a device go to the calling thread's current stream of that
//! device; the caching allocator keeps one pool per stream, so a block freed
//! on one stream is only reused by work on that same stream (which runs after
//! the free in stream order). A tensor used on another stream must be
//! ordered with [`Stream::wait_stream`] and, if it may be freed while that
//! stream still uses it, marked with [`record_stream`](super::record_stream).
//!
//! ```no_run
//! use tensorscope::{backend::cuda::{self, Stream}, DType, Device, Tensor};
//! let dev = Device::Cuda(0);
//! let side = Stream::new(dev)?;
//! let x = Tensor::ones(&[1024], DType::F32, dev)?;
//! side.wait_stream(&cuda::current_stream(dev)?)?;   // x is ready on `side`
//! let y = cuda::with_stream(&side, || x.mul_scalar(2.0))?;
//! cuda::current_stream(dev)?.wait_stream(&side)?;     // y is ready here
//! # Ok::<(), tensorscope::Error>(())
//! ```

use super::device::{drv, gpu_of, Gpu};
use super::event::Event;
use crate::device::Device;
use crate::error::{Error, Result};
use cudarc::driver::{sys, CudaStream};
use std::cell::RefCell;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A CUDA stream: a queue of work that runs in order on one device.
///
/// Cloning a `Stream` gives another handle to the same stream. A stream made
/// with [`Stream::new`] is destroyed when its last handle goes (work already
/// queued still runs).
#[derive(Clone)]
pub struct Stream {
    inner: Arc<StreamInner>,
}

struct StreamInner {
    /// 0 for the default stream; unique per process otherwise (never reused,
    /// so blocks cached for a destroyed stream can never be handed to a new
    /// one that happens to get the same driver handle).
    id: u64,
    ordinal: usize,
    cu: Arc<CudaStream>,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl Drop for StreamInner {
    fn drop(&mut self) {
        // The stream's cuBLAS handle (made by its first matmul) holds the
        // stream and a workspace: release them with the last handle, or
        // every stream ever used for a matmul would stay alive.
        if self.id != 0 {
            super::blas::release_handle(self.ordinal, self.id);
        }
    }
}

impl Stream {
    pub(crate) fn default_for(ordinal: usize, cu: Arc<CudaStream>) -> Stream {
        Stream {
            inner: Arc::new(StreamInner { id: 0, ordinal, cu }),
        }
    }

    /// A new non-blocking stream on `device` (it does not synchronise with
    /// the default stream).
    pub fn new(device: Device) -> Result<Stream> {
        let g = gpu_of("Stream::new", device)?;
        let cu = g.ctx.new_stream().map_err(drv("Stream::new"))?;
        Ok(Stream {
            inner: Arc::new(StreamInner {
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                ordinal: g.ordinal,
                cu,
            }),
        })
    }

    /// The default stream of `device`.
    pub fn default_stream(device: Device) -> Result<Stream> {
        Ok(gpu_of("Stream::default_stream", device)?
            .default_stream
            .clone())
    }

    /// The stream's id: 0 for the default stream, unique otherwise. The
    /// caching allocator keys its pools by it.
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// The stream's device.
    pub fn device(&self) -> Device {
        Device::Cuda(self.inner.ordinal)
    }

    pub(crate) fn ordinal(&self) -> usize {
        self.inner.ordinal
    }

    pub(crate) fn cu(&self) -> &Arc<CudaStream> {
        &self.inner.cu
    }

    /// Waits until all work queued on this stream has finished.
    pub fn synchronize(&self) -> Result<()> {
        self.inner
            .cu
            .synchronize()
            .map_err(drv("Stream::synchronize"))
    }

    /// `true` if all work queued on this stream has finished.
    pub fn query(&self) -> Result<bool> {
        self.inner
            .cu
            .context()
            .bind_to_thread()
            .map_err(drv("Stream::query"))?;
        // SAFETY: the stream handle is alive (we hold it).
        match unsafe { sys::cuStreamQuery(self.inner.cu.cu_stream()) } {
            sys::CUresult::CUDA_SUCCESS => Ok(true),
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            e => Err(drv("Stream::query")(cudarc::driver::DriverError(e))),
        }
    }

    /// Makes future work on this stream wait for the work queued on `other`
    /// so far (`torch.cuda.Stream.wait_stream`). Does not block the host.
    pub fn wait_stream(&self, other: &Stream) -> Result<()> {
        if self.inner.ordinal != other.inner.ordinal {
            return Err(Error::DeviceMismatch {
                op: "wait_stream",
                lhs: self.device(),
                rhs: other.device(),
            });
        }
        if self.inner.id == other.inner.id {
            return Ok(());
        }
        self.inner
            .cu
            .join(&other.inner.cu)
            .map_err(drv("wait_stream"))
    }

    /// Makes future work on this stream wait for `event`.
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        if event.device() != self.device() {
            return Err(Error::DeviceMismatch {
                op: "wait_event",
                lhs: self.device(),
                rhs: event.device(),
            });
        }
        self.inner.cu.wait(event.cu()).map_err(drv("wait_event"))
    }

    /// Records a new event (with timing) on this stream.
    pub fn record_event(&self) -> Result<Event> {
        let e = Event::new(self.device(), true)?;
        e.record(self)?;
        Ok(e)
    }
}

impl PartialEq for Stream {
    fn eq(&self, other: &Stream) -> bool {
        self.inner.id == other.inner.id && self.inner.ordinal == other.inner.ordinal
    }
}
impl Eq for Stream {}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Stream(id={}, device={})", self.inner.id, self.device())
    }
}

thread_local! {
    /// The calling thread's current stream per device ordinal (`None`: default).
    static CURRENT: RefCell<Vec<Option<Stream>>> = const { RefCell::new(Vec::new()) };
}

/// The calling thread's current stream on `device`.
pub fn current_stream(device: Device) -> Result<Stream> {
    let g = gpu_of("current_stream", device)?;
    Ok(current(g))
}

/// The calling thread's current stream on the device `g`.
pub(crate) fn current(g: &Gpu) -> Stream {
    CURRENT
        .try_with(|c| c.borrow().get(g.ordinal).cloned().flatten())
        .ok()
        .flatten()
        .unwrap_or_else(|| g.default_stream.clone())
}

/// The id of the calling thread's current stream on device `ordinal` (0, the
/// default stream, when none was set). Never fails.
pub(crate) fn current_stream_id(ordinal: usize) -> u64 {
    CURRENT
        .try_with(|c| {
            c.borrow()
                .get(ordinal)
                .and_then(|s| s.as_ref().map(|s| s.id()))
        })
        .ok()
        .flatten()
        .unwrap_or(0)
}

fn swap_current(ordinal: usize, s: Option<Stream>) -> Option<Stream> {
    CURRENT
        .try_with(|c| {
            let mut v = c.borrow_mut();
            if v.len() <= ordinal {
                v.resize(ordinal + 1, None);
            }
            std::mem::replace(&mut v[ordinal], s)
        })
        .ok()
        .flatten()
}

/// Makes `stream` the calling thread's current stream on its device and
/// returns the previous one (`None` when it was the default stream).
/// Prefer [`StreamGuard`] or [`with_stream`], which restore it.
pub fn set_current_stream(stream: &Stream) -> Option<Stream> {
    swap_current(stream.ordinal(), Some(stream.clone()))
}

/// Makes a stream current on its device for the guard's lifetime
/// (`torch.cuda.stream(s)` as a context manager).
///
/// The guard is not `Send`: the current stream is per thread, so it must be
/// dropped (and the previous stream restored) on the thread that made it.
#[must_use = "the stream stops being current when the guard is dropped"]
pub struct StreamGuard {
    ordinal: usize,
    prev: Option<Stream>,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl StreamGuard {
    /// Makes `stream` current on its device until the guard is dropped.
    pub fn new(stream: &Stream) -> StreamGuard {
        StreamGuard {
            ordinal: stream.ordinal(),
            prev: set_current_stream(stream),
            _not_send: std::marker::PhantomData,
        }
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        swap_current(self.ordinal, self.prev.take());
    }
}

/// Runs `f` with `stream` current on its device, then restores the previous
/// current stream (also when `f` panics).
pub fn with_stream<R>(stream: &Stream, f: impl FnOnce() -> R) -> R {
    let _g = StreamGuard::new(stream);
    f()
}
