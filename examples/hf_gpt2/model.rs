//! GPT-2 (transformers' `GPT2LMHeadModel`) over a Hugging Face checkpoint:
//! the model code of examples/hf_gpt2, also run by tests/nn/hf_models.rs.

use std::path::Path;
use tensorscope::generation::{CausalLm, ModelConfig};
use tensorscope::nn::MultiheadAttention;
use tensorscope::nn::{Checkpoint, Embedding, KvCache, LayerNorm, Linear, MhaOptions, Module};
use tensorscope::{DType, Device, Result, Tensor};

struct Block {
    ln_1: LayerNorm,
    attn: MultiheadAttention,
    ln_2: LayerNorm,
    fc: Linear,
    proj: Linear,
}

/// GPT-2: token and position embeddings, pre-norm blocks (attention, a
/// tanh-GELU MLP), a final norm, and the head tied to the token embedding.
pub struct Gpt2 {
    wte: Embedding,
    wpe: Embedding,
    blocks: Vec<Block>,
    ln_f: LayerNorm,
    device: Device,
}

/// The config.json fields this code reads; any other is a warning.
#[rustfmt::skip]
const KNOWN: &[&str] = &[
    "n_embd", "n_ctx", "n_head", "n_layer", "layer_norm_epsilon", "vocab_size", "n_positions",
];

impl Gpt2 {
    /// Loads `dir` (config.json and the safetensors files) in `dtype` on `device`.
    pub fn load(dir: impl AsRef<Path>, dtype: DType, device: Device) -> Result<Gpt2> {
        let (dir, ck) = (dir.as_ref(), Checkpoint::open(dir.as_ref())?);
        let cfg = ModelConfig::from_file(dir)?;
        cfg.warn_unknown(&[KNOWN, IGNORED].concat());
        let heads = cfg.usize("n_head")?;
        let eps = cfg.f64_or("layer_norm_epsilon", 1e-5)?;
        let t = |name: &str| ck.get_as(&format!("transformer.{name}"), dtype, device);
        let ln = |p: &str| {
            LayerNorm::from_parts(t(&format!("{p}.weight"))?, t(&format!("{p}.bias"))?, eps)
        };
        // GPT-2's Conv1D stores [in, out]: the transposed view is the Linear's [out, in].
        let conv1d = |p: &str| {
            Linear::from_parts(
                t(&format!("{p}.weight"))?.t()?,
                Some(t(&format!("{p}.bias"))?),
            )
        };
        let mha = MhaOptions {
            batch_first: true,
            bias: true,
            dtype,
            device,
            ..Default::default()
        };
        let mut blocks = Vec::new();
        for i in 0..cfg.usize("n_layer")? {
            let p = format!("h.{i}");
            let qkv = conv1d(&format!("{p}.attn.c_attn"))?;
            let out = conv1d(&format!("{p}.attn.c_proj"))?;
            blocks.push(Block {
                ln_1: ln(&format!("{p}.ln_1"))?,
                attn: MultiheadAttention::from_parts(qkv.weight, qkv.bias, out, heads, mha)?,
                ln_2: ln(&format!("{p}.ln_2"))?,
                fc: conv1d(&format!("{p}.mlp.c_fc"))?,
                proj: conv1d(&format!("{p}.mlp.c_proj"))?,
            });
        }
        Ok(Gpt2 {
            wte: Embedding::from_parts(t("wte.weight")?)?,
            wpe: Embedding::from_parts(t("wpe.weight")?)?,
            blocks,
            ln_f: ln("ln_f")?,
            device,
        })
    }
}

/// Fields transformers writes that do not change this forward.
#[rustfmt::skip]
const IGNORED: &[&str] = &[
    "activation_function", "architectures", "attn_pdrop", "bos_token_id", "dtype", "embd_pdrop",
    "eos_token_id", "initializer_range", "model_type", "n_inner", "reorder_and_upcast_attn",
    "resid_pdrop", "scale_attn_by_inverse_layer_idx", "scale_attn_weights", "summary_activation",
    "summary_first_dropout", "summary_proj_to_labels", "summary_type", "summary_use_proj",
    "tie_word_embeddings", "transformers_version", "use_cache", "add_cross_attention",
    "pad_token_id",
];

impl CausalLm for Gpt2 {
    type Cache = Vec<KvCache>;

    fn new_cache(&self, batch: usize, max_len: usize) -> Result<Vec<KvCache>> {
        self.blocks
            .iter()
            .map(|b| b.attn.new_kv_cache(batch, max_len))
            .collect()
    }

    fn forward(&self, ids: &Tensor, cache: &mut Vec<KvCache>) -> Result<Tensor> {
        let (past, t) = (cache[0].len(), ids.shape()[1]);
        let pos = Tensor::arange(past as f64, (past + t) as f64, 1.0, DType::I64, self.device)?;
        let mut x = self.wte.forward(ids)?.add(&self.wpe.forward(&pos)?)?;
        for (b, c) in self.blocks.iter().zip(cache.iter_mut()) {
            x = x.add(&b.attn.forward_cached(&b.ln_1.forward(&x)?, c)?)?;
            let h = b.fc.forward(&b.ln_2.forward(&x)?)?.gelu_tanh()?;
            x = x.add(&b.proj.forward(&h)?)?;
        }
        // The head is the token embedding, tied: logits = h wte^T.
        self.ln_f.forward(&x)?.matmul(&self.wte.weight.t()?)
    }

    fn device(&self) -> Device {
        self.device
    }
}
