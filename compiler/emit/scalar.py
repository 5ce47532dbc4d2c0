"""Scalar rules: one Python expression per arith / math / affine / ub op, computed in the value's
`Elem.compute` type (f16 in float32), with IEEE results on every target, the CUDA simulator
included (compiler/mathfns.py `sim`). See docs/ARCHITECTURE.md, "GPU kernels" (the simulator).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .. import mathfns
from . import bf16 as emit_bf16
from . import cpu as emit_cpu
from .values import (Constants, Elem, EmitError, atom, elem_of_name, elem_of_type, expr_add,
                          expr_mul, floordiv, mod, no_rule)
from ..mlir import ir

_CMPF = {  # arith.cmpf predicate number -> template over a, b (NaN compares false except une)
    0: "False", 1: "{a} == {b}", 2: "{a} > {b}", 3: "{a} >= {b}", 4: "{a} < {b}", 5: "{a} <= {b}",
    6: "({a} < {b} or {a} > {b})", 7: "({a} == {a} and {b} == {b})",
    8: "not ({a} < {b} or {a} > {b})", 9: "not ({a} <= {b})", 10: "not ({a} < {b})",
    11: "not ({a} >= {b})", 12: "not ({a} > {b})", 13: "{a} != {b}",
    14: "({a} != {a} or {b} != {b})", 15: "True",
}
# arith.cmpi: unsigned predicates assume operands below 2**(width-1), as index math always is.
_CMPI = {0: "==", 1: "!=", 2: "<", 3: "<=", 4: ">", 5: ">=", 6: "<", 7: "<=", 8: ">", 9: ">="}

_BINARY = {"arith.addf": "+", "arith.subf": "-", "arith.mulf": "*", "arith.divf": "/",
           "arith.addi": "+", "arith.subi": "-", "arith.muli": "*", "arith.andi": "&",
           "arith.ori": "|", "arith.xori": "^", "arith.shli": "<<", "arith.shrsi": ">>",
           "arith.shrui": ">>", "arith.floordivsi": "//", "arith.divui": "//", "arith.remui": "%"}

_MATH_UNARY = mathfns.python_calls(1)     # math op -> Python `math` function, identical on both targets
_MATH_BINARY = mathfns.python_calls(2)
_SIM = mathfns.simulator_calls()          # math op -> the NumPy function the CUDA simulator uses instead
_SIM_WARNINGS = [  # a cuda module on the simulator: NumPy's floating-point warnings from its own code
    "if _CUDASIM:  # NumPy scalars warn where a GPU returns inf, NaN or 0 silently",
    '    warnings.filterwarnings("ignore", "(overflow|invalid value|divide by zero|underflow) encountered",',
    "                            RuntimeWarning, __name__)"]
# floor/ceil/trunc: CUDA types math.floor(f32) as f32; CPU Numba returns an int, so use NumPy.
_ROUNDING = {"math.floor": "floor", "math.ceil": "ceil", "math.trunc": "trunc"}


def has_rule(op: str) -> bool:
    """Whether the emitter writes the arith/math op `op` (as an expression or a helper call)."""
    return (op in _BINARY or op in _MATH_UNARY or op in _MATH_BINARY or op in _ROUNDING or op in _RULES
            or op in ("arith.constant", "ub.poison"))


@dataclass
class Helpers:
    """Small module-level functions the expressions call (NaN-propagating max, C division...)."""
    target: str
    consts: Constants
    used: dict[str, list[str]] = field(default_factory=dict)
    decorated: set[str] = field(default_factory=set)     # helpers whose text has its decorator
    intrinsics: bool = False                              # a Numba @intrinsic is among them
    cudasim: bool = False                                 # the module defines _CUDASIM: every cuda module
    blas: bool = False                                    # cpu: the module calls CBLAS (emit/cpu.py: BLAS_PRELUDE)

    def __post_init__(self):
        # cuda: math calls and emit/reduce.py's combines branch on _CUDASIM, the warnings filter needs it
        self.cudasim = self.target == "cuda"

    def use(self, name: str, elem: Elem | None = None) -> str:
        if self.target == "cpu" and emit_cpu.is_cpu_helper(name):
            return self._use_cpu(name)
        key = f"_{name}_{elem.mlir}" if elem is not None and name in _TYPED_HELPERS else f"_{name}"
        if key not in self.used:
            self.used[key] = _helper_body(name, key, elem, self)
        return key

    def _use_cpu(self, name: str) -> str:
        key = emit_cpu.minmax_key(name) if name in emit_cpu.MINMAX else f"_{name}"
        if key not in self.used:
            self.used[key] = []            # claimed first: a helper may use others
            lines, intrinsic = emit_cpu.helper(name, key, self._use_cpu,
                                               lambda v, t: self.consts.float(v, elem_of_name(t)))
            self.used[key] = lines
            self.decorated.add(key)
            self.intrinsics |= intrinsic
        return key

    def use_text(self, key: str, lines: list[str]) -> str:
        """A module-level block given whole (its own decorators): emit/mma.py's intrinsics."""
        if key not in self.used:
            self.used[key] = lines
            self.decorated.add(key)
        return key

    def imports(self) -> tuple[str, ...]:
        if self.target == "cuda":
            return ("import warnings",)
        return (emit_cpu.IMPORTS if self.intrinsics else ()) + (emit_cpu.BLAS_PRELUDE if self.blas else ())

    def lines(self) -> list[str]:
        deco = "@cuda.jit(device=True)" if self.target == "cuda" else "@numba.njit"
        out = ["", ""] + _SIM_WARNINGS if self.target == "cuda" else []
        for key in sorted(self.used):
            out += ["", ""] + ([] if key in self.decorated else [deco]) + self.used[key]
        return out

    def rounding(self, fn: str, x: str, elem: Elem) -> str:
        """floor/ceil/trunc in the compute type, with the sign of x (-0 and NaN kept). On a GPU
        math.floor(f32) is an f32 and the copysign keeps the sign (trunc is floor of |x|); the
        CUDA simulator, where math.floor goes through a Python int (and raises for NaN and the
        infinities), and the CPU target, whose math.floor returns an int, use NumPy's."""
        sim = f"np.{mathfns.BY_MLIR_OP[f'math.{fn}'].sim}({x})"
        if self.target == "cpu":
            return f"np.{elem.compute}({sim})"
        inner = f"math.floor(abs({x}))" if fn == "trunc" else f"math.{fn}({x})"
        return f"np.{elem.compute}(math.copysign({inner}, {x}) if not _CUDASIM else {sim})"


