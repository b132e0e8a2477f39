//! CUDA events: markers in a stream's work, for ordering and timing.

use super::device::{drv, gpu_of};
use super::stream::Stream;
use crate::error::{Error, Result};
use crate::Device;
use cudarc::driver::{sys, CudaEvent};

/// A CUDA event (`torch.cuda.Event`).
///
/// ```no_run
/// use tensorscope::{backend::cuda::{self, Event}, DType, Device, Tensor};
/// let dev = Device::Cuda(0);
/// let s = cuda::current_stream(dev)?;
/// let (start, end) = (Event::new(dev, true)?, Event::new(dev, true)?);
/// start.record(&s)?;
/// let x = Tensor::ones(&[1 << 20], DType::F32, dev)?.exp()?;
/// end.record(&s)?;
/// println!("exp took {} ms", start.elapsed_ms(&end)?);
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub struct Event {
    cu: CudaEvent,
    ordinal: usize,
}

impl Event {
    /// A new event on `device`; `timing` enables [`elapsed_ms`](Event::elapsed_ms)
    /// (events without timing are cheaper to record and wait on).
    pub fn new(device: Device, timing: bool) -> Result<Event> {
        let g = gpu_of("Event::new", device)?;
        let flags = if timing {
            Some(sys::CUevent_flags::CU_EVENT_DEFAULT)
        } else {
            None // CU_EVENT_DISABLE_TIMING
        };
        let cu = g.ctx.new_event(flags).map_err(drv("Event::new"))?;
        Ok(Event {
            cu,
            ordinal: g.ordinal,
        })
    }

    /// The event's device.
    pub fn device(&self) -> Device {
        Device::Cuda(self.ordinal)
    }

    pub(crate) fn cu(&self) -> &CudaEvent {
        &self.cu
    }

    /// Captures the work queued on `stream` so far; the event completes when
    /// that work has finished.
    pub fn record(&self, stream: &Stream) -> Result<()> {
        if stream.device() != self.device() {
            return Err(Error::DeviceMismatch {
                op: "Event::record",
                lhs: self.device(),
                rhs: stream.device(),
            });
        }
        self.cu.record(stream.cu()).map_err(drv("Event::record"))
    }

    /// Blocks the host until the recorded work has finished.
    pub fn synchronize(&self) -> Result<()> {
        self.cu.synchronize().map_err(drv("Event::synchronize"))
    }

    /// `true` if the recorded work has finished (or nothing was recorded).
    pub fn query(&self) -> Result<bool> {
        self.cu.try_is_complete().map_err(drv("Event::query"))
    }

    /// Milliseconds between this (start) event and `end`, waiting for both.
    /// Both must have been made with timing enabled.
    pub fn elapsed_ms(&self, end: &Event) -> Result<f32> {
        self.cu
            .elapsed_ms(&end.cu)
            .map_err(drv("Event::elapsed_ms"))
    }
}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Event(device={})", self.device())
    }
}
