"""Hardware profiles are data: datasheet GPUs, a cpu profile measured once and cached on disk."""
import json
from dataclasses import replace

import pytest

from fusec.compiler import calibrate
from fusec.compiler.calibrate import hardware_profile
from fusec.compiler.plan import hardware
from fusec.compiler.plan.hardware import GPUS, HardwareError, get


@pytest.mark.parametrize("name", ["h200", "h100", "a100"])
def test_gpu_profiles_have_every_limit_the_model_uses(name):
    p = GPUS[name]
    assert p.kind == "gpu" and p.bandwidth > 1e12 and p.peak_flops > 1e13 and p.peak_flops_fp16 > p.peak_flops
    assert p.units > 100 and p.onchip_per_unit >= p.onchip_per_block > 96 * 1024
    assert p.regs_per_unit == 65536 and p.regs_per_thread == 255 and p.max_threads_per_block == 1024
    assert p.l2_bytes >= 40 << 20 and p.launch_s > 0 and p.clock_hz > 1e9 and p.mem_latency_s > 0
    assert p.weight("exp") > 1 and p.weight("addf") == 1


def test_names_select_profiles_and_unknown_names_say_which_exist():
    assert get("H100") is GPUS["h100"]
    assert hardware_profile("H100", "gpu") is GPUS["h100"]
    assert hardware_profile(None, "gpu") is GPUS[hardware.DEFAULT_GPU]
    with pytest.raises(HardwareError, match="known: h200, h100, a100, seed, cpu, device"):
        get("v100")
    with pytest.raises(HardwareError, match="the cpu profile is measured"):
        get("cpu")


def test_device_without_a_gpu_falls_back_to_the_default_profile(monkeypatch):
    monkeypatch.setattr(hardware, "_DEVICE", None)
    assert get("device").name == hardware.DEFAULT_GPU       # the simulator has no properties


def test_cpu_profile_is_read_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(calibrate, "_CPU", None)
    fake = replace(GPUS["seed"], name="cpu", kind="cpu", units=2, bandwidth=12.5e9)
    key = hardware.profile_key()
    (tmp_path / "hardware-cpu.json").write_text(json.dumps({"key": key, "profile": fake.as_dict()}))
    monkeypatch.setattr(calibrate, "measure_cpu", lambda cores=None: pytest.fail("measured instead of cached"))
    p = hardware_profile("cpu", "cpu")
    assert p.bandwidth == 12.5e9 and p.kind == "cpu" and dict(p.weights) == dict(fake.weights)
    assert hardware.cached_cpu_profile() == p
    monkeypatch.setattr(calibrate, "_CPU", None)


def test_a_stale_cache_is_measured_again_and_rewritten(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(calibrate, "_CPU", None)
    (tmp_path / "hardware-cpu.json").write_text(json.dumps({"key": "another machine", "profile": {}}))
    assert hardware.cached_cpu_profile() is None
    measured = replace(GPUS["seed"], name="cpu", kind="cpu", units=2, bandwidth=7e9)
    monkeypatch.setattr(calibrate, "measure_cpu", lambda cores=None: measured)
    notices = []
    assert calibrate.cpu_profile(notice=notices.append).bandwidth == 7e9
    assert notices and "measuring this machine" in notices[0]
    data = json.loads((tmp_path / "hardware-cpu.json").read_text())
    assert data["key"] == hardware.profile_key() and data["profile"]["bandwidth"] == 7e9
    monkeypatch.setattr(calibrate, "_CPU", None)


def test_the_measured_cpu_profile_is_plausible():
    p = calibrate.cpu_profile()          # measured once per machine (and emitter), then cached
    assert p.kind == "cpu" and p.units >= 1 and p.source == "measured"
    assert 1e9 < p.bandwidth < 2e12 and p.cache_bandwidth >= p.bandwidth
    assert p.peak_flops > 1e9 and 0 < p.launch_s < 1e-2
    assert p.onchip_per_unit > 0 and p.l2_bytes >= p.onchip_per_unit
    assert p.weight("exp") >= 1 and p.weight("reduce") >= 1
    assert p.vector_bits in (0, 256, 512)


@pytest.mark.parametrize("lanes, times, bits", [
    (16, {0: 1.2e-9, 512: 0.9e-9}, 512),      # AVX-512, 25% faster at 512 bits: taken
    (16, {0: 1.0e-9, 512: 0.95e-9}, 0),       # 5% faster: not worth LLVM's tuning against it
    (8, None, 0),                             # AVX2: nothing to measure
])
def test_the_vector_width_is_the_measured_faster_one(monkeypatch, lanes, times, bits):
    monkeypatch.setattr(calibrate, "_simd_lanes", lambda: lanes)
    probed = []

    def per_point(src, points, vector_bits):
        probed.append(vector_bits)
        return times[vector_bits]
    monkeypatch.setattr(calibrate, "_per_point", per_point)
    failed = []
    got, note = calibrate._vector_bits(failed)
    assert got == bits and not failed
    assert sorted(probed) == ([] if times is None else [0, 512])
    if times is not None:
        assert f"{times[512] * 1e9:.3f} ns/point at 512 bits, {times[0] * 1e9:.3f} at LLVM's default" in note
    assert note.startswith("vectors: 512 bits" if bits else "vectors: LLVM")
