//! Tensors built from others' values (issue 17, item 5), composed of the
//! core ops so that they run on every device and autograd differentiates
//! them: `one_hot` and `diag`.

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
            Some(c) => {
                if hi >= c as i64 {
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
                let m = n + k.unsigned_abs() as usize;
                let rows = Tensor::arange(0.0, m as f64, 1.0, DType::I64, dev)?.unsqueeze(1)?;
                let cols = Tensor::arange(0.0, m as f64, 1.0, DType::I64, dev)?.unsqueeze(0)?;
                let on = cols.sub(&rows)?.eq_scalar(k as f64)?;
                // Element (i, j) of diagonal k is x[i] above the main
                // diagonal (k >= 0) and x[j] below it; elsewhere any
                // index (clamped into range) is read and masked out.
                let at = if k >= 0 { &rows } else { &cols };
                let idx = at
                    .expand(&[m as isize, m as isize])?
                    .clamp(None, Some(n.saturating_sub(1) as f64))?
                    .reshape(&[-1])?;
                if n == 0 {
                    return Tensor::zeros(&[m, m], self.dtype(), dev);
                }
                let vals = self
                    .index_select(0, &idx)?
                    .reshape(&[m as isize, m as isize])?;
                let zero = Tensor::zeros(&[], self.dtype(), dev)?;
                Tensor::where_cond(&on, &vals, &zero)
            }
            2 => {
                let (r, c) = (self.shape()[0] as i64, self.shape()[1] as i64);
                // Diagonal k starts at (max(0, -k), max(0, k)).
                let (r0, c0) = ((-k).max(0), k.max(0));
                let len = (r - r0).min(c - c0).max(0);
                let flat: Vec<i64> = (0..len).map(|i| (r0 + i) * c + c0 + i).collect();
                let idx = Tensor::from_vec(flat, &[len as usize], dev)?;
                self.reshape(&[-1])?.index_select(0, &idx)
            }
            _ => bail!(Error::arg(
                OP,
                format!("expects a vector or a matrix, got shape {:?}", self.shape())
            )),
        }
    }
}
