#!/usr/bin/env python3
"""Merges the per-round raw results of bench/run_cpu.sh into
bench/results/cpu.json and bench/results/cpu.md (ratios, targets, pass/fail).

    python3 bench/report.py --raw bench/results/raw --out bench/results --command "..."
"""

import argparse
import datetime
import glob
import json
import os
import platform
import re
import statistics
import subprocess

LIBS = ["tensorscope", "candle", "torch"]
LIB_NAMES = {"tensorscope": "tensorscope", "candle": "candle-core", "torch": "PyTorch"}

GB = 1e9
ADD_BYTES = 3 * 16 * 1024 * 1024 * 4  # read a, read b, write c: 3 x 64 MiB
T_BYTES = 3 * 4096 * 4096 * 4
MM_FLOP = 2 * 1024**3

# name -> (title, unit, value from seconds, higher is better)
WORKLOADS = {
    "add_alloc": ("`a + b`, 16M f32, result freshly allocated", "ms", lambda s: s * 1e3, False),
    "add_out": ("add into a preallocated output, 16M f32", "GB/s", lambda s: ADD_BYTES / s / GB, True),
    "add_transposed": ("add of a transposed 4096² with a contiguous one", "GB/s", lambda s: T_BYTES / s / GB, True),
    "matmul": ("matmul 1024³ f32", "GFLOP/s", lambda s: MM_FLOP / s / GB, True),
    "chain_add": ("1000 chained adds on a 1-element tensor", "µs/op", lambda s: s * 1e6, False),
    "alloc_free": ("alloc+free pair: `Tensor::empty(&[256], F32, Cpu)` + drop", "ns", lambda s: s * 1e9, False),
    "alloc_free_raw": ("alloc+free pair: the caching allocator alone (1 KiB block)", "ns", lambda s: s * 1e9, False),
}


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=60).stdout.strip()
    except Exception as e:  # noqa: BLE001
        return f"unavailable ({e})"


def machine():
    lscpu = sh("lscpu")
    field = lambda k: next((l.split(":", 1)[1].strip() for l in lscpu.splitlines() if l.startswith(k + ":")), None)
    return {
        "nproc": int(sh("nproc") or 0),
        "model": field("Model name"),
        "vendor": field("Vendor ID"),
        "threads_per_core": field("Thread(s) per core"),
        "l2": field("L2 cache"),
        "l3": field("L3 cache"),
        "hypervisor": field("Hypervisor vendor"),
        "avx512f": "avx512f" in (field("Flags") or ""),
        "kernel": platform.release(),
        "mem_total": next((l.split(":", 1)[1].strip() for l in open("/proc/meminfo") if l.startswith("MemTotal")), None),
        "lscpu": lscpu.splitlines()[:24],
    }


def load_raw(raw):
    """lib -> workload -> list of per-round medians (seconds), plus each lib's header."""
    per = {l: {} for l in LIBS}
    head = {}
    for path in sorted(glob.glob(os.path.join(raw, "*-r*.json"))):
        lib = re.match(r"(.*)-r\d+\.json", os.path.basename(path)).group(1)
        doc = json.load(open(path))
        head[lib] = {k: v for k, v in doc.items() if k != "workloads"}
        for name, w in doc["workloads"].items():
            per[lib].setdefault(name, []).append(w)
    return per, head


def check(name, v):
    """(target text, passed?) for tensorscope's value v of workload name; v is a dict lib -> value."""
    ts = v.get("tensorscope")
    if ts is None:
        return ("", None)
    if name == "add_alloc":
        return ("≤ 8 ms", ts <= 8.0)
    if name == "add_out":
        t = v.get("torch")
        return ("≥ 0.9× PyTorch", None if t is None else ts >= 0.9 * t)
    if name == "add_transposed":
        peers = [v[l] for l in ("torch", "candle") if l in v]
        return ("≥ 2× both", None if len(peers) < 2 else all(ts >= 2 * p for p in peers))
    if name == "matmul":
        peers = [v[l] for l in ("torch", "candle") if l in v]
        return ("≥ 0.9× the better peer", None if not peers else ts >= 0.9 * max(peers))
    if name == "chain_add":
        return ("≤ 0.15 µs/op", ts <= 0.15)
    if name in ("alloc_free", "alloc_free_raw"):
        return ("≤ 100 ns", ts <= 100.0)
    return ("", None)


