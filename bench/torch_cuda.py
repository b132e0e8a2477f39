#!/usr/bin/env python3
"""PyTorch side of benches/cuda.rs (issue 6): the same workloads on CUDA
device 0, timed the same way (torch.cuda.Event around each call after
warm-up, median sample), the same `name value unit` output lines (`#` lines
are information). Without a CUDA device it prints
`skipped: no CUDA device (...)` and exits 0. `--smoke` runs every workload
and check on the CPU at tiny sizes (names prefixed `smoke_`; not a result),
so the script is exercised on machines without a GPU.

    python3 bench/torch_cuda.py [--filter NAME] [--smoke]
"""

import argparse
import statistics
import sys
import time

PAIRS = 10_000


class Cfg:
    def __init__(self, torch, smoke):
        self.torch = torch
        self.smoke = smoke
        self.dev = torch.device("cpu") if smoke else torch.device("cuda", 0)
        self.n_add = 1 << 16 if smoke else 256 * 1024 * 1024  # 1 GiB of f32 per tensor
        self.mm = [32, 64] if smoke else [1024, 2048, 4096, 8192]
        self.rows = 64 if smoke else 4096
        self.pre = "smoke_" if smoke else ""

    def reps(self, n):
        return min(n, 2) if self.smoke else n

    def sync(self):
        if not self.smoke:
            self.torch.cuda.synchronize()

    def empty_cache(self):
        if not self.smoke:
            self.torch.cuda.empty_cache()


def gpu_ms(cfg, warmup, reps, f):
    """Median ms of f: CUDA events around each call after warm-up (host clock for --smoke)."""
    torch = cfg.torch
    for _ in range(warmup):
        f()
    if cfg.smoke:
        return host_ns(reps, 1, f) * 1e-6
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(reps):
        start.record()
        f()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end))
    return statistics.median(samples)


def host_ns(reps, batch, f):
    for _ in range(batch):
        f()
    samples = []
    for _ in range(reps):
        t = time.perf_counter()
        for _ in range(batch):
            f()
        samples.append((time.perf_counter() - t) * 1e9 / batch)
    return statistics.median(samples)


def add_and_copy(cfg):
    torch, dev, n, pre = cfg.torch, cfg.dev, cfg.n_add, cfg.pre
    a = torch.rand(n, device=dev)
    b = torch.rand(n, device=dev)
    c = torch.empty(n, device=dev)
    add = gpu_ms(cfg, cfg.reps(5), cfg.reps(30), lambda: torch.add(a, b, out=c))
    assert torch.equal(c[:4096], a[:4096] + b[:4096]), "add computed a wrong sum"
    copy = gpu_ms(cfg, cfg.reps(5), cfg.reps(30), lambda: c.copy_(a))
    assert torch.equal(c[:4096], a[:4096]), "copy_ copied wrong values"
    add_gbs = 3 * n * 4 / (add * 1e-3) / 1e9
    copy_gbs = 2 * n * 4 / (copy * 1e-3) / 1e9
    print(f"{pre}add_256M_f32 {add_gbs:.1f} GB/s")
    print(f"{pre}add_256M_f32_time {add:.4f} ms")
    print(f"{pre}copy_d2d_256M_f32 {copy_gbs:.1f} GB/s")
    print(f"{pre}copy_d2d_256M_f32_time {copy:.4f} ms")
    print(f"{pre}add_over_copy_bandwidth {add_gbs / copy_gbs:.3f} ratio")


def full_sum(cfg):
    torch, dev, n, pre = cfg.torch, cfg.dev, cfg.n_add, cfg.pre
    x = torch.rand(n, device=dev)
    ms = gpu_ms(cfg, cfg.reps(5), cfg.reps(30), lambda: x.sum())
    got, want = x.sum().item(), x.double().sum().item()
    assert abs(got - want) <= 1e-4 * abs(want), f"sum {got} but {want} in f64"
    print(f"{pre}sum_256M_f32 {n * 4 / (ms * 1e-3) / 1e9:.1f} GB/s")
    print(f"{pre}sum_256M_f32_time {ms:.4f} ms")


def alloc_free(cfg):
    torch, dev = cfg.torch, cfg.dev

    def pair():
        torch.empty(256, device=dev)

    print(f"{cfg.pre}alloc_free_cached {host_ns(cfg.reps(50), PAIRS, pair):.1f} ns")


