//! Layouts: shape, strides (in elements) and offset into a storage.
//!
//! Every view operation is pure arithmetic on a [`Layout`]; nothing here touches
//! memory. The rules follow PyTorch's storage-stride model: a view shares its
//! base's storage and differs only in layout.

use crate::error::{bail, Error, Result};
use smallvec::SmallVec;

/// Inline storage for shapes and strides; no heap allocation up to rank 6.
pub type Dims = SmallVec<[usize; 6]>;

/// Shape, strides and storage offset of a tensor, all in elements.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Layout {
    shape: Dims,
    strides: Dims,
    offset: usize,
}

// By hand: every op clones layouts, and both the derived `clone` (a push per
// element) and `SmallVec::from_slice` (a `memcpy` call) cost more than
// filling the inline buffer directly.
impl Clone for Layout {
    #[inline]
    fn clone(&self) -> Self {
        Layout {
            shape: dims_from(&self.shape),
            strides: dims_from(&self.strides),
            offset: self.offset,
        }
    }
}

/// Inline capacity of [`Dims`].
const INLINE: usize = 6;

/// `s` as [`Dims`]: up to [`INLINE`] elements, a fixed-size copy with no loop
/// and no call.
#[inline]
pub(crate) fn dims_from(s: &[usize]) -> Dims {
    if s.len() > INLINE {
        return Dims::from_slice(s);
    }
    let mut buf = [0usize; INLINE];
    // One fixed-size copy per length: a few moves, no loop, no call.
    match s.len() {
        0 => {}
        1 => buf[..1].copy_from_slice(s),
        2 => buf[..2].copy_from_slice(s),
        3 => buf[..3].copy_from_slice(s),
        4 => buf[..4].copy_from_slice(s),
        5 => buf[..5].copy_from_slice(s),
        _ => buf.copy_from_slice(s),
    }
    Dims::from_buf_and_len(buf, s.len())
}

