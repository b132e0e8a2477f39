//! Matrix multiplication through cuBLAS.
//!
//! * f32 uses `CUBLAS_COMPUTE_32F` (full fp32), or TF32 tensor cores
//!   (`CUBLAS_COMPUTE_32F_FAST_TF32`) after [`set_allow_tf32(true)`](set_allow_tf32);
//!   off by default, like `torch.backends.cuda.matmul.allow_tf32`.
//! * f16 and bf16 multiply in their own type and accumulate in f32.
//! * f64 uses `CUBLAS_COMPUTE_64F`.
//! * Every call is one `cublasGemmStridedBatchedEx`; batches share strides,
//!   and a batch stride of 0 broadcasts an operand.
//!
//! cuBLAS is column-major, tensorscope is row-major. The translation happens
//! in exactly one place, [`plan`]: a row-major `C = A·B` is the column-major
//! `Cᵀ = Bᵀ·Aᵀ`, and a row-major matrix is its transpose seen column-major,
//! so cuBLAS is called with the operands swapped and `m = N`, `n = M`.
//! Operands whose strides cuBLAS cannot express (neither dimension with
//! stride 1) are copied to contiguous temporaries first.
//!
//! [`batched_matmul`] serves the dispatch (`crate::backend::matmul`): any
//! number of batch dimensions, merged where their strides allow into one
//! strided batch per call, the rest walked on the host. Integer dtypes
//! (which cuBLAS lacks) run `matmul_<dt>` of `kernels/reduce.cu`, wrapping
//! like the CPU.

use super::device::gpu_of;
use super::elementwise::copy_on_device;
use super::kernels;
use super::launch::{coalesce, dptr, Geom};
use super::probe::probe;
use super::stream::current;
use crate::backend::Operand;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::storage::Storage;
use cudarc::cublas::{result as blas, sys, CudaBlas};
use std::borrow::Cow;
use std::collections::hash_map::Entry;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};

static ALLOW_TF32: AtomicBool = AtomicBool::new(false);

/// Lets f32 matmuls use TF32 tensor cores (10-bit mantissa products, f32
/// accumulation): faster, less exact. Off by default.
pub fn set_allow_tf32(allow: bool) {
    ALLOW_TF32.store(allow, Ordering::Relaxed);
}

/// Whether f32 matmuls may use TF32 (see [`set_allow_tf32`]).
pub fn allow_tf32() -> bool {
    ALLOW_TF32.load(Ordering::Relaxed)
}

/// A row-major matrix (or batch of matrices) in device memory: element
/// `[b][r][c]` is at `ptr + (b * bs + r * rs + c * cs) * element size`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Mat {
    pub ptr: u64,
    pub rows: usize,
    pub cols: usize,
    pub rs: usize,
    pub cs: usize,
    pub bs: usize,
}

/// How a row-major matrix looks to column-major cuBLAS: `transposed` is
/// `false` when its rows are contiguous (`cs == 1`: cuBLAS sees its
/// transpose, with leading dimension `rs`), `true` when its columns are
/// (`rs == 1`: cuBLAS sees the matrix itself, leading dimension `cs`).
/// `None` when neither holds with a valid leading dimension.
pub(crate) fn storage_order(m: &Mat) -> Option<(bool, usize)> {
    if m.cols <= 1 || m.cs == 1 {
        let ld = if m.rows <= 1 { m.cols.max(1) } else { m.rs };
        if ld >= m.cols.max(1) {
            return Some((false, ld));
        }
    }
    if m.rows <= 1 || m.rs == 1 {
        let ld = if m.cols <= 1 { m.rows.max(1) } else { m.cs };
        if ld >= m.rows.max(1) {
            return Some((true, ld));
        }
    }
    None
}

/// One `cublasGemmStridedBatchedEx` call, in cuBLAS's (column-major) terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GemmPlan {
    pub transa: bool,
    pub transb: bool,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub a: u64,
    pub lda: usize,
    pub stride_a: usize,
    pub b: u64,
    pub ldb: usize,
    pub stride_b: usize,
    pub c: u64,
    pub ldc: usize,
    pub stride_c: usize,
    pub batch: usize,
}