_HELPERS = {  # name -> source; {key} is the function's name, the rest typed constants
    # Branch-free (one select over predicates: FSETP and FSEL in SASS, so a row's loads are not
    # held back by branch regions), with the IEEE 754-2019 rules of arith.maximumf / minimumf.
    # `|` and `&` on the predicates, not `or` / `and`, which Numba lowers to branches.
    "maximumf": '''
def {key}(a, b):
    """arith.maximumf: NaN if either operand is NaN; +0 is above -0. Branch-free: a when it is
    above b, when it is NaN, or when the two are equal and a's sign is + (max(+0, -0) = +0);
    else b (NaN when b is)."""
    return a if (a > b) | (a != a) | ((a == b) & (math.copysign({one}, a) > {zero})) else b''',
    "minimumf": '''
def {key}(a, b):
    """arith.minimumf: NaN if either operand is NaN; -0 is below +0. Branch-free, as maximumf."""
    return a if (a < b) | (a != a) | ((a == b) & (math.copysign({one}, a) < {zero})) else b''',
    "maxnumf": '''
def {key}(a, b):
    """arith.maxnumf: the other operand if one is NaN. Branch-free: a when above b or b is NaN."""
    return a if (a > b) | (b != b) else b''',
    "minnumf": '''
def {key}(a, b):
    """arith.minnumf: the other operand if one is NaN. Branch-free: a when below b or b is NaN."""
    return a if (a < b) | (b != b) else b''',
    "divsi": '''
def {key}(a, b):
    """arith.divsi: integer division rounding toward zero."""
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q''',
    "remsi": '''
def {key}(a, b):
    """arith.remsi: remainder with the sign of the dividend."""
    r = abs(a) % abs(b)
    return -r if a < 0 else r''',
    "ipowi": '''
def {key}(a, b):
    """math.ipowi: integer power; for b < 0 only a = 1 or a = -1 give non-zero."""
    if b < 0:
        if a == 1 or a == -1:
            return 1 if b % 2 == 0 else a
        return 0
    r = 1
    while b > 0:
        if b & 1:
            r = r * a
        a = a * a
        b = b >> 1
    return r''',
    "round": '''
def {key}(a):
    """math.round: halves round away from zero."""
    t = {trunc_a}
    if abs(a - t) >= {half}:
        t = t + {copysign_one}
    return t''',
    "roundeven": '''
def {key}(a):
    """math.roundeven: halves round to the even neighbour; the sign of a is kept."""
    x = abs(a)
    f = {floor_x}
    d = x - f
    if d > {half} or (d == {half} and {floor_half_f} != f * {half}):
        f = f + {one}
    return np.{compute}(math.copysign(f, a))''',
}
_TYPED_HELPERS = {"round", "roundeven", "maximumf", "minimumf"}


