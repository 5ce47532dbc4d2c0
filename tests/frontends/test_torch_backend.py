"""The torch.compile backend on small modules: found by name through its entry point, results
equal to eager within runtime/compare.py's tolerances, the report's counts, ops fusec lacks run
eagerly and are listed, dynamic sizes compile once, training graphs run eagerly, options reach
fusec, FUSEC_TORCH_DUMP. The real models are in test_torch_models.py."""
from __future__ import annotations

import re

import pytest
import torch

import fusec
import fusec.torch as ft
from fusec.runtime.compare import compare


class MLP(torch.nn.Module):
    def __init__(self, d=32, h=64):
        super().__init__()
        self.ln = torch.nn.LayerNorm(d)
        self.a = torch.nn.Linear(d, h)
        self.b = torch.nn.Linear(h, d)

    def forward(self, x):
        return x + self.b(torch.nn.functional.gelu(self.a(self.ln(x))))


def close(got, want) -> bool:
    c = compare(got.detach().numpy(), want.detach().numpy(), "f32")
    return c.ok


def counting(options):
    """A backend that counts dynamo's calls (each is a compile of a graph)."""
    calls = []
    inner = ft.make_backend(options)

    def backend(gm, example_inputs):
        calls.append(gm)
        return inner(gm, example_inputs)
    return backend, calls


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_backend_by_name_matches_eager_on_cpu():
    torch.manual_seed(0)
    m = MLP().eval()
    x = torch.randn(2, 8, 32)
    report = ft.Report()
    c = torch.compile(m, backend="fusec", options={"target": "cpu", "report": report})
    with torch.no_grad():
        got, want = c(x), m(x)
    assert close(got, want)
    # layer norm, two linears (addmm), erf-GELU, the residual add: all in one fusec region
    assert report.aten_ops == 5 and report.in_fusec == 5 and report.coverage == 1.0
    assert report.partitions == 1 and report.eager == {}
    # on the cpu the two linears on x [2, 8, 32] are BLAS matmuls on rows (graph pass
    # matmul-rows) and the ops around them run on the rows too, so the plan is the 2-D form's:
    # the layernorm in the first matmul's kernel, the GELU, second matmul and residual in one
    # (5 kernels while the rows' reshapes stood between them; 3 as a contraction recomputing
    # the layernorm per output column)
    assert 1 <= report.kernels <= 2
    text = report.fdsl[0]
    assert 'gelu(' in text and 'approximate="none"' in text and "layernorm(" in text


@pytest.mark.slow
def test_a_bf16_module_runs_in_fusec_on_the_cpu():
    torch.manual_seed(0)
    m = MLP().eval().to(torch.bfloat16)
    x = torch.randn(2, 8, 32, dtype=torch.bfloat16)
    report = ft.Report()
    c = torch.compile(m, backend="fusec", options={"target": "cpu", "report": report})
    with torch.no_grad():
        got, want = c(x), m(x)
    assert got.dtype == torch.bfloat16 and report.in_fusec == report.aten_ops and report.eager == {}
    assert " bf16[" in report.fdsl[0]
    # eager's bf16 kernels round at other points than the chain's ops do: the bf16 tolerance
    c = compare(got.float().numpy(), want.float().numpy(), "bf16")
    assert c.ok, c.describe()


def test_unsupported_op_runs_eagerly_and_is_reported():
    class Sorted(torch.nn.Module):
        def forward(self, x):
            y = torch.tanh(x) * 2.0
            s, _ = torch.sort(y, dim=-1)        # aten.sort: fusec has no sort
            return torch.relu(s) + 1.0
    m = Sorted()
    x = torch.randn(4, 16)
    r = ft.explain(m, x, options={"target": "reference"})
    assert close(r.outputs, m(x))
    assert r.eager["sort.default"]["count"] == 1
    assert "fusec does not take" in r.eager["sort.default"]["reasons"][0]
    # tanh and mul before the sort, relu and add after: two regions around it
    assert r.partitions == 2 and r.in_fusec == 4 and r.aten_ops == 5
    assert "aten.sort.default x1" in str(r)


def test_dynamic_sequence_length_compiles_once():
    torch.manual_seed(0)
    m = MLP().eval()
    report = ft.Report()
    backend, calls = counting({"target": "cpu", "report": report})
    c = torch.compile(m, backend=backend)
    with torch.no_grad():
        x = torch.randn(2, 12, 32)
        torch._dynamo.mark_dynamic(x, 1)        # the sequence length is dynamic from the start
        assert close(c(x), m(x))
        first = len(calls)
        builds = sum(r.builds for r in report.regions)
        for s in (13, 9, 16):
            x = torch.randn(2, s, 32)
            assert close(c(x), m(x))
    # no new graph for dynamo, no new fusec build: the symbols' size class (9..16) is one build
    assert len(calls) == first
    assert sum(r.builds for r in report.regions) == builds
    # the sequence length is a symbol of the chain
    assert re.search(r"f32\[2, S\d+, 32\]", report.fdsl[0].splitlines()[0])
    assert all(r.per_size is None for r in report.regions) and builds == 1


