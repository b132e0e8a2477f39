"""The timing rule of benches/common/timing.rs, for the PyTorch twins
(bench/torch_ops.py, bench/torch_e2e.py): same warm-up, batching and
sample counts, so both sides of a row are timed alike."""
import math
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