def _helper_body(name: str, key: str, elem: Elem | None, h: Helpers) -> list[str]:
    template = _HELPERS[name]
    c = h.consts
    lazy = {  # typed constants are only registered when the helper uses them
        "half": lambda: c.float(0.5, elem), "one": lambda: c.float(1.0, elem),
        "zero": lambda: c.float(0.0, elem), "compute": lambda: elem.compute,
        "trunc_a": lambda: h.rounding("trunc", "a", elem),
        "floor_x": lambda: h.rounding("floor", "x", elem),
        "floor_half_f": lambda: h.rounding("floor", f"f * {c.float(0.5, elem)}", elem),
        "copysign_one": lambda: f"np.{elem.compute}(math.copysign({c.float(1.0, elem)}, a))",
    }
    fields = {k: f() for k, f in lazy.items() if "{" + k + "}" in template}
    return template.format(key=key, **fields).strip("\n").splitlines()


class ScalarRules:
    """Expressions for the scalar ops; `expr(op, args)` is None when `op` is not one of them."""

    def __init__(self, consts: Constants, helpers: Helpers, target: str, math: str = "fast"):
        self.consts, self.helpers, self.target = consts, helpers, target
        self.vector_math = emit_cpu.VECTOR_MATH if math == "fast" else emit_cpu.ACCURATE_MATH

    def constant(self, op: "ir.Operation") -> str:
        attr = op.attributes["value"]
        elem = elem_of_type(op.results[0].type, op)
        if isinstance(attr.maybe_downcast(), ir.FloatAttr):
            return self.consts.float(ir.FloatAttr(attr).value, elem)
        if isinstance(attr.maybe_downcast(), ir.IntegerAttr):
            return self.consts.int(ir.IntegerAttr(attr).value, elem)
        if isinstance(attr.maybe_downcast(), ir.BoolAttr):       # an i1 constant prints as true / false
            return self.consts.int(int(ir.BoolAttr(attr).value), elem)
        raise EmitError(f"the emitter has no rule for the constant {attr}", op)

    def expr(self, op: "ir.Operation", args: list[str]) -> str | None:
        name = op.name
        if name == "ub.poison":
            return self.consts.zero(elem_of_type(op.results[0].type, op))
        if name.startswith("affine."):
            return self._affine(op, args)
        if not (name.startswith("arith.") or name.startswith("math.")):
            return None
        out = elem_of_type(op.results[0].type, op)
        ins = [elem_of_type(v.type, op) for v in op.operands]
        return self._arith_math(op, name, args, out, ins)

    def _arith_math(self, op, name, a, out: Elem, ins: list[Elem]) -> str:
        if name in _BINARY:
            if out.kind == "bool" and name in ("arith.addi", "arith.subi"):
                return f"{a[0]} != {a[1]}"
            if out.kind == "bool" and name == "arith.muli":
                return f"{a[0]} and {a[1]}"
            return self._wrap_int(f"{atom(a[0])} {_BINARY[name]} {atom(a[1])}", out)
        if name in self.vector_math and self.target == "cpu" and out.mlir == "f32":
            return f"{self.helpers.use(self.vector_math[name])}({a[0]})"
        if name in _MATH_UNARY:
            return self._wrap_float(self.ieee(f"math.{_MATH_UNARY[name]}({a[0]})", name, a[:1]), out)
        if name in _MATH_BINARY:
            fn = _MATH_BINARY[name]
            mod_ = "np" if fn == "fmod" and self.target == "cpu" else "math"  # no math.fmod in njit
            return self._wrap_float(self.ieee(f"{mod_}.{fn}({a[0]}, {a[1]})", name, a[:2]), out)
        if name in _ROUNDING:
            return self.helpers.rounding(_ROUNDING[name], a[0], out)
        rule = _RULES.get(name)
        if rule is None:
            raise no_rule(op)
        return rule(self, op, a, out, ins)

    def ieee(self, call: str, op: str, args: list[str]) -> str:
        """`call` (Python's `math`), or in a cuda module, where it can raise under the simulator,
        `call if not _CUDASIM else np.<sim>(args)`: IEEE results there too (see the module doc)."""
        sim = _SIM.get(op)
        if self.target != "cuda" or sim is None:
            return call
        ieee = f"{atom(args[0])} ** {atom(args[1])}" if sim == "**" else f"np.{sim}({', '.join(args)})"
        return f"{call} if not _CUDASIM else {ieee}"

    def _wrap_float(self, e: str, out: Elem) -> str:
        return atom(e) if out.compute == "float64" else f"np.{out.compute}({e})"

    def _wrap_int(self, e: str, out: Elem) -> str:
        return f"np.{out.compute}({e})" if out.kind == "int" and out.bits < 64 else e

    def cast(self, e: str, src: Elem, out: Elem) -> str:
        """Conversion between compute types (index_cast, sitofp, extf, trunci...)."""
        if out.kind == "index":
            return e if src.kind == "index" else f"int({e})"
        if out.kind == "bool":
            return f"bool({atom(e)} & 1)" if src.kind in ("int", "index") else f"bool({e})"
        if out.compute == src.compute and out.kind == src.kind:
            return e
        if out.mlir == "bf16":                  # sitofp, uitofp: to f32, then to the nearest bf16
            return self.round_bf16(f"np.float32({e})")
        return f"np.{out.compute}({e})"

    def round_bf16(self, x: str) -> str:
        """f32 `x` rounded to the nearest bf16, ties to even, still an f32: a bit-level helper
        on the cpu (emit/cpu.py), PTX's cvt on a GPU and bits again on the simulator (emit/bf16.py)."""
        if self.target == "cpu":
            return f"{self.helpers.use('round_bf16')}({x})"
        self.helpers.use_text("bf16_round", emit_bf16.ROUND.strip("\n").splitlines())
        return f"_round_bf16({x})"

    def _affine(self, op, args: list[str]) -> str:
        if op.name not in ("affine.apply", "affine.min", "affine.max"):
            raise no_rule(op)
        amap = ir.AffineMapAttr(op.attributes["map"]).value
        dims, syms = args[:amap.n_dims], args[amap.n_dims:]
        parts = [_affine_expr(e, dims, syms) for e in amap.results]
        if len(parts) == 1:
            return parts[0]
        return f"{op.name.split('.')[1]}({', '.join(parts)})"


