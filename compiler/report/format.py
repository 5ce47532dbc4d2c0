"""The kernel report as text: one row per launch, then the poorly coalesced sites and the gaps."""
from __future__ import annotations

from typing import Sequence

from .kernels import KernelReport

POOR = 0.9          # a site below this efficiency gets a line of its own

_HEADER = ("kernel", "of", "grid", "block", "regs", "stack", "lmem", "spill st/ld", "smem", "shfl", "mma", "blk/SM",
           "occupancy", "limited by", "waves", "coalesced", "sectors/req (ideal)", "lanes/req")
_LEFT = {"kernel", "of", "grid", "block", "limited by"}


def format_report(reports: Sequence[KernelReport]) -> str:
    """A table of the launches (registers, local/stack bytes and spills per thread, static
    shared memory per block, resident blocks per SM and occupancy with the limiting resource,
    waves on the device, the sector-weighted coalescing efficiency, sectors and active lanes
    per warp request), then a line per site
    coalesced below 90%, per unmeasured field group, per failed self-check and per error (a block that fits no SM)."""
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
            "-" if c is None or c.lanes_per_request is None else f"{c.lanes_per_request:.1f}")


def _dims(d) -> str:
    return "-" if d is None else "(" + ", ".join(map(str, d)) + ")"


def _n(v) -> str:
    return "-" if v is None else str(v)


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"
