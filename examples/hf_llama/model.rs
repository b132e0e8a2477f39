//! Llama (transformers' `LlamaForCausalLM`) over a Hugging Face checkpoint:
//! grouped-query attention, RoPE (Llama 3 scaling when configured), SwiGLU.
//! The model code of examples/hf_llama, also run by tests/nn/hf_models.rs.

use std::path::Path;
use tensorscope::generation::{CausalLm, ModelConfig};
use tensorscope::nn::{apply_rotary_pos_emb, Checkpoint, Embedding, KvCache, Linear, Module};
use tensorscope::nn::{RMSNorm, RotaryEmbedding};
use tensorscope::{DType, Device, Result, Tensor};

/// Norms before attention and MLP; q, k, v, o; gate, up, down.
struct Layer {
    norms: [RMSNorm; 2],
    attn: [Linear; 4],
    mlp: [Linear; 3],
}

/// Llama: pre-norm layers of rotary GQA attention and a SwiGLU MLP.
pub struct Llama {
    embed: Embedding,
    layers: Vec<Layer>,
    norm: RMSNorm,
    lm_head: Linear,
    rope: RotaryEmbedding,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    dtype: DType,
    device: Device,
}

/// The config.json fields this code reads, and those that do not change the forward.
#[rustfmt::skip]
const KNOWN: &[&str] = &[
    "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "num_hidden_layers",
    "rms_norm_eps", "rope_theta", "rope_scaling", "rope_parameters", "tie_word_embeddings",
    "architectures", "attention_bias", "attention_dropout", "bos_token_id", "dtype", "eos_token_id",
    "hidden_act", "initializer_range", "intermediate_size", "max_position_embeddings", "mlp_bias",
    "model_type", "pad_token_id", "pretraining_tp", "transformers_version", "use_cache",
    "vocab_size",
];

impl Llama {
    /// Loads `dir` (config.json and the safetensors files) in `dtype` on `device`.
    pub fn load(dir: impl AsRef<Path>, dtype: DType, device: Device) -> Result<Llama> {
        let (dir, ck) = (dir.as_ref(), Checkpoint::open(dir.as_ref())?);
        let cfg = ModelConfig::from_file(dir)?;
        cfg.warn_unknown(KNOWN);
        let (e, heads) = (cfg.usize("hidden_size")?, cfg.usize("num_attention_heads")?);
        let kv_heads = cfg.usize_or("num_key_value_heads", heads)?;
        let head_dim = cfg.usize_or("head_dim", e / heads)?;
        let eps = Some(cfg.f64_or("rms_norm_eps", 1e-6)?);
        let t = |name: &str| ck.get_as(name, dtype, device);
        let lin = |p: &str| Linear::from_parts(t(&format!("{p}.weight"))?, None);
        let norm = |p: &str| RMSNorm::from_parts(t(&format!("{p}.weight"))?, eps);
        let mut layers = Vec::new();
        for i in 0..cfg.usize("num_hidden_layers")? {
            let p = |part: &str| format!("model.layers.{i}.{part}");
            let a = |n: &str| lin(&p(&format!("self_attn.{n}_proj")));
            let m = |n: &str| lin(&p(&format!("mlp.{n}_proj")));
            layers.push(Layer {
                norms: [
                    norm(&p("input_layernorm"))?,
                    norm(&p("post_attention_layernorm"))?,
                ],
                attn: [a("q")?, a("k")?, a("v")?, a("o")?],
                mlp: [m("gate")?, m("up")?, m("down")?],
            });
        }
        let tied = cfg.bool_or("tie_word_embeddings", false)? || !ck.contains("lm_head.weight");
        let head = if tied {
            "model.embed_tokens"
        } else {
            "lm_head"
        };
        let (theta, scaling) = cfg.rope()?;
        Ok(Llama {
            embed: Embedding::from_parts(t("model.embed_tokens.weight")?)?,
            layers,
            norm: norm("model.norm")?,
            lm_head: lin(head)?,
            rope: RotaryEmbedding::new(head_dim, theta, scaling, device)?,
            heads,
            kv_heads,
            head_dim,
            dtype,
            device,
        })
    }

    /// `[B, T, n hd]` -> `[B, n, T, hd]`.
    fn split(&self, x: &Tensor, n: usize) -> Result<Tensor> {
        let (b, t) = (x.shape()[0] as isize, x.shape()[1] as isize);
        x.reshape(&[b, t, n as isize, self.head_dim as isize])?
            .transpose(1, 2)
    }
}

impl CausalLm for Llama {
    type Cache = Vec<KvCache>;

    fn new_cache(&self, batch: usize, max_len: usize) -> Result<Vec<KvCache>> {
        let new = || {
            KvCache::new(
                batch,
                self.kv_heads,
                max_len,
                self.head_dim,
                self.dtype,
                self.device,
            )
        };
        self.layers.iter().map(|_| new()).collect()
    }

    fn forward(&self, ids: &Tensor, cache: &mut Vec<KvCache>) -> Result<Tensor> {
        let mut x = self.embed.forward(ids)?;
        // The angles of the positions after the cache, once for every layer.
        let (past, t) = (cache[0].len(), ids.shape()[1]);
        let pos = Tensor::arange(past as f64, (past + t) as f64, 1.0, DType::I64, self.device)?;
        let (cos, sin) = self.rope.cos_sin(&pos, self.dtype)?;
        for (l, c) in self.layers.iter().zip(cache.iter_mut()) {
            let ([q, k, v, o], [gate, up, down]) = (&l.attn, &l.mlp);
            let h = l.norms[0].forward(&x)?;
            // Heads [B, n, T, hd], q and k rotated.
            let heads = |p: &Linear, n: usize| self.split(&p.forward(&h)?, n);
            let q = apply_rotary_pos_emb(&heads(q, self.heads)?, &cos, &sin)?;
            let k = apply_rotary_pos_emb(&heads(k, self.kv_heads)?, &cos, &sin)?;
            let y = c
                .attend(&q, &k, &heads(v, self.kv_heads)?)?
                .transpose(1, 2)?;
            let (b, t) = (y.shape()[0] as isize, y.shape()[1] as isize);
            x = x.add(&o.forward(&y.reshape(&[b, t, -1])?)?)?;
            let h = l.norms[1].forward(&x)?;
            x = x.add(&down.forward(&gate.forward(&h)?.silu()?.mul(&up.forward(&h)?)?)?)?;
        }
        self.lm_head.forward(&self.norm.forward(&x)?)
    }

    fn device(&self) -> Device {
        self.device
    }
}