/// `a == b` for short shapes, without the `memcmp` call of slice equality.
#[inline]
pub(crate) fn dims_eq(a: &[usize], b: &[usize]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// Row-major (C-order) strides for `shape`.
#[inline]
pub fn contiguous_strides(shape: &[usize]) -> Dims {
    if shape.len() > INLINE {
        let mut strides: Dims = smallvec::smallvec![0; shape.len()];
        let mut acc = 1usize;
        for i in (0..shape.len()).rev() {
            strides[i] = acc;
            acc = acc.saturating_mul(shape[i].max(1));
        }
        return strides;
    }
    let mut buf = [0usize; INLINE];
    let mut acc = 1usize;
    for i in (0..shape.len()).rev() {
        buf[i] = acc;
        acc = acc.saturating_mul(shape[i].max(1));
    }
    Dims::from_buf_and_len(buf, shape.len())
}

/// Normalizes a possibly negative dimension index (`-1` is the last).
pub fn normalize_dim(op: &'static str, dim: isize, rank: usize) -> Result<usize> {
    let r = rank as isize;
    let d = if dim < 0 { dim + r } else { dim };
    if d < 0 || d >= r {
        bail!(Error::DimOutOfRange { op, dim, rank });
    }
    Ok(d as usize)
}

/// Like [`normalize_dim`] but allows `rank` itself (for `unsqueeze`, `stack`).
pub fn normalize_dim_inclusive(op: &'static str, dim: isize, rank: usize) -> Result<usize> {
    let r = rank as isize + 1;
    let d = if dim < 0 { dim + r } else { dim };
    if d < 0 || d >= r {
        bail!(Error::DimOutOfRange { op, dim, rank });
    }
    Ok(d as usize)
}

/// Product of a shape (1 for rank 0). Every tensor's shape passed
/// `checked_numel`, so for it and any part of it this product cannot
/// overflow; it saturates (never wraps) for a shape no tensor has.
#[inline]
pub fn numel(shape: &[usize]) -> usize {
    numel_of(shape.iter().copied())
}

/// [`numel`] of dimensions picked from a shape (`dims.iter().map(|&d|
/// shape[d])`): the one product of sizes, so no caller multiplies dims by
/// hand.
#[inline]
pub(crate) fn numel_of(dims: impl IntoIterator<Item = usize>) -> usize {
    dims.into_iter().fold(1usize, |a, d| a.saturating_mul(d))
}

/// The shape, stride and offset arithmetic of the crate, overflow-checked:
/// every overflow is an `Err` naming `op` (the op the user called), never
/// a wrapped value (release) or a panic (debug).
///
/// The number of elements of `shape`, or an `Err` when the shape is too
/// large for any tensor: the product of its dimensions with each 0 counted
/// as 1 must fit in `isize`, as PyTorch's numel check ("numel: integer
/// multiplication overflow") requires of `[2^33, 2^33, 2, 0]` too. That
/// bound covers every partial product of the dims and every contiguous
/// stride, so arithmetic on a tensor's shape cannot overflow elsewhere.
pub(crate) fn checked_numel(op: &'static str, shape: &[usize]) -> Result<usize> {
    let mut nonzero = 1usize;
    for &d in shape {
        nonzero = nonzero
            .checked_mul(d.max(1))
            .filter(|&p| p <= isize::MAX as usize)
            .ok_or_else(|| {
                Error::arg(
                    op,
                    format!(
                        "shape {shape:?} is too large: the product of its dimensions (a 0 counted as 1) overflows isize"
                    ),
                )
            })?;
    }
    Ok(if shape.contains(&0) { 0 } else { nonzero })
}

/// `a * b` for shape arithmetic (a stride times a step, a count times an
/// element size), or an `Err` naming `op` and what overflowed.
pub(crate) fn checked_mul(op: &'static str, a: usize, b: usize, what: &str) -> Result<usize> {
    a.checked_mul(b)
        .ok_or_else(|| Error::arg(op, format!("{what} ({a} * {b}) overflows usize")))
}

/// The storage elements a layout reaches: `offset + sum((shape - 1) *
/// stride) + 1` (just `offset` when empty), or an `Err` naming `op` when it
/// overflows.
pub(crate) fn checked_extent(
    op: &'static str,
    shape: &[usize],
    strides: &[usize],
    offset: usize,
) -> Result<usize> {
    if shape.contains(&0) {
        return Ok(offset);
    }
    shape
        .iter()
        .zip(strides)
        .try_fold(offset, |acc, (&d, &st)| {
            (d - 1).checked_mul(st).and_then(|x| acc.checked_add(x))
        })
        .and_then(|last| last.checked_add(1))
        .ok_or_else(|| {
            Error::arg(
                op,
                format!(
                    "shape {shape:?}, strides {strides:?} and offset {offset} reach past usize::MAX"
                ),
            )
        })
}

/// Fails unless `other` broadcasts to exactly `target` (what an in-place
/// write, its source or its mask must do): a broadcasting error, or a shape
/// error naming `op`, both shapes and `note`.
pub(crate) fn check_broadcasts_to(
    op: &'static str,
    target: &[usize],
    other: &[usize],
    note: impl Into<String>,
) -> Result<Dims> {
    let shape = broadcast_shapes(op, target, other)?;
    if shape.as_slice() != target {
        bail!(Error::shape(op, target, other, note));
    }
    Ok(shape)
}

/// NumPy/PyTorch broadcasting of two shapes.
pub fn broadcast_shapes(op: &'static str, a: &[usize], b: &[usize]) -> Result<Dims> {
    if dims_eq(a, b) {
        return Ok(dims_from(a)); // the common case
    }
    let rank = a.len().max(b.len());
    let mut out: Dims = smallvec::smallvec![0; rank];
    for i in 0..rank {
        let da = if i + a.len() >= rank {
            a[i + a.len() - rank]
        } else {
            1
        };
        let db = if i + b.len() >= rank {
            b[i + b.len() - rank]
        } else {
            1
        };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            bail!(Error::shape(
                op,
                a,
                b,
                format!("dimension {i} of the broadcast shape: {da} vs {db}")
            ));
        };
    }
    checked_numel(op, &out)?;
    Ok(out)
}

/// Resolves a shape that may hold one `-1` against an element count.
pub fn resolve_shape(op: &'static str, from: &[usize], to: &[isize]) -> Result<Dims> {
    let n = numel(from);
    let mut infer = None;
    let mut known = 1usize;
    for (i, &d) in to.iter().enumerate() {
        if d == -1 {
            if infer.replace(i).is_some() {
                bail!(Error::arg(
                    op,
                    format!("only one dimension can be -1, got {to:?}")
                ));
            }
        } else if d < 0 {
            bail!(Error::arg(
                op,
                format!("invalid shape dimension {d} in {to:?}")
            ));
        } else {
            known = known.saturating_mul(d as usize);
        }
    }
    let mut out: Dims = to.iter().map(|&d| d.max(0) as usize).collect();
    if let Some(i) = infer {
        if known == 0 || !n.is_multiple_of(known) {
            bail!(Error::ElementCount {
                op,
                from: from.to_vec(),
                from_numel: n,
                to: to.to_vec()
            });
        }
        out[i] = n / known;
    } else if known != n {
        bail!(Error::ElementCount {
            op,
            from: from.to_vec(),
            from_numel: n,
            to: to.to_vec()
        });
    }
    checked_numel(op, &out)?;
    Ok(out)
}

