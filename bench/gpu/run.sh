#!/usr/bin/env bash
# Run ON THE GPU MACHINE (no Rust toolchain there), from the repository root
# of the carried working tree, after bench/gpu/prepare.sh filled carry/gpu/
# here:
#
#   bash bench/gpu/run.sh [tests] [bench] [sanitizer]     (default: all three)
#
# Steps, in this order (each is logged and timed; a failing step does not
# stop the next one):
#   env        always: finds libcuda / libnvrtc.so.13 / libcublas.so.13 (the
#              toolkit's folders, then the pip `nvidia` wheels under python3's
#              site-packages; bench/gpu/findlibs.py) and sets LD_LIBRARY_PATH;
#              nvidia-smi; unpacks carry/gpu/bin.tar.xz and checks each
#              executable's sha256 against carry/gpu/manifest.txt.
#   tests      every carried test executable, then the examples. With a
#              GPU present, a CUDA test that prints its skip line is a failure.
#   bench      benches/cuda.rs's executable, then bench/torch_cuda.py, in the
#              same run on the same device.
#   sanitizer  compute-sanitizer over the CUDA test executables (the lib's
#              allocator and kernel tests, tests/cuda*.rs), once per tool in
#              SAN_TOOLS (default: memcheck racecheck initcheck synccheck).
# The bench runs before the sanitizer so that the figures come back even if
# the sanitizer uses up the time.
#
# Output in $OUT (./gpu-out when OUT is unset), 7 files, as the device tool
# returns at most 8: env.log, tests.log, bench-tensorscope.log,
# bench-torch.log, sanitizer.log, status.tsv (step, status, seconds, note)
# and summary.md (bench/gpu/summary.py: the figures side by side with the
# targets of issue 6), rewritten after every step.
#
# Time: the device tool stops a command after 600 s. Steps get what is left
# of RUN_BUDGET_S (default 540) and are skipped, with a line saying so, when
# too little is left; run the missing ones in a second command.
#
# Exit status: 0 when every step that ran passed (without a GPU, the GPU
# steps report "no GPU" and count as passed); 1 when a step failed, or when
# a GPU is present but a check could not run (no compute-sanitizer, say).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
ROOT=$PWD
CARRY=${CARRY:-carry/gpu}
OUT=${OUT:-$ROOT/gpu-out}
BUDGET=${RUN_BUDGET_S:-540}
SAN_TOOLS=${SAN_TOOLS:-memcheck racecheck initcheck synccheck}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
T0=$SECONDS
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tensorscope-gpu.XXXXXX")
BIN=$WORK/bin
mkdir -p "$BIN"
export TENSORSCOPE_KERNEL_CACHE=$WORK/kernels # PTX compiled once for all executables
export RUST_BACKTRACE=1
FAILED=0
STATUS=$OUT/status.tsv
: >"$STATUS"
for f in env tests bench-tensorscope bench-torch sanitizer; do : >"$OUT/$f.log"; done

steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(tests bench sanitizer)
for s in "${steps[@]}"; do
    case $s in tests | bench | sanitizer) ;; *)
        echo "run.sh: unknown step '$s' (steps: tests bench sanitizer)" >&2
        exit 2
        ;;
    esac
done
wanted() { [[ " ${steps[*]} " == *" $1 "* ]]; }

say() { echo "[run.sh +$((SECONDS - T0))s] $*"; }
# record STEP STATUS SECONDS NOTE; STATUS is pass, fail, skip (expected:
# no GPU / not asked) or notrun (a check that should have run did not).
record() {
    printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$STATUS"
    say "$1: $2${4:+ ($4)}"
    case $2 in
        fail) FAILED=1 ;;
        notrun) [ "$HAVE_GPU" = 1 ] && FAILED=1 ;;
    esac
}
summary() {
    python3 "$ROOT/bench/gpu/summary.py" "$OUT" "$ROOT/$CARRY/manifest.txt" >/dev/null 2>"$WORK/summary.err" ||
        { say "summary.py failed: $(tail -3 "$WORK/summary.err")"; printf '# GPU checks\n\nsummary.py failed; see status.tsv and the logs.\n' >"$OUT/summary.md"; }
}
left() { echo $((BUDGET - (SECONDS - T0))); }
# cap SECONDS: the time a command may take, at most what is left minus 20 s.
cap() {
    local l=$(($(left) - 20))
    [ "$1" -lt "$l" ] && echo "$1" || echo "$l"
}
HAVE_GPU=0

