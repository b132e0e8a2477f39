"""The timing rule of benches/common/timing.rs, for the PyTorch twins
(bench/torch_ops.py, bench/torch_e2e.py): same warm-up, batching and
sample counts, so both sides of a row are timed alike."""
import math
import subprocess
import sys
import time


def measure(warmup, reps, batch, op):
    for _ in range(warmup):
        op()
    samples = []
    for _ in range(reps):
        t = time.perf_counter()
        for _ in range(batch):
            op()
        samples.append((time.perf_counter() - t) / batch)
    return samples


def measure_budget(budget_s, min_reps, op):
    """benches/common/timing.rs's measure_budget: one cold call, one timed
    call as the estimate, batch = ceil(1 ms / t), batch - 1 more warm-up calls, as
    many samples as fit in the budget (at least min_reps, at most 50)."""
    op()
    t = time.perf_counter()
    op()
    est = max(time.perf_counter() - t, 1e-9)
    batch = min(max(math.ceil(1e-3 / est), 1), 10_000)
    reps = min(max(int(budget_s / (est * batch)), min_reps), 50)
    return measure(batch - 1, reps, batch, op)


def status_bytes(field):
    """A /proc/self/status field ("VmRSS:", "VmHWM:") in bytes; 0 if absent."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) * 1024
    return 0


def peak_in_fresh_process(script, threads, row, over):
    """benches/common/peak.rs's peak_in_fresh_process: `script --peak ROW`
    in a fresh interpreter prints its resident set's peak growth."""
    out = subprocess.run([sys.executable, script, "--threads", str(threads), "--peak", row],
                         capture_output=True, text=True, check=True)
    peak = int(out.stdout.strip().splitlines()[-1])
    print(f"    peak over the process before {over}: {peak / 2**20:.1f} MiB", file=sys.stderr)
    return peak
