#!/usr/bin/env bash
# Shared body of bench/run_ops.sh (KIND=ops: benches/ops.rs against
# bench/torch_ops.py) and bench/run_e2e.sh (KIND=e2e: benches/e2e.rs against
# bench/torch_e2e.py): builds the bench in release, runs both sides ROUNDS
# times, interleaved, PyTorch at the thread count tensorscope reports, and
# writes bench/results/KIND.{md,json,log} through bench/report_ops.py.
#
#   bash bench/run_pair.sh ops|e2e       (run_ops.sh and run_e2e.sh call this)
#
# Environment: ROUNDS (default 2), FILTER (comma-separated name parts),
# THREADS (sets RAYON_NUM_THREADS; default: rayon's own choice, i.e. the
# cores this process may use), NOTE (a line recorded at the top of the
# results), PYTORCH_VERSION (default 2.15.0; installed from PyPI into
# bench/.venv only when `python3 -c 'import torch'` fails).
set -euo pipefail
cd "$(dirname "$0")/.."

KIND=$1
case "$KIND" in
ops) BENCH=ops; TORCH=bench/torch_ops.py ;;
e2e) BENCH=e2e; TORCH=bench/torch_e2e.py ;;
*) echo "usage: $0 ops|e2e" >&2; exit 2 ;;
esac
ROUNDS=${ROUNDS:-2}
FILTER=${FILTER:-}
PYTORCH_VERSION=${PYTORCH_VERSION:-2.15.0}
OUT=bench/results
RAW=$OUT/raw-$KIND
mkdir -p "$RAW"
rm -f "$RAW"/*.json
LOG=$OUT/$KIND.log
COMMAND="bash bench/run_$KIND.sh (ROUNDS=$ROUNDS FILTER=$FILTER THREADS=${THREADS:-default})"
if [ -n "${THREADS:-}" ]; then export RAYON_NUM_THREADS=$THREADS; fi

exec > >(tee "$LOG") 2>&1
echo "== $COMMAND, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "== CPU: $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1), $(nproc) cores"
LOAD_BEFORE=$(cat /proc/loadavg)
BUSY=$(ps -eo pcpu,etime,comm --sort=-pcpu | head -6)
echo "== load before: $LOAD_BEFORE"
echo "$BUSY"

source bench/torch_python.sh

FEATURES=()
echo "== building (${FEATURES[*]:-no extra features})"
BUILD_START=$(date +%s)
cargo bench --bench "$BENCH" "${FEATURES[@]}" --no-run
echo "== built in $(($(date +%s) - BUILD_START)) s"

FARGS=()
if [ -n "$FILTER" ]; then FARGS=(--filter "$FILTER"); fi
RUN_START=$(date +%s)
for r in $(seq 1 "$ROUNDS"); do
    echo "== round $r: tensorscope"
    cargo bench --bench "$BENCH" "${FEATURES[@]}" -- --json "$RAW/tensorscope-r$r.json" "${FARGS[@]}"
    THREADS_TS=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['threads'])" "$RAW/tensorscope-r$r.json")
    echo "== round $r: torch (threads: $THREADS_TS, as tensorscope)"
    "$PY" "$TORCH" --threads "$THREADS_TS" --json "$RAW/torch-r$r.json" "${FARGS[@]}"
done
LOAD_AFTER=$(cat /proc/loadavg)
echo "== load after: $LOAD_AFTER; rounds took $(($(date +%s) - RUN_START)) s"

"$PY" bench/report_ops.py --kind "$KIND" --raw "$RAW" --out "$OUT" --command "$COMMAND" --note "${NOTE:-}" \
    --load-before "$LOAD_BEFORE" --load-after "$LOAD_AFTER" --busy "$BUSY"
cat "$OUT/$KIND.md"
