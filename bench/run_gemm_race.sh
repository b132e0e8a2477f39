#!/usr/bin/env bash
# Issue 47, item 2: the GEMM race. Every candidate library (bench/gemm-race:
# gemm 0.19, private-gemm-x86 = faer 0.23's x86 matmul, OpenBLAS and BLIS
# from Debian) and PyTorch at the same shapes, at every level this CPU has
# (v4 = AVX-512 where present, v3 = AVX2+FMA), ROUNDS times, each library in
# its own process, interleaved. Writes bench/results/NAME.{md,log} (NAME:
# default gemm-race) and the raw JSON lines under bench/results/raw-NAME/.
#
#   bash bench/run_gemm_race.sh
#   ROUNDS=1 FILTER=square_1024,service bash bench/run_gemm_race.sh
#
# OpenBLAS and BLIS are the Debian shared libraries (libopenblas0-pthread,
# libblis4-pthread), installed when missing; their level is capped with
# OPENBLAS_CORETYPE=Haswell|SkylakeX and BLIS_ARCH_TYPE (3 = haswell,
# 0 = skx in BLIS 0.9's enum); PyTorch's with ATEN_CPU_CAPABILITY and
# MKL_ENABLE_INSTRUCTIONS.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/levels.sh
ROUNDS=${ROUNDS:-3}
FILTER=${FILTER:-}
OUT=bench/results
NAME=${NAME:-gemm-race}
RAW=$OUT/raw-$NAME
mkdir -p "$RAW"
rm -f "$RAW"/*.jsonl
LOG=$OUT/$NAME.log
COMMAND="bash bench/run_gemm_race.sh (NAME=$NAME ROUNDS=$ROUNDS FILTER=$FILTER)"
exec > >(tee "$LOG") 2>&1
echo "== $COMMAND, $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short=12 HEAD)"
echo "== CPU: $CPU_LINE"
echo "== load before: $(cat /proc/loadavg)"
ps -eo pcpu,etime,comm --sort=-pcpu | head -4

if [ ! -e /usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0 ] || [ ! -e /usr/lib/x86_64-linux-gnu/blis-pthread/libblis.so.4 ]; then
    apt-get install -y libopenblas0-pthread libblis4-pthread
fi
source bench/torch_python.sh
(cd bench/gemm-race && cargo build --release)
RACE=bench/gemm-race/target/release/tensorscope-gemm-race
"$RACE" peak | tee "$RAW/peak.jsonl"
"$RACE" shapes > "$RAW/shapes.json"

for r in $(seq 1 "$ROUNDS"); do
    for lv in $LEVELS; do
        if [ "$lv" = v4 ]; then OB=SkylakeX; BL=0; else OB=Haswell; BL=3; fi
        mapfile -t CAPS < <(torch_caps "$lv")
        echo "== round $r, level $lv"
        "$RACE" gemm019 "$lv" "$FILTER" >> "$RAW/gemm019.jsonl"
        "$RACE" pgx "$lv" "$FILTER" >> "$RAW/pgx.jsonl"
        OPENBLAS_CORETYPE=$OB "$RACE" openblas "$lv" "$FILTER" >> "$RAW/openblas.jsonl"
        BLIS_ARCH_TYPE=$BL "$RACE" blis "$lv" "$FILTER" >> "$RAW/blis.jsonl"
        env "${CAPS[@]}" "$PY" bench/torch_gemm_race.py "$lv" "$FILTER" \
            < "$RAW/shapes.json" >> "$RAW/torch.jsonl"
    done
done
echo "== load after: $(cat /proc/loadavg)"
"$PY" bench/report_gemm_race.py "$RAW" "$COMMAND" > "$OUT/$NAME.md"
cat "$OUT/$NAME.md"
