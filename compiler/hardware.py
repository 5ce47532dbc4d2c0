"""Hardware profiles as data: what the cost model (compiler/cost.py) knows about a machine.

GPU profiles come from datasheets (SXM parts) and, for the `cuda` target, from the running
device's properties (`from_device`). The `cpu` profile is measured on the running machine once
(memory bandwidth with a NumPy copy and a Numba prange copy, compute with Numba loops written the
way compiler/emit writes them) and cached on disk ($FUSEC_CACHE_DIR, else ~/.cache/fusec).
`seed` is the illustrative device of the seeds' worked figures (900 GB/s, 19.5 TFLOP/s, 5 us
launches, memory and compute not overlapped), kept so tests can reproduce those figures.

Numbers a datasheet does not give (the cost of a Numba kernel launch from Python, L2 bandwidth,
FLOP weights of transcendental functions in libdevice) are estimates and say so in `notes`.
"""
from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

KB, MB, GB = 1024, 1024 ** 2, 1024 ** 3
CALIBRATION_VERSION = 7          # bump when the measurement changes: cached profiles are re-measured

# FLOP-equivalents of one call, for GPUs: libdevice sequences (exp: ex2.approx plus range
# reduction; tanh/erf: polynomial sequences; IEEE div and sqrt: Newton iterations). Three
# pseudo-ops price loop shapes: `reduce` one step of a reduction, `mac` one point of a
# contraction, `scalar` one arithmetic op in a loop that does not vectorise (1 on a GPU, where
# every op is scalar per thread and latency is hidden by other warps).
GPU_WEIGHTS = (("reduce", 1.0), ("mac", 2.0), ("scalar", 1.0), ("exp", 8.0), ("exp2", 6.0), ("log", 8.0), ("log2", 6.0), ("log1p", 12.0), ("expm1", 12.0),
               ("tanh", 16.0), ("erf", 16.0), ("sin", 16.0), ("cos", 16.0), ("powf", 24.0),
               ("sqrt", 8.0), ("rsqrt", 4.0), ("divf", 8.0), ("maximumf", 1.0), ("minimumf", 1.0))


@dataclass(frozen=True)
class HardwareProfile:
    """One machine. Rates in bytes/s and FLOP/s, sizes in bytes, times in seconds.

    For a GPU, `units` are SMs and `onchip_per_unit` is shared memory (which is also L1) per SM;
    for a CPU, `units` are cores and `onchip_per_unit` is the L2 cache of one core.
    """
    name: str
    kind: str                               # 'gpu' | 'cpu'
    bandwidth: float                        # global memory (HBM, DRAM), all units busy
    peak_flops: float                       # fp32
    peak_flops_fp16: float                  # fp16 without tensor cores (what SIMT code reaches)
    launch_s: float                         # fixed cost of one kernel (a Numba launch; a prange region)
    units: int
    onchip_per_unit: int
    onchip_per_block: int                   # GPU: shared memory one block may use
    regs_per_unit: int = 0
    regs_per_thread: int = 0
    max_threads_per_block: int = 1
    max_threads_per_unit: int = 1
    max_blocks_per_unit: int = 1
    l2_bytes: int = 0                       # GPU L2; CPU last-level cache
    cache_bandwidth: float = 0.0            # when the data is in l2_bytes
    alloc_s: float = 0.0                    # per global buffer allocated per call
    overlap: bool = True                    # roofline max(); False: compute and memory times add
    clock_hz: float = 0.0                   # gpu: boost clock (one dependent op per cycle per thread)
    mem_latency_s: float = 0.0              # gpu: a global load that misses the caches
    weights: tuple[tuple[str, float], ...] = GPU_WEIGHTS   # FLOP-equivalents per call
    # cpu only
    blas_threads: int = 1                   # threads one BLAS call uses (contractions are BLAS calls)
    single_core_bandwidth: float = 0.0
    chunk_s: float = 0.0                    # one prange iteration (scheduling, per-tile allocations)
    fault_s_per_byte: float = 0.0           # first touch of a freshly mapped buffer, one core (page faults)
    mmap_threshold: int = 0                 # buffers this large are mapped afresh on every call
    notes: tuple[str, ...] = ()
    source: str = "datasheet"

    def weight(self, op: str) -> float:
        return dict(self.weights).get(op, 1.0)

    def peak(self, elem_bytes: int) -> float:
        return self.peak_flops_fp16 if elem_bytes == 2 else self.peak_flops

    def as_dict(self) -> dict:
        d = asdict(self)
        d["weights"] = dict(self.weights)
        d["notes"] = list(self.notes)
        return d


