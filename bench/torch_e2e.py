#!/usr/bin/env python3
"""PyTorch twin of benches/e2e.rs: the same two programs, the same
computation, the same sample rule (benches/common/timing.rs's
measure_budget), on the CPU in float32.

    python3 bench/torch_e2e.py --threads N [--json PATH] [--filter A,B,..]

(a) transformer_train_step: one training step of a char-level transformer
    LM (d 128, 4 heads, 2 pre-norm blocks, MLP with exact GELU, seq 64,
    batch 16, vocab 65; causal mask by masked_fill with -inf; Adam lr 3e-4).
(b) mlp_serve_bN / mlp_serve_out_bN: an MLP 784-1024-1024-10 answering a
    request of batch N under no_grad; host data in (a copy), logits out (a
    copy); the _out form writes the activations into buffers made once.
"""

import argparse
import json
import math
import statistics
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_timing import measure_budget

VOCAB, D, HEADS, SEQ, BATCH, LAYERS = 65, 128, 4, 64, 16, 2


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.ln2 = nn.LayerNorm(D)
        self.fc = nn.Linear(D, 4 * D)
        self.out = nn.Linear(4 * D, D)

    def forward(self, x, mask, sdpa):
        b, t = x.shape[0], x.shape[1]
        hd = D // HEADS
        qkv = self.qkv(self.ln1(x))
        q, k, v = (qkv.narrow(2, i * D, D).reshape(b, t, HEADS, hd).transpose(1, 2) for i in range(3))
        if sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
            att = att.masked_fill(mask, float("-inf")).softmax(-1)
            y = att @ v
        y = y.transpose(1, 2).contiguous().reshape(b, t, D)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class CharTransformer(nn.Module):
    def __init__(self, sdpa):
        super().__init__()
        self.sdpa = sdpa
        self.tok = nn.Embedding(VOCAB, D)
        self.pos = nn.Embedding(SEQ, D)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(D)
        self.head = nn.Linear(D, VOCAB)
        positions = torch.arange(SEQ)
        self.register_buffer("positions", positions, persistent=False)
        self.register_buffer("mask", positions.view(1, SEQ) > positions.view(SEQ, 1), persistent=False)

    def forward(self, idx):
        t = idx.shape[1]
        pos = self.pos(self.positions[:t])
        mask = self.mask[:t, :t]
        x = self.tok(idx) + pos
        for b in self.blocks:
            x = b(x, mask, self.sdpa)
        return self.head(self.ln_f(x))


def transformer(out, sdpa):
    name = "transformer_train_step_sdpa" if sdpa else "transformer_train_step"
    model = CharTransformer(sdpa)
    text = torch.randint(0, VOCAB, (BATCH, SEQ + 1))
    x = text[:, :SEQ].contiguous()
    y = text[:, 1:].reshape(-1)
    opt = torch.optim.Adam(model.parameters(), lr=3e-4)
    losses = []

    def step():
        opt.zero_grad(set_to_none=True)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())

    s = measure_budget(4.0, 10, step)
    nparams = sum(p.numel() for p in model.parameters())
    print(f"{name} {statistics.median(s) * 1e3:.3f} ms ({len(s)} samples; loss {losses[0]:.4f} "
          f"at step 1, {losses[-1]:.4f} at step {len(losses)}; {nparams} parameters)", file=sys.stderr)
    what = ("the same step, attention by scaled_dot_product_attention(is_causal)" if sdpa else
            "char LM, d128, 4 heads, 2 blocks, seq 64, batch 16, vocab 65: fwd + CE + bwd + Adam")
    out[name] = row(s, what)


def row(s, what):
    return {"median_s": statistics.median(s), "min_s": min(s), "max_s": max(s), "samples": len(s), "what": what}


@torch.no_grad()
def service(out, want):
    net = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
    lin = [(m.weight.t(), m.bias) for m in net if isinstance(m, nn.Linear)]
    rng = np.random.default_rng(11)
    for batch in (1, 8, 64):
        req = rng.uniform(-1, 1, size=(batch, 784)).astype(np.float32)
        name = f"mlp_serve_b{batch}"
        if want(name):
            def serve():
                x = torch.from_numpy(req).clone()
                y = net(x)
                return y.numpy().copy()

            s = measure_budget(1.0, 10, serve)
            out[name] = row(s, "MLP 784-1024-1024-10: tensor from host data, net(x), logits to host")
            print(f"{name:<24} {statistics.median(s) * 1e6:.1f} us", file=sys.stderr)
        name = f"mlp_serve_out_b{batch}"
        if want(name):
            bufs = [torch.empty(batch, n) for n in (1024, 1024, 10)]

            def serve_out():
                h = torch.from_numpy(req).clone()
                for i, ((wt, b), o) in enumerate(zip(lin, bufs)):
                    torch.matmul(h, wt, out=o)
                    o.add_(b)
                    if i < 2:
                        o.relu_()
                    h = o
                return h.numpy().copy()

            s = measure_budget(1.0, 10, serve_out)
            out[name] = row(s, "MLP 784-1024-1024-10: tensor from host data, matmul(out=) + add_ + relu_ "
                               "into buffers, logits to host")
            print(f"{name:<24} {statistics.median(s) * 1e6:.1f} us", file=sys.stderr)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--json")
    p.add_argument("--filter")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    flt = [f for f in (a.filter or "").split(",") if f]
    want = lambda n: not flt or any(f in n for f in flt)
    print(f"torch {torch.__version__} end-to-end (intra-op threads: {torch.get_num_threads()})", file=sys.stderr)
    out = {}
    for sdpa in (False, True):
        name = "transformer_train_step_sdpa" if sdpa else "transformer_train_step"
        if not flt or any(name == f or (f != "transformer_train_step" and f in name) for f in flt):
            transformer(out, sdpa)
    service(out, want)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"library": "torch", "version": torch.__version__, "threads": torch.get_num_threads(),
                       "workloads": out}, f, indent=2)


if __name__ == "__main__":
    main()