def fmt(v):
    if v is None:
        return "—"
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    if v >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--raw", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--command", default="bash bench/run_cpu.sh")
    p.add_argument("--note", default="")
    p.add_argument("--load-before", default="")
    p.add_argument("--load-after", default="")
    a = p.parse_args()
    per, head = load_raw(a.raw)

    results = {}
    for name, (title, unit, conv, higher) in WORKLOADS.items():
        row = {"title": title, "unit": unit, "higher_is_better": higher, "libraries": {}}
        vals = {}
        for lib in LIBS:
            rounds = per[lib].get(name)
            if not rounds:
                continue
            meds = [r["median_s"] for r in rounds]
            med = statistics.median(meds)
            vals[lib] = conv(med)
            row["libraries"][lib] = {
                "median_s": med,
                "value": vals[lib],
                "rounds_median_s": meds,
                "rounds_value": [conv(m) for m in meds],
                "rounds_min_s": [r["min_s"] for r in rounds],
                "samples_per_round": rounds[0]["samples"],
                "what": rounds[0]["what"],
            }
        if not vals:
            continue
        target, ok = check(name, vals)
        row["target"] = target
        row["passed"] = ok
        ts = vals.get("tensorscope")
        ratios = {}
        for lib in ("torch", "candle"):
            if ts is not None and lib in vals and vals[lib]:
                # > 1 means tensorscope is faster.
                ratios[f"tensorscope_vs_{lib}"] = ts / vals[lib] if higher else vals[lib] / ts
        row["speedup"] = ratios
        results[name] = row

    doc = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": a.command,
        "note": a.note,
        "loadavg_before": a.load_before,
        "loadavg_after": a.load_after,
        "git_commit": sh("git rev-parse HEAD"),
        # Changes to tracked files outside bench/results: the run itself has
        # rewritten its raw results there before this report is written.
        "git_dirty": bool(sh("git status --porcelain --untracked-files=no -- . ':!bench/results'")),
        "machine": machine(),
        "versions": {
            "rustc": sh("rustc --version"),
            "python": platform.python_version(),
            **{LIB_NAMES[l]: head[l].get("version") for l in LIBS if l in head},
        },
        "threads": {LIB_NAMES[l]: head[l].get("threads") for l in LIBS if l in head},
        "torch_parallel_info": head.get("torch", {}).get("config"),
        "rounds": max((len(v) for lib in per.values() for v in lib.values()), default=0),
        "method": "per library and workload: warm-up, then many samples; each round's figure is the median sample; "
        "the reported figure is the median of the rounds' figures. Speedup > 1 means tensorscope is faster.",
        "workloads": results,
    }
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "cpu.json"), "w") as f:
        json.dump(doc, f, indent=2, ensure_ascii=False)
        f.write("\n")

    m = doc["machine"]
    v = doc["versions"]
    lines = [
        "# CPU benchmark",
        "",
        f"{doc['date']}, `{doc['command']}`, commit `{doc['git_commit'][:12]}`{' (dirty)' if doc['git_dirty'] else ''}.",
        f"Machine: {m['model']} ({m['vendor']}), {m['nproc']} cores, {m['hypervisor'] or 'bare metal'}, "
        f"L2 {m['l2']}, L3 {m['l3']}, {m['mem_total']}, Linux {m['kernel']}.",
        f"Versions: tensorscope {v.get('tensorscope')}, candle-core {v.get('candle-core')}, "
        f"PyTorch {v.get('PyTorch')} (CPU), {v['rustc']}, Python {v['python']}. "
        f"Threads: {', '.join(f'{k} {t}' for k, t in doc['threads'].items())}.",
        "",
        *([f"Note: {a.note}", ""] if a.note else []),
        f"Load average (1, 5, 15 min) before: {a.load_before or '?'}; after: {a.load_after or '?'}.",
        "",
        f"Medians of many samples after warm-up; {doc['rounds']} round(s), interleaved; the figure is the median of "
        "the rounds (each round's figure in brackets). Speedup: tensorscope against the peer (> 1: tensorscope is faster).",
        "",
        "| workload | unit | tensorscope | candle | PyTorch | vs candle | vs PyTorch | target | met |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, row in results.items():
        cells = []
        for lib in LIBS:
            r = row["libraries"].get(lib)
            if r is None:
                cells.append("—")
            elif len(r["rounds_value"]) > 1:
                cells.append(f"{fmt(r['value'])} [{', '.join(fmt(x) for x in r['rounds_value'])}]")
            else:
                cells.append(fmt(r["value"]))
        sp = row["speedup"]
        vs = [f"{sp[k]:.2f}×" if k in sp else "—" for k in ("tensorscope_vs_candle", "tensorscope_vs_torch")]
        met = {True: "**yes**", False: "**no**", None: "—"}[row["passed"]]
        lines.append(f"| {row['title']} | {row['unit']} | {' | '.join(cells)} | {' | '.join(vs)} | {row['target']} | {met} |")
    lines.append("")
    with open(os.path.join(a.out, "cpu.md"), "w") as f:
        f.write("\n".join(lines))


if __name__ == "__main__":
    main()
