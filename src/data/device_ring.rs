//! The device half of a [`DataLoader`](super::DataLoader)'s ring, for a
//! CUDA target: one device buffer per host slot, filled on the loader's own
//! copy stream.
//!
//! The order of work, per batch in slot `s`:
//!
//! 1. a worker waits for `copied[s]` (the previous copy out of host slot
//!    `s` has finished) before it rewrites the host slot;
//! 2. [`load`](DeviceRing::load): the copy stream waits for `consumed[s]`
//!    (the compute work that read the device slot's previous batch), queues
//!    the host-to-device copies (asynchronous from a pinned ring), records
//!    `copied[s]`, and the caller's current stream waits for `copied[s]`;
//! 3. [`release`](DeviceRing::release), when the batch is dropped: records
//!    `consumed[s]` on the caller's current stream.
//!
//! So the copy of batch `k + 1` overlaps the compute of batch `k`, no copy
//! overwrites a device slot that queued compute still reads, and no worker
//! overwrites a host slot that a queued copy still reads. Without the
//! `cuda` feature a `DeviceRing` cannot be made (the loader's build fails
//! earlier, allocating the device buffers).

use crate::device::Device;
use crate::error::Result;
use crate::tensor::Tensor;

#[cfg(feature = "cuda")]
pub(super) use imp::DeviceRing;

#[cfg(feature = "cuda")]
mod imp {
    use super::*;
    use crate::backend::cuda::{current_stream, with_stream, Event, Stream};

    /// See the module docs.
    pub(in crate::data) struct DeviceRing {
        device: Device,
        /// Per slot, one device tensor per field, shaped as the host slot.
        slots: Vec<Vec<Tensor>>,
        copy: Stream,
        copied: Vec<Event>,
        consumed: Vec<Event>,
    }

    impl DeviceRing {
        /// Device buffers shaped like the `host` slots, a copy stream and
        /// the events, on `device`.
        pub(in crate::data) fn new(device: Device, host: &[Vec<Tensor>]) -> Result<DeviceRing> {
            let slots = host
                .iter()
                .map(|s| {
                    s.iter()
                        .map(|t| Tensor::zeros(t.shape(), t.dtype(), device))
                        .collect::<Result<Vec<_>>>()
                })
                .collect::<Result<Vec<_>>>()?;
            let events = || {
                (0..host.len())
                    .map(|_| Event::new(device, false))
                    .collect::<Result<Vec<_>>>()
            };
            Ok(DeviceRing {
                device,
                copy: Stream::new(device)?,
                copied: events()?,
                consumed: events()?,
                slots,
            })
        }

        pub(in crate::data) fn slot(&self, s: usize) -> &[Tensor] {
            &self.slots[s]
        }

        pub(in crate::data) fn slots(&self) -> &[Vec<Tensor>] {
            &self.slots
        }

        /// Queues the copy of the first `rows` rows of `host` (host slot
        /// `s`) into device slot `s` on the copy stream; the caller's
        /// current stream waits for it.
        pub(in crate::data) fn load(&self, s: usize, host: &[Tensor], rows: usize) -> Result<()> {
            let r = self.copy.wait_event(&self.consumed[s]).and_then(|()| {
                with_stream(&self.copy, || -> Result<()> {
                    for (d, h) in self.slots[s].iter().zip(host) {
                        let mut d = d.narrow(0, 0, rows)?;
                        d.copy_non_blocking_(&h.narrow(0, 0, rows)?)?;
                    }
                    Ok(())
                })?;
                self.copied[s].record(&self.copy)?;
                current_stream(self.device)?.wait_event(&self.copied[s])
            });
            if r.is_err() {
                // Copies may be queued that `copied[s]` does not cover: let
                // them finish before the slot can be rewritten.
                let _ = self.copy.synchronize();
            }
            r
        }

        /// The batch in slot `s` is dropped: a later copy into the slot
        /// waits for the work queued so far on the caller's current stream.
        /// If the event cannot be recorded, waits for that stream here.
        pub(in crate::data) fn release(&self, s: usize) {
            let r = current_stream(self.device)
                .and_then(|c| self.consumed[s].record(&c).or_else(|_| c.synchronize()));
            // Both failing means the device's context is lost: no work on
            // it runs any more, so none can race with the next copy.
            drop(r);
        }

        /// Blocks until the last copy out of host slot `s` has finished, so
        /// that the slot can be rewritten.
        pub(in crate::data) fn host_free(&self, s: usize) -> Result<()> {
            self.copied[s].synchronize()
        }
    }

    impl Drop for DeviceRing {
        fn drop(&mut self) {
            // The device buffers go back to the allocator next: no queued
            // copy may still write them, and no queued compute read them.
            // A failure means a lost context, where nothing runs any more.
            let _ = self.copy.synchronize();
            for e in &self.consumed {
                let _ = e.synchronize();
            }
        }
    }
}

#[cfg(not(feature = "cuda"))]
pub(super) use stand_in::DeviceRing;

/// Without the `cuda` feature no device ring exists: `new` fails, so the
/// other methods are never reached.
#[cfg(not(feature = "cuda"))]
mod stand_in {
    use super::*;
    use crate::error::Error;

    pub(in crate::data) struct DeviceRing(std::convert::Infallible);

    impl DeviceRing {
        pub(in crate::data) fn new(device: Device, _host: &[Vec<Tensor>]) -> Result<DeviceRing> {
            Err(Error::DeviceUnavailable {
                op: "DataLoader::build",
                device,
                reason: "tensorscope was built without the `cuda` feature".into(),
            })
        }
        pub(in crate::data) fn slot(&self, _s: usize) -> &[Tensor] {
            match self.0 {}
        }
        pub(in crate::data) fn slots(&self) -> &[Vec<Tensor>] {
            match self.0 {}
        }
        pub(in crate::data) fn load(&self, _s: usize, _h: &[Tensor], _r: usize) -> Result<()> {
            match self.0 {}
        }
        pub(in crate::data) fn release(&self, _s: usize) {
            match self.0 {}
        }
        pub(in crate::data) fn host_free(&self, _s: usize) -> Result<()> {
            match self.0 {}
        }
    }
}
