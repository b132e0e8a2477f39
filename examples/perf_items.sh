#!/usr/bin/env bash
# Runs examples/perf_items.rs (one or more builds of it) and its PyTorch twin
# examples/perf_items.py, interleaved, ROUNDS times in one shell command, and
# prints per workload the median over rounds of each one's median, with the
# ratios to PyTorch at 2 threads (t2) and at 1 thread (t1).
#
#   cargo build --release --example perf_items
#   bash examples/perf_items.sh [FILTER]
#   BINS="before=/tmp/perf_items_main after=target/release/examples/perf_items" \
#       bash examples/perf_items.sh linear
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
BINS=${BINS:-"tensorscope=target/release/examples/perf_items"}
FILTER=${1:-}
LOG=$(mktemp)
echo "== $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), nproc $(nproc), load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$ROUNDS"); do
    for spec in $BINS; do
        label=${spec%%=*}
        bin=${spec#*=}
        "$bin" $FILTER | sed "s/\"lib\": \"tensorscope\"/\"lib\": \"$label\"/" >>"$LOG"
    done
    python3 examples/perf_items.py $FILTER >>"$LOG"
    # PyTorch on one thread too: on a machine busy with other work, its
    # OpenMP threads at 2 wait for a descheduled peer (samples in steps of
    # the scheduler's ~8 ms slice), which the 1-thread figure does not.
    TORCH_THREADS=1 python3 examples/perf_items.py $FILTER | sed 's/"lib": "torch"/"lib": "torch1"/' >>"$LOG"
done
echo "== load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$LOG" "$BINS" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
labels = [s.split("=", 1)[0] for s in sys.argv[2].split()]
by = {}
for r in rows:
    by.setdefault(r["name"], {}).setdefault(r["lib"], []).append(r["us"])
head = f"{'workload':<22}" + "".join(f"{l + ' us':>14}" for l in labels) + f"{'torch2 us':>11}{'torch1 us':>11}" + "".join(f"{l + '/t2':>12}{l + '/t1':>12}" for l in labels)
print(head)
for name, libs in by.items():
    med = {k: statistics.median(v) for k, v in libs.items()}
    t, t1 = med.get("torch"), med.get("torch1")
    nan = float("nan")
    line = f"{name:<22}" + "".join(f"{med.get(l, nan):>14.1f}" for l in labels)
    line += f"{t or nan:>11.1f}{t1 or nan:>11.1f}"
    line += "".join(f"{(med[l] / t if t and l in med else nan):>12.2f}{(med[l] / t1 if t1 and l in med else nan):>12.2f}" for l in labels)
    print(line)
print(f"(median over {len(next(iter(by.values()))['torch'])} rounds of each run's median)")
EOF
rm -f "$LOG"
