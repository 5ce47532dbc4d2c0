"""How much memory running a chain takes, and the limit a run must stay under: a run that would
not fit is refused before anything is allocated, at the declaration of its largest tensor
(default limit: a quarter of this machine's or container's memory). See docs/GUIDE.md, "Input
checks" and "Memory".
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from fusec.dsl.diagnostics import Diagnostic, FdslError
from fusec.dsl.typed import Node, TypedChain

FRACTION = 4                     # the default limit is 1/FRACTION of the machine's memory
FALLBACK = 4 << 30               # when the machine's memory cannot be read
LARGEST = 1 << 60                # no tensor may hold more bytes than this (its sizes fit in i64)

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}


def machine_memory() -> int | None:
    """Physical memory in bytes, or the cgroup's limit when it is smaller; None if unknown."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        total = None
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and (total is None or int(text) < total):
            total = int(text)
    return total if total and total > 0 else None


def default_limit() -> int:
    total = machine_memory()
    return total // FRACTION if total else FALLBACK


def describe_default() -> str:
    total = machine_memory()
    if total is None:
        return f"the default when this machine's memory is unknown, {format_bytes(FALLBACK)}"
    return f"a quarter of this machine's {format_bytes(total)}"


def parse_size(text: str) -> int:
    """`8G`, `512MiB`, `1.5GB`, `1000000`: bytes (K, M, G, T, P are powers of 1024, with or
    without `i` and `B`). Raises ValueError with a message naming the text."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([kmgtpKMGTP]?)(i?)([bB]?)\s*", text or "")
    if not m or (m.group(3) and not m.group(2)):
        raise ValueError(f"'{text}' is not a size; write bytes or a number with K, M, G or T, such as 8G or 512M")
    value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if not 1 <= value <= LARGEST:
        raise ValueError(f"'{text}' is out of range (1 byte to {format_bytes(LARGEST)})")
    return int(value)


def format_bytes(n: float) -> str:
    for unit, size in (("EiB", 1 << 60), ("PiB", 1 << 50), ("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20),
                       ("KiB", 1 << 10)):
        if n >= size:
            v = n / size
            if unit == "EiB" and v >= 1024:
                return f"{v:.3g} EiB"
            return f"{v:.3g} {unit}"
    return f"{int(n)} B"


def node_bytes(node: Node, binding: dict[str, int]) -> int:
    elements = 1
    for d in node.type.concrete(binding):
        elements *= d
    return elements * node.type.dtype.np.itemsize


@dataclass(frozen=True)
class Footprint:
    peak: int                    # bytes a run holds at once, at most
    largest: Node                # the largest tensor
    largest_bytes: int


def footprint(chain: TypedChain, binding: dict[str, int]) -> Footprint:
    """The inputs, the reference's live values at their peak (each value kept from its op
    until its last use, the outputs to the end) and the build's copy of the outputs."""
    size = {n.id: node_bytes(n, binding) for n in chain.nodes}
    last = {n.id: n.id for n in chain.nodes}
    for n in chain.nodes:
        for i in n.inputs:
            last[i] = max(last[i], n.id)
    outputs = set(chain.outputs)
    for i in outputs:
        last[i] = len(chain.nodes)
    inputs = sum(size[i] for i in chain.params)
    live = peak = 0
    for n in chain.nodes:
        live += size[n.id]
        peak = max(peak, live)
        for i in set(n.inputs) | {n.id}:
            if last[i] == n.id:
                live -= size[i]
    largest = max(chain.nodes, key=lambda n: size[n.id])
    return Footprint(inputs + peak + sum(size[i] for i in outputs), largest, size[largest.id])


def _what(node: Node) -> str:
    if node.op == "param":
        return f"input '{node.name}'"
    return f"'{node.name}' ({node.op})" if node.name else f"the result of {node.op}"


def check_memory(chain: TypedChain, binding: dict[str, int], limit: int | None = None, how: str = "") -> None:
    """Refuse, before anything is allocated, a run of `chain` with `binding` that needs more
    than `limit` bytes (default: default_limit()), or any tensor too large to index: an
    FdslError at the largest tensor, naming it and the sizes. `how` says how to change the
    limit (the flag or argument)."""
    fp = footprint(chain, binding)
    node = fp.largest
    shape = node.type.with_shape(node.type.concrete(binding))
    bound = ", ".join(f"{s}={binding[s]}" for s in node.type.symbols)
    tensor = f"{_what(node)} is {shape}" + (f" ({bound})" if bound else "") + f", {format_bytes(fp.largest_bytes)}"
    if fp.largest_bytes > LARGEST:
        raise FdslError([Diagnostic(node.span, f"{tensor}: more than any machine holds "
                                               f"(fusec handles tensors up to {format_bytes(LARGEST)})")])
    if limit is None:
        limit, which = default_limit(), describe_default()
    else:
        which = "the given limit"
    if fp.peak > limit:
        change = f"; {how} to change it" if how else ""
        raise FdslError([Diagnostic(node.span, f"{tensor}: running chain '{chain.name}' would need "
                                               f"{format_bytes(fp.peak)}, over the memory limit of "
                                               f"{format_bytes(limit)} ({which}{change})")])
