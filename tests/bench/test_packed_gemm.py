"""bench/packed_gemm.py: the prototype GEMM on packed weights gives NumPy's product (partial row
and K blocks), runs on 256-bit FMAs, and its bench writes every implementation's times."""
import json
import re

import numpy as np
import pytest

from bench import packed_gemm


@pytest.mark.parametrize("m,k,n,kb", [(13, 300, 32, 256), (6, 7, 16, 4), (2, 5, 48, 256)])
def test_the_packed_product_is_numpys(m, k, n, kb):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    c = rng.standard_normal((m, n), dtype=np.float32)       # the product is added to what c holds
    want = c.astype(np.float64) + a.astype(np.float64) @ b
    packed_gemm.gemm_packed(a, packed_gemm.pack(b), c, kb)
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4)


def test_the_micro_kernel_runs_on_256_bit_fmas():
    a, c = np.ones((6, 4), np.float32), np.zeros((6, 16), np.float32)
    packed_gemm.gemm_packed(a, packed_gemm.pack(np.ones((4, 16), np.float32)), c, 256)   # compiled here
    assert (c == 4).all()
    asm = packed_gemm.gemm_packed.inspect_asm(packed_gemm.gemm_packed.signatures[0])
    assert len(re.findall(r"vfmadd\w+\s+[^\n]*%ymm", asm)) >= 12


def test_pack_refuses_a_width_that_is_not_whole_panels():
    with pytest.raises(ValueError, match="N = 20 is not a multiple of 16"):
        packed_gemm.pack(np.zeros((4, 20), np.float32))


@pytest.mark.parametrize("argv,message", [(["--shapes", "8x16x20"], "N = 20 is not a multiple of 16"),
                                          (["--kb", "0"], "0 is not a positive number of K steps")])
def test_bad_options_are_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        packed_gemm.main(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.slow       # a cpu build of the chain: ~18 s
def test_a_run_writes_every_implementation_with_its_times(tmp_path):
    assert packed_gemm.main(["--shapes", "8x40x32", "--kb", "16", "--seconds", "0.05", "--out", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("packed-gemm-*.json")
    (row,) = json.loads(path.read_text())["shapes"]
    assert (row["m"], row["k"], row["n"], row["kb"]) == (8, 40, 32, 16)
    assert set(row["impls"]) == {"fusec (OpenBLAS, w an argument)", "onnxruntime (w a constant)",
                                 "prototype (w packed once)"}
    assert all(s["runs"] >= 10 and 0 < s["min_ms"] <= s["median_ms"] for s in row["impls"].values())
    assert max(row["max_abs_diff"].values()) < 1e-4
