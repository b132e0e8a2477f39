#!/usr/bin/env python3
"""PyTorch's side of the op matrix (issue 14, item 7): the rows of
benches/ops.rs with the same shapes, input distributions and sample rule,
on the CPU in float32.

    python3 bench/torch_ops.py --threads N [--json PATH] [--filter A,B,..]

`--threads` is passed to torch.set_num_threads (bench/run_ops.sh gives the
thread count tensorscope uses). Forward rows run under torch.no_grad(), as
tensorscope's do. Python's own call overhead is part of every figure, as it
is for anyone who calls PyTorch from Python.

A new unary op is one line in UNARY (and one in `unary_ops` of
benches/ops.rs).
"""

import argparse
import json
import statistics
import sys

from torch_timing import measure_budget

import torch
import torch.nn.functional as F

# name, domain ("any": randn; "pos": rand + 0.5), function
UNARY = [
    ("neg", "any", torch.neg),
    ("abs", "any", torch.abs),
    ("exp", "any", torch.exp),
    ("log", "pos", torch.log),
    ("log1p", "pos", torch.log1p),
    ("log2", "pos", torch.log2),
    ("exp2", "any", torch.exp2),
    ("expm1", "any", torch.expm1),
    ("tan", "any", torch.tan),
    ("asin", "any", torch.asin),
    ("acos", "any", torch.acos),
    ("atan", "any", torch.atan),
    ("sinh", "any", torch.sinh),
    ("cosh", "any", torch.cosh),
    ("ceil", "any", torch.ceil),
    ("trunc", "any", torch.trunc),
    ("sqrt", "pos", torch.sqrt),
    ("rsqrt", "pos", torch.rsqrt),
    ("sin", "any", torch.sin),
    ("cos", "any", torch.cos),
    ("tanh", "any", torch.tanh),
    ("sigmoid", "any", torch.sigmoid),
    ("relu", "any", torch.relu),
    ("gelu", "any", F.gelu),
    ("erf", "any", torch.erf),
    ("floor", "any", torch.floor),
    ("round", "any", torch.round),
    ("sign", "any", torch.sign),
    ("reciprocal", "pos", torch.reciprocal),
    ("square", "any", torch.square),
    ("clamp", "any", lambda x: torch.clamp(x, -0.5, 0.5)),
    ("silu", "any", F.silu),
    ("softplus", "any", F.softplus),
    ("gelu_tanh", "any", lambda x: F.gelu(x, approximate="tanh")),
]
UNARY_FWD_BWD = ["exp", "tanh", "sigmoid", "gelu", "erf", "silu", "gelu_tanh"]

BINARY = [
    ("add", torch.add),
    ("sub", torch.sub),
    ("mul", torch.mul),
    ("div", torch.div),
    ("pow", torch.pow),
    ("maximum", torch.maximum),
    ("minimum", torch.minimum),
    ("gt", torch.gt),
]

SCALAR = [
    ("add_scalar", "any", lambda x: x + 1.0),
    ("mul_scalar", "any", lambda x: x * 3.0),
    ("div_scalar", "any", lambda x: x / 3.0),
    ("rsub_scalar", "any", lambda x: 1.0 - x),
    ("pow_scalar_1.5", "pos", lambda x: x ** 1.5),
]

REDUCTIONS = [
    ("sum_dim0", lambda x: x.sum(0)),
    ("sum_dim1", lambda x: x.sum(1)),
    ("sum_all", lambda x: x.sum()),
    ("mean_dim0", lambda x: x.mean(0)),
    ("mean_dim1", lambda x: x.mean(1)),
    ("mean_all", lambda x: x.mean()),
    ("max_dim0", lambda x: x.amax(0)),
    ("max_dim1", lambda x: x.amax(1)),
    ("max_all", lambda x: x.max()),
    ("argmax_dim1", lambda x: x.argmax(1)),
    ("softmax", lambda x: torch.softmax(x, -1)),
    ("log_softmax", lambda x: torch.log_softmax(x, -1)),
]

SIZES = {
    # label: (elementwise shape, (m, k, n), budget seconds, least samples)
    "small": ((8, 8), (64, 64, 64), 0.15, 5),
    "medium": ((512, 1024), (512, 1024, 1024), 0.3, 5),
    "large": ((4096, 4096), (4096, 4096, 4096), 0.6, 3),
}


