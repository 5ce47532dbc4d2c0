"""Regression: a corrupted `hardware-cpu.json` (`[]`, bandwidth 0 or "fast") or `autotune.json`
made every later run exit 2 until the file was deleted (and the hint never mentioned the cache);
`FUSEC_CACHE_DIR` pointing at a file re-measured silently on every run. An invalid entry is now
reported in one line, moved aside and rebuilt; a cache directory that is a file is an error."""
import json
import os
from dataclasses import replace

import pytest

from fusec.cli import main
from fusec.compiler import calibrate
from fusec.compiler.errors import CacheError
from fusec.compiler.plan import autotune, hardware
from fusec.compiler.plan.hardware import GPUS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MEASURED = replace(GPUS["seed"], name="cpu", kind="cpu", units=2, bandwidth=9e9)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(calibrate, "_CPU", None)
    monkeypatch.setattr(calibrate, "measure_cpu", lambda cores=None: MEASURED)
    yield tmp_path
    monkeypatch.setattr(calibrate, "_CPU", None)


def profile_with(**changes):
    d = replace(GPUS["seed"], name="cpu", kind="cpu", units=2).as_dict()
    d.update(changes)
    return {"key": hardware.profile_key(), "profile": d}


@pytest.mark.parametrize("content, why", [
    ("[]", "is not a cached profile"),
    ("{not json", "is not JSON"),
    (profile_with(bandwidth=0), "is invalid (bandwidth is 0, not a positive number)"),
    (profile_with(bandwidth="fast"), "is invalid (bandwidth is \"fast\", not a number)"),
    (profile_with(weights={"exp": -1}), "is invalid (weights is not an object of positive numbers)"),
    (profile_with(extra=1), "is invalid (unknown field 'extra')"),
])
def test_an_invalid_cpu_profile_is_reported_moved_aside_and_measured_again(cache, content, why):
    path = cache / "hardware-cpu.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    notices = []
    assert calibrate.cpu_profile(notice=notices.append) is MEASURED
    assert len(notices) == 2 and notices[0].startswith(f"the cached cpu profile {path} {why}")
    assert notices[0].endswith("; moved it to hardware-cpu.json.invalid and measuring again")
    assert "measuring this machine" in notices[1]
    assert (cache / "hardware-cpu.json.invalid").exists()
    assert json.loads(path.read_text())["profile"]["bandwidth"] == 9e9          # rebuilt


def test_a_valid_cached_profile_is_used_without_a_word(cache):
    (cache / "hardware-cpu.json").write_text(json.dumps(profile_with(bandwidth=5e9)))
    notices = []
    assert calibrate.cpu_profile(notice=notices.append).bandwidth == 5e9 and notices == []


def test_a_cache_directory_that_is_a_file_is_an_error(tmp_path, monkeypatch, capsys):
    f = tmp_path / "file"
    f.write_text("")
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(f))
    monkeypatch.setattr(calibrate, "_CPU", None)
    monkeypatch.setattr(calibrate, "measure_cpu", lambda cores=None: pytest.fail("measured"))
    with pytest.raises(CacheError):
        calibrate.cpu_profile()
    rc = main([os.path.join(ROOT, "examples", "softmax.fdsl"), "--target", "cpu", "--emit", "plan", "--bind", "M=4,N=8"])
    assert rc == 1
    assert capsys.readouterr().err == (f"fusec: error: FUSEC_CACHE_DIR={f} is not a directory; point it at a directory "
                                       "(fusec caches the measured cpu profile there)\n")
    monkeypatch.setattr(calibrate, "_CPU", None)


def test_a_cache_that_cannot_be_written_is_said(tmp_path, monkeypatch):
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(calibrate, "_CPU", None)
    monkeypatch.setattr(calibrate, "measure_cpu", lambda cores=None: MEASURED)
    monkeypatch.setattr(hardware, "cpu_cache_path", lambda: blocker / "hardware-cpu.json")
    monkeypatch.setattr(calibrate, "cpu_cache_path", lambda: blocker / "hardware-cpu.json")
    notices = []
    calibrate.cpu_profile(notice=notices.append)
    assert notices[-1].startswith(f"cannot cache the cpu profile in {blocker / 'hardware-cpu.json'} (")
    assert notices[-1].endswith("); it will be measured again by every run")
    monkeypatch.setattr(calibrate, "_CPU", None)


@pytest.mark.parametrize("content", ["[]", "{", json.dumps({"k": {"tiles": {"block": [8, -1], "mapped": [0]}}}),
                                     json.dumps({"k": {"tiles": {"block": [8], "mapped": [3]}}}),
                                     json.dumps({"k": "tiles"})])
def test_an_invalid_autotune_cache_is_reported_moved_aside_and_rebuilt(tmp_path, capsys, content):
    path = tmp_path / "autotune.json"
    path.write_text(content)
    assert autotune.load_cache(path) == {}
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"fusec: the autotune cache {path} ")
    assert "moved it to autotune.json.invalid and tuning again" in err
    assert not path.exists() and (tmp_path / "autotune.json.invalid").exists()
    good = {"k": {"tiles": {"block": [8, 0], "thread": [], "mapped": [0]}, "trials": []}}
    path.write_text(json.dumps(good))
    assert autotune.load_cache(path) == good and capsys.readouterr().err == ""


def test_the_internal_error_hint_names_the_cache(monkeypatch, capsys):
    from fusec import cli
    monkeypatch.setattr(cli, "_cmd_main", lambda args: 1 / 0)
    assert main([os.path.join(ROOT, "examples", "softmax.fdsl")]) == 2
    assert "setting FUSEC_CACHE_DIR to an empty directory rules the cache out" in capsys.readouterr().err


def test_measuring_the_cpu_is_announced_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(calibrate, "_CPU", None)
    monkeypatch.setattr(calibrate, "measure_cpu", lambda cores=None: MEASURED)
    softmax = os.path.join(ROOT, "examples", "softmax.fdsl")
    argv = [softmax, "--target", "cpu", "--emit", "plan", "--bind", "M=4,N=8", "--chain", "softmax_rows"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert [x for x in err.splitlines() if x.startswith("fusec: ")] == [
        f"fusec: measuring this machine for the cpu cost model (about 10 s, once; cached in "
        f"{tmp_path / 'hardware-cpu.json'})"]
    monkeypatch.setattr(calibrate, "_CPU", None)
    assert main(argv) == 0                              # the second run reads the cache: no word
    assert "fusec: " not in capsys.readouterr().err
    monkeypatch.setattr(calibrate, "_CPU", None)
