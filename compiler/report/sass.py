"""What a kernel's machine code (SASS) says of it, without a GPU: one kernel's PTX assembled by
ptxas into a cubin, disassembled by `cuobjdump -sass` (or `nvdisasm`, each the fallback of the
other; the nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm wheels of the dev extra), parsed, and
summarised (`summarise`): its loops, their instructions per iteration and math share, the
widths of their loads, and global loads in flight per thread per phase; from the PTX text, the
signed-index selects and 64-bit multiplies in the innermost loops and overall.

Loops. A SASS loop is a backward `BRA` (target below the branch; the `BRA` to itself ptxas
appends after `EXIT` is not one) and its range [target, branch]; an innermost loop contains no
other loop's branch. Its body is counted statically: every instruction of the range once (code
under a forward branch inside the range, e.g. an edge guard, counts as if it ran), NOPs left out.
A PTX loop is the same on the PTX text: a label and a later `bra` to it.

Math: the floating-point arithmetic a kernel exists for, per instruction issued (not per
FLOP): FFMA, FADD, FMUL (and their 32I forms), DFMA, DADD, DMUL, HFMA2, HADD2, HMUL2, HMMA,
HGMMA and MUFU (exp2, rcp, rsqrt, ...). Comparisons, selects, min/max (FSETP, FSEL, FMNMX),
conversions and an arithmetic opcode whose sources are all RZ or immediates (ptxas writes
constants with `HFMA2.MMA R, -RZ, RZ, ...`) are not math.

Loads in flight: walking a body in order, global loads (LDG, LDGSTS) issued since the last wait
are pending; the first instruction that names a register a pending load writes (reads it, or
writes it again) waits for them, ends the run and clears the set. The longest run is the loads a
thread keeps in flight there. Phases are the innermost loop bodies and, outside them, the stretches
between barriers (BAR) and loop boundaries; only those that load from global memory count. A register operand Rn of an
address (`[R4.64]`) or of a 64-bit opcode also names Rn+1; a load of width w writes w/32
registers.
"""
from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .child import MeasureError

TOOLS = {"cuobjdump": ("nvidia-cuda-cuobjdump",), "nvdisasm": ("nvidia-cuda-nvdisasm",)}

MATH = frozenset({"FFMA", "FADD", "FMUL", "FFMA32I", "FADD32I", "FMUL32I", "DFMA", "DADD", "DMUL",
                  "HFMA2", "HADD2", "HMUL2", "HFMA2_32I", "HMUL2_32I", "HADD2_32I", "HMMA", "HGMMA", "MUFU"})


def tool_path(name: str) -> str | None:
    """cuobjdump or nvdisasm from its NVIDIA wheel (the distribution's file list), else $PATH."""
    for dist in TOOLS[name]:
        try:
            files = importlib.metadata.files(dist) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for f in files:
            if f.name == name and f.parent.name == "bin":
                path = Path(f.locate())
                if path.is_file() and os.access(path, os.X_OK):
                    return str(path)
    return shutil.which(name)


def disassemble(cubin: bytes) -> str:
    """SASS text of a cubin: `cuobjdump -sass`, else `nvdisasm -c` (MeasureError with both
    reasons when neither works)."""
    why = []
    with tempfile.TemporaryDirectory(prefix="fusec-sass-") as tmp:
        path = Path(tmp, "kernel.cubin")
        path.write_bytes(cubin)
        for name, args in (("cuobjdump", ["-sass"]), ("nvdisasm", ["-c"])):
            exe = tool_path(name)
            if exe is None:
                why.append(f"no {name}")
                continue
            proc = subprocess.run([exe, *args, str(path)], capture_output=True, text=True, timeout=300)
            if proc.returncode == 0 and parse_sass(proc.stdout):
                return proc.stdout
            why.append(f"{name} failed (exit {proc.returncode}): {(proc.stderr or proc.stdout).strip()[-300:]}")
    raise MeasureError("no SASS: " + "; ".join(why) + " (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm, "
                       "the dev extra)")


# ---------------------------------------------------------------------------- parsing


@dataclass(frozen=True)
class Instruction:
    address: int
    predicate: str | None               # "P0", "!P1", "UP0", "PT"; None when unconditional
    opcode: str                         # with its modifiers: "LDS.U.128", "ISETP.GE.AND"
    operands: tuple[str, ...]
    target: int | None = None           # a branch's target address

    @property
    def base(self) -> str:
        return self.opcode.split(".", 1)[0]


