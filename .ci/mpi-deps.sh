#!/usr/bin/env bash
# Installs what the `mpi` feature builds and runs against, from Debian's
# packages, if it is missing: Open MPI (mpicc, mpirun and the library rsmpi
# links) and libclang (rsmpi's bindgen reads mpi.h with it).
set -euo pipefail
if command -v mpicc >/dev/null && command -v mpirun >/dev/null &&
    ls /usr/lib/llvm-*/lib/libclang.so* >/dev/null 2>&1; then
    echo "Open MPI and libclang are installed"
else
    SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q libopenmpi-dev openmpi-bin libclang-dev
fi
mpirun --version | head -1
