#!/usr/bin/env python3
"""Writes OUT/summary.md from what bench/gpu/run.sh left in OUT: the steps'
status (status.tsv), and the figures of benches/cuda.rs
(bench-tensorscope.log) and bench/torch_cuda.py (bench-torch.log) side by
side with issue 6's targets, in the style of bench/report.py.

    python3 bench/gpu/summary.py OUT [carry/gpu/manifest.txt]

Both bench logs hold `name value unit` lines (`#` lines are information, a
`skipped: ...` line means no CUDA device); names prefixed `smoke_` come from
CPU smoke runs and are never figures.
"""

import datetime
import os
import re
import sys

LINE = re.compile(r"^([A-Za-z0-9_]+) (-?[0-9.eE+]+) (\S+)$")

# (name, title, higher is better)
ROWS = [
    ("add_256M_f32", "elementwise add, 256M f32, into a preallocated output (3 × 1 GiB moved)", True),
    ("copy_d2d_256M_f32", "device-to-device copy of the same 1 GiB (`copy_`; 2 × 1 GiB moved)", True),
    ("add_over_copy_bandwidth", "add bandwidth / copy bandwidth, same library, same run", True),
    ("sum_256M_f32", "full sum of 256M f32 (1 GiB read; no target, shows the split reduction)", True),
    ("alloc_free_cached", "allocation + free from the cache: `empty([256], f32)` + drop", False),
    ("alloc_free_raw", "the caching allocator alone (1 KiB), no tensor", False),
    ("cudarc_alloc_free_tracking_on", "cudarc `alloc` + drop, 1 KiB, event tracking on (cudarc's default)", False),
    ("cudarc_alloc_free_tracking_off", "cudarc `alloc` + drop, 1 KiB, event tracking off (as tensorscope runs it)", False),
    ("matmul_1024_f32", "matmul 1024², f32, TF32 off", True),
    ("matmul_2048_f32", "matmul 2048², f32, TF32 off", True),
    ("matmul_4096_f32", "matmul 4096², f32, TF32 off", True),
    ("matmul_8192_f32", "matmul 8192², f32, TF32 off", True),
    ("matmul_1024_bf16", "matmul 1024², bf16 (f32 accumulation)", True),
    ("matmul_2048_bf16", "matmul 2048², bf16 (f32 accumulation)", True),
    ("matmul_4096_bf16", "matmul 4096², bf16 (f32 accumulation)", True),
    ("matmul_8192_bf16", "matmul 8192², bf16 (f32 accumulation)", True),
    ("softmax_4096x4096_f32", "softmax over the last dim, [4096, 4096] f32, forward (read + write)", True),
    ("layernorm_4096x4096_f32", "LayerNorm over the last dim (weight, bias), [4096, 4096] f32, forward", True),
    ("chain_add_1elem", "small-op launch overhead: 1,000 chained adds of 1-element tensors, per op", False),
    ("mlp_adam_step", "Adam training step, MLP 784-1024-1024-10, batch 128", False),
    ("mlp_adam_step_max_memory_allocated", "`max_memory_allocated` over that step (peak reset before it)", False),
    ("mlp_adam_step_memory_at_start", "memory allocated when the step starts (model, Adam state, batch)", False),
    ("mlp_adam_step_peak_above_start", "peak of the step above its start", False),
    ("conv2d_32x64x56x56_3x3_fwd", "conv2d 3x3 pad 1, x[32,64,56,56] W[64,64,3,3], f32, forward", False),
    ("conv2d_32x64x56x56_3x3_fwd_bwd", "the same, forward + backward (input and weight gradients)", False),
    ("conv2d_32x64x56x56_3x3_fwd_bwd_peak_above_start", "peak allocated of forward + backward above its start", False),
    ("conv2d_32x128x28x28_3x3_fwd", "conv2d 3x3 pad 1, x[32,128,28,28] W[128,128,3,3], f32, forward", False),
    ("conv2d_32x128x28x28_3x3_fwd_bwd", "the same, forward + backward (input and weight gradients)", False),
    ("conv2d_32x128x28x28_3x3_fwd_bwd_peak_above_start", "peak allocated of forward + backward above its start", False),
    ("conv2d_32x256x14x14_3x3_fwd", "conv2d 3x3 pad 1, x[32,256,14,14] W[256,256,3,3], f32, forward", False),
    ("conv2d_32x256x14x14_3x3_fwd_bwd", "the same, forward + backward (input and weight gradients)", False),
    ("conv2d_32x256x14x14_3x3_fwd_bwd_peak_above_start", "peak allocated of forward + backward above its start", False),
]


def parse(path):
    """(figures, information lines, skip line or None, error lines)."""
    vals, info, skipped, errors = {}, [], None, []
    if not os.path.exists(path):
        return vals, info, "no log", errors
    for line in open(path, errors="replace"):
        line = line.rstrip("\n")
        if line.startswith("skipped:"):
            skipped = line
        elif line.startswith("error") or line.startswith("Traceback"):
            errors.append(line)
        elif line.startswith("# ") and not line.startswith("# smoke"):
            info.append(line[2:])
        else:
            m = LINE.match(line)
            if m and not m.group(1).startswith("smoke_"):
                vals[m.group(1)] = (float(m.group(2)), m.group(3))
    return vals, info, skipped, errors


def fmt(v):
    if v is None:
        return "—"
    if abs(v) >= 1e6:
        return f"{v:,.0f}"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    if abs(v) >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


