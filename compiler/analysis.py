"""Read the graph-stage linalg IR into plain data the planner can reason about.

Every payload op of a chain's func gets a `fusec.id` attribute (its position), so plans and
transform scripts can name ops without holding IR handles. Loop structure is read from a
generalized copy of the module: every linalg op there is a linalg.generic with explicit
indexing maps, so matmul, conv and fill need no special cases.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import CompilerInternalError
from .mlir import PassManager, ir

ID_ATTR = "fusec.id"
VIEW_OPS = ("tensor.expand_shape", "tensor.collapse_shape", "tensor.reshape")
IGNORED = ("tensor.empty", "arith.constant", "func.return")
CONTRACTIONS = ("linalg.matmul", "linalg.batch_matmul", "linalg.conv_2d_nchw_fchw", "linalg.batch_matmul_transpose_b",
                "linalg.matmul_transpose_b", "linalg.batch_reduce_matmul", "linalg.contract")
TRANSCENDENTAL = ("math.exp", "math.log", "math.tanh", "math.erf", "math.sqrt", "math.rsqrt", "math.sin",
                  "math.cos", "math.powf", "math.exp2", "math.log2", "math.log1p", "math.expm1")


@dataclass(frozen=True)
class OpInfo:
    id: int
    name: str                                   # the IR op name: linalg.generic, linalg.matmul, tensor.pad...
    kind: str                                   # elementwise | reduction | contraction | fill | pad | view
    loops: tuple[int, ...]                      # static loop ranges (empty for pad/view)
    iterators: tuple[str, ...]                  # 'parallel' | 'reduction' per loop
    producers: tuple[int | None, ...]           # per operand (ins, then outs): producing op id, or None
    operand_loops: tuple[tuple[frozenset, ...], ...]   # per operand, per tensor dim: loops indexing it
    result_loops: tuple[frozenset, ...]         # per dim of the (first) result: loops indexing it
    users: tuple[int, ...]                      # op ids reading the result; -1 when returned
    result_shape: tuple[int, ...]
    elem_bytes: int
    body_ops: tuple[str, ...]                   # payload ops of a generic's body (for costs and notes)
    loc: str

    @property
    def parallel_loops(self) -> tuple[int, ...]:
        return tuple(i for i, t in enumerate(self.iterators) if t == "parallel")

    @property
    def is_compute(self) -> bool:
        return self.kind in ("elementwise", "reduction", "contraction", "pad")

    @property
    def label(self) -> str:
        if self.kind == "contraction":
            return "contract" if self.name == "linalg.generic" else self.name.split(".", 1)[1]
        if self.name == "linalg.generic" or self.kind in ("elementwise", "reduction"):
            core = [b.split(".", 1)[1] for b in self.body_ops if b.split(".")[0] in ("arith", "math")
                    and not b.endswith("constant")]
            head = "reduce" if self.kind == "reduction" else "map"
            shown = ",".join(dict.fromkeys(core))
            if not shown:
                return "copy" if head == "map" else "reduce"
            return f"{head}({shown[:40]}{'…' if len(shown) > 40 else ''})"
        return self.name.split(".", 1)[1]


@dataclass(frozen=True)
class ChainInfo:
    func: str
    ops: tuple[OpInfo, ...]

    def op(self, i: int) -> OpInfo:
        return self.ops[i]


def payload_ops(func_op) -> list:
    """The ops of a func body that a plan talks about, in program order."""
    out = []
    for op in func_op.regions[0].blocks[0].operations:
        name = op.operation.name
        if name in IGNORED:
            continue
        if name.startswith("linalg.") or name == "tensor.pad" or name in VIEW_OPS:
            out.append(op.operation)
            continue
        raise CompilerInternalError("plan", f"the planner has no rule for '{name}' at {op.location}")
    return out


def tag_ops(module: ir.Module) -> None:
    """Give every payload op its `fusec.id` (position in its func)."""
    i64 = ir.IntegerType.get_signless(64, module.context)
    for f in module.body.operations:
        for i, op in enumerate(payload_ops(f)):
            op.attributes[ID_ATTR] = ir.IntegerAttr.get(i64, i)


def _dims(expr) -> frozenset:
    return frozenset(int(d) for d in re.findall(r"d(\d+)", str(expr)))


def _elem_bytes(t) -> int:
    m = re.search(r"x?([fi])(\d+)>", str(t))
    return max(1, int(m.group(2)) // 8) if m else 4


def _shape(t) -> tuple[int, ...]:
    try:
        return tuple(ir.ShapedType(t).shape)
    except (ValueError, TypeError):
        return ()


def analyze(module: ir.Module) -> dict[str, ChainInfo]:
    """ChainInfo per func of a tagged graph-stage module (the module itself is not changed)."""
    with module.context:
        generic = ir.Module.parse(str(module))
        PassManager.parse("builtin.module(func.func(linalg-generalize-named-ops))").run(generic.operation)
    out = {}
    for f_orig, f_gen in zip(module.body.operations, generic.body.operations):
        name = ir.StringAttr(f_orig.attributes["sym_name"]).value
        orig, gen = payload_ops(f_orig), payload_ops(f_gen)
        out[name] = ChainInfo(name, tuple(_info(i, o, g, orig) for i, (o, g) in enumerate(zip(orig, gen))))
    return out


def _info(i: int, orig, gen, all_ops) -> OpInfo:
    index = {id_: k for k, id_ in enumerate(map(_key, all_ops))}
    producers = tuple(_producer(v, index) for v in orig.operands)
    users = []
    for r in orig.results:
        for use in r.uses:
            owner = use.owner
            users.append(index.get(_key(owner), -1))
    name = orig.name
    shape = _shape(orig.results[0].type) if len(orig.results) else ()
    eb = _elem_bytes(orig.results[0].type) if len(orig.results) else 4
    if name == "tensor.pad":
        # a pad is its own parallel loop nest over its result; source dim t moves with loop t
        dims = tuple(frozenset({t}) for t in range(len(shape)))
        return OpInfo(i, name, "pad", shape, ("parallel",) * len(shape), producers, (dims,), dims,
                      tuple(sorted(set(users))), shape, eb, (), str(orig.location))
    if name in VIEW_OPS:
        return OpInfo(i, name, "view", (), (), producers, (), (), tuple(sorted(set(users))), shape, eb, (),
                      str(orig.location))
    maps = [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(gen.attributes["indexing_maps"])]
    iters = tuple("reduction" if "reduction" in str(a) else "parallel" for a in ir.ArrayAttr(gen.attributes["iterator_types"]))
    operand_loops = tuple(tuple(_dims(e) for e in m.results) for m in maps)
    loops = [0] * len(iters)
    for v, m in zip(gen.operands, maps):
        for e, size in zip(m.results, _shape(v.type)):
            if re.fullmatch(r"d\d+", str(e)):
                loops[int(str(e)[1:])] = size
    body = tuple(op.name for op in gen.regions[0].blocks[0].operations)
    if name == "linalg.fill":
        kind = "fill"
    elif name in CONTRACTIONS or ("reduction" in iters and _is_contraction(gen, maps, iters)):
        kind = "contraction"
    elif "reduction" in iters:
        kind = "reduction"
    else:
        kind = "elementwise"
    return OpInfo(i, name, kind, tuple(loops), iters, producers, operand_loops, operand_loops[-1],
                  tuple(sorted(set(users))), shape, eb, body, str(orig.location))


def _is_contraction(gen, maps, iters) -> bool:
    """A generic that multiplies two inputs which both vary along a reduction loop (batched matmul forms)."""
    red = {i for i, t in enumerate(iters) if t == "reduction"}
    n_in = len(maps) - len(gen.results)
    par = {i for i, t in enumerate(iters) if t == "parallel"}
    varying = [m for m in maps[:n_in] if any(_dims(e) & red for e in m.results)]
    body = {op.name for op in gen.regions[0].blocks[0].operations}
    # sum(a * b) over a shared iteration space is a reduction; a contraction has an operand that
    # does not vary along some output loop (A[i,k] ignores j), which is what makes fusing into it costly
    missing = any(par - set().union(*[_dims(e) for e in m.results]) for m in varying)
    return len(varying) >= 2 and missing and bool(body & {"arith.mulf", "arith.muli"})


def _key(op) -> int:
    return hash(op.operation if hasattr(op, "operation") else op)


def _producer(value, index) -> int | None:
    owner = value.owner
    if isinstance(owner, ir.Block):
        return None
    return index.get(_key(owner))
