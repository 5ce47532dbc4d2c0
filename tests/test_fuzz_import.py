"""The importers' fuzzer (tests/fuzz_import.py) in the default test run: a few hundred mutated
ONNX files and a handful of random PyTorch modules, none of which may end in an internal error,
a traceback, an unlocated error, a wrong result, a read outside the model's folder or a timeout.
The long run is `python -m tests.fuzz_import -n 5000` (docs/GUIDE.md: Fuzzing)."""
import importlib.util
import os
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

_spec = importlib.util.spec_from_file_location("fusec_tests_fuzz_import", Path(__file__).with_name("fuzz_import.py"))
fz = sys.modules["fusec_tests_fuzz_import"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fz)

ONNX_CASES = 300
FX_CASES = 6


@pytest.fixture(scope="module")
def onnx_figures():
    return fz.fuzz(ONNX_CASES, seed=2026, timeout_s=30, fx_share=0.0)


def shown(figures):
    return "\n".join(f"case {r.case.index} ({r.case.family}: {r.case.what[:100]}): {r.problem}\n{r.detail[-300:]}"
                     for r in figures["failures"][:5])


def test_no_onnx_case_breaks_the_contract(onnx_figures):
    assert onnx_figures["failing"] == 0, shown(onnx_figures)


def test_every_mutation_ran_and_every_outcome_happens(onnx_figures):
    assert set(onnx_figures["families"]) == set(fz.MUTATIONS)
    out = onnx_figures["outcomes"]
    # most mutations are refused with a located error, and some still import, run, and agree with onnxruntime
    assert out.get("import refused", 0) > ONNX_CASES // 3
    assert out.get("matches onnxruntime", 0) > ONNX_CASES // 10


def test_fx_cases_match_eager():
    pytest.importorskip("torch")
    figures = fz.fuzz(FX_CASES, seed=2026, timeout_s=60, fx_share=1.0)
    assert figures["fx_cases"] == FX_CASES
    assert figures["failing"] == 0, shown(figures)
    assert figures["outcomes"].get("all in fusec", 0) >= 1


def test_the_seed_models_import_and_agree_with_onnxruntime():
    """Every seed model, unmutated, is a model fusec takes: the mutations start from the valid."""
    names = set(fz.seeds())
    assert {"mlp", "conv", "embed", "shape", "cast", "external", "block_legacy", "block_dynamo", "conv_legacy",
            "conv_dynamo"} <= names
    for i, name in enumerate(sorted(names)):
        proto, files = fz.seeds()[name]
        case = fz.Case(i, "seed", f"{name}: unchanged", model=proto.SerializeToString(), files=dict(files))
        r = fz.run_onnx_case(case, 60)
        assert r.problem is None and r.outcome == "matches onnxruntime", (name, r.outcome, r.problem, r.detail)


def test_a_case_is_reproducible_from_its_seed_and_index():
    for i in (3, 77, 500):
        a, b = fz.make_case(7, i, 0.1), fz.make_case(7, i, 0.1)
        assert (a.family, a.what, a.model, a.files, a.links, a.fx_source) == \
            (b.family, b.what, b.model, b.files, b.links, b.fx_source)


def test_the_secret_detector_itself(tmp_path):
    """A read of the secret beside the model's folder is seen: by the audit hook (Python's open)
    and by the file's access time (any read, a C library's too)."""
    case = fz.make_onnx_case(0, 0)
    d = tmp_path / "case"
    d.mkdir()
    fz._write(case, d)
    assert fz._secret_read(d) is None
    fz._hook()
    fz._WATCHED.update(os.path.realpath(d / rel) for rel in fz.SECRETS)
    try:
        with open(d / "secret.bin", "rb") as f:
            f.read(4)
        assert fz._secret_read(d).startswith("opened ")
        fz._SECRET_HITS.clear()
        fz._WATCHED.clear()
        fd = os.open(d / "cwd" / "secret.bin", os.O_RDONLY)      # (seen by the hook too: cleared below)
        fz._SECRET_HITS.clear()
        os.read(fd, 4)
        os.close(fd)
        time.sleep(0.01)
        assert "access time" in fz._secret_read(d)
    finally:
        fz._WATCHED.clear()
        fz._SECRET_HITS.clear()


def test_the_contract_checks_themselves():
    case = fz.Case(0, "dangling", "x", expect=["ghost"])
    assert fz._cli_problem(2, "", "fusec: internal error: x", (0, 1)).startswith("exit 2")
    assert fz._cli_problem(1, "", "Traceback (most recent call last):\n", (0, 1)) == "a traceback"
    assert fz._located("something\n", case, "m.onnx") == "exit 1 without an error: line"
    assert "names none of" in fz._located("fusec: error: /d/m/model.onnx: node 0 (Add): bad\n", case, "")
    assert fz._located("fusec: error: /d/m/model.onnx: node 0 (Add) reads 'ghost'\n", case, "") is None
    assert "does not name the model" in fz._located("fusec: error: node 0 reads 'ghost'\n", case, "")
    torch = pytest.importorskip("torch")
    a = torch.ones(3)
    assert fz._fx_compare(a, a.clone()) is None
    assert "disagrees with eager" in fz._fx_compare(a, a + 1e-3)
    assert "disagrees with eager" in fz._fx_compare(a, a + 1e-3, a.double() + 1e-3)
    assert fz._fx_compare(a, a + 1e-3, a.double()) is None        # as close to the f64 truth as eager is
    assert "eager gives" in fz._fx_compare(a, torch.ones(4))
    # a special value where eager has another: the float64 run decides (PyTorch's vectorised f32
    # gelu of +inf is NaN, its f64 gelu inf, as FDSL's)
    inf = torch.full((4,), float("inf"))
    assert "disagrees" in fz._fx_compare(inf, torch.full((4,), float("nan")))
    assert fz._fx_compare(inf, torch.full((4,), float("nan")), inf.double()) is None
    assert "disagrees" in fz._fx_compare(inf, torch.full((4,), float("nan")), torch.full((4,), float("nan")).double())
    assert "eager gives" in fz._fx_compare(a, a.double())