_LAUNCH_NOTE = "launch_s: a Numba kernel launch from Python (dispatch, argument packing), estimated"
_L2_NOTE = ("cache_bandwidth (L2), mem_latency_s (about 500 cycles) and the transcendental FLOP weights "
            "are estimates")

GPUS: dict[str, HardwareProfile] = {
    "h200": HardwareProfile(
        "h200", "gpu", bandwidth=4.8e12, peak_flops=66.9e12, peak_flops_fp16=133.8e12, launch_s=8e-6,
        units=132, onchip_per_unit=228 * KB, onchip_per_block=227 * KB, regs_per_unit=65536,
        regs_per_thread=255, max_threads_per_block=1024, max_threads_per_unit=2048, max_blocks_per_unit=32,
        l2_bytes=50 * MB, cache_bandwidth=12e12, alloc_s=4e-6, clock_hz=1.98e9, mem_latency_s=2.5e-7,
        notes=(_LAUNCH_NOTE, _L2_NOTE)),
    "h100": HardwareProfile(
        "h100", "gpu", bandwidth=3.35e12, peak_flops=66.9e12, peak_flops_fp16=133.8e12, launch_s=8e-6,
        units=132, onchip_per_unit=228 * KB, onchip_per_block=227 * KB, regs_per_unit=65536,
        regs_per_thread=255, max_threads_per_block=1024, max_threads_per_unit=2048, max_blocks_per_unit=32,
        l2_bytes=50 * MB, cache_bandwidth=10e12, alloc_s=4e-6, clock_hz=1.98e9, mem_latency_s=2.5e-7,
        notes=(_LAUNCH_NOTE, _L2_NOTE)),
    "a100": HardwareProfile(
        "a100", "gpu", bandwidth=2.039e12, peak_flops=19.5e12, peak_flops_fp16=78e12, launch_s=8e-6,
        units=108, onchip_per_unit=164 * KB, onchip_per_block=163 * KB, regs_per_unit=65536,
        regs_per_thread=255, max_threads_per_block=1024, max_threads_per_unit=2048, max_blocks_per_unit=32,
        l2_bytes=40 * MB, cache_bandwidth=5e12, alloc_s=4e-6, clock_hz=1.41e9, mem_latency_s=3.4e-7,
        notes=(_LAUNCH_NOTE, _L2_NOTE)),
    # the seeds' illustrative device: their worked figures add compute and memory time
    "seed": HardwareProfile(
        "seed", "gpu", bandwidth=900e9, peak_flops=19.5e12, peak_flops_fp16=78e12, launch_s=5e-6,
        units=80, onchip_per_unit=96 * KB, onchip_per_block=96 * KB, regs_per_unit=65536, regs_per_thread=255,
        max_threads_per_block=1024, max_threads_per_unit=2048, max_blocks_per_unit=32, l2_bytes=6 * MB,
        cache_bandwidth=2.5e12, overlap=False, clock_hz=1.5e9, mem_latency_s=5e-7,
        notes=("the seeds' worked-example device",)),
}
DEFAULT_GPU = "h200"
NAMES = tuple(GPUS) + ("cpu", "device")


_REGISTERED: dict[str, HardwareProfile] = {}


def register(profile: HardwareProfile) -> None:
    """Make a profile known by name in this process (scripts that model another machine)."""
    _REGISTERED[profile.name.lower()] = profile


class HardwareError(ValueError):
    """An unknown profile name."""


def get(name: str | None, target: str) -> HardwareProfile:
    """The profile `name` (h200, h100, a100, seed, cpu, device: the running CUDA device), or the
    default for `target` ('gpu'/'cpu')."""
    if name is None:
        return cpu_profile() if target == "cpu" else GPUS[DEFAULT_GPU]
    key = name.lower()
    if key == "cpu":
        return cpu_profile()
    if key == "device":
        return _device()
    if key == "calibration":                 # plans for the calibration chains (any fixed profile)
        return replace(GPUS["seed"], name="calibration", kind="cpu", units=os.cpu_count() or 1)
    if key in GPUS:
        return GPUS[key]
    if key in _REGISTERED:
        return _REGISTERED[key]
    raise HardwareError(f"unknown hardware profile '{name}'; known: {', '.join(NAMES)}")


