"""Hardware profiles as data: what the cost model (compiler/plan/cost.py) knows about a machine.

GPU profiles come from datasheets or the running device (`from_device`), and carry what PTX
compilation and the kernel report's occupancy need; figures a datasheet lacks are estimates
marked in `notes`. The `cpu` profile is measured by compiler/calibrate.py; this module only reads
and writes its cache (`cached_cpu_profile`, `store_cpu_profile`), so planning never runs the
compiler. See docs/FUSION.md, "Hardware profiles".
"""
from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import platform
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from .. import mathfns

KB, MB, GB = 1024, 1024 ** 2, 1024 ** 3
CALIBRATION_VERSION = 7          # bump when the measurement changes: cached profiles are re-measured
WARP = 32  # threads of a warp

# FLOP-equivalents of one evaluation, for GPUs: the functions' from compiler/mathfns.py, and
# three pseudo-ops that price loop shapes: `reduce` one step of a reduction, `mac` one point
# of a contraction, `scalar` one arithmetic op in a loop that does not vectorise (1 on a GPU,
# where every op is scalar per thread and latency is hidden by other warps).
LOOP_WEIGHTS = {"reduce": 1.0, "mac": 2.0, "scalar": 1.0}
GPU_WEIGHTS = tuple(sorted({**LOOP_WEIGHTS, **mathfns.gpu_weights()}.items()))


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
    # gpu: what compiling PTX for the part and its occupancy need (compiler/report/, after
    # NVIDIA's cuda_occupancy.h; the same for every part of cc 8.0 to 9.0)
    cc: tuple[int, int] = (9, 0)            # compute capability: ptxas -arch=sm_90, the occupancy rules
    warp_size: int = 32
    regs_per_block: int = 65536
    smem_per_block: int = 48 * KB           # shared memory of a block that does not opt in (onchip_per_block:
                                            # one that does: a contraction's dynamic tiles, emit/module.py)
    reserved_smem_per_block: int = 1 * KB   # what the driver keeps of each block's shared memory (cc >= 8.0)
    reg_alloc_unit: int = 256               # registers go to a warp in multiples of this
    smem_alloc_unit: int = 128              # bytes: shared memory goes to a block in multiples of this
    sub_partitions: int = 4                 # per SM: the register file is split among them, and the launch
                                            # check counts a block's warps in multiples of them
    # cpu only
    blas_threads: int = 1                   # threads one BLAS call uses (contractions are BLAS calls)
    single_core_bandwidth: float = 0.0
    chunk_s: float = 0.0                    # one prange iteration (scheduling, per-tile allocations)
    fault_s_per_byte: float = 0.0           # first touch of a freshly mapped buffer, one core (page faults);
                                            # a fact of the machine: planned buffers never pay it twice
    mmap_threshold: int = 0                 # buffers this large are mapped afresh on every call
    vector_bits: int = 0                    # the width emitted loops ask LLVM to vectorize at, measured
                                            # faster (compiler/calibrate.py); 0: LLVM's default for the CPU
    notes: tuple[str, ...] = ()
    source: str = "datasheet"
    tensor_flops_fp16: float = 0.0          # gpu: the dense f16/bf16 tensor-core peak, f32 accumulate (the
                                            # datasheet's: wgmma on sm_90), for reporting; 0: no tensor cores
    mma_sync_flops_fp16: float = 0.0        # gpu: what the legacy warp-level mma.sync.m16n8k16 (HMMA.16816,
                                            # f32 accumulate) reaches: the ceiling the contraction model prices
                                            # (`mma_sync_flops`); 0: tensor_flops_fp16 (no separate figure)

    def mma_sync_flops(self) -> float:
        """The f16/bf16 rate a kernel on `mma.sync` is priced at (plan/gemm.py): the profile's
        mma.sync ceiling, else its tensor peak where the profile gives no separate figure; 0 where
        it has no tensor cores (`tensor_flops_fp16` 0). Never the wgmma peak where the two differ."""
        if not self.tensor_flops_fp16:
            return 0.0
        return self.mma_sync_flops_fp16 or self.tensor_flops_fp16

    def weight(self, op: str) -> float:
        return _weights(self.weights).get(op, 1.0)

    def peak(self, elem_bytes: int) -> float:
        return self.peak_flops_fp16 if elem_bytes == 2 else self.peak_flops

    def as_dict(self) -> dict:
        d = asdict(self)
        d["weights"] = dict(self.weights)
        d["notes"] = list(self.notes)
        return d


