//! Pinned (page-locked) CPU tensors and copies that do not wait:
//! [`pin_memory`](Tensor::pin_memory), [`to_device_non_blocking`](Tensor::to_device_non_blocking)
//! and [`to_host_non_blocking`](Tensor::to_host_non_blocking), PyTorch's
//! `pin_memory()` and `.to(device, non_blocking=True)`.
//!
//! A copy to a device returns a device tensor at once: work queued on that
//! device's current stream sees the data (stream order). A copy to the host
//! returns a [`PendingHost`], whose tensor is handed out only by
//! [`wait`](PendingHost::wait), so nothing can read the bytes before they
//! arrive. Either way the pinned block is not reused before its copy has
//! finished, even if every handle to it is dropped at once.

use crate::backend::Operand;
use crate::device::Device;
use crate::error::{bail, Error, Result};
use crate::tensor::Tensor;

/// A device-to-host copy in flight (see
/// [`to_host_non_blocking`](Tensor::to_host_non_blocking)): the pinned CPU
/// tensor it fills, handed out once the copy has finished.
#[must_use = "the copy's result is only reachable through `wait`"]
pub struct PendingHost {
    tensor: Tensor,
    #[cfg(feature = "cuda")]
    event: Option<cudarc::driver::CudaEvent>,
}

impl std::fmt::Debug for PendingHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingHost")
            .field("shape", &self.tensor.shape())
            .field("dtype", &self.tensor.dtype())
            .field("done", &self.is_done())
            .finish()
    }
}

impl PendingHost {
    /// `true` once the copy has finished ([`wait`](Self::wait) will not block).
    pub fn is_done(&self) -> bool {
        #[cfg(feature = "cuda")]
        if let Some(e) = &self.event {
            return e.context().bind_to_thread().is_ok() && e.try_is_complete().unwrap_or(false);
        }
        true
    }

    /// Waits for the copy and returns the pinned CPU tensor.
    pub fn wait(self) -> Result<Tensor> {
        #[cfg(feature = "cuda")]
        if let Some(e) = &self.event {
            let drv = crate::backend::cuda::device::drv("to_host_non_blocking");
            e.context().bind_to_thread().map_err(&drv)?;
            e.synchronize().map_err(&drv)?;
        }
        Ok(self.tensor)
    }
}

impl Tensor {
    /// A copy of this CPU tensor in page-locked (pinned) host memory, which
    /// a device's DMA engine reads and writes without staging, so
    /// [`to_device_non_blocking`](Tensor::to_device_non_blocking) from it
    /// returns before the copy is done (PyTorch's `pin_memory()`). Contiguous;
    /// an already pinned tensor is returned as a new handle to itself.
    ///
    /// The block comes from the pinned-host caching allocator
    /// (`backend::cuda::pinned_memory_stats`), not the CPU's: it does not
    /// count in `memory::memory_allocated(Device::Cpu)`. Needs the CUDA
    /// backend and a usable device:
    ///
    /// ```
    /// # use tensorscope::{DType, Device, Tensor, backend::cuda};
    /// let x = Tensor::ones(&[4], DType::F32, Device::Cpu)?;
    /// match x.pin_memory() {
    ///     Ok(p) => assert!(p.is_pinned() && p.to_vec::<f32>()? == vec![1.0; 4]),
    ///     Err(e) => assert!(!cuda::is_available() && e.to_string().contains("pin_memory")),
    /// }
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn pin_memory(&self) -> Result<Tensor> {
        let op = "pin_memory";
        if self.device() != Device::Cpu {
            bail!(Error::arg(
                op,
                format!(
                    "only CPU tensors can be pinned, this one is on {}",
                    self.device()
                )
            ));
        }
        if self.is_pinned() {
            return Ok(self.alias());
        }
        let bytes = crate::layout::checked_mul(
            "pin_memory",
            self.numel(),
            self.dtype().size_in_bytes(),
            "the bytes",
        )?;
        let storage = crate::backend::cuda::pinned_tensor::pinned_storage(bytes)?;
        let out = Tensor::from_parts(
            storage,
            crate::layout::Layout::contiguous(self.shape()),
            self.dtype(),
        );
        crate::backend::copy(&Operand::of(self), &Operand::of(&out))?;
        crate::autograd::formulas::cast(self, out, "PinMemoryBackward")
    }

    /// `true` for a CPU tensor whose storage is pinned (see
    /// [`pin_memory`](Tensor::pin_memory)); views of it are pinned too.
    pub fn is_pinned(&self) -> bool {
        self.storage()
            .block_from(crate::backend::cuda::pinned_tensor::sink())
            .is_some()
    }

