#!/usr/bin/env python3
"""PyTorch twin of benches/data.rs (issue 15, item 7): the same synthetic
workloads through torch.utils.data.DataLoader.

    python3 bench/torch_data.py --json PATH [--epochs N]

A dataset of 4096 samples, each an image-like x [3, 32, 32] float32 (every
element i / 4096) and a label y int64 (i % 10), made per sample as a
decoder would make it (new tensors from __getitem__, stacked by the
default collate). Each workload gives a per-sample cost (a sleep: I/O; a
spin: decoding on the CPU) and a per-batch model step (a spin on the main
thread, so both sides' steps cost exactly the same):

    io:    60 us sleep per sample, 3 ms step, 2 workers, batch 64
    cpu:   20 us spin per sample, 2 ms step, 1 worker, batch 64
    fast:  no cost, no step, 2 workers, batch 64 (the loader's own overhead)

The loaders use persistent workers and PyTorch's default prefetch factor
(2 batches per worker); pin_memory is off (it needs a GPU: this twin runs
on the CPU, as benches/data.rs does there). The first epoch (worker start)
is not timed; the figure of a workload is the median over the timed
epochs.

Allocations: the main process with num_workers=0 under torch.profiler
(profile_memory=True), counting the ops with a positive self allocation,
per batch; with workers the same allocations happen in the worker processes
(and the batch then travels through shared memory, a new segment per
tensor per batch).
"""

import argparse
import json
import statistics
import time

import torch
from torch.utils.data import DataLoader, Dataset

N = 4096
BATCH = 64
WORKLOADS = {
    # name: (per-sample cost us, kind, step us, workers)
    "io": (60, "sleep", 3000, 2),
    "cpu": (20, "spin", 2000, 1),
    "fast": (0, "none", 0, 2),
}


def spin(us):
    end = time.perf_counter_ns() + int(us * 1000)
    while time.perf_counter_ns() < end:
        pass


class Synthetic(Dataset):
    def __init__(self, cost_us, kind):
        self.cost_us, self.kind = cost_us, kind

    def __len__(self):
        return N

    def __getitem__(self, i):
        if self.kind == "sleep":
            time.sleep(self.cost_us / 1e6)
        elif self.kind == "spin":
            spin(self.cost_us)
        x = torch.full((3, 32, 32), i / N, dtype=torch.float32)
        y = torch.tensor(i % 10, dtype=torch.int64)
        return x, y


def run(name, epochs):
    cost, kind, step_us, workers = WORKLOADS[name]
    ds = Synthetic(cost, kind)
    loader = DataLoader(
        ds,
        batch_size=BATCH,
        shuffle=True,
        num_workers=workers,
        persistent_workers=workers > 0,
        generator=torch.Generator().manual_seed(5),
    )
    times = []
    for e in range(epochs + 1):
        t = time.perf_counter()
        rows = 0
        for x, y in loader:
            rows += x.shape[0]
            if step_us:
                spin(step_us)
        dt = time.perf_counter() - t
        assert rows == N
        if e > 0:
            times.append(dt)
    del loader
    return times


def allocations_per_batch():
    loader = DataLoader(Synthetic(0, "none"), batch_size=BATCH, shuffle=True, num_workers=0)
    batches = 0
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        for x, y in loader:
            batches += 1
    # An allocation shows as the self memory of the op that made it
    # (aten::empty under torch.full and torch.tensor, aten::cat under the
    # collate's torch.stack); `[memory]` events outside ops are frees.
    allocs = sum(1 for e in prof.events() if e.name != "[memory]" and e.self_cpu_memory_usage > 0)
    return allocs / batches


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--epochs", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(1)
    out = {"lib": "torch", "version": torch.__version__, "rows": {}}
    allocs = allocations_per_batch()
    for name, (cost, kind, step_us, workers) in WORKLOADS.items():
        times = run(name, a.epochs)
        med = statistics.median(times)
        out["rows"][name] = {
            "epoch_s": times,
            "median_s": med,
            "samples_per_s": N / med,
            "workers": workers,
            "allocations_per_batch": allocs,
        }
        print(f"torch {name}: {med * 1e3:.1f} ms per epoch ({N / med:.0f} samples/s), "
              f"{allocs:.1f} allocations per batch (num_workers=0 under the profiler)", flush=True)
    json.dump(out, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