def matmuls(cfg, dtype, tag):
    for mm in cfg.mm:
        reps = max(10, min(200, 30 * 8192 * 8192 // (mm * mm)))  # as benches/cuda.rs
        matmul(cfg, dtype, mm, f"matmul_{mm}_{tag}", reps)


def matmul(cfg, dtype, mm, name, reps):
    torch, dev, pre = cfg.torch, cfg.dev, cfg.pre
    a = torch.randn(mm, mm, device=dev).to(dtype)
    b = torch.randn(mm, mm, device=dev).to(dtype)
    c = torch.empty(mm, mm, device=dev, dtype=dtype)
    ms = gpu_ms(cfg, cfg.reps(3), cfg.reps(reps), lambda: torch.matmul(a, b, out=c))
    want = a[0].double() @ b[:, :4].double()
    tol = 1e-3 if dtype == torch.float32 else 0.25
    assert ((c[0, :4].double() - want).abs() <= tol * (1 + want.abs())).all(), f"{name}: wrong row 0"
    print(f"{pre}{name} {2 * mm**3 / (ms * 1e-3) / 1e12:.2f} TFLOP/s")
    print(f"{pre}{name}_time {ms:.4f} ms")


def softmax_layernorm(cfg):
    torch, dev, n, pre = cfg.torch, cfg.dev, cfg.rows, cfg.pre
    nbytes = 2 * n * n * 4
    with torch.no_grad():
        x = torch.randn(n, n, device=dev)
        ms = gpu_ms(cfg, cfg.reps(5), cfg.reps(50), lambda: torch.softmax(x, -1))
        want = torch.softmax(x[0].double(), -1)
        assert torch.allclose(torch.softmax(x, -1)[0].double(), want, rtol=1e-4, atol=1e-6), "softmax: wrong row 0"
        print(f"{pre}softmax_{n}x{n}_f32 {nbytes / (ms * 1e-3) / 1e9:.1f} GB/s")
        print(f"{pre}softmax_{n}x{n}_f32_time {ms:.4f} ms")
        ln = torch.nn.LayerNorm(n, eps=1e-5, device=dev)
        ms = gpu_ms(cfg, cfg.reps(5), cfg.reps(50), lambda: ln(x))
        r = x[0].double()
        want = (r - r.mean()) / (r.var(unbiased=False) + 1e-5).sqrt()
        assert torch.allclose(ln(x)[0].double(), want, rtol=1e-4, atol=1e-4), "layer_norm: wrong row 0"
        print(f"{pre}layernorm_{n}x{n}_f32 {nbytes / (ms * 1e-3) / 1e9:.1f} GB/s")
        print(f"{pre}layernorm_{n}x{n}_f32_time {ms:.4f} ms")


def launch_overhead(cfg):
    """1,000 chained adds of 1-element tensors, host clock per op, synchronised per batch (as benches/cuda.rs)."""
    torch, dev, pre = cfg.torch, cfg.dev, cfg.pre
    chain = 1000
    with torch.no_grad():
        one = torch.ones(1, device=dev)

        def batch():
            c = torch.zeros(1, device=dev)
            for _ in range(chain):
                c = c + one
            cfg.sync()
            assert c.item() == chain, "chained adds: wrong sum"

        ns = host_ns(cfg.reps(20), 1, batch) / chain
    print(f"{pre}chain_add_1elem {ns * 1e-3:.2f} us")


def mlp_adam(cfg):
    torch, dev, pre = cfg.torch, cfg.dev, cfg.pre
    torch.manual_seed(0)
    nn = torch.nn
    net = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)).to(dev)
    x = torch.randn(128, 784, device=dev)
    y = (torch.arange(128) % 10).to(dev)
    opt = torch.optim.Adam(net.parameters())  # lr 1e-3, betas (0.9, 0.999), eps 1e-8: AdamConfig::default()
    loss_fn = torch.nn.functional.cross_entropy

    def step():
        opt.zero_grad(set_to_none=True)
        loss_fn(net(x), y).backward()
        opt.step()

    ms = gpu_ms(cfg, cfg.reps(10), cfg.reps(50), step)
    print(f"{pre}mlp_adam_step {ms:.4f} ms")
    if cfg.smoke:  # no allocator statistics for the CPU
        step()
        return
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = torch.cuda.memory_allocated()
    step()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    print(f"{pre}mlp_adam_step_max_memory_allocated {peak} bytes")
    print(f"{pre}mlp_adam_step_memory_at_start {start} bytes")
    print(f"{pre}mlp_adam_step_peak_above_start {peak - start} bytes")


