"""The GPU kernel report, measured without a GPU: per launch of an emitted CUDA module its
resources (`ptx.py`), occupancy and waves (`occupancy.py`), coalescing (`trace.py`), its SASS
(`sass.py`) and shared-memory bank conflicts (`banks.py`); what
needs the Numba CUDA mode this process lacks runs in a child Python (`child.py`). `report_kernels`
(`kernels.py`) makes the reports, `format_report` (`format.py`) prints them. See docs/GPU.md,
"The kernel report".
"""
from .format import format_report
from .kernels import AccessSite, Coalescing, KernelReport, report_kernels

__all__ = ["AccessSite", "Coalescing", "KernelReport", "format_report", "report_kernels"]
