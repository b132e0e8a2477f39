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
(c) gpt_train_step / cnn_train_step: one training step of examples/gpt.rs's
    and examples/cnn.rs's models (issue 17 item 9). GPT: RMSNorm, causal
    self-attention (one in-projection to q, k, v, F.scaled_dot_product_attention
    with is_causal, the out-projection: nn.MultiheadAttention's parameters and
    computation, written as nanoGPT writes it), exact-GELU MLP, final RMSNorm,
    output tied to the token embedding; batch 16 x 128 characters of
    data/guide.txt, Adam lr 2e-3. CNN: three 3x3 'same' convolutions (1-16-32-32
    channels), two 2x2 max-pools, linear 128 -> 10; batch 64 of 1x8x8, Adam
    lr 3e-3.
    gpt_train_step_bf16 / cnn_train_step_bf16 (issue 49 item 8): the same
    with the forward and loss under torch.autocast("cpu", dtype=bfloat16).
    --peaks: each training row's peak, in a fresh interpreter (--peak ROW):
    the resident set's high-water mark over 3 steps, less its size before
    the model was made (benches/e2e.rs measures its own the same way).
"""

import argparse
import json
import math
import os
import statistics
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_timing import measure_budget, peak_in_fresh_process, status_bytes

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
    what = ("the same step, attention by scaled_dot_product_attention(is_causal)" if sdpa else
            "char LM, d128, 4 heads, 2 blocks, seq 64, batch 16, vocab 65: fwd + CE + bwd + Adam")
    train_row(out, name, what, model, 3e-4, x, y, 4.0)


GPT_SEQ, GPT_BATCH = 128, 16


class GptBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.RMSNorm(D)
        self.in_proj = nn.Linear(D, 3 * D)
        self.out_proj = nn.Linear(D, D)
        self.ln2 = nn.RMSNorm(D)
        self.fc = nn.Linear(D, 4 * D)
        self.proj = nn.Linear(4 * D, D)

    def forward(self, x):
        b, t = x.shape[0], x.shape[1]
        hd = D // HEADS
        q, k, v = self.in_proj(self.ln1(x)).split(D, dim=2)
        q, k, v = (z.reshape(b, t, HEADS, hd).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out_proj(a.transpose(1, 2).reshape(b, t, D))
        return x + self.proj(F.gelu(self.fc(self.ln2(x))))


class Gpt(nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.tok = nn.Embedding(vocab, D)
        self.pos = nn.Embedding(GPT_SEQ, D)
        self.blocks = nn.ModuleList(GptBlock() for _ in range(LAYERS))
        self.ln_f = nn.RMSNorm(D)
        self.register_buffer("positions", torch.arange(GPT_SEQ), persistent=False)
        for e in (self.tok, self.pos):  # GPT-2's embedding init, as the example
            nn.init.normal_(e.weight, std=0.02)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(self.positions[: idx.shape[1]])
        for b in self.blocks:
            x = b(x)
        return self.ln_f(x) @ self.tok.weight.t()


PROFILE = [0]


def make_step(model, lr, x, y, region):
    """One step: zero_grad, forward and the loss (under autocast("cpu",
    region) when given), backward, Adam; returns the step function."""
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=region, enabled=region is not None):
            logits = model(x)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())

    return step, losses


def train_row(out, name, what, model, lr, x, y, budget, region=None):
    step, losses = make_step(model, lr, x, y, region)
    s = measure_budget(budget, 10, step)
    if PROFILE[0]:
        # --profile N: N more steps under torch.profiler, its per-op table
        # on stderr (benches/e2e.rs --profile N prints tensorscope's).
        from torch.profiler import profile, ProfilerActivity
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            for _ in range(PROFILE[0]):
                step()
        print(f"{name}: {PROFILE[0]} steps profiled", file=sys.stderr)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=40), file=sys.stderr)
        print(prof.key_averages(group_by_input_shape=True).table(sort_by="self_cpu_time_total", row_limit=25), file=sys.stderr)
    nparams = sum(p.numel() for p in model.parameters())
    print(f"{name} {statistics.median(s) * 1e3:.3f} ms ({len(s)} samples; loss {losses[0]:.4f} "
          f"at step 1, {losses[-1]:.4f} at step {len(losses)}; {nparams} parameters)", file=sys.stderr)
    out[name] = row(s, what)


def gpt_setup():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "data", "guide.txt"), encoding="utf-8") as f:
        text = f.read()
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    ids = torch.tensor([index[c] for c in text])
    g = torch.Generator().manual_seed(5)
    at = torch.randint(0, len(ids) - GPT_SEQ - 1, (GPT_BATCH,), generator=g)
    x = torch.stack([ids[a : a + GPT_SEQ] for a in at])
    y = torch.stack([ids[a + 1 : a + GPT_SEQ + 1] for a in at]).reshape(-1)
    return Gpt(len(chars)), x, y


def cnn_setup():
    same = dict(kernel_size=3, padding="same")
    net = nn.Sequential(nn.Conv2d(1, 16, **same), nn.ReLU(), nn.Conv2d(16, 32, **same), nn.ReLU(),
                        nn.MaxPool2d(2), nn.Conv2d(32, 32, **same), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Flatten(), nn.Linear(32 * 2 * 2, 10))
    x = torch.rand(64, 1, 8, 8)
    y = torch.randint(0, 10, (64,))
    return net, x, y


GPT_WHAT = ("examples/gpt.rs's model (RMSNorm, causal MHA, GELU MLP, tied head; d128, 4 heads, 2 blocks), "
            "batch 16 x 128 characters: fwd + CE + bwd + Adam")
CNN_WHAT = ("examples/cnn.rs's model (3 convs 3x3 same, 2 max-pools, linear), batch 64 of 1x8x8: "
            "fwd + CE + bwd + Adam")
# benches/e2e.rs's PROGRAMS: (name, what, setup, budget, lr, autocast dtype).
PROGRAMS = [
    ("gpt_train_step", GPT_WHAT, gpt_setup, 4.0, 2e-3, None),
    ("gpt_train_step_bf16", GPT_WHAT, gpt_setup, 4.0, 2e-3, torch.bfloat16),
    ("cnn_train_step", CNN_WHAT, cnn_setup, 2.0, 3e-3, None),
    ("cnn_train_step_bf16", CNN_WHAT, cnn_setup, 2.0, 3e-3, torch.bfloat16),
]
PEAK_STEPS = 3


def peak_mode(program):
    """--peak PROGRAM: the model and batch made, PEAK_STEPS steps, and the
    resident set's high-water mark over its size before, printed."""
    _, _, setup, _, lr, region = next(p for p in PROGRAMS if p[0] == program)
    before = status_bytes("VmRSS:")
    model, x, y = setup()
    step, _ = make_step(model, lr, x, y, region)
    for _ in range(PEAK_STEPS):
        step()
    print(max(0, status_bytes("VmHWM:") - before))


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


