"""Measuring this machine for its cpu hardware profile, and choosing a compile's profile:
`hardware_profile(name, target)` gives a datasheet GPU, the running device, or this cpu's
measured profile (read from the cache, compiler/plan/hardware.py, or measured here once). It
compiles chains, so it sits above the pipeline, which never imports it: the profile is handed
down in the compile options. See docs/FUSION.md, "Hardware profiles".
"""
from __future__ import annotations

import contextlib
import json
import os
import time
import types
from dataclasses import replace
from pathlib import Path

import numba
import numpy as np

from fusec.dsl.checker import check_module
from fusec.dsl.parser import parse_text

from . import mathfns
from .emit.module import CPU_FASTMATH
from .errors import CacheError
from .options import CompileOptions
from .pipeline import compile_typed
from .plan.hardware import (GPU_WEIGHTS, GPUS, GB, KB, MB, HardwareProfile, blas_threads, cache_dir,
                            cpu_cache_path, cpu_model, get, move_aside, profile_key,
                            checked_profile)

# plans the calibration chains: any fixed profile will do (they are timed, not predicted)
CALIBRATION = replace(GPUS["seed"], name="calibration", kind="cpu", units=os.cpu_count() or 1)


def hardware_profile(name: str | None, target: str, notice=None) -> HardwareProfile:
    """The profile a compile for `target` ('gpu' | 'cpu') plans for: `name` (h200, h100, a100,
    seed, device, cpu, or a registered one), or the target's default (the H200 datasheet for
    gpu, this machine's measured profile for cpu). `notice(text)` is told before a measurement."""
    if name is None:
        name = "cpu" if target == "cpu" else "h200"
    if name.lower() != "cpu":
        return get(name)
    return cpu_profile(notice=notice)


_CPU: HardwareProfile | None = None


def cpu_profile(refresh: bool = False, notice=None) -> HardwareProfile:
    """This machine's measured profile: from this process, else the cache, else measured now
    (and cached). A cache entry that is not a valid profile is reported (`notice`), moved
    aside and measured again; a cache directory that is a file is a CacheError."""
    global _CPU
    if _CPU is not None and not refresh:
        return _CPU
    check_cache_dir()
    cached = None if refresh else _cached(notice)
    if cached is not None:
        _CPU = cached
        return _CPU
    if notice is not None:
        notice(f"measuring this machine for the cpu cost model (about 10 s, once; cached in {cpu_cache_path()})")
    _CPU = measure_cpu()
    _store(_CPU, notice)
    return _CPU


def check_cache_dir() -> None:
    """A CacheError when the cache directory exists and is not a directory."""
    directory = cache_dir()
    if not directory.exists() or directory.is_dir():
        return
    if os.environ.get("FUSEC_CACHE_DIR"):
        raise CacheError(f"FUSEC_CACHE_DIR={directory} is not a directory; point it at a directory (fusec caches "
                         "the measured cpu profile there)")
    raise CacheError(f"the fusec cache directory {directory} is not a directory; remove it, or set "
                     "FUSEC_CACHE_DIR to a directory")


def _cached(notice) -> HardwareProfile | None:
    """The cached profile when it was measured for this machine (the key matches) and is valid;
    an invalid entry is moved aside (reported through `notice`), a stale one left to be replaced."""
    path = cpu_cache_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        return _invalid(path, f"cannot be read ({e})", notice)
    try:
        data = json.loads(text)
    except ValueError as e:
        return _invalid(path, f"is not JSON ({e})", notice)
    if not isinstance(data, dict) or not isinstance(data.get("key"), str) or "profile" not in data:
        return _invalid(path, "is not a cached profile (an object with 'key' and 'profile')", notice)
    if data["key"] != profile_key():
        return None                      # measured for another CPU, calibration or emitter: measure again
    profile = checked_profile(data["profile"])
    if isinstance(profile, str):
        return _invalid(path, f"is invalid ({profile})", notice)
    return profile


def _invalid(path: Path, why: str, notice) -> None:
    where = move_aside(path)
    if notice is not None:
        notice(f"the cached cpu profile {path} {why}; {where} and measuring again")
    return None


def _store(profile: HardwareProfile, notice) -> None:
    """Cache the measured profile (atomically); say so when it cannot be cached."""
    path = cpu_cache_path()
    data = json.dumps({"key": profile_key(), "profile": profile.as_dict()}, indent=2) + "\n"
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(data)
        os.replace(tmp, path)
    except OSError as e:
        try:
            tmp.unlink()
        except OSError:
            pass
        if notice is not None:
            notice(f"cannot cache the cpu profile in {path} ({e.strerror or e}); it will be measured again "
                   "by every run")


