//! Neural-network modules.
//!
//! A [`Module`] owns its parameters (leaf tensors that require grad). Layers
//! and [`Sequential`] live in this folder, one concept per file.
//!
//! # Parameters and buffers
//!
//! * [`named_parameters`](Module::named_parameters) lists the **trainable**
//!   tensors only (what PyTorch's `parameters()` yields).
//! * [`named_parameters_mut`](Module::named_parameters_mut) lists the same
//!   tensors in the same order, **followed by the buffers** a checkpoint must
//!   save (PyTorch's `state_dict` extras): BatchNorm1d's `running_mean`,
//!   `running_var` and `num_batches_tracked`. Buffers never require grad, so
//!   they never get a gradient and an optimizer that skips tensors without a
//!   gradient leaves them alone. The first `named_parameters().len()` entries
//!   of `named_parameters_mut()` are therefore exactly the trainable ones.
//!
//! ```
//! use tensorscope::nn::{Linear, Module, ReLU, Sequential};
//! use tensorscope::{DType, Device, Tensor};
//! let mut net = Sequential::new();
//! net.add(Linear::new(4, 8)?).add(ReLU).add(Linear::new(8, 2)?);
//! let x = Tensor::randn(&[3, 4], DType::F32, Device::Cpu)?;
//! let y = tensorscope::autograd::no_grad(|| net.forward_owned(x))?;
//! assert_eq!(y.shape(), &[3, 2]);
//! assert_eq!(net.named_parameters()[0].0, "0.weight");
//! # Ok::<(), tensorscope::Error>(())
//! ```

mod activation;
pub(crate) mod checkpoint;
mod conv;
mod dropout;
mod embedding;
pub mod init;
mod kv_cache;
mod linear;
pub mod loss;
mod mha;
mod module;
mod norm;
pub mod prune;
mod rms_norm;
mod rope;
mod sequential;
pub(crate) mod state;

pub use crate::ops::attention::{
    scaled_dot_product_attention, scaled_dot_product_attention_with, CausalVariant, SdpaKernel,
    SdpaOptions,
};
pub use activation::{
    GeluApproximate, Hardswish, Identity, LeakyReLU, Mish, ReLU, SiLU, Sigmoid, Softplus, Tanh,
    ELU, GELU,
};
pub use checkpoint::{Checkpoint, TensorInfo};
pub use conv::{
    AdaptiveAvgPool2d, AvgPool2d, Conv, Conv1d, Conv2d, ConvTranspose2d, Flatten, MaxPool2d,
};
pub use dropout::Dropout;
pub use embedding::{Embedding, EmbeddingOptions};
pub use kv_cache::KvCache;
pub use linear::Linear;
pub use loss::{
    bce_with_logits, bce_with_logits_with, binary_cross_entropy, cross_entropy, cross_entropy_with,
    huber_loss, kl_div, kl_div_with, l1_loss, l1_loss_with, mse_loss, mse_loss_with, nll_loss,
    smooth_l1_loss, BceWithLogitsOptions, CrossEntropyOptions, Reduction,
};
pub use mha::{MhaForward, MhaOptions, MultiheadAttention};
pub use module::{module_scope, Module, ModuleScope};
pub use norm::{BatchNorm, BatchNorm1d, BatchNorm2d, BatchNormOptions, GroupNorm, LayerNorm};
pub use rms_norm::{rms_norm, rms_norm_default_eps, RMSNorm};
pub use rope::{apply_rotary_pos_emb, rotate_half, RopeScaling, RotaryEmbedding};
pub use sequential::{DonationStats, Sequential};
pub use state::*;

pub(crate) use sequential::{donation_verdict, Verdict};
