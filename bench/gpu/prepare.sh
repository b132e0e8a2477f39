#!/usr/bin/env bash
# Run HERE, on the machine with the Rust toolchain, before a session with a
# GPU: builds everything the GPU checks of issue 6 run and puts it in the
# git-ignored folder carry/gpu/, which the device tool carries
# (carry = ["carry/gpu"]) to a GPU machine that has no toolchain, where
# bench/gpu/run.sh runs it.
#
#   bash bench/gpu/prepare.sh
#
# KEEP="test-cuda test-memory example-tour ..." carries only the executables
# named (the archive of all of them can exceed the 64 MiB the device tool
# carries); DEST=/abs/path packs into another folder (a build in a copy of
# the checkout, with CARGO_TARGET_DIR set, packing into the checkout the
# device tool sends); STRIP=--strip-all strips the symbols too (panics then
# name no functions; a little smaller).
#
# What it builds (release profile, --features cuda):
#   * every test executable of `cargo test --release --features cuda --no-run`
#     (the lib's unit tests as `test-lib`; tests/ui/ is left out: trybuild
#     runs cargo, which the GPU machine does not have);
#   * benches/cuda.rs (`bench-cuda`) and the examples tour, digits,
#     long_running, seeing_memory, double_buffering, triple_buffering, cnn, pruning and
#     data_loader (`example-NAME`), which run on cuda:0 when a GPU is present.
# The sanitizer step of run.sh runs over the `test-cuda` kind: the lib's
# tests, tests/cuda/ (the CUDA backend's binary), and the `gpu::` tests of
# tests/data/ (the loader's copy stream and events), tests/memory/ (the
# profiler's events) and tests/nn/ (the convolutions and pooling).
# Each executable is stripped of debug info (symbols stay, so panics still
# name functions), and all of them go into one archive, carry/gpu/bin.tar.xz
# (run.sh unpacks it): the device tool carries at most 64 MiB in all, this
# checkout's files included. If even the archive does not fit, the least
# important tests are left out (named in the manifest and printed).
# carry/gpu/manifest.txt lists each executable with its size and sha256, the
# commit, the toolchain and the absolute source path the tests were built at
# (tests/cuda/nvrtc.rs and the tour read files through it; run.sh links it to the
# checkout on the GPU machine).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
DEST=${DEST:-carry/gpu}
LIMIT=$((64 * 1024 * 1024))
# Test binaries in the order they are dropped if even the compressed set
# does not fit (the lib's, cuda, nn, autograd, memory and data are never dropped).
DROP_ORDER="thread_pool lifetimes agreement tensor"
KEEP_ALWAYS="lib cuda nn autograd memory data"

export CARGO_TERM_COLOR=never
json=$(mktemp)
trap 'rm -f "$json" "$json.xz"' EXIT

echo "== cargo test --release --features cuda --no-run"
# With KEEP, only the test targets it names are built.
targets=()
for k in ${KEEP:-}; do
    case $k in test-lib) targets+=(--lib) ;; test-*) targets+=(--test "${k#test-}") ;; esac
done
cargo test --release --features cuda --no-run "${targets[@]}" --message-format=json-render-diagnostics >"$json"
echo "== cargo build --release --features cuda --bench cuda --example tour --example digits --example long_running --example seeing_memory --example double_buffering --example triple_buffering --example data_loader --example cnn --example pruning"
cargo build --release --features cuda --bench cuda --example tour --example digits --example long_running --example seeing_memory --example double_buffering --example triple_buffering --example data_loader --example cnn --example pruning --message-format=json-render-diagnostics >>"$json"

rm -rf "$DEST"
mkdir -p "$DEST"

# name<TAB>path of every executable we carry (last build of each wins).
list=$(python3 - "$json" <<'PY'
import json, os, sys
exes = {}
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    t = m["target"]
    kind = t["kind"][0]
    if kind == "lib" and m["profile"]["test"]:
        name = "test-lib"
    elif kind == "test":
        if t["name"] == "ui":
            continue  # trybuild: needs cargo
        name = "test-" + t["name"]
    elif kind == "bench" and t["name"] == "cuda":
        name = "bench-cuda"
    elif kind == "example" and t["name"] in ("tour", "digits", "long_running", "seeing_memory", "double_buffering", "triple_buffering", "data_loader", "cnn", "pruning"):
        name = "example-" + t["name"]
    else:
        continue
    keep = os.environ.get("KEEP")
    if keep and name not in keep.split():
        continue
    exes[name] = m["executable"]
for name in sorted(exes):
    print(f"{name}\t{exes[name]}")
PY
)
[ -n "$list" ] || { echo "prepare.sh: cargo reported no executables" >&2; exit 1; }

