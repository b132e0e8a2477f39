//! The backend interface on CUDA: copy (on a device, between devices and to
//! and from the host, with dtype casts), fill, unary, binary, binary with a
//! scalar, and where. The semantics are the CPU backend's (see
//! `kernels/elementwise.cu` and `kernels/copy.cu`).
//!
//! The caller (`crate::backend`) holds the storages' locks. Kernels run on
//! the calling thread's current stream of the device, asynchronously; a copy
//! to the host waits for its bytes.

use super::device::{gpu_of, Gpu};
use super::kernels;
use super::launch::{dptr, numel, prepare, Geom};
use super::stream::{current, Stream};
use super::transfer;
use crate::backend::{BinaryOp, Operand, UnaryOp};
use crate::device::Device;
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::storage::Storage;
use crate::with_dtype;
use std::borrow::Cow;

/// The bits of `x` in the low bytes of a u64: how kernels receive scalars.
fn bits_of<T: Element>(x: T) -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: T is a plain value of at most 8 bytes; `b` has room for it.
    unsafe {
        std::ptr::copy_nonoverlapping(
            (&x as *const T).cast::<u8>(),
            b.as_mut_ptr(),
            std::mem::size_of::<T>(),
        )
    };
    u64::from_le_bytes(b)
}

/// The bits of `v` converted to `dt` saturating (`T::from_f64`): clamp
/// bounds (PyTorch's u8 `clamp(-1, 2)` leaves 0 alone).
pub(crate) fn scalar_bits(dt: DType, v: f64) -> u64 {
    with_dtype!(dt, T => bits_of(T::from_f64(v)))
}

/// The bits of `v` stored as PyTorch stores a number (`T::wrap_from_f64`,
/// as the CPU's scalar arithmetic and fills): rounded for floats, wrapped
/// through i64 for integers (`u8_tensor + (-2)` adds 254), `v != 0` for
/// bool.
pub(crate) fn arith_scalar_bits(dt: DType, v: f64) -> u64 {
    with_dtype!(dt, T => bits_of(T::wrap_from_f64(v)))
}

/// `true` when the operand's elements are one dense run.
fn dense(o: &Operand) -> bool {
    o.layout.is_contiguous()
}

/// A contiguous temporary of `shape` and `dt` on `device`, from that
/// device's caching allocator: a CUDA device's, or the CPU's for the host
/// staging of a strided or casting host <-> device copy. (It once always
/// asked the CUDA allocator, so a non-contiguous CPU tensor could not be
/// sent to a GPU: seen on the first GPU run.)
pub(super) fn temp(device: Device, shape: &[usize], dt: DType) -> Result<(Storage, Layout)> {
    let layout = Layout::contiguous(shape);
    let bytes = layout.numel() * dt.size_in_bytes();
    let storage = Storage::new_in(crate::backend::allocator(device)?, bytes)?;
    Ok((storage, layout))
}

fn operand<'a>(s: &'a Storage, l: &Layout, dt: DType) -> Operand<'a> {
    Operand {
        storage: s,
        layout: Cow::Owned(l.clone()),
        dtype: dt,
    }
}

/// Element-by-element copy between two operands of one device, casting.
pub(crate) fn copy_on_device(g: &Gpu, s: &Stream, src: &Operand, dst: &Operand) -> Result<()> {
    const OP: &str = "copy";
    let n = numel(dst);
    if n == 0 {
        return Ok(());
    }
    if src.dtype == dst.dtype && dense(src) && dense(dst) {
        let bytes = n as usize * dst.dtype.size_in_bytes();
        // SAFETY: both dense ranges lie in their storages (layouts fit).
        return unsafe { transfer::device_to_device(g, s, dptr(dst), dptr(src), bytes) };
    }
    if src.dtype == dst.dtype && src.storage.same(dst.storage) && src.layout == dst.layout {
        return Ok(());
    }
    let f = g.kernel(OP, &kernels::copy(src.dtype, dst.dtype))?;
    let geom = Geom::<2>::new(OP, [&dst.layout, &src.layout])?;
    // SAFETY: copy_b<B>/cast_<s>_<d>(Geom<2>, i64, D*, const S*), pointers
    // into live storages whose layouts the geometry describes.
    unsafe { f.launch(OP, s, g.grid(n), &(geom, n, dptr(dst), dptr(src))) }
}

