#!/usr/bin/env bash
# The CUDA check that needs no GPU: compiles every kernels/*.cu with NVRTC
# 13.0 (the version matching the lent devices' driver, CUDA 13.0) for
# compute_80 and compute_90 and checks every kernel name the Rust side
# launches exists (tests/nvrtc.rs). A kernel that does not compile fails it.
#
# NVRTC comes from the `nvidia-cuda-nvrtc` Python wheel (installed if
# missing or not 13.0.x); its lib/ folder goes on LD_LIBRARY_PATH (NVRTC
# also loads libnvrtc-builtins from there). Extra arguments go to cargo test.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

nvrtc_libdir() {
    "$PY" - <<'PYEOF'
import importlib.metadata, importlib.util, os, sys
try:
    v = importlib.metadata.version("nvidia-cuda-nvrtc")
except importlib.metadata.PackageNotFoundError:
    sys.exit(1)
if not v.startswith("13.0."):
    sys.exit(2)
spec = importlib.util.find_spec("nvidia")
for base in (spec.submodule_search_locations if spec else []):
    for sub in ("cu13/lib", "cuda_nvrtc/lib"):
        d = os.path.join(base, sub)
        if os.path.exists(os.path.join(d, "libnvrtc.so.13")):
            print(d)
            sys.exit(0)
sys.exit(3)
PYEOF
}

if ! libdir=$(nvrtc_libdir); then
    echo "installing nvidia-cuda-nvrtc==13.0.*" >&2
    "$PY" -m pip install --quiet 'nvidia-cuda-nvrtc==13.0.*'
    libdir=$(nvrtc_libdir)
fi
echo "NVRTC: $libdir" >&2
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TENSORSCOPE_REQUIRE_NVRTC=1
exec cargo test --features cuda --test nvrtc "$@" -- --nocapture
