#!/usr/bin/env python3
"""Finds what the carried executables need on the GPU machine and prints
shell assignments for bench/gpu/run.sh to `eval` (a report goes to stderr):

* libcuda.so.1 (the driver) and the CUDA version it supports;
* libnvrtc.so.13: every copy found (the toolkit's, the pip `nvidia` wheels'
  under python3's site-packages, the loader's), with the version each
  reports; the newest one not newer than the driver is chosen, because
  tensorscope JIT-compiles NVRTC's PTX with the driver, and a driver refuses
  PTX from a newer NVRTC (CUDA_ERROR_UNSUPPORTED_PTX_VERSION);
* libcublas.so.13 and libcublasLt.so.13 (one folder holding both);
* compute-sanitizer and nvidia-smi.

Never fails: what is missing is printed as an empty assignment and a line
on stderr.
"""

import ctypes
import glob
import os
import shlex
import shutil
import site
import subprocess
import sys


def say(msg):
    print(f"findlibs: {msg}", file=sys.stderr)


def site_dirs():
    dirs = []
    try:
        dirs += site.getsitepackages()
    except Exception:  # noqa: BLE001 (virtualenvs without it)
        pass
    try:
        dirs.append(site.getusersitepackages())
    except Exception:  # noqa: BLE001
        pass
    try:
        import nvidia  # namespace package of the pip CUDA wheels

        dirs += [os.path.dirname(p) for p in nvidia.__path__]
    except Exception:  # noqa: BLE001
        pass
    try:  # PyTorch's own folder (some builds bundle the CUDA libraries)
        import importlib.util

        spec = importlib.util.find_spec("torch")
        if spec and spec.submodule_search_locations:
            dirs += [os.path.dirname(p) for p in spec.submodule_search_locations]
    except Exception:  # noqa: BLE001
        pass
    return dirs


def candidate_dirs():
    dirs = []
    for var in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"):
        if os.environ.get(var):
            dirs += [os.path.join(os.environ[var], "lib64"), os.path.join(os.environ[var], "targets/x86_64-linux/lib")]
    dirs += ["/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib"]
    dirs += sorted(glob.glob("/usr/local/cuda-*/lib64"), reverse=True)
    dirs += sorted(glob.glob("/usr/local/cuda-*/targets/x86_64-linux/lib"), reverse=True)
    dirs += ["/usr/local/nvidia/lib64", "/usr/local/nvidia/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib/wsl/lib"]
    for sp in site_dirs():
        dirs += [os.path.join(sp, "nvidia/cu13/lib")]
        dirs += sorted(glob.glob(os.path.join(sp, "nvidia/*/lib")))
        dirs += [os.path.join(sp, "torch/lib")]
    dirs += [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=20).stdout
        dirs += [os.path.dirname(line.split("=>")[-1].strip()) for line in out.splitlines() if "=>" in line]
    except Exception:  # noqa: BLE001
        pass
    seen, uniq = set(), []
    for d in dirs:
        r = os.path.realpath(d)
        if r not in seen and os.path.isdir(r):
            seen.add(r)
            uniq.append(r)
    return uniq


def find_all(name, dirs):
    return [d for d in dirs if os.path.exists(os.path.join(d, name))]


def driver_version(path):
    try:
        lib = ctypes.CDLL(path)
        v = ctypes.c_int(0)
        if lib.cuDriverGetVersion(ctypes.byref(v)) == 0:
            return v.value // 1000, (v.value % 1000) // 10
    except OSError as e:
        say(f"cannot load {path}: {e}")
    return None


def nvrtc_version(path):
    try:
        lib = ctypes.CDLL(path)
        a, b = ctypes.c_int(0), ctypes.c_int(0)
        if lib.nvrtcVersion(ctypes.byref(a), ctypes.byref(b)) == 0:
            return a.value, b.value
    except OSError as e:
        say(f"cannot load {path}: {e}")
    return None


def which(name, extra):
    p = shutil.which(name)
    if p:
        return p
    for pattern in extra:
        for c in sorted(glob.glob(pattern), reverse=True):
            if os.access(c, os.X_OK):
                return c
    return ""


def main():
    dirs = candidate_dirs()
    libdirs = []

    cuda_dirs = find_all("libcuda.so.1", dirs)
    drv = None
    if cuda_dirs:
        drv = driver_version(os.path.join(cuda_dirs[0], "libcuda.so.1"))
        say(f"driver: {cuda_dirs[0]}/libcuda.so.1, supports CUDA {drv[0]}.{drv[1]}" if drv else f"driver: {cuda_dirs[0]}/libcuda.so.1 (version unknown)")
        libdirs.append(cuda_dirs[0])
    else:
        say("driver: libcuda.so.1 not found (no NVIDIA driver on this machine)")

    nvrtc = []
    for d in find_all("libnvrtc.so.13", dirs):
        v = nvrtc_version(os.path.join(d, "libnvrtc.so.13"))
        say(f"nvrtc candidate: {d}/libnvrtc.so.13 version {'%d.%d' % v if v else '?'}")
        nvrtc.append((d, v))
    ok = [(d, v) for d, v in nvrtc if v is not None and (drv is None or v <= drv)]
    chosen = max(ok, key=lambda dv: dv[1])[0] if ok else (nvrtc[0][0] if nvrtc else "")
    if chosen:
        v = dict(nvrtc)[chosen]
        say(f"nvrtc: chose {chosen} ({'%d.%d' % v if v else '?'})")
        if drv and v and v > drv:
            say(f"WARNING: NVRTC {v[0]}.{v[1]} is newer than the driver's CUDA {drv[0]}.{drv[1]}: kernels may fail to load")
        libdirs.append(chosen)
    else:
        say("nvrtc: libnvrtc.so.13 not found anywhere")

    blas = [d for d in find_all("libcublas.so.13", dirs) if os.path.exists(os.path.join(d, "libcublasLt.so.13"))]
    if blas:
        say(f"cublas: {blas[0]}/libcublas.so.13 (and libcublasLt.so.13)")
        libdirs.append(blas[0])
    else:
        say("cublas: libcublas.so.13 with libcublasLt.so.13 not found")

    san = which("compute-sanitizer", ["/usr/local/cuda/bin/compute-sanitizer", "/usr/local/cuda-*/bin/compute-sanitizer",
                                      "/usr/local/cuda*/compute-sanitizer/compute-sanitizer", "/opt/nvidia/*/compute-sanitizer"])
    smi = which("nvidia-smi", ["/usr/local/nvidia/bin/nvidia-smi", "/usr/bin/nvidia-smi"])
    say(f"compute-sanitizer: {san or 'not found'}")
    say(f"nvidia-smi: {smi or 'not found'}")

    seen, path = set(), []
    for d in libdirs + [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]:
        if d not in seen:
            seen.add(d)
            path.append(d)
    print(f"export LD_LIBRARY_PATH={shlex.quote(':'.join(path))}")
    print(f"FOUND_DRIVER={shlex.quote('%d.%d' % drv if drv else ('yes' if cuda_dirs else ''))}")
    nv = dict(nvrtc).get(chosen) if chosen else None
    print(f"FOUND_NVRTC={shlex.quote(('%s (%d.%d)' % (chosen, *nv)) if nv else chosen)}")
    print(f"FOUND_CUBLAS={shlex.quote(blas[0] if blas else '')}")
    print(f"COMPUTE_SANITIZER={shlex.quote(san)}")
    print(f"NVIDIA_SMI={shlex.quote(smi)}")


if __name__ == "__main__":
    main()
