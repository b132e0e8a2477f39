#!/usr/bin/env bash
# The aarch64 build (the NEON level of src/backend/cpu/simd.rs), on an
# x86-64 machine: clippy for aarch64-unknown-linux-gnu, and the lib's unit
# tests and the integration tests cross-compiled and run under qemu-user.
# Called by .ci/run; runs alone too (12 minutes on the 2-core development
# VM, most of it in qemu). It installs the target's std with rustup, and
# the cross linker and qemu from Debian; where it cannot, it prints
# SKIPPED and exits 0, so that a machine without them still runs the rest
# of CI.
#
# Left out under qemu, with the reason:
# - tests/ui/: trybuild runs the host's cargo on the compile-fail cases
#   (compile-time checks, the same on every target), and the source rules
#   of architecture.rs read files, the same on every target;
# - tests/thread_pool.rs: it re-executes its own binary as a child, which
#   qemu-user runs only where binfmt_misc is set up, and it counts the
#   process's threads, among which qemu has one of its own.
# Doctests are host-only (cargo runs them for the host).
set -euo pipefail
cd "$(dirname "$0")/.."
T=aarch64-unknown-linux-gnu
SYSROOT=/usr/aarch64-linux-gnu

skip() {
    echo "SKIPPED the aarch64 checks: $*"
    exit 0
}

if ! rustup target list --installed | grep -qx "$T"; then
    rustup target add "$T" || skip "rustup could not install the $T std"
fi
if ! command -v aarch64-linux-gnu-gcc >/dev/null || ! command -v qemu-aarch64 >/dev/null; then
    SUDO=
    [ "$(id -u)" = 0 ] || SUDO=sudo
    { $SUDO apt-get update -q && $SUDO apt-get install -y -q \
        gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user; } ||
        skip "apt-get could not install the cross linker and qemu-user"
fi

# The aarch64 build takes ~5 GB (without debug info): on a machine with
# less than 10 GiB free, the host's debug build (target/debug, the x86-64
# tests .ci/run has just run) goes first. A full disk killed the linker
# once.
avail_kb=$(df -Pk . 2>/dev/null | awk 'NR == 2 { print $4 }')
if [ -n "$avail_kb" ] && [ "$avail_kb" -lt $((10 * 1024 * 1024)) ]; then
    echo "less than 10 GiB free: removing target/debug first"
    rm -rf target/debug
fi

# The NVRTC and ptxas checks are the host's (.ci/run runs them): an
# aarch64 process cannot load the x86-64 libnvrtc that .ci/nvrtc-env.sh
# provides, so under qemu they skip as on a machine without NVRTC.
unset TENSORSCOPE_REQUIRE_NVRTC TENSORSCOPE_PTXAS

export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L $SYSROOT"
# No debug info: ~60 test binaries of 130 MB each with line tables.
export CARGO_PROFILE_DEV_DEBUG=false CARGO_PROFILE_TEST_DEBUG=false
# The hostile-input test's 60,000 calls run on the host; under qemu a third
# of them (the same classes) keeps this step's time.
export TENSORSCOPE_HOSTILE_CALLS=20000

echo "== cargo clippy --target $T --all-targets -- -D warnings"
cargo clippy --target "$T" --all-targets -- -D warnings

tests=(--lib)
for f in tests/*.rs tests/*/main.rs; do
    case $f in
        tests/*/main.rs) name=$(basename "$(dirname "$f")") ;;
        *) name=$(basename "$f" .rs) ;;
    esac
    case $name in ui | thread_pool) ;; *) tests+=(--test "$name") ;; esac
done
echo "== cargo test --target $T (under qemu-aarch64): ${tests[*]}"
cargo test --target "$T" "${tests[@]}"