/// THE row-major → column-major swap: the cuBLAS call that computes the
/// row-major `c[i] = a[i] · b[i]` (`a`: M×K, `b`: K×N, `c`: M×N) for
/// `batch` matrices. `None` if an operand's layout cannot be expressed (the
/// caller copies it) or `c` is not row-major with rows apart by at least N.
pub(crate) fn plan(a: &Mat, b: &Mat, c: &Mat, batch: usize) -> Option<GemmPlan> {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    debug_assert_eq!(b.rows, k);
    debug_assert_eq!((c.rows, c.cols), (m, n));
    let (a_t, lda) = storage_order(a)?;
    let (b_t, ldb) = storage_order(b)?;
    let (c_t, ldc) = storage_order(c)?;
    if c_t {
        return None;
    }
    // Column-major Cᵀ (N×M, ld = ldc) = op(B') · op(A'): cuBLAS's "A" is our
    // B and its "B" is our A. A row-major operand is already the transpose
    // cuBLAS needs (no op); a column-major one must be transposed.
    Some(GemmPlan {
        transa: b_t,
        transb: a_t,
        m: n,
        n: m,
        k,
        a: b.ptr,
        lda: ldb,
        stride_a: if batch > 1 { b.bs } else { 0 },
        b: a.ptr,
        ldb: lda,
        stride_b: if batch > 1 { a.bs } else { 0 },
        c: c.ptr,
        ldc,
        stride_c: if batch > 1 { c.bs } else { 0 },
        batch,
    })
}

/// The matrix view of a rank-2 (`[rows, cols]`) or rank-3
/// (`[batch, rows, cols]`) operand.
fn mat_of(o: &Operand) -> Mat {
    let (sh, st) = (o.layout.shape(), o.layout.strides());
    let r = sh.len();
    Mat {
        ptr: dptr(o),
        rows: sh[r - 2],
        cols: sh[r - 1],
        rs: st[r - 2],
        cs: st[r - 1],
        bs: if r == 3 { st[0] } else { 0 },
    }
}

fn float_types(dt: DType) -> Option<(sys::cudaDataType, sys::cublasComputeType_t)> {
    use sys::cublasComputeType_t as C;
    use sys::cudaDataType as D;
    Some(match dt {
        DType::F32 if allow_tf32() => (D::CUDA_R_32F, C::CUBLAS_COMPUTE_32F_FAST_TF32),
        DType::F32 => (D::CUDA_R_32F, C::CUBLAS_COMPUTE_32F),
        DType::F64 => (D::CUDA_R_64F, C::CUBLAS_COMPUTE_64F),
        DType::F16 => (D::CUDA_R_16F, C::CUBLAS_COMPUTE_32F),
        DType::BF16 => (D::CUDA_R_16BF, C::CUBLAS_COMPUTE_32F),
        _ => return None,
    })
}

fn to_i32(op: &'static str, what: &str, v: usize) -> Result<i32> {
    i32::try_from(v)
        .map_err(|_| Error::arg(op, format!("{what} = {v} exceeds cuBLAS's 32-bit limit")))
}

/// `out = a · b` on CUDA, through cuBLAS.
///
/// `a`, `b` and `out` are rank 2 (`[M, K]`, `[K, N]`, `[M, N]`) or rank 3
/// with one leading batch dimension (`[B, M, K]`, `[B, K, N]`, `[B, M, N]`;
/// an input's batch stride may be 0, broadcasting it). All three have one
/// float dtype and live on one device. Any strides are accepted: operands
/// cuBLAS cannot read as they are are copied to contiguous temporaries, and
/// an output it cannot write is computed in a temporary and copied. Integer
/// dtypes are an error (cuBLAS has no integer GEMM). The op layer flattens
/// further batch dimensions and broadcasts batches before calling this.
pub(crate) fn matmul(a: &Operand, b: &Operand, out: &Operand) -> Result<()> {
    gemm(a, b, out, false)
}

