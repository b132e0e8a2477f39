//! Index and mask kernels on CUDA (`kernels/index.cu`): index_select,
//! gather, scatter / scatter_add, index_copy / index_add, index_fill,
//! masked_select.
//!
//! Crate-internal entry points for the op layer. Indices are i64. An index
//! outside its dimension never touches memory: the kernel skips it and
//! records it, and the call returns [`Error::IndexOutOfRange`] naming the
//! op, the index, the dimension and its size. Reading that record back
//! waits for the kernel (one small device-to-host copy per call).

// Wired into the op layer's dispatch at merge; exercised by the unit tests.
#![cfg_attr(not(test), allow(dead_code))]

use super::device::{gpu_of, Gpu};
use super::elementwise::scalar_bits;
use super::kernels::{self, Module};
use super::launch::{dptr, Geom, Launch, MAX_RANK};
use super::stream::{current, Stream};
use super::transfer;
use crate::backend::Operand;
use crate::error::{Error, Result};
use crate::storage::Storage;
use crate::{DType, Tensor};
use cudarc::driver::DeviceRepr;

/// `IGeom` of kernels/index.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct IGeom {
    rank: i32,
    dim: i32,
    shape: [i64; MAX_RANK],
    strides: [[i64; MAX_RANK]; 3],
    indexed_size: i64,
}
// SAFETY: plain old data with the C layout of `IGeom`.
unsafe impl DeviceRepr for IGeom {}

/// How the index operand is laid over the iteration shape.
enum IndexKind {
    /// A 1-D index along `dim` (index_select, index_copy, index_add, index_fill).
    Along,
    /// An index of the iteration shape itself (gather, scatter).
    Full,
}

/// Builds the geometry: iterate over `iter`'s shape (operand 0), index into
/// `indexed` (operand 1) along `dim`.
fn igeom(
    op: &'static str,
    iter: &Operand,
    indexed: &Operand,
    index: &Operand,
    dim: usize,
    kind: IndexKind,
) -> Result<IGeom> {
    let rank = iter.layout.rank();
    if rank > MAX_RANK {
        return Err(Error::arg(
            op,
            format!("CUDA index kernels take at most {MAX_RANK} dimensions, got {rank}"),
        ));
    }
    if dim >= rank || indexed.layout.rank() != rank {
        return Err(Error::DimOutOfRange {
            op,
            dim: dim as isize,
            rank,
        });
    }
    if index.dtype != DType::I64 {
        return Err(Error::dtype(op, "int64 (the index)", index.dtype));
    }
    let mut g = IGeom {
        rank: rank as i32,
        dim: dim as i32,
        shape: [1; MAX_RANK],
        strides: [[0; MAX_RANK]; 3],
        indexed_size: indexed.layout.shape()[dim] as i64,
    };
    for d in 0..rank {
        g.shape[d] = iter.layout.shape()[d] as i64;
        g.strides[0][d] = iter.layout.strides()[d] as i64;
        g.strides[1][d] = indexed.layout.strides()[d] as i64;
    }
    match kind {
        IndexKind::Along => {
            if index.layout.rank() != 1 || index.layout.shape()[0] != iter.layout.shape()[dim] {
                return Err(Error::shape(
                    op,
                    index.layout.shape(),
                    iter.layout.shape(),
                    format!("the index must be 1-D with one entry per element of dimension {dim}"),
                ));
            }
            g.strides[2][dim] = index.layout.strides()[0] as i64;
        }
        IndexKind::Full => {
            if index.layout.shape() != iter.layout.shape() {
                return Err(Error::shape(
                    op,
                    index.layout.shape(),
                    iter.layout.shape(),
                    "the index must have the iterated shape",
                ));
            }
            for d in 0..rank {
                g.strides[2][d] = index.layout.strides()[d] as i64;
            }
        }
    }
    // Dimensions other than `dim` must agree between the two tensors.
    for d in (0..rank).filter(|&d| d != dim) {
        if indexed.layout.shape()[d] < iter.layout.shape()[d] {
            return Err(Error::shape(
                op,
                indexed.layout.shape(),
                iter.layout.shape(),
                format!("dimension {d} of the indexed tensor is smaller than the iterated one"),
            ));
        }
    }
    Ok(g)
}

/// A zeroed 16-byte device buffer for the kernels' out-of-range report.
fn error_buffer(g: &Gpu, s: &Stream) -> Result<Storage> {
    let st = Storage::new(g.device(), 16)?;
    // SAFETY: the fresh storage holds 16 bytes.
    unsafe { transfer::memset(g, s, st.addr() as u64, 0, 16)? };
    Ok(st)
}