# ------------------------------------------------------------------ env ---
t=$SECONDS
{
    echo "== run.sh $(date -Iseconds) on $(hostname), $(uname -srm), $(nproc) cpus"
    echo "== steps: ${steps[*]}; OUT=$OUT; budget ${BUDGET}s"
    echo "== findlibs"
    python3 "$ROOT/bench/gpu/findlibs.py" >"$WORK/libs.sh" 2>"$WORK/libs.err"
    sed 's/^/  /' "$WORK/libs.err"
    # shellcheck disable=SC1091
    . "$WORK/libs.sh" # a { } group runs in this shell: the assignments stay
    echo "  LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
} >>"$OUT/env.log" 2>&1
: "${NVIDIA_SMI:=}" "${COMPUTE_SANITIZER:=}" "${FOUND_NVRTC:=}" "${FOUND_CUBLAS:=}" "${FOUND_DRIVER:=}"
{
    echo "== nvidia-smi"
    if [ -n "$NVIDIA_SMI" ]; then
        "$NVIDIA_SMI" 2>&1
        "$NVIDIA_SMI" --query-gpu=index,name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,power.limit --format=csv 2>&1
        "$NVIDIA_SMI" -L 2>&1 | grep -q '^GPU [0-9]' && HAVE_GPU=1
    else
        echo "nvidia-smi: not found (no NVIDIA driver tools on this machine)"
    fi
    [ -e /dev/nvidia0 ] && HAVE_GPU=1
    echo "== GPU present: $([ $HAVE_GPU = 1 ] && echo yes || echo no)"
    echo "== python3: $(command -v python3) $(python3 -c 'import sys; print(sys.version.split()[0])' 2>&1)"
    python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1 | tail -1
    echo "== compute-sanitizer: ${COMPUTE_SANITIZER:-not found}"
    [ -n "$COMPUTE_SANITIZER" ] && "$COMPUTE_SANITIZER" --version 2>&1 | tail -2
    echo "== manifest ($CARRY/manifest.txt)"
    cat "$ROOT/$CARRY/manifest.txt" 2>&1
} >>"$OUT/env.log" 2>&1

# Unpack the executables into $BIN and check each one's sha256.
env_note=""
env_status=pass
declare -a TESTS=() CUDA_TESTS=()
BENCH="" MDIR="" ARCHIVE=""
declare -a EXAMPLES=()
MANIFEST=$ROOT/$CARRY/manifest.txt
if [ ! -f "$MANIFEST" ]; then
    env_status=fail
    env_note="no $CARRY/manifest.txt: run bench/gpu/prepare.sh where cargo is, in the checkout the device tool sends, and carry $CARRY"
else
    ARCHIVE=$(awk -F'\t' '$1 == "meta" && $2 == "archive" {print $3}' "$MANIFEST")
    MDIR=$(awk -F'\t' '$1 == "meta" && $2 == "manifest_dir" {print $3}' "$MANIFEST")
    need=$(awk -F'\t' '$1 == "meta" && $2 == "glibc_needed" {print $3}' "$MANIFEST")
    have=$(ldd --version 2>/dev/null | head -1 | grep -oE '[0-9]+\.[0-9]+$')
    echo "== glibc: the executables need ${need:-?}, this machine has ${have:-?}" >>"$OUT/env.log"
    if [ -n "$need" ] && [ -n "$have" ] && [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1)" != "$need" ]; then
        env_status=fail
        env_note="$env_note glibc $have is older than the $need the executables need;"
    fi
    if command -v xz >/dev/null; then
        xz -dc "$ROOT/$CARRY/$ARCHIVE" | tar xf - -C "$BIN"
    else # python3's lzma needs no xz binary
        python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1], "r:xz").extractall(sys.argv[2])' "$ROOT/$CARRY/$ARCHIVE" "$BIN"
    fi
    [ $? -eq 0 ] || { env_status=fail; env_note="$env_note cannot unpack $CARRY/$ARCHIVE;"; }
    while IFS=$'\t' read -r kind name size sha; do
        case $kind in '#'* | '' | meta) continue ;; esac
        if [ ! -f "$BIN/$name" ] || [ "$(sha256sum "$BIN/$name" | cut -d' ' -f1)" != "$sha" ]; then
            env_status=fail
            env_note="$env_note $name: missing or sha256 mismatch;"
            continue
        fi
        chmod +x "$BIN/$name"
        case $kind in
            test) TESTS+=("$name") ;;
            test-cuda) TESTS+=("$name") CUDA_TESTS+=("$name") ;;
            bench) BENCH=$BIN/$name ;;
            example) EXAMPLES+=("$name") ;;
        esac
    done <"$MANIFEST"
    echo "== unpacked ${#TESTS[@]} test executables (${#CUDA_TESTS[@]} CUDA), bench: ${BENCH:+yes}, examples: ${EXAMPLES[*]} in $((SECONDS - t))s" >>"$OUT/env.log"