impl Layout {
    /// A contiguous row-major layout at offset 0.
    #[inline]
    pub fn contiguous(shape: &[usize]) -> Layout {
        Layout {
            shape: dims_from(shape),
            strides: contiguous_strides(shape),
            offset: 0,
        }
    }

    /// A layout from its parts. The caller guarantees that it fits its storage.
    pub(crate) fn from_parts(shape: Dims, strides: Dims, offset: usize) -> Layout {
        debug_assert_eq!(shape.len(), strides.len());
        Layout {
            shape,
            strides,
            offset,
        }
    }

    /// The shape.
    #[inline]
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    /// The strides, in elements.
    #[inline]
    pub fn strides(&self) -> &[usize] {
        &self.strides
    }
    /// The offset of element `[0, 0, ...]` in the storage, in elements.
    #[inline]
    pub fn offset(&self) -> usize {
        self.offset
    }
    /// Number of dimensions.
    #[inline]
    pub fn rank(&self) -> usize {
        self.shape.len()
    }
    /// Number of elements.
    #[inline]
    pub fn numel(&self) -> usize {
        numel(&self.shape)
    }

    /// `true` when the elements are laid out row-major with no gaps (dimensions
    /// of size 1 may have any stride, as in PyTorch).
    #[inline]
    pub fn is_contiguous(&self) -> bool {
        let mut expected = 1usize;
        for i in (0..self.shape.len()).rev() {
            let d = self.shape[i];
            if d == 0 {
                return true;
            }
            if d != 1 {
                if self.strides[i] != expected {
                    return false;
                }
                // Saturating, as `contiguous_strides` (an empty shape's
                // other dims may be huge).
                expected = expected.saturating_mul(d);
            }
        }
        true
    }

    /// One past the largest storage index this layout reaches (0 when empty).
    pub fn storage_span(&self) -> usize {
        // Every layout's extent was checked when it was made; saturate
        // rather than wrap all the same.
        checked_extent("storage_span", &self.shape, &self.strides, self.offset)
            .unwrap_or(usize::MAX)
    }

    /// `true` when two different indices may reach the same storage element
    /// (an expanded dimension). Writes through such a layout are refused.
    pub fn has_internal_overlap(&self) -> bool {
        self.shape
            .iter()
            .zip(&self.strides)
            .any(|(&d, &s)| d > 1 && s == 0)
    }

    /// Storage index of a multi-index.
    pub fn index_of(&self, idx: &[usize]) -> usize {
        self.offset
            + idx
                .iter()
                .zip(&self.strides)
                .map(|(i, s)| i * s)
                .sum::<usize>()
    }

    /// Swaps two dimensions.
    pub fn transpose(&self, d0: isize, d1: isize) -> Result<Layout> {
        let a = normalize_dim("transpose", d0, self.rank())?;
        let b = normalize_dim("transpose", d1, self.rank())?;
        let mut l = self.clone();
        l.shape.swap(a, b);
        l.strides.swap(a, b);
        Ok(l)
    }

    /// Reorders dimensions.
    pub fn permute(&self, dims: &[isize]) -> Result<Layout> {
        if dims.len() != self.rank() {
            bail!(Error::arg(
                "permute",
                format!(
                    "{} dims given for a tensor of rank {} (shape {:?})",
                    dims.len(),
                    self.rank(),
                    self.shape
                )
            ));
        }
        let mut seen: SmallVec<[bool; 8]> = smallvec::smallvec![false; self.rank()];
        let mut l = self.clone();
        for (i, &d) in dims.iter().enumerate() {
            let d = normalize_dim("permute", d, self.rank())?;
            if seen[d] {
                bail!(Error::arg(
                    "permute",
                    format!("dimension {d} repeated in {dims:?}")
                ));
            }
            seen[d] = true;
            l.shape[i] = self.shape[d];
            l.strides[i] = self.strides[d];
        }
        Ok(l)
    }

    /// Elements `start .. start + len` of dimension `dim`.
    pub fn narrow(&self, dim: isize, start: usize, len: usize) -> Result<Layout> {
        self.slice("narrow", dim, start, start.saturating_add(len), 1)
    }

