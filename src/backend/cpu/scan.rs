//! Scans along the rows of contiguous `[rows, n]` tensors: cumulative sum
//! and product, and the first-order recurrence `y_i = a_i * y_{i-1} + x_i`
//! that `cumprod`'s backward needs. Floats accumulate in f64 (f32 and f64
//! outputs round once; f16 and bf16 round through f32, as the CUDA kernel
//! does); int64 wraps. Rows are split over the
//! kernel pool.

use super::numeric_traits::Flt;
use super::ptr;
use super::strided::SendPtr;
use super::thread_pool::par_for;
use crate::backend::scan::ScanKind;
use crate::backend::Operand;
use crate::dtype::Element;
use crate::with_float_dtype;

/// `out = scan(x)` row by row (`a` only for [`ScanKind::Affine`]); the
/// dispatcher checked that every operand is a contiguous `[rows, n]` view
/// of one dtype, float or int64.
pub(crate) fn scan(
    kind: ScanKind,
    x: &Operand,
    a: Option<&Operand>,
    out: &Operand,
    rows: usize,
    n: usize,
) {
    let a = a.unwrap_or(x);
    with_float_dtype!(x.dtype, T => {
        let (px, pa, po) = (SendPtr(ptr::<T>(x.storage)), SendPtr(ptr::<T>(a.storage)), SendPtr(ptr::<T>(out.storage)));
        let (xo, ao, oo) = (x.layout.offset(), a.layout.offset(), out.layout.offset());
        par_for(rows, |r| {
            // SAFETY: contiguous [rows, n] views of storages of `T` (the
            // dispatcher's checks), locked by it; row `r` of `out` is
            // written by this call only, each element after its inputs are
            // read (so `out` may be `x` itself).
            unsafe {
                let (x, a, o) = (px.get().add(xo + r * n), pa.get().add(ao + r * n), po.get().add(oo + r * n));
                let mut acc: f64 = if kind == ScanKind::Prod { 1.0 } else { 0.0 };
                for i in 0..n {
                    let v = x.add(i).read().to_f64();
                    acc = match kind {
                        ScanKind::Sum => acc + v,
                        ScanKind::Prod => acc * v,
                        ScanKind::Affine => a.add(i).read().to_f64() * acc + v,
                    };
                    o.add(i).write(<T as Flt>::down(num_traits::cast(acc).unwrap_or_else(num_traits::Float::nan)));
                }
            }
        });
    }, _ => {
        // int64 (the op layer converts the other integer dtypes and bool).
        let (px, po) = (SendPtr(ptr::<i64>(x.storage)), SendPtr(ptr::<i64>(out.storage)));
        let (xo, oo) = (x.layout.offset(), out.layout.offset());
        par_for(rows, |r| {
            // SAFETY: as above, for int64 storages.
            unsafe {
                let (x, o) = (px.get().add(xo + r * n), po.get().add(oo + r * n));
                let mut acc: i64 = if kind == ScanKind::Prod { 1 } else { 0 };
                for i in 0..n {
                    let v = x.add(i).read();
                    acc = if kind == ScanKind::Prod { acc.wrapping_mul(v) } else { acc.wrapping_add(v) };
                    o.add(i).write(acc);
                }
            }
        });
    })
}
