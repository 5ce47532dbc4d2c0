"""The FDSL parser: every documented program parses, precedence and layout rules hold,
spans are exact, and syntax errors are friendly FdslErrors at exact line:col."""
import re
import textwrap
from pathlib import Path

import lark
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fdsl_doc import doc_programs
from fusec.dsl import ast
from fusec.dsl.diagnostics import FdslError
from fusec.dsl.ast_format import format_ast, format_expr
from fusec.dsl.parser import parse_text

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


# ---- every program in FDSL.md (fdsl_doc.py says what counts as a program and an error) ------

DOC_PROGRAMS = doc_programs()


def _doc_id(program: tuple[str, str | None, str]) -> str:
    m = re.search(r"^\s*chain\s+(\w+)", program[0], re.M)
    return (m.group(1) if m else "program") + ("-error" if program[1] else "")


def test_fdsl_md_holds_the_contract_programs():
    assert len(DOC_PROGRAMS) >= 10
    sources = [src for src, _, _ in DOC_PROGRAMS]
    assert sources[0] == MLP  # verbatim, and first
    assert MLP_PIPED in sources
    assert sum(1 for _, err, _ in DOC_PROGRAMS if err) >= 1


@pytest.mark.parametrize("src,expected,path", DOC_PROGRAMS, ids=[_doc_id(p) for p in DOC_PROGRAMS])
def test_every_program_in_fdsl_md_parses(src, expected, path):
    """Every program parses, except a documented syntax error, which fails exactly as documented."""
    try:
        module = parse_text(src, path)
    except FdslError as e:
        assert expected is not None, f"an undocumented syntax error:\n{e.render()}"
        assert e.render() == expected
        return
    assert module.chains
    assert format_ast(module)  # the printer handles every node kind


MLP = """\
# examples/mlp.fdsl — a transformer MLP block with a residual connection
chain mlp(x: f32[M, 768], w1: f32[768, 3072], b1: f32[3072],
          w2: f32[3072, 768], b2: f32[768]) -> f32[M, 768] {
    h = gelu(x @ w1 + b1)
    return h @ w2 + b2 + x
}
"""

MLP_PIPED = """\
chain mlp_piped(x: f32[M, 768], w1: f32[768, 3072], b1: f32[3072]) -> f32[M, 3072] {
    return x |> matmul(w1) |> add(b1) |> gelu
}
"""

# The bad example of FDSL.md's "Errors" section is a type error, not a syntax error.
BAD_TYPES = """\
chain bad(x: f32[M, 768], w1: f32[768, 3072], b1: f32[3072], b2: f32[768]) -> f32[M, 3072] {
    h = x @ w1 + b2
    return h
}
"""

# Every construct FDSL.md mentions, in one file.
EVERYTHING = """\
const eps = 1e-5
const k = -1
chain ops(x: f32[M, N], y: f32[M, N], s: f32, n: i32[4], bf: bf16[M, N], h: f16[2],
          d: f64[1], l: i64[seq], c: bool[M, N], w: f32[8, 3, 3, 3], b: f32[8],
          g: f32[N], be: f32[N], im: f32[2, 3, 10, 10]) -> (f32[M, N], f32[M]) {
    const two = 2.
    u = neg(abs(exp(log(sqrt(rsqrt(tanh(sigmoid(relu(gelu(silu(erf(x))))))))))))
    v = sin(cos(floor(ceil(reciprocal(square(x)))))) + gelu(x, approximate="none")
    e = add(sub(mul(div(pow(maximum(minimum(x, y), y), y), y), y), y), y)
    f = x + y - x * y / y ** two
    cmp = where(x == y, x, where(x != y, y, where(x < y, x, where(x <= y, y,
                where(x > y, x, where(x >= y, y, x))))))
    cl = clamp(x, 0.0, 6.0) + cast(bf, f32) * cast(c, f32)
    r = sum(x, axis=1, keepdims=false) + mean(x, axis=-1) + max(x, axis=[0, 1]) + min(x) + prod(x, axis=A)
    sm = softmax(x, axis=-1) + log_softmax(x, axis=-1)
    ln = layernorm(x, g, be, axis=-1, eps=1e-5) + rmsnorm(x, g, axis=-1, eps=1e-6)
    bn = batchnorm(im, b, b, b, b, eps=eps)
    cv = conv2d(im, w, bias=b, stride=1, padding=0, dilation=1)
    mm = matmul(x, transpose(y)) @ y
    sh = permute(x, [1, 0]) + reshape(x, [M, -1]) + broadcast_to(s, [M, N])
    sl = x[0:2, :, ::2] + x[..., 0] + x[-4:] + x[::-1] + exp(x)[0] + (x + y)[1:3] + -x[0] ** 2
    lo, hi = split(x, [2, -1], axis=1)
    cc = concat([lo, hi * 2, x[:, :1]], axis=-1)
    gt = gather(x, n, axis=0) + embedding(x, l) + cumsum(x, axis=1) + cumprod(x) + argmax(x, axis=-1, keepdims=true)
    am = argmin(x)
    return f, mean(x, axis=1)
}
"""


