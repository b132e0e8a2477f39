//! Counting and set ops: `nonzero` (and `argwhere`), `count_nonzero`,
//! `unique`, `unique_consecutive` (and their `_dim` forms over slices) and
//! `mode`.
//!
//! Each is a composition of ops that run on both devices (comparisons,
//! the stable sort, `cumsum`, `masked_select`, `scatter_add`, `gather`), so
//! it runs wherever they do, and frees its intermediates as it goes. The
//! ops whose output length depends on the data (`nonzero`, `unique`) read
//! one count back from the device, as PyTorch's do. None of them records
//! a graph except `mode`'s values (a `gather` of `self`), as in PyTorch.

use crate::alloc::history::op_context;
use crate::autograd::no_grad;
use crate::dtype::DType;
use crate::error::{bail, Error, Result};
use crate::layout::normalize_dim;
use crate::tensor::Tensor;

/// `unique` and `unique_consecutive`'s three results: the values, where
/// each input element went (`self`'s shape) and how many went there.
pub type UniqueParts = (Tensor, Tensor, Tensor);

impl Tensor {
    /// Whether each element is nonzero (bool, `self`'s shape): NaN counts.
    fn nonzero_mask(&self) -> Result<Tensor> {
        if self.dtype() == DType::Bool {
            Ok(self.alias())
        } else {
            self.ne_scalar(0.0)
        }
    }

