#!/usr/bin/env bash
# AddressSanitizer over the test suite (not part of .ci/run: it needs the
# nightly toolchain and rebuilds everything instrumented, ~10 minutes on 2
# cores). Every test binary (the single files and the folders with a
# main.rs) but tests/ui/ (trybuild runs cargo itself, uninstrumented, and
# the source rules beside it read files);
# the lib's unit tests included; doctests excluded.
#
# allocator_may_return_null=1: ASan otherwise aborts on a request above its
# 1 TiB limit, where the system allocator returns null and tensorscope
# returns Err(OutOfMemory) (tests/tensor/errors.rs and tests/tensor/hostile.rs ask for
# such sizes on purpose); its "failed to allocate" warnings are expected.
# .ci/lsan.supp names the tests that leak on purpose (mem::forget).
set -euo pipefail
cd "$(dirname "$0")/.."
tests=()
for f in tests/*.rs tests/*/main.rs; do
    case $f in
        tests/*/main.rs) name=$(basename "$(dirname "$f")") ;;
        *) name=$(basename "$f" .rs) ;;
    esac
    [ "$name" = ui ] || tests+=(--test "$name")
done
ASAN_OPTIONS=allocator_may_return_null=1 \
LSAN_OPTIONS="suppressions=$PWD/.ci/lsan.supp" \
RUSTFLAGS="-Zsanitizer=address" RUSTDOCFLAGS="-Zsanitizer=address" \
CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target/asan} \
    cargo +nightly test --target x86_64-unknown-linux-gnu --no-fail-fast --lib "${tests[@]}"