def target(name, ts, pt):
    """(target text, met: True/False/None) for tensorscope's figure of `name`."""
    t = ts.get(name, (None,))[0]
    p = pt.get(name, (None,))[0]
    if name == "add_256M_f32":
        c = ts.get("copy_d2d_256M_f32", (None,))[0]
        return "≥ 0.85 × tensorscope's copy", None if t is None or not c else t >= 0.85 * c
    if name == "alloc_free_cached":
        return "≤ PyTorch (`torch.empty` + drop)", None if t is None or p is None else t <= p
    if name.startswith(("matmul_", "softmax_", "layernorm_")):
        return "≥ 0.9 × PyTorch", None if t is None or p is None else t >= 0.9 * p
    if name == "chain_add_1elem":
        return "≤ PyTorch", None if t is None or p is None else t <= p
    if name == "mlp_adam_step":
        return "≤ 1.0 × PyTorch", None if t is None or p is None else t <= p
    if name.startswith("conv2d_") and name.endswith(("_fwd", "_fwd_bwd")):
        return "≤ 1.0 × PyTorch (issue 17 item 9)", None if t is None or p is None else t <= p
    if name.startswith("conv2d_") and name.endswith("_peak_above_start"):
        return "≤ PyTorch", None if t is None or p is None else t <= p
    if name == "mlp_adam_step_max_memory_allocated":
        return "≤ PyTorch", None if t is None or p is None else t <= p
    return "", None


def main():
    out = sys.argv[1]
    manifest = sys.argv[2] if len(sys.argv) > 2 else None
    steps = []
    st = os.path.join(out, "status.tsv")
    if os.path.exists(st):
        for line in open(st):
            parts = line.rstrip("\n").split("\t")
            if len(parts) >= 4:
                steps.append(parts[:4])
    meta = {}
    if manifest and os.path.exists(manifest):
        for line in open(manifest):
            p = line.rstrip("\n").split("\t")
            if len(p) >= 3 and p[0] == "meta":
                meta[p[1]] = p[2]
    ts, ts_info, ts_skip, ts_err = parse(os.path.join(out, "bench-tensorscope.log"))
    pt, pt_info, pt_skip, pt_err = parse(os.path.join(out, "bench-torch.log"))
    env = open(os.path.join(out, "env.log"), errors="replace").read() if os.path.exists(os.path.join(out, "env.log")) else ""
    have_gpu = "== GPU present: yes" in env
    m = re.search(r"^\s*\d+, (NVIDIA[^,]*), ([0-9.]+), ([^,]+),", env, re.M)
    device = f"{m.group(1)}, driver {m.group(2)}, {m.group(3).strip()}" if m else None

    L = ["# GPU checks (issues 6 and 19)", ""]
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    L.append(f"{now}, `bash bench/gpu/run.sh` over the executables of `bash bench/gpu/prepare.sh`"
             f" (commit `{meta.get('commit', '?')[:12]}`, built {meta.get('date', '?')}, {meta.get('rustc', '?')}).")
    if not (ts or pt):
        why = ts_skip or pt_skip or "the bench did not run"
        L += ["", f"**No GPU result.** {'No CUDA device on this machine' if not have_gpu else 'No figures were produced'}: "
              f"`{why}`. Nothing in this file is a GPU figure."]
    else:
        L += ["", f"Device: {device or (ts_info[0] if ts_info else '?')}."]
    for i in ts_info + pt_info:
        L.append(f"- {i}")
    L += ["", "## Steps", "", "| step | status | seconds | note |", "|---|---|---|---|"]
    for s in steps:
        L.append(f"| {s[0]} | **{s[1]}** | {s[2]} | {s[3].replace('|', '/')} |")
    if not steps:
        L.append("| — | — | — | status.tsv missing |")
    L += ["", "## Benchmarks: tensorscope and PyTorch on the same device, one run", ""]
    if ts or pt:
        L += ["GPU work is timed with CUDA events around each call after warm-up (median sample); allocation + free "
              "with the host clock over 10,000 pairs (PyTorch's figure includes the Python loop). Ratio: tensorscope "
              "against PyTorch, > 1 means tensorscope is better.", "",
              "| workload | unit | tensorscope | PyTorch | ratio | target | met |", "|---|---|---|---|---|---|---|"]
        for name, title, higher in ROWS:
            if name not in ts and name not in pt:
                continue
            t = ts.get(name, (None, None))
            p = pt.get(name, (None, None))
            unit = t[1] or p[1]
            ratio = "—"
            if t[0] and p[0] and name != "add_over_copy_bandwidth":
                ratio = f"{(t[0] / p[0]) if higher else (p[0] / t[0]):.2f}×"
            tgt, met = target(name, ts, pt)
            L.append(f"| {title} | {unit} | {fmt(t[0])} | {fmt(p[0])} | {ratio} | {tgt} | "
                     f"{ {True: '**yes**', False: '**no**', None: '—'}[met] } |")
        L += ["", "`max_memory_allocated`: PyTorch allocates its cuBLAS workspace through its caching allocator, so "
              "its absolute figure may include it (it is then part of the memory at start too); the peak above start "
              "compares the step itself."]
        missing = [n for n, _, _ in ROWS if n not in ts and not n.startswith("cudarc_")]
        if missing:
            L += ["", f"Missing from tensorscope's log: {', '.join(missing)} (see bench-tensorscope.log)."]
    else:
        L += [f"- tensorscope: `{ts_skip or 'no figures'}`", f"- PyTorch: `{pt_skip or 'no figures'}`"]
    for who, errs in (("tensorscope", ts_err), ("PyTorch", pt_err)):
        if errs:
            L += ["", f"**{who} bench errors:**", ""] + [f"- `{e}`" for e in errs[:10]]
    L += ["", "Raw logs: env.log, tests.log, bench-tensorscope.log, bench-torch.log, sanitizer.log, status.tsv.", ""]
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write("\n".join(L))
    print("\n".join(L))


if __name__ == "__main__":
    main()
