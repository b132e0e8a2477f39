//! Index and mask kernels on CUDA (`kernels/index.cu`), behind the dispatch
//! functions of `crate::backend::index`: gather (index_select, gather,
//! fancy indexing), scatter (scatter_, scatter_value_, scatter_add_,
//! index_copy_, index_add_, index_fill_) and masked_count / masked_select.
//!
//! The operands arrive as the CPU kernels get them: walk layouts (the
//! indexed operand's strides with the indexed dimension's stride 0, in the
//! walk's shape), the index as given plus its walk, and an [`IndexedDim`].
//! Indices are i64 or i32. Every element of the index is checked first, by a
//! kernel on the same stream; the gather or scatter kernel then writes
//! nothing if a bad index was found, and the call returns
//! [`Error::IndexOutOfRange`] naming the op, the index, the dimension and its
//! size, with the destination untouched. Reading that verdict back waits for
//! the kernels (one 16-byte device-to-host copy per call).

use super::device::Gpu;
use super::elementwise;
use super::kernels;
use super::launch::{dptr, Geom};
use super::stream::{current, Stream};
use super::transfer;
use crate::backend::index::{IndexedDim, MaskCount, ScatterMode, ScatterSrc};
use crate::backend::Operand;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::storage::Storage;
use std::borrow::Cow;

