#!/usr/bin/env bash
# Sourced by .ci/run and .ci/nvrtc-check.sh: makes NVRTC 13.0 (the version
# matching the lent devices' driver, CUDA 13.0) loadable, from the
# `nvidia-cuda-nvrtc` Python wheel, names ptxas 13.0 from the
# `nvidia-cuda-nvcc` wheel in TENSORSCOPE_PTXAS (tests/cuda/nvrtc.rs assembles
# every kernel's PTX for sm_80 and sm_90), installs either wheel if it is
# missing or not 13.0.x, and requires those checks to run rather than skip.
PY=${PYTHON:-python3}

# wheel_file PACKAGE FILE: the path of FILE (e.g. lib/libnvrtc.so.13) in the
# installed 13.0.x wheel PACKAGE; fails if the wheel is missing, of another
# version, or lacks the file.
wheel_file() {
    "$PY" - "$1" "$2" <<'PYEOF'
import importlib.metadata, importlib.util, os, sys
pkg, rel = sys.argv[1], sys.argv[2]
try:
    v = importlib.metadata.version(pkg)
except importlib.metadata.PackageNotFoundError:
    sys.exit(1)
if not v.startswith("13.0."):
    sys.exit(2)
spec = importlib.util.find_spec("nvidia")
for base in (spec.submodule_search_locations if spec else []):
    for sub in ("cu13", pkg.replace("nvidia-", "").replace("-", "_")):
        p = os.path.join(base, sub, rel)
        if os.path.exists(p):
            print(p)
            sys.exit(0)
sys.exit(3)
PYEOF
}

# need PACKAGE FILE: wheel_file, installing PACKAGE==13.0.* first if needed.
need() {
    wheel_file "$1" "$2" || {
        echo "installing $1==13.0.*" >&2
        "$PY" -m pip install --quiet "$1==13.0.*" >&2
        wheel_file "$1" "$2"
    }
}

nvrtc=$(need nvidia-cuda-nvrtc lib/libnvrtc.so.13)
libdir=$(dirname "$nvrtc")
echo "NVRTC: $libdir" >&2
export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
ptxas=$(need nvidia-cuda-nvcc bin/ptxas)
echo "ptxas: $ptxas" >&2
export TENSORSCOPE_PTXAS="$ptxas"
export TENSORSCOPE_REQUIRE_NVRTC=1
