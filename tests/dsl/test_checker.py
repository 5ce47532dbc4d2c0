"""The checker: typed results for good programs, exact line:col and message for bad ones."""
import textwrap

import pytest

import fusec
from fusec.dsl.diagnostics import FdslError


def typed(src: str):
    return fusec.check(textwrap.dedent(src))


def errors(src: str) -> list[tuple[int, int, str]]:
    with pytest.raises(FdslError) as info:
        typed(src)
    return [(d.span.line, d.span.col, d.message) for d in info.value.diagnostics]


# (program, line, col, exact message of the first error)
BAD = [
    # names
    ("""\
     chain f(x: f32[4]) -> f32[4] {
         return x + y
     }""", 2, 16, "unknown name 'y'"),
    ("""\
     chain f(xs: f32[4]) -> f32[4] {
         return exp(xz)
     }""", 2, 16, "unknown name 'xz'; did you mean 'xs'?"),
    ("""\
     chain f(x: f32[4]) -> f32[4] {
         return expp(x)
     }""", 2, 12, "unknown operator 'expp'; did you mean 'exp'?"),
    ("""\
     chain f(x: f32[4]) -> f32[4] {
         y = x + 1.0
         y = x * 2.0
         return y
     }""", 3, 5, "'y' is already defined; names are single-assignment"),
    ("""\
     chain f(x: f32[4]) -> f32[4] {
         x = x + 1.0
         return x
     }""", 2, 5, "'x' is already defined; names are single-assignment"),
    ("""\
     chain f(x: f32[M]) -> f32[M] {
         return x * M
     }""", 2, 16, "'M' is a dimension symbol, not a value"),
    ("""\
     chain f(x: f32[4]) -> f32[4] {
         return exp
     }""", 2, 12, "unknown name 'exp'; 'exp' is an operator: call it as exp(...)"),
    # dtypes
    ("""\
     chain f(x: f32[4], y: f16[4]) -> f32[4] {
         return x + y
     }""", 2, 16, "cannot add f32[4] and f16[4]: dtypes differ (f32 vs f16); convert one with cast(x, f32)"),
    ("""\
     chain f(x: i32[4]) -> i32[4] {
         return x * 0.5
     }""", 2, 16, "the float literal 0.5 cannot combine with i32 values; write an integer or cast the tensor "
                  "with cast(x, f32)"),
    ("""\
     chain f(i: i32[4]) -> i32[4] {
         return exp(i)
     }""", 2, 16, "exp expects a floating-point tensor, got i32[4]; convert with cast(x, f32)"),
    ("""\
     chain f(x: f32[4]) -> f32[4] {
         return where(x, x, 0.0)
     }""", 2, 18, "where expects a bool condition, got f32[4]; compare first (x > 0)"),
    ("""\
     chain f(x: f32[4]) -> f32[4] {
         return cast(x, "f16")
     }""", 2, 20, "cast's 'dtype' must be a dtype (f16, bf16, f32, f64, i32, i64, bool)"),
    # broadcasting and symbols
    ("""\
     chain mlp(x: f32[M, 768], w1: f32[768, 3072], b1: f32[3072], b2: f32[768]) -> f32[M, 3072] {
         h = x @ w1 + b2
         return h
     }""", 2, 18, "cannot add f32[M, 3072] and f32[768]: shapes do not broadcast (3072 vs 768)"),
    ("""\
     chain f(x: f32[M, M], y: f32[3, 4]) -> f32[3, 4] {
         return x + y
     }""", 2, 16, "cannot add f32[M, M] and f32[3, 4]: shapes do not broadcast (M = 3 vs 4)"),
    ("""\
     chain f(x: f32[M]) -> f32[K] {
         return x
     }""", 1, 27, "symbol 'K' in the return type is not a dimension of any parameter"),
    # linear algebra
    ("""\
     chain f(a: f32[4, 8], b: f32[4, 8]) -> f32[4, 8] {
         return a @ b
     }""", 2, 16, "cannot multiply f32[4, 8] and f32[4, 8]: inner dimensions differ (8 vs 4)"),
    ("""\
     chain f(a: f32[8], b: f32[8, 4]) -> f32[4] {
         return a @ b
     }""", 2, 12, "matmul expects operands of rank 2 or more, got f32[8]"),
    ("""\
     chain f(a: f32[2, 4, 8], b: f32[3, 8, 5]) -> f32[2, 4, 5] {
         return a @ b
     }""", 2, 16, "cannot multiply f32[2, 4, 8] and f32[3, 8, 5]: batch dimensions do not broadcast (2 vs 3)"),
    ("""\
     chain f(a: f32[4, 4]) -> f32[4, 4] {
         return a @ 2.0
     }""", 2, 16, "matmul expects a tensor here, got the scalar 2.0"),
    # reductions and axes
    ("""\
     chain f(x: f32[4, 4]) -> f32[4] {
         return sum(x, axis=2)
     }""", 2, 19, "axis 2 is out of range for a tensor of rank 2"),
    ("""\
     chain f(x: f32[4, 4]) -> f32 {
         return sum(x, axis=[0, -2])
     }""", 2, 19, "axis [0, -2] names the same axis twice"),
    ("""\
     chain f(x: f32[4, 4]) -> f32[4, 4] {
         return softmax(x, axis=-3)
     }""", 2, 23, "axis -3 is out of range for a tensor of rank 2"),
    ("""\
     chain f(x: f32[4, 4]) -> f32[4] {
         return sum(x, axis=1.5)
     }""", 2, 24, "sum's 'axis' must be an integer or a list of integers"),
    # convolution
    ("""\
     chain f(x: f32[1, 3, 8, 8], w: f32[4, 2, 3, 3]) -> f32[1, 4, 6, 6] {
         return conv2d(x, w)
     }""", 2, 22, "conv2d: the input has 3 channels but the weights f32[4, 2, 3, 3] expect 2"),
    ("""\
     chain f(x: f32[1, 1, 2, 2], w: f32[1, 1, 3, 3]) -> f32[1, 1, 1, 1] {
         return conv2d(x, w)
     }""", 2, 22, "conv2d: the height 2 (padding 0) is smaller than the dilated kernel 3"),
    ("""\
     chain f(x: f32[1, 1, 8, 8], w: f32[1, 1, 3, 3]) -> f32[1, 1, 6, 6] {
         return conv2d(x, w, stride=0)
     }""", 2, 25, "conv2d: stride must be positive, got [0, 0]"),
    ("""\
     chain f(x: f32[1, 1, 8, 8], w: f32[1, 1, 3, 3]) -> f32[1, 1, 6, 6] {
         return conv2d(x, w, stride=[1, 2, 3])
     }""", 2, 32, "conv2d's 'stride' must be an integer or a pair [a, b], got 3 values"),
    ("""\
     chain f(x: f32[1, 1, 8, 8], w: f32[1, 1, 3, 3]) -> f32[1, 1, 6, 6] {
         return conv2d(x, w, padding=-1)
     }""", 2, 25, "conv2d: padding must be non-negative, got [-1, -1]"),
    ("""\
     chain f(x: f32[1, 2, 8, 8], w: f32[4, 2, 3, 3], b: f32[2]) -> f32[1, 4, 6, 6] {
         return conv2d(x, w, bias=b)
     }""", 2, 30, "conv2d: bias must be f32[4] (one per output channel), got f32[2]"),
    ("""\
     chain f(x: f32[N, 8, H, 8], w: f32[4, 8, 3, 3]) -> f32[N, 4, 6, 6] {
         return conv2d(x, w)
     }""", 2, 19, "conv2d needs concrete spatial sizes and kernel sizes, got input f32[N, 8, H, 8] and "
                  "weights f32[4, 8, 3, 3]"),
    ("""\
     chain f(x: f32[1, 6, 8, 8], w: f32[6, 2, 3, 3]) -> f32[1, 6, 6, 6] {
         return conv2d(x, w, groups=4)
     }""", 2, 25, "conv2d: groups=4 does not divide the input count 6 (of f32[1, 6, 8, 8])"),
    ("""\
     chain f(x: f32[1, 8, 8, 8], w: f32[6, 2, 3, 3]) -> f32[1, 6, 6, 6] {
         return conv2d(x, w, groups=4)
     }""", 2, 25, "conv2d: groups=4 does not divide the weights' filter count 6 (of f32[6, 2, 3, 3])"),
    ("""\
     chain f(x: f32[1, 8, 8, 8], w: f32[8, 1, 3, 3]) -> f32[1, 8, 6, 6] {
         return conv2d(x, w, groups=4)
     }""", 2, 22, "conv2d: the input has 8 channels in 4 groups, 2 per group, but the weights f32[8, 1, 3, 3] "
                  "expect 1 per group (weights are [F, C / groups, KH, KW])"),
    ("""\
     chain f(x: f32[1, 8, 8, 8], w: f32[8, 1, 3, 3]) -> f32[1, 8, 6, 6] {
         return conv2d(x, w, groups=0)
     }""", 2, 25, "conv2d: groups must be positive, got 0"),
    ("""\
     chain f(x: f32[1, C, 8, 8], w: f32[8, 1, 3, 3]) -> f32[1, 8, 6, 6] {
         return conv2d(x, w, groups=8)
     }""", 2, 19, "conv2d with groups=8 needs a concrete input count, got the symbol C in f32[1, C, 8, 8]"),
    # normalisations
    ("""\
     chain f(x: f32[T, 256], g: f32[256]) -> f32[T, 256] {
         return layernorm(x, g)
     }""", 2, 12, "layernorm needs argument 'beta' (layernorm(x, gamma, beta, axis=-1, eps=1e-05))"),
    ("""\
     chain f(x: f32[T, 256], g: f32[128], b: f32[256]) -> f32[T, 256] {
         return layernorm(x, g, b)
     }""", 2, 25, "layernorm: f32[128] does not fit the input f32[T, 256]: shapes do not broadcast (256 vs 128)"),
    ("""\
     chain f(x: f32[1, 32, 4, 4], m: f32[16], v: f32[32], g: f32[32], b: f32[32]) -> f32[1, 32, 4, 4] {
         return batchnorm(x, m, v, g, b)
     }""", 2, 25, "batchnorm: f32[16] must be a vector of the 32 channels of f32[1, 32, 4, 4]"),
    ("""\
     chain f(x: f32[4, 4]) -> f32[4, 4] {
         return softmax(x, axes=1)
     }""", 2, 23, "softmax has no argument 'axes'; did you mean 'axis'?"),
    ("""\
     chain f(x: f32[4], y: f32[4]) -> f32[4] {
         return exp(x, y)
     }""", 2, 19, "exp takes at most 1 argument (exp(x)), got 2"),
    ("""\
     chain f(x: f32[4]) -> f32[4] {
         return gelu(x, approximate="fast")
     }""", 2, 32, "gelu's 'approximate' must be \"tanh\" or \"none\""),
    # shape ops
    ("""\
     chain f(x: f32[4, 4]) -> f32[3, 4] {
         return reshape(x, [3, -1])
     }""", 2, 23, "reshape: f32[4, 4] has 16 elements, not divisible by 3"),
    ("""\
     chain f(x: f32[4, 4]) -> f32[16] {
         return reshape(x, [-1, -1])
     }""", 2, 23, "reshape: only one dimension may be -1"),
    ("""\
     chain f(x: f32[M, 4]) -> f32[M, 4] {
         return reshape(x, [2, -1])
     }""", 2, 23, "reshape: the -1 dimension would be 2*M; a dimension must be a number or a single symbol"),
    ("""\
     chain f(x: f32[4, 4]) -> f32[4, 4] {
         return permute(x, [0, 0])
     }""", 2, 23, "permute: [0, 0] is not a permutation of the axes 0..1"),
    ("""\
     chain f(x: f32[4]) -> f32[4] {
         return transpose(x)
     }""", 2, 22, "transpose swaps the last two axes and needs rank 2 or more, got f32[4]"),
    ("""\
     chain f(x: f32[3]) -> f32[4, 2] {
         return broadcast_to(x, [4, 2])
     }""", 2, 28, "broadcast_to: cannot broadcast f32[3] to [4, 2] (3 vs 2)"),
    # chain structure and return types
    ("""\
     chain f(x: f32[4]) -> f32[4, 4] {
         return x
     }""", 2, 12, "returns f32[4] but the chain declares f32[4, 4]"),
    ("""\
     chain f(x: f32[4]) -> f64[4] {
         return x
     }""", 2, 12, "returns f32[4] but the chain declares f64[4]"),
    ("""\
     chain f(x: f32[4]) -> (f32[4], f32[4]) {
         return x
     }""", 2, 5, "chain 'f' declares 2 results but returns 1"),
    ("""\
     chain f(x: f32[4]) -> f32[4] {
         y = x
     }""", 1, 1, "chain 'f' has no return statement"),
    ("""\
     chain f(x: f32[4]) -> f32[4] {
         return x
         y = x
     }""", 3, 5, "statement after return; `return` must be the last statement of a chain"),
    ("""\
     chain f(x: f32[4]) -> f32[4] {
         return x
     }
     chain f(x: f32[4]) -> f32[4] {
         return x
     }""", 4, 7, "chain 'f' is defined twice"),
    ("""\
     const c = 1.0
     const c = 2.0
     chain f(x: f32[4]) -> f32[4] {
         return x * c
     }""", 2, 7, "'c' is already defined"),
    ("""\
     chain f(x: f32[0]) -> f32[0] {
         return x
     }""", 1, 16, "a dimension must be positive, got 0"),
]


