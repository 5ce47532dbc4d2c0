"""Values for the emitter: element types, typed constants, Python names and index expressions.

Everything here is pure bookkeeping over strings of Python source; nothing imports Numba.
"""
from __future__ import annotations

import keyword
import re
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

from ..errors import CompilerInternalError
from ..mlir import ir


class EmitError(CompilerInternalError):
    """The emitter met IR outside its closed input set: always a compiler bug, never the user's."""

    def __init__(self, message: str, op: "ir.Operation | None" = None):
        self.op_name = op.name if op is not None else None
        self.location = format_location(op.location) if op is not None else None
        if op is not None:
            message = f"{message} (at {self.location})"
        super().__init__("emit", message)

    def render(self) -> str:
        out = f"internal error: {self.message}"
        if self.dump_path:
            out += f"\n  the IR at that point was dumped to {self.dump_path}"
        return out


def no_rule(op: "ir.Operation", where: str = "") -> EmitError:
    """The one error for an op outside the emitter's input set."""
    suffix = f" {where}" if where else ""
    return EmitError(f"the emitter has no rule for '{op.name}'{suffix}", op)


_FILE_LINE_COL = re.compile(r'"([^"]*)":(\d+):(\d+)')


def format_location(loc: "ir.Location") -> str:
    """`file:line:col` of the first file location inside `loc` (fused and named ones too)."""
    m = _FILE_LINE_COL.search(str(loc))
    return f"{m.group(1)}:{m.group(2)}:{m.group(3)}" if m else "unknown location"


# --------------------------------------------------------------------------- element types

@dataclass(frozen=True)
class Elem:
    """An MLIR scalar type as the generated code sees it."""
    mlir: str       # "f32", "i1", "index"
    kind: str       # "float" | "int" | "bool" | "index"
    bits: int
    storage: str    # NumPy dtype name of arrays holding it: "float16"
    compute: str    # NumPy dtype name of values computed with it: "float32" for f16 and bf16

    @property
    def numba(self) -> str:
        """Numba's name for the storage type (signatures, local/shared arrays)."""
        return {"bool_": "boolean"}.get(self.storage, self.storage)

    @property
    def numba_compute(self) -> str:
        return {"bool_": "boolean"}.get(self.compute, self.compute)


_ELEMS = {
    "f64": Elem("f64", "float", 64, "float64", "float64"),
    "f32": Elem("f32", "float", 32, "float32", "float32"),
    "f16": Elem("f16", "float", 16, "float16", "float32"),
    # bf16 has no Numba type: its arrays hold the 16 bits as uint16 (a bfloat16 array's
    # `.view(np.uint16)`, emit/module.py), every load widening them to the f32 that is the value
    # exactly and every store rounding an f32 to them (views.py: computed, stored; emit/bf16.py);
    # the cpu target's arrays are float32 (its `compute`), converted by astype at the host function
    "bf16": Elem("bf16", "float", 16, "uint16", "float32"),
    "i1": Elem("i1", "bool", 1, "bool_", "bool_"),
    "i8": Elem("i8", "int", 8, "int8", "int8"),
    "i16": Elem("i16", "int", 16, "int16", "int16"),
    "i32": Elem("i32", "int", 32, "int32", "int32"),
    "i64": Elem("i64", "int", 64, "int64", "int64"),
    "index": Elem("index", "index", 64, "int64", "int64"),
}


def elem_of_type(t: "ir.Type", op: "ir.Operation | None" = None) -> Elem:
    """The Elem of a scalar type, or of a memref's element type."""
    if isinstance(t.maybe_downcast(), ir.MemRefType):
        t = ir.MemRefType(t).element_type
    text = str(t)
    if text not in _ELEMS:
        raise EmitError(f"the emitter has no rule for the type '{text}'", op)
    return _ELEMS[text]


def elem_of_name(mlir: str) -> Elem:
    """The Elem of a scalar type by its MLIR name ("f32")."""
    return _ELEMS[mlir]