@functools.lru_cache(maxsize=64)
def _weights(weights: tuple[tuple[str, float], ...]) -> dict[str, float]:
    return dict(weights)


_LAUNCH_NOTE = "launch_s: a Numba kernel launch from Python (dispatch, argument packing), estimated"
_L2_NOTE = ("cache_bandwidth (L2), mem_latency_s (about 500 cycles) and the transcendental FLOP weights "
            "are estimates")
# Hopper's 989.4 TFLOP/s dense f16 peak (132 SMs x 1.98 GHz x 4 tensor cores x 4096 FLOP a
# cycle) is wgmma's; the legacy warp-synchronous mma.sync (HMMA.16816) that fusec's kernels issue
# reaches about half of it. Sources: Luo et al.'s microbenchmarks of Hopper's tensor cores
# ("Benchmarking and Dissecting the Nvidia Hopper GPU Architecture", arXiv 2402.13499, on H800;
# "Dissecting the NVIDIA Hopper Architecture through Microbenchmarking and Multiple Level
# Analysis", arXiv 2501.12084) find the sm_80-style mma well short of wgmma's rate; a warp-level
# (wmma -> HMMA) loop with no memory traffic tops out at ~50% of the H100's marketed f16 peak
# (reported on r/CUDA, "Since WGMMA has 2x throughput of WMMA in H100"); FlashAttention-2
# (mma.sync) runs at ~35% of H100 peak where FlashAttention-3 (wgmma) reaches ~75%. The papers'
# exact table was not at hand: the figure is half the wgmma peak, derived from these, not
# measured here. On the A100 mma.sync is the top instruction: its ceiling is the datasheet's 312.
_MMA_SYNC_HOPPER = 989.4e12 / 2
_MMA_NOTE = ("mma_sync_flops_fp16: half the wgmma peak (legacy mma.sync on sm_90; arXiv 2402.13499, "
             "2501.12084), derived, not measured")

