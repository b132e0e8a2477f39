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
//!
//! When page-locked memory runs out (or [`set_pinned_memory_limit`] caps
//! it), a copy that gets one buffer stages chunk by chunk through it, and
//! one that gets none copies straight from or into the caller's pageable
//! memory and waits for the copy.
//!
//! [`set_pinned_memory_limit`]: super::set_pinned_memory_limit

use super::device::{drv, Gpu};
use super::pinned;
use super::stream::Stream;
use crate::error::{Error, Result};
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
    let first = match pinned::alloc(&g.ctx, chunk) {
        Ok(b) => b,
        // No page-locked memory to be had: copy from the caller's memory
        // directly and wait (PyTorch's copy from pageable memory).
        Err(Error::OutOfMemory { .. }) => {
            // SAFETY: the caller's ranges; the copy is waited for below.
            return unsafe { pageable(OP, s, dst, src as u64, bytes, Dir::HostToDevice) };
        }
        Err(e) => return Err(e),
    };
    let mut bufs: [Option<(pinned::PinnedBlock, Option<CudaEvent>)>; 2] =
        [Some((first, None)), None];
    // Two buffers, or one when a second cannot be had (then each chunk
    // waits for the previous one's DMA before overwriting the buffer).
    let mut nbuf = 2;
    let mut result = Ok(());
    let mut done = 0usize;
    let mut k = 0usize;
    while done < bytes {
        let n = chunk.min(bytes - done);
        if bufs[k % nbuf].is_none() {
            match pinned::alloc(&g.ctx, chunk) {
                Ok(b) => bufs[k % nbuf] = Some((b, None)),
                Err(Error::OutOfMemory { .. }) => nbuf = 1,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        let Some((buf, ev)) = bufs[k % nbuf].as_mut() else {
            result = Err(Error::Backend {
                op: OP,
                msg: "no staging buffer".into(),
            });
            break;
        };
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
    // Two staging buffers, or one when a second cannot be had (then each
    // chunk is copied out before the next is queued), or none: then the
    // copy goes straight into the caller's memory and is waited for.
    let mut bufs: Vec<pinned::PinnedBlock> = Vec::with_capacity(2);
    for _ in 0..nchunks.min(2) {
        match pinned::alloc(&g.ctx, chunk) {
            Ok(b) => bufs.push(b),
            Err(Error::OutOfMemory { .. }) => break,
            Err(e) => {
                bufs.into_iter().for_each(|b| pinned::free(b, None));
                return Err(e);
            }
        }
    }
    if bufs.is_empty() {
        // SAFETY: the caller's ranges; the copy is waited for.
        return unsafe { pageable(OP, s, dst as u64, src, bytes, Dir::DeviceToHost) };
    }
    let nbuf = bufs.len();
    let mut events: [Option<CudaEvent>; 2] = [None, None];
    let issue = |k: usize,
                 bufs: &mut Vec<pinned::PinnedBlock>,
                 events: &mut [Option<CudaEvent>; 2]|
     -> Result<()> {
        let off = k * chunk;
        let n = chunk.min(bytes - off);
        // SAFETY: the pinned buffer holds `chunk >= n` bytes and is not in
        // use (its previous chunk was waited for and copied out); the device
        // range is valid (caller).
        unsafe {
            sys::cuMemcpyDtoHAsync_v2(
                bufs[k % nbuf].ptr() as *mut c_void,
                src + off as u64,
                n,
                s.cu().cu_stream(),
            )
        }
        .result()
        .map_err(drv(OP))?;
        events[k % nbuf] = Some(record(OP, s)?);
        Ok(())
    };
    let mut result = issue(0, &mut bufs, &mut events);
    let mut k = 0;
    while result.is_ok() && k < nchunks {
        // Queue the next chunk into the other buffer before reading this one.
        if nbuf == 2
            && k + 1 < nchunks
            && let Err(e) = issue(k + 1, &mut bufs, &mut events)
        {
            result = Err(e);
            break;
        }
        if let Some(e) = events[k % nbuf].take()
            && let Err(e) = e.synchronize().map_err(drv(OP))
        {
            result = Err(e);
            break;
        }
        let off = k * chunk;
        let n = chunk.min(bytes - off);
        // SAFETY: the chunk has arrived in the pinned buffer; `dst + off` is
        // writable for n bytes (caller).
        unsafe { std::ptr::copy_nonoverlapping(bufs[k % nbuf].ptr(), dst.add(off), n) };
        k += 1;
        if nbuf == 1 && k < nchunks {
            // The only buffer is free again: queue the next chunk into it.
            if let Err(e) = issue(k, &mut bufs, &mut events) {
                result = Err(e);
                break;
            }
        }
    }
    if result.is_err() {
        let _ = s.cu().synchronize();
    }
    for b in bufs {
        pinned::free(b, None);
    }
    result
}

/// The direction of a [`pageable`] copy.
enum Dir {
    HostToDevice,
    DeviceToHost,
}

/// Copies `bytes` between pageable host memory and the device on `s`,
/// ordered after the work queued there, and waits for the copy: the path
/// when no page-locked staging buffer can be allocated.
///
/// # Safety
/// `dst`/`src` are the caller's ranges, valid for `bytes` bytes (host
/// addresses as integers for the host side).
unsafe fn pageable(
    op: &'static str,
    s: &Stream,
    dst: u64,
    src: u64,
    bytes: usize,
    dir: Dir,
) -> Result<()> {
    let cs = s.cu().cu_stream();
    // SAFETY: the caller's ranges; the stream is synchronised before return,
    // so neither range is used afterwards.
    let r = unsafe {
        match dir {
            Dir::HostToDevice => sys::cuMemcpyHtoDAsync_v2(dst, src as *const c_void, bytes, cs),
            Dir::DeviceToHost => sys::cuMemcpyDtoHAsync_v2(dst as *mut c_void, src, bytes, cs),
        }
    }
    .result()
    .map_err(drv(op));
    let w = s.cu().synchronize().map_err(drv(op));
    r.and(w)
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
