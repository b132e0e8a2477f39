#!/usr/bin/env bash
# The CPU benchmark of issue 2: tensorscope (benches/cpu.rs), candle-core
# 0.11 (bench/peers) and PyTorch CPU (bench/torch_cpu.py) run the same
# workloads in one run. Each library runs ROUNDS times, interleaved.
#
#   bash bench/run_cpu.sh              # everything, 2 rounds
#   ROUNDS=1 FILTER=chain bash bench/run_cpu.sh
#   NOTE="why this run is special" bash bench/run_cpu.sh   # recorded in the results
#
# Writes bench/results/cpu.json (raw medians, machine, versions, date,
# command), bench/results/cpu.md (the table with ratios and targets) and
# bench/results/cpu.log (this run's full output). Per-round raw files go to
# bench/results/raw/.
#
# Needs python3 with torch (installed from PyPI with pip when missing:
# PYTORCH_VERSION, default 2.15.0). Run it on an otherwise idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-2}
FILTER=${FILTER:-}
PYTORCH_VERSION=${PYTORCH_VERSION:-2.15.0}
OUT=bench/results
RAW=$OUT/raw
mkdir -p "$RAW"
rm -f "$RAW"/*.json
LOG=$OUT/cpu.log
COMMAND="bash bench/run_cpu.sh (ROUNDS=$ROUNDS FILTER=$FILTER)"

exec > >(tee "$LOG") 2>&1
echo "== $COMMAND, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
LOAD_BEFORE=$(cat /proc/loadavg)
echo "== load before: $LOAD_BEFORE"

# Tensor::matmul is timed when the library has it (BENCH_MATMUL=0 turns it off).
FEATURES=()
if [ "${BENCH_MATMUL:-auto}" != 0 ] && grep -qs "pub fn matmul(" src/ops/*.rs; then
    FEATURES=(--features bench-matmul)
fi

if ! python3 -c "import torch" 2>/dev/null; then
    echo "== installing torch==$PYTORCH_VERSION from PyPI"
    python3 -m pip install --quiet "torch==$PYTORCH_VERSION"
fi

echo "== building"
cargo bench --bench cpu "${FEATURES[@]}" --no-run
cargo build --release --manifest-path bench/peers/Cargo.toml --target-dir bench/target
PEERS=bench/target/release/tensorscope-bench-peers

FARGS=()
if [ -n "$FILTER" ]; then FARGS=(--filter "$FILTER"); fi

for r in $(seq 1 "$ROUNDS"); do
    echo "== round $r: tensorscope"
    cargo bench --bench cpu "${FEATURES[@]}" -- --json "$RAW/tensorscope-r$r.json" "${FARGS[@]}"
    echo "== round $r: candle-core"
    "$PEERS" --json "$RAW/candle-r$r.json" "${FARGS[@]}"
    echo "== round $r: torch"
    python3 bench/torch_cpu.py --json "$RAW/torch-r$r.json" "${FARGS[@]}"
done
echo "== load after: $(cat /proc/loadavg)"

python3 bench/report.py --raw "$RAW" --out "$OUT" --command "$COMMAND" --note "${NOTE:-}" \
    --load-before "$LOAD_BEFORE" --load-after "$(cat /proc/loadavg)"
cat "$OUT/cpu.md"
