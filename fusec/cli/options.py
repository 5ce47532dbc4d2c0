"""From the parsed flags to the front door: the compile options, the `Program`, the target
a run takes by default, the progress line."""
from __future__ import annotations


def progress_for(args) -> "Progress":
    from ..progress import Progress
    return Progress(quiet=getattr(args, "quiet", False))


NOT_RUN = "no CUDA GPU here (the kernel report needs none)"    # why a kernel report ran nothing


def no_gpu(target: str) -> bool:
    """--target cuda, and no CUDA GPU this process can use."""
    from fusec.runtime.targets import best_available
    return target == "cuda" and best_available() != "cuda"


def default_target() -> str:
    from fusec.runtime.targets import best_available
    return best_available()


def user_options(args, baseline: bool = True) -> dict:
    """The command line's compile options (fusec.compiler.options.CompileOptions fields; `hw` names
    the hardware profile)."""
    return {"fuse": not getattr(args, "no_fuse", False), "baseline": baseline,
            "disabled_passes": tuple(getattr(args, "disable_pass", ())), "hw": getattr(args, "hw", None),
            "autotune": getattr(args, "autotune", False), "locations": getattr(args, "locations", False),
            "kernel_report": getattr(args, "kernel_report", False), "dynamic": tuple(getattr(args, "dynamic", ())),
            "math": getattr(args, "math", "fast")}


def make_program(text: str, path: str, target: str | None, args, baseline: bool = True):
    from fusec.program import compile_text
    program = compile_text(text, path, target, user_options(args, baseline),
                           max_memory=getattr(args, "max_memory", None),
                           cache=False if getattr(args, "no_cache", False) else None,
                           remote_cache_url=getattr(args, "remote_cache", None))
    program.progress = progress_for(args)
    return program

