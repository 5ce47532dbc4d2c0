"""Regression: under load the main job printed measured times many times the prediction and a
speedup that a quiet rerun did not reproduce, without a word. A timing now carries the load
average and the other runnable tasks when it started, and the report says when the figures
cannot be trusted: the machine was busy (load above the core count; on the cpu target, whose
parallel loops wait for every core, any other runnable task) or the runs spread widely."""
from fusec.report import ChainReport
from fusec.runtime.compare import compare
from fusec.runtime.executable import Executable, Timing, other_runnable, unreliable
from fusec.runtime.targets import Target

import numpy as np

PLAN = {"ops": 1, "kernels": 1, "groups": [{"kernel": 0, "ops": [{"id": 0, "label": "map(exp)", "role": "root"}],
                                            "serial": False, "block_tiles": [8], "thread_tiles": [], "threads": []}]}


def test_busy_spread_and_quiet_timings():
    assert Timing(1e-3, 0.9e-3, 10, load=0.2, cores=2, others=0, parallel=True).unreliable() is None
    assert Timing(1e-3, 0.9e-3, 10, load=3.5, cores=2).unreliable() == \
        "the machine was busy (load average 3.5 on 2 cores)"
    assert Timing(1e-3, 0.9e-3, 10, load=0.5, cores=2, others=1, parallel=True).unreliable() == \
        "1 other task kept a core busy, and the parallel loops wait for every core"
    assert Timing(1e-3, 0.9e-3, 10, load=0.5, cores=2, others=1, parallel=False).unreliable() is None
    assert Timing(3e-3, 1e-3, 10).unreliable() == "the runs spread widely (median 3.0x the minimum)"
    assert unreliable([None, Timing(3e-3, 1e-3, 10), Timing(3e-3, 1e-3, 10)]) == \
        "the runs spread widely (median 3.0x the minimum)"


def test_the_report_says_when_times_are_not_to_be_trusted():
    x = np.ones(4, np.float32)
    rep = ChainReport("c", "cpu", {}, PLAN, [x], [compare(x, x, "f32")], ["f32[4]"],
                      fused=Timing(1e-3, 0.9e-3, 10, load=4.0, cores=2), unfused=Timing(2e-3, 1.9e-3, 10))
    text = rep.format()
    assert ("  timing not reliable: the machine was busy (load average 4.0 on 2 cores); rerun on a quiet machine "
            "for figures to trust") in text.splitlines()
    d = rep.as_dict()
    assert d["timing_unreliable"] == "the machine was busy (load average 4.0 on 2 cores)"
    assert d["time"]["fused"]["load_average"] == 4.0
    quiet = ChainReport("c", "cpu", {}, PLAN, [x], [compare(x, x, "f32")], ["f32[4]"],
                        fused=Timing(1e-3, 0.9e-3, 10, load=0.1, cores=2))
    assert "not reliable" not in quiet.format() and quiet.as_dict()["timing_unreliable"] is None


def test_a_real_timing_records_the_machine_state():
    exe = Executable(lambda a: (a + 1,), Target("cpu"), [np.dtype(np.float32)], "t")
    t = exe.time([np.ones(4, np.float32)], min_runs=3, max_runs=3)
    assert t.cores >= 1 and t.parallel is True and t.runs == 3
    assert t.load is None or t.load >= 0
    assert other_runnable() is None or other_runnable() >= 0