_INSN = re.compile(r"/\*([0-9a-fA-F]{4,})\*/\s+(?:@(!?U?P[T0-9]+)\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)\s*([^;]*);")
_LABEL = re.compile(r"^\s*(\.L\w+):")
_LABEL_TARGET = re.compile(r"`\(([^)]+)\)")


def parse_sass(text: str) -> list[Instruction]:
    """cuobjdump -sass or nvdisasm text -> its instructions in address order (the first function
    of the text: one kernel's cubin holds one). Branch targets are hex addresses (cuobjdump) or
    labels (nvdisasm), both resolved to addresses."""
    rows, labels, pending = [], {}, []
    for line in text.splitlines():
        if (m := _LABEL.match(line)):
            pending.append(m.group(1))
            continue
        m = _INSN.search(line)
        if not m:
            continue
        address = int(m.group(1), 16)
        if rows and address <= rows[-1][0]:       # a second function: not expected in one kernel's cubin
            break
        for name in pending:
            labels[name] = address
        pending = []
        rows.append((address, m.group(2), m.group(3), m.group(4).strip()))
    out = []
    for address, pred, opcode, rest in rows:
        ops = tuple(o.strip() for o in _split(rest) if o.strip())
        target = None
        if opcode.split(".")[0] in ("BRA", "BRX", "JMP", "CALL", "BSSY", "SSY", "PBK", "WARPSYNC") and ops:
            if (lm := _LABEL_TARGET.search(ops[-1])) and lm.group(1) in labels:
                target = labels[lm.group(1)]
            elif re.fullmatch(r"0x[0-9a-fA-F]+", ops[-1]):
                target = int(ops[-1], 16)
        out.append(Instruction(address, pred, opcode, ops, target))
    return out


def _split(rest: str) -> list[str]:
    """Operands split at top-level commas (an address `[R2.64+UR4]` or `c[0x0][0x28]` is one)."""
    parts, depth, cur = [], 0, ""
    for ch in rest:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return parts


# ---------------------------------------------------------------------------- classification


def is_math(ins: Instruction) -> bool:
    if ins.base not in MATH:
        return False
    srcs = ins.operands[1:]
    return not srcs or not all(re.fullmatch(r"-?\|?(RZ|URZ|-?[0-9.e+-]+|0x[0-9a-fA-F]+|\+?INF|-?QNAN)\|?", s)
                               for s in srcs)


_WIDTH = {"U8": 8, "S8": 8, "U16": 16, "S16": 16, "32": 32, "64": 64, "128": 128}


def memory_access(ins: Instruction) -> tuple[str, str, int] | None:
    """(space "shared"|"global", "load"|"store", width in bits) of a memory instruction, else
    None. LDSM (ldmatrix) is given its matrices x 64 bits per lane (.x4: 128); LDGSTS
    (cp.async) counts as a global load of its width."""
    base, mods = ins.base, ins.opcode.split(".")[1:]
    kinds = {"LDS": ("shared", "load"), "LDSM": ("shared", "load"), "STS": ("shared", "store"),
             "LDG": ("global", "load"), "LDGSTS": ("global", "load"), "STG": ("global", "store")}
    if base not in kinds:
        return None
    if base == "LDSM":
        n = int(mods[-1]) if mods and mods[-1] in ("1", "2", "4") else 1     # LDSM.16.M88.4: 4 matrices
        return (*kinds[base], 32 * n)
    width = next((_WIDTH[m] for m in reversed(mods) if m in _WIDTH), 32)
    return (*kinds[base], width)


def label(ins: Instruction) -> str:
    """LDS.128, LDG.32, LDGSTS.128, LDSM.128: the opcode family and its width per lane."""
    space, kind, width = memory_access(ins)
    return f"{ins.base}.{width}"


_REG = re.compile(r"(?<![A-Za-z_])R(\d+)")


def registers(op: str, wide: bool) -> set[int]:
    """The general registers an operand names (RZ none; Rn of an address or a 64-bit operand
    also Rn+1)."""
    out = set()
    for m in _REG.finditer(op):
        n = int(m.group(1))
        out.add(n)
        if wide or (op.startswith("[") and ".64" in op) or op.endswith(".64"):
            out.add(n + 1)
    return out