@pytest.mark.parametrize("src", [MLP, MLP_PIPED, BAD_TYPES, EVERYTHING],
                         ids=["mlp", "mlp_piped", "bad_types", "everything"])
def test_documented_programs_parse(src):
    module = parse_text(src, "doc.fdsl")
    assert module.chains
    assert format_ast(module)  # the printer handles every node kind


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.fdsl")), ids=lambda p: p.name)
def test_examples_parse(path):
    assert parse_text(path.read_text(), str(path)).chains


def test_mlp_ast():
    module = parse_text(MLP)
    (mlp,) = module.items
    assert mlp.name == "mlp"
    assert [p.name for p in mlp.params] == ["x", "w1", "b1", "w2", "b2"]
    x = mlp.params[0].type
    assert x.dtype == "f32" and [d.value for d in x.dims] == ["M", 768]
    assert not mlp.multi_return and mlp.returns[0].dtype == "f32"
    assign, ret = mlp.body
    assert isinstance(assign, ast.Assign) and assign.name == "h"
    assert format_expr(assign.value) == "(call gelu (+ (@ x w1) b1))"
    assert isinstance(ret, ast.Return)
    assert [format_expr(v) for v in ret.values] == ["(+ (+ (@ h w2) b2) x)"]


def test_pipeline_desugars_to_calls():
    ret = parse_text(MLP_PIPED).chains[0].body[0]
    (gelu,) = ret.values
    assert isinstance(gelu, ast.Call) and gelu.piped and gelu.func == "gelu"
    (add,) = gelu.args
    assert add.func == "add" and add.piped and len(add.args) == 2
    matmul = add.args[0]
    assert matmul.func == "matmul" and matmul.piped
    assert [a.id for a in matmul.args] == ["x", "w1"]
    assert format_expr(gelu) == "(call gelu |> (call add |> (call matmul |> x w1) b1))"


def test_format_ast():
    text = format_ast(parse_text("const eps = 1e-5\n" + MLP))
    lines = text.splitlines()
    assert lines[0] == "(const eps 1e-05)"
    assert lines[1] == ""
    assert lines[2] == "(chain mlp"
    assert "    (x f32[M,768])" in lines
    assert "  (returns f32[M,768])" in lines
    assert "    (assign h (call gelu (+ (@ x w1) b1)))" in lines
    assert lines[-1] == "    (return (+ (+ (@ h w2) b2) x))))"
    assert format_ast(parse_text("const eps = 1e-5\n" + MLP)) == text  # deterministic
    assert "0x" not in text


def test_format_multi_return_and_literals():
    text = format_ast(parse_text(
        'chain f(x: f32[N], s: f32) -> (f32[N], f32) {\n'
        '    y = gelu(x, approximate="none") |> cast(f16)\n'
        '    return y, sum(x, axis=[0], keepdims=false)\n}'))
    assert "  (returns (f32[N] f32))" in text
    assert '(assign y (call cast |> (call gelu x :approximate "none") f16))' in text
    assert "(return y (call sum x :axis [0] :keepdims false))" in text


# ---- precedence ---------------------------------------------------------------------------

def expr(src: str) -> ast.Expr:
    return parse_text(f"const c = {src}").items[0].value


