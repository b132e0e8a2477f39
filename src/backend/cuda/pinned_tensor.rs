//! Pinned CPU tensors (PyTorch's `pin_memory()`) and the asynchronous
//! copies between them and a device.
//!
//! A pinned tensor is a CPU tensor whose storage block comes from the
//! pinned-host caching allocator (`pinned.rs`) rather than the CPU's caching
//! allocator: the CPU backend reads and writes it like any other, and the
//! DMA engine can copy it without staging, so a copy to or from a device
//! can be queued on a stream and return at once. Each such copy records an
//! event as a use of the block ([`pinned::record_tensor_use`]), so when the
//! tensor's last handle goes, the block returns to the pinned cache guarded
//! by that event and is not handed out again before the copy has finished.

use super::device::{drv, gpu, gpu_of};
use super::launch::dptr;
use super::pinned::{self, PinnedBlock};
use super::stream::current;
use crate::alloc::{Block, BlockSink};
use crate::backend::Operand;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::storage::Storage;
use cudarc::driver::{sys, CudaEvent};
use std::ffi::c_void;

/// A pinned tensor's storage: `nbytes` bytes of page-locked CPU memory
/// from the pinned-host caching allocator, allocated with device 0's
/// context (the memory is portable: every device's DMA engine can use it).
pub(crate) fn pinned_storage(nbytes: usize) -> Result<Storage> {
    if nbytes == 0 {
        return Ok(Storage::empty(Device::Cpu));
    }
    let g = gpu("pin_memory", 0)?;
    let b = pinned::alloc(&g.ctx, nbytes)?;
    let block = Block {
        addr: b.addr,
        size: b.size,
        id: u32::MAX,
    };
    Ok(Storage::from_external(Device::Cpu, nbytes, block, sink()))
}

/// Where a pinned tensor's block goes back to: the pinned cache, guarded by
/// the events of the copies still using it. (Not a zero-sized type, so its
/// address is its own and [`Storage::block_from`] can recognise it.)
struct PinnedSink(#[allow(dead_code)] u8);

impl BlockSink for PinnedSink {
    fn free(&self, b: Block) {
        pinned::release_tensor_block(PinnedBlock {
            addr: b.addr,
            size: b.size,
        });
    }
}

static PINNED: PinnedSink = PinnedSink(0);

/// The sink of every pinned tensor's block.
pub(crate) fn sink() -> &'static dyn BlockSink {
    &PINNED
}

/// The bytes a copy between `src` and `dst` moves: both dense, of one
/// size and dtype (no conversion happens on the way).
fn copy_bytes(op: &'static str, src: &Operand, dst: &Operand) -> Result<usize> {
    for o in [src, dst] {
        if !o.layout.is_contiguous() {
            return Err(Error::arg(
                op,
                format!(
                    "needs contiguous operands, got strides {:?}",
                    o.layout.strides()
                ),
            ));
        }
    }
    if src.layout.numel() != dst.layout.numel() || src.dtype != dst.dtype {
        return Err(Error::shape(
            op,
            src.layout.shape(),
            dst.layout.shape(),
            format!(
                "a copy without conversion between operands of one size and dtype ({} vs {})",
                src.dtype, dst.dtype
            ),
        ));
    }
    Ok(src.layout.numel() * src.dtype.size_in_bytes())
}

/// Queues `dst = src` from the dense pinned CPU operand `src` (whose block
/// starts at `block`) into the dense CUDA operand `dst` of the same dtype
/// on `dst`'s current stream, and returns without waiting.
pub(crate) fn to_device_async(src: &Operand, block: usize, dst: &Operand) -> Result<()> {
    const OP: &str = "to_device_non_blocking";
    let g = gpu_of(OP, dst.storage.device())?;
    let bytes = copy_bytes(OP, src, dst)?;
    if bytes == 0 {
        return Ok(());
    }
    let s = current(g);
    g.bind(OP)?;
    let host = src.storage.addr() + src.layout.offset() * src.dtype.size_in_bytes();
    // SAFETY: `host` is `bytes` bytes of a live pinned block (kept out of
    // reuse until the event below completes, see `record_tensor_use`);
    // `dst` is a dense device range of `bytes` bytes.
    unsafe {
        sys::cuMemcpyHtoDAsync_v2(dptr(dst), host as *const c_void, bytes, s.cu().cu_stream())
    }
    .result()
    .map_err(drv(OP))?;
    let ev = s.cu().record_event(None).map_err(drv(OP))?;
    pinned::record_tensor_use(block, ev);
    Ok(())
}

/// Queues `dst = src` from the dense CUDA operand `src` into the dense
/// pinned CPU operand `dst` (whose block starts at `block`) on `src`'s
/// current stream; returns the event that completes with the copy.
pub(crate) fn to_host_async(src: &Operand, dst: &Operand, block: usize) -> Result<CudaEvent> {
    const OP: &str = "to_host_non_blocking";
    let g = gpu_of(OP, src.storage.device())?;
    let bytes = copy_bytes(OP, src, dst)?;
    let s = current(g);
    g.bind(OP)?;
    if bytes > 0 {
        let host = dst.storage.addr() + dst.layout.offset() * dst.dtype.size_in_bytes();
        // SAFETY: `host` is `bytes` writable bytes of a live pinned block,
        // which nothing reads before the returned event completes (the
        // caller hands the tensor out only through `PendingHost::wait`, and
        // the block is kept out of reuse by the event recorded below).
        unsafe {
            sys::cuMemcpyDtoHAsync_v2(host as *mut c_void, dptr(src), bytes, s.cu().cu_stream())
        }
        .result()
        .map_err(drv(OP))?;
    }
    let guard = s.cu().record_event(None).map_err(drv(OP))?;
    pinned::record_tensor_use(block, guard);
    s.cu().record_event(None).map_err(drv(OP))
}
