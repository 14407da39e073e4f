"""benchmarks/gpu_check.py without a GPU: it says so in one line and exits 0, and its analysis
and table work on a run log that a fake H100 wrote (so a lent GPU's minutes are not spent
finding a bug in the printing)."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from trainmeter.sources import HostSource, NoneBackend, open_backend
from trainmeter.sources.fake import FAKE_PID
from trainmeter.supervisor.live import Live
from trainmeter.supervisor.sampler import Sampler

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_check.py"


def _module():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_without_a_gpu_it_prints_one_line_and_exits_0():
    probe = open_backend(None)
    probe.close()
    if not isinstance(probe, NoneBackend):
        pytest.skip("NVML sees a GPU here: the real check would run")
    out = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True,
                         timeout=60)  # fmt: skip
    assert out.returncode == 0
    assert out.stdout.count("\n") == 1
    assert out.stdout.startswith("gpu_check: no NVIDIA GPU here (")


class Clock:
    def __init__(self, t: float = 1_700_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _fake_run(tmp_path, seconds=30.0):
    """A run log sampled at 4 Hz from a fake H100 for ``seconds`` of its script."""
    gc = _module()
    clock = Clock()
    live = Live(tmp_path)
    live.open_run("matmul", ["python", "-c", "..."], {"dtype": "bf16"})
    backend = open_backend("fake:h100", clock=clock)
    static = gc.static_facts(backend)
    sampler = Sampler(live, backend, HostSource(), hz=gc.SAMPLE_HZ, clock=clock)
    t_start = clock.t
    while clock.t < t_start + seconds:
        clock.t += 1.0 / gc.SAMPLE_HZ
        sampler.tick()
    sampler.stop()
    snap = live.close_run("ok")
    log = [json.loads(x) for x in live.log_path.read_text().splitlines()]
    log = [r for r in log if r["k"] != "checkpoint"]  # checkpoints: state, not records
    return gc, static, log, snap, t_start


def test_the_matmul_analysis_and_table_on_a_fake_h100(tmp_path):
    gc, static, log, snap, t0 = _fake_run(tmp_path)
    assert static["name"] == "NVIDIA H100 80GB HBM3" and static["peak_bf16"] == 989.5e12
    assert static["gpm"] and static["mig"] == "off" and static["driver"] == "550.54.15"
    child = {"pid": FAKE_PID, "n": 8192, "iters": 4000, "seconds": 15.0, "t0": t0 + 10,
             "t1": t0 + 25, "tflops": 2 * 8192**3 * 4000 / 15.0 / 1e12, "device": "H100",
             "uuid": "", "torch": "2.x", "cuda": "12.4"}  # fmt: skip
    tm = {"pid": 999, "smi_pids": [], "smi_error": "nvidia-smi not found", "libcuda_in_tm": False}
    m = gc.analyze_matmul(child, log, snap, tm, static["peak_bf16"])
    assert m["gpm_present"] == ["dram_active", "sm_active", "sm_occupancy", "tensor_active"]
    assert m["gpm_absent"] == {}
    assert m["inside"] == 4 * 15  # 4 Hz: 60 windows of 0.25 s wholly inside the 15 s loop
    assert 0.4 <= m["tensor_active"] <= 0.6  # the fake's training-time tensor activity
    assert m["ofu_flops"] == pytest.approx(m["tensor_active"] * 989.5e12)
    # the counter over the loop, differenced: the fake integrates its own power readings
    assert m["energy_power_w"] == pytest.approx(m["mean_power_w"], rel=0.05)
    assert m["energy_steps_negative"] == 0
    assert m["throttle_idle"] == ["gpu_idle"]  # the fake idles its first 3 s (loading)
    assert "gpu_idle" not in m["throttle_loop"]
    assert m["nvml_pids"] == [FAKE_PID]
    assert gc.context_verdict(m).startswith("PASS: tm pid 999 not among compute pids [4242]")
    lines = gc.table({"static": static, "matmul": m, "gpm_rule": {"20 ms": {}}})
    text = "\n".join(lines)
    assert "GPM metrics present" in text and "tensor-pipe activity (matmul)" in text
    assert "matmul TFLOP/s measured" in text and "OFU-derived TFLOP/s" in text
    assert "no CUDA context in tm           PASS" in text or "PASS: tm pid 999" in text


def test_the_context_verdict_fails_or_says_inconclusive(tmp_path):
    gc = _module()
    base = {"child": {"pid": 10}, "tm_pid": 20, "nvml_pids": [10], "smi_pids": None,
            "libcuda_in_tm": False}  # fmt: skip
    assert gc.context_verdict(base).startswith("PASS")
    assert gc.context_verdict({**base, "nvml_pids": [10, 20]}).startswith("FAIL")
    assert gc.context_verdict({**base, "libcuda_in_tm": True}).startswith("FAIL")
    # mapped by NVML's own call (the H200's driver does this): no context, a PASS that says so
    by_nvml = gc.context_verdict({**base, "libcuda_in_tm": True}, "nvmlDeviceGetHandleByIndex")
    assert by_nvml.startswith("PASS") and "by NVML's own nvmlDeviceGetHandleByIndex" in by_nvml
    tm_ctx = {**base, "nvml_pids": [base["tm_pid"], 4242], "libcuda_in_tm": True}
    assert gc.context_verdict(tm_ctx, "nvmlInit_v2").startswith("FAIL")  # a context all the same
    assert gc.context_verdict({**base, "nvml_pids": [77]}).startswith("inconclusive")


def test_the_gpt_analysis_reads_mfu_and_ofu(tmp_path):
    gc, _, log, _, t0 = _fake_run(tmp_path, seconds=20.0)
    steps = [{"k": "step", "t": t0 + 6 + i * 0.1, "step": i + 1, "rank": 0} for i in range(100)]
    snap = {"step": 100, "tokens_per_s_avg": 1e5, "convention": "titan",
            "mfu_avg": {"titan": 0.004}, "peak": {"flops": 989.5e12}, "model": {
                "run_dtype": "bf16"}, "energy_j": 5000.0, "elapsed_s": 20.0}  # fmt: skip
    g = gc.analyze_gpt(log + steps, snap, {"pid": 999, "libcuda_in_tm": False})
    assert g["mfu"] == 0.004 and g["dtype"] == "bf16" and g["samples"] > 0
    assert 0.4 <= g["ofu"] <= 0.6
    text = "\n".join(gc.table({"static": gc.static_facts(open_backend("fake:h100")), "gpt": g}))
    assert "MFU 0.4% [titan] vs OFU" in text


def _loss_log(values):
    return [{"k": "series", "name": "backward_loss", "step": i + 1, "value": v, "t": 0.0}
            for i, v in enumerate(values)]  # fmt: skip


def test_the_device_loss_check_passes_only_on_every_value_equal_and_no_warning():
    gc = _module()
    printed = "step lines\nLOSSES [0.5, 0.25, 0.125]\n"
    ok = gc.analyze_loss(printed, "", _loss_log([0.5, 0.25, 0.125]))
    assert ok["ok"] and ok["recorded"] == ok["steps"] == 3
    assert gc._loss_text(ok).startswith("OK: 3 of 3 steps recorded, values equal")
    short = gc.analyze_loss(printed, "", _loss_log([0.5, 0.25]))  # the last copy never read
    assert not short["ok"] and short["recorded"] == 2 and short["missing_steps"] == [3]
    gap = [r for r in _loss_log([0.5, 0.25, 0.125]) if r["step"] != 2]  # a step in the middle
    holed = gc.analyze_loss(printed, "", gap)
    assert holed["missing_steps"] == [2] and holed["differ_steps"] == []  # compared by step
    assert "missing 1 ([2])" in gc._loss_text(holed)
    off = gc.analyze_loss(printed, "", _loss_log([0.5, 0.3, 0.125]))
    assert not off["ok"] and off["differ_steps"] == [2]
    start = "[trainmeter] run 20261204-163955-3b18 · python3 loss_on_device.py · log x\n"
    assert gc.analyze_loss(printed, start, _loss_log([0.5, 0.25, 0.125]))["ok"]  # no warning
    warned = "[trainmeter] backward tap stopped after an internal error: RuntimeError: sync\n"
    bad = gc.analyze_loss(printed, warned, _loss_log([0.5, 0.25, 0.125]))
    assert not bad["ok"] and gc._loss_text(bad).startswith("FAILED")
    assert "error" in gc.analyze_loss("no line\n", "", [])