@pytest.mark.parametrize("src, shape", [
    ("a + b * c", "(+ a (* b c))"),
    ("a * b + c", "(+ (* a b) c)"),
    ("a - b - c", "(- (- a b) c)"),
    ("a / b / c", "(/ (/ a b) c)"),
    ("a @ b * c", "(* (@ a b) c)"),
    ("a ** b ** c", "(** a (** b c))"),
    ("-a ** 2", "(- (** a 2))"),
    ("2 ** -1", "(** 2 (- 1))"),
    ("-a * b", "(* (- a) b)"),
    ("- - a", "(- (- a))"),
    ("a * -b", "(* a (- b))"),
    ("(a + b) * c", "(* (+ a b) c)"),
    ("x @ w + b == c", "(== (+ (@ x w) b) c)"),
    ("a < b < c", "(< (< a b) c)"),
    ("a <= b != c >= d", "(>= (!= (<= a b) c) d)"),
    ("a > b", "(> a b)"),
    ("a |> f(b) |> g", "(call g |> (call f |> a b))"),
    ("a + b |> f", "(call f |> (+ a b))"),
    ("a == b |> f(k=1)", "(call f |> (== a b) :k 1)"),
    ("f(a |> g, k=b |> h)", "(call f (call g |> a) :k (call h |> b))"),
    ("[1, -1, 2]", "[1 (- 1) 2]"),
    ("[M, 64,]", "[M 64]"),
    ("[]", "[]"),
    ("cast(x, f16)", "(call cast x f16)"),
    # subscripts bind tightest, items print as written
    ("x[a:b, :, ::2]", "(index x [a:b, :, ::2])"),
    ("x[..., 0]", "(index x [..., 0])"),
    ("x[-4:]", "(index x [(- 4):])"),
    ("x[::-1]", "(index x [::(- 1)])"),
    ("x[1:2:]", "(index x [1:2:])"),
    ("x[::]", "(index x [::])"),
    ("x[:N, k]", "(index x [:N, k])"),
    ("x[0,]", "(index x [0])"),
    ("x[0][1:]", "(index (index x [0]) [1:])"),
    ("-x[0] ** 2", "(- (** (index x [0]) 2))"),
    ("x[0] ** y[1]", "(** (index x [0]) (index y [1]))"),
    ("2 ** -x[0]", "(** 2 (- (index x [0])))"),
    ("a * b[0] + c", "(+ (* a (index b [0])) c)"),
    ("f(y)[0]", "(index (call f y) [0])"),
    ("(a + b)[1:3]", "(index (+ a b) [1:3])"),
    ("x[0] |> f", "(call f |> (index x [0]))"),
    ("[a, b][0]", "(index [a b] [0])"),
    ("concat([a, b * 2, c], axis=1)", "(call concat [a (* b 2) c] :axis 1)"),
    ("x[a + 1 : f(b)]", "(index x [(+ a 1):(call f b)])"),
    ("f()", "(call f)"),
    ("true", "true"),
    ('"tanh"', '"tanh"'),
])
def test_precedence(src, shape):
    assert format_expr(expr(src)) == shape


def test_subscript_nodes():
    e = expr("x[1:n:-2, ..., 0, :]")
    assert isinstance(e, ast.Subscript) and isinstance(e.value, ast.Name)
    sl, ell, idx, full = e.items
    assert isinstance(sl, ast.SliceItem) and sl.two_colons
    assert (sl.start.value, sl.stop.id) == (1, "n")
    assert isinstance(sl.step, ast.Unary) and sl.step.operand.value == 2
    assert isinstance(ell, ast.EllipsisItem)
    assert isinstance(idx, ast.Num) and idx.value == 0
    assert isinstance(full, ast.SliceItem) and (full.start, full.stop, full.step, full.two_colons) == (None,) * 3 + (False,)


def test_split_binds_several_names():
    (c,) = parse_text("chain f(x: f32[4]) -> f32[2] {\n    a, b = split(x, [2, 2])\n    return a\n}\n").chains
    multi, _ = c.body
    assert isinstance(multi, ast.MultiAssign) and multi.names == ("a", "b")
    assert [where(s) for s in multi.name_spans] == [(2, 5, 2, 6), (2, 8, 2, 9)]
    assert where(multi.span) == (2, 5, 2, 28)
    assert format_expr(multi.value) == "(call split x [2 2])"
    text = format_ast(parse_text("chain f(x: f32[4]) -> f32[2] {\n    a, b = x |> split([2, 2])\n    return a\n}\n"))
    assert "    (assign (a b) (call split |> x [2 2]))" in text.splitlines()


