//! Issue 48 item 3: generation. The sampler's processors against
//! transformers' (tests/fixtures/generation.py), its draws seeded and
//! distributed as the processed softmax, the `generate` loop over a small
//! cached attention model (its greedy tokens are those of recomputing the
//! whole sequence each step, the cache sized once and freed), and
//! `config.json` reading.

use crate::common;

#[cfg(feature = "cuda")]
use common::devices::on_both;
use tensorscope::autograd::no_grad;
use tensorscope::generation::{
    generate, CausalLm, GenerateOptions, ModelConfig, Sampler, SamplingOptions,
};
use tensorscope::memory;
use tensorscope::nn::{
    Embedding, KvCache, Linear, MhaOptions, Module, MultiheadAttention, RopeScaling,
};
use tensorscope::{manual_seed, DType, Device, Result, Tensor};

fn nums<T: std::str::FromStr>(s: &str) -> Vec<T>
where
    T::Err: std::fmt::Debug,
{
    s.split_whitespace().map(|v| v.parse().unwrap()).collect()
}

/// Every fixture case: the processed scores equal transformers' (the same
/// tokens removed; the kept scores to f32 rounding).
#[test]
fn processors_match_transformers() {
    let _shared = common::shared();
    let text = include_str!("../fixtures/generation.txt");
    let mut cases = 0;
    for block in text.split("\nend").filter(|b| b.contains("case ")) {
        let mut o = SamplingOptions::default();
        let (mut hist, mut logits, mut want) = (vec![], vec![], vec![]);
        let (mut b, mut n, mut v) = (0, 0, 0);
        let mut name = String::new();
        for line in block
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            let (key, rest) = line.split_once(' ').unwrap();
            match key {
                "case" => {
                    let f: Vec<&str> = rest.split(' ').collect();
                    name = f[0].to_string();
                    let p = |k: &str| {
                        f.iter()
                            .find_map(|x| x.strip_prefix(&format!("{k}=")))
                            .unwrap()
                    };
                    o.repetition_penalty = p("penalty").parse().unwrap();
                    o.temperature = p("temperature").parse().unwrap();
                    o.top_k = p("top_k").parse().ok();
                    o.top_p = p("top_p").parse().ok();
                    o.do_sample = p("sample") == "1";
                }
                "history" => {
                    let x: Vec<u32> = nums(rest);
                    (b, n) = (x[0] as usize, x[1] as usize);
                    hist = x[2..].to_vec();
                }
                "logits" => {
                    let x: Vec<f64> = nums(rest);
                    v = x[1] as usize;
                    logits = x[2..].iter().map(|&x| x as f32).collect();
                }
                "out" => want = rest.split(' ').map(|s| s.parse::<f64>().unwrap()).collect(),
                other => panic!("generation.txt: {other}"),
            }
        }
        let s = Sampler::new(o).unwrap();
        for r in 0..b {
            let mut row = logits[r * v..(r + 1) * v].to_vec();
            s.process(&mut row, &hist[r * n..(r + 1) * n]).unwrap();
            for (j, (&g, &w)) in row.iter().zip(&want[r * v..(r + 1) * v]).enumerate() {
                let ok = if w == f64::NEG_INFINITY {
                    g == f32::NEG_INFINITY
                } else {
                    (g as f64 - w).abs() <= 1e-6 * w.abs().max(1.0)
                };
                assert!(ok, "{name} row {r} token {j}: got {g}, want {w}");
            }
        }
        cases += 1;
    }
    assert_eq!(cases, 7);
}

