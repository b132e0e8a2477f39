//! CUDA events: markers in a stream's work, for ordering and timing.

use super::device::{drv, gpu_of};
use super::stream::Stream;
use crate::alloc::ops_trace::DeviceClock;
use crate::device::Device;
use crate::error::{Error, Result};
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
    /// Made with timing enabled (`CU_EVENT_DEFAULT`), so that
    /// [`elapsed_ms`](Event::elapsed_ms) can read it.
    timing: bool,
}

/// Why `elapsed_ms` cannot be asked of the driver, if it cannot: an event
/// made without timing (the driver would answer `CUDA_ERROR_INVALID_HANDLE`),
/// or a driver without `cuEventElapsedTime_v2` (CUDA 12.8+), the only entry
/// point cudarc's CUDA 13 bindings call, which would *panic* on its missing
/// symbol.
pub(crate) fn elapsed_unsupported(
    start_timing: bool,
    end_timing: bool,
    driver_has_v2: bool,
) -> Option<String> {
    match (start_timing, end_timing) {
        (false, false) => Some("neither event was made with timing enabled".into()),
        (false, true) => Some("the start event was made without timing".into()),
        (true, false) => Some("the end event was made without timing".into()),
        (true, true) if !driver_has_v2 => Some(
            "the CUDA driver lacks cuEventElapsedTime_v2 (a driver for CUDA 12.8 or newer is needed)"
                .into(),
        ),
        (true, true) => None,
    }
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
            timing,
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
        // cudarc's query does not make the event's context current.
        self.cu
            .context()
            .bind_to_thread()
            .map_err(drv("Event::query"))?;
        self.cu.try_is_complete().map_err(drv("Event::query"))
    }

    /// Milliseconds between this (start) event and `end`, waiting for both.
    /// Both must have been made with timing enabled (an `Err` otherwise).
    pub fn elapsed_ms(&self, end: &Event) -> Result<f32> {
        const OP: &str = "Event::elapsed_ms";
        if end.device() != self.device() {
            return Err(Error::DeviceMismatch {
                op: OP,
                lhs: self.device(),
                rhs: end.device(),
            });
        }
        if let Some(why) =
            elapsed_unsupported(self.timing, end.timing, super::probe::has_elapsed_v2())
        {
            return Err(Error::arg(OP, why));
        }
        self.cu.elapsed_ms(&end.cu).map_err(drv(OP))
    }
}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Event(device={})", self.device())
    }
}

/// The profiler's device clock (`profile` with `device_time`): a timing
/// event recorded on the device's current stream at the clock's start and
/// at each mark, read back with `cuEventElapsedTime` once the work ran.
struct EventClock {
    device: Device,
    base: Event,
    marks: Vec<Event>,
}

/// A device clock for the profiler on `device`'s current stream; an `Err`
/// naming `profiler::profile` if the device or the driver cannot time.
pub(crate) fn clock(device: Device) -> Result<Box<dyn DeviceClock>> {
    const OP: &str = "profiler::profile";
    gpu_of(OP, device)?;
    if let Some(why) = elapsed_unsupported(true, true, super::probe::has_elapsed_v2()) {
        return Err(Error::arg(OP, why));
    }
    let base = Event::new(device, true)?;
    let stream = super::stream::current_stream(device)?;
    // Work queued before profiling would delay the base event and shift
    // every op's device start: wait for it first.
    stream.synchronize()?;
    base.record(&stream)?;
    Ok(Box::new(EventClock {
        device,
        base,
        marks: Vec::new(),
    }))
}

impl DeviceClock for EventClock {
    fn mark(&mut self) -> Option<u32> {
        let event = Event::new(self.device, true).ok()?;
        event
            .record(&super::stream::current_stream(self.device).ok()?)
            .ok()?;
        self.marks.push(event);
        u32::try_from(self.marks.len() - 1).ok()
    }

    fn resolve(&mut self) -> Vec<Option<f64>> {
        // Events complete in stream order, but marks may sit on several
        // streams: wait for each one.
        self.marks
            .iter()
            .map(|e| {
                e.synchronize().ok()?;
                let ms = self.base.elapsed_ms(e).ok()?;
                Some(f64::from(ms) * 1e3)
            })
            .collect()
    }
}