def test_binary_stores_operator_text():
    ops = ["+", "-", "*", "/", "@", "**", "==", "!=", "<", "<=", ">", ">="]
    for op in ops:
        e = expr(f"a {op} b")
        assert isinstance(e, ast.Binary) and e.op == op


@pytest.mark.parametrize("src, value, is_float", [
    ("3", 3, False), ("0.5", 0.5, True), ("1e-5", 1e-5, True), ("2.", 2.0, True),
    (".5", 0.5, True), ("1E3", 1000.0, True), ("12", 12, False),
])
def test_numbers(src, value, is_float):
    n = expr(src)
    assert isinstance(n, ast.Num) and n.value == value and n.is_float == is_float
    assert type(n.value) is (float if is_float else int)


def test_literal_nodes():
    call = expr('f(-1, true, false, "a\\"b", bf16, [x])')
    neg, t, f, s, d, lst = call.args
    assert isinstance(neg, ast.Unary) and neg.op == "-" and neg.operand.value == 1
    assert isinstance(t, ast.Bool) and t.value is True
    assert isinstance(f, ast.Bool) and f.value is False
    assert isinstance(s, ast.Str) and s.value == 'a"b'
    assert isinstance(d, ast.DTypeLit) and d.name == "bf16"
    assert isinstance(lst, ast.ListExpr) and lst.items[0].id == "x"


def test_keywords_and_names():
    call = expr("softmax(x, axis=-1, eps=1e-5,)")
    assert [a.id for a in call.args] == ["x"]
    assert [k.name for k in call.kwargs] == ["axis", "eps"]
    # keyword-like names are ordinary names
    assert expr("f16x + chains + returns_ + _bool").lhs.lhs.lhs.id == "f16x"


# ---- layout: newlines, semicolons, comments ------------------------------------------------

def test_types():
    (chain,) = parse_text("chain f(s: f32, x: bf16[M, 4, seq], b: bool[1]) -> (f32[M],) {\n return s\n}").chains
    s, x, b = (p.type for p in chain.params)
    assert s.dims is None and s.dtype == "f32"
    assert x.dtype == "bf16" and [d.value for d in x.dims] == ["M", 4, "seq"]
    assert b.dtype == "bool" and b.dims[0].value == 1
    assert chain.multi_return and len(chain.returns) == 1


def test_layout_is_free_where_documented():
    src = """\

    # leading comment

    const a = 1; const b = 2   # two on one line


    chain f(
        x: f32[M, N],   # trailing comma, params over several lines
        y: f32[M, N],
    )
        -> f32[M, N]
    {

        # comment in the body
        h = x + y; g = h * 2;;
        k = gelu(
            h,
            approximate="none"
        )
        return (g
                + k)

    }
    chain g() -> (f32[4],
                  f32) { return a; }
    # trailing comment"""
    module = parse_text(textwrap.dedent(src))
    const_a, const_b, f, g = module.items
    assert isinstance(const_a, ast.ConstDecl) and const_b.name == "b"
    assert [type(s).__name__ for s in f.body] == ["Assign", "Assign", "Assign", "Return"]
    assert format_expr(f.body[3].values[0]) == "(+ g k)"
    assert g.multi_return and len(g.returns) == 2 and g.params == ()


def test_crlf_and_empty_inputs():
    assert parse_text("").items == ()
    assert parse_text("\n\n# nothing\n;\n").items == ()
    module = parse_text("chain f(x: f32) -> f32 {\r\n    return x\r\n}\r\n")
    assert module.chains[0].body[0].span.line == 2


def test_const_in_body_and_multi_return():
    (chain,) = parse_text("chain f(x: f32[N]) -> (f32[N], f32[N]) {\n const h = 0.5\n return x * h, x\n}").chains
    const, ret = chain.body
    assert isinstance(const, ast.ConstDecl) and const.name == "h" and const.value.value == 0.5
    assert len(ret.values) == 2


