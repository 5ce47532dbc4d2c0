"""Each kernel of a cpu build clocked, beside the cost model's prediction (issue 39: "fusec's
time split by kernel, predicted and measured").

    python -m bench.kernel_clock FILE.fdsl [--chain NAME] [--bind M=64,...] [--calls 100] [--out DIR]

The cpu build runs a chain as one Numba function whose kernels are its top-level statements:
a `numba.prange` loop per kernel (a whole BLAS call is split into one too, emit/cpu.py:
_gemm_chunks), each in a function of its own called there (emit/cpu.py: split_loops), in the
plan's order. The emitted module is copied with the time-stamp counter
(`llvm.readcyclecounter`) read around each top-level loop or BLAS call into a counters array the
planned function takes as one more argument, then run on the chain's seeded inputs
(runtime/reference.py: random_inputs). Per kernel: the median and the least of its per-call
times, beside the plan's predicted time. The counter's rate is measured against
time.perf_counter. A block count that differs from the plan's kernel count is said, and the
blocks are listed unmapped. The measured build is the emitted module as fusec runs it, with one
counter read (~20 cycles) between kernels.

Writes bench/results/kernel-clock-<chain>-<date>.json (or --out DIR).
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
import types
from datetime import datetime
from pathlib import Path

import numpy as np

from fusec.compiler.calibrate import hardware_profile
from fusec.compiler.options import CompileOptions
from fusec.compiler.pipeline import compile_source
from fusec.dsl.parser import parse_text
from fusec.dsl.diagnostics import FdslError
from fusec.runtime.reference import random_inputs

RESULTS = Path(__file__).resolve().parent / "results"

COUNTER = '''
from numba.extending import intrinsic as _kc_intrinsic
from llvmlite import ir as _kc_ir
from numba import types as _kc_types


@_kc_intrinsic
def _kc_tsc(typingctx):
    """The time-stamp counter (llvm.readcyclecounter)."""
    def codegen(context, builder, sig, args):
        fn = builder.module.declare_intrinsic("llvm.readcyclecounter", fnty=_kc_ir.FunctionType(_kc_ir.IntType(64), []))
        return builder.call(fn, [])
    return _kc_types.uint64(), codegen


@numba.njit
def _kc_now():
    return _kc_tsc()


_KC = np.zeros({n}, np.uint64)
'''


def instrument(source: str) -> tuple[str, list[str]]:
    """The module with its planned (or only) cpu function's top-level loops and BLAS calls
    clocked into `_KC`, and each clocked block's first line."""
    m = re.search(r"^def (?!_loop\d)(\w+_par|_run_\w+_planned|run_\w+)\(", source, re.M)
    if m is None:
        raise ValueError("no cpu function in the module")
    fn = m.group(1)
    lines = source.split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith(f"def {fn}("))
    end = next((i for i in range(start + 1, len(lines)) if lines[i] and not lines[i].startswith((" ", "#"))), len(lines))
    body, out, heads = lines[start + 1:end], [], []
    j = 0
    if body and body[0].strip().startswith('"""'):       # the docstring (one line)
        out.append(body[0])
        j = 1
    while j < len(body):
        line = body[j]
        top = line.startswith("    ") and not line.startswith("     ")
        if top and (line.lstrip().startswith(("for ", "_loop")) or "gemm(" in line):
            block = [line]
            j += 1
            while j < len(body) and (body[j].startswith("     ") or not body[j].strip()):
                block.append(body[j])
                j += 1
            k = len(heads)
            out += ["    _kc_t = _kc_tsc()", *block, f"    _KC[{k}] += _kc_tsc() - _kc_t"]
            heads.append(line.strip())
            continue
        out.append(line)
        j += 1
    lines[start] = lines[start].replace("):", ", _KC):", 1)
    lines[start + 1:end] = out
    text = "\n".join(lines)
    # its callers (Python wrappers) pass the module's counters
    text = re.sub(rf"(?<!def )\b{fn}\(([^\n]*)\)(\n|$)", lambda c: f"{fn}({c.group(1)}, _KC){c.group(2)}", text)
    first_jit = text.index("\n@numba.njit")
    return text[:first_jit] + "\n" + COUNTER.format(n=max(1, len(heads))) + text[first_jit:], heads


