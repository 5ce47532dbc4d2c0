"""The kernel report as text: one row per launch, then the poorly coalesced sites and the gaps."""
from __future__ import annotations

from typing import Sequence

from .kernels import KernelReport

POOR = 0.9          # a site below this efficiency gets a line of its own

_HEADER = ("kernel", "of", "grid", "block", "regs", "stack", "lmem", "spill st/ld", "smem", "shfl", "mma", "blk/SM",
           "occupancy", "limited by", "waves", "coalesced", "sectors/req (ideal)", "lanes/req", "loop ins", "math",
           "lds bits:n", "ldg bits:n", "wrap sel", "in flight", "bank ways")
_LEFT = {"kernel", "of", "grid", "block", "limited by"}


def format_report(reports: Sequence[KernelReport]) -> str:
    """A table of the launches (registers, local/stack bytes and spills per thread, static
    shared memory per block, resident blocks per SM and occupancy with the limiting resource,
    waves on the device, the sector-weighted coalescing efficiency, sectors and active lanes
    per warp request; from the SASS, the hot innermost loop's instructions per iteration (or
    "none": the kernel has no loop, and the next columns are the whole kernel's), its math share,
    its shared and global loads as width in bits:count, the signed-index selects in the innermost
    PTX loops / in all the PTX, the fewest global loads in flight per thread over its phases, and
    the worst bank-conflict ways of its shared accesses), then a line per site coalesced below
    90%, a line of each kernel's SASS loops and phases, a line per shared access with a bank
    conflict or not evaluated, per unmeasured field group, per failed self-check and per
    error (a block that fits no SM)."""
    rows = [_HEADER] + [_row(r) for r in reports]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_HEADER))]
    lines = ["  ".join(c.ljust(w) if h in _LEFT else c.rjust(w) for c, w, h in zip(row, widths, _HEADER)).rstrip()
             for row in rows]
    for r in reports:
        c = r.coalescing
        for s in (c.sites if c else ()):
            if s.efficiency < POOR:
                lines.append(f"  {r.kernel} line {s.line} {s.kind} {s.expr}: {s.sectors_per_request:.1f} "
                             f"sectors/request, ideal {s.ideal_sectors_per_request:.1f} ({_pct(s.efficiency)} coalesced)")
        if r.sass is not None:
            lines.append(f"  {r.kernel} sass: {_sass_line(r.sass)}")
        for b in r.bank_conflicts or ():
            if b.ways is None:
                lines.append(f"  {r.kernel} line {b.line} {b.kind} {b.expr}: bank conflicts not computed: {b.why}")
            elif b.ways > 1:
                lines.append(f"  {r.kernel} line {b.line} {b.kind} {b.expr}: {b.ways}-way bank conflict")
        if c and c.verified is False:
            lines.append(f"  {r.kernel}: {c.note}")
        for what, why in r.unmeasured:
            lines.append(f"  {r.kernel}: {what} not measured: {why}")
        for error in r.errors:
            lines.append(f"  {r.kernel}: error: {error}")
    return "\n".join(lines)


def _row(r: KernelReport) -> tuple[str, ...]:
    c = r.coalescing
    spills = "-" if r.spill_store_bytes is None else f"{r.spill_store_bytes}/{r.spill_load_bytes}"
    return (r.kernel, f"group {r.group}" if r.kind == "launch" else r.kind, _dims(r.grid), _dims(r.block),
            _n(r.registers), _n(r.stack_frame_bytes), _n(r.local_bytes), spills, _n(r.smem_bytes), _n(r.shuffles), _n(r.mma),
            _n(r.blocks_per_sm), _pct(r.occupancy), ", ".join(r.limited_by) if r.limited_by else "-",
            "-" if r.waves is None else f"{r.waves:.3g}",
            _pct(c.efficiency if c else None),
            f"{c.sectors_per_request:.1f} ({c.ideal_sectors_per_request:.1f})"
            if c and c.sectors_per_request is not None else "-",
            "-" if c is None or c.lanes_per_request is None else f"{c.lanes_per_request:.1f}",
            *_sass_cells(r))


def _sass_cells(r: KernelReport) -> tuple[str, ...]:
    known = [b.ways for b in r.bank_conflicts or () if b.ways is not None]
    banks = str(max(known)) if known else "-"
    if r.sass is None:
        return ("-",) * 6 + (banks,)
    s, h = r.sass, r.sass.hot_counts
    return ("none" if s.hot is None else str(h.instructions), _pct(h.math_share), _widths(h.shared_loads),
            _widths(h.global_loads), f"{s.ptx.wraparound_selects_innermost}/{s.ptx.wraparound_selects}",
            _n(s.loads_in_flight_min), banks)


def _widths(loads: dict) -> str:
    """{"LDS.128": 4, "LDSM.128": 2} -> "128:4,128:2" (widest first)."""
    items = sorted(loads.items(), key=lambda kv: (-int(kv[0].rsplit(".", 1)[1]), kv[0]))
    return ",".join(f"{k.rsplit('.', 1)[1]}:{n}" for k, n in items) or "-"


def _sass_line(s) -> str:
    parts = []
    for k, loop in enumerate(s.loops):
        c = loop.counts
        mem = ", ".join(f"{n} {op}" for op, n in {**c.shared_loads, **c.global_loads}.items())
        parts.append(f"{'hot ' if k == s.hot else ''}loop {loop.start:#x}-{loop.end:#x} (depth {loop.depth}): "
                     f"{c.instructions} instructions, {c.math} math ({_pct(c.math_share)})" + (f", {mem}" if mem else ""))
    if not s.loops:
        parts.append(f"no loop: {s.kernel.instructions} instructions, {s.kernel.math} math ({_pct(s.kernel.math_share)})")
    p = s.ptx
    parts.append(f"PTX: {p.wraparound_selects_innermost} wraparound selects in innermost loops ({p.wraparound_selects} "
                 f"in all), {p.mul64_innermost} 64-bit multiplies ({p.mul64})")
    if s.phases:
        parts.append("loads in flight per phase: " + ", ".join(f"{ph.where} {ph.loads_in_flight}" for ph in s.phases))
    return "; ".join(parts)


def _dims(d) -> str:
    return "-" if d is None else "(" + ", ".join(map(str, d)) + ")"


def _n(v) -> str:
    return "-" if v is None else str(v)


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"