# ---- spans -------------------------------------------------------------------------------

def where(span) -> tuple[int, int, int, int]:
    return span.line, span.col, span.end_line, span.end_col


def test_spans():
    (mlp,) = parse_text(MLP, "mlp.fdsl").chains
    assert where(mlp.span) == (2, 1, 3, 44)          # `chain` .. the `)` of the params
    assert where(mlp.name_span) == (2, 7, 2, 10)
    x = mlp.params[0]
    assert where(x.span) == (2, 11, 2, 25)           # x: f32[M, 768]
    assert where(x.name_span) == (2, 11, 2, 12)
    assert where(x.type.span) == (2, 14, 2, 25)
    assert [where(d.span) for d in x.type.dims] == [(2, 18, 2, 19), (2, 21, 2, 24)]
    assert where(mlp.params[3].span) == (3, 11, 3, 29)  # w2 on the continuation line
    assert where(mlp.returns[0].span) == (3, 48, 3, 59)
    assert span_text(MLP, mlp.returns[0].span) == "f32[M, 768]"

    h, ret = mlp.body
    assert where(h.span) == (4, 5, 4, 26)            # h = gelu(x @ w1 + b1)
    assert where(h.name_span) == (4, 5, 4, 6)
    call = h.value
    assert where(call.span) == (4, 9, 4, 26)
    assert where(call.func_span) == (4, 9, 4, 13)
    add = call.args[0]
    assert where(add.span) == (4, 14, 4, 25)
    assert where(add.op_span) == (4, 21, 4, 22)
    assert where(add.lhs.op_span) == (4, 16, 4, 17)  # @
    assert where(ret.span) == (5, 5, 5, 27)          # return h @ w2 + b2 + x
    assert span_text(MLP, ret.values[0].span) == "h @ w2 + b2 + x"
    assert span_text(MLP, ret.span) == "return h @ w2 + b2 + x"


def span_text(src: str, span) -> str:
    assert span.line == span.end_line
    return src.splitlines()[span.line - 1][span.col - 1:span.end_col - 1]


def test_more_spans():
    src = "const c = -x ** 2\nconst d = softmax((a), axis=-1) |> f(k=1)\n"
    c, d = parse_text(src).items
    assert where(c.span) == (1, 1, 1, 18) and where(c.name_span) == (1, 7, 1, 8)
    neg = c.value
    assert isinstance(neg, ast.Unary) and where(neg.op_span) == (1, 11, 1, 12)
    assert span_text(src, neg.span) == "-x ** 2"
    assert span_text(src, neg.operand.span) == "x ** 2"
    pipe = d.value
    assert span_text(src, pipe.span) == "softmax((a), axis=-1) |> f(k=1)"
    assert span_text(src, pipe.func_span) == "f"
    inner = pipe.args[0]
    assert span_text(src, inner.span) == "softmax((a), axis=-1)"
    assert span_text(src, inner.args[0].span) == "a"
    assert span_text(src, inner.kwargs[0].span) == "axis=-1"
    assert span_text(src, pipe.kwargs[0].value.span) == "1"
    lst = "const e = [1, 2]"
    assert span_text(lst, parse_text(lst).items[0].value.span) == "[1, 2]"


def test_subscript_spans():
    src = "const e = -f(a)[1:n:2, ...,  k][-1] ** 2"
    neg = parse_text(src).items[0].value
    outer = neg.operand.lhs
    assert span_text(src, outer.span) == "f(a)[1:n:2, ...,  k][-1]"
    inner = outer.value
    assert span_text(src, inner.span) == "f(a)[1:n:2, ...,  k]"
    assert [span_text(src, i.span) for i in inner.items] == ["1:n:2", "...", "k"]
    sl = inner.items[0]
    assert [span_text(src, p.span) for p in (sl.start, sl.stop, sl.step)] == ["1", "n", "2"]
    assert span_text(src, outer.items[0].span) == "-1"
    only = "const e = x[:, ::]"
    assert [span_text(only, i.span) for i in parse_text(only).items[0].value.items] == [":", "::"]


# ---- syntax errors -----------------------------------------------------------------------

HEAD = "chain f(x: f32[M], y: f32[M]) -> f32[M] {\n"

