//! Rearranging ops written with the ops below them: `tril` and `triu`
//! (triangles of the last two dims), `flip` and `roll`.

use crate::alloc::history::op_context;
use crate::dtype::DType;
use crate::error::{bail, Error, Result};
use crate::layout::normalize_dim;
use crate::tensor::Tensor;

impl Tensor {
    /// The elements on and below diagonal `k` of the last two dimensions
    /// (`torch.tril`), zeros elsewhere.
    pub fn tril(&self, k: i64) -> Result<Tensor> {
        let _op = op_context("tril");
        self.triangle("tril", k, true)
    }

    /// The elements on and above diagonal `k` of the last two dimensions
    /// (`torch.triu`), zeros elsewhere.
    pub fn triu(&self, k: i64) -> Result<Tensor> {
        let _op = op_context("triu");
        self.triangle("triu", k, false)
    }

    fn triangle(&self, op: &'static str, k: i64, lower: bool) -> Result<Tensor> {
        if self.rank() < 2 {
            bail!(Error::arg(
                op,
                format!("needs at least 2 dimensions, got shape {:?}", self.shape())
            ));
        }
        let (r, c) = (self.shape()[self.rank() - 2], self.shape()[self.rank() - 1]);
        let dev = self.device();
        let rows = Tensor::arange(0.0, r as f64, 1.0, DType::I64, dev)?.unsqueeze(1)?;
        let cols = Tensor::arange(0.0, c as f64, 1.0, DType::I64, dev)?.unsqueeze(0)?;
        // j - i against k.
        let d = cols.sub(&rows)?;
        let keep = if lower {
            d.le_scalar(k as f64)?
        } else {
            d.ge_scalar(k as f64)?
        };
        let zero = Tensor::zeros(&[], self.dtype(), dev)?;
        Tensor::where_cond(&keep, self, &zero)
    }

    /// The elements in reverse order along each of `dims` (`torch.flip`; a
    /// copy).
    pub fn flip(&self, dims: &[isize]) -> Result<Tensor> {
        let op = "flip";
        let _op = op_context(op);
        let mut out = self.alias();
        let mut seen = vec![false; self.rank()];
        for &d in dims {
            let d = normalize_dim(op, d, self.rank())?;
            if std::mem::replace(&mut seen[d], true) {
                bail!(Error::arg(op, format!("dim {d} appears twice in {dims:?}")));
            }
            let n = self.shape()[d];
            let idx = Tensor::arange(n as f64 - 1.0, -1.0, -1.0, DType::I64, self.device())?;
            out = out.index_select(d as isize, &idx)?;
        }
        if dims.is_empty() {
            out = out.deep_clone()?;
        }
        Ok(out)
    }

    /// The elements shifted by `shifts[i]` along `dims[i]`, wrapping round
    /// (`torch.roll`; a copy). With no dims, the flattened tensor rolls by
    /// `shifts[0]` and keeps its shape.
    pub fn roll(&self, shifts: &[i64], dims: &[isize]) -> Result<Tensor> {
        let op = "roll";
        let _op = op_context(op);
        if dims.is_empty() {
            let [s] = shifts else {
                bail!(Error::arg(
                    op,
                    format!("without dims it takes one shift, got {shifts:?}")
                ));
            };
            let flat = self.reshape(&[-1])?.roll(&[*s], &[0])?;
            let shape: Vec<isize> = self.shape().iter().map(|&v| v as isize).collect();
            return flat.reshape(&shape);
        }
        if shifts.len() != dims.len() {
            bail!(Error::arg(
                op,
                format!("{} shifts for {} dims", shifts.len(), dims.len())
            ));
        }
        let mut out = self.alias();
        for (&s, &d) in shifts.iter().zip(dims) {
            let d = normalize_dim(op, d, self.rank())?;
            let n = self.shape()[d];
            if n == 0 {
                continue;
            }
            let s = s.rem_euclid(n as i64) as usize;
            if s == 0 {
                continue;
            }
            let tail = out.narrow(d as isize, n - s, s)?;
            let head = out.narrow(d as isize, 0, n - s)?;
            out = Tensor::cat(&[&tail, &head], d as isize)?;
        }
        if out.shares_storage(self) {
            out = out.deep_clone()?;
        }
        Ok(out)
    }
}