GPUS: dict[str, HardwareProfile] = {
    "h200": HardwareProfile(
        "h200", "gpu", bandwidth=4.8e12, peak_flops=66.9e12, peak_flops_fp16=133.8e12, launch_s=8e-6,
        units=132, onchip_per_unit=228 * KB, onchip_per_block=227 * KB, regs_per_unit=65536,
        regs_per_thread=255, max_threads_per_block=1024, max_threads_per_unit=2048, max_blocks_per_unit=32,
        l2_bytes=50 * MB, cache_bandwidth=12e12, alloc_s=4e-6, clock_hz=1.98e9, mem_latency_s=2.5e-7,
        tensor_flops_fp16=989.4e12, mma_sync_flops_fp16=_MMA_SYNC_HOPPER, notes=(_LAUNCH_NOTE, _L2_NOTE, _MMA_NOTE)),
    "h100": HardwareProfile(
        "h100", "gpu", bandwidth=3.35e12, peak_flops=66.9e12, peak_flops_fp16=133.8e12, launch_s=8e-6,
        units=132, onchip_per_unit=228 * KB, onchip_per_block=227 * KB, regs_per_unit=65536,
        regs_per_thread=255, max_threads_per_block=1024, max_threads_per_unit=2048, max_blocks_per_unit=32,
        l2_bytes=50 * MB, cache_bandwidth=10e12, alloc_s=4e-6, clock_hz=1.98e9, mem_latency_s=2.5e-7,
        tensor_flops_fp16=989.4e12, mma_sync_flops_fp16=_MMA_SYNC_HOPPER, notes=(_LAUNCH_NOTE, _L2_NOTE, _MMA_NOTE)),
    "a100": HardwareProfile(
        "a100", "gpu", bandwidth=2.039e12, peak_flops=19.5e12, peak_flops_fp16=78e12, launch_s=8e-6,
        units=108, onchip_per_unit=164 * KB, onchip_per_block=163 * KB, regs_per_unit=65536,
        regs_per_thread=255, max_threads_per_block=1024, max_threads_per_unit=2048, max_blocks_per_unit=32,
        l2_bytes=40 * MB, cache_bandwidth=5e12, alloc_s=4e-6, clock_hz=1.41e9, mem_latency_s=3.4e-7,
        cc=(8, 0), tensor_flops_fp16=312e12, mma_sync_flops_fp16=312e12, notes=(_LAUNCH_NOTE, _L2_NOTE)),
    # the seeds' illustrative device: their worked figures add compute and memory time
    "seed": HardwareProfile(
        "seed", "gpu", bandwidth=900e9, peak_flops=19.5e12, peak_flops_fp16=78e12, launch_s=5e-6,
        units=80, onchip_per_unit=96 * KB, onchip_per_block=96 * KB, regs_per_unit=65536, regs_per_thread=255,
        max_threads_per_block=1024, max_threads_per_unit=2048, max_blocks_per_unit=32, l2_bytes=6 * MB,
        cache_bandwidth=2.5e12, overlap=False, clock_hz=1.5e9, mem_latency_s=5e-7, cc=(8, 0),
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


def get(name: str) -> HardwareProfile:
    """A profile that needs no measuring: h200, h100, a100, seed, device (the running CUDA
    device, else the default GPU), or one registered in this process. The measured `cpu`
    profile comes from compiler/calibrate.py (`hardware_profile`)."""
    key = name.lower()
    if key == "device":
        return _device()
    if key in GPUS:
        return GPUS[key]
    if key in _REGISTERED:
        return _REGISTERED[key]
    if key == "cpu":
        raise HardwareError("the cpu profile is measured: use fusec.compiler.calibrate.hardware_profile('cpu')")
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
                   clock_hz=clock_hz, cc=tuple(cc), warp_size=dev.WARP_SIZE,
                   regs_per_block=dev.MAX_REGISTERS_PER_BLOCK, smem_per_block=dev.MAX_SHARED_MEMORY_PER_BLOCK,
                   reserved_smem_per_block=dev.RESERVED_SHARED_MEMORY_PER_BLOCK, source="device properties")


# ---- the cpu: measured once, cached ---------------------------------------------------------

def cache_dir() -> Path:
    return Path(os.environ.get("FUSEC_CACHE_DIR") or Path.home() / ".cache" / "fusec")


def move_aside(path: Path) -> str:
    """Move an invalid cache file to NAME.invalid; what happened, in words for a one-line report."""
    aside = path.with_name(path.name + ".invalid")
    try:
        os.replace(path, aside)
        return f"moved it to {aside.name}"
    except OSError as e:
        return f"could not move it aside ({e.strerror})"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_cache_path() -> Path:
    return cache_dir() / "hardware-cpu.json"


def cached_cpu_profile() -> HardwareProfile | None:
    """This machine's measured profile from the cache, when it was measured for this CPU,
    calibration, emitter and BLAS threads (None: measure it, compiler/calibrate.py)."""
    try:
        data = json.loads(cpu_cache_path().read_text())
        if data.get("key") == profile_key():
            return profile_from_dict(data["profile"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def store_cpu_profile(profile: HardwareProfile) -> None:
    """Write the measured profile to the cache (atomically; an unwritable cache is skipped)."""
    path = cpu_cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"key": profile_key(), "profile": profile.as_dict()}, indent=2) + "\n")
        tmp.replace(path)
    except OSError:
        pass


