"""Fallback per kernel (fusec/fallback.py, `--fallback`, on by default in the main job): a wrong
fused kernel is injected (the emitted module of any build whose plan puts the given ops in one
kernel adds 1 to every output); the run goes on with that kernel replaced by the unfused kernels
of its ops, the outputs are right, the report names the kernel, its ops and the error, and the
exit status is 4. `--no-fallback` keeps exit 3."""
import json
import os
from dataclasses import replace

import numpy as np
import pytest

from fusec.cli import FALLBACK_EXIT, main
from fusec.compiler import pipeline
from fusec.runtime import npz, reference

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOFTMAX = os.path.join(ROOT, "examples", "softmax.fdsl")
WRONG = '''

_right_{host} = {host}


def {host}(*args):
    """Injected by tests/runtime/test_fallback.py: every output off by one."""
    return tuple(out + 1 for out in _right_{host}(*args))
'''


@pytest.fixture
def wrong_when_fused(monkeypatch):
    """wrong_when_fused({a, b}): builds whose plan has ops a and b in one kernel come out wrong."""
    def install(ops: set[int]):
        kernels = next(s for s in pipeline.STAGES if s.name == "kernels")

        def run(job, st):
            kernels.run(job, st)
            if any(ops <= {op for op, _role in g.roles} for g in st.plan.kernels):
                host = st.emitted.entries[job.chain].host
                st.emitted = replace(st.emitted, source=st.emitted.source + WRONG.format(host=host))
        stages = tuple(replace(s, run=run) if s.name == "kernels" else s for s in pipeline.STAGES)
        monkeypatch.setattr(pipeline, "STAGES", stages)
    return install


ARGV = [SOFTMAX, "--chain", "softmax_rows", "--target", "cpu", "--bind", "M=4,N=8"]


@pytest.mark.slow
def test_a_wrong_fused_kernel_is_replaced_and_the_run_goes_on(wrong_when_fused, tmp_path, capsys):
    wrong_when_fused({1, 2})
    report, saved = tmp_path / "r.json", tmp_path / "out.npz"
    assert main(ARGV + ["--report", str(report), "--save", str(saved)]) == FALLBACK_EXIT == 4
    out, err = capsys.readouterr()
    assert "  fallback: kernel 0 (%1 reduce(maximumf), %2 map(subf,exp), %4 reduce(addf), %5 map(divf,mulf)) failed " \
           "the numerics check (out 0: " in out
    assert "MISMATCH" not in out and "-> ok" in out
    assert err.splitlines()[-1] == ("fusec: fallback: 1 chain ran with a fused kernel replaced by unfused ones "
                                    "(softmax_rows); exit status 4")
    data = json.loads(report.read_text())
    assert data["status"] == "fallback" and data["exit_status"] == 4 and data["failed"] == []
    (fb,) = data["fallbacks"]
    assert fb["chain"] == "softmax_rows" and fb["narrowed"]
    assert fb["kernels"] == [{"kernel": 0, "ops": ["%1 reduce(maximumf)", "%2 map(subf,exp)", "%4 reduce(addf)",
                                                    "%5 map(divf,mulf)"]}]
    assert fb["error"].startswith("out 0: max abs err 1")
    chain = data["chains"][0]
    assert chain["fallback"]["kernels"] == fb["kernels"] and all(n["ok"] for n in chain["numerics"])
    assert chain["plan"]["kernels"] == 4                 # the replaced kernel's ops, one kernel each
    entry = npz.load_npz(str(saved))["softmax_rows"]
    x = entry["in"]["x"]
    np.testing.assert_allclose(entry["out"]["0"], reference.run_chain(_softmax_rows(), [x], {"M": 4, "N": 8})[0],
                               rtol=1e-5, atol=1e-6)


def test_without_fallback_the_failure_is_exit_3(wrong_when_fused, capsys):
    wrong_when_fused({1, 2})
    assert main(ARGV + ["--no-fallback"]) == 3
    out, err = capsys.readouterr()
    assert "fallback" not in out and "MISMATCH" in out and "fusec: numerics failure" in err


