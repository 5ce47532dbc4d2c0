"""PTX without a GPU and ptxas -v per kernel: the parser on known output, real kernels through
NVVM and the nvidia-cuda-nvcc wheel's ptxas, and missing tools as reasons, not crashes."""
import textwrap

from fusec.compiler.emitted import Entry, Launch
from fusec.compiler.plan.hardware import GPUS
from fusec.compiler.report import format_report, kernels, ptx, report_kernels

# ptxas 13.5 -v on a softmax kernel (one thread per row, the row in a local array), a kernel
# with shared memory, and one with a callee ptxas did not inline and a register cap (spills)
KNOWN = """\
ptxas info    : 16 bytes gmem
ptxas info    : Compiling entry function '_ZN6module2k0B3v18E5ArrayIfLi2E1C7mutable7alignedE' for 'sm_90'
ptxas info    : Function properties for _ZN6module2k0B3v18E5ArrayIfLi2E1C7mutable7alignedE
    4096 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 30 registers, used 1 barriers, 4096 bytes cumulative stack size
ptxas info    : Compile time = 157.559 ms
ptxas info    : Compiling entry function '_ZN6module4demoB3v21E5ArrayIfLi1E1C7mutable7alignedE' for 'sm_90'
ptxas info    : Function properties for _ZN6module4demoB3v21E5ArrayIfLi1E1C7mutable7alignedE
    256 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 256 bytes cumulative stack size, 1024 bytes smem
ptxas info    : Compile time = 8.236 ms
ptxas info    : Function properties for _ZN6module6calleeEf
    8 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function '_ZN6module2k2E' for 'sm_90'
ptxas info    : Function properties for _ZN6module2k2E
    24 bytes stack frame, 16 bytes spill stores, 16 bytes spill loads
ptxas info    : Used 24 registers, 32 bytes cumulative stack size, 368 bytes cmem[0]
"""


def test_the_parser_reads_each_entry_of_known_ptxas_output():
    got = ptx.parse_ptxas(KNOWN)
    by_tail = {name.split("module", 1)[1][:6]: r for name, r in got.items()}
    assert len(got) == 3 and not any("callee" in n for n in got)          # entry functions only
    assert by_tail["2k0B3v"] == ptx.Resources(registers=30, stack_frame_bytes=4096, lmem_bytes=0, spill_store_bytes=0,
                                              spill_load_bytes=0, smem_bytes=0, barriers=1)
    assert by_tail["4demoB"].smem_bytes == 1024 and by_tail["4demoB"].registers == 40
    k2 = by_tail["2k2E"]
    assert (k2.registers, k2.stack_frame_bytes, k2.spill_store_bytes, k2.spill_load_bytes) == (24, 24, 16, 16)
    assert k2.barriers == 0


SMALL = textwrap.dedent('''
    import numpy as np
    from numba import cuda, float32

    @cuda.jit("void(float32[::1], int32[::1])")
    def staged(a, idx):
        s = cuda.shared.array(256, float32)
        loc = cuda.local.array(64, float32)
        i = cuda.threadIdx.x
        for j in range(64):
            loc[idx[j] % 64] = a[j] * 2          # indexed by data: it stays in local memory
        s[i] = loc[idx[i] % 64]
        cuda.syncthreads()
        a[i] = s[255 - i] + 1.0

    @cuda.jit("void(float32[::1])")
    def plain(a):
        i = cuda.grid(1)
        a[i] = a[i] + 1.0
''')


def test_real_kernels_through_nvvm_and_ptxas():
    """The dev extra's NVVM and ptxas, in a child process (the tests run the simulator)."""
    assert ptx.ptxas_path() is not None and ptx.ptxas_path().endswith("ptxas")
    out = ptx.ptx_of(SMALL, (9, 0))
    assert out["errors"] == {} and set(out["ptx"]) == {"staged", "plain"}
    assert ".target sm_90" in out["ptx"]["plain"]
    staged = ptx.resources(out["ptx"]["staged"], "sm_90")
    plain = ptx.resources(out["ptx"]["plain"], "sm_90")
    assert staged.smem_bytes == 256 * 4                  # cuda.shared.array(256, float32)
    assert staged.stack_frame_bytes == 64 * 4            # the local array
    assert staged.barriers == 1 and 0 < staged.registers <= 255
    assert plain.smem_bytes == 0 and plain.stack_frame_bytes == 0 and plain.barriers == 0
    assert plain.spill_store_bytes == plain.spill_load_bytes == 0


ENTRY = Entry("run_plain", ("plain",), ("f32[64]",), (), (Launch("plain", "launch", 0, ("2",), ("32",)),))


def test_no_ptxas_leaves_the_resources_unmeasured_with_the_reason(monkeypatch):
    monkeypatch.setattr(ptx, "ptxas_path", lambda: None)
    monkeypatch.setattr(ptx, "ptx_of", lambda source, cc: {"ptx": {"plain": ".version 8.0"}, "errors": {}})
    (r,) = report_kernels(SMALL, ENTRY, GPUS["h200"], trace=False)
    assert r.grid == (2,) and r.threads_per_block == 32 and r.blocks == 2
    assert r.registers is None and r.smem_bytes is None and r.occupancy is None and r.waves is None
    why = dict(r.unmeasured)
    assert why["resources"] == "no ptxas: pip install nvidia-cuda-nvcc (the dev extra)"
    assert "ptxas" in why["occupancy"] and "trace=False" in why["coalescing"]
    assert r.as_dict()["unmeasured"]["resources"].startswith("no ptxas")
    text = format_report([r])
    assert "plain: resources not measured: no ptxas" in text


def test_no_nvvm_is_a_reason_per_kernel(monkeypatch):
    monkeypatch.setattr(ptx, "ptx_of", lambda source, cc: {
        "ptx": {}, "errors": {"plain": "NVVM could not compile it (NvvmSupportError: libNVVM cannot be found)"}})
    (r,) = report_kernels(SMALL, ENTRY, GPUS["h200"], trace=False)
    assert r.registers is None
    assert dict(r.unmeasured)["resources"] == ("no PTX: NVVM could not compile it "
                                               "(NvvmSupportError: libNVVM cannot be found)")
    monkeypatch.setattr(kernels, "_ptx", lambda source, hw: "no PTX: the ptx child process failed")
    (r,) = report_kernels(SMALL, ENTRY, GPUS["h200"], trace=False)
    assert dict(r.unmeasured)["resources"] == "no PTX: the ptx child process failed"
