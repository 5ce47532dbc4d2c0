"""What the results were measured on, and the floors they are compared with: the measured
memory copy bandwidth (memory-bound workloads) and the measured single-precision GEMM rate of
the BLAS NumPy links (compute-bound ones)."""
from __future__ import annotations

import os
import platform
import re
import time
from pathlib import Path

import numpy as np

OPENBLAS_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
RECORDED_VARS = OPENBLAS_VARS + ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "NUMBA_NUM_THREADS",
                                 "NUMBA_THREADING_LAYER", "OPENBLAS_NUM_THREADS")


def reuse_freed_memory() -> bool:
    """Ask glibc to keep freed blocks of any size for reuse (M_MMAP_THRESHOLD and
    M_TRIM_THRESHOLD at 1 GiB) instead of returning them to the OS: later allocations in this
    process, every implementation's alike, then skip the page faults of fresh memory. True if
    glibc accepted it."""
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(libc.mallopt(m_mmap_threshold, 1 << 30)) and bool(libc.mallopt(m_trim_threshold, 1 << 30))


def cpu_model() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
        m = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
        if m:
            return m.group(1).strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_id(gpu_name: str | None = None) -> str:
    """A short, file-name-safe tag: `cpu-amd-epyc-2c` or `gpu-nvidia-h200`."""
    text = gpu_name if gpu_name else f"{cpu_model()} {os.cpu_count()}c"
    tag = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return f"{'gpu' if gpu_name else 'cpu'}-{tag}"


def blas_info() -> list[dict]:
    """Which BLAS NumPy uses and with which kernel (threadpoolctl), when that is installed."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return []
    keep = ("user_api", "internal_api", "version", "architecture", "num_threads", "prefix")
    return [{k: v for k, v in d.items() if k in keep} for d in threadpool_info()]


def describe() -> dict:
    import numba
    info = {
        "cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version(),
        "numpy": np.__version__, "numba": numba.__version__,
        "numba_threading_layer": numba.config.THREADING_LAYER,
        "numba_threads": numba.config.NUMBA_NUM_THREADS,
        "blas": blas_info(),
        "env": {k: os.environ[k] for k in RECORDED_VARS if k in os.environ},
    }
    try:
        info["load_average"] = list(os.getloadavg())
    except OSError:
        pass
    return info


def copy_bandwidth(mbytes: int = 256, reps: int = 10) -> dict:
    """Best-of-`reps` GB/s copying between two preallocated float32 arrays, counting the bytes
    read and the bytes written (a STREAM-copy-style number): the better of NumPy's copy (one
    thread) and a Numba prange copy (every core)."""
    n = mbytes * (1 << 20) // 4
    src = np.ones(n, np.float32)
    dst = np.empty_like(src)
    best = {"numpy": _best_of(lambda: np.copyto(dst, src), reps)}
    try:
        copy = _prange_copy()
        best["numba prange"] = _best_of(lambda: copy(src, dst), reps)
    except Exception:      # no Numba threading layer here: NumPy's number stands
        pass
    method, seconds = min(best.items(), key=lambda kv: kv[1])
    return {"gbps": round(2 * src.nbytes / seconds / 1e9, 2), "bytes": 2 * src.nbytes,
            "by": {k: round(2 * src.nbytes / v / 1e9, 2) for k, v in best.items()},
            "method": f"copy of {mbytes} MiB float32, best of {reps}, read + write bytes; "
                      f"best by {method}"}


def _best_of(fn, reps: int) -> float:
    fn()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _prange_copy():
    import numba

    @numba.njit(parallel=True, nogil=True)
    def copy(src, dst):
        for i in numba.prange(src.size):
            dst[i] = src[i]
    return copy


def gemm_rate(n: int = 2048, reps: int = 5) -> dict:
    """Best-of-`reps` GFLOP/s of float32 np.matmul (NumPy's BLAS, all its threads), the best of an
    n x n x n product and an (n/4) x (n/2) x 2n one (the mlp's shape at n = 2048)."""
    rng = np.random.default_rng(0)
    best_rate, best_shape = 0.0, None
    for m, k, p in ((n, n, n), (n // 4, n // 2, 2 * n)):
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, p), dtype=np.float32)
        out = np.empty((m, p), np.float32)
        np.matmul(a, b, out=out)
        for _ in range(reps):
            t0 = time.perf_counter()
            np.matmul(a, b, out=out)
            rate = 2 * m * k * p / (time.perf_counter() - t0) / 1e9
            if rate > best_rate:
                best_rate, best_shape = rate, (m, k, p)
    return {"gflops": round(best_rate, 1),
            "method": f"np.matmul float32, best of {reps} runs of {n}^3 and {n // 4}x{n // 2}x{2 * n} "
                      f"(best: {'x'.join(map(str, best_shape))})"}


def floor_ms(nbytes: int, flops: int, bandwidth_gbps: float, gflops: float | None) -> dict:
    """The time no implementation can beat on this machine: bytes at copy bandwidth, or flops at
    the BLAS GEMM rate, whichever is larger."""
    mem = nbytes / (bandwidth_gbps * 1e9) * 1e3
    comp = flops / (gflops * 1e9) * 1e3 if gflops else 0.0
    return {"ms": _sig(max(mem, comp)), "memory_ms": _sig(mem), "compute_ms": _sig(comp),
            "bound": "memory" if mem >= comp else "compute"}


def _sig(x: float) -> float:
    return float(f"{x:.4g}")
