#!/usr/bin/env bash
# The CUDA check that needs no GPU: compiles every kernels/*.cu with NVRTC
# 13.0 (the version matching the lent devices' driver, CUDA 13.0) for
# compute_80 and compute_90 and checks every kernel the Rust side launches
# exists with the parameter list (count, byte sizes) its launcher passes,
# then assembles every PTX module with ptxas for sm_80 and sm_90 (inline asm
# is only checked there) and requires no register spills (tests/cuda/nvrtc.rs).
# A kernel that does not compile or assemble fails it.
#
# NVRTC comes from the `nvidia-cuda-nvrtc` Python wheel (installed if
# missing or not 13.0.x); its lib/ folder goes on LD_LIBRARY_PATH (NVRTC
# also loads libnvrtc-builtins from there). Extra arguments go to cargo test.
set -euo pipefail
cd "$(dirname "$0")/.."
source "$(dirname "$0")/nvrtc-env.sh"
exec cargo test --features cuda --test cuda "$@" -- --nocapture nvrtc::
