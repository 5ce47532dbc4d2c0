"""What the emitter hands on: a module's Python source and, per function, its entry (the host
function, the kernels it launches and how). Plain data with no MLIR, so that the runtime side
(artifacts, the kernel report of a compiled artifact) can rebuild it without the compiler."""
from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Entry:
    host: str                        # name of the host function in source: run_<func>
    kernels: tuple[str, ...]         # kernel function names launched by it, in order
    arg_types: tuple[str, ...]       # e.g. ("f32[4,8]", ...) of the func's args
    result_types: tuple[str, ...]
    launches: tuple["Launch", ...] = ()   # cuda: each kernel's launch, in order
    memory: tuple[tuple[str, int], ...] = ()  # emit/memplan.py: intermediate_bytes, planned_bytes, ...

    def with_arg_shapes(self, shapes) -> "Entry":
        """The entry with its arguments at these shapes (a build with run-time extents, measured
        at one binding: the kernel report makes its inputs from arg_types)."""
        if len(shapes) != len(self.arg_types):
            raise ValueError(f"{len(shapes)} shapes for {len(self.arg_types)} arguments")
        return replace(self, arg_types=tuple(f"{t.split('[')[0]}[{','.join(map(str, s))}]"
                                             for t, s in zip(self.arg_types, shapes)))


@dataclass(frozen=True)
class Launch:
    """One kernel launch of a host function (cuda target)."""
    kernel: str                      # its function name in the module
    kind: str                        # "launch": the kernel of a plan group; "copy": a host-level memref.copy
    group: int | None                # the plan group a "launch" kernel implements (launches in plan order)
    grid: tuple[str, ...]            # launch dims as written (static sizes are integer literals)
    block: tuple[str, ...]


@dataclass(frozen=True)
class EmittedModule:
    source: str                      # a complete, importable Python module
    entries: dict[str, Entry]        # func name -> Entry