# (source, line, col, exact message of the first diagnostic)
BAD = [
    # a line ending in an operator is not continued; the caret goes just after the operator
    (HEAD + "    h = x +\n        y\n    return h\n}\n", 2, 12, "expected an expression after '+'"),
    (HEAD + "    return gelu(x +)\n}\n", 2, 20, "expected an expression after '+'"),
    (HEAD + "    h = x **\n}\n", 2, 13, "expected an expression after '**'"),
    (HEAD + "    h = x == = y\n}\n", 2, 13, "expected an expression after '=='"),
    (HEAD + "    h = -\n}\n", 2, 10, "expected an expression after '-'"),
    (HEAD + "    h =\n    return h\n}\n", 2, 8, "expected an expression after '='"),
    (HEAD + "    return\n}\n", 2, 11, "expected an expression after 'return'"),
    (HEAD + "    return x, \n}\n", 2, 14, "expected an expression after ','"),
    (HEAD + "    return x |>\n}\n", 2, 16, "expected an operator name or call after '|>'"),
    (HEAD + "    return x\n        |> gelu\n}\n", 3, 9,
     "a statement cannot start with '|>'; a newline ends a statement, so wrap a multi-line expression in ( )"),
    # characters and strings
    (HEAD + "    h = x $ y\n}\n", 2, 11, "unexpected character '$'"),
    (HEAD + "    h = gelu(x, approximate=\"tanh)\n}\n", 2, 29, "unterminated string"),
    # brackets
    (HEAD + "    h = gelu(x\n    return h\n}\n", 3, 5,
     "expected ')' to close the '(' on line 2, found keyword 'return'"),
    (HEAD + "    h = gelu(x", 2, 13, "'(' was never closed"),
    (HEAD + "    return [x, y\n", 2, 12, "'[' was never closed"),
    (HEAD + "    return x\n", 1, 41, "'{' was never closed"),
    (HEAD + "    h = x)\n}\n", 2, 10, "unmatched ')'"),
    (HEAD + "    h = (x]\n}\n", 2, 11, "closing ']' does not match the opening '(' on line 2"),
    (HEAD + "    return x\n}\n}\n", 4, 1, "unmatched '}'"),
    ("chain f(x: f32 -> f32 { return x }", 1, 16, "expected ')' to close the '(' on line 1, found '->'"),
    # statements
    (HEAD + "    x + 1\n    return x\n}\n", 2, 5,
     "an expression is not a statement; bind it with `name = ...` or `return` it"),
    (HEAD + "    gelu(x)\n}\n", 2, 5,
     "an expression is not a statement; bind it with `name = ...` or `return` it"),
    (HEAD + "    1 + x\n}\n", 2, 5,
     "an expression is not a statement; bind it with `name = ...` or `return` it"),
    (HEAD + "    h x\n}\n", 2, 7, "expected '=' after 'h'"),
    ("const A 1\n", 1, 9, "expected '=' after 'A'"),
    (HEAD + "    h = x y\n    return h\n}\n", 2, 11, "expected an operator or a newline, found name 'y'"),
    ("const A = 1 const B = 2\n", 1, 13, "expected an operator or a newline, found keyword 'const'"),
    ("x = 1\n", 1, 1, "expected 'chain' or 'const' at the top level, found name 'x'"),
    # keywords as names
    (HEAD + "    chain = 3\n}\n", 2, 5, "'chain' is a keyword and cannot be used as a name"),
    (HEAD + "    return = 3\n}\n", 2, 5, "'return' is a keyword and cannot be used as a name"),
    ("chain = 3\n", 1, 1, "'chain' is a keyword and cannot be used as a name"),
    ("const true = 3\n", 1, 7, "'true' is a keyword and cannot be used as a name"),
    ("chain f(f32: f32) -> f32 { return x }", 1, 9, "'f32' is a keyword and cannot be used as a name"),
    (HEAD + "    h = f(x, f16=3)\n}\n", 2, 14, "'f16' is a keyword and cannot be used as a name"),
    # the chain header
    ("chain f(x: f32) {\n    return x\n}\n", 1, 17, "expected '->' and a return type after the parameter list"),
    ("chain f(x: f32) -> f32\n    return x\n}\n", 1, 23, "expected '{' to start the body of the chain, found newline"),
    ("chain f(x: f32) -> { return x }", 1, 20, "expected a return type after '->', found '{'"),
    ("chain f(x:) -> f32 { return x }", 1, 11, "expected a type after ':', found ')'"),
    ("chain f(x f32) -> f32 { return x }", 1, 11, "expected ':', found keyword 'f32'"),
    ("chain f(x: f32,, y: f32) -> f32 { return x }", 1, 16, "expected a name or ')', found ','"),
    ("chain f", 1, 8, "expected '(', found end of file"),
    ("chain f(x: f32) -> f32 { return x } chain g() -> f32 { return 1 }", 1, 37,
     "expected a newline or end of file, found keyword 'chain'"),
    # errors found while building the AST
    (HEAD + "    return softmax(axis=-1, x)\n}\n", 2, 29, "positional argument after keyword argument"),
    ("chain f(x: f99[4]) -> f32 {\n    return x\n}\n", 1, 12, "unknown dtype 'f99'"),
    ("chain f(x: f32[4.5]) -> f32 {\n    return x\n}\n", 1, 16, "a dimension must be an integer or a symbol"),
    ("chain f(x: f32[M * 2]) -> f32 {\n    return x\n}\n", 1, 16, "a dimension must be an integer or a symbol"),
    ("chain f(x: f32[-1]) -> f32 {\n    return x\n}\n", 1, 16, "a dimension must be an integer or a symbol"),
    ("chain f(x: f32[]) -> f32 {\n    return x\n}\n", 1, 12,
     "a tensor type needs at least one dimension; a bare 'f32' is a scalar"),
    (HEAD + "    return x |> 3\n}\n", 2, 17, "the right side of '|>' must be an operator name or call"),
    (HEAD + "    return x |> (gelu)\n}\n", 2, 18, "the right side of '|>' must be an operator name or call"),
    (HEAD + "    return x |> y + 1\n}\n", 2, 17, "the right side of '|>' must be an operator name or call"),
    # subscripts and several names
    (HEAD + "    h = x[]\n}\n", 2, 11, "expected an expression, ':' or '...', found ']'"),
    (HEAD + "    h = x[1,,2]\n}\n", 2, 13, "expected an expression, ':', ']' or '...', found ','"),
    (HEAD + "    h = x[1:2:3:4]\n}\n", 2, 16, "a slice has at most three parts, start:stop:step"),
    (HEAD + "    h = x[0, ::2:1]\n}\n", 2, 17, "a slice has at most three parts, start:stop:step"),
    (HEAD + "    h = [1:2]\n}\n", 2, 11, "expected an operator, ']' or ',', found ':'"),
    (HEAD + "    h = x[1 2]\n}\n", 2, 13, "expected an operator, ':', ']' or ',', found number 2"),
    (HEAD + "    h = x[:\n    return h\n}\n", 3, 5, "expected ']' to close the '[' on line 2, found keyword 'return'"),
    (HEAD + "    h = x[..]\n}\n", 2, 11, "unexpected character '.'"),
    (HEAD + "    h = x[1:-]\n}\n", 2, 14, "expected an expression after '-'"),
    (HEAD + "    return x |> f[0]\n}\n", 2, 17, "the right side of '|>' must be an operator name or call"),
    (HEAD + "    a, = split(x, [1])\n}\n", 2, 8, "expected a name, found '='"),
    (HEAD + "    a, b\n    return a\n}\n", 2, 9, "expected '=' after 'b'"),
    (HEAD + "    a, b split(x, [1])\n}\n", 2, 10, "expected '=' after 'b'"),
    (HEAD + "    a, 1 = split(x, [1])\n}\n", 2, 8, "expected a name, found number 1"),
    ("const a, b = 1\n", 1, 8, "expected '=' after 'a'"),
    (HEAD + "    x[0] = 1.0\n}\n", 2, 6, "cannot assign into a subscript of 'x': values are immutable; make a new "
                                      "one (with concat, where...) and bind it to a new name"),
    (HEAD + "    x[0]\n    return x\n}\n", 2, 5,
     "an expression is not a statement; bind it with `name = ...` or `return` it"),
    # generic fallback
    (HEAD + "    h = f(1=2)\n}\n", 2, 12, "expected an operator, ')' or ',', found '='"),
    (HEAD + "    return gelu(x, +)\n}\n", 2, 20, "expected an expression or ')', found '+'"),
    ("chain", 1, 6, "expected a name, found end of file"),
]


