#!/usr/bin/env python3
"""PyTorch CPU's side of the CPU benchmark: the workloads of benches/cpu.rs,
with the same warm-up, sample counts and batching.

    python3 bench/torch_cpu.py --json PATH [--filter NAME]

PyTorch has no public raw-allocator entry point on the CPU, so
`alloc_free_raw` is not run here. Python's own overhead is part of every
figure, as it is for anyone who calls PyTorch from Python.
"""

import argparse
import json
import statistics
import sys

import torch

import torch_timing as timing  # bench/, the script's own directory

N16M = 16 * 1024 * 1024
SIDE = 4096
MM = 1024
CHAIN = 1000
PAIRS = 10_000


def measure(name, what, warmup, reps, batch, op):
    return {"name": name, "what": what, "samples": timing.measure(warmup, reps, batch, op)}


def workloads(flt):
    want = lambda n: flt is None or flt in n
    out = []
    torch.manual_seed(0)
    if want("add_alloc") or want("add_out"):
        a = torch.rand(N16M, dtype=torch.float32)
        b = torch.rand(N16M, dtype=torch.float32)
        if want("add_alloc"):
            out.append(measure("add_alloc", "a + b, 16M f32, result freshly allocated (and dropped) each time",
                               5, 40, 1, lambda: a + b))
        if want("add_out"):
            c = torch.empty(N16M, dtype=torch.float32)
            out.append(measure("add_out", "torch.add(a, b, out=c), 16M f32",
                               5, 40, 1, lambda: torch.add(a, b, out=c)))
        del a, b
    if want("add_transposed"):
        a = torch.rand(SIDE, SIDE, dtype=torch.float32)
        b = torch.rand(SIDE, SIDE, dtype=torch.float32)
        at = a.t()
        out.append(measure("add_transposed", "a.t() + b, 4096x4096 f32, result freshly allocated",
                           3, 20, 1, lambda: at + b))
        del a, b, at
    if want("matmul"):
        a = torch.rand(MM, MM, dtype=torch.float32)
        b = torch.rand(MM, MM, dtype=torch.float32)
        out.append(measure("matmul", "a @ b, 1024x1024 by 1024x1024 f32, result freshly allocated",
                           3, 20, 1, lambda: a @ b))
    if want("chain_add"):
        y = torch.ones(1, dtype=torch.float32)
        state = {"x": torch.zeros(1, dtype=torch.float32)}

        def chain():
            x = state["x"]
            for _ in range(CHAIN):
                x = x + y
            state["x"] = x

        m = measure("chain_add", "x = x + y, 1000 times, on 1-element f32 tensors (per op)", 5, 50, 1, chain)
        assert state["x"].item() == 55 * CHAIN, "chain_add computed the wrong sum"
        m["samples"] = [s / CHAIN for s in m["samples"]]
        out.append(m)
    if want("alloc_free"):
        out.append(measure("alloc_free", "torch.empty(256) + drop", PAIRS, 50, PAIRS,
                           lambda: torch.empty(256, dtype=torch.float32)))
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--json")
    p.add_argument("--filter")
    args = p.parse_args()
    res = workloads(args.filter)
    threads = torch.get_num_threads()
    print(f"torch {torch.__version__} (intra-op threads: {threads})", file=sys.stderr)
    rows = {}
    for m in res:
        s = m["samples"]
        rows[m["name"]] = {"median_s": statistics.median(s), "min_s": min(s), "max_s": max(s),
                           "samples": len(s), "what": m["what"]}
        print(f"{m['name']:<16} median {statistics.median(s):.6e} s  min {min(s):.6e} s  "
              f"max {max(s):.6e} s  ({len(s)} samples)", file=sys.stderr)
    if args.json:
        doc = {"library": "torch", "version": torch.__version__, "threads": threads,
               "mkldnn": torch.backends.mkldnn.is_available(),
               "config": torch.__config__.parallel_info().strip().splitlines()[:6],
               "workloads": rows}
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)


if __name__ == "__main__":
    main()