/// The device and its GPU for `op` (all operands on one device).
fn gpu_for(op: &'static str, ops: &[&Operand]) -> Result<&'static Gpu> {
    super::device::gpu_of(op, crate::backend::device_of(op, ops)?)
}

fn check_index_dtype(op: &'static str, dt: DType) -> Result<()> {
    if kernels::INDEX_DTYPES.contains(&dt) {
        Ok(())
    } else {
        Err(Error::dtype(op, "int64 or int32 (an index tensor)", dt))
    }
}

/// Device address of element `layout.offset()` of `storage` for `dt`.
fn addr(storage: &Storage, layout: &Layout, dt: DType) -> u64 {
    (storage.addr() + layout.offset() * dt.size_in_bytes()) as u64
}

/// A zeroed 16-byte device buffer for the out-of-range report.
fn error_buffer(g: &Gpu, s: &Stream) -> Result<Storage> {
    let st = g.storage(16)?;
    // SAFETY: the fresh storage holds 16 bytes.
    unsafe { transfer::memset(g, s, st.addr() as u64, 0, 16)? };
    Ok(st)
}

/// Checks every element of `index` (through its own layout) against `d` on
/// the device, recording the first bad one in `err`.
fn launch_check(g: &Gpu, s: &Stream, index: &Operand, d: &IndexedDim, err: u64) -> Result<()> {
    let n = index.layout.numel() as i64;
    if n == 0 {
        return Ok(());
    }
    let f = g.kernel(d.op, &kernels::index_check(index.dtype))?;
    let geom = Geom::<1>::new(d.op, [&index.layout])?;
    let args = (geom, n, dptr(index), d.size as i64, d.negative as i32, err);
    // SAFETY: index_check_<I>(Geom<1>, i64, const I*, i64, i32, i64*), the
    // index dtype naming the kernel, `err` 16 writable device bytes.
    unsafe { f.launch(d.op, s, g.grid(n), &args) }
}

/// Reads the report back (waiting for the kernels) and turns it into an error.
fn read_report(g: &Gpu, s: &Stream, err: &Storage, d: &IndexedDim) -> Result<()> {
    let mut rep = [0i64; 2];
    // SAFETY: 16 writable host bytes, 16 device bytes.
    unsafe { transfer::device_to_host(g, s, rep.as_mut_ptr() as *mut u8, err.addr() as u64, 16)? };
    if rep[0] != 0 {
        return Err(Error::IndexOutOfRange {
            op: d.op,
            index: rep[1],
            dim: d.dim,
            size: d.size,
        });
    }
    Ok(())
}

/// Launches `gather_<I>_b<B>`: `dst[i] = src[walk(i) + index[i] * stride]`
/// over `dst`'s shape. Each operand is a device address (of its first
/// element) and a layout of that shape; `size_stride` is the indexed
/// dimension's size and stride; `err` is a report buffer of
/// [`launch_check`] (0: none, every index is known to be valid).
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch_gather(
    g: &Gpu,
    s: &Stream,
    op: &'static str,
    dst: (u64, &Layout),
    src: (u64, &Layout),
    index: (u64, &Layout, DType),
    dt: DType,
    size_stride: (i64, i64),
    err: u64,
) -> Result<()> {
    let n = dst.1.numel() as i64;
    if n == 0 {
        return Ok(());
    }
    let f = g.kernel(op, &kernels::gather(index.2, dt))?;
    let geom = Geom::<3>::new(op, [dst.1, src.1, index.1])?;
    let (size, stride) = size_stride;
    let args = (geom, n, dst.0, src.0, index.0, size, stride, err);
    // SAFETY: gather_<I>_b<B>(Geom<3>, i64, bits*, const bits*, const I*, i64,
    // i64, const i64*): the geometry describes the three layouts, which lie
    // in their storages; resolved indices stay in 0..size along `stride`.
    unsafe { f.launch(op, s, g.grid(n), &args) }
}

/// `dst[i] = src[walk(i) + index[i] * stride]` (see `backend::gather`).
pub(crate) fn gather(
    src: &Operand,
    index: &Operand,
    index_walk: &Layout,
    d: &IndexedDim,
    dst: &Operand,
) -> Result<()> {
    let g = gpu_for(d.op, &[src, index, dst])?;
    check_index_dtype(d.op, index.dtype)?;
    if src.dtype != dst.dtype {
        return Err(Error::dtype(d.op, src.dtype.name(), dst.dtype));
    }
    if index.layout.numel() == 0 {
        // No index: nothing to check, and the walk is empty too.
        return Ok(());
    }
    let s = current(g);
    let err = error_buffer(g, &s)?;
    let pe = err.addr() as u64;
    launch_check(g, &s, index, d, pe)?;
    launch_gather(
        g,
        &s,
        d.op,
        (dptr(dst), &dst.layout),
        (dptr(src), &src.layout),
        (
            addr(index.storage, index_walk, index.dtype),
            index_walk,
            index.dtype,
        ),
        dst.dtype,
        (d.size as i64, d.stride as i64),
        pe,
    )?;
    read_report(g, &s, &err, d)
}

/// `dst[walk(i) + index[i] * stride] (= | += | *= | max | min) src[i]`, or a value (see
/// `backend::scatter`). Nothing is written unless every index is valid.
pub(crate) fn scatter(
    dst: &Operand,
    index: &Operand,
    index_walk: &Layout,
    d: &IndexedDim,
    src: ScatterSrc,
    mode: ScatterMode,
) -> Result<()> {
    let g = match src {
        ScatterSrc::Tensor(t) => gpu_for(d.op, &[dst, index, t])?,
        ScatterSrc::Value(_) => gpu_for(d.op, &[dst, index])?,
    };
    check_index_dtype(d.op, index.dtype)?;
    if mode == ScatterMode::Add && dst.dtype == DType::Bool {
        // (max, min and mul on bool are `or` and `and`: the u8 kernels.)
        return Err(Error::dtype(d.op, "a numeric dtype", dst.dtype));
    }
    if index.layout.numel() == 0 {
        return Ok(());
    }
    let s = current(g);
    // A value is a one-element device tensor seen with stride 0 everywhere.
    let value_storage;
    let (ps, src_layout, src_dt) = match src {
        ScatterSrc::Tensor(t) => (dptr(t), Layout::clone(&t.layout), t.dtype),
        ScatterSrc::Value(v) => {
            value_storage = g.storage(dst.dtype.size_in_bytes())?;
            elementwise::fill(
                &Operand {
                    storage: &value_storage,
                    layout: Cow::Owned(Layout::contiguous(&[1])),
                    dtype: dst.dtype,
                },
                v,
            )?;
            let zeros = vec![0usize; dst.layout.rank()];
            let l = Layout::from_parts(dst.layout.shape().into(), zeros.as_slice().into(), 0);
            (value_storage.addr() as u64, l, dst.dtype)
        }
    };
    if src_dt != dst.dtype {
        return Err(Error::dtype(d.op, dst.dtype.name(), src_dt));
    }
    let err = error_buffer(g, &s)?;
    let pe = err.addr() as u64;
    launch_check(g, &s, index, d, pe)?;
    let n = dst.layout.numel() as i64;
    if n > 0 {
        let kernel = match mode {
            ScatterMode::Assign => kernels::scatter(index.dtype, dst.dtype),
            ScatterMode::Add => kernels::scatter_combine("add", index.dtype, dst.dtype),
            ScatterMode::Mul => kernels::scatter_combine("mul", index.dtype, dst.dtype),
            ScatterMode::Max => kernels::scatter_combine("max", index.dtype, dst.dtype),
            ScatterMode::Min => kernels::scatter_combine("min", index.dtype, dst.dtype),
        };
        let f = g.kernel(d.op, &kernel)?;
        let geom = Geom::<3>::new(d.op, [&dst.layout, &src_layout, index_walk])?;
        let (pd, pi) = (dptr(dst), addr(index.storage, index_walk, index.dtype));
        let (size, stride) = (d.size as i64, d.stride as i64);
        let args = (geom, n, pd, ps, pi, size, stride, pe);
        // SAFETY: scatter_<I>_b<B> / scatter_<add|mul|max|min>_<I>_<dt>(Geom<3>, i64, T*,
        // const T*, const I*, i64, i64, const i64*); the geometry describes
        // the walk, the source and the index walk; resolved indices stay in
        // 0..size along `stride` of the destination.
        unsafe { f.launch(d.op, &s, g.grid(n), &args)? };
    }
    read_report(g, &s, &err, d)
}

/// Launches `masked_count` over `mask` (one block per chunk) into a new
/// device buffer of per-chunk counts; returns it with the chunk length.
fn chunk_counts(g: &Gpu, s: &Stream, geom: &Geom<2>, mask: &Operand) -> Result<(Storage, usize)> {
    const OP: &str = "masked_select";
    let n = mask.layout.numel();
    // Chunks: at least 4096 elements, at most ~8 blocks per multiprocessor.
    let chunk = n.div_ceil(g.sm_count as usize * 8).max(4096);
    let blocks = n.div_ceil(chunk);
    let counts = g.storage(blocks * 8)?;
    let (n64, chunk64) = (n as i64, chunk as i64);
    let (pm, pc) = (dptr(mask), counts.addr() as u64);
    let f = g.kernel(OP, &kernels::masked_count())?;
    let args = (*geom, n64, pm, chunk64, pc);
    // SAFETY: masked_count(Geom<2>, i64, const u8*, i64, i64*), one block
    // per chunk, `counts` holding one i64 per block.
    unsafe { f.launch(OP, s, g.blocks(blocks as u64), &args)? };
    Ok((counts, chunk))
}

fn check_mask(mask: &Operand) -> Result<()> {
    if mask.dtype != DType::Bool {
        return Err(Error::dtype("masked_select", "bool (the mask)", mask.dtype));
    }
    Ok(())
}

/// The number of true elements of a bool `mask` (any layout), with the
/// per-chunk counts left on the device for [`masked_select`]. Waits for
/// the count: the one device-to-host read of a selection.
pub(crate) fn masked_count(mask: &Operand) -> Result<MaskCount> {
    let g = gpu_for("masked_select", &[mask])?;
    check_mask(mask)?;
    if mask.layout.numel() == 0 {
        return Ok(MaskCount {
            total: 0,
            device_counts: None,
        });
    }
    let s = current(g);
    let geom = Geom::<2>::new("masked_select", [&mask.layout, &mask.layout])?;
    let (counts, chunk) = chunk_counts(g, &s, &geom, mask)?;
    let blocks = counts.nbytes() / 8;
    let mut host = vec![0i64; blocks];
    // SAFETY: `blocks` i64 on both sides.
    unsafe {
        transfer::device_to_host(
            g,
            &s,
            host.as_mut_ptr() as *mut u8,
            counts.addr() as u64,
            blocks * 8,
        )?
    };
    Ok(MaskCount {
        total: host.iter().sum::<i64>() as usize,
        device_counts: Some((counts, chunk)),
    })
}

/// The elements of `src` where `mask` (same shape) is true, in row-major
/// order, into the contiguous 1-D `dst` of `count.total` elements. Reads
/// the chunk counts [`masked_count`] left on the device (counting again,
/// on the device, only if `count` has none that fit), so nothing here
/// waits for the device. The kernel never writes past `dst`'s length.
pub(crate) fn masked_select(
    src: &Operand,
    mask: &Operand,
    count: &MaskCount,
    dst: &Operand,
) -> Result<()> {
    const OP: &str = "masked_select";
    let g = gpu_for(OP, &[src, mask, dst])?;
    check_mask(mask)?;
    if src.dtype != dst.dtype {
        return Err(Error::dtype(OP, src.dtype.name(), dst.dtype));
    }
    if src.layout.shape() != mask.layout.shape() {
        return Err(Error::shape(
            OP,
            src.layout.shape(),
            mask.layout.shape(),
            "the source and the mask must have one shape (broadcast first)",
        ));
    }
    if dst.layout.rank() != 1 || !dst.layout.is_contiguous() {
        return Err(Error::arg(
            OP,
            format!(
                "the output must be contiguous and 1-D, got shape {:?}",
                dst.layout.shape()
            ),
        ));
    }
    let n = src.layout.numel();
    let cap = dst.layout.numel();
    if cap != count.total {
        return Err(Error::arg(
            OP,
            format!(
                "the output has {cap} elements, the mask {} true ones",
                count.total
            ),
        ));
    }
    if n == 0 || cap == 0 {
        return Ok(());
    }
    let s = current(g);
    let geom = Geom::<2>::new(OP, [&src.layout, &mask.layout])?;
    let recount;
    let (counts, chunk) = match &count.device_counts {
        Some((c, chunk)) if c.device() == g.device() && c.nbytes() / 8 == n.div_ceil(*chunk) => {
            (c, *chunk)
        }
        _ => {
            recount = chunk_counts(g, &s, &geom, mask)?;
            (&recount.0, recount.1)
        }
    };
    let blocks = n.div_ceil(chunk);
    let f = g.kernel(OP, &kernels::masked_select(src.dtype))?;
    let (n64, chunk64) = (n as i64, chunk as i64);
    let pc = counts.addr() as u64;
    let args = (
        geom,
        n64,
        dptr(dst),
        dptr(src),
        dptr(mask),
        chunk64,
        pc,
        cap as i64,
    );
    // SAFETY: masked_select_b<B>(Geom<2>, i64, bits*, const bits*, const u8*,
    // i64, const i64*, i64): `counts` holds one i64 per chunk, written
    // earlier on this stream, and the kernel writes only below `cap`, the
    // length of `dst`.
    unsafe { f.launch(OP, &s, g.blocks(blocks as u64), &args) }
}
