"""PyTorch models in fusec: `torch.compile(model, backend="fusec")` (the backend is registered
through the `torch_dynamo_backends` entry point; `options={"target": "cpu", ...}` passes
fusec's compile options through), and `explain(model, *args)`, which compiles and runs the model
once and returns a Report: the graph's ATen compute ops (`aten_ops`), how many run inside fusec
kernels (`in_fusec`, `coverage`), the ops left to eager and why (`eager`), `kernels`, and the FDSL
of each region (`fdsl`). `FUSEC_TORCH_DUMP=DIR` writes each region's FDSL and plan. Needs
PyTorch (`pip install 'fusec[torch]'`); `import fusec` never imports it. See docs/GUIDE.md,
"PyTorch models", and fusec/frontends/torch_graph.py.
"""
from __future__ import annotations

try:
    import torch as _torch
except ImportError:                 # pragma: no cover - the message is the point
    from .errors import UsageError
    raise UsageError("fusec.torch needs PyTorch: pip install 'fusec[torch]'") from None

from .frontends.torch_backend import Report, make_backend

__all__ = ["backend", "explain", "Report"]


def backend(gm, example_inputs, options: dict | None = None, mode: str | None = None):
    """The `torch.compile` backend: `torch.compile(model, backend="fusec", options={...})`.
    `options`: "target" (cpu, cuda, cuda-sim; default: where the graph's tensors live), "cache",
    "cache_dir", "max_memory", "remote_cache", "report" (a Report to fill), "verify" (default
    True: each region's first call at each size is compared with eager PyTorch, and a region that
    differs runs eagerly with a warning and its reason in the report), "fresh_outputs" (default
    False; True: every call's outputs in newly allocated arrays instead of the planned pool's
    reused buffers, as frameworks that allocate per call hand them back: for like-for-like
    timing, a little slower), and any field of fusec's CompileOptions (fuse, hw, dynamic, ...)."""
    if mode not in (None, "default"):
        from .errors import UsageError
        raise UsageError(f"torch.compile(backend='fusec') takes no mode (got mode={mode!r}); "
                         "pass fusec's options through options={...}")
    return make_backend(options)(gm, example_inputs)


def explain(model, *args, options: dict | None = None, dynamic: bool | None = None, **kwargs) -> Report:
    """Compile `model` with the fusec backend, run it once on `args`/`kwargs` under
    torch.no_grad(), and return what was compiled (a Report; print it for a summary)."""
    report = Report()
    opts = dict(options or {})
    opts["report"] = report
    _torch._dynamo.reset()
    compiled = _torch.compile(model, backend=make_backend(opts), dynamic=dynamic)
    with _torch.no_grad():
        report.outputs = compiled(*args, **kwargs)
    return report
