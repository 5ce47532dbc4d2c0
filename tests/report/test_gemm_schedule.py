"""The f32 contraction's global side (issue 36, item 2), read in its PTX and SASS without a GPU:
the tile loader's 16-byte loads, cp.async rings (LDGSTS, commit and wait groups) and dynamic
shared memory past 48 KB (declared, passed at launch, opted in), and the planner's limits.
Numerics of these paths on the simulator: tests/fusion/test_gpu_contractions.py."""
from __future__ import annotations

import re
import sys

import pytest

from fusec.compiler.emit.module import DYNAMIC_SHARED_HELPER
from fusec.compiler.plan.hardware import GPUS
from fusec.compiler.plan.kernels import PlanError
from fusec.compiler.report import sass
from fusec.compiler.report.ptx import assemble, ptx_of

sys.path.insert(0, __file__.rsplit("/report/", 1)[0] + "/fusion")
from helpers import stages  # noqa: E402

MM = "chain t(a: f32[M, K], b: f32[K, N]) -> f32[M, N] { return a @ b }"


def _planned(binding, block, gemm, ring):
    planned = stages(MM, binding=binding, plan=None).plan
    ops = sorted({m for g in planned.kernels for m in g.ops if planned.info.op(m).kind not in ("fill", "pad")})
    return stages(MM, binding=binding, plan={"groups": [{"ops": ops, "block_tiles": block, "gemm": gemm,
                                                         "stages": ring}]})


@pytest.mark.slow
def test_a_staged_kernel_copies_by_cp_async_and_loads_16_bytes_in_ptx_and_sass():
    st = _planned({"M": 256, "K": 256, "N": 256}, [64, 64, 0], [16, 4, 4], 3)
    out = ptx_of(st.emitted.source, (9, 0))
    assert not out["errors"], out["errors"]
    ptx = out["ptx"]["k0"]
    loop = ptx                                            # the copies of the loop and of the prologue
    assert re.search(r"cp\.async\.cg\.shared\.global \[\w+\], \[\w+\], 16;", loop)     # B: 16 bytes a run
    assert re.search(r"cp\.async\.ca\.shared\.global \[\w+\], \[\w+\], 4;", loop)      # its misaligned fallback
    assert "cvta.to.shared.u64" in ptx and "cp.async.commit_group;" in ptx
    assert "cp.async.wait_group 1;" in ptx               # 3 stages: 1 group left in flight
    assert "ld.global.v4.f32" in ptx                      # A: runs of 4 along K, 16 bytes where aligned
    res, cubin = assemble(ptx, "sm_90")
    assert res.stack_frame_bytes == 0 and res.spill_store_bytes == 0
    code = sass.parse_sass(sass.disassemble(cubin))
    labels = {sass.label(i) for i in code if sass.memory_access(i)}
    assert {"LDGSTS.128", "LDG.128"} <= labels
    assert any(i.base == "DEPBAR" for i in code)          # cp.async.wait_group
    hot = sass.summarise(code, ptx, "sm_90").hot_counts
    assert hot.global_loads.get("LDGSTS.128", 0) >= 1 and set(hot.shared_loads) == {"LDS.128"}


@pytest.mark.slow
def test_a_plan_past_48_kb_takes_dynamic_shared_memory_opted_in_at_launch():
    st = _planned({"M": 20, "K": 70, "N": 40}, [64, 128, 0], [32, 4, 8], 3)
    nbytes = 4 * (32 * (64 + 4) + 3 * 32 * (128 + 4))        # A's tile, B's ring of 3
    assert nbytes > 48 * 1024
    src = st.emitted.source
    kernel = src[src.index("def k0"):src.index("def run_")]
    assert "cuda.shared.array(0, numba.float32" in kernel and "cuda.shared.array((" not in kernel
    assert f"_dynamic_shared(k0, {nbytes})" in src
    assert re.search(rf"k0\[\(\d+, \d+, \d+\), \(16, 16, 1\), 0, {nbytes}\]\(", src)
    out = ptx_of(src, (9, 0))
    assert not out["errors"], out["errors"]
    assert ".extern .shared .align 16" in out["ptx"]["k0"]
    res, _ = assemble(out["ptx"]["k0"], "sm_90")           # ptxas takes it (no static shared memory)
    assert res.smem_bytes == 0 and res.stack_frame_bytes == 0


class _Fn:
    def __init__(self, handle):
        self.handle, self.device = handle, type("Dev", (), {"id": 0})()


class _Overload:
    def __init__(self, fn):
        self._codelibrary = type("Lib", (), {"get_cufunc": lambda _self: fn})()


def test_the_opt_in_sets_the_dynamic_shared_attribute_once_per_function(monkeypatch):
    """The helper the module's launch calls, with stand-ins for Numba's driver module and a
    dispatcher of two compiled overloads (no GPU here)."""
    import types
    calls = []
    attrs = types.SimpleNamespace(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES="MAX_DYNAMIC_SHARED")
    fake = types.ModuleType("numba.cuda.cudadrv.driver")
    fake.binding = types.SimpleNamespace(CUfunction_attribute=attrs)
    fake.driver = types.SimpleNamespace(cuKernelSetAttribute=lambda *a: calls.append(a))
    monkeypatch.setitem(sys.modules, "numba.cuda.cudadrv.driver", fake)
    ns = {"_CUDASIM": False}
    exec("\n".join(DYNAMIC_SHARED_HELPER), ns)
    fns = [_Fn("h0"), _Fn("h1")]
    kernel = types.SimpleNamespace(overloads={"sig0": _Overload(fns[0]), "sig1": _Overload(fns[1])})
    ns["_dynamic_shared"](kernel, 100_000)
    ns["_dynamic_shared"](kernel, 100_000)                 # set already: no second call
    assert calls == [("MAX_DYNAMIC_SHARED", 100_000, "h0", 0), ("MAX_DYNAMIC_SHARED", 100_000, "h1", 0)]
    ns["_dynamic_shared"](kernel, 40_000)                  # within the static 48 KB: nothing to opt in
    assert len(calls) == 2
    ns["_CUDASIM"] = True
    ns["_dynamic_shared"](kernel, 200_000)
    assert len(calls) == 2


def test_the_planner_refuses_shared_memory_past_the_devices_opt_in_limit():
    limit = GPUS["h200"].onchip_per_block
    with pytest.raises(PlanError, match=f"B of shared memory per block \\(limit {limit}\\)"):
        _planned({"M": 256, "K": 256, "N": 512}, [128, 256, 0], [64, 8, 8], 4)   # 4 x 64 x 260 words of B
