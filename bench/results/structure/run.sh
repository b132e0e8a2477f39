#!/usr/bin/env bash
# Issue 18's before/after: the CPU benchmark table (benches/cpu.rs, the
# tensorscope side of bench/run_cpu.sh) from the commit before the
# structure work (BASE) and from after it (NEW), alternated ROUNDS times in
# one run on one idle machine. Binaries built with
#   cargo bench --bench cpu --features bench-matmul --no-run
# at each commit and copied aside.
set -euo pipefail
BASE=${BASE:-/work/bench_base_cpu}
NEW=${NEW:-/work/bench_new_cpu}
ROUNDS=${ROUNDS:-3}
OUT=$(dirname "$0")
echo "== $(date -u +%FT%TZ) load: $(cat /proc/loadavg)"
for r in $(seq 1 "$ROUNDS"); do
    echo "== round $r: base"
    "$BASE" --json "$OUT/base-r$r.json"
    echo "== round $r: new"
    "$NEW" --json "$OUT/new-r$r.json"
done
echo "== $(date -u +%FT%TZ) load: $(cat /proc/loadavg)"