    /// `torch.nonzero(x)`: the indices of the nonzero elements, one row of
    /// `rank` int64 coordinates each, in row-major order (`[count, rank]`;
    /// a 0-d tensor gives `[1, 0]` or `[0, 0]`). NaN counts as nonzero.
    /// Reads the count back from the device.
    ///
    /// ```
    /// # use tensorscope::{Tensor, Device};
    /// let x = Tensor::from_slice(&[0.0f32, 2.0, 0.0, 5.0], &[2, 2], Device::Cpu)?;
    /// let i = x.nonzero()?;
    /// assert_eq!(i.shape(), &[2, 2]);
    /// assert_eq!(i.to_vec::<i64>()?, vec![0, 1, 1, 1]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn nonzero(&self) -> Result<Tensor> {
        let _op = op_context("nonzero");
        no_grad(|| {
            let mask = self.nonzero_mask()?;
            let dev = self.device();
            if self.rank() == 0 {
                let count = mask.to_dtype(DType::I64)?.item::<i64>()? as usize;
                return Tensor::zeros(&[count, 0], DType::I64, dev);
            }
            let shape = self.shape();
            let full: Vec<isize> = shape.iter().map(|&s| s as isize).collect();
            let mut coords = Vec::with_capacity(shape.len());
            for (d, &size) in shape.iter().enumerate() {
                let mut at = vec![1isize; shape.len()];
                at[d] = size as isize;
                let c = Tensor::arange(0.0, size as f64, 1.0, DType::I64, dev)?
                    .reshape(&at)?
                    .expand(&full)?;
                coords.push(c.masked_select(&mask)?);
            }
            let refs: Vec<&Tensor> = coords.iter().collect();
            Tensor::stack(&refs, 1)
        })
        .map_err(|e| e.reported_as("nonzero"))
    }

    /// `torch.argwhere(x)`: the same as [`nonzero`](Tensor::nonzero).
    pub fn argwhere(&self) -> Result<Tensor> {
        self.nonzero().map_err(|e| e.reported_as("argwhere"))
    }

    /// `torch.count_nonzero(x, dims)`: how many elements are nonzero
    /// (NaN counts) over `dims` (every dimension when empty), int64.
    ///
    /// ```
    /// # use tensorscope::{Tensor, Device};
    /// let x = Tensor::from_slice(&[0i64, 3, 0, 5, 1, 0], &[2, 3], Device::Cpu)?;
    /// assert_eq!(x.count_nonzero(&[1])?.to_vec::<i64>()?, vec![1, 2]);
    /// assert_eq!(x.count_nonzero(&[])?.item::<i64>()?, 3);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn count_nonzero(&self, dims: &[isize]) -> Result<Tensor> {
        let _op = op_context("count_nonzero");
        no_grad(|| {
            let ones = self.nonzero_mask()?.to_dtype(DType::I64)?;
            if dims.is_empty() {
                ones.sum_all()
            } else {
                ones.sum(dims, false)
            }
        })
        .map_err(|e| e.reported_as("count_nonzero"))
    }

    /// `torch.unique(x)` (sorted, over every element): the distinct
    /// values in ascending order, 1-D. NaNs are all distinct and last, as
    /// in PyTorch. See [`unique_parts`](Tensor::unique_parts) for the
    /// inverse and the counts.
    ///
    /// ```
    /// # use tensorscope::{Tensor, Device};
    /// let x = Tensor::from_slice(&[3i64, 1, 3, 2, 1], &[5], Device::Cpu)?;
    /// assert_eq!(x.unique()?.to_vec::<i64>()?, vec![1, 2, 3]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn unique(&self) -> Result<Tensor> {
        Ok(self.unique_parts()?.0)
    }

    /// `torch.unique(x, return_inverse=True, return_counts=True)`: the
    /// distinct values (ascending, 1-D), the index into them of every
    /// element (int64, `self`'s shape) and how many elements each value
    /// has (int64). Every dtype; no graph (PyTorch's is not
    /// differentiable either). [`unique_dim`](Tensor::unique_dim) is the
    /// `dim=` form.
    ///
    /// ```
    /// # use tensorscope::{Tensor, Device};
    /// let x = Tensor::from_slice(&[3i64, 1, 3, 2, 1, 3], &[2, 3], Device::Cpu)?;
    /// let (v, inv, counts) = x.unique_parts()?;
    /// assert_eq!(v.to_vec::<i64>()?, vec![1, 2, 3]);
    /// assert_eq!(inv.shape(), &[2, 3]);
    /// assert_eq!(inv.to_vec::<i64>()?, vec![2, 0, 2, 1, 0, 2]);
    /// assert_eq!(counts.to_vec::<i64>()?, vec![2, 1, 3]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn unique_parts(&self) -> Result<UniqueParts> {
        let _op = op_context("unique");
        no_grad(|| {
            let flat = self.reshape(&[-1])?;
            let (sorted, order) = flat.sort(0, false)?;
            groups(&sorted, Some(&order), self.shape())
        })
        .map_err(|e| e.reported_as("unique"))
    }

    /// `torch.unique_consecutive(x, return_inverse=True,
    /// return_counts=True)` over every element: each run of equal
    /// consecutive elements (row-major order) becomes one value; the
    /// inverse (int64, `self`'s shape) and the runs' lengths (int64).
    ///
    /// ```
    /// # use tensorscope::{Tensor, Device};
    /// let x = Tensor::from_slice(&[1i64, 1, 2, 2, 3, 1, 1], &[7], Device::Cpu)?;
    /// let (v, inv, counts) = x.unique_consecutive()?;
    /// assert_eq!(v.to_vec::<i64>()?, vec![1, 2, 3, 1]);
    /// assert_eq!(inv.to_vec::<i64>()?, vec![0, 0, 1, 1, 2, 3, 3]);
    /// assert_eq!(counts.to_vec::<i64>()?, vec![2, 2, 1, 2]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn unique_consecutive(&self) -> Result<UniqueParts> {
        let _op = op_context("unique_consecutive");
        no_grad(|| groups(&self.reshape(&[-1])?, None, self.shape()))
            .map_err(|e| e.reported_as("unique_consecutive"))
    }

    /// `torch.unique(x, dim=dim, return_inverse=True, return_counts=True)`:
    /// the distinct slices along `dim`, sorted lexicographically (element
    /// by element in row-major order of the other dimensions), stacked
    /// along `dim`; for each input slice the index of its unique slice
    /// (int64 `[size of dim]`); and how many input slices each unique one
    /// stands for (int64). A slice holding NaN equals no other and sorts
    /// after those that hold a number in the first place where they differ
    /// (PyTorch's order for such slices depends on the input's order:
    /// GUIDE 10, deviation 29). No graph, as in PyTorch. An `Err` for a 0-d
    /// tensor, and for empty slices of a non-empty `dim`, as in PyTorch.
    ///
    /// ```
    /// # use tensorscope::{Tensor, Device};
    /// let x = Tensor::from_slice(&[1i64, 2, 1, 2, 0, 5, 1, 1], &[4, 2], Device::Cpu)?;
    /// let (rows, inv, counts) = x.unique_dim(0)?;
    /// assert_eq!(rows.to_vec::<i64>()?, vec![0, 5, 1, 1, 1, 2]);
    /// assert_eq!(inv.to_vec::<i64>()?, vec![2, 2, 0, 1]);
    /// assert_eq!(counts.to_vec::<i64>()?, vec![1, 1, 2]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn unique_dim(&self, dim: isize) -> Result<UniqueParts> {
        const OP: &str = "unique_dim";
        let _op = op_context(OP);
        no_grad(|| slice_groups(OP, self, dim, true)).map_err(|e| e.reported_as(OP))
    }

    /// `torch.unique_consecutive(x, dim=dim, return_inverse=True,
    /// return_counts=True)`: each run of equal consecutive slices along
    /// `dim` becomes one slice; the inverse (int64 `[size of dim]`) and
    /// the runs' lengths. Errors as [`unique_dim`](Tensor::unique_dim).
    pub fn unique_consecutive_dim(&self, dim: isize) -> Result<UniqueParts> {
        const OP: &str = "unique_consecutive_dim";
        let _op = op_context(OP);
        no_grad(|| slice_groups(OP, self, dim, false)).map_err(|e| e.reported_as(OP))
    }

    /// `torch.mode(x, dim, keepdim)`: the most frequent value along `dim`
    /// (the smallest of those tied) and the index of its last occurrence.
    /// PyTorch returns the same value and *an* index of it (the last
    /// occurrence for slices of up to 16 elements; beyond, its CPU sort
    /// is unstable): the index here is always the last one. Every dtype;
    /// NaNs are all distinct (PyTorch's result with NaN depends on their
    /// order). The values are differentiable (a `gather` of `self`). An
    /// `Err` for an empty dimension.
    ///
    /// ```
    /// # use tensorscope::{Tensor, Device};
    /// let x = Tensor::from_slice(&[1i64, 2, 2, 3, 2, 3, 3], &[7], Device::Cpu)?;
    /// let (v, i) = x.mode(0, false)?;
    /// assert_eq!((v.item::<i64>()?, i.item::<i64>()?), (2, 4));
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn mode(&self, dim: isize, keepdim: bool) -> Result<(Tensor, Tensor)> {
        const OP: &str = "mode";
        let _op = op_context(OP);
        let d = normalize_dim(OP, dim, self.rank().max(1))?;
        if self.rank() == 0 {
            return Ok((self.alias(), Tensor::zeros(&[], DType::I64, self.device())?));
        }
        let n = self.shape()[d];
        if n == 0 {
            bail!(Error::arg(
                OP,
                format!(
                    "cannot take the mode of an empty dimension {d} of shape {:?}",
                    self.shape()
                )
            ));
        }
        let di = d as isize;
        let idx = no_grad(|| -> Result<Tensor> {
            let (sorted, order) = self.sort(di, false)?;
            let first = run_starts(&sorted, d)?;
            let gid = first.to_dtype(DType::I64)?.cumsum(di)?.sub_scalar(1.0)?;
            let ones = Tensor::ones(self.shape(), DType::I64, self.device())?;
            let counts = Tensor::zeros(self.shape(), DType::I64, self.device())?
                .scatter_add(di, &gid, &ones)?;
            // The first largest count: the smallest of the tied values.
            let best = counts.argmax(di, true)?;
            let last = counts.cumsum(di)?.gather(di, &best)?.sub_scalar(1.0)?;
            order.gather(di, &last)
        })
        .map_err(|e| e.reported_as(OP))?;
        let values = self.gather(di, &idx).map_err(|e| e.reported_as(OP))?;
        if keepdim {
            Ok((values, idx))
        } else {
            Ok((values.squeeze_dim(di)?, idx.squeeze_dim(di)?))
        }
    }
}

