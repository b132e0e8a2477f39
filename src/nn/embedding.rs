//! `Embedding`: a lookup table.

use super::module::check_parts;
use super::{init, Module};
use crate::autograd::no_grad;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{bail, Error, Result};
use crate::tensor::Tensor;

/// Options of [`Embedding::with_config`], PyTorch's keyword arguments;
/// `Default` gives PyTorch's defaults (those of [`Embedding::new`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EmbeddingOptions {
    /// A row (negative: counted from the end) that is initialised to zeros
    /// and never receives a gradient: the padding token's vector.
    pub padding_idx: Option<isize>,
    /// If set, every row a forward pass looks up whose `norm_type`-norm
    /// exceeds `max_norm` is first rescaled **in the weight** to norm
    /// `max_norm` (PyTorch's `embedding_renorm_`, under `no_grad`).
    pub max_norm: Option<f64>,
    /// The `p` of the norm for `max_norm` (default 2).
    pub norm_type: f64,
}

impl Default for EmbeddingOptions {
    fn default() -> Self {
        EmbeddingOptions {
            padding_idx: None,
            max_norm: None,
            norm_type: 2.0,
        }
    }
}

/// A table of `num_embeddings` vectors of size `embedding_dim`, initialised
/// from `N(0, 1)` as in PyTorch. The forward takes i64 (or i32) indices of any shape
/// and returns `indices.shape + [embedding_dim]`; the gradient is summed into
/// the looked-up rows (except the `padding_idx` row, see
/// [`EmbeddingOptions`]).
///
/// ```
/// use tensorscope::nn::{Embedding, Module};
/// use tensorscope::{Device, Tensor};
/// let emb = Embedding::new(10, 3)?;
/// let idx = Tensor::from_slice(&[1i64, 4, 4, 9], &[2, 2], Device::Cpu)?;
/// assert_eq!(emb.forward(&idx)?.shape(), &[2, 2, 3]);
/// # Ok::<(), tensorscope::Error>(())
/// ```
///
/// With a padding row:
///
/// ```
/// use tensorscope::nn::{Embedding, EmbeddingOptions, Module};
/// use tensorscope::{DType, Device, Tensor};
/// let opts = EmbeddingOptions { padding_idx: Some(0), ..Default::default() };
/// let emb = Embedding::with_config(5, 2, opts, DType::F32, Device::Cpu)?;
/// let idx = Tensor::from_slice(&[3i64, 0, 0], &[3], Device::Cpu)?;
/// let y = emb.forward(&idx)?;
/// assert_eq!(y.narrow(0, 1, 2)?.to_vec::<f32>()?, vec![0.0; 4]); // the zero row
/// y.sum_all()?.backward()?;
/// let g = emb.weight.grad().unwrap().to_vec::<f32>()?;
/// assert_eq!(&g[0..2], &[0.0, 0.0]); // no gradient for the padding row
/// assert_eq!(&g[6..8], &[1.0, 1.0]);
/// # Ok::<(), tensorscope::Error>(())
/// ```
pub struct Embedding {
    /// `[num_embeddings, embedding_dim]`.
    pub weight: Tensor,
    padding_idx: Option<usize>,
    max_norm: Option<f64>,
    norm_type: f64,
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
        Embedding::with_config(
            num_embeddings,
            embedding_dim,
            EmbeddingOptions::default(),
            dtype,
            device,
        )
    }

    /// A table with PyTorch's options ([`EmbeddingOptions`]).
    pub fn with_config(
        num_embeddings: usize,
        embedding_dim: usize,
        opts: EmbeddingOptions,
        dtype: DType,
        device: Device,
    ) -> Result<Embedding> {
        (|| -> Result<Embedding> {
            let op = "Embedding";
            if !dtype.is_float() {
                bail!(Error::dtype(op, "a float dtype", dtype));
            }
            let n = num_embeddings as isize;
            let padding_idx = match opts.padding_idx {
                None => None,
                Some(p) if (-n..n).contains(&p) => Some(if p < 0 { p + n } else { p } as usize),
                Some(p) => bail!(Error::IndexOutOfRange {
                    op,
                    index: p as i64,
                    dim: 0,
                    size: num_embeddings,
                }),
            };
            if let Some(m) = opts.max_norm
                && !(m.is_finite() && m > 0.0 && opts.norm_type > 0.0)
            {
                let got = format!("got max_norm {m}, norm_type {}", opts.norm_type);
                bail!(Error::arg(
                    op,
                    format!("max_norm must be finite and positive and norm_type positive, {got}")
                ));
            }
            let mut w = Tensor::empty(&[num_embeddings, embedding_dim], dtype, device)?;
            init::normal_(&mut w, 0.0, 1.0)?;
            if let Some(p) = padding_idx {
                w.select(0, p as isize)?.fill_(0.0)?;
            }
            Ok(Embedding {
                weight: w.requires_grad_(true)?,
                padding_idx,
                max_norm: opts.max_norm,
                norm_type: opts.norm_type,
            })
        })()
        .map_err(|e| e.reported_as("Embedding"))
    }

    /// A table over an existing `[num_embeddings, embedding_dim]` float
    /// tensor (a checkpoint's, say; PyTorch's `Embedding.from_pretrained`
    /// with `freeze` as the tensor's `requires_grad` says), used as it is,
    /// with the default [`EmbeddingOptions`]. An `Err` naming
    /// `Embedding::from_parts` for another rank or a non-float dtype.
    ///
    /// ```
    /// use tensorscope::nn::{Embedding, Module};
    /// use tensorscope::{DType, Device, Tensor};
    /// let w = Tensor::arange(0.0, 6.0, 1.0, DType::F32, Device::Cpu)?.view(&[3, 2])?;
    /// let emb = Embedding::from_parts(w)?;
    /// let ids = Tensor::from_vec(vec![2i64, 0], &[2], Device::Cpu)?;
    /// assert_eq!(emb.forward(&ids)?.to_vec::<f32>()?, [4.0, 5.0, 0.0, 1.0]);
    /// # Ok::<(), tensorscope::Error>(())
    /// ```
    pub fn from_parts(weight: Tensor) -> Result<Embedding> {
        const OP: &str = "Embedding::from_parts";
        if weight.rank() != 2 {
            bail!(Error::shape(
                OP,
                weight.shape(),
                &[],
                "the weight must be [num_embeddings, embedding_dim]"
            ));
        }
        check_parts(OP, &weight, None)?;
        let opts = EmbeddingOptions::default();
        Ok(Embedding {
            weight,
            padding_idx: None,
            max_norm: opts.max_norm,
            norm_type: opts.norm_type,
        })
    }

    /// The padding row, if any (normalised to `0..num_embeddings`).
    pub fn padding_idx(&self) -> Option<usize> {
        self.padding_idx
    }

    /// Rescales the rows `flat` looks up whose norm exceeds `max_norm`, in
    /// the weight, under `no_grad` (as PyTorch's `embedding_renorm_`).
    fn renorm(&self, flat: &Tensor, max_norm: f64) -> Result<()> {
        no_grad(|| {
            let p = self.norm_type;
            let rows = self.weight.index_select(0, flat)?;
            let norms = rows
                .abs()?
                .pow_scalar(p)?
                .sum(&[1], true)?
                .pow_scalar(1.0 / p)?;
            let scale = Tensor::where_cond(
                &norms.gt_scalar(max_norm)?,
                &norms.add_scalar(1e-7)?.rdiv_scalar(max_norm)?,
                &norms.ones_like()?,
            )?;
            // Repeated indices write the same row more than once, with the same values.
            let mut w = self.weight.alias();
            w.index_copy_(0, flat, &rows.mul(&scale)?)?;
            Ok(())
        })
    }
}

impl Module for Embedding {
    fn forward(&self, idx: &Tensor) -> Result<Tensor> {
        let _op = crate::alloc::history::op_context("embedding");
        let wide;
        let idx = match idx.dtype() {
            DType::I64 => idx,
            // As PyTorch, i32 ids too; widened (ids are small next to rows).
            DType::I32 => {
                wide = idx.to_dtype(DType::I64)?;
                &wide
            }
            d => bail!(Error::dtype("Embedding", "i64 or i32 indices", d)),
        };
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
        if let Some(m) = self.max_norm {
            self.renorm(&flat, m)?;
        }
        let mut shape: Vec<isize> = idx.shape().iter().map(|&d| d as isize).collect();
        shape.push(self.weight.shape()[1] as isize);
        let rows = no_grad(|| self.weight.index_select(0, &flat)?.view(&shape))?;
        crate::autograd::formulas_index::embedding(&self.weight, &flat, self.padding_idx, rows)
    }

    fn named_parameters(&self) -> Vec<(String, &Tensor)> {
        vec![("weight".into(), &self.weight)]
    }

    fn named_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
        vec![("weight".into(), &mut self.weight)]
    }
}
