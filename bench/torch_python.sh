# Sourced by the bench runners: sets PY to a python3 with torch and numpy,
# installing torch==$PYTORCH_VERSION (default 2.15.0) and numpy from PyPI
# into bench/.venv only when the system python3 lacks them.
PYTORCH_VERSION=${PYTORCH_VERSION:-2.15.0}
PY=python3
if ! python3 -c "import torch, numpy" 2>/dev/null; then
    PY=bench/.venv/bin/python
    if ! "$PY" -c "import torch, numpy" 2>/dev/null; then
        echo "== installing torch==$PYTORCH_VERSION and numpy from PyPI into bench/.venv"
        python3 -m venv bench/.venv
        "$PY" -m pip install --quiet "torch==$PYTORCH_VERSION" numpy
    fi
fi
echo "== $("$PY" -c 'import torch; print("torch", torch.__version__)')"
