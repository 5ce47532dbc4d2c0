"""Where the cost model lives: the shared part in plan/cost.py, each template's time model beside
its planning code (the registry names it), one occupancy estimate, no module past ~500 lines."""
from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from fusec.compiler.plan import cost, hardware
from fusec.compiler.plan.templates import TEMPLATES

PLAN = Path(cost.__file__).parent
HOMES = {"elementwise": "loops", "row": "rows", "contraction": "gemm", "attention": "attention_time",
         "scan": "scan", "conv": "cost_cpu"}
MODEL_MODULES = ("cost", "cost_cpu", "loops", "rows", "gemm", "attention_time", "scan", "conv")


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_each_templates_time_model_lives_beside_its_planning_code(name):
    t = TEMPLATES[name]
    module, _, function = t.cost.partition(":")
    assert module == f"plan.{HOMES[name]}"
    fn = t.stage("cost")
    assert callable(fn) and fn.__module__.endswith(f"plan.{HOMES[name]}") and fn.__name__ == function
    params = list(inspect.signature(fn).parameters)
    assert params == ["info", "members", "root", "tiling", "hw", "common", "footprint", "reads", "corr", "measured"]


def test_cost_py_holds_no_template_model():
    src = (PLAN / "cost.py").read_text()
    for gone in ("_gpu_time", "_gpu_row_time", "_gpu_gemm_time", "_attention_time", "_scan_time", "_cpu_time"):
        assert f"def {gone}(" not in src


@pytest.mark.parametrize("module", MODEL_MODULES)
def test_no_cost_model_module_past_500_lines(module):
    assert len((PLAN / f"{module}.py").read_text().splitlines()) <= 500


def test_fitting_blocks_is_the_occupancy_estimate_every_gpu_model_uses():
    h200 = hardware.get("h200")
    assert cost.fitting_blocks(h200, 8, 32, 0) == 8              # 2048 threads / 256
    assert cost.fitting_blocks(h200, 4, 64, 0) == 8              # 65536 registers / (64 x 128)
    assert cost.fitting_blocks(h200, 1, 16, 0) == 32             # the block limit
    assert cost.fitting_blocks(h200, 4, 32, 48 * 1024) == 4      # 228 KiB / (48 KiB + the driver's 1 KiB)
    assert cost.fitting_blocks(h200, 4, 32, 300 * 1024) == 0     # does not fit
    assert cost.warp_occupancy(h200, 8, 8) == 1.0 and cost.warp_occupancy(h200, 4, 4) == 0.25
    for module in ("loops", "rows", "gemm", "attention_time", "scan"):
        src = (PLAN / f"{module}.py").read_text()
        assert "fitting_blocks(" in src and "regs_per_unit //" not in src, module
        assert "warp_occupancy(" in src, module
