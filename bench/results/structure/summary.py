"""Medians over the rounds of bench/results/structure/run.sh, base vs new."""
import glob, json, os, statistics, sys
d = os.path.dirname(os.path.abspath(__file__))
def load(side):
    runs = [json.load(open(p))["workloads"] for p in sorted(glob.glob(f"{d}/{side}-r*.json"))]
    return {k: [r[k]["median_s"] for r in runs] for k in runs[0]}, len(runs)
base, nb = load("base"); new, nn = load("new")
print(f"| workload | before (median of {nb}) | after (median of {nn}) | after / before |")
print("|---|---|---|---|")
for k in base:
    b, n = statistics.median(base[k]), statistics.median(new[k])
    unit, f = ("ms", 1e3) if b > 1e-4 else ("ns", 1e9)
    print(f"| `{k}` | {b*f:.4g} {unit} | {n*f:.4g} {unit} | {n/b:.3f} |")
