"""Plans and chain infos for cost-model tests, on fixed hardware profiles (never the measured one,
so that what is asserted does not depend on this machine)."""
import textwrap
from dataclasses import replace

import fusec
from fusec.compiler.plan.hardware import GPUS, HardwareProfile
from fusec.compiler.calibrate import CALIBRATION
from fusec.compiler.options import CompileOptions
from fusec.compiler.pipeline import compile_typed
from fusec.compiler.plan.planner import plan_chain

# a fixed CPU: 2 cores, 40 GB/s DRAM, 200 GB/s from a 32 MiB LLC, 1 MiB L2 per core, transcendental
# weights in the range this project's machines measure
CPU = HardwareProfile(
    "fixed-cpu", "cpu", bandwidth=40e9, peak_flops=400e9, peak_flops_fp16=400e9, launch_s=2e-6, units=2,
    onchip_per_unit=1 << 20, onchip_per_block=1 << 20, l2_bytes=32 << 20, cache_bandwidth=200e9,
    weights=(("reduce", 2.0), ("mac", 100.0), ("scalar", 16.0), ("exp", 50.0), ("tanh", 40.0), ("erf", 400.0),
             ("log", 100.0), ("sqrt", 3.0), ("rsqrt", 4.0), ("divf", 1.0), ("maximumf", 2.0), ("minimumf", 2.0)),
    single_core_bandwidth=30e9, fault_s_per_byte=4e-10, mmap_threshold=32 << 20, blas_threads=2)


def info_of(src: str, binding: dict, target: str = "gpu"):
    """The ChainInfo of the first chain of src (graph stage)."""
    chain = fusec.check(textwrap.dedent(src)).chains[0]
    st = compile_typed(chain, binding, options=CompileOptions(target=target, hardware=GPUS["h200"] if target == "gpu" else CALIBRATION),
                       until="plan")
    return st.plan.info


def plan(src: str, binding: dict, target: str = "gpu", hw: HardwareProfile | str = "h200", fuse: bool = True):
    if isinstance(hw, str):
        hw = GPUS[hw]
    return plan_chain(info_of(src, binding, target), target, fuse=fuse, hw=hw)


def cpu(**kw) -> HardwareProfile:
    return replace(CPU, **kw)