/// `dst = src` for any pair of devices (not both the CPU).
pub(crate) fn copy(src: &Operand, dst: &Operand) -> Result<()> {
    match (src.storage.device(), dst.storage.device()) {
        (Device::Cuda(i), Device::Cuda(j)) if i == j => {
            let g = gpu_of("copy", src.storage.device())?;
            copy_on_device(g, &current(g), src, dst)
        }
        (Device::Cuda(_), Device::Cuda(_)) => copy_peer(src, dst),
        (Device::Cpu, Device::Cuda(_)) => copy_to_device(src, dst),
        (Device::Cuda(_), Device::Cpu) => copy_to_host(src, dst),
        (Device::Cpu, Device::Cpu) => {
            crate::backend::cpu::copy(src, dst);
            Ok(())
        }
    }
}

/// Host → device: pack the source densely on the host if needed, send it,
/// then cast/scatter on the device if needed.
fn copy_to_device(src: &Operand, dst: &Operand) -> Result<()> {
    let g = gpu_of("copy", dst.storage.device())?;
    let s = current(g);
    let shape = dst.layout.shape();
    let n = dst.layout.numel();
    if n == 0 {
        return Ok(());
    }
    let bytes = n * src.dtype.size_in_bytes();
    // The source as dense host bytes of its own dtype.
    let packed;
    let host = if dense(src) {
        src.storage.addr() + src.layout.offset() * src.dtype.size_in_bytes()
    } else {
        let (st, l) = temp(Device::Cpu, shape, src.dtype)?;
        crate::backend::cpu::copy(src, &operand(&st, &l, src.dtype));
        packed = st;
        packed.addr()
    };
    if src.dtype == dst.dtype && dense(dst) {
        // SAFETY: `host` holds `bytes` readable bytes (a dense source or the
        // packed copy); `dst` is dense with n elements of that dtype.
        return unsafe { transfer::host_to_device(g, &s, dptr(dst), host as *const u8, bytes) };
    }
    let (st, l) = temp(dst.storage.device(), shape, src.dtype)?;
    // SAFETY: as above; the temporary holds exactly `bytes`.
    unsafe { transfer::host_to_device(g, &s, st.addr() as u64, host as *const u8, bytes)? };
    copy_on_device(g, &s, &operand(&st, &l, src.dtype), dst)
}

/// Device → host: make the source dense on the device if needed, fetch it,
/// then cast/scatter on the host if needed.
fn copy_to_host(src: &Operand, dst: &Operand) -> Result<()> {
    let g = gpu_of("copy", src.storage.device())?;
    let s = current(g);
    let shape = dst.layout.shape();
    let n = dst.layout.numel();
    if n == 0 {
        return Ok(());
    }
    let bytes = n * src.dtype.size_in_bytes();
    let packed;
    let dev = if dense(src) {
        dptr(src)
    } else {
        let (st, l) = temp(src.storage.device(), shape, src.dtype)?;
        copy_on_device(g, &s, src, &operand(&st, &l, src.dtype))?;
        packed = st;
        packed.addr() as u64
    };
    if src.dtype == dst.dtype && dense(dst) {
        let host = dst.storage.addr() + dst.layout.offset() * dst.dtype.size_in_bytes();
        // SAFETY: `dst` is dense with `bytes` writable bytes (write lock
        // held by the caller); `dev` holds `bytes` bytes.
        return unsafe { transfer::device_to_host(g, &s, host as *mut u8, dev, bytes) };
    }
    let (st, l) = temp(Device::Cpu, shape, src.dtype)?;
    // SAFETY: the host temporary holds exactly `bytes`.
    unsafe { transfer::device_to_host(g, &s, st.addr() as *mut u8, dev, bytes)? };
    crate::backend::cpu::copy(&operand(&st, &l, src.dtype), dst);
    Ok(())
}

