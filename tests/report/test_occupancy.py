"""The port of cuda_occupancy.h: cases computed with the real header, and a sweep against it."""
import importlib.metadata
import itertools
import shutil
import subprocess
from pathlib import Path

import pytest

from fusec.compiler.plan.hardware import GPUS, profile_from_dict
from fusec.compiler.report.occupancy import OccupancyError, occupancy

H200, A100 = GPUS["h200"], GPUS["a100"]

# (profile, registers, static smem bytes, threads per block, barriers) -> resident blocks per SM,
# computed with cudaOccMaxActiveBlocksPerMultiprocessor of cuda_occupancy.h (the nvidia-cuda-runtime
# 13.5.37 wheel) for the profile's properties, default carveout and shared-memory limit.
CASES = [
    (H200, 32, 0, 256, 1, 8, ("warps", "registers")),
    (H200, 33, 0, 256, 1, 6, ("registers",)),        # 33 x 32 rounds up to 1280 registers a warp
    (H200, 255, 0, 1024, 1, 0, ("registers",)),      # 32 warps x 8192 registers > the 64K a block may have
    (H200, 30, 0, 32, 1, 32, ("blocks",)),           # one-warp blocks: 32 blocks per SM, 50% occupancy
    (H200, 64, 0, 128, 1, 8, ("registers",)),
    (H200, 32, 16384, 128, 1, 13, ("smem",)),        # 16 KiB + the 1 KiB the driver reserves, per block
    (H200, 32, 49152, 256, 1, 4, ("smem",)),
    (H200, 32, 50176, 256, 1, 0, ("smem",)),         # over the 48 KiB a block gets without opting in
    (H200, 16, 0, 32, 3, 21, ("barriers",)),         # 2 x 32 barrier slots / 3 (the header also flags "blocks")
    (H200, 168, 0, 96, 1, 4, ("registers",)),
    (H200, 0, 0, 1024, 0, 2, ("warps",)),
    (H200, 72, 1024, 256, 1, 3, ("registers",)),
    (A100, 32, 0, 256, 1, 8, ("warps", "registers")),
    (A100, 32, 16384, 128, 1, 9, ("smem",)),         # 164 KiB per SM
    (A100, 40, 0, 512, 1, 3, ("registers",)),
    (A100, 16, 0, 32, 3, 32, ("blocks",)),           # barriers limit from cc 9.0 on
    (A100, 128, 8192, 64, 1, 8, ("registers",)),
]