    /// A copy on CUDA device `device` that does not wait for the data when
    /// this tensor is pinned and contiguous: the copy is queued on the
    /// device's current stream and the result returned at once; work queued
    /// there after it sees the data. Otherwise it is
    /// [`to_device`](Tensor::to_device), which waits (as PyTorch's
    /// `non_blocking=True` from pageable memory does).
    ///
    /// Writing to this tensor before the copy has finished changes what the
    /// device receives (as in PyTorch); dropping it is safe: its pinned
    /// block is not reused before the copy has finished.
    pub fn to_device_non_blocking(&self, device: Device) -> Result<Tensor> {
        let Some(block) = self
            .storage()
            .block_from(crate::backend::cuda::pinned_tensor::sink())
        else {
            return self.to_device(device);
        };
        if !device.is_cuda() || !self.is_contiguous() {
            return self.to_device(device);
        }
        let out = Tensor::alloc(self.shape(), self.dtype(), device)?;
        {
            let (src, dst) = (Operand::of(self), Operand::of(&out));
            let _l = crate::storage::lock(&[src.storage], &[]);
            crate::backend::cuda::pinned_tensor::to_device_async(&src, block, &dst)?;
        }
        crate::autograd::formulas::cast(self, out, "ToCopyBackward")
    }

    /// Writes `src` into this tensor, without waiting when that is possible:
    /// PyTorch's `dst.copy_(src, non_blocking=True)`. When this tensor is
    /// a contiguous CUDA tensor and `src` a contiguous pinned CPU tensor of
    /// the same shape and dtype, the copy is queued on this device's current
    /// stream and the call returns at once (work queued there later sees the
    /// data; `src` must not be written before the copy has run, and its
    /// block is not reused before then even if it is dropped). Anything
    /// else is [`copy_`](Tensor::copy_), with its broadcasting, dtype
    /// conversion and errors (named `copy_`); a driver error on the
    /// asynchronous path names `copy_non_blocking_`.
    ///
    /// This is the copy a hand-written double buffer (or the
    /// [`DataLoader`](crate::data::DataLoader)'s ring) needs: it writes into
    /// a buffer allocated once instead of returning a new tensor, as
    /// [`to_device_non_blocking`](Tensor::to_device_non_blocking) does.
    ///
    /// ```
    /// # use tensorscope::{DType, Device, Tensor};
    /// let src = Tensor::arange(0.0, 4.0, 1.0, DType::F32, Device::Cpu)?;
    /// let mut dst = Tensor::zeros(&[4], DType::F32, Device::Cpu)?;
    /// dst.copy_non_blocking_(&src)?; // CPU to CPU: an ordinary copy
    /// assert_eq!(dst.to_vec::<f32>()?, vec![0.0, 1.0, 2.0, 3.0]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn copy_non_blocking_(&mut self, src: &Tensor) -> Result<&mut Tensor> {
        let block = src
            .storage()
            .block_from(crate::backend::cuda::pinned_tensor::sink());
        let Some(block) = block.filter(|_| {
            self.device().is_cuda()
                && src.is_contiguous()
                && self.is_contiguous()
                && src.shape() == self.shape()
                && src.dtype() == self.dtype()
        }) else {
            return self.copy_(src);
        };
        self.check_writable("copy_")?;
        crate::autograd::check_unrecorded_inputs("copy_", &[src])?;
        {
            let (s, d) = (Operand::of(src), Operand::of(self));
            let _l = crate::storage::lock(&[s.storage], &[d.storage]);
            crate::backend::cuda::pinned_tensor::to_device_async(&s, block, &d)
                .map_err(|e| e.reported_as("copy_non_blocking_"))?;
        }
        self.storage().bump_version();
        Ok(self)
    }

    /// Starts a copy of this CUDA tensor into a new pinned CPU tensor and
    /// returns without waiting for it; [`PendingHost::wait`] hands the
    /// tensor out once the bytes have arrived (PyTorch's
    /// `.to("cpu", non_blocking=True)` into pinned memory, with the
    /// synchronisation made part of the type). A non-contiguous source is
    /// made contiguous on the device first (queued too). A CPU tensor gives
    /// a finished `PendingHost` holding a new handle to itself.
    pub fn to_host_non_blocking(&self) -> Result<PendingHost> {
        if !self.device().is_cuda() {
            return Ok(PendingHost {
                tensor: self.alias(),
                #[cfg(feature = "cuda")]
                event: None,
            });
        }
        let src = self.contiguous()?;
        let bytes = crate::layout::checked_mul(
            "to_host_non_blocking",
            src.numel(),
            src.dtype().size_in_bytes(),
            "the bytes",
        )?;
        let storage = crate::backend::cuda::pinned_tensor::pinned_storage(bytes)?;
        let block = storage.block_from(crate::backend::cuda::pinned_tensor::sink());
        let out = Tensor::from_parts(
            storage,
            crate::layout::Layout::contiguous(src.shape()),
            src.dtype(),
        );
        #[cfg(feature = "cuda")]
        let event = match block {
            Some(block) => {
                let (s, d) = (Operand::of(&src), Operand::of(&out));
                let _l = crate::storage::lock(&[s.storage], &[]);
                Some(crate::backend::cuda::pinned_tensor::to_host_async(
                    &s, &d, block,
                )?)
            }
            None => None, // an empty tensor: nothing to copy
        };
        #[cfg(not(feature = "cuda"))]
        let _ = block;
        let out = crate::autograd::formulas::cast(self, out, "ToCopyBackward")?;
        Ok(PendingHost {
            tensor: out,
            #[cfg(feature = "cuda")]
            event,
        })
    }
}
