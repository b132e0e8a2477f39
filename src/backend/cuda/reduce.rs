//! Reductions on CUDA (`kernels/reduce.cu`).
//!
//! Crate-internal entry points behind the dispatch functions of
//! `crate::backend` (the op layer validates arguments and allocates outputs,
//! as for the CPU backend). Each takes operands with any strides.

use super::device::gpu_of;
use super::kernels;
use super::launch::{
    coalesce, dptr, fill_row, group_for, prepare, sub_layout, too_many_dims, BLOCK, MAX_RANK,
};
use crate::backend::{Operand, ReduceOp, Reduction};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::layout::Layout;
use cudarc::driver::DeviceRepr;

/// `RGeom` of kernels/reduce.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct RGeom {
    out_rank: i32,
    red_rank: i32,
    out_shape: [i64; MAX_RANK],
    out_stride: [i64; MAX_RANK],
    in_stride: [i64; MAX_RANK],
    red_shape: [i64; MAX_RANK],
    red_stride: [i64; MAX_RANK],
}
// SAFETY: plain old data with the C layout of `RGeom`.
unsafe impl DeviceRepr for RGeom {}

/// The reduction geometry of `src` over `dims` (strictly increasing) into
/// `dst`, whose shape is `src`'s without those dimensions, or with them
/// kept as size 1 (`keepdim`). Returns the geometry, the number of outputs
/// and the number of elements folded into each.
fn rgeom(
    name: &'static str,
    src: &Operand,
    dims: &[usize],
    dst: &Operand,
) -> Result<(RGeom, i64, i64)> {
    let rank = src.layout.rank();
    if dims.windows(2).any(|w| w[0] >= w[1]) || dims.last().is_some_and(|&d| d >= rank) {
        return Err(Error::arg(
            name,
            format!("reduced dimensions {dims:?} must be increasing and below the rank {rank}"),
        ));
    }
    let kept: Vec<usize> = (0..rank).filter(|d| !dims.contains(d)).collect();
    let kept_shape: Vec<usize> = kept.iter().map(|&d| src.layout.shape()[d]).collect();
    let keepdim_shape: Vec<usize> = (0..rank)
        .map(|d| {
            if dims.contains(&d) {
                1
            } else {
                src.layout.shape()[d]
            }
        })
        .collect();
    // The output's strides over the kept dimensions.
    let out_kept = if dst.layout.shape() == kept_shape.as_slice() {
        Layout::clone(&dst.layout)
    } else if dst.layout.shape() == keepdim_shape.as_slice() {
        sub_layout(&dst.layout, &kept)
    } else {
        return Err(Error::shape(
            name,
            src.layout.shape(),
            dst.layout.shape(),
            format!("the output of a reduction over {dims:?} must have shape {kept_shape:?} (or {keepdim_shape:?})"),
        ));
    };
    let n_red = crate::layout::numel_of(dims.iter().map(|&d| src.layout.shape()[d]));
    let n_out = crate::layout::numel(&kept_shape);
    let lin = sub_layout(&src.layout, &kept);
    let (oshape, [ostr_in, ostr_out]) = coalesce([&lin, &out_kept]);
    let (rshape, [rstr]) = coalesce([&sub_layout(&src.layout, dims)]);
    if oshape.len() > MAX_RANK {
        return Err(too_many_dims(name, &oshape));
    }
    if rshape.len() > MAX_RANK {
        return Err(too_many_dims(name, &rshape));
    }
    let mut geom = RGeom {
        out_rank: oshape.len() as i32,
        red_rank: rshape.len() as i32,
        out_shape: [1; MAX_RANK],
        out_stride: [0; MAX_RANK],
        in_stride: [0; MAX_RANK],
        red_shape: [1; MAX_RANK],
        red_stride: [0; MAX_RANK],
    };
    fill_row(&mut geom.out_shape, &oshape);
    fill_row(&mut geom.in_stride, &ostr_in);
    fill_row(&mut geom.out_stride, &ostr_out);
    fill_row(&mut geom.red_shape, &rshape);
    fill_row(&mut geom.red_stride, &rstr);
    Ok((geom, n_out as i64, n_red as i64))
}

/// Elements each block of a split reduction folds, at least.
const MIN_SPLIT: i64 = 4096;
/// Bytes of one partial accumulator slot (`TS_PARTIAL` of kernels/reduce.cu).
const PARTIAL: usize = 32;