class Rows:
    def __init__(self, flt):
        self.filter = [f for f in (flt or "").split(",") if f]
        self.out = {}

    def run(self, name, size, what, op):
        full = f"{name}/{size}"
        if self.filter and not any(f in full for f in self.filter):
            return
        _, _, budget, min_reps = SIZES[size]
        s = measure_budget(budget, min_reps, op)
        med = statistics.median(s)
        self.out[full] = {"median_s": med, "min_s": min(s), "max_s": max(s), "samples": len(s), "what": what}
        print(f"{full:<28} {fmt_s(med):>12} ({len(s)} samples)", file=sys.stderr)


def fmt_s(s):
    if s >= 1e-3:
        return f"{s * 1e3:.3f} ms"
    if s >= 1e-6:
        return f"{s * 1e6:.3f} us"
    return f"{s * 1e9:.1f} ns"


def inp(shape, domain="any"):
    if domain == "pos":
        return torch.rand(shape, dtype=torch.float32) + 0.5
    return torch.randn(shape, dtype=torch.float32)


def shape_str(s):
    return "[" + ",".join(str(d) for d in s) + "]"


SDPA_SEQS = (128, 512, 2048)


def attention(q, k, v):
    return torch.softmax(q @ k.transpose(-2, -1) / 8.0, -1) @ v


@torch.no_grad()
def forward_rows(rows, size):
    sh, (m, k, n), _, _ = SIZES[size]
    ews = shape_str(sh)
    x = {"any": inp(sh), "pos": inp(sh, "pos")}
    other = inp(sh)
    for name, d, f in UNARY:
        xx = x[d]
        rows.run(name, size, ews, lambda: f(xx))
    for name, f in BINARY:
        a = x["pos"] if name == "pow" else x["any"]
        rows.run(name, size, f"{ews} {name} {ews}", lambda: f(a, other))
    row = inp((1, sh[1]))
    col = inp((sh[0], 1))
    a = x["any"]
    for name, b in (("add_row", row), ("add_col", col)):
        rows.run(name, size, f"{ews} + {shape_str(b.shape)}", lambda: a + b)
    for name, d, f in SCALAR:
        xx = x[d]
        rows.run(name, size, ews, lambda: f(xx))
    mask = other > 0
    rows.run("masked_fill", size, f"{ews}, bool mask", lambda: a.masked_fill(mask, float("-inf")))
    for name, f in REDUCTIONS:
        rows.run(name, size, ews, lambda: f(a))
    w, b = torch.ones(sh[1]), torch.zeros(sh[1])
    rows.run("layer_norm", size, f"{ews} over the last dim, affine", lambda: F.layer_norm(a, (sh[1],), w, b))
    del x, other, row, col, mask, a

    a = inp((m, k))
    bm = inp((k, n))
    w = inp((n, k))
    bias = inp((n,))
    rows.run("matmul", size, f"[{m},{k}]@[{k},{n}]", lambda: a @ bm)
    rows.run("linear", size, f"x[{m},{k}] W[{n},{k}] + b[{n}]", lambda: F.linear(a, w, bias))
    rows.run("transpose_contiguous", size, f"[{m},{k}].t().contiguous()", lambda: a.t().contiguous())