def conv2d(cfg):
    """conv2d 3x3, padding 1, at ResNet stage shapes (as benches/cuda.rs's conv2d)."""
    torch, dev, pre = cfg.torch, cfg.dev, cfg.pre
    F = torch.nn.functional
    shapes = [(2, 4, 6)] if cfg.smoke else [(32, 64, 56), (32, 128, 28), (32, 256, 14)]
    for b, c, hw in shapes:
        name = f"conv2d_{b}x{c}x{hw}x{hw}_3x3"
        x = torch.randn(b, c, hw, hw, device=dev)
        w = torch.randn(c, c, 3, 3, device=dev) * 0.05
        with torch.no_grad():
            ms = gpu_ms(cfg, cfg.reps(3), cfg.reps(20), lambda: F.conv2d(x, w, None, 1, 1))
            want = F.conv2d(x[:1].double(), w.double(), None, 1, 1)
            assert torch.allclose(F.conv2d(x, w, None, 1, 1)[:1].double(), want, rtol=1e-3, atol=1e-3), f"{name}: wrong"
        print(f"{pre}{name}_fwd {ms:.4f} ms")
        xg = x.detach().requires_grad_(True)
        wg = w.detach().requires_grad_(True)
        gy = torch.randn(b, c, hw, hw, device=dev)

        def step():
            F.conv2d(xg, wg, None, 1, 1).backward(gy)
            xg.grad = None
            wg.grad = None

        ms = gpu_ms(cfg, cfg.reps(3), cfg.reps(20), step)
        print(f"{pre}{name}_fwd_bwd {ms:.4f} ms")
        if not cfg.smoke:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            start = torch.cuda.memory_allocated()
            step()
            torch.cuda.synchronize()
            print(f"{pre}{name}_fwd_bwd_peak_above_start {torch.cuda.max_memory_allocated() - start} bytes")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--filter", default=None, help="run only the workloads whose name contains this")
    p.add_argument("--smoke", action="store_true", help="every workload on the CPU at tiny sizes (not a result)")
    a = p.parse_args()
    want = lambda n: a.filter is None or a.filter in n  # noqa: E731
    try:
        import torch
    except ImportError as e:
        print(f"skipped: no CUDA device (PyTorch is not importable: {e})")
        return 0
    if a.smoke:
        print(f"# smoke run: every workload and check on the CPU at tiny sizes (not a result); torch {torch.__version__}")
    elif not torch.cuda.is_available():
        print(f"skipped: no CUDA device (torch {torch.__version__}, built for CUDA {torch.version.cuda})")
        return 0
    else:
        props = torch.cuda.get_device_properties(0)
        print(
            f"# device {props.name} (sm_{props.major}{props.minor}), torch {torch.__version__}, "
            f"CUDA {torch.version.cuda}, {torch.cuda.device_count()} device(s)"
        )
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False  # conv2d in true f32, as tensorscope's
        print(f"# allow_tf32 {str(torch.backends.cuda.matmul.allow_tf32).lower()}")
        print(
            "# allow_bf16_reduced_precision_reduction "
            f"{str(torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction).lower()}"
        )
    cfg = Cfg(torch, a.smoke)
    workloads = [
        ("add", lambda: add_and_copy(cfg)),
        ("sum", lambda: full_sum(cfg)),
        ("alloc", lambda: alloc_free(cfg)),
        ("matmul_f32", lambda: matmuls(cfg, torch.float32, "f32")),
        ("matmul_bf16", lambda: matmuls(cfg, torch.bfloat16, "bf16")),
        ("softmax_layernorm", lambda: softmax_layernorm(cfg)),
        ("launch", lambda: launch_overhead(cfg)),
        ("mlp", lambda: mlp_adam(cfg)),
        ("conv", lambda: conv2d(cfg)),
    ]
    failed = []
    for name, f in workloads:  # one that fails does not stop the others
        if not want(name):
            continue
        try:
            f()
        except Exception as e:  # noqa: BLE001
            print(f"error {name}: {type(e).__name__}: {e}")
            failed.append(name)
        cfg.empty_cache()
    return 1 if failed else 0

if __name__ == "__main__":
    sys.exit(main())