/// Reads the report back (waiting for the kernel) and turns it into an error.
fn check_report(
    op: &'static str,
    g: &Gpu,
    s: &Stream,
    err: &Storage,
    dim: usize,
    size: i64,
) -> Result<()> {
    let mut rep = [0i64; 2];
    // SAFETY: 16 writable host bytes, 16 device bytes.
    unsafe { transfer::device_to_host(g, s, rep.as_mut_ptr() as *mut u8, err.addr() as u64, 16)? };
    if rep[0] != 0 {
        return Err(Error::IndexOutOfRange {
            op,
            index: rep[1],
            dim,
            size: size.max(0) as usize,
        });
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn run(
    g: &Gpu,
    op: &'static str,
    kernel: &str,
    geom: &IGeom,
    n: i64,
    first: u64,
    second: u64,
    index: &Operand,
    dim: usize,
) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    let s = current(g);
    let err = error_buffer(g, &s)?;
    let f = g.function(op, Module::Index, kernel)?;
    let (pi, pe) = (dptr(index), err.addr() as u64);
    let mut l = Launch::new(op, &s, &f);
    l.arg(geom)
        .arg(&n)
        .arg(&first)
        .arg(&second)
        .arg(&pi)
        .arg(&pe);
    // SAFETY: gather_b/scatter_b/scatter_add_/index_fill_b(IGeom, i64, A, B,
    // const i64*, i64*) with A, B the kernel's two data arguments, which the
    // callers pass in the kernel's order.
    unsafe { l.run(g.grid(n))? };
    check_report(op, g, &s, &err, dim, geom.indexed_size)
}

fn same_device(op: &'static str, ops: &[&Operand]) -> Result<&'static Gpu> {
    let d = ops[0].storage.device();
    for o in &ops[1..] {
        if o.storage.device() != d {
            return Err(Error::DeviceMismatch {
                op,
                lhs: d,
                rhs: o.storage.device(),
            });
        }
    }
    gpu_of(op, d)
}

fn same_dtype(op: &'static str, a: &Operand, b: &Operand) -> Result<()> {
    if a.dtype != b.dtype {
        return Err(Error::dtype(op, a.dtype.name(), b.dtype));
    }
    Ok(())
}

/// `out = src.index_select(dim, index)`: `out` has `src`'s shape with
/// dimension `dim` of the index's length.
pub(crate) fn index_select(
    src: &Operand,
    dim: usize,
    index: &Operand,
    out: &Operand,
) -> Result<()> {
    const OP: &str = "index_select";
    let g = same_device(OP, &[src, index, out])?;
    same_dtype(OP, src, out)?;
    let geom = igeom(OP, out, src, index, dim, IndexKind::Along)?;
    let n = out.layout.numel() as i64;
    run(
        g,
        OP,
        &kernels::bits_kernel("gather", src.dtype),
        &geom,
        n,
        dptr(out),
        dptr(src),
        index,
        dim,
    )
}

/// `out = src.gather(dim, index)`: `index` and `out` have one shape.
pub(crate) fn gather(src: &Operand, dim: usize, index: &Operand, out: &Operand) -> Result<()> {
    const OP: &str = "gather";
    let g = same_device(OP, &[src, index, out])?;
    same_dtype(OP, src, out)?;
    let geom = igeom(OP, out, src, index, dim, IndexKind::Full)?;
    let n = out.layout.numel() as i64;
    run(
        g,
        OP,
        &kernels::bits_kernel("gather", src.dtype),
        &geom,
        n,
        dptr(out),
        dptr(src),
        index,
        dim,
    )
}

/// `dst.scatter_(dim, index, src)` (or `scatter_add_` if `add`): `index` and
/// `src` have one shape (the op layer narrows a larger `src`). With repeated
/// indices, plain scatter keeps one of the values (unspecified which, as in
/// PyTorch); scatter_add adds them all (atomically, in no fixed order).
pub(crate) fn scatter(
    dst: &Operand,
    dim: usize,
    index: &Operand,
    src: &Operand,
    add: bool,
) -> Result<()> {
    let op = if add { "scatter_add" } else { "scatter" };
    let g = same_device(op, &[dst, index, src])?;
    same_dtype(op, dst, src)?;
    let geom = igeom(op, src, dst, index, dim, IndexKind::Full)?;
    let n = src.layout.numel() as i64;
    run(
        g,
        op,
        &scatter_kernel(op, dst.dtype, add)?,
        &geom,
        n,
        dptr(src),
        dptr(dst),
        index,
        dim,
    )
}

/// `dst.index_copy_(dim, index, src)` (or `index_add_` if `add`): `src` has
/// `dst`'s shape with dimension `dim` of the index's length.
pub(crate) fn index_copy(
    dst: &Operand,
    dim: usize,
    index: &Operand,
    src: &Operand,
    add: bool,
) -> Result<()> {
    let op = if add { "index_add" } else { "index_copy" };
    let g = same_device(op, &[dst, index, src])?;
    same_dtype(op, dst, src)?;
    let geom = igeom(op, src, dst, index, dim, IndexKind::Along)?;
    let n = src.layout.numel() as i64;
    run(
        g,
        op,
        &scatter_kernel(op, dst.dtype, add)?,
        &geom,
        n,
        dptr(src),
        dptr(dst),
        index,
        dim,
    )
}

fn scatter_kernel(op: &'static str, dt: DType, add: bool) -> Result<String> {
    if !add {
        return Ok(kernels::bits_kernel("scatter", dt));
    }
    if dt == DType::Bool {
        return Err(Error::dtype(op, "a numeric dtype", dt));
    }
    Ok(kernels::typed_kernel("scatter_add", dt))
}

/// `dst.index_fill_(dim, index, value)`.
pub(crate) fn index_fill(dst: &Operand, dim: usize, index: &Operand, value: f64) -> Result<()> {
    const OP: &str = "index_fill";
    let g = same_device(OP, &[dst, index])?;
    if index.layout.rank() != 1 {
        return Err(Error::shape(
            OP,
            index.layout.shape(),
            dst.layout.shape(),
            "the index must be 1-D",
        ));
    }
    if dim >= dst.layout.rank() {
        return Err(Error::DimOutOfRange {
            op: OP,
            dim: dim as isize,
            rank: dst.layout.rank(),
        });
    }
    // Iterate over dst's shape with `dim` resized to the index length.
    let mut shape = dst.layout.shape().to_vec();
    shape[dim] = index.layout.shape()[0];
    let iter_layout =
        crate::layout::Layout::from_parts(shape.as_slice().into(), dst.layout.strides().into(), 0);
    let iter = Operand {
        storage: dst.storage,
        layout: iter_layout,
        dtype: dst.dtype,
    };
    let geom = igeom(OP, &iter, dst, index, dim, IndexKind::Along)?;
    let n = iter.layout.numel() as i64;
    let bits = scalar_bits(dst.dtype, value);
    run(
        g,
        OP,
        &kernels::bits_kernel("index_fill", dst.dtype),
        &geom,
        n,
        bits,
        dptr(dst),
        index,
        dim,
    )
}

/// The elements of `src` where `mask` is true, in row-major order, as a new
/// 1-D tensor on the device (`src` and `mask` are broadcast to one shape).
/// Waits for the count of selected elements (it sizes the result).
pub(crate) fn masked_select(src: &Operand, mask: &Operand) -> Result<Tensor> {
    const OP: &str = "masked_select";
    let g = same_device(OP, &[src, mask])?;
    if mask.dtype != DType::Bool {
        return Err(Error::dtype(OP, "bool (the mask)", mask.dtype));
    }
    let s = current(g);
    let n = src.layout.numel();
    if n == 0 {
        return Tensor::alloc(&[0], src.dtype, g.device());
    }
    let geom = Geom::<2>::new(OP, [&src.layout, &mask.layout])?;
    // Chunks: at least 4096 elements, at most ~8 blocks per multiprocessor.
    let chunk = n.div_ceil(g.sm_count as usize * 8).max(4096);
    let blocks = n.div_ceil(chunk);
    let counts = Storage::new(g.device(), blocks * 8)?;
    let (n64, chunk64) = (n as i64, chunk as i64);
    let (pm, pc) = (dptr(mask), counts.addr() as u64);
    let fc = g.function(OP, Module::Index, "masked_count")?;
    let mut l = Launch::new(OP, &s, &fc);
    l.arg(&geom).arg(&n64).arg(&pm).arg(&chunk64).arg(&pc);
    // SAFETY: masked_count(Geom<2>, i64, const u8*, i64, i64*), one block
    // per chunk, `counts` holding one i64 per block.
    unsafe { l.run(g.blocks(blocks as u64))? };
    let mut host = vec![0i64; blocks];
    // SAFETY: `blocks` i64 on both sides.
    unsafe { transfer::device_to_host(g, &s, host.as_mut_ptr() as *mut u8, pc, blocks * 8)? };
    let mut total = 0i64;
    for c in host.iter_mut() {
        let k = *c;
        *c = total;
        total += k;
    }
    let out = Tensor::alloc(&[total as usize], src.dtype, g.device())?;
    if total == 0 {
        return Ok(out);
    }
    // SAFETY: `counts` holds `blocks` i64; `host` is readable for that many.
    unsafe { transfer::host_to_device(g, &s, pc, host.as_ptr() as *const u8, blocks * 8)? };
    let f = g.function(
        OP,
        Module::Index,
        &kernels::bits_kernel("masked_select", src.dtype),
    )?;
    let (po, ps) = (out.storage().addr() as u64, dptr(src));
    let mut l = Launch::new(OP, &s, &f);
    l.arg(&geom)
        .arg(&n64)
        .arg(&po)
        .arg(&ps)
        .arg(&pm)
        .arg(&chunk64)
        .arg(&pc);
    // SAFETY: masked_select_b<B>(Geom<2>, i64, bits*, const bits*, const u8*,
    // i64, const i64*), `out` holding exactly `total` elements.
    unsafe { l.run(g.blocks(blocks as u64))? };
    Ok(out)
}