/// Device i → device j: dense on i, peer copy, cast/scatter on j.
fn copy_peer(src: &Operand, dst: &Operand) -> Result<()> {
    let gs = gpu_of("copy", src.storage.device())?;
    let gd = gpu_of("copy", dst.storage.device())?;
    let (ss, sd) = (current(gs), current(gd));
    let shape = dst.layout.shape();
    let n = dst.layout.numel();
    if n == 0 {
        return Ok(());
    }
    let bytes = n * src.dtype.size_in_bytes();
    let packed;
    let from = if dense(src) {
        dptr(src)
    } else {
        let (st, l) = temp(src.storage.device(), shape, src.dtype)?;
        copy_on_device(gs, &ss, src, &operand(&st, &l, src.dtype))?;
        packed = st;
        packed.addr() as u64
    };
    if src.dtype == dst.dtype && dense(dst) {
        // SAFETY: both dense ranges hold `bytes` bytes on their devices.
        return unsafe { transfer::peer(gd, &sd, dptr(dst), gs, &ss, from, bytes) };
    }
    let (st, l) = temp(dst.storage.device(), shape, src.dtype)?;
    // SAFETY: as above; the temporary holds exactly `bytes`.
    unsafe { transfer::peer(gd, &sd, st.addr() as u64, gs, &ss, from, bytes)? };
    copy_on_device(gd, &sd, &operand(&st, &l, src.dtype), dst)
}

/// Writes `value` (converted to `dst`'s dtype) into every element.
pub(crate) fn fill(dst: &Operand, value: f64) -> Result<()> {
    const OP: &str = "fill";
    let g = gpu_of(OP, dst.storage.device())?;
    let s = current(g);
    let n = numel(dst);
    if n == 0 {
        return Ok(());
    }
    // Wrapped as PyTorch stores a number (-1 into u8 is 255), as the CPU.
    let bits = arith_scalar_bits(dst.dtype, value);
    let esz = dst.dtype.size_in_bytes();
    let b = bits.to_le_bytes();
    if dense(dst) && b[..esz].iter().all(|&x| x == b[0]) {
        // One repeated byte (zeros above all): a memset.
        // SAFETY: the dense range lies in the storage.
        return unsafe { transfer::memset(g, &s, dptr(dst), b[0], n as usize * esz) };
    }
    let f = g.kernel(OP, &kernels::fill(dst.dtype))?;
    let geom = Geom::<1>::new(OP, [&dst.layout])?;
    // SAFETY: fill_b<B>(Geom<1>, i64, bits*, u64).
    unsafe { f.launch(OP, &s, g.grid(n), &(geom, n, dptr(dst), bits)) }
}

/// `dst = op(src)`, same dtype.
pub(crate) fn unary(op: UnaryOp, src: &Operand, dst: &Operand) -> Result<()> {
    let name = op.name();
    let g = gpu_of(name, dst.storage.device())?;
    let n = numel(dst);
    if n == 0 {
        return Ok(());
    }
    if src.dtype != dst.dtype {
        return Err(Error::dtype(name, dst.dtype.name(), src.dtype));
    }
    if src.dtype == DType::Bool {
        // As on the CPU, the only unary ops the op layer allows on bool
        // (floor, round) are the identity.
        return copy_on_device(g, &current(g), src, dst);
    }
    if !kernels::has_unary(op, src.dtype) {
        return Err(Error::dtype(name, "a float dtype", src.dtype));
    }
    let geom = Geom::<2>::new(name, [&dst.layout, &src.layout])?;
    let (po, pa) = (dptr(dst), dptr(src));
    let cfg = g.grid(n);
    match kernels::unary(op, src.dtype) {
        kernels::Unary::Clamp(k) => {
            let (s, f) = prepare(g, name, &k)?;
            let (a, b) = match op {
                UnaryOp::Clamp(a, b) => (a, b),
                _ => (f64::NAN, f64::NAN),
            };
            let lo = scalar_bits(src.dtype, if a.is_nan() { 0.0 } else { a });
            let hi = scalar_bits(src.dtype, if b.is_nan() { 0.0 } else { b });
            let has = i32::from(!a.is_nan()) | (i32::from(!b.is_nan()) << 1);
            // SAFETY: unary_clamp_<dt>(Geom<2>, i64, T*, const T*, u64, u64, i32).
            unsafe { f.launch(name, &s, cfg, &(geom, n, po, pa, lo, hi, has)) }
        }
        kernels::Unary::Plain(k) => {
            let (s, f) = prepare(g, name, &k)?;
            // SAFETY: unary_<op>_<dt>(Geom<2>, i64, T*, const T*).
            unsafe { f.launch(name, &s, cfg, &(geom, n, po, pa)) }
        }
    }
}