def _writes_of_load(ins: Instruction) -> set[int]:
    if ins.base == "LDGSTS" or not ins.operands:
        return set()
    width = memory_access(ins)[2]
    first = _REG.match(ins.operands[0])
    if not first:
        return set()
    n = int(first.group(1))
    return set(range(n, n + max(1, width // 32)))


def _names(ins: Instruction) -> set[int]:
    wide = any(m in ("64", "WIDE") for m in ins.opcode.split(".")[1:]) or ins.base in ("DFMA", "DADD", "DMUL")
    out = set()
    for op in ins.operands:
        out |= registers(op, wide)
    return out


def loads_in_flight(body: list[Instruction]) -> int:
    """The longest run of global loads issued before an instruction names a register one of them
    writes (see the module's docstring)."""
    best = run = 0
    pending: set[int] = set()
    for ins in body:
        if pending and (_names(ins) & pending):
            best, run, pending = max(best, run), 0, set()
        a = memory_access(ins)
        if a and a[0] == "global" and a[1] == "load":
            run += 1
            pending |= _writes_of_load(ins)
    return max(best, run)


# ---------------------------------------------------------------------------- loops


@dataclass(frozen=True)
class Counts:
    """Instructions of a stretch of SASS: issued (NOPs left out), math, and memory accesses by
    family and width ({"LDS.128": 4, "LDS.32": 16})."""
    instructions: int
    math: int
    math_share: float | None
    shared_loads: dict
    global_loads: dict
    shared_stores: dict
    global_stores: dict
    barriers: int
    hmma: int = 0                       # tensor-core instructions (HMMA: mma.sync)


def counts(body: list[Instruction]) -> Counts:
    # NOPs, and instructions under the never-true predicate (`@!PT LDS RZ, [RZ]`: the padding
    # ptxas puts around cp.async's LDGSTS and DEPBAR), do nothing
    issued = [i for i in body if i.base != "NOP" and i.predicate != "!PT"]
    maths = sum(map(is_math, issued))
    groups = {("shared", "load"): {}, ("global", "load"): {}, ("shared", "store"): {}, ("global", "store"): {}}
    for i in issued:
        if (a := memory_access(i)):
            g = groups[a[:2]]
            g[label(i)] = g.get(label(i), 0) + 1
    return Counts(len(issued), maths, maths / len(issued) if issued else None,
                  *(dict(sorted(g.items())) for g in groups.values()),
                  barriers=sum(1 for i in issued if i.base == "BAR"), hmma=sum(1 for i in issued if i.base == "HMMA"))


@dataclass(frozen=True)
class Loop:
    """One innermost SASS loop: its address range and depth (1: not inside another loop), its
    body's counts per iteration and the global loads it keeps in flight per thread."""
    start: int
    end: int                            # the address of its backward BRA
    depth: int
    counts: Counts
    loads_in_flight: int


def loops(code: list[Instruction]) -> list[tuple[int, int]]:
    """(target, branch address) of every backward branch, in address order."""
    return sorted((i.target, i.address) for i in code
                  if i.base == "BRA" and i.target is not None and i.target < i.address)


def innermost(ranges: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """The ranges that hold no other's branch, with their depth (how many ranges hold them)."""
    out = []
    for s, e in ranges:
        if not any((s2, e2) != (s, e) and s <= e2 < e and s2 >= s for s2, e2 in ranges):
            out.append((s, e, sum(1 for s2, e2 in ranges if s2 <= s and e <= e2)))
    return out


# ---------------------------------------------------------------------------- PTX


_PTX_LABEL = re.compile(r"^\s*(\$?[\w$]+):")
_PTX_BRA = re.compile(r"^\s*(?:@!?%p\d+\s+)?bra(?:\.uni)?\s+(\$?[\w$]+)\s*;")
_SETP = re.compile(r"^\s*setp\.(\w+)\.(\w+)\s+(%p\d+)")
_SELP = re.compile(r"^\s*selp\.(?:b64|s64|u64)\s+[^;]*,\s*(%p\d+)\s*;")
_MUL64 = re.compile(r"^\s*(?:mul|mad)\.lo\.[su]64\b")


@dataclass(frozen=True)
class PtxCounts:
    """From a kernel's PTX: signed-index selects (a 64-bit `selp` on a signed less-than `setp`:
    Numba's `i < 0 ? i + n : i` for a negative index, also its floor-division fix) and 64-bit
    integer multiplies (`mul.lo`/`mad.lo` of s64/u64), in the innermost PTX loops (a label and
    a later `bra` to it holding no other such `bra`) and in the whole kernel."""
    loops: int
    innermost_loops: int
    wraparound_selects: int
    wraparound_selects_innermost: int
    mul64: int
    mul64_innermost: int


def ptx_counts(ptx: str) -> PtxCounts:
    lines = ptx.splitlines()
    labels, ranges = {}, []
    for n, line in enumerate(lines):
        if (m := _PTX_LABEL.match(line)):
            labels[m.group(1)] = n
        elif (m := _PTX_BRA.match(line)) and labels.get(m.group(1), n) < n:
            ranges.append((labels[m.group(1)], n))
    inner = [(s, e) for s, e, _ in innermost(ranges)]
    setp: dict[str, str] = {}
    sel, mul = [], []
    for n, line in enumerate(lines):
        if (m := _SETP.match(line)):
            setp[m.group(3)] = f"{m.group(1)}.{m.group(2)}"
        elif (m := _SELP.match(line)):
            cmp = setp.get(m.group(1), "")
            if cmp.startswith("lt.s"):
                sel.append(n)
        elif _MUL64.match(line):
            mul.append(n)

    def inside(ns):
        return sum(1 for n in ns if any(s < n < e for s, e in inner))
    return PtxCounts(len(ranges), len(inner), len(sel), inside(sel), len(mul), inside(mul))


# ---------------------------------------------------------------------------- the summary


@dataclass(frozen=True)
class SassPhase:
    """A stretch of code a thread runs as one phase: an innermost loop ("loop 0x4350-0x4e80")
    or, outside the innermost loops, the code between barriers and loop boundaries (a loop's
    first instruction, its backward branch): "code 0x17c0-0x4340"; its global loads and the
    most it keeps in flight."""
    where: str
    global_loads: int
    loads_in_flight: int


@dataclass(frozen=True)
class SassSummary:
    """One kernel's SASS for the report. `loops`: its innermost loops; `hot`: the index of the
    one with the most math (then the most instructions), None for a kernel without loops, whose
    figures are then the whole kernel's (`kernel`). `phases`: every phase that loads from global
    memory; `loads_in_flight_min` the least of them."""
    arch: str
    kernel: Counts
    loops: tuple[Loop, ...]
    hot: int | None
    phases: tuple[SassPhase, ...]
    loads_in_flight_min: int | None
    ptx: PtxCounts

    @property
    def hot_counts(self) -> Counts:
        """The hot loop's counts per iteration, or the whole kernel's without a loop."""
        return self.kernel if self.hot is None else self.loops[self.hot].counts


def summarise(code: list[Instruction], ptx: str, arch: str) -> SassSummary:
    """The summary of one kernel's parsed SASS (`parse`) and its PTX text."""
    code = [i for i in code if not (i.base == "BRA" and i.target == i.address)]   # ptxas's trap after EXIT
    ranges = loops(code)
    found = []
    for s, e, depth in innermost(ranges):
        body = [i for i in code if s <= i.address <= e]
        found.append(Loop(s, e, depth, counts(body), loads_in_flight(body)))
    hot = max(range(len(found)), key=lambda k: (found[k].counts.math, found[k].counts.instructions)) if found else None
    phases = [SassPhase(f"loop {hex(l.start)}-{hex(l.end)}", sum(l.counts.global_loads.values()), l.loads_in_flight)
              for l in found if l.counts.global_loads]
    inner = [(l.start, l.end) for l in found]
    starts, ends = {s for s, _ in ranges}, {e for _, e in ranges}
    stretch: list[Instruction] = []

    def flush():
        n = sum(1 for x in stretch if (a := memory_access(x)) and a[:2] == ("global", "load"))
        if n:
            phases.append(SassPhase(f"code {hex(stretch[0].address)}-{hex(stretch[-1].address)}", n,
                                loads_in_flight(stretch)))
        stretch.clear()
    for i in code:
        if i.base == "BAR" or i.address in starts:
            flush()
        if any(s <= i.address <= e for s, e in inner):
            continue
        if i.base != "BAR":
            stretch.append(i)
        if i.address in ends:
            flush()
    flush()
    phases.sort(key=lambda p: int(p.where.split()[1].split("-")[0], 16))
    return SassSummary(arch, counts(code), tuple(found), hot, tuple(phases),
                       min((p.loads_in_flight for p in phases), default=None), ptx_counts(ptx))


def sass_summary(cubin: bytes, ptx: str, arch: str) -> SassSummary:
    """`summarise` of a cubin ptxas made from `ptx`."""
    return summarise(parse_sass(disassemble(cubin)), ptx, arch)