@pytest.mark.parametrize("hw, regs, smem, threads, barriers, blocks, limited_by", CASES)
def test_resident_blocks_match_cuda_occupancy_h(hw, regs, smem, threads, barriers, blocks, limited_by):
    o = occupancy(regs, smem, threads, hw, barriers=barriers, blocks=4096)
    assert o.blocks_per_sm == blocks and o.limited_by == limited_by
    warps = -(-threads // 32)
    assert o.occupancy == blocks * warps / 64
    assert o.waves == (4096 / (blocks * hw.units) if blocks else None)


def test_waves_and_an_unknown_architecture():
    o = occupancy(30, 0, 32, H200, barriers=1, blocks=256)           # today's softmax at M=8192
    assert o.occupancy == 0.5 and o.waves == 256 / (32 * 132)
    assert occupancy(30, 0, 256, H200, blocks=132 * 8).waves == 1.0
    with pytest.raises(OccupancyError, match="compute capability 7.5"):
        occupancy(30, 0, 32, profile_from_dict(dict(H200.as_dict(), cc=[7, 5])))


def test_profiles_carry_the_compute_capability_through_json():
    assert H200.cc == (9, 0) and A100.cc == (8, 0) and GPUS["seed"].cc == (8, 0)
    for hw in GPUS.values():
        assert profile_from_dict(hw.as_dict()) == hw


HARNESS = r'''
#include <cstdio>
#include "cuda_occupancy.h"
int main() {
    int major, minor, smem_sm, sms, regs, smem, threads, bars;
    while (scanf("%d %d %d %d %d %d %d %d", &major, &minor, &smem_sm, &sms, &regs, &smem, &threads, &bars) == 8) {
        cudaOccDeviceProp p;
        p.computeMajor = major; p.computeMinor = minor;
        p.maxThreadsPerBlock = 1024; p.maxThreadsPerMultiprocessor = 2048;
        p.regsPerBlock = 65536; p.regsPerMultiprocessor = 65536; p.warpSize = 32;
        p.sharedMemPerBlock = 48 * 1024; p.sharedMemPerMultiprocessor = smem_sm; p.numSms = sms;
        p.sharedMemPerBlockOptin = smem_sm - 1024; p.reservedSharedMemPerBlock = 1024;
        cudaOccFuncAttributes a;
        a.maxThreadsPerBlock = 1024; a.numRegs = regs; a.sharedSizeBytes = smem; a.numBlockBarriers = bars;
        a.shmemLimitConfig = FUNC_SHMEM_LIMIT_DEFAULT;
        cudaOccDeviceState s;
        cudaOccResult r;
        cudaOccError e = cudaOccMaxActiveBlocksPerMultiprocessor(&r, &p, &a, &s, threads, 0);
        printf("%d\n", e == CUDA_OCC_SUCCESS ? r.activeBlocksPerMultiprocessor : -1);
    }
}
'''


def _header() -> Path | None:
    try:
        files = importlib.metadata.files("nvidia-cuda-runtime") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    return next((Path(f.locate()) for f in files if f.name == "cuda_occupancy.h"), None)


@pytest.mark.skipif(_header() is None or shutil.which("g++") is None,
                    reason="needs cuda_occupancy.h (the nvidia-cuda-runtime wheel) and g++")
def test_a_sweep_agrees_with_cuda_occupancy_h(tmp_path):
    cases = [(hw, regs, smem, threads, bars) for hw in (H200, A100)
             for regs, smem, threads, bars in itertools.chain(
                 itertools.product(range(0, 257, 7), (0,), (1, 32, 96, 128, 160, 256, 384, 512, 1024), (1,)),
                 itertools.product((16, 64), (1, 4096, 30000, 47 * 1024, 48 * 1024), (32, 256, 1024), (1,)),
                 itertools.product((16,), (0,), (32, 64), (0, 2, 3, 16)))]
    exe = tmp_path / "occ"
    (tmp_path / "occ.cpp").write_text(HARNESS)
    subprocess.run(["g++", "-O1", "-I", str(_header().parent), str(tmp_path / "occ.cpp"), "-o", str(exe)], check=True)
    stdin = "\n".join(f"{hw.cc[0]} {hw.cc[1]} {hw.onchip_per_unit} {hw.units} {r} {s} {t} {b}"
                      for hw, r, s, t, b in cases)
    want = [int(x) for x in subprocess.run([str(exe)], input=stdin, capture_output=True, text=True,
                                           check=True).stdout.split()]
    got = [occupancy(r, s, t, hw, barriers=b).blocks_per_sm for hw, r, s, t, b in cases]
    assert len(want) == len(cases) > 700
    assert [c[1:] + (g, w) for c, g, w in zip(cases, got, want) if g != w] == []


def test_a_block_that_fits_no_sm_has_no_waves_and_says_why():
    from fusec.compiler.emitted import Launch
    from dataclasses import replace
    from fusec.compiler.report import kernels, ptx
    from fusec.compiler.report import format_report as kernels_format
    resources = ptx.Resources(registers=255, stack_frame_bytes=0, lmem_bytes=0, spill_store_bytes=0,
                              spill_load_bytes=0, smem_bytes=0, barriers=1)
    r = kernels._report(Launch("k0", "launch", 0, ("64",), ("1024",)), resources, "not traced", H200)
    assert r.blocks_per_sm == 0 and r.occupancy == 0 and r.limited_by == ("registers",) and r.waves is None
    assert dict(r.unmeasured) == {"waves": "a block does not fit on an SM (registers)", "coalescing": "not traced"}
    assert r.errors == ("does not launch: a block of 1024 threads at 255 registers (allocated 256 a thread) and 0 "
                        "bytes of shared memory fits no SM (limited by registers)",)
    assert "k0: error: does not launch: a block of 1024 threads" in kernels_format([r])
    # 64 registers fit a 1,024-thread block; 65 are allocated as 72 (8 a thread): it no longer fits
    for regs, fits in ((64, True), (65, False)):
        r = kernels._report(Launch("k0", "launch", 0, ("64",), ("1024",)),
                            replace(resources, registers=regs), "not traced", H200)
        assert (r.blocks_per_sm > 0) == fits and (not r.errors) == fits