    /// Elements `start, start + step, ...` below `end` of dimension `dim` (Python's `t[start:end:step]`).
    /// `start` and `end` are clamped to the dimension's size, as in Python
    /// (`t[7:]` of 5 elements is empty); for `narrow`, `start > size` or
    /// `end > size` is an error, as PyTorch's `narrow`.
    pub fn slice(
        &self,
        op: &'static str,
        dim: isize,
        start: usize,
        end: usize,
        step: usize,
    ) -> Result<Layout> {
        let d = normalize_dim(op, dim, self.rank())?;
        if step == 0 {
            bail!(Error::arg(op, "slice step must be positive, got 0"));
        }
        let size = self.shape[d];
        let start = if op == "narrow" {
            start
        } else {
            start.min(size)
        };
        if start > size || (op == "narrow" && end > size) {
            bail!(Error::IndexOutOfRange {
                op,
                index: i64::try_from(end.max(start)).unwrap_or(i64::MAX),
                dim: d,
                size
            });
        }
        let end = end.min(size).max(start);
        let len = (end - start).div_ceil(step);
        let mut l = self.clone();
        if len > 0 {
            // Inside the extent of `self`, which fits its storage.
            l.offset += start * self.strides[d];
        }
        l.shape[d] = len;
        // The stride of a dimension of size 0 or 1 is never walked: a step
        // too large to multiply keeps the old one there (PyTorch multiplies
        // in i64 regardless, which overflows).
        l.strides[d] = match self.strides[d].checked_mul(step) {
            Some(s) => s,
            None if len <= 1 => self.strides[d],
            None => checked_mul(op, self.strides[d], step, "the stride times the step")?,
        };
        Ok(l)
    }

    /// Removes dimension `dim` by fixing it at `index`.
    pub fn select(&self, dim: isize, index: isize) -> Result<Layout> {
        let d = normalize_dim("select", dim, self.rank())?;
        let size = self.shape[d] as isize;
        let i = if index < 0 { index + size } else { index };
        if i < 0 || i >= size {
            bail!(Error::IndexOutOfRange {
                op: "select",
                index: index as i64,
                dim: d,
                size: size as usize
            });
        }
        let mut l = self.clone();
        l.offset += i as usize * self.strides[d];
        l.shape.remove(d);
        l.strides.remove(d);
        Ok(l)
    }

    /// Removes `dim` if its size is 1 (a no-op otherwise, as in PyTorch).
    pub fn squeeze_dim(&self, dim: isize) -> Result<Layout> {
        let d = normalize_dim("squeeze", dim, self.rank())?;
        let mut l = self.clone();
        if self.shape[d] == 1 {
            l.shape.remove(d);
            l.strides.remove(d);
        }
        Ok(l)
    }

    /// Removes every dimension of size 1.
    pub fn squeeze_all(&self) -> Layout {
        let (shape, strides) = self
            .shape
            .iter()
            .zip(&self.strides)
            .filter(|&(&d, _)| d != 1)
            .map(|(&d, &s)| (d, s))
            .unzip();
        Layout {
            shape,
            strides,
            offset: self.offset,
        }
    }

    /// Inserts a dimension of size 1 at `dim`.
    pub fn unsqueeze(&self, dim: isize) -> Result<Layout> {
        let d = normalize_dim_inclusive("unsqueeze", dim, self.rank())?;
        let stride = if d < self.rank() {
            self.strides[d] * self.shape[d]
        } else {
            1
        };
        let mut l = self.clone();
        l.shape.insert(d, 1);
        l.strides.insert(d, stride);
        Ok(l)
    }

    /// Broadcasts to `shape` with stride 0 on new or size-1 dimensions. `-1` keeps a size.
    pub fn expand(&self, shape: &[isize]) -> Result<Layout> {
        let op = "expand";
        if shape.len() < self.rank() {
            bail!(Error::arg(
                op,
                format!(
                    "the target shape {shape:?} has fewer dimensions than the tensor's shape {:?}",
                    self.shape
                )
            ));
        }
        let lead = shape.len() - self.rank();
        let mut out_shape = Dims::new();
        let mut out_strides = Dims::new();
        for (i, &want) in shape.iter().enumerate() {
            if i < lead {
                if want < 0 {
                    bail!(Error::arg(
                        op,
                        format!("-1 is not allowed in a new leading dimension ({shape:?})")
                    ));
                }
                out_shape.push(want as usize);
                out_strides.push(0);
                continue;
            }
            let (have, stride) = (self.shape[i - lead], self.strides[i - lead]);
            if want == -1 || want as usize == have {
                out_shape.push(have);
                out_strides.push(stride);
            } else if have == 1 && want >= 0 {
                out_shape.push(want as usize);
                out_strides.push(0);
            } else {
                bail!(Error::ShapeMismatch {
                    op,
                    lhs: self.shape.to_vec(),
                    rhs: shape.iter().map(|&d| d.max(0) as usize).collect(),
                    note: format!("dimension {i}: size {have} cannot expand to {want}; only size-1 dimensions expand"),
                });
            }
        }
        checked_numel(op, &out_shape)?;
        Ok(Layout {
            shape: out_shape,
            strides: out_strides,
            offset: self.offset,
        })
    }

