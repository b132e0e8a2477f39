#!/usr/bin/env bash
# Issue 50 item 7: benches/distributed.rs under `mpirun -np NP` against
# bench/torch_distributed.py under torchrun (gloo), the same number of
# processes, one thread each, interleaved for ROUNDS rounds; then a fresh
# job of each for the step's peak memory. Writes
# bench/results/distributed.{md,log}.
#
#   bash bench/run_distributed.sh
#   ROUNDS=3 NP=2 bash bench/run_distributed.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
NP=${NP:-2}
OUT=bench/results
LOG=$OUT/distributed.log
source .ci/nvrtc-env.sh >/dev/null 2>&1 || true
# After the sourced file, which sets its own PY.
PY=bench/.venv/bin/python
cargo build --release --features mpi --bench distributed 2>&1 | tail -1
EXE=$(cargo bench --features mpi --bench distributed --no-run 2>&1 | sed -n 's/.*Executable .*(\(.*\))$/\1/p' | tail -1)
export RAYON_NUM_THREADS=1 THREADS=1 OMP_NUM_THREADS=1
MPI=(mpirun --allow-run-as-root --oversubscribe -np "$NP")
TR=(bench/.venv/bin/torchrun --standalone --nproc_per_node "$NP")
{
    echo "# bash bench/run_distributed.sh (ROUNDS=$ROUNDS NP=$NP), $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD)"
    lscpu | grep -E "Model name|CPU family|^Model:|^CPU\(s\)"
    echo "# simd: $(grep -o -w -E 'avx512f|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')"
    "$PY" -c "import torch; print('# torch', torch.__version__)"
    mpirun --version 2>&1 | sed -n 1p
    for r in $(seq 1 "$ROUNDS"); do
        echo "== round $r: tensorscope"
        "${MPI[@]}" "$EXE" | sed 's/^/tensorscope\t/'
        echo "== round $r: torch"
        "${TR[@]}" bench/torch_distributed.py 2>/dev/null | sed 's/^/torch\t/'
    done
    echo "== peak: tensorscope"
    "${MPI[@]}" "$EXE" --peak | sed 's/^/tensorscope\t/'
    echo "== peak: torch"
    "${TR[@]}" bench/torch_distributed.py --peak 2>/dev/null | sed 's/^/torch\t/'
} 2>&1 | tee "$LOG"
"$PY" bench/report_distributed.py "$LOG" > "$OUT/distributed.md"
cat "$OUT/distributed.md"