ROWS = 32

def emitted_fastmath():
    """The fastmath flags compiler/emit puts on cpu kernels (the loops here must match them)."""
    text = str(CPU_FASTMATH).strip()
    if text in ("True", "False"):
        return text == "True"
    return set(t.strip().strip("'\"") for t in text.strip("{}").split(",") if t.strip())


FASTMATH = emitted_fastmath()
JIT = dict(parallel=True, fastmath=FASTMATH, error_model="numpy")


@numba.njit(**JIT)
def copy_into(a, out, reps=1):
    for t in numba.prange(a.shape[0] // ROWS):
        for _rep in range(reps):
            for r in range(ROWS):
                for j in range(a.shape[1]):
                    out[t * ROWS + r, j] = a[t * ROWS + r, j]


@numba.njit(**JIT)
def copy_fresh(a):
    out = np.empty(a.shape, np.float32)
    for t in numba.prange(a.shape[0] // ROWS):
        for r in range(ROWS):
            for j in range(a.shape[1]):
                out[t * ROWS + r, j] = a[t * ROWS + r, j]
    return out


@numba.njit(**JIT)
def empty_region(x):
    for i in numba.prange(x.shape[0]):
        tmp = np.empty((1,), np.float32)
        tmp[0] = x[i, 0]
        x[i, 0] = tmp[0]



def emitted_chain(src: str, binding: dict[str, int], vector_bits: int = 0):
    """(host function, inputs) of an FDSL chain compiled for the cpu target, planned for the
    fixed CALIBRATION profile (its loops vectorized `vector_bits` wide; 0: LLVM's default);
    inputs are seeded uniform [0, 1) f32 arrays."""
    chain = check_module(parse_text(src, "<calibrate>")).chains[0]
    hw = replace(CALIBRATION, vector_bits=vector_bits)
    st = compile_typed(chain, binding, options=CompileOptions(target="cpu", hardware=hw))
    mod = types.ModuleType(f"fusec_calibrate_{chain.name}")
    exec(compile(st.emitted.source, f"<calibrate {chain.name}>", "exec"), mod.__dict__)
    rng = np.random.default_rng(0)
    inputs = [rng.random(p.type.concrete(binding), dtype=np.float32) for p in chain.param_nodes]
    return getattr(mod, st.emitted.entries[chain.name].host), inputs


def _best(fn, reps: int, budget_s: float = 2.0) -> float:
    """Minimum wall time of fn() over up to `reps` calls (within about budget_s): this machine
    may share its cores, and the OpenMP layer then waits a timeslice for a busy core; the
    minimum is the undisturbed run."""
    fn()
    out = []
    start = time.perf_counter()
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
        if t0 - start > budget_s and len(out) >= 3:
            break
    return min(out)


def _quiet_best(fn, tries: int = 6, good: float = 1e-4) -> float:
    """Like _best for a parallel region, which needs every core: while another process keeps a
    core busy each region waits a timeslice (milliseconds), so try again after a pause, until a
    run is below `good` seconds or the tries are spent."""
    best = float("inf")
    for attempt in range(tries):
        best = min(best, _best(fn, 200, budget_s=0.3))
        if best < good:
            break
        time.sleep(0.2 * (attempt + 1))
    return best


def _fault_cost(big, out) -> float:
    """Seconds per byte of first touches of a freshly mapped buffer, on one thread (stable on a
    shared machine; faults on several cores proceed in parallel, the cost model divides)."""
    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        t_into = _best(lambda: copy_into(big, out), 5)
        t_fresh = _best(lambda: copy_fresh(big), 5)
    finally:
        numba.set_num_threads(threads)
    return max(0.0, (t_fresh - t_into) / big.nbytes)


def measure_cpu(cores: int | None = None) -> HardwareProfile:
    """Measure this machine with loops shaped like the emitted ones (takes several seconds)."""
    cores = cores or os.cpu_count() or 1
    caches = _cache_sizes()
    l2 = caches.get(2, 1 * MB)
    llc = caches.get(3) or max(caches.values(), default=8 * MB)
    rng = np.random.default_rng(0)
    big = rng.random((4096, 4096), dtype=np.float32)                 # 64 MiB: past any LLC here
    out = np.empty_like(big)
    t_np = _best(lambda: np.copyto(out, big), 7)
    # a 2-core copy faster than a 1-core one is the sign of an undisturbed run
    t_into = _quiet_best(lambda: copy_into(big, out), good=0.8 * t_np)
    bw1 = 2 * big.nbytes / t_np
    bw = max(bw1, 2 * big.nbytes / t_into)
    fault = _fault_cost(big, out)
    mid = big[: max(64, llc // 4 // (4 * 4096) // 64 * 64)]               # in + out: half the LLC
    mid_out = np.empty_like(mid)
    llc_bw = max(bw, 2 * mid.nbytes / _quiet_best(lambda: copy_into(mid, mid_out)),
                 2 * mid.nbytes / _best(lambda: np.copyto(mid_out, mid), 20))
    failed: list[str] = []
    bits, vector_note = _vector_bits(failed)
    weights, flop = _measure_ops(failed, bits)
    regions = np.zeros((cores, 1), np.float32)
    chunks = np.zeros((2048 * cores, 1), np.float32)
    t_launch = _quiet_best(lambda: empty_region(regions))
    t_chunks = _quiet_best(lambda: empty_region(chunks))
    return HardwareProfile(
        "cpu", "cpu", bandwidth=bw, peak_flops=cores / flop, peak_flops_fp16=cores / flop,
        launch_s=t_launch, units=cores, onchip_per_unit=l2, onchip_per_block=l2, max_threads_per_block=1,
        max_threads_per_unit=1, max_blocks_per_unit=1, l2_bytes=llc, cache_bandwidth=llc_bw,
        overlap=True, weights=tuple(sorted(weights.items())), single_core_bandwidth=bw1,
        blas_threads=min(cores, blas_threads()),
        chunk_s=max(0.0, (t_chunks - t_launch) * cores / chunks.shape[0]), fault_s_per_byte=fault,
        mmap_threshold=32 * MB, vector_bits=bits,
        notes=(f"measured on {cpu_model()}, {cores} cores, L2 {l2 // KB} KiB/core, LLC {llc // MB} MiB",
               vector_note,
               "bandwidth: the better of a NumPy copy and a Numba prange copy of 64 MiB (read + write)",
               "peak: an emitted chain of 32 multiply-adds; weights: each op in an emitted chain, in units "
               "of that FLOP, on one thread (minimum of several runs)",
               "mmap_threshold: glibc maps buffers of 32 MiB and more afresh on every allocation")
        + ((f"not measured (their chains did not build; default weights): {', '.join(failed)}",) if failed else ()),
        source="measured")


# Each op priced as the emitter writes it: a chain of ROWS x 1024 points (in a core's L2), timed
# on one thread; `add` is the baseline (two loads, one add, one store per point). The math
# functions bring their own chains (compiler/mathfns.py).
_XY = "chain c(x: f32[R, 1024], y: f32[R, 1024]) -> f32[R, 1024] { return %s }"
MAC_K = 512                 # the matmul chain's K and N: a product BLAS runs near its rate
OP_CHAINS = {
    "add": _XY % "x + y",
    "fma32": _XY % ("(" * 16 + "x" + "".join(" * 1.0001 + y)" for _ in range(16))),
    **{name: _XY % f.cpu_chain for name, f in mathfns.FUNCTIONS.items() if f.cpu_chain},
    "reduce": "chain c(x: f32[R, 1024]) -> f32[R] { return sum(x, axis=1) }",
    "mac": f"chain c(x: f32[R, {MAC_K}], w: f32[{MAC_K}, {MAC_K}]) -> f32[R, {MAC_K}] {{ return x @ w }}",
}
OP_ROWS = 64


def _one_blas_thread():
    """A context in which NumPy's BLAS runs on one thread."""
    from threadpoolctl import ThreadpoolController
    return ThreadpoolController().limit(limits=1, user_api="blas")


# The vector width probe: the math-heavy elementwise chain (two exps, a tanh, two divisions)
# of the bench's ew_chain, in a core's L2, where the width decides the time.
VECTOR_CHAIN = _XY % "relu(tanh(x * 1.702 + 0.5) * sigmoid(y) - exp(-abs(x))) + 0.25 * y"
VECTOR_GAIN = 0.9           # 512 bits where they take at most this share of the default's time


def _per_point(src: str, points: int, vector_bits: int) -> float:
    """Seconds per point of an emitted chain (minimum of several runs, on the calling thread's
    Numba thread count)."""
    host, inputs = emitted_chain(src, {"R": OP_ROWS}, vector_bits)
    t1 = _best(lambda: host(*inputs), 3)
    reps = max(1, int(0.003 / max(t1, 1e-7)))

    def many():
        for _ in range(reps):
            host(*inputs)
    return _best(many, 20, budget_s=1.0) / reps / points


def _one_thread(fn):
    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        return fn()
    finally:
        numba.set_num_threads(threads)


def _vector_bits(failed: list[str]) -> tuple[int, str]:
    """(vector_bits, a note saying why): 512 where the CPU has AVX-512 and VECTOR_CHAIN runs at
    most VECTOR_GAIN of its time at LLVM's default width (which for AVX-512 parts is 256 bits:
    LLVM's tuning for their clocks), else 0."""
    if _simd_lanes() < 16:
        return 0, "vectors: LLVM's default width (no AVX-512 here)"
    try:
        t = _one_thread(lambda: {bits: _per_point(VECTOR_CHAIN, OP_ROWS * 1024, bits) for bits in (0, 512)})
    except Exception as e:              # an emitter that cannot build it: the default width
        failed.append(f"vector width ({type(e).__name__})")
        return 0, "vectors: LLVM's default width (the width probe did not build)"
    bits = 512 if t[512] <= VECTOR_GAIN * t[0] else 0
    return bits, (f"vectors: {'512 bits' if bits else 'LLVM default width'}: an emitted chain of two exps and "
                  f"a tanh took {t[512] * 1e9:.3f} ns/point at 512 bits, {t[0] * 1e9:.3f} at LLVM's default "
                  f"(512 where it takes at most {VECTOR_GAIN:.0%})")


def _measure_ops(failed: list[str], vector_bits: int = 0) -> tuple[dict[str, float], float]:
    """FLOP weights of ops as emitted at `vector_bits` (in units of one vectorised FLOP), and that
    FLOP in seconds; ops whose chain does not build keep the GPU weights and are named in `failed`."""
    per_point = {}

    def measure():
        for name, src in OP_CHAINS.items():
            try:
                points = OP_ROWS * (MAC_K * MAC_K if name == "mac" else 1024)
                # the matmul on one BLAS thread, whether the plan calls it whole or per chunk
                with _one_blas_thread() if name == "mac" else contextlib.nullcontext():
                    per_point[name] = _per_point(src, points, vector_bits)
            except Exception as e:      # an emitter that cannot build this chain: a default below
                failed.append(f"{name} ({type(e).__name__})")
    _one_thread(measure)
    if "add" not in per_point or "fma32" not in per_point:
        return dict(GPU_WEIGHTS), 1e-11
    base = per_point["add"]
    flop = max(1e-13, (per_point["fma32"] - base) / 31)
    # a scalar op costs a vector's lanes of FLOPs: the lanes at the width the loops are built for
    measured = {"scalar": float(vector_bits // 32 if vector_bits else min(_simd_lanes(), 8))}
    for name, f in mathfns.FUNCTIONS.items():
        if f.cpu_chain:
            measured[name] = (round(max(1.0, (per_point[name] - base) / flop + f.cpu_offset), 2)
                              if name in per_point else f.gpu_weight)
    measured["reduce"] = round(max(1.0, (per_point["reduce"] - base / 2) / flop), 2) if "reduce" in per_point else 1.0
    # the matmul chain ran on one BLAS thread: its weight is per BLAS thread
    measured["mac"] = round(max(1.0, per_point["mac"] / flop), 2) if "mac" in per_point else 2.0
    return mathfns.derived_cpu_weights(measured), flop


def _cache_sizes() -> dict[int, int]:
    """Per-core data cache sizes by level from sysfs (level -> bytes)."""
    out: dict[int, int] = {}
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for idx in sorted(base.glob("index*")) if base.exists() else []:
        try:
            if (idx / "type").read_text().strip() == "Instruction":
                continue
            level = int((idx / "level").read_text())
            text = (idx / "size").read_text().strip().upper()
            mult = {"K": KB, "M": MB, "G": GB}.get(text[-1], 1)
            out[level] = int(text.rstrip("KMG")) * mult
        except (OSError, ValueError):
            continue
    return out


def _simd_lanes() -> int:
    """fp32 lanes of the widest vector unit (from /proc/cpuinfo flags)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return 4
    return 16 if " avx512f" in flags else 8 if " avx2" in flags else 4


if __name__ == "__main__":          # python -m fusec.compiler.calibrate: measure again and show
    print(json.dumps(cpu_profile(refresh=True).as_dict(), indent=2))
