#!/usr/bin/env bash
# Sourced by .ci/run and .ci/nvrtc-check.sh: makes NVRTC 13.0 (the version
# matching the lent devices' driver, CUDA 13.0) loadable, from the
# `nvidia-cuda-nvrtc` Python wheel (installed if missing or not 13.0.x), and
# requires the NVRTC compile check (tests/nvrtc.rs) to run rather than skip.
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
