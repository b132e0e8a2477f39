#!/usr/bin/env bash
# Issue 15, item 7: benches/data.rs (tensorscope's DataLoader) against
# bench/torch_data.py (PyTorch's DataLoader) on the same synthetic workloads,
# in one run, interleaved ROUNDS times; writes bench/results/data.md,
# data.json and data.log. Run it on an otherwise idle machine:
#
#   bash bench/run_data.sh
#   ROUNDS=3 EPOCHS=5 NOTE="why this run is special" bash bench/run_data.sh
#
# PYTORCH_VERSION (default 2.15.0) is installed from PyPI into bench/.venv
# only when `python3 -c 'import torch'` fails.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-2}
EPOCHS=${EPOCHS:-3}
PYTORCH_VERSION=${PYTORCH_VERSION:-2.15.0}
OUT=bench/results
RAW=$OUT/raw-data
mkdir -p "$RAW"
rm -f "$RAW"/*.json
LOG=$OUT/data.log
COMMAND="bash bench/run_data.sh (ROUNDS=$ROUNDS EPOCHS=$EPOCHS)"

exec > >(tee "$LOG") 2>&1
echo "== $COMMAND, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "== CPU: $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1), $(nproc) cores"
LOAD_BEFORE=$(cat /proc/loadavg)
echo "== load before: $LOAD_BEFORE"

source bench/torch_python.sh

cargo bench --bench data --no-run
for r in $(seq 1 "$ROUNDS"); do
    echo "== round $r: tensorscope"
    cargo bench --bench data -- --json "$RAW/tensorscope-r$r.json" --epochs "$EPOCHS"
    echo "== round $r: torch"
    "$PY" bench/torch_data.py --json "$RAW/torch-r$r.json" --epochs "$EPOCHS" 2> >(grep -v "USDT\|gpuGetDeviceCount\|profiler" >&2)
done
LOAD_AFTER=$(cat /proc/loadavg)
echo "== load after: $LOAD_AFTER"

"$PY" bench/report_data.py --raw "$RAW" --out "$OUT" --command "$COMMAND" --note "${NOTE:-}" \
    --load-before "$LOAD_BEFORE" --load-after "$LOAD_AFTER"
cat "$OUT/data.md"