/// A seed gives the same draws, another seed others; 40000 draws from
/// probabilities 0.5, 0.3, 0.2 land within 1% of them; top-k 1 is greedy;
/// top-p 0.6 leaves the two most likely.
#[test]
fn draws_are_seeded_and_follow_the_distribution() {
    let _shared = common::shared();
    let logits: Vec<f32> = [0.5f32, 0.3, 0.2].iter().map(|p| p.ln()).collect();
    let draw = |o: SamplingOptions, n: usize| -> Vec<u32> {
        let mut s = Sampler::new(o).unwrap();
        (0..n).map(|_| s.pick(&logits, &[]).unwrap()).collect()
    };
    let o = SamplingOptions {
        do_sample: true,
        seed: 3,
        ..Default::default()
    };
    assert_eq!(draw(o, 50), draw(o, 50));
    assert_ne!(draw(o, 50), draw(SamplingOptions { seed: 4, ..o }, 50));
    let many = draw(o, 40_000);
    for (t, p) in [0.5, 0.3, 0.2].iter().enumerate() {
        let f = many.iter().filter(|&&x| x == t as u32).count() as f64 / 40_000.0;
        assert!((f - p).abs() < 0.01, "token {t}: {f} against {p}");
    }
    assert!(draw(
        SamplingOptions {
            top_k: Some(1),
            ..o
        },
        200
    )
    .iter()
    .all(|&x| x == 0));
    let top = draw(
        SamplingOptions {
            top_p: Some(0.6),
            ..o
        },
        2000,
    );
    assert!(top.iter().all(|&x| x < 2) && top.contains(&1));
    // A token outside the vocabulary: an Err, the scores untouched.
    let pen = Sampler::new(SamplingOptions {
        repetition_penalty: 2.0,
        ..o
    })
    .unwrap();
    let mut row = logits.clone();
    let e = pen.process(&mut row, &[0, 1, 7]).unwrap_err().to_string();
    assert!(e.contains("token 7") && row == logits, "{e}");
    for bad in [
        SamplingOptions {
            temperature: 0.0,
            ..o
        },
        SamplingOptions {
            top_p: Some(1.5),
            ..o
        },
        SamplingOptions {
            top_k: Some(0),
            ..o
        },
        SamplingOptions {
            repetition_penalty: -1.0,
            ..o
        },
    ] {
        let e = Sampler::new(bad).unwrap_err().to_string();
        assert!(e.starts_with("Sampler"), "{e}");
    }
}

/// A one-layer attention model over a vocabulary of 11: embedding,
/// self-attention with a cache, head.
struct Tiny {
    emb: Embedding,
    attn: MultiheadAttention,
    head: Linear,
    dev: Device,
}

impl Tiny {
    fn new(dev: Device) -> Tiny {
        manual_seed(17);
        let o = MhaOptions {
            batch_first: true,
            device: dev,
            num_kv_heads: Some(1),
            ..Default::default()
        };
        let to = |t: Tensor| t.to_device(dev).unwrap();
        Tiny {
            emb: Embedding::from_parts(to(
                Tensor::randn(&[11, 8], DType::F32, Device::Cpu).unwrap()
            ))
            .unwrap(),
            attn: MultiheadAttention::with_options(8, 2, o).unwrap(),
            head: Linear::from_parts(
                to(Tensor::randn(&[11, 8], DType::F32, Device::Cpu)
                    .unwrap()
                    .mul_scalar(3.0)
                    .unwrap()),
                None,
            )
            .unwrap(),
            dev,
        }
    }

    /// The whole sequence's logits without a cache (causal attention).
    fn full(&self, ids: &[u32]) -> Result<Tensor> {
        let x = self.ids(ids)?;
        let h = self.emb.forward(&x)?;
        let f = tensorscope::nn::MhaForward {
            is_causal: true,
            ..Default::default()
        };
        self.head.forward(&self.attn.attend(&h, &h, &h, &f)?.0)
    }

    fn ids(&self, ids: &[u32]) -> Result<Tensor> {
        let v: Vec<i64> = ids.iter().map(|&x| x as i64).collect();
        Tensor::from_vec(v, &[1, ids.len()], Device::Cpu)?.to_device(self.dev)
    }
}

impl CausalLm for Tiny {
    type Cache = KvCache;
    fn new_cache(&self, batch: usize, max_len: usize) -> Result<KvCache> {
        self.attn.new_kv_cache(batch, max_len)
    }
    fn forward(&self, ids: &Tensor, cache: &mut KvCache) -> Result<Tensor> {
        let h = self.emb.forward(ids)?;
        self.head.forward(&self.attn.forward_cached(&h, cache)?)
    }
    fn device(&self) -> Device {
        self.dev
    }
}

