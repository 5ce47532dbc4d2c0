"""One random chain through fusec's targets and through the torch oracle, compared.

`check(case, targets)` runs the chain's source:
- through fusec's reference (runtime/reference.py) in the chain's dtypes and in float64, and
  through the torch oracle (tests/differential/torch_oracle.py) in both;
- the float64 runs must agree within f64's tolerance (the ops' meanings, rounding aside): NaN
  and infinities always, finite values unless the runs in the chain's dtypes agree (then the
  output is ill-conditioned, a sum cancelling huge terms, and the difference is a note);
- every target's outputs (the reference, and `cpu`, `cuda-sim`, `mlir-jit` fused and unfused)
  must agree with torch's run in the chain's dtypes with runtime/compare.py's tolerances: NaN and
  infinities position by position, finite values within the dtype's tolerance, or, failing
  that, as close to torch's float64 truth as torch's own run in the dtype is
  (compare_to_truth), or within the tolerance of that truth;
- an index outside its axis must be a user error in fusec where torch's translation refuses it.

A result is `agree`, `disagree` (with the reasons), `undefined` (FDSL leaves the result
undefined: a float cast to an integer of NaN or out of range), or `skipped` targets (none are
skipped today; bf16 ran on the reference and mlir-jit only until it ran on the Numba targets).
"""
from __future__ import annotations

import re
import traceback
from dataclasses import dataclass, field

import numpy as np

from fusec.runtime.compare import compare, compare_to_truth

from . import torch_oracle
from .gen import Case, chain_case, inputs_for



@dataclass
class Result:
    case: Case
    status: str = "agree"                              # agree | disagree | undefined | invalid
    problems: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)   # targets not run, with why
    ran: list[str] = field(default_factory=list)       # "cpu/fused", ...
    notes: list[str] = field(default_factory=list)     # float64 differences of ill-conditioned outputs

    def fail(self, what: str) -> None:
        self.status = "disagree"
        self.problems.append(what)


def _tol_dtype(dtype: str, f64: bool) -> str:
    return "f64" if f64 and dtype in torch_oracle.FLOATS else dtype


def _agrees(got, want, truth, dtype: str):
    c = compare(got, want, dtype)
    if c.ok:
        return None
    if compare_to_truth(got, want, truth, dtype).ok:
        return None
    if truth is not None and compare(got, truth, dtype).ok:
        return None
    return c.describe()


def check(case: Case, targets=("reference",)) -> Result:
    import fusec
    from fusec.dsl.diagnostics import FdslError
    from fusec.runtime import reference

    res = Result(case)
    try:
        typed = fusec.check(case.source).chains[0]
    except FdslError as e:
        res.status = "invalid"
        res.problems.append(f"the generated chain does not check: {e}")
        return res
    binding = {s: case.binding[s] for s in typed.symbols}
    inputs = inputs_for(case, typed)
    types = [t.dtype.name for t in typed.output_types]

    torch_err = None
    try:
        t_native = torch_oracle.run(typed, inputs, binding, f64=False)
        t_f64 = torch_oracle.run(typed, inputs, binding, f64=True)
    except torch_oracle.Undefined as e:
        res.status = "undefined"
        res.problems.append(str(e))
        return res
    except torch_oracle.IndexOutOfRange as e:
        torch_err = str(e)

    # the reference, in the dtypes and in float64
    try:
        r_native = reference.run_chain(typed, inputs, binding)
        r_f64 = reference.run_chain(typed, inputs, binding, compute_f64=True)
    except FdslError as e:
        if torch_err is None:
            res.fail(f"reference: user error where torch computes: {e}")
        return res
    except Exception:  # noqa: BLE001 - an internal error is a finding
        res.fail(f"reference: internal error\n{traceback.format_exc(limit=4)}")
        return res
    if torch_err is not None:
        res.fail(f"reference computes where torch refuses an index: {torch_err}")
        return res
    res.ran.append("reference")
    for i, dt in enumerate(types):
        why = _agrees(r_native[i], t_native[i], t_f64[i] if dt in torch_oracle.FLOATS else None, dt)
        if why:
            res.fail(f"reference output {i} ({dt}) vs torch: {why}")
        c = compare(r_f64[i], t_f64[i], _tol_dtype(dt, True))
        if c.ok:
            continue
        if not why and not c.specials.mismatches and not c.reason and dt in torch_oracle.FLOATS:
            # finite values only, and the runs in the dtype agree: a sum that cancels terms far
            # larger than its result (sum(x - mean(x)) over 1e34s) is rounding noise in either
            # order, even in float64 (compare scales its tolerance by the result, not the terms)
            res.notes.append(f"float64 runs differ at output {i} ({dt}) where the dtype runs agree: {c.summary()}")
            continue
        res.fail(f"float64 runs differ at output {i} ({dt}): {c.describe()}")

    for target in targets:
        if target == "reference":
            continue
        try:
            prog = fusec.compile(case.source, target=target)
            compiled = prog.r.compiled(binding)
            builds = [("fused", compiled.fused)]
            unfused = compiled.unfused
            if unfused is not None:
                builds.append(("unfused", unfused))
            for what, build in builds:
                outs = build(*[np.array(x, copy=True) for x in inputs])
                res.ran.append(f"{target}/{what}")
                for i, dt in enumerate(types):
                    why = _agrees(outs[i], t_native[i], t_f64[i] if dt in torch_oracle.FLOATS else None, dt)
                    if why:
                        res.fail(f"{target}/{what} output {i} ({dt}) vs torch: {why}")
        except FdslError as e:
            res.fail(f"{target}: user error: {e}")
        except Exception:  # noqa: BLE001
            res.fail(f"{target}: internal error\n{traceback.format_exc(limit=6)}")
    return res


_STEP = re.compile(r"^    (t\d+) = ")


def shrink(case: Case, targets) -> Case:
    """The shortest prefix of the chain's steps, returning only its last value, that still
    disagrees (the chain itself when none does)."""
    lines = case.source.splitlines(keepends=True)
    header, steps = lines[0], [ln for ln in lines if _STEP.match(ln)]
    first_type = re.search(r"\(p1: (\w+(?:\[[^\]]*\])?)", header).group(1)
    for i in range(len(steps)):
        name = _STEP.match(steps[i]).group(1)
        head = re.sub(r"-> .* \{$", f"-> {first_type} {{", header.rstrip("\n")) + "\n"
        src = head + "".join(steps[:i + 1]) + f"    return {name}\n}}\n"
        small = Case(case.seed, src, case.binding, case.dtype, case.specials, case.negative_index)
        try:
            r = check(small, targets)
        except Exception:  # noqa: BLE001
            continue
        if r.status == "disagree":
            return small
    return case


__all__ = ["Result", "check", "shrink", "chain_case"]