def is_memref_type(t: "ir.Type") -> bool:
    return isinstance(t.maybe_downcast(), ir.MemRefType)


def is_memref(v: "ir.Value") -> bool:
    return is_memref_type(v.type)


def memref_shape(t: "ir.Type") -> tuple[int | None, ...]:
    """Static sizes of a memref type, None for a dynamic one."""
    mt = ir.MemRefType(t)
    return tuple(None if mt.is_dynamic_dim(i) else mt.shape[i] for i in range(mt.rank))


def type_label(t: "ir.Type") -> str:
    """`f32[4,8]` for memrefs, the element name for scalars (Entry.arg_types)."""
    if not isinstance(t.maybe_downcast(), ir.MemRefType):
        return str(t)
    dims = ",".join("?" if d is None else str(d) for d in memref_shape(t))
    return f"{ir.MemRefType(t).element_type}[{dims}]"


# --------------------------------------------------------------------------- typed constants

def _float_text(x: float) -> str:
    if x == 0 and np.signbit(x):
        return "-0.0"                    # not "-0": np.float32(-0) is +0
    if x == 0 or 1e-4 <= abs(float(x)) < 1e16:
        return np.format_float_positional(x, unique=True, trim="-")
    return np.format_float_scientific(x, unique=True, trim="-")


@dataclass
class Constants:
    """Module-level typed constants (`_f32_0p5 = np.float32(0.5)`), so no bare float literal
    ever reaches kernel arithmetic (on a GPU a Python float promotes f32 math to f64)."""
    defs: dict[str, str] = field(default_factory=dict)

    def float(self, value: float, elem: Elem) -> str:
        if elem.mlir == "bf16":                       # (bf16 too, held in f32 in the kernels)
            rounded = np.float32(ml_dtypes.bfloat16(value))
        else:
            rounded = np.dtype(elem.storage).type(value)  # the value as MLIR holds it (f16 rounds)
        if np.isnan(rounded):
            token, text = "nan", "np.nan"
        elif np.isinf(rounded):
            token, text = ("inf", "np.inf") if rounded > 0 else ("ninf", "-np.inf")
        else:
            text = _float_text(rounded)
            token = text.replace("-", "m").replace(".", "p").replace("+", "")
        name = f"_{elem.mlir}_{token}"
        self.defs[name] = f"np.{elem.compute}({text})"
        return name

    def int(self, value: int, elem: Elem) -> str:
        if elem.kind == "index":
            return str(value)
        if elem.kind == "bool":
            return "True" if value & 1 else "False"
        value = int(np.array(value).astype(elem.storage))  # wrap to the type's width, signed
        name = f"_{elem.mlir}_{'m' if value < 0 else ''}{abs(value)}"
        self.defs[name] = f"np.{elem.compute}({value})"
        return name

    def zero(self, elem: Elem) -> str:
        return self.float(0.0, elem) if elem.kind == "float" else self.int(0, elem)

    def lines(self) -> list[str]:
        return [f"{name} = {self.defs[name]}" for name in sorted(self.defs)]


_BF16_TOKEN = re.compile(r"0x[0-9A-Fa-f]+|[-+]?(?:inf|nan|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)")


def _bf16_values(attr: "ir.Attribute", shape: tuple[int, ...]) -> np.ndarray:
    """A bf16 dense attribute's values as float32 (exact). MLIR's Python bindings give no buffer
    for bf16, so they are read from its text: a hex blob of little-endian bits, or a (nested)
    list of decimals (printed to 7 digits: each reads back to its bf16) and 0x bit patterns (NaN,
    inf); a splat is one value."""
    text = str(attr)
    body = text[text.index("<") + 1:text.rindex(":")].rstrip().removesuffix(">")
    if body.startswith('"0x'):
        bits = np.frombuffer(bytes.fromhex(body[3:-1]), "<u2")
    else:
        bits = np.array([int(t, 16) if t.startswith("0x") else int(np.array(float(t), ml_dtypes.bfloat16).view(np.uint16))
                         for t in _BF16_TOKEN.findall(body)], np.uint16)
    n = int(np.prod(shape)) if shape else 1
    if bits.size == 1:
        bits = np.full(n, bits[0], np.uint16)
    return bits.view(ml_dtypes.bfloat16).astype(np.float32)