/// Whether each element along `d` starts a run of equal elements (bool,
/// `t`'s shape): the first always does, NaN never equals anything.
fn run_starts(t: &Tensor, d: usize) -> Result<Tensor> {
    let n = t.shape()[d];
    let di = d as isize;
    let mut head_shape = t.shape().to_vec();
    head_shape[d] = 1;
    let head = Tensor::full(&head_shape, 1.0, DType::Bool, t.device())?;
    if n <= 1 {
        return Ok(head);
    }
    let differs = t.narrow(di, 1, n - 1)?.ne(&t.narrow(di, 0, n - 1)?)?;
    Tensor::cat(&[&head, &differs], di)
}

/// The runs of the 1-D `vals` as `unique`'s three parts; `order` is the
/// permutation that sorted them (element `i` of `vals` came from
/// `order[i]`), `None` for the input order; the inverse gets `shape`.
fn groups(vals: &Tensor, order: Option<&Tensor>, shape: &[usize]) -> Result<UniqueParts> {
    let dev = vals.device();
    let shape_i: Vec<isize> = shape.iter().map(|&s| s as isize).collect();
    if vals.numel() == 0 {
        return Ok((
            vals.alias(),
            Tensor::zeros(shape, DType::I64, dev)?,
            Tensor::zeros(&[0], DType::I64, dev)?,
        ));
    }
    let first = run_starts(vals, 0)?;
    let values = vals.masked_select(&first)?;
    let (inverse, counts) = group_ids(first, values.numel(), order)?;
    Ok((values, inverse.reshape(&shape_i)?, counts))
}

