"""The benchmark models of bench/run_interop.sh: a GPT-2 and a Llama
random-init by transformers from a config (seeded) and saved with
save_pretrained into DIR/gpt2-bench and DIR/llama-bench (about 90 MB
each; not committed). Skips a folder that is already there.

    python3 bench/interop_models.py DIR
"""

import os
import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

out = sys.argv[1]
VOCAB = 8192
models = {
    # GPT-2 small's shape at 6 layers of d 512 (GPT-2 small: 12 of 768).
    "gpt2-bench": lambda: GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_positions=512, n_embd=512, n_layer=6,
                                                     n_head=8, bos_token_id=0, eos_token_id=0)),
    # A Llama of the same width: 8 query heads over 2 key/value heads,
    # SwiGLU 1408, RoPE with Llama 3 scaling.
    "llama-bench": lambda: LlamaForCausalLM(LlamaConfig(
        vocab_size=VOCAB, hidden_size=512, intermediate_size=1408, num_hidden_layers=6, num_attention_heads=8,
        num_key_value_heads=2, max_position_embeddings=1024, rms_norm_eps=1e-5, tie_word_embeddings=False,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 256})),
}
for name, make in models.items():
    path = os.path.join(out, name)
    if os.path.exists(os.path.join(path, "config.json")):
        continue
    torch.manual_seed(0)
    make().eval().save_pretrained(path, safe_serialization=True)
    print(f"wrote {path}", file=sys.stderr)