def _affine_expr(e: "ir.AffineExpr", dims: list[str], syms: list[str]) -> str:
    e = e.maybe_downcast()
    kind = type(e).__name__
    if kind == "AffineDimExpr":
        return dims[e.position]
    if kind == "AffineSymbolExpr":
        return syms[e.position]
    if kind == "AffineConstantExpr":
        return str(e.value)
    lhs, rhs = _affine_expr(e.lhs, dims, syms), _affine_expr(e.rhs, dims, syms)
    if kind == "AffineAddExpr":
        neg = e.rhs.maybe_downcast()
        if type(neg).__name__ == "AffineMulExpr" and str(neg.rhs) == "-1":
            return f"{lhs} - {atom(_affine_expr(neg.lhs, dims, syms))}"
        return expr_add(lhs, rhs)
    if kind == "AffineMulExpr":
        return expr_mul(lhs, rhs)
    if kind == "AffineModExpr":
        return mod(lhs, rhs)
    if kind == "AffineFloorDivExpr":
        return floordiv(lhs, rhs)
    if kind == "AffineCeilDivExpr":  # divisors are positive constants: ceil(l/r) = (l+r-1)//r
        return floordiv(expr_add(lhs, str(int(rhs) - 1)) if rhs.isdigit() else f"{lhs} + {rhs} - 1", rhs)
    raise AssertionError(kind)


# ------------------------------------------------------------------------ the other arith/math ops

def _minmax_float(kind):
    def rule(r: ScalarRules, op, a, out, ins):
        return f"{r.helpers.use(kind, out)}({a[0]}, {a[1]})"
    return rule


def _helper_int(kind):
    def rule(r: ScalarRules, op, a, out, ins):
        return r._wrap_int(f"{r.helpers.use(kind)}({a[0]}, {a[1]})", out)
    return rule


def _cmpf(r, op, a, out, ins):
    pred = ir.IntegerAttr(op.attributes["predicate"]).value
    return _CMPF[pred].format(a=atom(a[0]), b=atom(a[1]))


def _cmpi(r, op, a, out, ins):
    pred = ir.IntegerAttr(op.attributes["predicate"]).value
    return f"{atom(a[0])} {_CMPI[pred]} {atom(a[1])}"


def _select(r, op, a, out, ins):
    return f"{atom(a[1])} if {atom(a[0])} else {atom(a[2])}"


def _ceildiv(r, op, a, out, ins):
    return r._wrap_int(f"-((-{atom(a[0])}) // {atom(a[1])})", out)


def _minmax_int(fn):
    def rule(r, op, a, out, ins):
        return f"{fn}({a[0]}, {a[1]})"
    return rule