@dataclass(frozen=True)
class Global:
    name: str            # the module-level NumPy array
    elem: Elem
    shape: tuple[int, ...]
    storage: str


@dataclass
class Globals:
    """`memref.global` constants (folded weights...) as module-level NumPy arrays."""
    target: str
    by_symbol: dict[str, Global] = field(default_factory=dict)
    defs: dict[str, str] = field(default_factory=dict)

    def add(self, op: "ir.Operation") -> None:
        sym = ir.StringAttr(op.attributes["sym_name"]).value
        if "constant" not in op.attributes or "initial_value" not in op.attributes:
            raise EmitError(f"the emitter has no rule for a mutable or uninitialised "
                            f"'memref.global' @{sym}", op)
        mtype = ir.TypeAttr(op.attributes["type"]).value
        elem = elem_of_type(mtype, op)
        shape = memref_shape(mtype)
        if any(d is None for d in shape):
            raise EmitError(f"the emitter needs a static shape for 'memref.global' @{sym}", op)
        storage = elem.storage if self.target == "cuda" else elem.compute
        init = op.attributes["initial_value"]
        values = (_bf16_values(init, shape) if elem.mlir == "bf16" else np.array(init))
        if elem.mlir == "bf16" and storage == "uint16":      # cuda: the bf16 bits (exact)
            values = values.astype(ml_dtypes.bfloat16).view(np.uint16)
        values = values.astype(storage).reshape(shape or (1,))
        name = f"_g_{py_ident(sym.lstrip('_'))}"
        self.by_symbol[sym] = Global(name, elem, shape, storage)
        self.defs[name] = _array_literal(values, storage)

    def lookup(self, sym: str, op: "ir.Operation") -> Global:
        if sym not in self.by_symbol:
            raise EmitError(f"the emitter found no 'memref.global' @{sym}", op)
        return self.by_symbol[sym]

    def lines(self) -> list[str]:
        return [f"{name} = {self.defs[name]}" for name in sorted(self.defs)]


def _array_literal(values: np.ndarray, storage: str) -> str:
    shape = values.shape
    shape_text = f"({shape[0]},)" if len(shape) == 1 else f"({', '.join(map(str, shape))})"
    if values.size <= 64:
        flat = ", ".join(_scalar_literal(x) for x in values.reshape(-1))
        return f"np.array([{flat}], np.{storage}).reshape({shape_text})"
    return (f'np.frombuffer(bytes.fromhex("{values.tobytes().hex()}"), '
            f"np.{storage}).reshape({shape_text})")


def _scalar_literal(x) -> str:
    if isinstance(x, (np.bool_, bool)):
        return "True" if x else "False"
    if isinstance(x, np.integer):
        return str(int(x))
    if np.isnan(x):
        return "np.nan"
    if np.isinf(x):
        return "np.inf" if x > 0 else "-np.inf"
    return _float_text(x)


# --------------------------------------------------------------------------- Python names

_RESERVED = {"np", "numba", "cuda", "math", "range", "int", "float", "bool", "abs", "min", "max",
             "prange", "print", "len", "tuple", "object", "type", "id", "sum", "round", "pow"}


