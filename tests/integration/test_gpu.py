"""End to end through ``tm`` with scripted fake GPUs (no GPU here): GPU
samples in the run log, the ladder, OFU, intensity and energy in ``tm replay --json`` with their
units, MFU against the fake H100's dense peak for the run's dtype, a GPU lost mid-run, an Ampere
without GPM, a bad ``--gpu-backend``, and the notebook supervisor sampling while a cell runs."""

import json
import os
import sys
import time

import pytest
from conftest import EXAMPLE, _env, read_log, run_cell, run_tm

from trainmeter.sources import SPEC_FORMS

pytestmark = pytest.mark.slow

H100_BF16 = 989.5e12  # H100 SXM dense BF16, FLOP/s (peaks table: 1,979 sparse / 2)
H100_FP32 = 67e12  # H100 SXM FP32 (CUDA cores), FLOP/s
H100_BW = 3350e9  # H100 SXM memory bandwidth, bytes/s
NEEDS_HOPPER = "needs Hopper"
LADDER = ("gpu_util", "sm_active", "sm_occupancy", "tensor_active", "dram_active")


def _replay(cwd) -> dict:
    out = run_tm(["replay", "--json"], cwd)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _sleeper(seconds: float) -> list[str]:
    return ["--", sys.executable, "-c", f"import time; time.sleep({seconds})"]


@pytest.fixture(scope="module")
def h100_bf16(tmp_path_factory):
    """The issue's command on two fake H100s in bf16, kept short. The fake's script idles for
    its first 3 s (loading), so the child starts after that: the last sample is training."""
    cwd = tmp_path_factory.mktemp("h100")
    child = f"sleep 3 && exec {sys.executable} {EXAMPLE} --steps 5"
    out = run_tm(["--no-web", "--gpu-backend", "fake:h100x2", "--dtype", "bf16",
                  "--", "sh", "-c", child], cwd)  # fmt: skip
    assert out.returncode == 0, out.stderr
    return cwd, read_log(cwd), _replay(cwd)


def test_a_fake_h100_run_records_gpu_samples(h100_bf16):
    _, log, _ = h100_bf16
    kinds = [r["k"] for r in log]
    assert kinds.index("gpu_devices") < kinds.index("gpu")
    (devices,) = [r for r in log if r["k"] == "gpu_devices"]
    assert devices["backend"] == "fake:h100x2"
    assert [d["name"] for d in devices["devices"]] == ["NVIDIA H100 80GB HBM3"] * 2
    samples = [r for r in log if r["k"] == "gpu"]
    assert len(samples) >= 3  # 1 Hz over a run of several seconds
    assert all(len(r["gpus"]) == 2 and r["host"] is not None for r in samples)


def test_replay_shows_the_ladder_ofu_intensity_and_energy_with_units(h100_bf16):
    _, _, snap = h100_bf16
    hw = snap["hardware"]
    units = hw["units"]
    assert {units[f] for f in (*LADDER, "ofu")} == {"fraction"}
    assert units["observed_flops_per_s"] == "FLOP/s" and units["dram_bytes_per_s"] == "bytes/s"
    assert units["intensity"] == units["ridge_point"] == "FLOP/byte"
    assert units["energy_j"] == "J" and units["power_w"] == "W"
    assert hw["backend"] == "fake:h100x2" and hw["lost"] == []
    for gpu in hw["gpus"]:
        a = {f: gpu[f] for f in LADDER}
        assert all(isinstance(v, float) and 0 <= v <= 1 for v in a.values()), gpu["missing"]
        assert a["gpu_util"] >= a["sm_active"] >= a["sm_occupancy"]  # the ladder, in order
        assert a["tensor_active"] <= a["sm_active"]
        assert gpu["ofu"] == a["tensor_active"]
        # observed FLOP/s = tensor activity x dense bf16 peak; DRAM = activity x bandwidth
        assert gpu["observed_flops_per_s"] == pytest.approx(a["tensor_active"] * H100_BF16)
        assert gpu["dram_bytes_per_s"] == pytest.approx(a["dram_active"] * H100_BW)
        assert gpu["intensity"] == pytest.approx(
            gpu["observed_flops_per_s"] / gpu["dram_bytes_per_s"]
        )
        assert gpu["ridge_point"] == pytest.approx(H100_BF16 / H100_BW)  # 295.4 FLOP/byte
        assert gpu["energy_j"] > 0 and gpu["power_w"] > 0
    assert snap["energy_j"] == pytest.approx(sum(g["energy_j"] for g in hw["gpus"]))
    assert any("fake:h100x2 fake backend: a demonstration" in n for n in snap["notes"])


def test_mfu_is_against_the_h100_dense_peak_for_the_run_dtype(h100_bf16):
    _, _, snap = h100_bf16
    peak = snap["peak"]
    assert peak["flops"] == H100_BF16 and peak["dtype"] == "bf16"
    assert peak["device"] == "H100 SXM" and peak["source"] == "table"
    assert peak["citation"].startswith("NVIDIA H100 Tensor Core GPU datasheet")
    assert snap["gpus"] == 2  # the fake's two whole GPUs (a demonstration on CPU)
    for conv, fpt in snap["flops_per_token"].items():
        # MFU = tokens/s x FLOP/token / (GPUs x dense peak)
        expected = snap["tokens_per_s"] * fpt / (2 * H100_BF16)
        assert snap["mfu"][conv] == pytest.approx(expected)
    assert "[titan]" in run_tm(["replay"], h100_bf16[0]).stdout  # the convention is named