/// `dst = op(a, b)`; `a` and `b` share a dtype; `dst` is bool for comparisons.
pub(crate) fn binary(op: BinaryOp, a: &Operand, b: &Operand, dst: &Operand) -> Result<()> {
    let name = op.name();
    let g = gpu_of(name, dst.storage.device())?;
    let n = numel(dst);
    if n == 0 {
        return Ok(());
    }
    check_binary_dtypes(op, a.dtype, b.dtype, dst.dtype)?;
    let (s, f) = prepare(g, name, &kernels::binary(op, a.dtype))?;
    let geom = Geom::<3>::new(name, [&dst.layout, &a.layout, &b.layout])?;
    let args = (geom, n, dptr(dst), dptr(a), dptr(b));
    // SAFETY: binary_<op>_<dt>(Geom<3>, i64, O*, const T*, const T*).
    unsafe { f.launch(name, &s, g.grid(n), &args) }
}

/// `dst = op(a, scalar)`, the scalar converted to `a`'s dtype as the CPU
/// converts it ([`arith_scalar_bits`]).
pub(crate) fn binary_scalar(op: BinaryOp, a: &Operand, scalar: f64, dst: &Operand) -> Result<()> {
    let name = op.name();
    let g = gpu_of(name, dst.storage.device())?;
    let n = numel(dst);
    if n == 0 {
        return Ok(());
    }
    check_binary_dtypes(op, a.dtype, a.dtype, dst.dtype)?;
    let (s, f) = prepare(g, name, &kernels::bscalar(op, a.dtype))?;
    let geom = Geom::<2>::new(name, [&dst.layout, &a.layout])?;
    let args = (
        geom,
        n,
        dptr(dst),
        dptr(a),
        arith_scalar_bits(a.dtype, scalar),
    );
    // SAFETY: bscalar_<op>_<dt>(Geom<2>, i64, O*, const T*, u64).
    unsafe { f.launch(name, &s, g.grid(n), &args) }
}

fn check_binary_dtypes(op: BinaryOp, a: DType, b: DType, out: DType) -> Result<()> {
    if a != b {
        return Err(Error::dtype(op.name(), a.name(), b));
    }
    let want = if op.is_comparison() { DType::Bool } else { a };
    if out != want {
        return Err(Error::dtype(op.name(), want.name(), out));
    }
    Ok(())
}

/// `dst = cond ? a : b`.
pub(crate) fn where_cond(cond: &Operand, a: &Operand, b: &Operand, dst: &Operand) -> Result<()> {
    const OP: &str = "where";
    let g = gpu_of(OP, dst.storage.device())?;
    let n = numel(dst);
    if n == 0 {
        return Ok(());
    }
    if cond.dtype != DType::Bool {
        return Err(Error::dtype(OP, "bool (the condition)", cond.dtype));
    }
    if a.dtype != dst.dtype || b.dtype != dst.dtype {
        return Err(Error::dtype(
            OP,
            dst.dtype.name(),
            if a.dtype != dst.dtype {
                a.dtype
            } else {
                b.dtype
            },
        ));
    }
    let (s, f) = prepare(g, OP, &kernels::where_cond(dst.dtype))?;
    let geom = Geom::<4>::new(OP, [&dst.layout, &cond.layout, &a.layout, &b.layout])?;
    let args = (geom, n, dptr(dst), dptr(cond), dptr(a), dptr(b));
    // SAFETY: where_b<B>(Geom<4>, i64, bits*, const u8*, const bits*, const bits*).
    unsafe { f.launch(OP, &s, g.grid(n), &args) }
}