/// How many blocks share each output of a reduction of `n_out` outputs of
/// `n_red` elements on a device of `sm_count` multiprocessors: 1 (one group
/// per output) unless the outputs alone leave the device mostly idle and
/// each output is long, as for a full reduction; then enough blocks per
/// output for about 4 per multiprocessor in all, each folding at least
/// [`MIN_SPLIT`] elements. (A full f32 sum of 256M elements reads 1.16 TB/s
/// on an H100, PyTorch 2.9 TB/s; 8 per multiprocessor were tried on the
/// guess that loads in flight limit it, read 1.17 TB/s, and were not kept:
/// the limit is elsewhere and is open.)
pub(crate) fn split_count(n_out: i64, n_red: i64, sm_count: u32) -> i64 {
    let target = sm_count.max(1) as i64 * 4;
    if n_out >= target || n_red < 2 * MIN_SPLIT {
        return 1;
    }
    ((target + n_out - 1) / n_out).min(n_red / MIN_SPLIT).max(1)
}

/// What a reduction launch needs beyond the geometry: the group size, the
/// launch configuration, and for a split reduction the workspace (partial
/// slots, then one zeroed u32 counter per output) that must outlive the
/// launch's enqueueing.
struct Plan {
    group: i32,
    cfg: cudarc::driver::LaunchConfig,
    splits: i64,
    work: Option<crate::storage::Storage>,
}

impl Plan {
    fn new(
        g: &super::device::Gpu,
        s: &super::stream::Stream,
        n_out: i64,
        n_red: i64,
    ) -> Result<Plan> {
        let splits = split_count(n_out, n_red, g.sm_count);
        if splits == 1 {
            let group = group_for(n_red);
            return Ok(Plan {
                group,
                cfg: g.groups(n_out, group),
                splits,
                work: None,
            });
        }
        let (n_out_u, splits_u) = (n_out as usize, splits as usize);
        let slots = n_out_u * splits_u * PARTIAL;
        let work = g.storage(slots + n_out_u * 4)?;
        // SAFETY: the counters lie inside `work`, which was just allocated.
        unsafe {
            super::transfer::memset(g, s, work.addr() as u64 + slots as u64, 0, n_out_u * 4)?
        };
        Ok(Plan {
            group: BLOCK as i32,
            cfg: g.blocks((n_out * splits) as u64),
            splits,
            work: Some(work),
        })
    }

    fn work_ptr(&self) -> u64 {
        self.work.as_ref().map_or(0, |w| w.addr() as u64)
    }
}

/// The output dtype of reduction `op` over `dt` (the op layer's rule), or
/// `None` where it is not defined.
pub(crate) fn reduction_out_dtype(op: Reduction, dt: DType) -> Option<DType> {
    match op {
        Reduction::Sum | Reduction::Prod if !dt.is_float() => Some(DType::I64),
        Reduction::Sum | Reduction::Prod | Reduction::Max | Reduction::Min => Some(dt),
        _ if dt.is_float() => Some(dt),
        _ => None,
    }
}

/// Reduces `src` over `dims` (strictly increasing) into `dst`, whose shape is
/// `src`'s without those dimensions or with them kept as 1 (`keepdim`), any
/// strides. `dst`'s dtype must be [`reduction_out_dtype`]: i64 for sums and
/// products of integers and bool, the input dtype otherwise. Reducing an
/// empty extent is an error for max and min; sum gives 0, prod 1, mean and
/// var NaN, logsumexp -inf.
pub(crate) fn reduce(op: Reduction, src: &Operand, dims: &[usize], dst: &Operand) -> Result<()> {
    let name = op.name();
    let g = gpu_of(name, dst.storage.device())?;
    let want = reduction_out_dtype(op, src.dtype)
        .ok_or_else(|| Error::dtype(name, "a float dtype", src.dtype))?;
    if dst.dtype != want {
        return Err(Error::dtype(name, want.name(), dst.dtype));
    }
    let (geom, n_out, n_red) = rgeom(name, src, dims, dst)?;
    if n_out == 0 {
        return Ok(());
    }
    if n_red == 0 && matches!(op, Reduction::Max | Reduction::Min) {
        return Err(Error::arg(
            name,
            format!(
                "cannot reduce over dimensions {dims:?} of size 0 (shape {:?})",
                src.layout.shape()
            ),
        ));
    }
    let (po, pi) = (dptr(dst), dptr(src));
    match kernels::reduction(op, src.dtype) {
        kernels::ReductionKernel::Plain(k) => {
            let (s, f) = prepare(g, name, &k)?;
            let p = Plan::new(g, &s, n_out, n_red)?;
            let args = (geom, n_out, n_red, po, pi, p.group, p.work_ptr(), p.splits);
            // SAFETY: reduce_<op>_<dt>(RGeom, i64, i64, O*, const T*, i32,
            // u8*, i64), with the output dtype checked above; the geometry
            // describes both layouts; a split launch has its workspace,
            // counters zeroed, alive until after the launch is queued (it is
            // freed to this stream's pool, so reused only after the kernel).
            unsafe { f.launch(name, &s, p.cfg, &args) }
        }
        kernels::ReductionKernel::Var(k) => {
            let (s, f) = prepare(g, name, &k)?;
            let (correction, take_sqrt) = match op {
                Reduction::Std(c) => (c as i64, 1i32),
                Reduction::Var(c) => (c as i64, 0i32),
                _ => (0, 0),
            };
            let p = Plan::new(g, &s, n_out, n_red)?;
            let args = (
                geom,
                n_out,
                n_red,
                po,
                pi,
                p.group,
                correction,
                take_sqrt,
                p.work_ptr(),
                p.splits,
            );
            // SAFETY: reduce_var_<dt>(RGeom, i64, i64, T*, const T*, i32, i64,
            // i32, u8*, i64), as above.
            unsafe { f.launch(name, &s, p.cfg, &args) }
        }
    }
}

