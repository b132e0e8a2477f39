//! `Embedding`: a lookup table.

use super::{init, Module};
use crate::error::{bail, Error, Result};
use crate::{DType, Device, Tensor};

/// A table of `num_embeddings` vectors of size `embedding_dim`, initialised
/// from `N(0, 1)` as in PyTorch. The forward takes i64 indices of any shape
/// and returns `indices.shape + [embedding_dim]` (an `index_select` on the
/// weight, so the gradient scatters back into the looked-up rows).
///
/// ```
/// use tensorscope::nn::{Embedding, Module};
/// use tensorscope::{Device, Tensor};
/// let emb = Embedding::new(10, 3)?;
/// let idx = Tensor::from_slice(&[1i64, 4, 4, 9], &[2, 2], Device::Cpu)?;
/// assert_eq!(emb.forward(&idx)?.shape(), &[2, 2, 3]);
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub struct Embedding {
    /// `[num_embeddings, embedding_dim]`.
    pub weight: Tensor,
}

impl Embedding {
    /// An f32 table on the CPU.
    pub fn new(num_embeddings: usize, embedding_dim: usize) -> Result<Embedding> {
        Embedding::with_options(num_embeddings, embedding_dim, DType::F32, Device::Cpu)
    }

    /// A table of the given float dtype on `device`.
    pub fn with_options(
        num_embeddings: usize,
        embedding_dim: usize,
        dtype: DType,
        device: Device,
    ) -> Result<Embedding> {
        if !dtype.is_float() {
            bail!(Error::dtype("Embedding", "a float dtype", dtype));
        }
        let mut w = Tensor::empty(&[num_embeddings, embedding_dim], dtype, device)?;
        init::normal_(&mut w, 0.0, 1.0)?;
        Ok(Embedding {
            weight: w.requires_grad_(true)?,
        })
    }
}

impl Module for Embedding {
    fn forward(&self, idx: &Tensor) -> Result<Tensor> {
        if idx.dtype() != DType::I64 {
            bail!(Error::dtype("Embedding", "i64 indices", idx.dtype()));
        }
        let n = self.weight.shape()[0];
        if idx.numel() > 0 {
            let lo = idx.min_all()?.item::<i64>()?;
            let hi = idx.max_all()?.item::<i64>()?;
            if lo < 0 || hi >= n as i64 {
                bail!(Error::IndexOutOfRange {
                    op: "Embedding",
                    index: if lo < 0 { lo } else { hi },
                    dim: 0,
                    size: n,
                });
            }
        }
        let flat = idx.reshape(&[-1])?;
        let rows = self.weight.index_select(0, &flat)?;
        let mut shape: Vec<isize> = idx.shape().iter().map(|&d| d as isize).collect();
        shape.push(self.weight.shape()[1] as isize);
        rows.view(&shape)
    }

    fn named_parameters(&self) -> Vec<(String, &Tensor)> {
        vec![("weight".into(), &self.weight)]
    }

    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
        vec![("weight".into(), &mut self.weight)]
    }
}
