#!/usr/bin/env bash
# Run time of two builds of tensorscope, interleaved in one sitting: the op
# matrix (benches/ops.rs) and the end-to-end programs (benches/e2e.rs) of
# an OLD checkout and of this one, each round old, new, then PyTorch for
# reference; bench/compare_builds.py writes the per-row ratios new/old.
# Issue "build"'s no-regression check (its results: bench/results/build.md).
#
#   bash bench/compare_builds.sh /path/to/old/checkout [ROUNDS]
#
# Each checkout builds its benches in its own target directory first
# (`cargo bench --no-run`); run it on an otherwise idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=$(cd "$1" && pwd)
ROUNDS=${2:-3}
OUT=bench/results/raw-build
mkdir -p "$OUT"
rm -f "$OUT"/{old,new,torch}-{ops,e2e}-r*.json
source bench/torch_python.sh

# exe DIR BENCH: the bench executable cargo built in DIR.
exe() {
    (cd "$1" && cargo bench --bench "$2" --no-run --message-format=json 2>/dev/null) |
        "$PY" -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["kind"] == ["bench"] and m.get("executable"):
        print(m["executable"])' | tail -1
}
for b in ops e2e; do
    for side in old new; do
        dir=$([ "$side" = old ] && echo "$OLD" || pwd)
        t0=$(date +%s)
        path=$(exe "$dir" "$b")
        [ -x "$path" ] || { echo "no $b bench executable in $dir" >&2; exit 1; }
        echo "== $side $b: $path (built in $(($(date +%s) - t0)) s)"
        eval "EXE_${side}_$b=\$path"
    done
done

echo "== $(date -u +%Y-%m-%dT%H:%M:%SZ) CPU: $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1), $(nproc) cores; load $(cat /proc/loadavg)"
echo "== old: $(git -C "$OLD" rev-parse --short HEAD), new: $(git rev-parse --short HEAD)$(git diff --quiet -- . ':!bench/results' || echo ' (dirty)')"
for r in $(seq 1 "$ROUNDS"); do
    for b in ops e2e; do
        for side in old new; do
            eval "path=\$EXE_${side}_$b"
            echo "== round $r: $side $b"
            # Each executable runs in its own checkout.
            (cd "$([ "$side" = old ] && echo "$OLD" || pwd)" && "$path" --bench --json "$OLDPWD/$OUT/$side-$b-r$r.json" >/dev/null)
        done
        threads=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['threads'])" "$OUT/new-$b-r$r.json")
        echo "== round $r: torch $b (threads $threads)"
        "$PY" "bench/torch_$b.py" --threads "$threads" --json "$OUT/torch-$b-r$r.json" >/dev/null
    done
done
echo "== done $(date -u +%Y-%m-%dT%H:%M:%SZ); load $(cat /proc/loadavg)"
"$PY" bench/compare_builds.py "$OUT" "$ROUNDS"