# ---- the cuda target: the real device ---------------------------------------------------------

_DEVICE: HardwareProfile | None = None


def _device() -> HardwareProfile:
    """The real device when there is one; else (compiling without a GPU, or under the
    simulator) the default GPU profile."""
    global _DEVICE
    if _DEVICE is None:
        try:
            _DEVICE = from_device()
        except Exception:      # no driver, no device, the simulator's fake device
            _DEVICE = GPUS[DEFAULT_GPU]
    return _DEVICE


def from_device() -> HardwareProfile:
    """The running CUDA device's properties, with peaks derived from its clocks; the datasheet
    profile of the same part (matched by name) supplies what properties do not tell."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        raise RuntimeError("the CUDA simulator has no device properties")
    from numba import cuda
    dev = cuda.get_current_device()
    name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
    base = next((p for k, p in GPUS.items() if k != "seed" and k in name.lower()), GPUS[DEFAULT_GPU])
    sms = dev.MULTIPROCESSOR_COUNT
    cc = dev.compute_capability
    lanes = 64 if cc == (8, 0) or cc[0] < 8 else 128       # fp32 lanes per SM
    clock_hz = dev.CLOCK_RATE * 1e3
    bw = 2 * dev.MEMORY_CLOCK_RATE * 1e3 * dev.GLOBAL_MEMORY_BUS_WIDTH / 8
    return replace(base, name=f"device:{name}", units=sms, peak_flops=sms * lanes * 2 * clock_hz,
                   peak_flops_fp16=2 * sms * lanes * 2 * clock_hz, bandwidth=bw or base.bandwidth,
                   onchip_per_unit=dev.MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
                   onchip_per_block=dev.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN or dev.MAX_SHARED_MEMORY_PER_BLOCK,
                   regs_per_unit=dev.MAX_REGISTERS_PER_MULTIPROCESSOR,
                   max_threads_per_block=dev.MAX_THREADS_PER_BLOCK,
                   max_threads_per_unit=dev.MAX_THREADS_PER_MULTIPROCESSOR, l2_bytes=dev.L2_CACHE_SIZE,
                   clock_hz=clock_hz, source="device properties")


# ---- the cpu: measured once, cached ---------------------------------------------------------

def cache_dir() -> Path:
    return Path(os.environ.get("FUSEC_CACHE_DIR") or Path.home() / ".cache" / "fusec")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


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


_CPU: HardwareProfile | None = None


def cpu_profile(refresh: bool = False) -> HardwareProfile:
    """The measured profile of this machine (measured on first use, then read from the cache)."""
    global _CPU
    if _CPU is not None and not refresh:
        return _CPU
    cores = os.cpu_count() or 1
    key = profile_key()
    path = cache_dir() / "hardware-cpu.json"
    if not refresh:
        try:
            data = json.loads(path.read_text())
            if data.get("key") == key:
                _CPU = profile_from_dict(data["profile"])
                return _CPU
        except (OSError, ValueError, KeyError, TypeError):
            pass
    _CPU = measure_cpu(cores)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"key": key, "profile": _CPU.as_dict()}, indent=2) + "\n")
        tmp.replace(path)
    except OSError:
        pass
    return _CPU


def profile_key() -> str:
    """What a cached cpu profile must match: this CPU, its cores, the calibration, the emitter,
    and the BLAS threads the calibrated matmul ran with."""
    return (f"{_cpu_model()}|{os.cpu_count() or 1}|v{CALIBRATION_VERSION}|emitter={_emitter_hash()}"
            f"|blas={blas_threads()}")


def _emitter_hash() -> str:
    """The emitter's source: the calibration times what it writes, so a change re-measures."""
    import hashlib
    h = hashlib.sha1()
    for f in sorted(Path(__file__).parent.glob("emit*.py")):
        h.update(f.read_bytes())
    return h.hexdigest()[:12]