/// Index of the largest (`max`) or smallest element of `src` along `dim`
/// (for op `name`, in errors) into `indices` (i64), and its value into `values` if given (`src`'s
/// dtype). Both have `src`'s shape without `dim` (or with it as 1). The
/// first NaN wins, then the first extreme value. An empty `dim` is an error.
pub(crate) fn arg_reduce(
    name: &'static str,
    max: bool,
    src: &Operand,
    dim: usize,
    values: Option<&Operand>,
    indices: &Operand,
) -> Result<()> {
    let op = if max {
        ReduceOp::ArgMax
    } else {
        ReduceOp::ArgMin
    };
    let g = gpu_of(name, indices.storage.device())?;
    if indices.dtype != DType::I64 {
        return Err(Error::dtype(name, "int64 (the indices)", indices.dtype));
    }
    let (geom, n_out, n_red) = rgeom(name, src, &[dim], indices)?;
    if n_out == 0 {
        return Ok(());
    }
    if n_red == 0 {
        return Err(Error::arg(
            name,
            format!(
                "cannot reduce over dimension {dim} of size 0 (shape {:?})",
                src.layout.shape()
            ),
        ));
    }
    if let Some(values) = values
        && values.dtype != src.dtype
    {
        return Err(Error::dtype(name, src.dtype.name(), values.dtype));
    }
    // values = src[.., indices, ..]: a gather along `dim` with the indices
    // just computed (all valid), every operand seen with `dim` as size 1.
    let mut shape = src.layout.shape().to_vec();
    shape[dim] = 1;
    let mut walk_strides = src.layout.strides().to_vec();
    walk_strides[dim] = 0;
    let walk = Layout::from_parts(shape.as_slice().into(), walk_strides.as_slice().into(), 0);
    let as_keepdim = |o: &Operand| -> Result<Layout> {
        if o.layout.numel() != crate::layout::numel(&shape) {
            return Err(Error::shape(
                name,
                src.layout.shape(),
                o.layout.shape(),
                format!("the output of a reduction over dimension {dim} has the wrong size"),
            ));
        }
        // `rgeom` accepted `indices`' shape; `values` must match it.
        if o.layout.shape() != indices.layout.shape() {
            return Err(Error::shape(
                name,
                indices.layout.shape(),
                o.layout.shape(),
                "values and indices must have one shape",
            ));
        }
        let keep: Vec<usize> = (0..shape.len()).filter(|&d| d != dim).collect();
        let mut st = vec![0usize; shape.len()];
        if o.layout.rank() == shape.len() {
            st.copy_from_slice(o.layout.strides());
        } else {
            for (k, &d) in keep.iter().enumerate() {
                st[d] = o.layout.strides()[k];
            }
        }
        Ok(Layout::from_parts(
            shape.as_slice().into(),
            st.as_slice().into(),
            0,
        ))
    };
    // Every argument is checked before anything is written.
    let layouts = match values {
        Some(v) => Some((as_keepdim(v)?, as_keepdim(indices)?)),
        None => None,
    };
    let (s, f) = prepare(g, name, &kernels::reduce(op, src.dtype))?;
    let p = Plan::new(g, &s, n_out, n_red)?;
    let args = (
        geom,
        n_out,
        n_red,
        dptr(indices),
        dptr(src),
        p.group,
        p.work_ptr(),
        p.splits,
    );
    // SAFETY: reduce_arg{max,min}_<dt>(RGeom, i64, i64, i64*, const T*, i32,
    // u8*, i64); the geometry describes both layouts; the workspace as in
    // `reduce`.
    unsafe { f.launch(name, &s, p.cfg, &args)? };
    let (Some(values), Some((lv, li))) = (values, layouts) else {
        return Ok(());
    };
    super::index::launch_gather(
        g,
        &s,
        name,
        (dptr(values), &lv),
        (dptr(src), &walk),
        (dptr(indices), &li, DType::I64),
        src.dtype,
        (
            src.layout.shape()[dim] as i64,
            src.layout.strides()[dim] as i64,
        ),
        0,
    )
}