@torch.inference_mode()
def mlp_service(out, want):
    """benches/e2e.rs's mlp_service: 20,000 rows in 512-row chunks, each copied into the request's output."""
    if not want("mlp_service"):
        return
    torch.manual_seed(0)
    net = nn.Sequential(nn.LayerNorm(256), nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 1024), nn.GELU(),
                        nn.Linear(1024, 16))
    x = torch.from_numpy(np.random.default_rng(13).uniform(0, 1, size=(20000, 256)).astype(np.float32))
    y = torch.empty(20000, 16)

    def request():
        for start in range(0, 20000, 512):
            y[start:start + 512].copy_(net(x[start:start + 512]))

    s = measure_budget(3.0, 3, request)
    out["mlp_service"] = row(s, "LayerNorm, Linear 256-1024, GELU, Linear 1024-1024, GELU, Linear 1024-16 "
                                "(nn.Sequential): one request of 20,000 rows in 512-row chunks, each copied into "
                                "the request's output")
    print(f"{'mlp_service':<24} {statistics.median(s) * 1e3:.1f} ms", file=sys.stderr)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--json")
    p.add_argument("--filter")
    p.add_argument("--profile", type=int, default=0)
    p.add_argument("--peaks", action="store_true", help="the training rows' peaks, each in a fresh interpreter")
    p.add_argument("--peak", help="one training row's peak in this process (printed)")
    a = p.parse_args()
    PROFILE[0] = a.profile
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    if a.peak:
        return peak_mode(a.peak)
    flt = [f for f in (a.filter or "").split(",") if f]
    want = lambda n: not flt or any(f in n for f in flt)
    print(f"torch {torch.__version__} end-to-end (intra-op threads: {torch.get_num_threads()})", file=sys.stderr)
    out = {}
    for sdpa in (False, True):
        name = "transformer_train_step_sdpa" if sdpa else "transformer_train_step"
        if not flt or any(name == f or (f != "transformer_train_step" and f in name) for f in flt):
            transformer(out, sdpa)
    for name, what, setup, budget, lr, region in PROGRAMS:
        if want(name):
            torch.manual_seed(0)
            model, x, y = setup()
            train_row(out, name, what, model, lr, x, y, budget, region)
            if a.peaks:
                out[name]["peak_bytes"] = peak_in_fresh_process(__file__, a.threads, name, "the model")
    service(out, want)
    mlp_service(out, want)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"library": "torch", "version": torch.__version__, "threads": torch.get_num_threads(),
                       "workloads": out}, f, indent=2)


if __name__ == "__main__":
    main()
