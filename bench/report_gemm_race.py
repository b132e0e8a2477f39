"""Writes bench/results/gemm-race.md from bench/run_gemm_race.sh's raw JSON lines.

Per library, level and shape: the median over the rounds of each round's
median time; ratio = the library's time / PyTorch's at the same level (below
1: faster than PyTorch). The peak is the larger of the measured FMA loop
and cores x 2 FMA units x lanes x 2 flops x the measured clock.
"""
import collections
import json
import os
import platform
import statistics
import subprocess
import sys

raw, command = sys.argv[1], sys.argv[2]
LIBS = ["gemm019", "pgx", "openblas", "blis", "torch"]
NAMES = {"gemm019": "gemm 0.19", "pgx": "private-gemm-x86 (faer 0.23)", "openblas": "OpenBLAS 0.3.21",
         "blis": "BLIS 0.9.0", "torch": "PyTorch (MKL)"}
times = collections.defaultdict(list)
for lib in LIBS:
    path = os.path.join(raw, lib + ".jsonl")
    if not os.path.exists(path):
        continue
    for line in open(path):
        r = json.loads(line)
        times[(lib, r["level"], r["shape"])].append(r["seconds"])
shapes = json.load(open(os.path.join(raw, "shapes.json")))
peak = [json.loads(l) for l in open(os.path.join(raw, "peak.jsonl"))]
clock = next(p["clock_ghz"] for p in peak if "clock_ghz" in p)
cores = os.cpu_count()
cpu = open("/proc/cpuinfo").read()
field = lambda k: next(l.split(":", 1)[1].strip() for l in cpu.splitlines() if l.startswith(k))
levels = [lv for lv in ("v4", "v3") if any(k[1] == lv for k in times)]


def peak_of(lv):
    name, lanes = ("avx512_fma", 16) if lv == "v4" else ("avx2_fma", 8)
    loop = max((p["gflops"] for p in peak if p.get("fma") == name and p["threads"] == cores), default=0)
    return max(loop, cores * 2 * lanes * 2 * clock), loop, cores * 2 * lanes * 2 * clock


def fmt(s):
    return f"{s * 1e3:.3g} ms" if s >= 1e-3 else f"{s * 1e6:.3g} µs"


print("# GEMM race (issue 47): candidate libraries against PyTorch, f32, 2 threads\n")
print(f"`{command}`, commit `{subprocess.run(['git', 'rev-parse', '--short=12', 'HEAD'], capture_output=True, text=True).stdout.strip()}`.\n")
print(f"CPU: {field('model name')}, family {field('cpu family')}, model {field('model')}, {cores} cores; "
      f"measured clock {clock:.2f} GHz (dependent-add chain). Linux {platform.release()}.\n")
for lv in levels:
    p, loop, formula = peak_of(lv)
    print(f"* {lv} peak: {p:.0f} GFLOP/s = max(FMA loop {loop:.0f}, {cores} cores x 2 FMA x "
          f"{16 if lv == 'v4' else 8} lanes x 2 x {clock:.2f} GHz = {formula:.0f}); 75% = {0.75 * p:.0f}")
print("\nLevels: v4 = AVX-512 (OPENBLAS_CORETYPE=SkylakeX, BLIS_ARCH_TYPE=0 skx, ATEN_CPU_CAPABILITY=avx512), "
      "v3 = AVX2+FMA (Haswell, BLIS_ARCH_TYPE=3 haswell, ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2).\n")
print("Each cell: median time (ratio to PyTorch at that level; % of the level's peak). Rounds: "
      f"{max((len(v) for v in times.values()), default=0)}.\n")
for lv in levels:
    pk = peak_of(lv)[0]
    print(f"## {lv}\n")
    print("| shape | batch x m x k x n | " + " | ".join(NAMES[l] for l in LIBS) + " |")
    print("|---|---|" + "---|" * len(LIBS))
    for s in shapes:
        flops = 2 * s["batch"] * s["m"] * s["k"] * s["n"]
        t = {l: statistics.median(times[(l, lv, s["name"])]) for l in LIBS if times.get((l, lv, s["name"]))}
        if "torch" not in t:
            continue
        cells = []
        for l in LIBS:
            if l not in t:
                cells.append("-")
                continue
            pct = 100 * flops / t[l] / 1e9 / pk
            cells.append(f"{fmt(t[l])} ({t[l] / t['torch']:.2f}×; {pct:.0f}%)" if l != "torch" else f"{fmt(t[l])} ({pct:.0f}%)")
        op = "x @ w.T" if s["linear"] else "a @ b"
        print(f"| {s['name']} ({op}) | {s['batch']}x{s['m']}x{s['k']}x{s['n']} | " + " | ".join(cells) + " |")
    print()
