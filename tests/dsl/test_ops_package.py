"""The op table's package (dsl/ops/): importing it alone imports every family module, so every
op is in the one registry whatever else a program imports."""
import pkgutil
import subprocess
import sys

import fusec.dsl.ops as ops
from fusec.dsl.ops import OPS


def test_importing_the_package_registers_every_family():
    code = ("import sys, fusec.dsl.ops; "
            "print(sorted(m for m in sys.modules if m.startswith('fusec.dsl.ops.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == str(sorted(f"fusec.dsl.ops.{m.name}" for m in pkgutil.iter_modules(ops.__path__)))


def test_the_family_modules_and_only_they_define_ops():
    families = {f"fusec.dsl.ops.{m.name}" for m in pkgutil.iter_modules(ops.__path__)} - {"fusec.dsl.ops.registry"}
    assert {op.infer.__module__ for op in OPS.values()} == families
