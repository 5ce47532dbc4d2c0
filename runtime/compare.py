"""Numerical comparison against the reference, with per-dtype tolerances from one table.

NaN and the infinities are compared position by position, before any tolerance: a build that
has a NaN or an infinity where the reference has a finite value, or the reverse, or an infinity
of the other sign, fails, and the verdict names it ("3 NaN where the reference has finite
values, first at [1, 2]"). The tolerance decides the positions where both are finite."""
from __future__ import annotations

import math

from dataclasses import dataclass, field, replace

import numpy as np

# dtype name -> (rtol, atol). A value passes when |a - e| <= atol * scale + rtol * |e|, where
# scale = max(1, max |e| over the whole output). Rounding error in a sum or dot product grows with
# the magnitude of the terms, not of the result: an output element near zero that came out of a
# 1024-term dot product of values ~10 carries absolute error ~1e-3 in f32 whichever order the sum
# runs in. Scaling atol by the output's own magnitude keeps the check meaningful for such
# cancellations without loosening it for outputs of magnitude <= 1 (softmax, norms).
TOLERANCES: dict[str, tuple[float, float]] = {
    "f16": (1e-2, 1e-2),
    "bf16": (5e-2, 5e-2),
    "f32": (1e-4, 1e-5),
    "f64": (1e-10, 1e-12),
    "i32": (0.0, 0.0),
    "i64": (0.0, 0.0),
    "bool": (0.0, 0.0),
}


@dataclass(frozen=True)
class SpecialMismatch:
    """Positions where the build and the reference disagree on NaN or infinity, of one kind."""
    what: str                          # "NaN where the reference has finite values"
    count: int
    first: tuple[int, ...]
    actual: float
    expected: float

    def describe(self) -> str:
        where = f"[{', '.join(map(str, self.first))}]"
        return (f"{self.count} {self.what}, first at {where} "
                f"(got {self.actual:.8g}, expected {self.expected:.8g})")


@dataclass(frozen=True)
class Specials:
    """How many NaN and infinities the reference and the build hold, and where they disagree."""
    ref_nan: int = 0
    ref_inf: int = 0
    got_nan: int = 0
    got_inf: int = 0
    mismatches: tuple[SpecialMismatch, ...] = ()

    @property
    def any(self) -> bool:
        return bool(self.ref_nan or self.ref_inf or self.got_nan or self.got_inf)

    def counts(self) -> str:
        """`NaN 3, inf 2 as the reference` (the same positions), or `NaN 4, inf 2 (reference:
        NaN 3, inf 2)`."""
        got = f"NaN {self.got_nan}, inf {self.got_inf}"
        if not self.mismatches:
            return f"{got} as the reference"
        return f"{got} (reference: NaN {self.ref_nan}, inf {self.ref_inf})"


@dataclass(frozen=True)
class Comparison:
    ok: bool
    max_abs: float                     # over the positions where both are finite
    max_rel: float                     # over those with |expected| >= rel_floor
    worst_index: tuple[int, ...]       # where |a - e| exceeds its tolerance most (or is largest)
    actual: float
    expected: float
    rtol: float
    atol: float
    reason: str = ""
    note: str = ""                      # why a result outside the tolerance still passed
    specials: Specials = field(default_factory=Specials)
    rel_floor: float = 0.0              # atol / rtol: below it the absolute tolerance dominates
    used: float = math.inf              # the largest error over its position's tolerance (1: the limit)

    def rel_text(self) -> str:
        """The relative error and where it means something: near zero, where the absolute
        tolerance decides, a relative error says nothing (1 for 1e-9 against 0)."""
        if not self.rel_floor:
            return f"max rel err {self.max_rel:.3g}"
        return f"max rel err {self.max_rel:.3g} where |ref| >= {self.rel_floor:.3g}"

    def tolerance_used(self) -> float:
        """How much of its tolerance the finite positions' error takes at most (above 1: outside
        it; inf when the comparison failed for another reason: shapes, NaN or infinities)."""
        return math.inf if self.reason or self.specials.mismatches else self.used

    def summary(self) -> str:
        """One line for a report: the errors, and the NaN and infinities on both sides."""
        if self.reason:
            return self.reason
        out = f"max abs err {self.max_abs:.3g}, {self.rel_text()}"
        if self.specials.any:
            out += f"; {self.specials.counts()}"
        return out

    def describe(self) -> str:
        if self.reason:
            return self.reason
        where = f"[{', '.join(map(str, self.worst_index))}]" if self.worst_index else "[]"
        numeric = (f"max abs err {self.max_abs:.3g}, {self.rel_text()} "
                   f"(worst at {where}: got {self.actual:.8g}, expected {self.expected:.8g}; "
                   f"rtol {self.rtol:g}, atol {self.atol:g})")
        if not self.specials.mismatches:
            return numeric + (f"; {self.specials.counts()}" if self.specials.any else "")
        named = "; ".join(m.describe() for m in self.specials.mismatches)
        return f"{named}; {self.specials.counts()}; where both are finite: {numeric}"