/// [`matmul`], adding the product to what `out` holds when `accumulate`
/// (cuBLAS's beta = 1) instead of overwriting it.
fn gemm(a: &Operand, b: &Operand, out: &Operand, accumulate: bool) -> Result<()> {
    const OP: &str = "matmul";
    let (sa, sb, so) = (a.layout.shape(), b.layout.shape(), out.layout.shape());
    let r = so.len();
    if !(r == 2 || r == 3) || sa.len() != r || sb.len() != r {
        return Err(Error::arg(
            OP,
            format!("CUDA matmul takes rank-2 or rank-3 operands of one rank, got {sa:?}, {sb:?} -> {so:?}"),
        ));
    }
    let (m, k, n) = (sa[r - 2], sa[r - 1], sb[r - 1]);
    let batch = if r == 3 { so[0] } else { 1 };
    if sb[r - 2] != k
        || so[r - 2] != m
        || so[r - 1] != n
        || (r == 3 && (sa[0] != batch || sb[0] != batch))
    {
        return Err(Error::shape(
            OP,
            sa,
            sb,
            format!("cannot multiply into an output of shape {so:?}"),
        ));
    }
    if a.dtype != b.dtype || a.dtype != out.dtype {
        return Err(Error::dtype(
            OP,
            a.dtype.name(),
            if b.dtype != a.dtype {
                b.dtype
            } else {
                out.dtype
            },
        ));
    }
    let (dtype, compute) =
        float_types(a.dtype).ok_or_else(|| Error::dtype(OP, "a float dtype", a.dtype))?;
    let device = out.storage.device();
    for o in [a, b] {
        if o.storage.device() != device {
            return Err(Error::DeviceMismatch {
                op: OP,
                lhs: o.storage.device(),
                rhs: device,
            });
        }
    }
    let g = gpu_of(OP, device)?;
    if m == 0 || n == 0 || batch == 0 {
        return Ok(());
    }
    if k == 0 {
        // An empty sum: nothing to add, or zeros.
        return if accumulate {
            Ok(())
        } else {
            super::elementwise::fill(out, 0.0)
        };
    }
    if !probe().cublas {
        return Err(Error::Backend {
            op: OP,
            msg: "the cuBLAS library (libcublas.so) was not found".into(),
        });
    }
    let s = current(g);
    // Inputs cuBLAS cannot read as they are become contiguous copies.
    let readable = |o: &Operand| -> Result<(Option<Storage>, Mat)> {
        let mt = mat_of(o);
        if storage_order(&mt).is_some() {
            return Ok((None, mt));
        }
        let layout = Layout::contiguous(o.layout.shape());
        let st = super::device::new_storage(device, layout.numel() * o.dtype.size_in_bytes())?;
        let tmp = Operand {
            storage: &st,
            layout: Cow::Owned(layout),
            dtype: o.dtype,
        };
        copy_on_device(g, &s, o, &tmp)?;
        let mt = mat_of(&tmp);
        Ok((Some(st), mt))
    };
    let (_ka, am) = readable(a)?;
    let (_kb, bm) = readable(b)?;
    let cm = mat_of(out);
    let direct = plan(&am, &bm, &cm, batch).filter(|p| batch == 1 || p.stride_c >= m * p.ldc);
    let (tmp_out, p) = match direct {
        Some(p) => (None, p),
        None => {
            let layout = Layout::contiguous(so);
            let st =
                super::device::new_storage(device, layout.numel() * out.dtype.size_in_bytes())?;
            let tmp = Operand {
                storage: &st,
                layout: Cow::Owned(layout.clone()),
                dtype: out.dtype,
            };
            // Cannot fail (both inputs passed `storage_order`, the output is
            // contiguous), but an Err is cheaper to live with than a panic.
            let p = plan(&am, &bm, &mat_of(&tmp), batch).ok_or_else(|| Error::Backend {
                op: OP,
                msg: format!("no cuBLAS layout for {sa:?} x {sb:?} -> {so:?}"),
            })?;
            if accumulate {
                // The temporary starts as `out`, which the product adds to.
                copy_on_device(g, &s, out, &tmp)?;
            }
            (Some((st, layout)), p)
        }
    };
    let (mi, ni, ki) = (
        to_i32(OP, "m", p.m)?,
        to_i32(OP, "n", p.n)?,
        to_i32(OP, "k", p.k)?,
    );
    let (lda, ldb, ldc) = (
        to_i32(OP, "lda", p.lda)?,
        to_i32(OP, "ldb", p.ldb)?,
        to_i32(OP, "ldc", p.ldc)?,
    );
    let bt = to_i32(OP, "batch", p.batch)?;
    let op_of = |t: bool| {
        if t {
            sys::cublasOperation_t::CUBLAS_OP_T
        } else {
            sys::cublasOperation_t::CUBLAS_OP_N
        }
    };
    let (one32, one64) = (1.0f32, 1.0f64);
    let (beta32, beta64) = if accumulate {
        (1.0f32, 1.0f64)
    } else {
        (0.0f32, 0.0f64)
    };
    let (alpha, beta): (*const c_void, *const c_void) = if a.dtype == DType::F64 {
        (&one64 as *const f64 as _, &beta64 as *const f64 as _)
    } else {
        (&one32 as *const f32 as _, &beta32 as *const f32 as _)
    };
    g.bind(OP)?;
    {
        let mut handles = g.blas.lock().unwrap_or_else(|e| e.into_inner());
        let h = match handles.entry(s.id()) {
            Entry::Occupied(o) => o.into_mut(),
            Entry::Vacant(v) => {
                v.insert(CudaBlas::new(s.cu().clone()).map_err(|e| Error::Backend {
                    op: OP,
                    msg: format!("creating a cuBLAS handle: {e}"),
                })?)
            }
        };
        // SAFETY: the plan describes matrices inside live device storages of
        // `dtype` (checked layouts, or fresh contiguous temporaries), alpha
        // and beta point to host values of the compute type's scalar type,
        // and the handle is bound to stream `s` of this device.
        unsafe {
            blas::gemm_strided_batched_ex(
                *h.handle(),
                op_of(p.transa),
                op_of(p.transb),
                mi,
                ni,
                ki,
                alpha,
                p.a as *const c_void,
                dtype,
                lda,
                p.stride_a as i64,
                p.b as *const c_void,
                dtype,
                ldb,
                p.stride_b as i64,
                beta,
                p.c as *mut c_void,
                dtype,
                ldc,
                p.stride_c as i64,
                bt,
                compute,
                sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| Error::Backend {
            op: OP,
            msg: format!("cuBLAS: {e}"),
        })?;
    }
    if let Some((st, layout)) = tmp_out {
        copy_on_device(
            g,
            &s,
            &Operand {
                storage: &st,
                layout: Cow::Owned(layout),
                dtype: out.dtype,
            },
            out,
        )?;
    }
    Ok(())
}

/// Destroys the cuBLAS handle of stream `id` on device `ordinal`, if it has
/// one (called when the stream's last handle is dropped).
pub(crate) fn release_handle(ordinal: usize, id: u64) {
    let Ok(g) = super::device::gpu("Stream::drop", ordinal) else {
        return;
    };
    let h = g.blas.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
    if let Some(h) = h {
        // cublasDestroy runs on the current context: it must be this one.
        if g.bind("Stream::drop").is_ok() {
            drop(h);
        } else {
            std::mem::forget(h); // a broken context: leak rather than fail
        }
    }
}

/// Batched `dst = a @ b` with the dispatch's layouts: rank >= 2 with one
/// batch shape (`[.., m, k]`, `[.., k, n]`, `[.., m, n]`; a broadcast batch
/// dimension has stride 0), any strides, one dtype.
pub(crate) fn batched_matmul(a: &Operand, b: &Operand, dst: &Operand) -> Result<()> {
    const OP: &str = "matmul";
    let r = dst.layout.rank();
    let (sa, sb, so) = (a.layout.shape(), b.layout.shape(), dst.layout.shape());
    if r < 2
        || sa.len() != r
        || sb.len() != r
        || sa[..r - 2] != so[..r - 2]
        || sb[..r - 2] != so[..r - 2]
        || sa[r - 1] != sb[r - 2]
        || sa[r - 2] != so[r - 2]
        || sb[r - 1] != so[r - 1]
    {
        return Err(Error::shape(
            OP,
            sa,
            sb,
            format!("cannot multiply into an output of shape {so:?} (rank >= 2, one batch shape)"),
        ));
    }
    if a.dtype != b.dtype || a.dtype != dst.dtype {
        let other = if b.dtype != a.dtype {
            b.dtype
        } else {
            dst.dtype
        };
        return Err(Error::dtype(OP, a.dtype.name(), other));
    }
    if dst.dtype == DType::Bool {
        return Err(Error::dtype(OP, "a numeric dtype", dst.dtype));
    }
    if !dst.dtype.is_float() {
        return int_matmul(a, b, dst);
    }
    let batch_of =
        |l: &Layout| Layout::from_parts(l.shape()[..r - 2].into(), l.strides()[..r - 2].into(), 0);
    let (bshape, [bd, ba, bb]) = coalesce([
        &batch_of(&dst.layout),
        &batch_of(&a.layout),
        &batch_of(&b.layout),
    ]);
    if bshape.contains(&0) {
        return Ok(());
    }
    // The innermost merged batch dimension goes to cuBLAS as one strided
    // batch; the others are walked here.
    let (nb, sd, sa_, sb_) = match bshape.last() {
        Some(&n) => (
            n,
            *bd.last().unwrap(),
            *ba.last().unwrap(),
            *bb.last().unwrap(),
        ),
        None => (1, 0, 0, 0),
    };
    let outer = &bshape[..bshape.len().saturating_sub(1)];
    let outer_n = crate::layout::numel(outer);
    let mat3 = |o: &Operand<'_>, bs: usize, extra: usize| -> Layout {
        let (sh, st) = (o.layout.shape(), o.layout.strides());
        Layout::from_parts(
            [nb, sh[r - 2], sh[r - 1]].as_slice().into(),
            [bs, st[r - 2], st[r - 1]].as_slice().into(),
            o.layout.offset() + extra,
        )
    };
    for i in 0..outer_n {
        // Offsets of outer batch index i (row-major over `outer`).
        let (mut rem, mut od, mut oa, mut ob) = (i, 0usize, 0usize, 0usize);
        for d in (0..outer.len()).rev() {
            let c = rem % outer[d];
            rem /= outer[d];
            od += c * bd[d];
            oa += c * ba[d];
            ob += c * bb[d];
        }
        let a3 = Operand {
            storage: a.storage,
            layout: Cow::Owned(mat3(a, sa_, oa)),
            dtype: a.dtype,
        };
        let b3 = Operand {
            storage: b.storage,
            layout: Cow::Owned(mat3(b, sb_, ob)),
            dtype: b.dtype,
        };
        let d3 = Operand {
            storage: dst.storage,
            layout: Cow::Owned(mat3(dst, sd, od)),
            dtype: dst.dtype,
        };
        matmul(&a3, &b3, &d3)?;
    }
    Ok(())
}