def test_training_graph_runs_eagerly_with_a_warning():
    torch.manual_seed(0)
    m = MLP()
    x = torch.randn(2, 4, 32)
    report = ft.Report()
    c = torch.compile(m, backend="fusec", options={"target": "reference", "report": report})
    with pytest.warns(UserWarning, match="training graph runs eagerly"):
        y = c(x)
    y.sum().backward()
    assert report.training == 1 and report.graphs == 0
    assert m.a.weight.grad is not None and close(y, m(x))


def test_options_reach_fusec_and_bad_ones_are_refused():
    m = MLP().eval()
    x = torch.randn(2, 4, 32)
    c = torch.compile(m, backend="fusec", options={"target": "cpu", "no_such_option": 1})
    with torch.no_grad(), pytest.raises(Exception, match="no_such_option"):
        c(x)


@pytest.mark.slow
def test_dump_writes_fdsl_and_plan(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSEC_TORCH_DUMP", str(tmp_path))
    m = MLP().eval()
    r = ft.explain(m, torch.randn(2, 4, 32), options={"target": "cpu"})
    assert r.partitions == 1
    fdsl = (tmp_path / "region0.fdsl").read_text()
    assert fdsl == r.fdsl[0]
    assert (tmp_path / "region0.plan.json").read_text().startswith("{")


def test_flatten_matmul_round_trip_keeps_ranks():
    """aten flattens [B, S, D] to [B*S, D] around every linear layer; the chain keeps the rank
    (a dynamic B*S is no FDSL dim) and the attention product keeps its heads."""
    class Attn(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = torch.nn.Linear(32, 96)

        def forward(self, x):
            b, s, _ = x.shape
            q, k, v = self.qkv(x).view(b, s, 3, 4, 8).permute(2, 0, 3, 1, 4)
            p = torch.softmax(q @ k.transpose(-1, -2) * 0.35, dim=-1)
            return (p @ v).transpose(1, 2).reshape(b, s, 32)
    torch.manual_seed(0)
    m = Attn().eval()
    x = torch.randn(2, 8, 32)
    r = ft.explain(m, x, options={"target": "reference"})
    assert close(r.outputs, m(x))
    text = r.fdsl[0]
    assert "[16, " not in text          # no flattened B*S
    assert r.coverage == 1.0


def test_translation_of_an_unknown_op_names_it():
    class Cumprod(torch.nn.Module):
        def forward(self, x):
            return torch.special.bessel_j0(x) + 1.0
    r = ft.explain(Cumprod(), torch.randn(8), options={"target": "reference"})
    assert "special_bessel_j0.default" in r.eager
    assert r.in_fusec == 1


def test_sdpa_masked_rows_and_the_guard_the_attention_matcher_takes():
    """SDPA's decomposition guards fully masked rows (all -inf: 0, not NaN); the chain writes
    that guard as where(max(s) == -inf, 0, softmax(s)), transposes that undo each other vanish,
    and the GPU plan is one online-softmax kernel."""
    from fusec.compiler.options import CompileOptions
    from fusec.compiler.pipeline import compile_typed

    class SDPA(torch.nn.Module):
        def forward(self, q, k, v, mask):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 8, 16) for _ in range(3))
    mask = torch.zeros(8, 8)
    mask[3, :] = -torch.inf                      # a fully masked query row
    mask[5, 6:] = -torch.inf
    r = ft.explain(SDPA(), q, k, v, mask, options={"target": "reference"})
    want = SDPA()(q, k, v, mask)
    assert float(want[0, :, 3].abs().max()) == 0.0 and close(r.outputs, want)
    text = r.fdsl[0]
    assert "== (-inf), 0.0, " in text and "permute(" in text and text.count("permute(") == 1
    chain = fusec.check(text).chains[0]
    plan = compile_typed(chain, {}, options=CompileOptions(target="gpu"), until="plan").plan
    assert plan.kernel_count == 1 and plan.kernels[0].template == "attention", plan.format()


def test_a_region_whose_outputs_differ_from_eager_runs_eagerly_and_says_why(monkeypatch):
    """Each region's first call at a size is compared with eager PyTorch: a wrong build (here a
    chain that adds 1 to its output) is never silently wrong; `verify=False` skips the check."""
    class Tanh(torch.nn.Module):
        def forward(self, x):
            return torch.tanh(x) * 2.0 + 1.0
    from fusec.program import Chain
    call = Chain.__call__
    monkeypatch.setattr(Chain, "__call__", lambda self, *a: call(self, *a) + 1.0)
    m, x = Tanh(), torch.randn(4, 16)
    with pytest.warns(UserWarning, match="differed from eager PyTorch"):
        r = ft.explain(m, x, options={"target": "reference"})
    assert torch.equal(r.outputs, m(x))
    (region,) = r.regions
    assert region.eager_reason.startswith("fusec's outputs differed from eager PyTorch on its first call (output 0: ")
    assert r.in_fusec == 0 and "differed from eager" in str(r)
    torch._dynamo.reset()
    r = ft.explain(m, x, options={"target": "reference", "verify": False})
    assert torch.allclose(r.outputs, m(x) + 1.0) and r.in_fusec == 3
    torch._dynamo.reset()
    with pytest.raises(Exception, match="verify takes True or False"):
        ft.explain(m, x, options={"target": "reference", "verify": "yes"})