def _negf(r, op, a, out, ins):
    return f"-{atom(a[0])}"


def _cast(r, op, a, out, ins):
    return r.cast(a[0], ins[0], out)


def _signed_cast(r, op, a, out, ins):
    """extsi / sitofp: a signed i1 is 0 or -1."""
    if ins[0].kind == "bool":
        return f"-{r.cast(a[0], ins[0], out)}" if out.kind != "bool" else a[0]
    return r.cast(a[0], ins[0], out)


def _truncf(r, op, a, out, ins):
    if out.mlir == "bf16":                        # computed in f32 (emit/bf16.py, emit/cpu.py)
        return r.round_bf16(a[0] if ins[0].compute == "float32" else f"np.float32({a[0]})")
    if out.mlir == "f16" and r.target == "cuda":  # round to half precision, keep computing in f32
        return f"np.float32(np.float16({a[0]}))"
    if out.mlir == "f16":                         # the cpu has no float16: rounded on the bits
        x = a[0] if ins[0].compute == "float32" else f"np.float32({a[0]})"
        return f"{r.helpers.use('round_f16')}({x})"
    return r.cast(a[0], ins[0], out)


def _extui(r, op, a, out, ins):
    if ins[0].kind == "bool":
        return r.cast(a[0], ins[0], out)
    return f"{r.cast(a[0], ins[0], out)} & {r.consts.int((1 << ins[0].bits) - 1, out)}"


def _bitcast(r, op, a, out, ins):
    if ins[0] == out:
        return a[0]
    raise no_rule(op, f"from {ins[0].mlir} to {out.mlir}")


def _abs(r, op, a, out, ins):
    return r._wrap_int(f"abs({a[0]})", out)


def _rsqrt(r, op, a, out, ins):
    sqrt = r.ieee(f"math.sqrt({a[0]})", "math.sqrt", a[:1])
    return f"{r.consts.float(1.0, out)} / {r._wrap_float(sqrt, out)}"


def _fma(r, op, a, out, ins):
    return f"{atom(a[0])} * {atom(a[1])} + {atom(a[2])}"


def _fpowi(r, op, a, out, ins):
    n = f"np.{out.compute}({a[1]})"
    return r._wrap_float(r.ieee(f"math.pow({a[0]}, {n})", "math.fpowi", [a[0], n]), out)


def _ipowi(r, op, a, out, ins):
    return r._wrap_int(f"{r.helpers.use('ipowi')}({a[0]}, {a[1]})", out)


def _round(kind):
    def rule(r, op, a, out, ins):
        if kind == "roundeven" and r.target == "cpu":
            return f"np.{out.compute}(np.rint({a[0]}))"
        return f"{r.helpers.use(kind, out)}({a[0]})"
    return rule


def _isnan(r, op, a, out, ins):
    return f"{atom(a[0])} != {atom(a[0])}"


def _isinf(r, op, a, out, ins):
    return f"math.isinf({a[0]})"


def _isfinite(r, op, a, out, ins):
    return f"math.isfinite({a[0]})"


_RULES: dict[str, Callable] = {
    "arith.maximumf": _minmax_float("maximumf"), "arith.minimumf": _minmax_float("minimumf"),
    "arith.maxnumf": _minmax_float("maxnumf"), "arith.minnumf": _minmax_float("minnumf"),
    "arith.divsi": _helper_int("divsi"), "arith.remsi": _helper_int("remsi"),
    "arith.ceildivsi": _ceildiv, "arith.ceildivui": _ceildiv,
    "arith.maxsi": _minmax_int("max"), "arith.minsi": _minmax_int("min"),
    "arith.maxui": _minmax_int("max"), "arith.minui": _minmax_int("min"),
    "arith.cmpf": _cmpf, "arith.cmpi": _cmpi, "arith.select": _select, "arith.negf": _negf,
    "arith.index_cast": _cast, "arith.index_castui": _cast, "arith.sitofp": _signed_cast,
    "arith.uitofp": _cast, "arith.fptosi": _cast, "arith.fptoui": _cast, "arith.extf": _cast,
    "arith.truncf": _truncf, "arith.extsi": _signed_cast, "arith.extui": _extui,
    "arith.trunci": _cast, "arith.bitcast": _bitcast,
    "math.absf": _abs, "math.absi": _abs, "math.rsqrt": _rsqrt, "math.fma": _fma,
    "math.fpowi": _fpowi, "math.ipowi": _ipowi, "math.round": _round("round"),
    "math.roundeven": _round("roundeven"), "math.isnan": _isnan, "math.isinf": _isinf,
    "math.isfinite": _isfinite,
}
