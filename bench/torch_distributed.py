"""The PyTorch twin of benches/distributed.rs (issue 50 item 7), run by
torchrun over the gloo backend: the same rows, printed by rank 0 as
`row<TAB>seconds<TAB>extra`.

  torchrun --standalone --nproc_per_node 2 bench/torch_distributed.py [--peak]
"""
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_timing import status_bytes  # noqa: E402


def all_reduce_rows(rank, world):
    for kib in [64, 1024, 16 * 1024, 64 * 1024]:
        elems = kib * 256
        t = torch.ones(elems, dtype=torch.float32)
        reps = min(max(256 * 1024 // kib, 8), 200)
        for _ in range(3):
            dist.all_reduce(t)
        times = []
        for _ in range(reps):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(t)
            times.append(time.perf_counter() - t0)
        s = statistics.median_high(times)
        busbw = 2 * (world - 1) / world * elems * 4 / s / 1e9
        if rank == 0:
            print(f"all_reduce_{kib}KiB\t{s:.9f}\t{busbw:.3f}", flush=True)


def model():
    return nn.Sequential(
        nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 10)
    )


def ddp_step(rank, steps):
    torch.manual_seed(1 + rank)
    ddp = DDP(model())
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(64, 512)
    y = torch.randint(0, 10, (64,))
    times = []
    for i in range(steps + 5):
        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = F.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        if i >= 5:
            times.append(time.perf_counter() - t0)
    return statistics.median_high(times)


def main():
    torch.set_num_threads(int(os.environ.get("THREADS", "1")))
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if "--peak" in sys.argv:
        before = status_bytes("VmRSS:")
        ddp_step(rank, 3)
        grew = torch.tensor([float(status_bytes("VmHWM:") - before)], dtype=torch.float64)
        dist.all_reduce(grew, op=dist.ReduceOp.MAX)
        if rank == 0:
            print(f"ddp_step_peak\t0\t{grew.item():.0f}", flush=True)
    else:
        all_reduce_rows(rank, world)
        s = ddp_step(rank, 30)
        if rank == 0:
            print(f"ddp_step\t{s:.9f}\t0", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
