"""Regression: nothing limited sizes: `f32[100000, 100000]` or `--bind M=100000000` (softmax)
were a MemoryError or ValueError (exit 2) after trying to allocate, even under `--emit plan`,
and a request below RAM was really allocated. A chain whose buffers would exceed the memory
limit (a quarter of this machine's memory, or --max-memory) is refused first, at the largest
tensor, naming it and the sizes."""
import os
import time
import tracemalloc

import pytest

import fusec
from fusec.cli import main
from fusec.dsl.diagnostics import FdslError
from fusec.runtime.memory import footprint, parse_size

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOFTMAX = os.path.join(ROOT, "examples", "softmax.fdsl")


@pytest.mark.parametrize("extra", [[], ["--emit", "plan"], ["--target", "reference"]])
def test_a_huge_binding_is_refused_at_once_without_allocating(capsys, extra):
    argv = [SOFTMAX, "--chain", "softmax_rows", "--bind", "M=100000000", *extra]
    main(argv)                       # once, so that imports and caches are not timed
    capsys.readouterr()
    tracemalloc.start()
    t0 = time.perf_counter()
    rc = main(argv)
    seconds = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    err = capsys.readouterr().err
    assert rc == 1
    assert seconds < 0.5 and peak < 50 << 20
    assert ("softmax.fdsl:2:20: error: input 'x' is f32[100000000, 64] (M=100000000, N=64), 23.8 GiB: running "
            "chain 'softmax_rows' would need 95.4 GiB, over the memory limit of") in err
    assert "--max-memory SIZE to change it" in err


def test_max_memory_sets_the_limit(tmp_path, capsys):
    f = tmp_path / "m.fdsl"
    f.write_text("chain f(x: f32[1000, 1000]) -> f32[1000, 1000] {\n    return exp(x)\n}\n")
    assert main([str(f), "--target", "reference", "--max-memory", "4M"]) == 1
    err = capsys.readouterr().err
    assert "input 'x' is f32[1000, 1000], 3.81 MiB: running chain 'f' would need 15.3 MiB, over the memory limit " \
           "of 4 MiB (the given limit; --max-memory SIZE to change it)" in err
    assert main([str(f), "--target", "reference", "--max-memory", "64M"]) == 0
    assert main([str(f), "--target", "reference", "--max-memory", "lots"]) == 1
    assert "argument --max-memory: 'lots' is not a size" in capsys.readouterr().err


def test_literal_shapes_beyond_memory_are_refused(tmp_path, capsys):
    f = tmp_path / "h.fdsl"
    f.write_text("chain f(x: f32[100000, 100000]) -> f32[100000, 100000] {\n    return x\n}\n")
    assert main([str(f), "--target", "reference"]) == 1
    assert "input 'x' is f32[100000, 100000], 37.3 GiB" in capsys.readouterr().err


def test_the_library_refuses_too(tmp_path):
    prog = fusec.compile("chain f(x: f32[M, 8]) -> f32[M, 8] { return x * 2.0 }", target="reference",
                         max_memory=1 << 20)
    with pytest.raises(FdslError, match="over the memory limit of 1 MiB .*max_memory=BYTES"):
        prog.f.check(binding={"M": 100000})
    assert prog.f.check(binding={"M": 4})[0].ok


def test_the_estimate_follows_the_reference_which_frees_each_value_after_its_last_use():
    chain = fusec.check("chain f(x: f32[N]) -> f32[N] { return exp(exp(exp(exp(x)))) }").chains[0]
    n = 1 << 20
    fp = footprint(chain, {"N": n})
    # the caller's input, at most two live values of the reference (an op's input and its result),
    # and the build's copy of the output
    assert fp.peak == 4 * n * 4
    assert fp.largest.op == "param"


def test_sizes_parse():
    assert parse_size("8G") == 8 << 30 and parse_size("512MiB") == 512 << 20 and parse_size("1.5k") == 1536
    assert parse_size("1000") == 1000
    for bad in ("", "G", "1x", "-1M", "0"):
        with pytest.raises(ValueError):
            parse_size(bad)