echo "== stripping debug info into $DEST/"
while IFS=$'\t' read -r name path; do
    objcopy ${STRIP:---strip-debug} "$path" "$DEST/$name"
done <<<"$list"
du -b "$DEST"/* | sort -n | awk '{printf "  %8.2f MiB  %s\n", $1 / 1048576, $2}'

# What travels besides carry/: tracked and untracked-not-ignored files (and
# a shared/ folder, if this checkout has one).
tree_bytes=$(git ls-files -z -co --exclude-standard | xargs -0 -r stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
if [ -d shared ]; then tree_bytes=$((tree_bytes + $(du -sb shared | cut -f1))); fi
budget=$((LIMIT - tree_bytes - 1024 * 1024)) # 1 MiB of slack
echo "checkout files that travel: $((tree_bytes / 1024)) KiB; room for $DEST: $((budget / 1024)) KiB"

# Every executable holds the same library and dependencies (~19 MiB of
# code each), so one xz stream over all of them (64 MiB dictionary, one
# thread so matches cross files) is about half the size of compressing each
# alone: 28 executables, 520 MB stripped, came to 29 MB (62 MB separately).
ARCHIVE=bin.tar.xz
exes() { ls "$DEST" | grep -E '^(test|bench|example)-'; }
pack() {
    echo "== packing $(exes | wc -l) executables into $DEST/$ARCHIVE (xz -9, a few minutes)"
    rm -f "$DEST/$ARCHIVE"
    exes | tar cf - -C "$DEST" --owner=0 --group=0 --sort=name -T - | xz -9 -T1 >"$json.xz"
    mv "$json.xz" "$DEST/$ARCHIVE"
    echo "   $(stat -c %s "$DEST/$ARCHIVE") bytes"
}
pack
left_out="ui (trybuild runs cargo)"
for t in $DROP_ORDER; do
    [ "$(stat -c %s "$DEST/$ARCHIVE")" -le "$budget" ] && break
    [ -e "$DEST/test-$t" ] || continue
    echo "== $((budget / 1048576)) MiB exceeded: leaving out test-$t"
    rm -f "$DEST/test-$t"
    left_out="$left_out, $t"
    pack
done
if [ "$(stat -c %s "$DEST/$ARCHIVE")" -gt "$budget" ]; then
    echo "prepare.sh: $DEST/$ARCHIVE still exceeds the $budget bytes left of 64 MiB (kept: $KEEP_ALWAYS)" >&2
    exit 1
fi

{
    printf '# tensorscope GPU carry: made by bench/gpu/prepare.sh, run by bench/gpu/run.sh\n'
    printf 'meta\tcommit\t%s%s\n' "$(git rev-parse HEAD)" "$(git diff --quiet HEAD -- src tests benches examples kernels Cargo.toml Cargo.lock || echo ' (dirty)')"
    printf 'meta\tdate\t%s\n' "$(date -Iseconds)"
    printf 'meta\trustc\t%s\n' "$(rustc --version)"
    printf 'meta\tbuild\tcargo test --release --features cuda --no-run; cargo build --release --features cuda --bench cuda --example tour --example digits --example long_running --example seeing_memory --example double_buffering --example triple_buffering --example data_loader --example cnn --example pruning; objcopy --strip-debug\n'
    printf 'meta\tarchive\t%s\n' "$ARCHIVE"
    # The newest glibc symbol version any executable needs (the GPU machine's
    # glibc must be at least this: run.sh compares).
    printf 'meta\tglibc_needed\t%s\n' "$(while IFS=$'\t' read -r _ path; do objdump -T "$path"; done <<<"$list" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1 | sed 's/GLIBC_//')"
    printf 'meta\tmanifest_dir\t%s\n' "$ROOT"
    printf 'meta\tleft_out\t%s\n' "$left_out"
    while IFS=$'\t' read -r name path; do
        [ -e "$DEST/$name" ] || continue
        case $name in
            bench-*) kind=bench ;;
            example-*) kind=example ;;
            test-lib | test-cuda | test-data | test-memory | test-nn) kind=test-cuda ;;
            *) kind=test ;;
        esac
        printf '%s\t%s\t%s\t%s\n' "$kind" "$name" "$(stat -c %s "$DEST/$name")" "$(sha256sum "$DEST/$name" | cut -d' ' -f1)"
    done <<<"$list"
} >"$DEST/manifest.txt"

# Only the archive and the manifest travel.
find "$DEST" -mindepth 1 -maxdepth 1 ! -name "$ARCHIVE" ! -name manifest.txt -delete
echo "== $DEST: $(ls "$DEST" | tr '\n' ' '); $(du -cb "$DEST"/* | tail -1 | cut -f1) bytes (room: $budget)"
echo "left out: $left_out"
echo "next, on the GPU machine: bash bench/gpu/run.sh   (with carry = [\"carry/gpu\"])"