/// `dst = x @ wt + bias` (`x: [m, k]`, `wt: [k, n]`, any strides, `bias`
/// broadcast to `[m, n]`, `dst` a fresh `[m, n]`): Linear's forward, like
/// PyTorch's addmm. Floats copy the bias into `dst` and let cuBLAS add the
/// product to it (beta = 1): one GEMM and no `[m, n]` temporary; integers
/// multiply with the integer kernel and add the bias in place.
pub(crate) fn linear(
    x: &Operand,
    wt: &Operand,
    bias: Option<&Operand>,
    dst: &Operand,
) -> Result<()> {
    let Some(bias) = bias else {
        return batched_matmul(x, wt, dst);
    };
    if bias.layout.shape() != dst.layout.shape() || bias.dtype != dst.dtype {
        return Err(Error::shape(
            "linear",
            bias.layout.shape(),
            dst.layout.shape(),
            format!(
                "the bias must be broadcast to the output and have its dtype ({} vs {})",
                bias.dtype, dst.dtype
            ),
        ));
    }
    if !dst.dtype.is_float() {
        batched_matmul(x, wt, dst)?;
        return super::elementwise::binary(crate::backend::BinaryOp::Add, dst, bias, dst);
    }
    if x.layout.rank() != 2 || wt.layout.rank() != 2 || dst.layout.rank() != 2 {
        return Err(Error::arg(
            "linear",
            format!(
                "takes [m, k] x [k, n] -> [m, n], got {:?} x {:?} -> {:?}",
                x.layout.shape(),
                wt.layout.shape(),
                dst.layout.shape()
            ),
        ));
    }
    super::elementwise::copy(bias, dst)?;
    gemm(x, wt, dst, true)
}