def counter_hz(now) -> float:
    """The counter's ticks per second against time.perf_counter (0.2 s)."""
    now()
    t0, c0 = time.perf_counter(), now()
    time.sleep(0.2)
    t1, c1 = time.perf_counter(), now()
    return (c1 - c0) / (t1 - t0)


def clock(text: str, path: str, chain: str, binding: dict[str, int], calls: int = 100) -> dict:
    """Compile `chain` for this machine's cpu, run the clocked module `calls` times (after two
    warm-up calls) and return per kernel its predicted and measured times."""
    st = compile_source(text, path, chain, binding,
                        options=CompileOptions(target="cpu", hardware=hardware_profile("cpu", "cpu")))
    clocked, heads = instrument(st.emitted.source)
    mod = types.ModuleType(f"fusec_kernel_clock_{chain}")
    exec(compile(clocked, f"<kernel clock of {chain}>", "exec"), mod.__dict__)
    (entry,) = st.emitted.entries.values()
    host = mod.__dict__[entry.host]
    args = random_inputs(st.typed, binding)
    host(*args)
    host(*args)
    rows, walls = [], []
    for _ in range(calls):
        mod._KC[:] = 0
        t = time.perf_counter()
        host(*args)
        walls.append(time.perf_counter() - t)
        rows.append(mod._KC[:len(heads)].astype(np.float64))
    hz = counter_hz(mod._kc_now)
    per = np.array(rows) / hz * 1e3
    kernels = st.plan.kernels
    mapped = len(kernels) == len(heads)
    out = []
    for k, head in enumerate(heads):
        row = {"block": k, "code": head[:120], "measured_median_ms": round(float(np.median(per[:, k])), 4),
               "measured_min_ms": round(float(per[:, k].min()), 4)}
        if mapped:
            g, cost = kernels[k], st.plan.costs[k]
            row.update(kernel=k, template=g.template, ops=len(g.ops), predicted_ms=round(cost.time_s * 1e3, 4))
        out.append(row)
    return {"chain": chain, "binding": binding, "calls": calls, "counter_hz": round(hz),
            "mapped": mapped, "plan_kernels": len(kernels), "blocks": len(heads),
            "wall_median_ms": round(statistics.median(walls) * 1e3, 4), "wall_min_ms": round(min(walls) * 1e3, 4),
            "predicted_ms": round(sum(c.time_s for c in st.plan.costs) * 1e3, 4), "kernels": out}


def table(r: dict) -> str:
    lines = [f"{r['chain']} {r['binding']}: {r['blocks']} clocked blocks, {r['plan_kernels']} plan kernels"
             + ("" if r["mapped"] else " (counts differ: blocks not mapped to kernels)"),
             f"call: median {r['wall_median_ms']:.3f} ms, min {r['wall_min_ms']:.3f} ms; predicted {r['predicted_ms']:.3f} ms",
             f"{'#':>3} {'template':12} {'predicted':>10} {'median':>10} {'min':>10}  code"]
    for k in r["kernels"]:
        lines.append(f"{k['block']:>3} {k.get('template', '?'):12} {k.get('predicted_ms', float('nan')):10.3f} "
                     f"{k['measured_median_ms']:10.3f} {k['measured_min_ms']:10.3f}  {k['code'][:60]}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.kernel_clock", description=__doc__.split("\n\n")[0])
    ap.add_argument("file")
    ap.add_argument("--chain", help="the chain (default: the file's first)")
    ap.add_argument("--bind", default="", help="symbol sizes, e.g. M=64,N=128")
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--out", default=str(RESULTS))
    a = ap.parse_args(argv)
    text = Path(a.file).read_text(encoding="utf-8")
    try:
        binding = {k.strip(): int(v) for k, v in (kv.split("=") for kv in a.bind.split(",") if kv)}
    except ValueError:
        print(f"--bind: expected NAME=INT,..., got {a.bind!r}", file=sys.stderr)
        return 1
    try:
        chain = a.chain or parse_text(text, a.file).chains[0].name
        r = clock(text, a.file, chain, binding, a.calls)
    except FdslError as e:
        print(e, file=sys.stderr)
        return 1
    r["command"] = "python -m bench.kernel_clock " + " ".join(argv if argv is not None else sys.argv[1:])
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    dest = out / f"kernel-clock-{chain}-{datetime.now().strftime('%Y-%m-%dT%H%M')}.json"
    dest.write_text(json.dumps(r, indent=1) + "\n", encoding="utf-8")
    print(table(r))
    print(f"written: {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