/// Greedy generation through the cache gives the tokens that recomputing
/// the whole sequence each step gives; the cache is sized once (prompt +
/// new tokens) and nothing is left allocated after; an end token stops a
/// sequence; `on_token` sees each token as chosen; a batch of two equal
/// prompts gives two equal rows; bad prompts are an `Err`.
fn generate_matches_recomputation(dev: Device) {
    let m = Tiny::new(dev);
    let prompt = vec![3u32, 1, 4, 1, 5];
    let mut want = prompt.clone();
    no_grad(|| {
        for _ in 0..12 {
            let logits = m.full(&want)?;
            let last = logits.narrow(1, want.len() - 1, 1)?.reshape(&[-1])?;
            want.push(last.argmax(0, false)?.item::<i64>()? as u32);
        }
        Ok::<(), tensorscope::Error>(())
    })
    .unwrap();
    let mut distinct = want[5..].to_vec();
    distinct.sort();
    distinct.dedup();
    assert!(distinct.len() >= 3, "a varied sequence: {want:?}");
    let before = memory::memory_allocated(dev);
    let o = GenerateOptions {
        max_new_tokens: 12,
        ..Default::default()
    };
    let mut seen = Vec::new();
    let out = generate(&m, std::slice::from_ref(&prompt), &o, |s, t| {
        seen.push((s, t))
    })
    .unwrap();
    assert_eq!(out.tokens[0], want[5..].to_vec());
    assert_eq!(seen, want[5..].iter().map(|&t| (0, t)).collect::<Vec<_>>());
    assert_eq!(out.steps, 11);
    assert_eq!(memory::memory_allocated(dev), before, "the cache is freed");
    let stop = want[5 + 3];
    let o = GenerateOptions {
        max_new_tokens: 12,
        eos_token_ids: vec![stop],
        ..Default::default()
    };
    let first = want[5..].iter().position(|&t| t == stop).unwrap();
    let out = generate(&m, &[prompt.clone(), prompt.clone()], &o, |_, _| {}).unwrap();
    assert_eq!(out.tokens[0], want[5..5 + first + 1].to_vec());
    assert_eq!(out.tokens[0], out.tokens[1]);
    let e = generate(&m, &[prompt.clone(), vec![1, 2]], &o, |_, _| {})
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("generate") && e.contains("[5, 2]"), "{e}");
}

/// Typed fields, defaults, transformers 4's and 5's RoPE fields, unknown
/// fields reported (not fatal), and errors naming the field and file.
#[test]
fn model_config_reads_hf_fields() {
    let _shared = common::shared();
    let v4 = ModelConfig::from_json(
        r#"{"hidden_size": 64, "rope_theta": 500000.0, "eos_token_id": [1, 2],
            "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}, "new_field": 1}"#,
    )
    .unwrap();
    assert_eq!(
        v4.rope().unwrap(),
        (
            500000.0,
            Some(RopeScaling::Llama3 {
                factor: 8.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_max_position_embeddings: 8192
            })
        )
    );
    assert_eq!(v4.ids("eos_token_id").unwrap(), vec![1, 2]);
    let known = ["hidden_size", "rope_theta", "eos_token_id", "rope_scaling"];
    assert_eq!(v4.warn_unknown(&known), vec!["new_field".to_string()]);
    let v5 = ModelConfig::from_json(
        r#"{"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}, "eos_token_id": 7}"#,
    )
    .unwrap();
    assert_eq!(v5.rope().unwrap(), (10000.0, None));
    assert_eq!(v5.ids("eos_token_id").unwrap(), vec![7]);
    assert_eq!(v5.f64_or("rms_norm_eps", 1e-6).unwrap(), 1e-6);
    let bad =
        ModelConfig::from_json(r#"{"hidden_size": "64", "rope_scaling": {"rope_type": "yarn"}}"#)
            .unwrap();
    let e = bad.usize("hidden_size").unwrap_err().to_string();
    assert!(e.contains("hidden_size") && e.contains("integer"), "{e}");
    assert!(bad.rope().unwrap_err().to_string().contains("yarn"));
    assert!(ModelConfig::from_json("[1]").is_err());
    let e = ModelConfig::from_file("/nonexistent/model")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("ModelConfig") && e.contains("/nonexistent/model"),
        "{e}"
    );
}

#[cfg(feature = "cuda")]
on_both!(generate_matches_recomputation);

#[cfg(not(feature = "cuda"))]
common::on_cpu!(generate_matches_recomputation);
