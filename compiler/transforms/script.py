"""Transform scripts as data, and the helpers every IR-rewriting stage shares.

A script is a list of `Step`s (one transform op each) printed into one transform-dialect named
sequence (`script_text`) and applied by MLIR's transform interpreter (`apply_script`). Ops are
found by attribute: `fusec.tag` = group * 10000 + op id names one op of one kernel (a fill
shared by two kernels is cloned first, so each kernel owns its copy), `fusec.group` marks a
kernel's loop nest.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import CompilerInternalError
from ..mlir import PassManager, interpreter, ir
from ..marks import GROUP, TAG

# memref ops whose result is a view of their first operand's buffer (no data of its own)
MEMREF_VIEWS = ("memref.subview", "memref.expand_shape", "memref.collapse_shape", "memref.cast",
                "memref.reinterpret_cast", "memref.transpose")

ANY = "!transform.any_op"


@dataclass(frozen=True)
class Step:
    """One transform op: `results = op(args) attrs`, printed as MLIR text."""
    text: str


def tag_of(group: int, op: int) -> int:
    return group * 10000 + op


def i64(v: int) -> ir.IntegerAttr:
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), v)


def match_tag(name: str, tag: int) -> Step:
    return Step(f'%{name} = transform.structured.match attributes {{"{TAG}" = {tag} : i64}} in %root '
                f': ({ANY}) -> {ANY}')


def script_text(steps: list[Step]) -> str:
    body = "\n".join("    " + s.text for s in steps)
    return ("module attributes {transform.with_named_sequence} {\n"
            f"  transform.named_sequence @__transform_main(%root: {ANY} {{transform.consumed}}) {{\n"
            f"{body}\n    transform.yield\n  }}\n}}\n")


def apply_script(module: ir.Module, text: str, stage: str) -> None:
    script = ir.Module.parse(text, context=module.context)
    try:
        interpreter.apply_named_sequence(module.operation, script.body.operations[0], script)
    except Exception as e:   # the interpreter reports failures as ValueError with MLIR diagnostics
        raise CompilerInternalError(stage, f"transform script failed: {e}") from None


def run_passes(module: ir.Module, passes: tuple[str, ...], stage: str) -> None:
    for p in passes:
        try:
            PassManager.parse(f"builtin.module({p})").run(module.operation)
        except Exception as e:
            raise CompilerInternalError(stage, f"pass {p} failed: {e}") from None
