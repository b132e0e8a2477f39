"""Per-row ratios of two tensorscope builds from bench/compare_builds.sh.

    python3 bench/compare_builds.py bench/results/raw-build ROUNDS

Each row's figure is the median over rounds of each round's median sample;
prints a markdown table (new/old, and both against PyTorch) and the
geometric means, and exits 1 when the issue's limits fail (geometric mean
moved more than 3%, or a row more than 10% slower)."""
import json
import math
import statistics
import sys

raw, rounds = sys.argv[1], int(sys.argv[2])


def load(side, kind):
    rows = {}
    for r in range(1, rounds + 1):
        with open(f"{raw}/{side}-{kind}-r{r}.json") as f:
            for name, w in json.load(f)["workloads"].items():
                rows.setdefault(name, []).append(w["median_s"])
    return {k: statistics.median(v) for k, v in rows.items()}


def fmt(s):
    for unit, scale in (("s", 1), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s:.3g} s"


ok = True
for kind in ("ops", "e2e"):
    old, new, torch = load("old", kind), load("new", kind), load("torch", kind)
    names = [n for n in new if n in old]
    ratios = [new[n] / old[n] for n in names]
    gm = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
    worst = max(zip(ratios, names))
    print(f"\n### {kind}: {len(names)} rows, new/old geometric mean {gm:.3f}, "
          f"slowest row {worst[1]} {worst[0]:.3f}, rows > 1.10: "
          f"{sum(r > 1.10 for r in ratios)}\n")
    print("| row | old | new | new/old | old/PyTorch | new/PyTorch |")
    print("|---|---|---|---|---|---|")
    for n, r in zip(names, ratios):
        t = torch.get(n)
        vs = (f"{old[n] / t:.2f}× | {new[n] / t:.2f}×" if t else "- | -")
        flag = " **>1.10**" if r > 1.10 else ""
        print(f"| {n} | {fmt(old[n])} | {fmt(new[n])} | {r:.3f}{flag} | {vs} |")
    if abs(gm - 1) > 0.03 or worst[0] > 1.10:
        ok = False
sys.exit(0 if ok else 1)