/// Integer matmul (`matmul_<dt>` of kernels/reduce.cu): one thread per
/// output element, accumulating in 64 bits (wrapping, so the result is the
/// CPU's wrapping product in the dtype).
fn int_matmul(a: &Operand, b: &Operand, dst: &Operand) -> Result<()> {
    const OP: &str = "matmul";
    let g = gpu_of(OP, dst.storage.device())?;
    let r = dst.layout.rank();
    let n = dst.layout.numel() as i64;
    if n == 0 {
        return Ok(());
    }
    let k = a.layout.shape()[r - 1] as i64;
    let (ast, bst) = (a.layout.strides(), b.layout.strides());
    // a's rows: its strides with 0 along the output's columns; b's columns:
    // its strides with 0 along the output's rows.
    let mut a_rows = ast.to_vec();
    a_rows[r - 1] = 0;
    let mut b_cols = bst.to_vec();
    b_cols[r - 2] = 0;
    let shape = dst.layout.shape();
    let la = Layout::from_parts(shape.into(), a_rows.as_slice().into(), 0);
    let lb = Layout::from_parts(shape.into(), b_cols.as_slice().into(), 0);
    let geom = Geom::<3>::new(OP, [&dst.layout, &la, &lb])?;
    let f = g.kernel(OP, &kernels::matmul(dst.dtype))?;
    let s = current(g);
    let (ak, bk) = (ast[r - 1] as i64, bst[r - 2] as i64);
    let args = (geom, n, dptr(dst), dptr(a), dptr(b), k, ak, bk);
    // SAFETY: matmul_<dt>(Geom<3>, i64, T*, const T*, const T*, i64, i64,
    // i64): the geometry walks the output and the row/column starts of a and
    // b, and k steps of ak / bk stay inside a's rows and b's columns.
    unsafe { f.launch(OP, &s, g.grid(n), &args) }
}
