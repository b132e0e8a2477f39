#!/usr/bin/env python3
"""PyTorch twin of examples/perf_items.rs (issue 14, items 4 and 5): the same
workloads, the same warm-up and sampling, torch.set_num_threads(2) unless
TORCH_THREADS says otherwise.

    python3 examples/perf_items.py [FILTER]
"""

import json
import os
import sys
import time

import torch

torch.set_num_threads(int(os.environ.get("TORCH_THREADS", "2")))


def timed(name, f):
    for _ in range(3):
        f()
    t = time.perf_counter()
    f()
    one = max(time.perf_counter() - t, 1e-7)
    batch = min(max(int(0.02 / one), 1), 10_000)
    samples = []
    for _ in range(15):
        t = time.perf_counter()
        for _ in range(batch):
            f()
        samples.append((time.perf_counter() - t) / batch)
    samples.sort()
    print(json.dumps({"lib": "torch", "name": name, "us": round(samples[len(samples) // 2] * 1e6, 3)}))


def rows_index(n, rows):
    s, v = 12345, []
    m = (1 << 64) - 1
    for _ in range(n):
        s = (s * 6364136223846793005 + 1442695040888963407) & m
        v.append((s >> 33) % rows)
    return torch.tensor(v, dtype=torch.int64)


def main(flt):
    want = lambda n: flt is None or flt in n
    torch.manual_seed(0)
    with torch.no_grad():
        if want("sum_dim1") or want("bcast") or want("center"):
            x = torch.randn(512, 1024)
            col = torch.randn(512, 1)
            row = torch.randn(1, 1024)
            if want("sum_dim1"):
                timed("sum_dim1", lambda: x.sum(1))
            if want("bcast_col"):
                timed("bcast_col", lambda: x + col)
            if want("bcast_row"):
                timed("bcast_row", lambda: x + row)
            if want("bcast_col_expand"):
                timed("bcast_col_expand", lambda: col.expand(512, 1024).contiguous())
            if want("center"):
                timed("center", lambda: x - x.mean(1, keepdim=True))
        for name, m, n, k in [
            ("linear_512x1024_w16", 512, 16, 1024),
            ("linear_64x1024_w1024", 64, 1024, 1024),
            ("linear_1024_sq", 1024, 1024, 1024),
            ("linear_1x784_w1024", 1, 1024, 784),
        ]:
            if want(name):
                x = torch.randn(m, k)
                w = torch.randn(n, k)
                b = torch.randn(n)
                timed(name, lambda: torch.nn.functional.linear(x, w))
                timed(name + "_bias", lambda: torch.nn.functional.linear(x, w, b))
        if want("matmul_1024"):
            a = torch.randn(1024, 1024)
            b = torch.randn(1024, 1024)
            timed("matmul_1024", lambda: a @ b)
        for name, bt, m, k, n in [
            ("bmm_64x128x64x128", 64, 128, 64, 128),
            ("bmm_256x32x32x32", 256, 32, 32, 32),
            ("bmm_8x512x512x512", 8, 512, 512, 512),
        ]:
            if want(name):
                a = torch.randn(bt, m, k)
                b = torch.randn(bt, k, n)
                timed(name, lambda: a @ b)
        if want("index_select") or want("embedding") or want("index_add"):
            table = torch.randn(50000, 256)
            idx = rows_index(512, 50000)
            if want("index_select"):
                timed("index_select_rows", lambda: table.index_select(0, idx))
            if want("index_add"):
                acc = torch.zeros(50000, 256)
                src = torch.randn(512, 256)
                timed("index_add_rows", lambda: acc.index_add_(0, idx, src))
    if want("embedding"):
        emb = torch.nn.Embedding(50000, 256)
        with torch.no_grad():
            timed("embedding_fwd", lambda: emb(idx))

        def fwd_bwd():
            emb(idx).sum().backward()
            emb.weight.grad = None

        timed("embedding_fwd_bwd", fwd_bwd)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
