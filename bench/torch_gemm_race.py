"""PyTorch's side of the GEMM race (bench/run_gemm_race.sh).

Reads the shape list from the race binary (`race shapes`, JSON on stdin),
times torch.matmul / torch.nn.functional.linear / torch.bmm at each, and
prints one JSON line per shape in the race binary's format. The level is
capped by the caller with ATEN_CPU_CAPABILITY and MKL_ENABLE_INSTRUCTIONS.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_timing import measure  # noqa: E402

import torch


def timed(f):
    """The race binary's rule (bench/gemm-race's `time`): one cold call,
    one timed as the estimate, batch = ceil(2 ms / t), 3-40 samples in a
    0.4 s budget; the middle sample."""
    f()
    t0 = time.perf_counter()
    f()
    est = max(time.perf_counter() - t0, 1e-7)
    batch = int(-(-2e-3 // est))
    n = min(max(int(0.4 / (est * batch)), 3), 40)
    samples = sorted(measure(batch - 1, n, batch, f))
    return samples[len(samples) // 2]


def main():
    torch.set_num_threads(int(os.environ.get("RACE_THREADS", "2")))
    level = sys.argv[1] if len(sys.argv) > 1 else "v4"
    filt = sys.argv[2].split(",") if len(sys.argv) > 2 and sys.argv[2] else []
    shapes = json.load(sys.stdin)
    print(json.dumps({"torch": torch.__version__, "capability": torch.backends.cpu.get_cpu_capability(),
                      "mkl": torch.backends.mkl.is_available()}), file=sys.stderr)
    torch.manual_seed(0)
    with torch.inference_mode():
        for s in shapes:
            if filt and not any(s["name"].startswith(f) for f in filt):
                continue
            b, m, k, n = s["batch"], s["m"], s["k"], s["n"]
            if b > 1:
                a, w = torch.rand(b, m, k) - 0.5, torch.rand(b, k, n) - 0.5
                out = torch.empty(b, m, n)
                f = lambda: torch.bmm(a, w, out=out)
            elif s["linear"]:
                a, w = torch.rand(m, k) - 0.5, torch.rand(n, k) - 0.5
                f = lambda: torch.nn.functional.linear(a, w)
            else:
                a, w = torch.rand(m, k) - 0.5, torch.rand(k, n) - 0.5
                out = torch.empty(m, n)
                f = lambda: torch.matmul(a, w, out=out)
            secs = timed(f)
            print(json.dumps({"lib": "torch", "level": level, "shape": s["name"], "seconds": secs,
                              "gflops": round(2 * b * m * k * n / secs / 1e9, 2)}), flush=True)


main()
