//! Tensors built from others' values, composed of the core ops so that they
//! run on every device and autograd differentiates them: `one_hot`,
//! `diag` and `meshgrid`.

use crate::alloc::history::op_context;
use crate::dtype::DType;
use crate::error::{bail, Error, Result};
use crate::tensor::Tensor;

impl Tensor {
    /// `torch.nn.functional.one_hot`: an int64 tensor of `self`'s shape
    /// plus a last dimension of `num_classes` (`None`: the largest value
    /// plus one), 1 at each element's class. `self` must be int64 with
    /// values in `[0, num_classes)`; the check reads the values back (on
    /// CUDA, a synchronisation), as PyTorch's does.
    ///
    /// ```
    /// # use tensorscope::{Tensor, Device};
    /// let y = Tensor::from_slice(&[2i64, 0], &[2], Device::Cpu)?;
    /// assert_eq!(y.one_hot(Some(3))?.to_vec::<i64>()?, [0, 0, 1, 1, 0, 0]);
    /// assert!(y.one_hot(Some(2)).is_err());
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn one_hot(&self, num_classes: Option<usize>) -> Result<Tensor> {
        const OP: &str = "one_hot";
        let _op = op_context(OP);
        if self.dtype() != DType::I64 {
            bail!(Error::dtype(
                OP,
                "an int64 tensor of class indices (PyTorch: \"one_hot is only applicable to index tensor of type LongTensor\")",
                self.dtype()
            ));
        }
        let (lo, hi) = if self.numel() == 0 {
            (0, -1)
        } else {
            (
                self.min_all()?.item::<i64>()?,
                self.max_all()?.item::<i64>()?,
            )
        };
        if lo < 0 {
            bail!(Error::arg(
                OP,
                format!("class values must be non-negative, got {lo}")
            ));
        }
        let classes = match num_classes {
            Some(0) if self.numel() == 0 => bail!(Error::arg(
                OP,
                format!(
                    "can not infer the number of classes from an empty tensor of shape {:?} with num_classes 0",
                    self.shape()
                )
            )),
            Some(c) => {
                if hi >= i64::try_from(c).unwrap_or(i64::MAX) {
                    bail!(Error::arg(
                        OP,
                        format!("class values must be smaller than num_classes ({c}), got {hi}")
                    ));
                }
                c
            }
            None if self.numel() == 0 => bail!(Error::arg(
                OP,
                format!(
                    "can not infer the number of classes from an empty tensor of shape {:?}; give num_classes",
                    self.shape()
                )
            )),
            None => hi as usize + 1,
        };
        let ids = Tensor::arange(0.0, classes as f64, 1.0, DType::I64, self.device())?;
        self.unsqueeze(-1)?.eq(&ids)?.to_dtype(DType::I64)
    }

