"""Regression (found while probing the torch.compile backend for tests/fuzz_import.py):
PyTorch promotes the operands of an arithmetic op or a comparison of mixed tensor dtypes
(`x + torch.arange(4)` is f32 + i64 = f32; `i / j` of integers is a float; `x > i` compares in
f32). The translation wrote `x + const_v` over f32 and i64, which fusec's checker refuses, so the
whole region ran eagerly ("dtypes differ"). The operand of the other dtype is now cast to the
promoted dtype (`x + cast(const_v, f32)`): the region runs in fusec, with eager's results."""
import pytest

torch = pytest.importorskip("torch")
import fusec.torch as ft  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("name", ["arange", "int_times_float", "int_true_div", "mixed_compare", "f16_plus_f32"])
def test_mixed_dtype_operands_are_promoted_as_pytorch_does(name):
    g = torch.Generator().manual_seed(0)
    x, i, j = torch.randn(3, 4, generator=g), torch.randint(-2, 5, (3, 4), generator=g), \
        torch.randint(0, 5, (3, 4), generator=g)
    f, args = {
        "arange": (lambda x: x + torch.arange(4), (x,)),
        "int_times_float": (lambda x, i: x * i - i, (x, i)),
        "int_true_div": (lambda i, j: i / (j + 1), (i, j)),
        "mixed_compare": (lambda x, i: (x > i).float() + x, (x, i)),
        "f16_plus_f32": (lambda h, x: h + x, (x.half(), x)),
    }[name]
    want = f(*args)
    r = ft.explain(f, *args, options={"target": "reference"})
    assert r.eager == {} and r.in_fusec == r.aten_ops >= 1, str(r)
    assert r.outputs.dtype == want.dtype and torch.allclose(r.outputs, want, rtol=1e-6, atol=1e-6)
    assert "cast(" in r.fdsl[0]