fi
# The tests and the tour read files through the absolute path they were
# built at (CARGO_MANIFEST_DIR); point it at this checkout when it is absent.
if [ -n "$MDIR" ] && [ ! -e "$MDIR" ]; then
    if mkdir -p "$(dirname "$MDIR")" 2>/dev/null && ln -s "$ROOT" "$MDIR" 2>/dev/null; then
        echo "== linked $MDIR -> $ROOT (the build's CARGO_MANIFEST_DIR)" >>"$OUT/env.log"
    else
        env_note="$env_note cannot link $MDIR to the checkout (tests/cuda/nvrtc.rs and the tour will not find their files);"
    fi
fi
[ -n "$FOUND_NVRTC" ] && export TENSORSCOPE_REQUIRE_NVRTC=1 # tests/cuda/nvrtc.rs must run, not skip
# tests/cuda/nvrtc.rs assembles the PTX with ptxas: the toolkit's (CI uses the
# nvidia-cuda-nvcc wheel's; the first GPU run had none named and failed).
if [ -z "${TENSORSCOPE_PTXAS:-}" ]; then
    TENSORSCOPE_PTXAS=$(command -v ptxas || ls /usr/local/cuda*/bin/ptxas 2>/dev/null | head -1)
    [ -n "$TENSORSCOPE_PTXAS" ] && export TENSORSCOPE_PTXAS
fi
echo "== ptxas: ${TENSORSCOPE_PTXAS:-not found}" >>"$OUT/env.log"
gpu_word=$([ $HAVE_GPU = 1 ] && echo "GPU present" || echo "no GPU")
record env "$env_status" $((SECONDS - t)) "$gpu_word; driver ${FOUND_DRIVER:-none}; nvrtc ${FOUND_NVRTC:-none}; cublas ${FOUND_CUBLAS:-none}${env_note:+;$env_note}"
summary

SKIP_RE='no CUDA device|libnvrtc not found'

# ---------------------------------------------------------------- tests ---
if ! wanted tests; then
    record tests skip 0 "not asked for"