def profile_key() -> str:
    """What a cached cpu profile must match: this CPU, its cores, the calibration, the emitter,
    and the BLAS threads the calibrated matmul ran with."""
    return (f"{cpu_model()}|{os.cpu_count() or 1}|v{CALIBRATION_VERSION}|emitter={_emitter_hash()}"
            f"|blas={blas_threads()}")


def _emitter_hash() -> str:
    """The emitter package's source and the math table it writes from: the calibration times
    what they produce, so any change to them re-measures."""
    compiler = Path(__file__).resolve().parent.parent
    h = hashlib.sha1()
    for f in sorted((compiler / "emit").rglob("*.py")) + [compiler / "mathfns.py"]:
        h.update(f.relative_to(compiler).as_posix().encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:12]


def profile_from_dict(d: dict) -> HardwareProfile:
    d = dict(d)
    d["weights"] = tuple(sorted(d.get("weights", {}).items()))
    d["notes"] = tuple(d.get("notes", ()))
    if "cc" in d:                              # JSON has no tuples
        d["cc"] = tuple(d["cc"])
    return HardwareProfile(**d)


def blas_threads() -> int:
    """Threads of a BLAS call in this process (OpenBLAS reads these variables; default: all cores)."""
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
        try:
            return max(1, int(os.environ[var]))
        except (KeyError, ValueError):
            continue
    return os.cpu_count() or 1


# fields of a profile that must be positive (the cost model divides by them); every other number
# must be finite and not negative
_POSITIVE = {"bandwidth", "peak_flops", "peak_flops_fp16", "units", "onchip_per_unit", "onchip_per_block",
             "max_threads_per_block", "max_threads_per_unit", "max_blocks_per_unit", "cache_bandwidth",
             "warp_size", "blas_threads"}


def profile_problem(d) -> str | None:
    """Why `d` (a cached profile as JSON data) is not a usable cpu profile; None when it is."""
    if not isinstance(d, dict):
        return f"the profile is {type(d).__name__}, not an object"
    kinds = {f.name: f.type for f in fields(HardwareProfile)}
    unknown = sorted(set(d) - set(kinds))
    if unknown:
        return f"unknown field '{unknown[0]}'"
    missing = sorted(k for k in ("name", "kind", "bandwidth", "peak_flops", "peak_flops_fp16", "launch_s", "units",
                                 "onchip_per_unit", "onchip_per_block") if k not in d)
    if missing:
        return f"'{missing[0]}' is missing"
    for key, value in d.items():
        kind = str(kinds[key])
        shown = json.dumps(value)[:30]
        if kind in ("float", "int"):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                return f"{key} is {shown}, not a number"
            if kind == "int" and value != int(value):
                return f"{key} is {shown}, not an integer"
            if value < 0 or (key in _POSITIVE and value <= 0):
                return f"{key} is {shown}, not a {'positive' if key in _POSITIVE else 'non-negative'} number"
        elif kind == "str" and not isinstance(value, str):
            return f"{key} is {shown}, not a string"
        elif kind == "bool" and not isinstance(value, bool):
            return f"{key} is {shown}, not true or false"
    if d["kind"] != "cpu":
        return f"kind is {json.dumps(d['kind'])}, not \"cpu\""
    weights = d.get("weights", {})
    if not isinstance(weights, dict) or not all(
            isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool)
            and math.isfinite(v) and v > 0 for k, v in weights.items()):
        return "weights is not an object of positive numbers"
    notes = d.get("notes", [])
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        return "notes is not a list of strings"
    cc = d.get("cc", [9, 0])
    if not (isinstance(cc, list) and len(cc) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in cc)):
        return "cc is not a pair of integers"
    return None


def checked_profile(d) -> HardwareProfile | str:
    """A cached profile's JSON data as a profile, or why it is not a usable cpu profile."""
    problem = profile_problem(d)
    if problem is not None:
        return problem
    ints = {f.name for f in fields(HardwareProfile) if str(f.type) == "int"}
    return profile_from_dict({k: int(v) if k in ints else v for k, v in d.items()})