def test_without_dtype_the_run_dtype_decides_and_fp32_divides_by_67_tflops(tmp_path):
    out = run_tm(["--no-web", "--gpu-backend", "fake:h100x2", "--", sys.executable, EXAMPLE,
                  "--steps", "3"], tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr
    snap = _replay(tmp_path)
    assert snap["model"]["run_dtype"] == "fp32"  # a CPU model's float32 parameters
    assert snap["peak"]["flops"] == H100_FP32 and snap["peak"]["dtype"] == "fp32"
    titan = snap["flops_per_token"]["titan"]
    assert snap["mfu"]["titan"] == pytest.approx(snap["tokens_per_s"] * titan / (2 * H100_FP32))
    # the same tokens/s would read 989.5 / 67 = 14.8 times lower in bf16
    bf16 = snap["tokens_per_s"] * titan / (2 * H100_BF16)
    assert snap["mfu"]["titan"] / bf16 == pytest.approx(989.5 / 67)
    for gpu in snap["hardware"]["gpus"]:
        assert gpu["ridge_point"] == pytest.approx(H100_FP32 / H100_BW)  # 20 FLOP/byte


def test_a_gpu_lost_mid_run_is_noted_and_the_run_finishes(tmp_path):
    # fake:lost loses GPU 1 at its 9th reading: under a second at 10 Hz
    out = run_tm(["--no-web", "--gpu-backend", "fake:lost", "--sample-hz", "10",
                  *_sleeper(2.0)], tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr
    snap = _replay(tmp_path)
    assert snap["run"]["state"] == "finished"
    assert snap["hardware"]["lost"] == [1]
    assert any("GPU 1 was lost mid-run" in n for n in snap["notes"])
    ok, lost = snap["hardware"]["gpus"]
    assert ok["gpu_util"] is not None and ok["missing"].get("gpu_util") is None
    assert lost["gpu_util"] is not None  # its last figures stay on the dashboard
    gpu1 = [g for r in read_log(tmp_path) if r["k"] == "gpu" for g in r["gpus"] if g["index"] == 1]
    assert gpu1[-1]["lost"] is True


def test_an_ampere_shows_gpu_util_and_the_rest_of_the_ladder_needs_hopper(tmp_path):
    out = run_tm(["--no-web", "--gpu-backend", "fake:a100", "--dtype", "bf16", "--sample-hz",
                  "10", *_sleeper(1.0)], tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr
    (gpu,) = _replay(tmp_path)["hardware"]["gpus"]
    assert isinstance(gpu["gpu_util"], float)
    for field in ("sm_active", "sm_occupancy", "tensor_active", "dram_active", "ofu",
                  "observed_flops_per_s"):  # fmt: skip
        assert gpu[field] is None and NEEDS_HOPPER in gpu["missing"][field], field
    assert gpu["power_w"] is not None and gpu["energy_j"] is not None


@pytest.mark.parametrize("how", ["flag", "env"])
def test_a_bad_gpu_backend_exits_2_naming_the_accepted_forms(tmp_path, how):
    if how == "flag":
        out = run_tm(["--gpu-backend", "fake:zz", *_sleeper(0)], tmp_path)
    else:
        out = run_tm(_sleeper(0), tmp_path, env={"TRAINMETER_GPU_BACKEND": "fake:zz"})
    assert out.returncode == 2
    assert "'fake:zz'" in out.stderr and all(form in out.stderr for form in SPEC_FORMS)
    assert not (tmp_path / ".trainmeter").exists()  # refused before anything started


# --- the notebook's supervisor samples too -----------------------------------------------------


def test_the_notebook_supervisor_samples_while_a_cell_runs(tmp_path, monkeypatch):
    from jupyter_client.manager import start_new_kernel

    for key, value in _env({"TRAINMETER_GPU_BACKEND": "fake:h100x1"}).items():
        monkeypatch.setenv(key, value)  # the kernel, and so its supervisor, inherits these
    km, kc = start_new_kernel(kernel_name="python3")
    try:
        run_cell(kc, f"import os; os.chdir({str(tmp_path)!r})\n%load_ext trainmeter")
        cell = "%%trainmeter --no-widget --dtype bf16\nimport time\ntime.sleep(2.5)"
        content, text = run_cell(kc, cell)
        assert content["status"] == "ok" and text.startswith("trainmeter: finished"), text
        time.sleep(1.5)  # between cells: nothing is sampled
        content, _ = run_cell(kc, "%%trainmeter --no-widget\ntime.sleep(1.5)")
        assert content["status"] == "ok"
        bad = run_cell(kc, "%%trainmeter --no-widget --dtype int4\nran = True")[0]
        assert bad["status"] == "error" and "int4" in bad["evalue"]
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    (log,) = (tmp_path / ".trainmeter" / "runs").glob("*/run.jsonl")
    recs = [json.loads(x) for x in log.read_text().splitlines()]
    kinds = [r["k"] for r in recs]
    (devices,) = [r for r in recs if r["k"] == "gpu_devices"]
    assert devices["backend"] == "fake:h100x1"
    gpu = [r for r in recs if r["k"] == "gpu"]
    assert len(gpu) >= 3 and all(len(r["gpus"]) == 1 for r in gpu)
    first_end = kinds.index("segment_end")
    second_start = kinds.index("segment_start", first_end)
    assert "gpu" not in kinds[first_end:second_start]  # paused between the cells
    after = [r for r in recs[second_start:] if r["k"] == "gpu"]
    assert after and after[0].get("resume") is True  # the pause's energy is not counted
    assert recs[kinds.index("segment_start")]["opts"]["dtype"] == "bf16"
    assert os.environ.get("TRAINMETER_GPU_BACKEND") == "fake:h100x1"  # (monkeypatch undoes it)