elif [ ${#TESTS[@]} -eq 0 ] && [ ${#EXAMPLES[@]} -eq 0 ]; then
    record tests fail 0 "no test executables or examples unpacked"
else
    t=$SECONDS
    fails="" skips=0 ran=0 passed=0 failed=0
    for name in "${TESTS[@]}"; do
        c=$(cap 240)
        if [ "$c" -lt 10 ]; then
            fails="$fails $name(no time left)"
            continue
        fi
        echo "=================== $name (timeout ${c}s)" >>"$OUT/tests.log"
        ts=$SECONDS
        (cd "$ROOT" && TENSORSCOPE_HOSTILE_TRACE=1 timeout -k 5 "$c" "$BIN/$name" --nocapture) >"$WORK/t.log" 2>&1
        rc=$?
        # tests/tensor/hostile.rs traces each of its 20,000 calls: keep the
        # last ones (the call that crashed, if it did).
        if [ "$name" = test-tensor ]; then
            grep -v '^hostile: ' "$WORK/t.log" >>"$OUT/tests.log"
            grep '^hostile: ' "$WORK/t.log" | tail -5 >>"$OUT/tests.log"
            [ $rc -ge 128 ] && { echo "== dmesg (tail)"; dmesg 2>&1 | tail -15; free -g; } >>"$OUT/tests.log" 2>&1
        else
            cat "$WORK/t.log" >>"$OUT/tests.log"
        fi
        n_skip=$(grep -cE "$SKIP_RE" "$WORK/t.log")
        p=$(grep -oE 'test result: [a-zA-Z]+\. [0-9]+ passed; [0-9]+ failed' "$WORK/t.log" | awk '{p += $4; f += $6} END {print p + 0, f + 0}')
        echo "=================== $name: exit $rc, passed/failed ${p/ //}, skip lines $n_skip, $((SECONDS - ts))s" >>"$OUT/tests.log"
        ran=$((ran + 1))
        passed=$((passed + ${p% *}))
        failed=$((failed + ${p#* }))
        skips=$((skips + n_skip))
        if [ $rc -ne 0 ]; then
            fails="$fails $name(exit $rc$([ $rc = 124 ] && echo ', timed out'))"
        elif [ $HAVE_GPU = 1 ] && [ "$n_skip" -gt 0 ]; then
            fails="$fails $name($n_skip CUDA variants SKIPPED although a GPU is present)"
            grep -E "$SKIP_RE" "$WORK/t.log" | head -5 | sed "s/^/  $name: /"
        fi
    done
    # The examples (tour, digits, long_running): each must run on cuda:0
    # when a GPU is present (each prints "on cuda:0" in its first lines).
    for ex in "${EXAMPLES[@]}"; do
        c=$(cap 150)
        if [ "$c" -lt 10 ]; then
            fails="$fails $ex(no time left)"
            continue
        fi
        echo "=================== $ex (timeout ${c}s)" >>"$OUT/tests.log"
        ts=$SECONDS
        (cd "$ROOT" && timeout -k 5 "$c" "$BIN/$ex") >"$WORK/t.log" 2>&1
        rc=$?
        cat "$WORK/t.log" >>"$OUT/tests.log"
        echo "=================== $ex: exit $rc, $((SECONDS - ts))s" >>"$OUT/tests.log"
        if [ $rc -ne 0 ]; then
            fails="$fails $ex(exit $rc)"
        elif [ $HAVE_GPU = 1 ] && ! grep -q ' on cuda' "$WORK/t.log"; then
            fails="$fails $ex(ran on the CPU although a GPU is present)"
        fi
    done
    note="$ran executables, $passed tests passed, $failed failed, $skips CUDA skip lines$([ $HAVE_GPU = 0 ] && echo ' (expected: no GPU)')"
    if [ -n "$fails" ]; then record tests fail $((SECONDS - t)) "$note; FAILED:$fails"; else record tests pass $((SECONDS - t)) "$note"; fi
fi
summary

# ---------------------------------------------------------------- bench ---
if ! wanted bench; then
    record bench skip 0 "not asked for"
elif [ -z "$BENCH" ]; then
    record bench fail 0 "no bench-cuda executable unpacked"
elif [ "$(cap 200)" -lt 30 ]; then
    record bench notrun 0 "no time left (run: bash bench/gpu/run.sh bench)"
else
    t=$SECONDS
    bnote=""
    (cd "$ROOT" && timeout -k 5 "$(cap 200)" "$BENCH") >"$OUT/bench-tensorscope.log" 2>&1
    brc=$?
    (cd "$ROOT" && PYTHONUNBUFFERED=1 timeout -k 5 "$(cap 200)" python3 bench/torch_cuda.py) >"$OUT/bench-torch.log" 2>&1
    prc=$?
    say "bench-tensorscope.log:"
    sed 's/^/    /' "$OUT/bench-tensorscope.log"
    say "bench-torch.log:"
    sed 's/^/    /' "$OUT/bench-torch.log"
    if [ $HAVE_GPU = 0 ]; then
        # Nothing to measure: exercise both programs on the CPU at tiny sizes.
        for prog in tensorscope torch; do
            {
                echo
                echo "== no GPU: smoke run (the CPU, tiny sizes; not a result)"
            } >>"$OUT/bench-$prog.log"
        done
        (cd "$ROOT" && timeout -k 5 "$(cap 120)" "$BENCH" --smoke) >>"$OUT/bench-tensorscope.log" 2>&1 || bnote="$bnote tensorscope smoke run exit $?;"
        (cd "$ROOT" && timeout -k 5 "$(cap 120)" python3 bench/torch_cuda.py --smoke) >>"$OUT/bench-torch.log" 2>&1 || bnote="$bnote torch smoke run exit $?;"
    fi
    if [ $brc -ne 0 ] || [ $prc -ne 0 ] || [ -n "$bnote" ]; then
        record bench fail $((SECONDS - t)) "tensorscope exit $brc, torch exit $prc;$bnote"
    elif grep -q '^skipped: no CUDA device' "$OUT/bench-tensorscope.log" "$OUT/bench-torch.log"; then
        if [ $HAVE_GPU = 1 ]; then
            record bench fail $((SECONDS - t)) "a bench printed its skip line although a GPU is present"
        else
            record bench skip $((SECONDS - t)) "no GPU: both printed their skip line; smoke runs on the CPU passed"
        fi
    else
        record bench pass $((SECONDS - t)) "figures in summary.md"
    fi
fi
summary

# ------------------------------------------------------------ sanitizer ---
if ! wanted sanitizer; then
    record sanitizer skip 0 "not asked for"
elif [ $HAVE_GPU = 0 ]; then
    record sanitizer skip 0 "no GPU (compute-sanitizer: ${COMPUTE_SANITIZER:-not found})"
elif [ -z "$COMPUTE_SANITIZER" ]; then
    record sanitizer notrun 0 "compute-sanitizer not found (looked on PATH and in /usr/local/cuda*/bin)"
elif [ ${#CUDA_TESTS[@]} -eq 0 ]; then
    record sanitizer fail 0 "no CUDA test executables unpacked"
else
    t=$SECONDS
    sfails="" errors=0 unsupported=0
    for tool in $SAN_TOOLS; do
    terr=0
    for name in "${CUDA_TESTS[@]}"; do
        c=$(cap 240)
        if [ "$c" -lt 30 ]; then
            sfails="$sfails $tool:$name(no time left: run 'SAN_TOOLS=$tool bash bench/gpu/run.sh sanitizer')"
            continue
        fi
        # The lib's unit tests: only the CUDA backend's (allocator, kernels).
        filter=()
        [ "$name" = test-lib ] && filter=(backend::cuda)
        # The loader's (tests/data/), the profiler's (tests/memory/), the
        # convolutions' and pooling's (tests/nn/): their CUDA variants.
        case $name in test-data) filter=(gpu::) ;; test-memory) filter=(profiler::gpu::) ;; test-nn) filter=(conv::gpu:: pool::gpu::) ;; esac
        # racecheck and synccheck look only at kernels' shared memory and
        # barriers; initcheck also at every copy. Same tests for each.
        echo "=================== $tool: $name ${filter[*]} (timeout ${c}s)" >>"$OUT/sanitizer.log"
        ts=$SECONDS
        (cd "$ROOT" && timeout -k 5 "$c" "$COMPUTE_SANITIZER" --tool "$tool" --error-exitcode 86 --print-limit 50 \
            "$BIN/$name" --test-threads=1 --nocapture "${filter[@]}") >"$WORK/s.log" 2>&1
        rc=$?
        # The tests' own output is long; keep compute-sanitizer's lines and
        # the test result lines.
        grep -E '^=========|test result:|FAILED|panicked|^failures:' "$WORK/s.log" >>"$OUT/sanitizer.log"
        n=$(grep -oE 'ERROR SUMMARY: [0-9]+ error' "$WORK/s.log" | awk '{s += $3} END {print s + 0}')
        errors=$((errors + n))
        terr=$((terr + n))
        echo "=================== $tool: $name: exit $rc, errors $n, $((SECONDS - ts))s" >>"$OUT/sanitizer.log"
        if grep -qiE 'Device not supported|Target application returned an error|Unable to find injection|not supported on this platform' "$WORK/s.log" &&
            ! grep -q 'ERROR SUMMARY' "$WORK/s.log"; then
            unsupported=1
            sfails="$sfails $tool:$name(compute-sanitizer could not attach: see sanitizer.log)"
        elif [ $rc -ne 0 ] || [ "$n" -gt 0 ]; then
            sfails="$sfails $tool:$name(exit $rc$([ $rc = 124 ] && echo ', timed out'), $n errors)"
        elif grep -qE "$SKIP_RE" "$WORK/s.log"; then
            sfails="$sfails $tool:$name(CUDA variants skipped under the sanitizer)"
        fi
    done
    echo "=================== $tool: ERROR SUMMARY over all executables: $terr errors" >>"$OUT/sanitizer.log"
    done
    snote="${#CUDA_TESTS[@]} executables x tools ($SAN_TOOLS), $errors errors"
    [ $unsupported = 1 ] && snote="$snote; compute-sanitizer refused this machine (it does under gVisor and ran on Firecracker machines: see the device notes, KINDS.md)"
    if [ -n "$sfails" ]; then record sanitizer fail $((SECONDS - t)) "$snote; FAILED:$sfails"; else record sanitizer pass $((SECONDS - t)) "$snote"; fi
fi
summary

# Keep every returned file under the device tool's 16 MiB.
for f in "$OUT"/*.log; do
    if [ "$(stat -c %s "$f")" -gt $((15 * 1024 * 1024)) ]; then
        tail -c $((15 * 1024 * 1024)) "$f" >"$WORK/trunc" && { echo "[truncated to its last 15 MiB]"; cat "$WORK/trunc"; } >"$f"
    fi
done
rm -rf "$WORK"
say "done in $((SECONDS - T0))s: $([ $FAILED = 0 ] && echo 'nothing failed' || echo 'SOMETHING FAILED') ($OUT/summary.md)"
cat "$OUT/summary.md"
exit $FAILED
