#!/usr/bin/env bash
# Shared body of bench/run_ops.sh (KIND=ops: benches/ops.rs against
# bench/torch_ops.py), bench/run_e2e.sh (KIND=e2e: benches/e2e.rs against
# bench/torch_e2e.py), bench/run_interop.sh and bench/run_amp.sh (KIND=amp:
# e2e's training rows with their peaks): builds the bench in release, runs both sides ROUNDS
# times, interleaved, PyTorch at the thread count tensorscope reports, and
# writes bench/results/NAME.{md,json,log} through bench/report_ops.py.
#
#   bash bench/run_pair.sh ops|e2e       (run_ops.sh and run_e2e.sh call this)
#
# Both sides run at every dispatch level in LEVELS (default: every level
# this CPU has, v4 = AVX-512 and v3 = AVX2+FMA on x86-64), each capped the
# same way: TENSORSCOPE_SIMD for tensorscope; ATEN_CPU_CAPABILITY,
# MKL_ENABLE_INSTRUCTIONS and ONEDNN_MAX_CPU_ISA for PyTorch
# (bench/levels.sh).
#
# Environment: ROUNDS (default 2), FILTER (comma-separated name parts),
# NAME (the results' name: NAME.md, NAME.json, NAME.log, raw-NAME/;
# default KIND, so a filtered run can keep the full table), THREADS (sets
# RAYON_NUM_THREADS; default: rayon's own choice, i.e. the
# cores this process may use), NOTE (a line recorded at the top of the
# results), PYTORCH_VERSION (default 2.15.0; installed from PyPI into
# bench/.venv only when `python3 -c 'import torch'` fails).
set -euo pipefail
cd "$(dirname "$0")/.."

KIND=$1
EXTRA=()
case "$KIND" in
ops) BENCH=ops; TORCH=bench/torch_ops.py ;;
e2e) BENCH=e2e; TORCH=bench/torch_e2e.py ;;
interop) BENCH=interop; TORCH=bench/torch_interop.py ;;
# The proof models' training rows, f32 and bf16 autocast, with their peaks.
amp) BENCH=e2e; TORCH=bench/torch_e2e.py; FILTER=${FILTER:-gpt_train_step,cnn_train_step}; EXTRA=(--peaks) ;;
*) echo "usage: $0 ops|e2e|interop|amp" >&2; exit 2 ;;
esac
ROUNDS=${ROUNDS:-2}
FILTER=${FILTER:-}
PYTORCH_VERSION=${PYTORCH_VERSION:-2.15.0}
OUT=bench/results
NAME=${NAME:-$KIND}
RAW=$OUT/raw-$NAME
mkdir -p "$RAW"
rm -rf "$RAW"/*.json "$RAW"/v4 "$RAW"/v3 "$RAW"/neon "$RAW"/scalar
source bench/levels.sh
LOG=$OUT/$NAME.log
COMMAND="bash bench/run_$KIND.sh (NAME=$NAME ROUNDS=$ROUNDS FILTER=$FILTER THREADS=${THREADS:-default} LEVELS=$LEVELS)"
if [ -n "${THREADS:-}" ]; then export RAYON_NUM_THREADS=$THREADS; fi

exec > >(tee "$LOG") 2>&1
echo "== $COMMAND, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "== CPU: $CPU_LINE"
LOAD_BEFORE=$(cat /proc/loadavg)
BUSY=$(ps -eo pcpu,etime,comm --sort=-pcpu | head -6)
echo "== load before: $LOAD_BEFORE"
echo "$BUSY"

source bench/torch_python.sh
if [ "$KIND" = interop ]; then
    # The models both sides load: random-init by transformers, saved with
    # save_pretrained (bench/interop_models.py; not committed).
    "$PY" -c "import transformers" 2>/dev/null || "$PY" -m pip install --quiet transformers safetensors
    export INTEROP_MODELS=${INTEROP_MODELS:-target/interop-models}
    "$PY" bench/interop_models.py "$INTEROP_MODELS"
fi

FEATURES=()
echo "== building (${FEATURES[*]:-no extra features})"
BUILD_START=$(date +%s)
cargo bench --bench "$BENCH" "${FEATURES[@]}" --no-run
echo "== built in $(($(date +%s) - BUILD_START)) s"

FARGS=()
if [ -n "$FILTER" ]; then FARGS=(--filter "$FILTER"); fi
RUN_START=$(date +%s)
for r in $(seq 1 "$ROUNDS"); do
    for lv in $LEVELS; do
        mapfile -t CAPS < <(torch_caps "$lv")
        mkdir -p "$RAW/$lv"
        echo "== round $r, level $lv: tensorscope"
        TENSORSCOPE_SIMD=$lv cargo bench --bench "$BENCH" "${FEATURES[@]}" -- --json "$RAW/$lv/tensorscope-r$r.json" "${FARGS[@]}" "${EXTRA[@]}"
        THREADS_TS=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['threads'])" "$RAW/$lv/tensorscope-r$r.json")
        echo "== round $r, level $lv: torch (threads: $THREADS_TS, as tensorscope; ${CAPS[*]:-no cap})"
        env "${CAPS[@]}" "$PY" "$TORCH" --threads "$THREADS_TS" --json "$RAW/$lv/torch-r$r.json" "${FARGS[@]}" "${EXTRA[@]}"
    done
done
LOAD_AFTER=$(cat /proc/loadavg)
echo "== load after: $LOAD_AFTER; rounds took $(($(date +%s) - RUN_START)) s"

"$PY" bench/report_ops.py --kind "$KIND" --raw "$RAW" --out "$OUT" --name "$NAME" --command "$COMMAND" --note "${NOTE:-}" \
    --level-caps "$LEVEL_CAPS" \
    --load-before "$LOAD_BEFORE" --load-after "$LOAD_AFTER" --busy "$BUSY"
cat "$OUT/$NAME.md"