@pytest.mark.parametrize("src, line, col, message", BAD, ids=[f"{i}:{b[3][:40]}" for i, b in enumerate(BAD)])
def test_syntax_errors(src, line, col, message):
    with pytest.raises(FdslError) as info:
        parse_text(src, "bad.fdsl")
    first = info.value.diagnostics[0]
    assert (first.span.line, first.span.col, first.message) == (line, col, message)
    assert first.span.file.path == "bad.fdsl"
    # the rendering names the place, shows the line and puts a caret under the column
    rendered = info.value.render()
    assert rendered == str(info.value)
    head, text, caret = rendered.splitlines()[:3]
    assert head == f"bad.fdsl:{line}:{col}: error: {message}"
    assert text == src.splitlines()[line - 1]
    assert caret.startswith(" " * (col - 1) + "^")


def test_errors_from_the_ast_are_collected():
    src = "chain f(x: f99[4], y: f32[2.5]) -> f32 {\n    return softmax(k=1, x)\n}\n"
    with pytest.raises(FdslError) as info:
        parse_text(src)
    got = [(d.span.line, d.span.col, d.message) for d in info.value.diagnostics]
    assert got == [
        (1, 12, "unknown dtype 'f99'"),
        (1, 27, "a dimension must be an integer or a symbol"),
        (2, 25, "positional argument after keyword argument"),
    ]