# (build is, reference is) -> the name of a disagreement; "finite", "nan", "+inf", "-inf"
_KINDS = (
    ("nan", "finite", "NaN where the reference has finite values"),
    ("nan", "inf", "NaN where the reference has infinities"),
    ("inf", "finite", "infinities where the reference has finite values"),
    ("inf", "nan", "infinities where the reference has NaN"),
    ("inf", "inf", "infinities of the other sign than the reference's"),
    ("finite", "nan", "finite values where the reference has NaN"),
    ("finite", "inf", "finite values where the reference has infinities"),
)


def specials(a: np.ndarray, e: np.ndarray) -> Specials:
    """NaN and infinity counts of a build `a` and its reference `e` (float64 arrays of one shape)
    and every disagreement between them, by kind."""
    classes = {}
    for name, x in (("a", a), ("e", e)):
        nan, inf = np.isnan(x), np.isinf(x)
        classes[name] = {"nan": nan, "inf": inf, "finite": ~(nan | inf)}
    out = []
    for got, ref, what in _KINDS:
        bad = classes["a"][got] & classes["e"][ref]
        if got == ref == "inf":
            bad = bad & (a != e)
        if bad.any():
            first = tuple(int(i) for i in np.argwhere(bad)[0])
            out.append(SpecialMismatch(what, int(bad.sum()), first, float(a[first]), float(e[first])))
    return Specials(int(classes["e"]["nan"].sum()), int(classes["e"]["inf"].sum()),
                    int(classes["a"]["nan"].sum()), int(classes["a"]["inf"].sum()), tuple(out))


def compare(actual: np.ndarray, expected: np.ndarray, dtype: str) -> Comparison:
    """Compare one output with its reference: NaN and infinities position by position (each
    disagreement fails, by name), the finite positions within the dtype's tolerance."""
    rtol, atol = TOLERANCES[dtype]
    a = np.asarray(actual)
    e = np.asarray(expected)
    if a.shape != e.shape:
        return Comparison(False, float("inf"), float("inf"), (), 0.0, 0.0, rtol, atol,
                          reason=f"shape {a.shape} differs from the reference's {e.shape}")
    a = a.astype(np.float64)
    e = e.astype(np.float64)
    if a.size == 0:
        return Comparison(True, 0.0, 0.0, (), 0.0, 0.0, rtol, atol, used=0.0)
    sp = specials(a, e)
    finite = np.isfinite(a) & np.isfinite(e)
    magnitude = np.abs(e[np.isfinite(e)])
    atol_eff = atol * max(1.0, float(magnitude.max()) if magnitude.size else 1.0)
    floor = atol_eff / rtol if rtol else 0.0
    with np.errstate(all="ignore"):
        err = np.where(finite, np.abs(a - e), 0.0)
        tol = atol_eff + rtol * np.abs(e)
        excess = np.where(finite, err - tol, -np.inf)
        away = finite & (np.abs(e) >= floor) & (e != 0)
        rel = np.where(away, err / np.where(away, np.abs(e), 1.0), 0.0)
        # a zero tolerance (integers) is used up by any error at all
        used = float(np.max(np.where(tol > 0, err / np.where(tol > 0, tol, 1.0), np.where(err > 0, np.inf, 0.0))))
    if finite.any():
        idx = tuple(int(i) for i in np.unravel_index(int(np.argmax(excess)), a.shape))
    elif sp.mismatches:
        idx = sp.mismatches[0].first
    else:
        idx = (0,) * a.ndim
    ok = not sp.mismatches and bool(np.all(excess <= 0))
    return Comparison(ok, float(err.max()), float(rel.max()), idx, float(a[idx]), float(e[idx]), rtol, atol_eff,
                      specials=sp, rel_floor=floor, used=used)


def compare_to_truth(actual: np.ndarray, expected: np.ndarray, truth: np.ndarray | None, dtype: str) -> Comparison:
    """`compare`, and when a finite position fails: the float64 reference decides. An output at
    least as close to the float64 truth as the reference itself (within 2x its error, over the
    positions where all three are finite) passes, because then the difference is the
    reference's own rounding, amplified by an ill-conditioned chain (softmax of large logits,
    long dot products), not a wrong kernel. A NaN or an infinity where the reference has none
    (or the reverse) is never excused."""
    c = compare(actual, expected, dtype)
    if c.ok or truth is None or dtype in ("i32", "i64", "bool") or c.reason or c.specials.mismatches:
        return c
    a, e, t = (np.asarray(v, np.float64) for v in (actual, expected, truth))
    both = np.isfinite(a) & np.isfinite(e) & np.isfinite(t)
    if not both.any():
        return c
    ours = float(np.max(np.abs(a - t)[both]))
    theirs = float(np.max(np.abs(e - t)[both]))
    if ours <= 2 * theirs:
        return replace(c, ok=True, note=f"as close to the f64 truth as the {dtype} reference "
                                        f"({ours:.3g} vs {theirs:.3g})")
    return c
