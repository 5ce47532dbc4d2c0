"""The command line: exit codes, diagnostics on stderr, stages, npz layout, golden tests."""
import os
import shutil
import subprocess
import sys
import textwrap
from dataclasses import replace

import numpy as np
import pytest

from fusec.cli import main
from fusec.runtime import npz

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return str(p)


def test_reference_run_prints_shapes_and_checksums(capsys):
    assert main([os.path.join(EXAMPLES, "mlp.fdsl"), "--target", "reference", "--bind", "M=4,D=8", "--bind", "H=16"]) == 0
    out = capsys.readouterr().out
    assert "chain mlp [M=4, D=8, H=16]: target reference" in out
    assert "out 0: f32[4, 8]  sum=" in out


def test_user_error_exits_1_with_location_and_no_traceback(tmp_path, capsys):
    bad = write(tmp_path, "bad.fdsl", """\
        chain f(x: f32[4], b: f32[3]) -> f32[4] {
            h = x + b
            return h
        }""")
    assert main([bad]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:2:13: error: cannot add f32[4] and f32[3]: shapes do not broadcast (4 vs 3)" in err
    assert "Traceback" not in err


def test_syntax_error_exits_1(tmp_path, capsys):
    bad = write(tmp_path, "syn.fdsl", "chain f(x: f32[4]) -> f32[4] {\n    h = x +\n    return h\n}\n")
    assert main([bad]) == 1
    err = capsys.readouterr().err
    assert "syn.fdsl:2:" in err and "expected an expression after '+'" in err


def test_missing_file_and_bad_bind_exit_1(capsys):
    assert main(["/nonexistent/x.fdsl"]) == 1
    assert "cannot read /nonexistent/x.fdsl" in capsys.readouterr().err
    assert main([os.path.join(EXAMPLES, "mlp.fdsl"), "--bind", "M=abc"]) == 1
    assert "--bind expects NAME=SIZE" in capsys.readouterr().err


def test_emit_ast_and_typed(capsys):
    f = os.path.join(EXAMPLES, "softmax.fdsl")
    assert main([f, "--emit", "ast"]) == 0
    ast_text = capsys.readouterr().out
    assert "softmax_rows" in ast_text and "softmax_temperature" in ast_text
    assert main([f, "--emit", "typed", "--chain", "softmax_rows"]) == 0
    typed = capsys.readouterr().out
    assert typed.startswith("chain softmax_rows(x: f32[M, N]) -> f32[M, N] {")
    assert "softmax %x {axis=1} : f32[M, N]" in typed


def test_save_then_inputs_round_trip(tmp_path, capsys):
    f = os.path.join(EXAMPLES, "reductions.fdsl")
    out1 = str(tmp_path / "a.npz")
    assert main([f, "--target", "reference", "--bind", "R=3", "--save", out1]) == 0
    data = npz.load_npz(out1)
    assert set(data) == {"row_stats", "l2_normalize", "logsumexp"}
    assert data["row_stats"]["in"]["x"].shape == (3, 4, 32)
    assert sorted(data["row_stats"]["out"]) == ["0", "1", "2"]
    out2 = str(tmp_path / "b.npz")
    first = capsys.readouterr().out
    assert main([f, "--target", "reference", "--inputs", out1, "--save", out2]) == 0   # R from the inputs
    assert capsys.readouterr().out == first
    again = npz.load_npz(out2)
    np.testing.assert_array_equal(again["logsumexp"]["out"]["0"], data["logsumexp"]["out"]["0"])


def test_inputs_that_do_not_fit_are_user_errors(tmp_path, capsys):
    f = write(tmp_path, "f.fdsl", "chain f(x: f32[M, 4]) -> f32[M, 4] {\n    return x\n}\n")
    bad = str(tmp_path / "in.npz")
    npz.save(bad, {"f": ({"x": np.ones((2, 5), np.float32)}, [])})
    assert main([f, "--inputs", bad]) == 1
    assert "f.fdsl:1:9: error: input 'x' has shape (2, 5) but is declared f32[M, 4] (5 vs 4 at axis 1)" \
        in capsys.readouterr().err


def test_golden_tests_update_then_pass_then_detect_a_change(tmp_path, capsys):
    f = write(tmp_path, "g.fdsl", "chain g(x: f32[M, 4]) -> f32[M] {\n    return sum(exp(x), axis=1)\n}\n")
    assert main(["test", f, "--update", "--bind", "M=3"]) == 0
    assert os.path.exists(str(tmp_path / "g.golden.npz"))
    assert main(["test", str(tmp_path)]) == 0
    assert "1 passed, 0 failed" in capsys.readouterr().out
    (tmp_path / "g.fdsl").write_text("chain g(x: f32[M, 4]) -> f32[M] {\n    return sum(exp(x), axis=1) * 1.001\n}\n")
    assert main(["test", str(tmp_path)]) == 3
    out = capsys.readouterr().out
    assert "g.fdsl::g [reference] FAIL" in out and "0 passed, 1 failed" in out


def test_every_example_matches_its_golden_file(capsys):
    assert main(["test", EXAMPLES]) == 0
    out = capsys.readouterr().out
    assert " 0 failed" in out
    n_golden = len([f for f in os.listdir(EXAMPLES) if f.endswith(".golden.npz")])
    assert n_golden == len([f for f in os.listdir(EXAMPLES) if f.endswith(".fdsl")]) >= 10


def test_console_script_is_installed_and_exit_status_propagates(tmp_path):
    exe = shutil.which("fusec") or os.path.join(os.path.dirname(sys.executable), "fusec")
    bad = write(tmp_path, "bad.fdsl", "chain f(x: f32[4]) -> f32[4] {\n    return y\n}\n")
    r = subprocess.run([exe, bad], capture_output=True, text=True)
    assert r.returncode == 1
    assert "bad.fdsl:2:12: error: unknown name 'y'" in r.stderr
    assert "    return y\n           ^" in r.stderr



@pytest.mark.parametrize("command", ["", "test", "compile", "run", "cache", "import"])
def test_every_command_has_its_help_and_its_module(command, capsys):
    """fusec/cli/ has one module per command, each with parser() and run(args); main dispatches
    (`fusec import` is importer.py: `import` cannot name a module)."""
    import importlib
    argv = [command, "--help"] if command else ["--help"]
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: fusec {command}".rstrip() + " ")
    module = importlib.import_module(f"fusec.cli.{ {'': 'job', 'import': 'importer'}.get(command, command)}")
    assert callable(module.parser) and callable(module.run)
    assert module.parser().prog == f"fusec {command}".rstrip()


def test_a_bad_flag_of_each_command_exits_1_and_names_its_help(capsys):
    for argv, prog in (([os.path.join(EXAMPLES, "mlp.fdsl"), "--no-such-flag"], "fusec"),
                       (["test", EXAMPLES, "--no-such-flag"], "fusec test"),
                       (["compile", "x.fdsl", "-o", "d", "--no-such-flag"], "fusec compile"),
                       (["run", "d", "--no-such-flag"], "fusec run"), (["cache", "nothing"], "fusec cache")):
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert err.startswith("fusec: error: ") and err.endswith(f"(see {prog} --help)\n") and err.count("\n") == 1


def test_unknown_pass_name_is_a_usage_error(capsys):
    assert main([os.path.join(EXAMPLES, "ew_chain.fdsl"), "--emit", "graph", "--disable-pass", "no-such-pass"]) == 1
    assert "invalid choice: 'no-such-pass'" in capsys.readouterr().err


def test_emit_compiler_stages(capsys, tmp_path):
    f = os.path.join(EXAMPLES, "softmax.fdsl")
    assert main([f, "--chain", "softmax_rows", "--bind", "M=8,N=16", "--emit", "plan", "--target", "cuda-sim"]) == 0
    plan = capsys.readouterr().out
    assert plan.startswith("plan softmax_rows (target gpu, fused): 4 compute ops -> 1 kernel")
    # without --target, --emit plans for the target a run would use (here, with no GPU: the cpu)
    assert main([f, "--chain", "softmax_rows", "--bind", "M=8,N=16", "--emit", "plan"]) == 0
    assert capsys.readouterr().out.startswith("plan softmax_rows (target cpu, fused)")
    assert main([f, "--chain", "softmax_rows", "--bind", "M=8,N=16", "--emit", "gpu", "--target", "cuda"]) == 0
    assert capsys.readouterr().out.count("gpu.launch ") == 1
    assert main([f, "--chain", "softmax_rows", "--bind", "M=8,N=16", "--emit", "gpu", "--target", "cpu"]) == 0
    assert "scf.parallel" in capsys.readouterr().out
    assert main([f, "--chain", "softmax_rows", "--bind", "M=8,N=16", "--emit", "kernels", "--no-fuse",
                 "--target", "cuda"]) == 0
    assert capsys.readouterr().out.count("@cuda.jit(\"void(") == 4
    assert main([f, "--chain", "softmax_rows", "--bind", "M=8,N=16", "--target", "cpu", "--dump-dir", str(tmp_path)]) == 0
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names[0] == "softmax_rows.00-ast.txt" and names[1] == "softmax_rows.01-typed.txt"
    assert names[-1] == "softmax_rows.07-kernels.py" and len(names) == 8
    assert main([f, "--emit", "linalg", "--target", "reference", "--chain", "softmax_rows"]) == 0
    assert "linalg.generic" in capsys.readouterr().out
    assert main([f, "--emit", "plan", "--target", "reference"]) == 1
    assert "--emit plan needs a compiled target" in capsys.readouterr().err


def test_internal_error_exits_2_with_a_reproduction_hint(monkeypatch, capsys):
    from fusec.compiler import pipeline
    from fusec.compiler.errors import CompilerInternalError

    def broken(job, st):
        raise CompilerInternalError("tiled", "transform script failed: synthetic")

    stages = tuple(replace(s, run=broken) if s.name == "tiled" else s for s in pipeline.STAGES)
    monkeypatch.setattr(pipeline, "STAGES", stages)
    f = os.path.join(EXAMPLES, "ew_chain.fdsl")
    assert main([f, "--chain", "ew_chain", "--bind", "M=4,N=8", "--target", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "fusec: internal error in stage tiled" in err and "synthetic" in err
    assert "reproduce with: fusec " in err and "--dump-dir" in err
    assert "Traceback" not in err


def test_bf16_round_trips_through_npz_and_runs_on_the_numba_targets(tmp_path, capsys):
    f = write(tmp_path, "h.fdsl", "chain h(x: bf16[4]) -> bf16[4] {\n    return x * 2\n}\n")
    saved = str(tmp_path / "h.npz")
    assert main([f, "--target", "reference", "--save", saved]) == 0
    first = capsys.readouterr().out
    assert main([f, "--target", "reference", "--inputs", saved]) == 0
    assert capsys.readouterr().out == first
    for target in ("cpu", "cuda-sim"):        # the saved inputs, read back as bf16, and checked
        assert main([f, "--target", target, "--inputs", saved]) == 0
        out = capsys.readouterr().out
        assert "out 0 bf16[4]: max abs err 0, max rel err 0" in out and out.rstrip().endswith("-> ok")
