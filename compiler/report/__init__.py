"""The GPU kernel report, measured without a GPU: for every launch of an emitted CUDA module,
its PTX compiled by NVVM and assembled by `ptxas -v` for the hardware profile's compute
capability (registers, stack frame, spills, shared memory, barriers: `ptx.py`), the occupancy
and waves those allow on the profile's device (a port of cuda_occupancy.h: `occupancy.py`), and
the coalescing of its global loads and stores, counted in 32-byte sectors per warp request
while a few real blocks run under Numba's CUDA simulator (`trace.py`). PTX needs Numba's real
CUDA target and tracing its simulator, which is chosen once per process, so whichever does not
fit this process runs in a child Python (`child.py`). `report_kernels` (`kernels.py`) makes the
reports and `format_report` (`format.py`) prints them.
"""
from .format import format_report
from .kernels import AccessSite, Coalescing, KernelReport, report_kernels

__all__ = ["AccessSite", "Coalescing", "KernelReport", "format_report", "report_kernels"]