    /// Broadcasts to a concrete shape (used by binary ops).
    #[inline]
    pub fn broadcast_to(&self, shape: &[usize]) -> Result<Layout> {
        if dims_eq(&self.shape, shape) {
            return Ok(self.clone()); // the common case: nothing to broadcast
        }
        self.broadcast_expand(shape)
    }

    fn broadcast_expand(&self, shape: &[usize]) -> Result<Layout> {
        let s: SmallVec<[isize; 6]> = shape.iter().map(|&d| d as isize).collect();
        self.expand(&s)
    }

    /// A view with a new shape, if the strides allow it without a copy
    /// (PyTorch's `computeStride`). `None` when a copy is needed.
    pub fn view(&self, new_shape: &[usize]) -> Option<Layout> {
        let old_shape: &[usize] = &self.shape;
        let old_strides: &[usize] = &self.strides;
        let mut new_strides: Dims = smallvec::smallvec![0; new_shape.len()];
        if self.numel() == 0 {
            return Some(Layout {
                shape: new_shape.into(),
                strides: contiguous_strides(new_shape),
                offset: self.offset,
            });
        }
        if old_shape.is_empty() {
            // A scalar views as any all-ones shape.
            return Some(Layout {
                shape: new_shape.into(),
                strides: contiguous_strides(new_shape),
                offset: self.offset,
            });
        }
        let mut view_d = new_shape.len() as isize - 1;
        let mut chunk_base_stride = *old_strides.last().unwrap();
        let mut tensor_numel = 1usize;
        let mut view_numel = 1usize;
        for tensor_d in (0..old_shape.len()).rev() {
            tensor_numel *= old_shape[tensor_d];
            if tensor_d == 0
                || (old_shape[tensor_d - 1] != 1
                    && old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride)
            {
                while view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d as usize] == 1)
                {
                    new_strides[view_d as usize] = view_numel * chunk_base_stride;
                    view_numel *= new_shape[view_d as usize];
                    view_d -= 1;
                }
                if view_numel != tensor_numel {
                    return None;
                }
                if tensor_d > 0 {
                    chunk_base_stride = old_strides[tensor_d - 1];
                    tensor_numel = 1;
                    view_numel = 1;
                }
            }
        }
        if view_d != -1 {
            return None;
        }
        Some(Layout {
            shape: new_shape.into(),
            strides: new_strides,
            offset: self.offset,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn view_of_transposed_needs_copy() {
        let l = Layout::contiguous(&[3, 4]).transpose(0, 1).unwrap();
        assert!(l.view(&[12]).is_none());
        assert!(l.view(&[4, 3]).is_some());
        let l = Layout::contiguous(&[2, 3, 4]);
        assert_eq!(l.view(&[6, 4]).unwrap().strides(), &[4, 1]);
        assert_eq!(l.view(&[2, 12]).unwrap().strides(), &[12, 1]);
        let n = l.narrow(2, 0, 2).unwrap();
        assert_eq!(n.view(&[6, 2]).unwrap().strides(), &[4, 1]);
        assert!(n.view(&[12]).is_none());
    }

    #[test]
    fn broadcast_rules() {
        assert_eq!(&broadcast_shapes("t", &[3, 1], &[4]).unwrap()[..], &[3, 4]);
        assert!(broadcast_shapes("t", &[3], &[4]).is_err());
        assert_eq!(&broadcast_shapes("t", &[], &[2, 2]).unwrap()[..], &[2, 2]);
    }

    #[test]
    fn slicing() {
        let l = Layout::contiguous(&[10]);
        let s = l.slice("slice", 0, 1, 8, 3).unwrap();
        assert_eq!(s.shape(), &[3]);
        assert_eq!(s.strides(), &[3]);
        assert_eq!(s.offset(), 1);
        // Python's l[11:12] of 10 elements is empty; narrow past the end is not.
        assert_eq!(l.slice("slice", 0, 11, 12, 1).unwrap().shape(), &[0]);
        assert!(l.slice("narrow", 0, 11, 12, 1).is_err());
        assert!(normalize_dim("x", 0, 0).is_err());
        assert_eq!(normalize_dim("x", -1, 3).unwrap(), 2);
    }
}
