//! Raw host↔device and device↔device byte transfers on a stream.
//!
//! Host memory is staged through the pinned caching allocator, in chunks of
//! at most [`CHUNK`] bytes with two buffers, so the host's copy of one chunk
//! overlaps the DMA of the previous one:
//! * host → device returns as soon as the last chunk is queued: the host
//!   bytes have been copied into pinned buffers, which go back to the cache
//!   guarded by an event, so the caller may reuse its memory at once (the
//!   copy is asynchronous with respect to the host);
//! * device → host returns when the bytes have arrived (the caller reads
//!   them next).

use super::device::{drv, Gpu};
use super::pinned;
use super::stream::Stream;
use crate::error::Result;
use cudarc::driver::{sys, CudaEvent};
use std::ffi::c_void;

/// Largest staging chunk.
pub(crate) const CHUNK: usize = 16 << 20;

fn record(op: &'static str, s: &Stream) -> Result<CudaEvent> {
    s.cu().record_event(None).map_err(drv(op))
}

/// Copies `bytes` from host address `src` to device address `dst` on `s`.
///
/// # Safety
/// `src` must be readable for `bytes` bytes for the duration of the call and
/// `dst` writable for `bytes` bytes on `g` until the copy completes.
pub(crate) unsafe fn host_to_device(
    g: &Gpu,
    s: &Stream,
    dst: u64,
    src: *const u8,
    bytes: usize,
) -> Result<()> {
    const OP: &str = "copy to device";
    if bytes == 0 {
        return Ok(());
    }
    g.bind(OP)?;
    let chunk = bytes.min(CHUNK);
    let mut bufs: [Option<(pinned::PinnedBlock, Option<CudaEvent>)>; 2] = [None, None];
    let mut result = Ok(());
    let mut done = 0usize;
    let mut k = 0usize;
    while done < bytes {
        let n = chunk.min(bytes - done);
        let slot = &mut bufs[k % 2];
        if slot.is_none() {
            match pinned::alloc(&g.ctx, chunk) {
                Ok(b) => *slot = Some((b, None)),
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        let (buf, ev) = slot.as_mut().expect("just filled");
        if let Some(e) = ev.take() {
            // The buffer's previous chunk must have left before it is rewritten.
            if let Err(e) = e.synchronize().map_err(drv(OP)) {
                result = Err(e);
                break;
            }
        }
        // SAFETY: `src + done` is readable for n bytes (caller); the pinned
        // buffer holds at least `chunk >= n` bytes and no DMA uses it now.
        unsafe { std::ptr::copy_nonoverlapping(src.add(done), buf.ptr(), n) };
        // SAFETY: both ranges are valid for n bytes (see above and caller).
        let r = unsafe {
            sys::cuMemcpyHtoDAsync_v2(
                dst + done as u64,
                buf.ptr() as *const c_void,
                n,
                s.cu().cu_stream(),
            )
        }
        .result()
        .map_err(drv(OP));
        if let Err(e) = r {
            result = Err(e);
            break;
        }
        match record(OP, s) {
            Ok(e) => *ev = Some(e),
            Err(e) => {
                result = Err(e);
                break;
            }
        }
        done += n;
        k += 1;
    }
    for (buf, ev) in bufs.into_iter().flatten() {
        if result.is_err() {
            // Something failed mid-way: make sure no DMA still reads the buffer.
            let _ = s.cu().synchronize();
        }
        pinned::free(buf, ev);
    }
    result
}

/// Copies `bytes` from device address `src` to host address `dst` on `s`,
/// and waits for them.
///
/// # Safety
/// `dst` must be writable for `bytes` bytes and `src` readable for `bytes`
/// bytes on `g` (after the work queued on `s`).
pub(crate) unsafe fn device_to_host(
    g: &Gpu,
    s: &Stream,
    dst: *mut u8,
    src: u64,
    bytes: usize,
) -> Result<()> {
    const OP: &str = "copy to host";
    if bytes == 0 {
        return Ok(());
    }
    g.bind(OP)?;
    let chunk = bytes.min(CHUNK);
    let nchunks = bytes.div_ceil(chunk);
    let mut bufs: Vec<pinned::PinnedBlock> = Vec::with_capacity(2);
    let mut events: [Option<CudaEvent>; 2] = [None, None];
    let issue = |k: usize,
                 bufs: &mut Vec<pinned::PinnedBlock>,
                 events: &mut [Option<CudaEvent>; 2]|
     -> Result<()> {
        if bufs.len() <= k % 2 {
            bufs.push(pinned::alloc(&g.ctx, chunk)?);
        }
        let off = k * chunk;
        let n = chunk.min(bytes - off);
        // SAFETY: the pinned buffer holds `chunk >= n` bytes and is not in
        // use (its previous chunk was waited for and copied out); the device
        // range is valid (caller).
        unsafe {
            sys::cuMemcpyDtoHAsync_v2(
                bufs[k % 2].ptr() as *mut c_void,
                src + off as u64,
                n,
                s.cu().cu_stream(),
            )
        }
        .result()
        .map_err(drv(OP))?;
        events[k % 2] = Some(record(OP, s)?);
        Ok(())
    };
    let mut result = issue(0, &mut bufs, &mut events);
    let mut k = 0;
    while result.is_ok() && k < nchunks {
        // Queue the next chunk into the other buffer before reading this one.
        if k + 1 < nchunks {
            if let Err(e) = issue(k + 1, &mut bufs, &mut events) {
                result = Err(e);
                break;
            }
        }
        if let Some(e) = events[k % 2].take() {
            if let Err(e) = e.synchronize().map_err(drv(OP)) {
                result = Err(e);
                break;
            }
        }
        let off = k * chunk;
        let n = chunk.min(bytes - off);
        // SAFETY: the chunk has arrived in the pinned buffer; `dst + off` is
        // writable for n bytes (caller).
        unsafe { std::ptr::copy_nonoverlapping(bufs[k % 2].ptr(), dst.add(off), n) };
        k += 1;
    }
    if result.is_err() {
        let _ = s.cu().synchronize();
    }
    for b in bufs {
        pinned::free(b, None);
    }
    result
}

/// Copies `bytes` between device addresses on one device, on `s`.
///
/// # Safety
/// Both ranges must be valid device memory of `g` for `bytes` bytes.
pub(crate) unsafe fn device_to_device(
    g: &Gpu,
    s: &Stream,
    dst: u64,
    src: u64,
    bytes: usize,
) -> Result<()> {
    const OP: &str = "copy";
    if bytes == 0 || dst == src {
        return Ok(());
    }
    g.bind(OP)?;
    // SAFETY: the caller guarantees both ranges.
    unsafe { sys::cuMemcpyDtoDAsync_v2(dst, src, bytes, s.cu().cu_stream()) }
        .result()
        .map_err(drv(OP))
}

/// Copies `bytes` from device `src_g` to device `dst_g` and waits for the
/// copy: the source may be freed (and reused on its own stream) afterwards.
/// Work queued on `src_s` is waited for first.
///
/// # Safety
/// Both ranges must be valid device memory of their devices for `bytes`.
pub(crate) unsafe fn peer(
    dst_g: &Gpu,
    dst_s: &Stream,
    dst: u64,
    src_g: &Gpu,
    src_s: &Stream,
    src: u64,
    bytes: usize,
) -> Result<()> {
    const OP: &str = "copy between devices";
    if bytes == 0 {
        return Ok(());
    }
    src_s.synchronize()?;
    dst_g.bind(OP)?;
    // SAFETY: the caller guarantees both ranges.
    unsafe {
        sys::cuMemcpyPeerAsync(
            dst,
            dst_g.ctx.cu_ctx(),
            src,
            src_g.ctx.cu_ctx(),
            bytes,
            dst_s.cu().cu_stream(),
        )
    }
    .result()
    .map_err(drv(OP))?;
    dst_s.synchronize()
}

/// Sets `bytes` bytes at `dst` to `value` on `s`.
///
/// # Safety
/// The range must be valid device memory of `g`.
pub(crate) unsafe fn memset(g: &Gpu, s: &Stream, dst: u64, value: u8, bytes: usize) -> Result<()> {
    const OP: &str = "fill";
    if bytes == 0 {
        return Ok(());
    }
    g.bind(OP)?;
    // SAFETY: the caller guarantees the range.
    unsafe { sys::cuMemsetD8Async(dst, value, bytes, s.cu().cu_stream()) }
        .result()
        .map_err(drv(OP))
}
