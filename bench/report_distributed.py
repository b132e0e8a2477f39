"""bench/results/distributed.md from bench/run_distributed.sh's log: per
row the median over rounds of each side, and ours over PyTorch's."""
import statistics
import sys
from collections import defaultdict

lines = open(sys.argv[1]).read().splitlines()
head = [l for l in lines if l.startswith("#") or l.startswith("Model") or l.startswith("CPU") or l.startswith("mpirun")]
rows = defaultdict(lambda: defaultdict(list))
for l in lines:
    f = l.split("\t")
    if len(f) == 4 and f[0] in ("tensorscope", "torch"):
        rows[f[1]][f[0]].append((float(f[2]), float(f[3])))

print("# Distributed: collectives and a DDP step against PyTorch (gloo)\n")
print("Produced by `bash bench/run_distributed.sh`; the raw log is `bench/results/distributed.log`.\n")
print("```")
print("\n".join(head))
print("```\n")
print("Each side runs the same number of processes with one thread each; times are the median of each run's median, over the rounds.")
print("`all_reduce` rows give the bus bandwidth (NCCL's `2 (n-1)/n * bytes / time`); `ddp_step_peak` is the largest rank's resident-set growth over one fresh job of 3 steps.\n")
print("| row | tensorscope | PyTorch | ours / PyTorch |")
print("|---|---|---|---|")
for name, sides in rows.items():
    ts, pt = sides.get("tensorscope", []), sides.get("torch", [])
    if not ts or not pt:
        continue
    if name == "ddp_step_peak":
        a, b = ts[0][1], pt[0][1]
        print(f"| {name} | {a / 2**20:.1f} MiB | {b / 2**20:.1f} MiB | {a / b:.2f}x |")
        continue
    a = statistics.median(s for s, _ in ts)
    b = statistics.median(s for s, _ in pt)
    if name.startswith("all_reduce"):
        ba = statistics.median(x for _, x in ts)
        bb = statistics.median(x for _, x in pt)
        print(f"| {name} | {a * 1e6:.1f} us ({ba:.2f} GB/s) | {b * 1e6:.1f} us ({bb:.2f} GB/s) | {a / b:.2f}x time |")
    else:
        print(f"| {name} | {a * 1e3:.3f} ms | {b * 1e3:.3f} ms | {a / b:.2f}x |")
