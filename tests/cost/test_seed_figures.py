"""The seeds' worked figures, reproduced by the model's own arithmetic.

The seeds' device: 900 GB/s, 19.5 TFLOP/s, 5 us per launch (the `seed` profile). Their figures add
compute and memory time (no overlap), which is what reproduces them to the digit: for one
elementwise op of 0.5 MFLOP reading an 8 MB tensor and writing an 8 MB one,
    0.5e6 / 19.5e12 + (8e6 + 8e6) / 900e9 = 0.026 us + 17.78 us = 17.80 us,
eight of them 142.4 us; fused, the eight ops read the input once and write the output once:
    4e6 / 19.5e12 + 16e6 / 900e9 = 0.205 us + 17.78 us = 17.98 us  (speedup 7.92x).
Launches are not in those two figures (the seeds count them separately: (500 - 100) x 5 us).
"""
import os

import pytest

from fusec.compiler.plan.cost import launch_savings, roofline_time
from fusec.compiler.plan.hardware import GPUS

SEED = GPUS["seed"]
EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "examples")


def test_the_seed_device_is_the_seeds_device():
    assert SEED.bandwidth == 900e9 and SEED.peak_flops == 19.5e12 and SEED.launch_s == 5e-6
    assert not SEED.overlap


def test_eight_elementwise_ops_unfused_142us_fused_18us_speedup_7_9():
    per_op = roofline_time(0.5e6, 8e6 + 8e6, SEED)
    unfused = 8 * per_op
    fused = roofline_time(8 * 0.5e6, 8e6 + 8e6, SEED)
    assert per_op == pytest.approx(17.80e-6, rel=1e-3)
    assert unfused == pytest.approx(142.4e-6, rel=1e-3)
    assert fused == pytest.approx(18.0e-6, rel=2e-3)
    assert unfused / fused == pytest.approx(7.9, rel=5e-3)


def test_three_conv_sized_ops_gain_little():
    # compute-bound: 50 GFLOP each is 2.564 ms; their 100 MB in and out add 0.222 ms apiece
    unfused = 3 * roofline_time(50e9, 100e6 + 100e6, SEED)
    fused = roofline_time(3 * 50e9, 100e6 + 100e6, SEED)
    assert unfused == pytest.approx(8.359e-3, rel=1e-3)
    assert unfused / fused == pytest.approx(1.06, abs=0.005)


def test_memory_bound_speedup_is_the_ratio_of_bytes():
    # kernels moving 8, 3 and 2 units of traffic, fused into one moving 7: (8+3+2)/7 = 1.86
    unit = 1e6
    unfused = sum(roofline_time(0, n * unit, SEED) for n in (8, 3, 2))
    fused = roofline_time(0, 7 * unit, SEED)
    assert unfused / fused == pytest.approx((8 + 3 + 2) / 7, rel=1e-9)
    assert round(unfused / fused, 2) == 1.86


def test_launch_savings_500_to_100_kernels_is_2ms():
    assert launch_savings(500, 100, SEED) == pytest.approx(2e-3)
    assert roofline_time(0, 0, SEED, launches=400) == pytest.approx(2e-3)


def test_conv_bn_relu_moves_6_intermediate_sized_tensors_op_by_op_and_2_fused():
    from fusec.compiler.options import CompileOptions
    from fusec.compiler.pipeline import compile_typed
    import fusec
    chain = fusec.check(os.path.join(EXAMPLES, "conv_bn_relu.fdsl")).chain("conv_bn_relu")
    st = compile_typed(chain, {"B": 2}, options=CompileOptions(target="gpu", hardware=GPUS["h200"]), until="plan")
    big = dict(st.plan.transfers)
    # conv reads x, writes y; batchnorm reads y, writes z; relu reads z, writes out: 6; fused: x in, out out
    assert big["eager"] == 6 and big["fused"] == 2
    # our unfused build already merged batchnorm's apply and relu (linalg-fuse-elementwise-ops)
    assert big["unfused"] == 4
    from fusec.compiler.plan.describe import transfers_line
    assert transfers_line(st.plan.summary()["model"]["big_transfers"]) == \
        "intermediate-sized global reads/writes: 6 op by op, 4 unfused, 2 fused (-67%)"