class Names:
    """Python identifiers for the MLIR values of one func, derived from the printer's names
    (`%12` -> `v12`, `%subview_3` -> `subview_3`), made unique across the func so a name never
    changes type inside a Python function."""

    def __init__(self, func_op: "ir.Operation"):
        self._state = ir.AsmState(func_op)
        self._names: dict[ir.Value, str] = {}
        self._used: set[str] = set()
        self._temps = 0

    def __call__(self, v: "ir.Value") -> str:
        name = self._names.get(v)
        if name is None:
            name = self._unique(self._base(v))
            self._names[v] = name
        return name

    def temp(self, stem: str = "i") -> str:
        """A fresh temporary (loop counters of copies, prange counters): `_i0`, `_i1`..."""
        self._temps += 1
        return self._unique(f"_{stem}{self._temps - 1}")

    def fresh(self, stem: str) -> str:
        """`stem`, or `stem_1`... if taken."""
        return self._unique(stem)

    def _base(self, v: "ir.Value") -> str:
        raw = v.get_name(self._state).lstrip("%").replace("#", "_")
        raw = re.sub(r"\W", "_", raw)
        if raw[:1].isdigit():
            raw = f"v{raw}"
        if keyword.iskeyword(raw) or raw in _RESERVED:
            raw = f"{raw}_"
        return raw

    def _unique(self, name: str) -> str:
        out, n = name, 0
        while out in self._used:
            n += 1
            out = f"{name}_{n}"
        self._used.add(out)
        return out


def py_ident(text: str) -> str:
    out = re.sub(r"\W", "_", text)
    return f"f_{out}" if out[:1].isdigit() or keyword.iskeyword(out) else out


# --------------------------------------------------------------------------- index expressions

_INT = re.compile(r"-?\d+")


def is_int(e: str) -> bool:
    return _INT.fullmatch(e) is not None


def atom(e: str) -> str:
    """`e` parenthesised unless it already binds tighter than any operator: a name, a literal,
    a call, a subscript (generated expressions always put spaces around binary operators)."""
    if is_int(e) and not e.startswith("-"):
        return e
    depth = 0
    for ch in e:
        depth += ch in "(["
        depth -= ch in ")]"
        if depth == 0 and ch == " ":
            return f"({e})"
    return f"({e})" if e.startswith("-") else e


def expr_add(a: str, b: str) -> str:
    if is_int(a) and is_int(b):
        return str(int(a) + int(b))
    if a == "0":
        return b
    if b == "0":
        return a
    if is_int(b) and int(b) < 0:
        return f"{a} - {-int(b)}"
    return f"{a} + {b}"


def expr_mul(a: str, b: str) -> str:
    if is_int(a) and is_int(b):
        return str(int(a) * int(b))
    if a == "0" or b == "0":
        return "0"
    if a == "1":
        return b
    if b == "1":
        return a
    return f"{atom(a)} * {atom(b)}"


def floordiv(a: str, b: str) -> str:
    if is_int(a) and is_int(b):
        return str(int(a) // int(b))
    return a if b == "1" else f"{atom(a)} // {atom(b)}"


def mod(a: str, b: str) -> str:
    if is_int(a) and is_int(b):
        return str(int(a) % int(b))
    return "0" if b == "1" else f"{atom(a)} % {atom(b)}"


def small_div(x: str, d: int, most: int) -> str | None:
    """`x // d` for 0 <= x <= most written as comparisons where the quotient is at most 3, else
    as `(x * m) >> s` (checked over the range); None where no m below 2**16 serves or the range
    is too long to check. The comparisons read x's low 32 bits (x itself, in that range), which
    LLVM compares as 32-bit numbers: one ISETP each instead of a 64-bit pair."""
    if d == 1:
        return x
    if most // d <= 3:       # a few comparisons (no 64-bit multiply in the PTX)
        return ("(" + " + ".join(f"int(({x} & 0xffffffff) >= {d * t})" for t in range(1, most // d + 1)) + ")"
                if most >= d else "0")
    if most > 1 << 16:
        return None
    for sh in range(1, 24):
        m = -(-(1 << sh) // d)
        if m >= 1 << 16:
            return None
        if all((v * m) >> sh == v // d for v in range(most + 1)):
            return f"(({x} * {m}) >> {sh})"
    return None
