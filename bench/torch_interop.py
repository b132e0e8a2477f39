#!/usr/bin/env python3
"""PyTorch + transformers twin of benches/interop.rs: the same folders
(bench/interop_models.py), the same workloads, the same sample rule
(benches/common/timing.rs's measure_budget), on the CPU in float32.

    python3 bench/torch_interop.py --threads N [--json PATH] [--filter A,B,..]

* <model>_forward_b4x128: model(ids[4, 128], use_cache=False).logits
  under torch.no_grad();
* <model>_generate_64: model.generate(prompt[1, 32], max_new_tokens=64,
  min_new_tokens=64, do_sample=False) (its KV cache, greedy).
Each row also records its peak memory: in a fresh interpreter (--peak),
the resident set's peak (VmHWM) over loading the model and one call, less
its size before the load, as the Rust side measures its own.
"""

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch
import transformers
from transformers import AutoModelForCausalLM

from torch_timing import measure_budget, peak_in_fresh_process, status_bytes

VOCAB = 8192


def ids(b, t):
    return torch.tensor([(i * 7919 + 13) % VOCAB for i in range(b * t)], dtype=torch.int64).reshape(b, t)


def workloads(name, root):
    m = AutoModelForCausalLM.from_pretrained(os.path.join(root, f"{name}-bench"), dtype=torch.float32).eval()
    m.generation_config.eos_token_id = None
    x = ids(4, 128)
    prompt = ids(1, 32)

    def fwd():
        with torch.no_grad():
            m(x, use_cache=False).logits

    def gen():
        with torch.no_grad():
            out = m.generate(prompt, max_new_tokens=64, min_new_tokens=64, do_sample=False, pad_token_id=0)
        assert out.shape[1] == 32 + 64

    return [
        (f"{name}_forward_b4x128", fwd, f"{name}: logits of 4 x 128 tokens (no_grad)", 3.0),
        (f"{name}_generate_64", gen, f"{name}: 64 greedy tokens after 32 (batch 1, KV cache)", 4.0),
    ]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--json")
    p.add_argument("--filter")
    p.add_argument("--peak", help="one workload's peak memory in this process (printed)")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    want = lambda n: not a.filter or any(f in n for f in a.filter.split(","))
    root = os.environ.get("INTEROP_MODELS", "target/interop-models")
    print(f"torch {torch.__version__}, transformers {transformers.__version__} interop (threads {a.threads}, "
          f"capability {torch.backends.cpu.get_cpu_capability()}, models in {root})", file=sys.stderr)
    if a.peak:
        before = status_bytes("VmRSS:")
        dict((w, op) for w, op, _, _ in workloads(a.peak.split("_")[0], root))[a.peak]()
        print(max(status_bytes("VmHWM:") - before, 0))
        return
    rows = {}
    for name in ["gpt2", "llama"]:
        # A model is loaded when one of its rows is wanted (the Rust side's rule).
        if not any(want(f"{name}_{r}") for r in ("forward_b4x128", "generate_64")):
            continue
        for w, op, what, budget in workloads(name, root):
            if not want(w):
                continue
            s = measure_budget(budget, 3, op)
            print(f"  {w}: {statistics.median(s) * 1e3:.3f} ms", file=sys.stderr)
            rows[w] = {"median_s": statistics.median(s), "min_s": min(s), "max_s": max(s), "samples": len(s),
                       "what": what, "peak_bytes": peak_in_fresh_process(__file__, a.threads, w, "loading")}
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"library": "torch", "version": torch.__version__, "threads": torch.get_num_threads(),
                       "workloads": rows}, f, indent=2)


if __name__ == "__main__":
    main()