def test_positional_after_keyword_points_at_the_keyword():
    with pytest.raises(FdslError) as info:
        parse_text(HEAD + "    return softmax(axis=-1, x)\n}\n")
    (note,) = info.value.diagnostics[0].notes
    assert (note.span.line, note.span.col, note.span.end_col) == (2, 20, 27)


# ---- robustness: nothing but FdslError ever escapes --------------------------------------

CORPUS = [MLP, MLP_PIPED, EVERYTHING] + [src for src, *_ in BAD]


def parses_or_fdsl_error(text: str) -> None:
    try:
        module = parse_text(text)
    except FdslError as e:
        assert e.diagnostics and all(d.span is not None for d in e.diagnostics)
        e.render()
    except lark.exceptions.LarkError as e:  # pragma: no cover - the failure we look for
        pytest.fail(f"a Lark exception escaped: {type(e).__name__}: {e}")
    else:
        format_ast(module)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(CORPUS), st.integers(0, 4000), st.integers(0, 4000))
def test_slices_of_programs(src, a, b):
    a, b = sorted((a % (len(src) + 1), b % (len(src) + 1)))
    parses_or_fdsl_error(src[:a] + src[b:])
    parses_or_fdsl_error(src[a:b])


FRAGMENTS = ["chain", " f", "(", ")", "[", "]", "{", "}", "->", "x", ":", "f32", ",", "=", "==",
             "return", "const", "+", "-", "**", "*", "|>", "@", "1", "2.5", '"s"', "\n", ";",
             "# c\n", "true", "M", " ", "gelu", "$", '"', "<=", "!"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=40))
def test_token_soup(parts):
    parses_or_fdsl_error("".join(parts))


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def test_arbitrary_text(text):
    parses_or_fdsl_error(text)


def test_subscripts_count_toward_the_nesting_limit_and_their_items_do_not():
    from fusec.dsl.limits import MAX_NESTING
    ok = "chain f(x: f32[4]) -> f32[4] {\n    return x" + "[0:4, ...]" * (MAX_NESTING - 10) + "\n}\n"
    assert format_ast(parse_text(ok)).count("(index") == MAX_NESTING - 10
    deep = "chain f(x: f32[4]) -> f32[4] {\n    return x" + "[:]" * (MAX_NESTING + 10) + "\n}\n"
    with pytest.raises(FdslError) as info:
        parse_text(deep)
    d = info.value.diagnostics[0]
    assert d.span.line == 2 and d.message.startswith(f"this expression is nested more than {MAX_NESTING} levels deep")