def profile_from_dict(d: dict) -> HardwareProfile:
    d = dict(d)
    d["weights"] = tuple(sorted(d.get("weights", {}).items()))
    d["notes"] = tuple(d.get("notes", ()))
    return HardwareProfile(**d)


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
    import numba
    from . import calibrate as k
    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        t_into = _best(lambda: k.copy_into(big, out), 5)
        t_fresh = _best(lambda: k.copy_fresh(big), 5)
    finally:
        numba.set_num_threads(threads)
    return max(0.0, (t_fresh - t_into) / big.nbytes)


def measure_cpu(cores: int | None = None) -> HardwareProfile:
    """Measure this machine with loops shaped like the emitted ones (takes several seconds)."""
    import numpy as np
    from . import calibrate as k
    cores = cores or os.cpu_count() or 1
    caches = _cache_sizes()
    l2 = caches.get(2, 1 * MB)
    llc = caches.get(3) or max(caches.values(), default=8 * MB)
    rng = np.random.default_rng(0)
    big = rng.random((4096, 4096), dtype=np.float32)                 # 64 MiB: past any LLC here
    out = np.empty_like(big)
    t_np = _best(lambda: np.copyto(out, big), 7)
    # a 2-core copy faster than a 1-core one is the sign of an undisturbed run
    t_into = _quiet_best(lambda: k.copy_into(big, out), good=0.8 * t_np)
    bw1 = 2 * big.nbytes / t_np
    bw = max(bw1, 2 * big.nbytes / t_into)
    fault = _fault_cost(big, out)
    mid = big[: max(64, llc // 4 // (4 * 4096) // 64 * 64)]               # in + out: half the LLC
    mid_out = np.empty_like(mid)
    llc_bw = max(bw, 2 * mid.nbytes / _quiet_best(lambda: k.copy_into(mid, mid_out)),
                 2 * mid.nbytes / _best(lambda: np.copyto(mid_out, mid), 20))
    failed: list[str] = []
    weights, flop = _measure_ops(failed)
    regions = np.zeros((cores, 1), np.float32)
    chunks = np.zeros((2048 * cores, 1), np.float32)
    t_launch = _quiet_best(lambda: k.empty_region(regions))
    t_chunks = _quiet_best(lambda: k.empty_region(chunks))
    return HardwareProfile(
        "cpu", "cpu", bandwidth=bw, peak_flops=cores / flop, peak_flops_fp16=cores / flop,
        launch_s=t_launch, units=cores, onchip_per_unit=l2, onchip_per_block=l2, max_threads_per_block=1,
        max_threads_per_unit=1, max_blocks_per_unit=1, l2_bytes=llc, cache_bandwidth=llc_bw,
        overlap=True, weights=tuple(sorted(weights.items())), single_core_bandwidth=bw1,
        blas_threads=min(cores, blas_threads()),
        chunk_s=max(0.0, (t_chunks - t_launch) * cores / chunks.shape[0]), fault_s_per_byte=fault,
        mmap_threshold=32 * MB,
        notes=(f"measured on {_cpu_model()}, {cores} cores, L2 {l2 // KB} KiB/core, LLC {llc // MB} MiB",
               "bandwidth: the better of a NumPy copy and a Numba prange copy of 64 MiB (read + write)",
               "peak: an emitted chain of 32 multiply-adds; weights: each op in an emitted chain, in units "
               "of that FLOP, on one thread (minimum of several runs)",
               "mmap_threshold: glibc maps buffers of 32 MiB and more afresh on every allocation")
        + ((f"not measured (their chains did not build; default weights): {', '.join(failed)}",) if failed else ()),
        source="measured")


# Each op priced as the emitter writes it: a chain of ROWS x 1024 points (in a core's L2), timed
# on one thread; `add` is the baseline (two loads, one add, one store per point).
OP_CHAINS = {
    "add": "chain c(x: f32[R, 1024], y: f32[R, 1024]) -> f32[R, 1024] { return x + y }",
    "fma32": "chain c(x: f32[R, 1024], y: f32[R, 1024]) -> f32[R, 1024] { return " + "(" * 16 + "x" +
             "".join(" * 1.0001 + y)" for _ in range(16)) + " }",
    "exp": "chain c(x: f32[R, 1024], y: f32[R, 1024]) -> f32[R, 1024] { return exp(x) + y }",
    "tanh": "chain c(x: f32[R, 1024], y: f32[R, 1024]) -> f32[R, 1024] { return tanh(x) + y }",
    "erf": "chain c(x: f32[R, 1024], y: f32[R, 1024]) -> f32[R, 1024] { return erf(x) + y }",
    "log": "chain c(x: f32[R, 1024], y: f32[R, 1024]) -> f32[R, 1024] { return log(x + 1.0) + y }",
    "sqrt": "chain c(x: f32[R, 1024], y: f32[R, 1024]) -> f32[R, 1024] { return sqrt(x) + y }",
    "divf": "chain c(x: f32[R, 1024], y: f32[R, 1024]) -> f32[R, 1024] { return x / (y + 2.0) }",
    "maximumf": "chain c(x: f32[R, 1024], y: f32[R, 1024]) -> f32[R, 1024] { return maximum(x, y) }",
    "reduce": "chain c(x: f32[R, 1024]) -> f32[R] { return sum(x, axis=1) }",
    "mac": "chain c(x: f32[R, 256], w: f32[256, 256]) -> f32[R, 256] { return x @ w }",
}
ROWS = 64


def _measure_ops(failed: list[str]) -> tuple[dict[str, float], float]:
    """FLOP weights of ops as emitted (in units of one vectorised FLOP), and that FLOP in seconds;
    ops whose chain does not build keep the GPU weights and are named in `failed`."""
    import numba
    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        from .calibrate import emitted_chain
        per_point = {}
        for name, src in OP_CHAINS.items():
            try:
                host, inputs = emitted_chain(src, {"R": ROWS})
                t1 = _best(lambda: host(*inputs), 3)
            except Exception as e:      # an emitter that cannot build this chain: a default below
                failed.append(f"{name} ({type(e).__name__})")
                continue
            reps = max(1, int(0.003 / max(t1, 1e-7)))

            def many():
                for _ in range(reps):
                    host(*inputs)
            points = ROWS * (256 * 256 if name == "mac" else 1024)
            per_point[name] = _best(many, 20, budget_s=1.0) / reps / points
    finally:
        numba.set_num_threads(threads)
    if "add" not in per_point or "fma32" not in per_point:
        return dict(GPU_WEIGHTS), 1e-11
    base = per_point["add"]
    flop = max(1e-13, (per_point["fma32"] - base) / 31)
    weights = {"scalar": float(_simd_lanes())}
    defaults = dict(GPU_WEIGHTS)
    for name in ("exp", "tanh", "erf", "log", "sqrt", "divf", "maximumf"):
        weights[name] = (round(max(1.0, (per_point[name] - base) / flop + (1 if name != "divf" else 0)), 2)
                         if name in per_point else defaults[name])
    weights["reduce"] = round(max(1.0, (per_point["reduce"] - base / 2) / flop), 2) if "reduce" in per_point else 1.0
    # the matmul chain is one BLAS call using blas_threads(): its weight is per BLAS thread
    weights["mac"] = round(max(1.0, per_point["mac"] * blas_threads() / flop), 2) if "mac" in per_point else 2.0
    weights["rsqrt"] = weights["sqrt"] + weights["divf"]
    weights["minimumf"] = weights["maximumf"]
    for f, like in (("exp2", "exp"), ("log2", "log"), ("log1p", "log"), ("expm1", "exp"), ("sin", "tanh"),
                    ("cos", "tanh"), ("powf", "log")):
        weights[f] = weights[like] * (2 if f == "powf" else 1)
    return weights, flop


def blas_threads() -> int:
    """Threads of a BLAS call in this process (OpenBLAS reads these variables; default: all cores)."""
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
        try:
            return max(1, int(os.environ[var]))
        except (KeyError, ValueError):
            continue
    return os.cpu_count() or 1


def _simd_lanes() -> int:
    """fp32 lanes of the widest vector unit (from /proc/cpuinfo flags)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return 4
    return 16 if " avx512f" in flags else 8 if " avx2" in flags else 4


if __name__ == "__main__":          # python -m fusec.compiler.hardware: measure again and show
    print(json.dumps(cpu_profile(refresh=True).as_dict(), indent=2))
