"""Reduction combiners, one entry each: everything the compiler knows of one (acc =
combine(acc, x)): per family of element types its arith op and neutral element, what a reduction
starts from, whether split-reductions may split it, whether it is idempotent, the FDSL
reductions and scan that use it and its NumPy function. Every stage reads it; a new combiner is
one entry here (tests/compiler/test_combiners.py). `of_op` answers None for an op that is no
combiner; `form_of`, `of_reduction` and `of_scan` raise CompilerInternalError for a name not
here. See docs/ARCHITECTURE.md, "Layout".
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import CompilerInternalError

LOWEST, HIGHEST = "lowest", "highest"       # an integer neutral: the type's bound (it has the width)


@dataclass(frozen=True)
class Form:
    """A combiner on one family of element types."""
    op: str                                 # the arith op's short name: addf
    neutral: float | int | str              # combine(neutral, x) == x; LOWEST / HIGHEST: a bound of the type
    init: float | int | None = None         # what a reduction starts from, where not the neutral
    splits: bool = True                     # split-reductions may split a reduction with it in two

    @property
    def bound(self) -> bool:
        """Its neutral is a bound of the integer type (a number only with the width)."""
        return self.neutral in (LOWEST, HIGHEST)

    def value(self, width: int | None = None) -> float | int:
        """The neutral as a number (a bound of the integer type `width` bits wide)."""
        if self.neutral == LOWEST:
            return -(1 << (width - 1))
        if self.neutral == HIGHEST:
            return (1 << (width - 1)) - 1
        return self.neutral

    def start(self, width: int | None = None) -> float | int:
        """What a reduction with it starts from: its init, else its neutral."""
        return self.value(width) if self.init is None else self.init

    def build(self, a, b):
        """The op on the MLIR values a and b, built at the insertion point."""
        from .mlir import arith
        return getattr(arith, self.op)(a, b)


@dataclass(frozen=True)
class Combiner:
    name: str                               # add, mul, max, min, maxnum, minnum
    on_float: Form | None                   # on floats (None: no float form)
    on_int: Form | None                     # on ints (None: no int form)
    idempotent: bool = False                # combine(x, x) == x: an init combined twice is combined once
    reductions: tuple[str, ...] = ()        # FDSL ops lowered to one reduction with it (argmax: its max)
    scan: str | None = None                 # the FDSL scan that runs it (the `fusec.scan` kind)
    numpy: str = ""                         # what it computes: numpy.<this> (on floats, NaN rules included)

    def forms(self) -> tuple[Form, ...]:
        return tuple(f for f in (self.on_float, self.on_int) if f is not None)

    def form(self, kind: str, stage: str) -> Form:
        """Its form on the element family `kind`: "float", else the ints (an int, an index)."""
        form = self.on_float if kind == "float" else self.on_int
        if form is None:
            raise CompilerInternalError(stage, f"the combiner {self.name} has no {kind} form")
        return form

    def neutral(self, elem, stage: str = "linalg") -> float | int:
        """Its neutral element for the MLIR element type `elem`."""
        return self.form(_kind(elem), stage).value(_width(elem))

    def init(self, elem, stage: str = "linalg") -> float | int:
        """What a reduction of `elem` elements with it starts from."""
        return self.form(_kind(elem), stage).start(_width(elem))

    def combine(self, a, b, stage: str = "linalg"):
        """Its arith op on the MLIR values a and b (one type), built at the insertion point."""
        return self.form(_kind(a.type), stage).build(a, b)


# A float sum starts from +0, as NumPy's does (np.sum of -0s is +0), though -0 is its neutral
# (-0 + x is x for every x; a running sum starts from it, as np.cumsum keeps a leading -0).
TABLE: tuple[Combiner, ...] = (
    Combiner("add", Form("addf", -0.0, init=0.0), Form("addi", 0), reductions=("sum", "mean"), scan="cumsum",
             numpy="add"),
    Combiner("mul", Form("mulf", 1.0), Form("muli", 1), reductions=("prod",), scan="cumprod", numpy="multiply"),
    # splits=False: the integer min/max are not split in two: argmax's index search is one, and
    # reads linalg.index of the loop a split would renumber (split-reductions does not remap it)
    Combiner("max", Form("maximumf", float("-inf")), Form("maxsi", LOWEST, splits=False), idempotent=True,
             reductions=("max", "argmax", "any"), numpy="maximum"),
    Combiner("min", Form("minimumf", float("inf")), Form("minsi", HIGHEST, splits=False), idempotent=True,
             reductions=("min", "argmin", "all"), numpy="minimum"),
    Combiner("maxnum", Form("maxnumf", float("-inf")), None, idempotent=True, numpy="fmax"),
    Combiner("minnum", Form("minnumf", float("inf")), None, idempotent=True, numpy="fmin"),
)
COMBINERS: dict[str, Combiner] = {c.name: c for c in TABLE}
ADD, MUL, MAX, MIN = (COMBINERS[n] for n in ("add", "mul", "max", "min"))
# arith op short name (addf, maxsi) -> its combiner and the form it is
BY_ARITH_OP: dict[str, tuple[Combiner, Form]] = {f.op: (c, f) for c in TABLE for f in c.forms()}
BY_REDUCTION: dict[str, Combiner] = {r: c for c in TABLE for r in c.reductions}
BY_SCAN: dict[str, Combiner] = {c.scan: c for c in TABLE if c.scan}


def of_op(op: str) -> tuple[Combiner, Form] | None:
    """The combiner an arith op (short name: addf) is a form of; None for an op that is none."""
    return BY_ARITH_OP.get(op)


def form_of(op: str, stage: str) -> Form:
    """The form of an arith op a stage knows to be a combiner (it had it from this table)."""
    if op not in BY_ARITH_OP:
        raise CompilerInternalError(stage, f"{op} is not a reduction combiner (compiler/combiners.py)")
    return BY_ARITH_OP[op][1]


def of_reduction(op: str, stage: str) -> Combiner:
    """The combiner of the FDSL reduction `op` (sum, argmax...)."""
    if op not in BY_REDUCTION:
        raise CompilerInternalError(stage, f"the reduction {op} has no combiner (compiler/combiners.py)")
    return BY_REDUCTION[op]


def of_scan(kind: str, stage: str) -> Combiner:
    """The combiner of the scan `kind` (cumsum, cumprod: a `fusec.scan` value)."""
    if kind not in BY_SCAN:
        raise CompilerInternalError(stage, f"the scan {kind} has no combiner (compiler/combiners.py)")
    return BY_SCAN[kind]


def _kind(elem) -> str:
    from .mlir import ir
    return "float" if isinstance(elem, ir.FloatType) else "int"


def _width(elem) -> int | None:
    from .mlir import ir
    return ir.IntegerType(elem).width if isinstance(elem, ir.IntegerType) else None