@pytest.mark.parametrize("src,line,col,message", BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_bad_program_reports_exact_position(src, line, col, message):
    errs = errors(src)
    assert errs[0] == (line, col, message)


def test_the_table_is_large_enough():
    assert len(BAD) >= 30


def test_fdsl_md_error_example_has_note_and_caret():
    src = textwrap.dedent("""\
        chain mlp(x: f32[M, 768], w1: f32[768, 3072], b1: f32[3072], b2: f32[768]) -> f32[M, 3072] {
            h = x @ w1 + b2
            return h
        }""")
    with pytest.raises(FdslError) as info:
        fusec.check(src)
    d = info.value.diagnostics[0]
    assert [(n.span.line, n.span.col, n.message) for n in d.notes] == [(1, 62, "b2 declared here as f32[768]")]
    text = info.value.render().splitlines()
    assert text[0] == "<string>:2:18: error: cannot add f32[M, 3072] and f32[768]: shapes do not broadcast (3072 vs 768)"
    assert text[1] == "    h = x @ w1 + b2"
    assert text[2] == "                 ^~"
    assert text[3].startswith("<string>:1:62: note: b2 declared here as f32[768]")


def test_independent_errors_are_all_reported():
    errs = errors("""\
        chain f(x: f32[4], y: f16[4]) -> f32[4] {
            a = x + y
            b = a * 2.0
            c = exp(q)
            d = sum(x, axis=3)
            return x
        }
        chain g(x: f32[4]) -> f32[4] {
            return log(z)
        }""")
    # b uses the poisoned a: no second report for it
    assert [(l, c) for l, c, _ in errs] == [(2, 13), (4, 13), (5, 16), (9, 16)]


# ---- typed results ---------------------------------------------------------------------------

def test_types_of_mlp():
    c = typed("""\
        chain mlp(x: f32[M, 768], w1: f32[768, 3072], b1: f32[3072],
                  w2: f32[3072, 768], b2: f32[768]) -> f32[M, 768] {
            h = gelu(x @ w1 + b1)
            return h @ w2 + b2 + x
        }""").chain("mlp")
    assert [str(n.type) for n in c.param_nodes] == ["f32[M, 768]", "f32[768, 3072]", "f32[3072]",
                                                    "f32[3072, 768]", "f32[768]"]
    assert [n.op for n in c.nodes if n.op != "param"] == ["matmul", "add", "gelu", "matmul", "add", "add"]
    assert str(c.nodes[c.outputs[0]].type) == "f32[M, 768]"
    assert c.symbols == ("M",)
    assert c.nodes[7].name == "h"


def test_literals_adopt_the_tensor_dtype():
    c = typed("""\
        chain f(x: f16[4], i: i64[4]) -> (f16[4], i64[4], bool[4]) {
            return x * 0.5 + 1, i * 2, x > 0
        }""").chain("f")
    consts = [n for n in c.nodes if n.op == "constant"]
    assert [(str(n.type), n.attr("value")) for n in consts] == [("f16", 0.5), ("f16", 1.0), ("i64", 2), ("f16", 0.0)]


def test_constants_fold_and_scope():
    c = typed("""\
        const two = 2
        const half = 1 / two
        chain f(x: f32[4]) -> f32[4] {
            const k = -half * 4
            return x * k
        }""").chain("f")
    (k,) = [n for n in c.nodes if n.op == "constant"]
    assert k.attr("value") == -2.0


def test_symbol_unification_across_parameters():
    c = typed("""\
        chain f(x: f32[M, K], w: f32[768, N], y: f32[P]) -> f32[M, N] {
            return x @ w + y
        }""").chain("f")
    assert [str(n.type) for n in c.param_nodes] == ["f32[M, 768]", "f32[768, N]", "f32[N]"]
    assert c.symbols == ("M", "N")


def test_broadcasting_corners():
    c = typed("""\
        chain f(a: f32[4, 1, 3], b: f32[5, 1], s: f32, m: f32[M, 1], n: f32[1, N]) -> (f32[4, 5, 3], f32[M, N], f32[4, 1, 3]) {
            return a + b, m * n, a - s
        }""").chain("f")
    assert [str(t) for t in c.output_types] == ["f32[4, 5, 3]", "f32[M, N]", "f32[4, 1, 3]"]


@pytest.mark.parametrize("expr,expect", [
    ("sum(x)", "f32"),
    ("sum(x, axis=-1)", "f32[2, 3]"),
    ("mean(x, axis=[0, 2], keepdims=true)", "f32[1, 3, 1]"),
    ("max(x, axis=1, keepdims=false)", "f32[2, 4]"),
    ("transpose(x)", "f32[2, 4, 3]"),
    ("permute(x, [2, 0, -2])", "f32[4, 2, 3]"),
    ("reshape(x, [-1, 4])", "f32[6, 4]"),
    ("reshape(x, [2, 12])", "f32[2, 12]"),
    ("broadcast_to(x, [5, 2, 3, 4])", "f32[5, 2, 3, 4]"),
    ("softmax(x, axis=0)", "f32[2, 3, 4]"),
    ("x > 0.0", "bool[2, 3, 4]"),
    ("cast(x, i32)", "i32[2, 3, 4]"),
    ("x @ permute(x, [0, 2, 1])", "f32[2, 3, 3]"),
])
def test_shape_rules(expr, expect):
    c = typed(f"""\
        chain f(x: f32[2, 3, 4]) -> f32 {{
            y = {expr}
            return 0.0
        }}""").chain("f")
    (y,) = [n for n in c.nodes if n.name == "y"]
    assert str(y.type) == expect


def test_batched_matmul_broadcasts_batch_dims_and_conv_shape():
    c = typed("""\
        chain f(a: f32[2, 1, 4, 8], b: f32[3, 8, 5], x: f32[N, 3, 15, 17], w: f32[6, 3, 3, 5])
                -> (f32[2, 3, 4, 5], f32[N, 6, 8, 5]) {
            return a @ b, conv2d(x, w, stride=[2, 3], padding=[1, 2], dilation=[1, 2])
        }""").chain("f")
    assert [str(t) for t in c.output_types] == ["f32[2, 3, 4, 5]", "f32[N, 6, 8, 5]"]


def test_reshape_with_symbols():
    c = typed("""\
        chain f(x: f32[S, 128]) -> f32[S, 4, 32] {
            return reshape(x, [S, 4, -1])
        }""").chain("f")
    assert str(c.output_types[0]) == "f32[S, 4, 32]"


def test_typed_format_is_deterministic():
    src = """\
        chain f(x: f32[M, 4]) -> f32[M] {
            y = exp(x) * 2.0
            return sum(y, axis=-1)
        }"""
    text = typed(src).format()
    assert text == typed(src).format()
    assert "%y = mul %1, %2 : f32[M, 4]  # 2:9" in text
    assert "sum %y {axis=[1], keepdims=false} : f32[M]" in text


# ---- FDSL.md itself --------------------------------------------------------------------------

# docs/FDSL.md is the language reference and part of the repository: these tests never skip
# (fdsl_doc.py says what counts as a program and as a documented error).

import re

from fdsl_doc import doc_programs as _doc_programs
from fdsl_doc import doc_text as _doc_text
from fusec.dsl import ast as A
from fusec.dsl.ops import OPS, REQUIRED
from fusec.dsl.parser import parse_text


def test_every_program_in_fdsl_md_checks():
    progs = [src for src, err, _ in _doc_programs() if err is None]
    assert len(progs) >= 2
    for src in progs:
        mod = fusec.check(src)
        assert mod.chains
        for c in mod.chains:
            assert c.output_types, c.name
    mlp = fusec.check(progs[0]).chain("mlp")
    assert str(mlp.output_types[0]) == "f32[M, 768]"


_DOC_ERRORS = [(src, err, path) for src, err, path in _doc_programs() if err is not None]


def test_fdsl_md_documents_errors_with_notes():
    assert len(_DOC_ERRORS) >= 2
    # the contract's example (the Errors section's first, bad.fdsl): a shape error, with a note at the declaration
    (contract,) = [err for _, err, path in _DOC_ERRORS if path == "bad.fdsl"]
    first = contract.splitlines()
    assert "shapes do not broadcast" in first[0] and "^" in first[2]
    assert ": note: " in contract


@pytest.mark.parametrize("src,expected,path", _DOC_ERRORS, ids=[p for _, _, p in _DOC_ERRORS])
def test_every_error_in_fdsl_md_is_what_fusec_prints(src, expected, path):
    with pytest.raises(FdslError) as info:
        fusec.check(parse_text(src, path))
    assert info.value.render() == expected


def test_fdsl_md_claims_about_types_hold():
    mods = {c.name: c for src, err, _ in _doc_programs() if err is None for c in fusec.check(src).chains}
    # symbols unify: N meets 64
    assert [str(n.type) for n in mods["unified"].param_nodes] == ["f32[M, 64]", "f32[64]"]
    # weak literals adopt their context's dtype; where with two literal branches is f32
    assert [str(t) for t in mods["literals"].output_types] == ["f16[N]", "i32[N]", "f32[N]"]
    assert {n.type.dtype.name for n in mods["literals"].nodes if n.op == "constant"} == {"f16", "i32", "f32"}
    assert str(mods["heads"].output_types[0]) == "f32[4, S, 32]"


# The operator tables: one row per op of dsl/ops/, `| `name(args)` | dtypes | result | semantics |`;
# slicing, which has no name to call, is the row `| `x[items]` | ... |`.

_ROW = re.compile(r"^\|\s*`(\w+)\(([^`]*)\)`\s*\|(.*)\|\s*$")
_SUBSCRIPT_ROW = re.compile(r"^\|\s*`(x\[[^`]*\])`\s*\|(.*)\|\s*$")


def _op_rows() -> list[tuple[str, str, list[str]]]:
    """(name, signature, [dtypes, result, semantics]) for every row of FDSL.md's operator tables."""
    rows = []
    for line in _doc_text().splitlines():
        m = _ROW.match(line)
        if m:
            rows.append((m.group(1), f"{m.group(1)}({m.group(2)})", [c.strip() for c in m.group(3).split("|")]))
        m = _SUBSCRIPT_ROW.match(line)
        if m:
            rows.append(("slice", m.group(1), [c.strip() for c in m.group(2).split("|")]))
    return rows


def test_fdsl_md_operator_table_lists_every_op_once():
    names = [name for name, _, _ in _op_rows()]
    assert not set(OPS) - set(names), f"ops missing from docs/FDSL.md's operator table: {sorted(set(OPS) - set(names))}"
    assert not set(names) - set(OPS), f"not ops of dsl/ops/: {sorted(set(names) - set(OPS))}"
    assert len(names) == len(set(names)), "an op has two rows"
    for name, _, cells in _op_rows():
        assert len(cells) == 3 and all(cells), f"{name}: expected dtypes, result and semantics"


def _literal(e: A.Expr):
    if isinstance(e, (A.Num, A.Str, A.Bool)):
        return e.value
    if isinstance(e, A.Unary) and isinstance(e.operand, A.Num):
        return -e.operand.value
    if isinstance(e, A.Name) and e.id == "none":
        return None
    raise AssertionError(f"not a default value: {e}")


@pytest.mark.parametrize("name", sorted(OPS))
def test_fdsl_md_signature_matches_the_op_table(name):
    (sig,) = [sig for n, sig, _ in _op_rows() if n == name]
    (call,) = parse_text(f"chain t() -> f32 {{\n    return {sig}\n}}\n").chains[0].body[0].values
    op = OPS[name]
    if name == "slice":                 # written `x[items]`: a subscript of the op's tensor argument
        assert isinstance(call, A.Subscript) and [a.name for a in op.args] == [call.value.id, "items"]
        assert [a.kind for a in op.args] == ["tensor", "subscript"]
        return
    assert isinstance(call, A.Call) and call.func == name
    required = [a.name for a in op.args if a.default is REQUIRED]
    optional = [(a.name, a.default) for a in op.args if a.default is not REQUIRED]
    assert [a.id if isinstance(a, A.Name) else a for a in call.args] == required, sig
    documented = [(k.name, _literal(k.value)) for k in call.kwargs]
    assert [k for k, _ in documented] == [k for k, _ in optional], sig
    for (k, got), (_, want) in zip(documented, optional):
        assert type(got) is type(want) and got == want, f"{sig}: default of {k} is {want!r}"


_CLASSES = {"float": ("f16", "bf16", "f32", "f64")}
_CLASSES["numeric"] = _CLASSES["float"] + ("i32", "i64")
_CLASSES["any"] = _CLASSES["numeric"] + ("bool",)
_CLASSES["bool"] = ("bool",)
_PROBE_SHAPES = {"batchnorm": ["[4, 4]", "[4]", "[4]", "[4]", "[4]"], "conv2d": ["[1, 4, 6, 6]", "[4, 4, 3, 3]"]}
_PROBE_SHAPES["gather_nd"] = ["[4, 4]", "[3, 2]"]
_PROBE_STATICS = {"permute": "[1, 0]", "reshape": "[16]", "broadcast_to": "[2, 4, 4]", "cast": "f32"}
_PROBE_SHAPES.update({op: ["[1, 2, 4, 4]"] for op in ("max_pool2d", "avg_pool2d", "adaptive_avg_pool2d")})
_PROBE_STATICS.update({"max_pool2d": "2", "avg_pool2d": "2", "adaptive_avg_pool2d": "1"})
_PROBE_STATICS["take_along_axis"] = "axis=1"
# Ops not probed as `y = name(tensors, statics)`: the statement, and the op of the node it makes.
_PROBE_STATEMENTS = {"slice": ("y = x[1:3, ::-1]", "slice"), "concat": ("y = concat([xs, xs], axis=1)", "concat"),
                     "split": ("y, z = split(x, [1, 3], axis=-1)", "slice")}
_PROBE_STATEMENTS["index"] = ("y = index(x, [idxs])", "index")


def _tensor_args(name: str) -> list[str]:
    return [a.name for a in OPS[name].args if a.kind in ("tensor", "tensors")]


def _dtype_rule(name: str, cell: str) -> dict[str, tuple[str, ...] | None]:
    """A dtypes cell, `CLASS` or `` `arg`, `arg` CLASS-or-dtypes; ... `` (dtypes: `i32` or
    `i32 or i64`), as {arg: allowed dtypes}; None for the arguments that take the probed dtype."""
    tensors = _tensor_args(name)
    if cell in _CLASSES:
        return {a: None for a in tensors}
    rule = {}
    for part in cell.split(";"):
        args = re.findall(r"`(\w+)`", part)
        what = [w.strip() for w in re.sub(r"`\w+`,?", "", part).split(" or ")]
        assert args and (what[0] in _CLASSES and len(what) == 1 or all(w in _CLASSES["any"] for w in what)), \
            f"{name}: unknown dtype rule {part!r}"
        for a in args:
            rule[a] = None if what[0] in _CLASSES else tuple(what)
    assert sorted(rule) == sorted(tensors), f"{name}: the dtypes cell must name every tensor argument"
    return rule


def _varying_class(cell: str) -> tuple[str, ...]:
    word = cell if cell in _CLASSES else next(w for w in cell.replace(";", " ").split() if w in _CLASSES)
    return _CLASSES[word]


# the creation ops take no tensor of a probed dtype (full_like's value must suit it): their dtype
# rules are checked in tests/dsl/test_new_ops.py
@pytest.mark.parametrize("name", sorted(n for n in OPS if OPS[n].category != "creation"))
def test_fdsl_md_dtype_and_result_rules_hold(name):
    """Probe the checker with every dtype: exactly the documented ones are accepted, with the
    documented result dtype."""
    (cells,) = [c for n, _, c in _op_rows() if n == name]
    dtypes_cell, result_cell = cells[0], cells[1]
    rule = _dtype_rule(name, dtypes_cell)
    allowed = _varying_class(dtypes_cell)
    tensors = _tensor_args(name)
    shapes = _PROBE_SHAPES.get(name, ["[4, 4]"] * len(tensors))
    args = ", ".join(tensors + ([_PROBE_STATICS[name]] if name in _PROBE_STATICS else []))
    statement, node_op = _PROBE_STATEMENTS.get(name, (f"y = {name}({args})", name))

    def probe(dtypes: dict[str, str]) -> str:
        params = ", ".join(f"{a}: {dtypes[a]}{s}" for a, s in zip(tensors, shapes))
        return f"chain probe({params}) -> f32 {{\n    {statement}\n    return sum(cast(y, f32))\n}}\n"

    def refused(src: str) -> None:
        with pytest.raises(FdslError) as info:
            fusec.check(src)
        assert info.value.diagnostics[0].span.line == 2, info.value.render()

    first_word = result_cell.split(";")[0].split()[0]
    for dt in _CLASSES["any"]:
        src = probe({a: (rule[a] or (dt,))[0] for a in tensors})
        if dt not in allowed:
            refused(src)
            continue
        node = next(n for n in fusec.check(src).chain("probe").nodes if n.op == node_op)
        if result_cell.startswith("`dtype`"):
            want = _PROBE_STATICS[name]
        elif first_word in _CLASSES["any"]:
            want = first_word
        else:
            assert result_cell.startswith("same"), f"{name}: unknown result rule {result_cell!r}"
            want = dt
        assert node.type.dtype.name == want, f"{name} on {dt}: {node.type}"
    # an argument of fixed dtypes takes exactly those (the others at their first allowed dtype)
    for a in (a for a in tensors if rule[a] is not None):
        for dt in _CLASSES["any"]:
            src = probe({b: dt if b == a else (rule[b] or (allowed[0],))[0] for b in tensors})
            if dt in rule[a]:
                fusec.check(src)
            else:
                refused(src)