@torch.no_grad()
def fixed_rows(rows):
    size = "medium"
    x = inp((512, 1024))
    w = inp((16, 1024))
    b = inp((16,))
    rows.run("linear_skinny", size, "x[512,1024] W[16,1024] + b[16]", lambda: F.linear(x, w, b))
    t = torch.randint(0, 1024, (512,))
    rows.run("cross_entropy", size, "logits [512,1024], targets [512], mean", lambda: F.cross_entropy(x, t))
    a = inp((64, 128, 64))
    bb = inp((64, 64, 128))
    rows.run("bmm", size, "[64,128,64]@[64,64,128]", lambda: a @ bb)
    table = inp((50000, 256))
    idx = torch.randint(0, 50000, (512,))
    rows.run("index_select", size, "512 rows of [50000,256]", lambda: table.index_select(0, idx))
    del table
    emb = torch.nn.Embedding(50000, 256)
    tok = torch.randint(0, 50000, (16, 32))
    rows.run("embedding", size, "Embedding(50000,256), idx [16,32]", lambda: emb(tok))
    q, k, v = inp((8, 4, 64, 64)), inp((8, 4, 64, 64)), inp((8, 4, 64, 64))
    rows.run("attention", size, "softmax(q k^T / 8) v, q,k,v [8,4,64,64]", lambda: attention(q, k, v))
    rows.run("sdpa", size, "scaled_dot_product_attention, q,k,v [8,4,64,64]",
             lambda: F.scaled_dot_product_attention(q, k, v))
    for seq in SDPA_SEQS:
        q, k, v = inp((1, 8, seq, 64)), inp((1, 8, seq, 64)), inp((1, 8, seq, 64))
        rows.run(f"sdpa_causal_{seq}", size, f"scaled_dot_product_attention, causal, q,k,v [1,8,{seq},64]",
                 lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    x = inp((8, 64, 32, 32))
    w = inp((64, 64, 3, 3))
    rows.run("conv2d", size, "x[8,64,32,32] W[64,64,3,3] padding 1", lambda: F.conv2d(x, w, None, 1, 1))
    rows.run("max_pool2d", size, "x[8,64,32,32] 2x2", lambda: F.max_pool2d(x, 2))


def fwd_bwd_rows(rows):
    size = "medium"
    sh = SIZES[size][0]
    ews = shape_str(sh)
    g = inp(sh)

    def step(f, params, grad):
        def run():
            f().backward(grad)
            for p in params:
                p.grad = None
        return run

    for name, d, f in UNARY:
        if name not in UNARY_FWD_BWD:
            continue
        x = inp(sh, d).requires_grad_(True)
        rows.run(f"{name}_fwd_bwd", size, ews, step(lambda: f(x), [x], g))
    x = inp(sh).requires_grad_(True)
    rows.run("softmax_fwd_bwd", size, ews, step(lambda: torch.softmax(x, -1), [x], g))
    rows.run("log_softmax_fwd_bwd", size, ews, step(lambda: torch.log_softmax(x, -1), [x], g))
    ln = torch.nn.LayerNorm(sh[1])
    rows.run("layer_norm_fwd_bwd", size, f"{ews} over the last dim, affine",
             step(lambda: ln(x), [x, ln.weight, ln.bias], g))
    t = torch.randint(0, 1024, (512,))
    rows.run("cross_entropy_fwd_bwd", size, "logits [512,1024], targets [512], mean",
             step(lambda: F.cross_entropy(x, t), [x], None))
    w = inp((1024, 1024)).requires_grad_(True)
    b = inp((1024,)).requires_grad_(True)
    rows.run("linear_fwd_bwd", size, "x[512,1024] W[1024,1024] + b[1024]",
             step(lambda: F.linear(x, w, b), [x, w, b], g))
    q, k, v = (inp((8, 4, 64, 64)).requires_grad_(True) for _ in range(3))
    ga = inp((8, 4, 64, 64))
    rows.run("attention_fwd_bwd", size, "softmax(q k^T / 8) v, q,k,v [8,4,64,64]",
             step(lambda: attention(q, k, v), [q, k, v], ga))
    rows.run("sdpa_fwd_bwd", size, "scaled_dot_product_attention, q,k,v [8,4,64,64]",
             step(lambda: F.scaled_dot_product_attention(q, k, v), [q, k, v], ga))
    for seq in SDPA_SEQS:
        q, k, v = (inp((1, 8, seq, 64)).requires_grad_(True) for _ in range(3))
        ga = inp((1, 8, seq, 64))
        rows.run(f"sdpa_causal_{seq}_fwd_bwd", size, f"scaled_dot_product_attention, causal, q,k,v [1,8,{seq},64]",
                 step(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), [q, k, v], ga))
    x = inp((8, 64, 32, 32)).requires_grad_(True)
    w = inp((64, 64, 3, 3)).requires_grad_(True)
    gy = inp((8, 64, 32, 32))
    rows.run("conv2d_fwd_bwd", size, "x[8,64,32,32] W[64,64,3,3] padding 1",
             step(lambda: F.conv2d(x, w, None, 1, 1), [x, w], gy))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--json")
    p.add_argument("--filter")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(f"torch {torch.__version__} op matrix (intra-op threads: {torch.get_num_threads()})", file=sys.stderr)
    rows = Rows(args.filter)
    for size in SIZES:
        forward_rows(rows, size)
    fixed_rows(rows)
    fwd_bwd_rows(rows)
    if args.json:
        doc = {"library": "torch", "version": torch.__version__, "threads": torch.get_num_threads(),
               "mkldnn": torch.backends.mkldnn.is_available(),
               "config": torch.__config__.parallel_info().strip().splitlines()[:6],
               "workloads": rows.out}
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)


if __name__ == "__main__":
    main()
