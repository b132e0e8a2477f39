//! One context per device, made once, on first use, and kept for the life of
//! the process.
//!
//! A [`Gpu`] holds the device's primary context, its default stream, its
//! caching allocator, its compiled kernels and its cuBLAS handles. It is
//! created by [`gpu`] the first time anything touches the device; creation
//! that fails (no driver, no NVRTC, no such ordinal, a driver error) is
//! remembered and returned as [`Error::DeviceUnavailable`] every time after.

use super::alloc::CudaAllocator;
use super::kernels::ModuleCache;
use super::probe::unusable_reason;
use super::stream::Stream;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::storage::Storage;
use cudarc::cublas::CudaBlas;
use cudarc::driver::{sys, CudaContext, DriverError};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// Everything tensorscope keeps per CUDA device.
pub(crate) struct Gpu {
    pub(crate) ordinal: usize,
    pub(crate) ctx: Arc<CudaContext>,
    /// The legacy default (NULL) stream, id 0.
    pub(crate) default_stream: Stream,
    pub(crate) alloc: CudaAllocator,
    pub(crate) name: String,
    pub(crate) cc: (i32, i32),
    pub(crate) sm_count: u32,
    pub(crate) modules: ModuleCache,
    /// One cuBLAS handle per stream id (a handle is bound to one stream and
    /// must not be used by two threads at once: the mutex serialises).
    pub(crate) blas: Mutex<HashMap<u64, CudaBlas>>,
}

/// A device, opened once (or the reason it cannot be).
type Slot = OnceLock<std::result::Result<Gpu, String>>;

static GPUS: OnceLock<Box<[Slot]>> = OnceLock::new();

/// A driver error as a crate error naming the op.
pub(crate) fn drv(op: &'static str) -> impl Fn(DriverError) -> Error {
    move |e| Error::Backend {
        op,
        msg: format!("CUDA driver error {e:?}"),
    }
}

pub(crate) fn unavailable(op: &'static str, ordinal: usize, reason: impl Into<String>) -> Error {
    Error::DeviceUnavailable {
        op,
        device: Device::Cuda(ordinal),
        reason: reason.into(),
    }
}

impl Gpu {
    fn open(ordinal: usize) -> std::result::Result<Gpu, String> {
        if let Some(r) = unusable_reason(ordinal) {
            return Err(r);
        }
        let err = |what: &str, e: DriverError| format!("{what}: CUDA driver error {e:?}");
        let ctx = CudaContext::new(ordinal).map_err(|e| err("creating the context", e))?;
        // cudarc's event tracking records two events per allocation (and, once
        // a second stream exists, an event wait and record around every
        // launch) so that a `CudaSlice` is never freed or reused while another
        // stream uses it. tensorscope does that ordering itself: its caching
        // allocator hands out raw device pointers, keys its pools by stream,
        // and defers the reuse of blocks recorded on other streams
        // (`record_stream`) until an event on those streams completes, exactly
        // as PyTorch does. So the tracking is turned off right after the
        // context exists, before anything is allocated through cudarc.
        // SAFETY: no `CudaSlice` exists yet; every later cross-stream use is
        // ordered by `Stream::wait_stream`/`record_stream` as documented.
        unsafe { ctx.disable_event_tracking() };
        let name = ctx.name().map_err(|e| err("reading the device name", e))?;
        let cc = ctx
            .compute_capability()
            .map_err(|e| err("reading the compute capability", e))?;
        let sm_count = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(|e| err("reading the multiprocessor count", e))?
            .max(1) as u32;
        Ok(Gpu {
            ordinal,
            default_stream: Stream::default_for(ordinal, ctx.default_stream()),
            alloc: CudaAllocator::new(ordinal, ctx.clone()),
            ctx,
            name,
            cc,
            sm_count,
            modules: ModuleCache::default(),
            blas: Mutex::new(HashMap::new()),
        })
    }

    pub(crate) fn device(&self) -> Device {
        Device::Cuda(self.ordinal)
    }

    /// `nbytes` uninitialised bytes of this device's memory (see [`new_storage`]).
    pub(crate) fn storage(&self, nbytes: usize) -> Result<Storage> {
        new_storage(self.device(), nbytes)
    }

    /// Makes this device's context current on the calling thread.
    pub(crate) fn bind(&self, op: &'static str) -> Result<()> {
        self.ctx.bind_to_thread().map_err(drv(op))
    }
}

/// The device `ordinal`, opened on first use.
pub(crate) fn gpu(op: &'static str, ordinal: usize) -> Result<&'static Gpu> {
    let all = GPUS.get_or_init(|| {
        (0..super::probe::device_count())
            .map(|_| OnceLock::new())
            .collect()
    });
    let Some(slot) = all.get(ordinal) else {
        return Err(unavailable(
            op,
            ordinal,
            unusable_reason(ordinal).unwrap_or_else(|| "no such device".into()),
        ));
    };
    match slot.get_or_init(|| Gpu::open(ordinal)) {
        Ok(g) => Ok(g),
        Err(reason) => Err(unavailable(op, ordinal, reason.clone())),
    }
}

/// `nbytes` uninitialised bytes of memory on CUDA `device`, from its caching
/// allocator, on the current stream.
pub(crate) fn new_storage(device: Device, nbytes: usize) -> Result<Storage> {
    Storage::new_in(&gpu_of("allocate", device)?.alloc, nbytes)
}

/// The device a CUDA operand lives on.
pub(crate) fn gpu_of(op: &'static str, d: Device) -> Result<&'static Gpu> {
    match d {
        Device::Cuda(i) => gpu(op, i),
        Device::Cpu => Err(Error::arg(op, "expected a CUDA tensor, got a CPU one")),
    }
}

/// The device's name, e.g. `"NVIDIA H100 80GB HBM3"`.
pub fn device_name(device: Device) -> Result<String> {
    Ok(gpu_of("device_name", device)?.name.clone())
}

/// The device's compute capability `(major, minor)`.
pub fn compute_capability(device: Device) -> Result<(i32, i32)> {
    Ok(gpu_of("compute_capability", device)?.cc)
}

/// Waits until every stream of `device` has finished its work
/// (`torch.cuda.synchronize`).
pub fn synchronize(device: Device) -> Result<()> {
    gpu_of("synchronize", device)?
        .ctx
        .synchronize()
        .map_err(drv("synchronize"))
}