    /// `torch.diag`: of a vector `[n]`, the square matrix with it on
    /// diagonal `k` (above the main one for `k > 0`, below for `k < 0`),
    /// zeros elsewhere; of a matrix, a copy of its diagonal `k` (empty when
    /// `k` is past the matrix). Differentiable.
    ///
    /// ```
    /// # use tensorscope::{Tensor, Device};
    /// let v = Tensor::from_slice(&[1.0f32, 2.0], &[2], Device::Cpu)?;
    /// assert_eq!(v.diag(1)?.to_vec::<f32>()?, [0.0, 1.0, 0.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0]);
    /// assert_eq!(v.diag(0)?.diag(0)?.to_vec::<f32>()?, [1.0, 2.0]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn diag(&self, k: i64) -> Result<Tensor> {
        const OP: &str = "diag";
        let _op = op_context(OP);
        let dev = self.device();
        match self.rank() {
            1 => {
                let n = self.shape()[0];
                // m = n + |k|, and m * m elements must be addressable.
                let m = (n as u64)
                    .checked_add(k.unsigned_abs())
                    .and_then(|m| usize::try_from(m).ok())
                    .filter(|m| m.checked_mul(*m).is_some_and(|e| e <= isize::MAX as usize))
                    .ok_or_else(|| {
                        Error::arg(
                            OP,
                            format!(
                                "offset {k} makes a matrix too large for a vector of {n} elements"
                            ),
                        )
                    })?;
                // Diagonal k starts at (max(0, -k), max(0, k)); element i is
                // at flat position (r0 + i) * m + c0 + i.
                let (r0, c0) = if k >= 0 { (0, m - n) } else { (m - n, 0) };
                let pos: Vec<i64> = (0..n).map(|i| ((r0 + i) * m + c0 + i) as i64).collect();
                let pos = Tensor::from_vec(pos, &[n], dev)?;
                Tensor::zeros(&[m * m], self.dtype(), dev)?
                    .index_copy(0, &pos, self)?
                    .reshape(&[m as isize, m as isize])
                    .map_err(|e| e.reported_as(OP))
            }
            2 => {
                let (r, c) = (self.shape()[0] as i128, self.shape()[1] as i128);
                // Diagonal k starts at (max(0, -k), max(0, k)) (in i128:
                // -i64::MIN does not fit an i64).
                let k = k as i128;
                let (r0, c0) = ((-k).max(0), k.max(0));
                let len = (r - r0).min(c - c0).max(0);
                let flat: Vec<i64> = (0..len).map(|i| ((r0 + i) * c + c0 + i) as i64).collect();
                let idx = Tensor::from_vec(flat, &[len as usize], dev)?;
                self.reshape(&[-1])?
                    .index_select(0, &idx)
                    .map_err(|e| e.reported_as(OP))
            }
            _ => bail!(Error::arg(
                OP,
                format!("expects a vector or a matrix, got shape {:?}", self.shape())
            )),
        }
    }
    /// `torch.meshgrid(*tensors, indexing)`: for `k` tensors of one dim
    /// (or 0-d, counted as one element) of sizes `n1..nk`, `k` tensors of
    /// shape `[n1, .., nk]`, the `i`-th varying along dim `i` (`"ij"`,
    /// matrix indexing) or with the first two dims swapped (`"xy"`,
    /// Cartesian: shape `[n2, n1, ..]`). Each is an expanded view of its
    /// input (stride 0 elsewhere), as PyTorch's; differentiable.
    ///
    /// ```
    /// use tensorscope::{Device, Tensor};
    /// let x = Tensor::from_slice(&[1i64, 2, 3], &[3], Device::Cpu)?;
    /// let y = Tensor::from_slice(&[10i64, 20], &[2], Device::Cpu)?;
    /// let g = Tensor::meshgrid(&[&x, &y], "xy")?;
    /// assert_eq!(g[0].shape(), &[2, 3]);
    /// assert_eq!(g[0].to_vec::<i64>()?, [1, 2, 3, 1, 2, 3]);
    /// assert_eq!(g[1].to_vec::<i64>()?, [10, 10, 10, 20, 20, 20]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn meshgrid(tensors: &[&Tensor], indexing: &str) -> Result<Vec<Tensor>> {
        let _op = op_context("meshgrid");
        const OP: &str = "meshgrid";
        let xy = match indexing {
            "ij" => false,
            "xy" => true,
            other => bail!(Error::arg(
                OP,
                format!("indexing must be \"ij\" or \"xy\", got {other:?}")
            )),
        };
        let Some(first) = tensors.first() else {
            bail!(Error::arg(OP, "expected at least one tensor"));
        };
        for t in tensors {
            if t.rank() > 1 {
                bail!(Error::arg(
                    OP,
                    format!("expected 0-d or 1-d tensors, got shape {:?}", t.shape())
                ));
            }
            first.same_device(OP, t)?;
            if t.dtype() != first.dtype() {
                bail!(Error::dtype(OP, first.dtype().name(), t.dtype()));
            }
        }
        let k = tensors.len();
        // Under "xy" the first two inputs trade places in the grid's dims.
        let place = |i: usize| match (xy && k > 1, i) {
            (true, 0) => 1,
            (true, 1) => 0,
            _ => i,
        };
        let mut shape = vec![0isize; k];
        for (i, t) in tensors.iter().enumerate() {
            shape[place(i)] = t.numel() as isize;
        }
        tensors
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let mut view = vec![1isize; k];
                view[place(i)] = t.numel() as isize;
                t.reshape(&view)?.expand(&shape)
            })
            .collect()
    }
}