/// From the bool vector `first` (which of `n` sorted elements start a run
/// of `runs`), where each element went (int64 `[n]`, in the input's order
/// through `order`, see [`groups`]) and each run's length (int64 `[runs]`).
fn group_ids(first: Tensor, runs: usize, order: Option<&Tensor>) -> Result<(Tensor, Tensor)> {
    let (n, dev) = (first.numel(), first.device());
    let gid = first.to_dtype(DType::I64)?.cumsum(0)?.sub_scalar(1.0)?;
    drop(first);
    let ones = Tensor::ones(&[n], DType::I64, dev)?;
    let counts = Tensor::zeros(&[runs], DType::I64, dev)?.scatter_add(0, &gid, &ones)?;
    let inverse = match order {
        Some(order) => Tensor::zeros(&[n], DType::I64, dev)?.scatter(0, order, &gid)?,
        None => gid,
    };
    Ok((inverse, counts))
}

/// `t`'s slices along `dim` as the rows of a `[n, m]` tensor (the other
/// dimensions flattened in order), with the permutation that moved `dim`
/// first; `None` when there are no slices (`t`'s size along `dim` is 0).
fn slices(op: &'static str, t: &Tensor, dim: isize) -> Result<Option<(Tensor, Vec<isize>)>> {
    if t.rank() == 0 {
        bail!(Error::arg(
            op,
            format!("dim {dim} of a 0-d tensor: it has no dimensions")
        ));
    }
    let d = normalize_dim(op, dim, t.rank())?;
    let n = t.shape()[d];
    if n == 0 {
        return Ok(None);
    }
    if t.numel() == 0 {
        // (PyTorch: "There are 0 sized dimensions, and they aren't selected".)
        bail!(Error::arg(
            op,
            format!(
                "the slices along dim {d} of shape {:?} are empty: another dimension has size 0",
                t.shape()
            )
        ));
    }
    let mut perm: Vec<isize> = vec![d as isize];
    perm.extend((0..t.rank() as isize).filter(|&k| k != d as isize));
    let rows = t.permute(&perm)?.reshape(&[n as isize, -1])?;
    Ok(Some((rows, perm)))
}

/// The slices of `rows` (`[n, m]`) that start a run of equal slices (bool
/// `[n]`): the first, and each that differs from the one before in some
/// element (NaN never equals anything).
fn slice_run_starts(rows: &Tensor) -> Result<Tensor> {
    let n = rows.shape()[0];
    let head = Tensor::full(&[1], 1.0, DType::Bool, rows.device())?;
    if n <= 1 {
        return Ok(head);
    }
    let differs = rows
        .narrow(0, 1, n - 1)?
        .ne(&rows.narrow(0, 0, n - 1)?)?
        .any(&[1], false)?;
    Tensor::cat(&[&head, &differs], 0)
}

/// The permutation that sorts the rows of `rows` (`[n, m]`)
/// lexicographically: a stable sort by each column, last to first (NaN
/// sorts last, as in the sort).
fn lexsort(rows: &Tensor) -> Result<Tensor> {
    let (n, m) = (rows.shape()[0], rows.shape()[1]);
    let mut order = Tensor::arange(0.0, n as f64, 1.0, DType::I64, rows.device())?;
    for j in (0..m).rev() {
        let key = rows.select(1, j as isize)?.index_select(0, &order)?;
        order = order.index_select(0, &key.argsort(0, false)?)?;
    }
    Ok(order)
}

/// `unique_dim` and `unique_consecutive_dim`: the runs of equal slices
/// along `dim`, after a lexicographic sort when `sort`.
fn slice_groups(op: &'static str, t: &Tensor, dim: isize, sort: bool) -> Result<UniqueParts> {
    let dev = t.device();
    let Some((rows, perm)) = slices(op, t, dim)? else {
        let z = Tensor::zeros(&[0], DType::I64, dev)?;
        return Ok((t.deep_clone()?, z.alias(), z));
    };
    let order = if sort { Some(lexsort(&rows)?) } else { None };
    let sorted = match &order {
        Some(o) => rows.index_select(0, o)?,
        None => rows,
    };
    let first = slice_run_starts(&sorted)?;
    let at = first.nonzero()?.reshape(&[-1])?;
    let picked = sorted.index_select(0, &at)?;
    drop(sorted);
    let (inverse, counts) = group_ids(first, at.numel(), order.as_ref())?;
    // Back to `t`'s layout of dimensions: [runs, the others in order],
    // then `dim` moved back into place.
    let mut shape: Vec<isize> = perm
        .iter()
        .map(|&k| t.shape()[k as usize] as isize)
        .collect();
    shape[0] = at.numel() as isize;
    let mut back = vec![0isize; perm.len()];
    for (i, &k) in perm.iter().enumerate() {
        back[k as usize] = i as isize;
    }
    let values = picked.reshape(&shape)?.permute(&back)?.contiguous()?;
    Ok((values, inverse, counts))
}