def test_only_the_wrong_kernel_is_replaced(wrong_when_fused):
    import fusec
    from fusec.fallback import repair
    wrong_when_fused({4, 5})
    prog = fusec.compile(SOFTMAX, target="cpu",
                         options={"plans": {"softmax_rows": {"groups": [{"ops": [1, 2]}, {"ops": [4, 5]}]}}})
    compiled = prog.softmax_rows.compiled({"M": 4, "N": 8})
    x = reference.random_inputs(compiled.chain, compiled.binding, 0)
    assert not np.allclose(compiled.fused(*x)[0], reference.run_chain(compiled.chain, x, compiled.binding)[0])
    fb = repair(prog, compiled, x, "out 0: wrong")
    assert fb is not None and fb.narrowed
    assert fb.kernels == [{"kernel": 1, "ops": ["%4 reduce(addf)", "%5 map(divf,mulf)"]}]
    kept = [[o["id"] for o in g["ops"] if o["role"] != "init"] for g in fb.compiled.plan["groups"]]
    assert kept == [[1, 2], [4], [5]]                    # kernel 0 kept fused
    np.testing.assert_allclose(fb.compiled.fused(*x)[0], reference.run_chain(compiled.chain, x, compiled.binding)[0],
                               rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_no_fallback_when_the_unfused_kernels_are_wrong_too(wrong_when_fused, capsys):
    wrong_when_fused(set())                              # every build is wrong
    assert main(ARGV) == 3
    assert "fallback" not in capsys.readouterr().out


def _softmax_rows():
    import fusec
    return fusec.check(SOFTMAX).chain("softmax_rows")



# a kernel of a template, then a fused softmax the fixture makes wrong
TEMPLATE_CHAINS = {
    "attention": ("""chain t(q: f32[B, S, 32], k: f32[B, S, 32], v: f32[B, S, 32]) -> f32[B, S, 32] {
    p = softmax(q @ transpose(k) / 5.656854249492381, axis=-1)
    return softmax(p @ v, axis=-1)
}
""", {"groups": [{"ops": [0, 2, 3, 5, 6, 8, 9, 11], "attention": [16, 8]}, {"ops": [12, 13, 14, 15]}]}),
    "conv": ("""chain t(x: f32[B, 8, 12, 12], w: f32[8, 8, 3, 3]) -> f32[B, 8, 12, 12] {
    return softmax(relu(conv2d(x, w, padding=1)), axis=-1)
}
""", {"groups": [{"ops": [2, 3], "conv": "im2col"}, {"ops": [5, 6, 8, 9]}]}),    # (the model picks direct)
}


@pytest.mark.slow
@pytest.mark.parametrize("template", sorted(TEMPLATE_CHAINS))
def test_a_kept_kernel_keeps_its_template(wrong_when_fused, tmp_path, template):
    """The fallback's hand plan (plan/handplan.py: group_spec) keeps every other kernel's template
    and its config: an attention kernel stays one with its tiles, a conv keeps the algorithm the
    plan gave it, while the wrong kernel after it is replaced."""
    import fusec
    from fusec.fallback import repair
    src, plan = TEMPLATE_CHAINS[template]
    path = tmp_path / "t.fdsl"
    path.write_text(src)
    wrong_when_fused(set(plan["groups"][1]["ops"]))
    prog = fusec.compile(str(path), target="cpu", options={"plans": {"t": plan}})
    compiled = prog.t.compiled({"B": 2, "S": 16})
    kept, other = compiled.plan["groups"]
    assert kept[template] == plan["groups"][0][template]
    x = reference.random_inputs(compiled.chain, compiled.binding, 0)
    fb = repair(prog, compiled, x, "out 0: wrong")
    assert fb is not None and fb.narrowed and [k["kernel"] for k in fb.kernels] == [other["kernel"]]
    after = fb.compiled.plan["groups"][0]
    assert after["root"] == kept["root"] and after[template] == kept[template]
    assert len(fb.compiled.plan["groups"]) == 1 + len(other["ops"]) - sum(o["role"] == "init" for o in other["ops"])
    np.testing.assert_allclose(fb.compiled.fused(*x)[0], reference.run_chain(compiled.chain, x, compiled.binding)[0],
                               rtol=1e-4, atol=1e-5)
