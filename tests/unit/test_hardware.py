"""HardwareState: the sampler's ``gpu_devices`` and ``gpu`` records folded into the snapshot's
``hardware`` and ``energy_j`` (trainmeter/core/hardware.py). Every figure is computed by hand in
the comment beside it."""

import pytest

from trainmeter.core import records
from trainmeter.core.engine import Engine
from trainmeter.core.hardware import HardwareState

H100 = "NVIDIA H100 80GB HBM3"
LOST = "GPU lost (NVML_ERROR_GPU_IS_LOST): it needs a reset or a reboot"


def _device(index, name=H100, *, mig=False, gpu_index=None, power=700.0):
    return {"index": index, "name": name, "uuid": f"GPU-{index}", "mem_total_bytes": 80 * 2**30,
            "power_limit_w": power, "gpm": True, "gpm_reason": None, "mig": mig,
            "gpu_index": index if gpu_index is None else gpu_index,
            "gpu_instance_id": 2 if mig else None, "lost": None, "missing": {}}  # fmt: skip


def _devices_rec(*devices, backend="nvml", t=100.0):
    return records.make("gpu_devices", t, backend=backend, devices=list(devices), reason=None)


def _gpu_rec(t, *gpus, host=None, **extra):
    return records.make("gpu", t, gpus=list(gpus), host=host, **extra)


def _state(*devices):
    hw = HardwareState()
    hw.on_devices(_devices_rec(*(devices or (_device(0),))))
    return hw


# --- energy ----------------------------------------------------------------------------------


def test_energy_is_the_sum_of_counter_differences_per_device_in_joules():
    hw = _state(_device(0), _device(1))
    assert hw.energy_j() is None  # no reading yet: not measured, not 0
    hw.on_sample(_gpu_rec(101.0, {"index": 0, "energy_mj": 3_600_000_000},
                          {"index": 1, "energy_mj": 7_000_000_000}))  # fmt: skip
    assert hw.energy_j() == 0.0  # one reading per device: nothing differenced yet
    hw.on_sample(_gpu_rec(102.0, {"index": 0, "energy_mj": 3_600_650_000},
                          {"index": 1, "energy_mj": 7_000_612_345}))  # fmt: skip
    hw.on_sample(_gpu_rec(103.0, {"index": 0, "energy_mj": 3_601_300_500},
                          {"index": 1}))  # GPU 1's read failed: skipped, nothing lost  # fmt: skip
    hw.on_sample(_gpu_rec(104.0, {"index": 0}, {"index": 1, "energy_mj": 7_001_200_000}))
    # GPU 0: (3,601,300,500 - 3,600,000,000) mJ = 1,300.5 J
    # GPU 1: (7,001,200,000 - 7,000,000,000) mJ = 1,200 J
    assert hw.energy_j() == pytest.approx(1300.5 + 1200.0)
    snap = hw.snapshot("bf16", None)
    assert [g["energy_j"] for g in snap["gpus"]] == pytest.approx([1300.5, 1200.0])
    assert snap["units"]["energy_j"] == "J"


def test_a_counter_reset_is_never_negative_energy():
    hw = _state()
    for t, mj in ((101.0, 5_000_000), (102.0, 6_000_000), (103.0, 200_000), (104.0, 700_000)):
        hw.on_sample(_gpu_rec(t, {"index": 0, "energy_mj": mj}))
        assert hw.energy_j() >= 0
    # 1,000 J before the reset; after it the new reading counts from zero (200 J, the energy
    # between the last reading and the reset is lost), then 500 J: 1,000 + 200 + 500 J
    assert hw.energy_j() == pytest.approx(1700.0)


def test_a_resumed_sampler_does_not_count_the_pause():
    hw = _state()
    hw.on_sample(_gpu_rec(101.0, {"index": 0, "energy_mj": 1_000_000}))
    hw.on_sample(_gpu_rec(102.0, {"index": 0, "energy_mj": 1_700_000}))  # 700 J
    # 10 minutes between notebook cells at ~70 W: 42 kJ the run did not use
    hw.on_sample(_gpu_rec(702.0, {"index": 0, "energy_mj": 43_700_000}, resume=True))
    hw.on_sample(_gpu_rec(703.0, {"index": 0, "energy_mj": 44_350_000}))  # 650 J
    assert hw.energy_j() == pytest.approx(700.0 + 650.0)


# --- missing, lost GPUs --------------------------------------------------------------------


def test_missing_is_carried_while_samples_omit_it_and_replaced_when_sent():
    hw = _state()
    why = "GPM needs 100 ms between samples; 1 ms so far"
    hw.on_sample(_gpu_rec(101.0, {"index": 0, "gpu_util": 0.5, "missing": {"sm_active": why}}))
    hw.on_sample(_gpu_rec(102.0, {"index": 0, "gpu_util": 0.6}))  # no `missing`: unchanged
    (gpu,) = hw.snapshot("bf16", None)["gpus"]
    assert gpu["gpu_util"] == 0.6 and gpu["sm_active"] is None
    assert gpu["missing"]["sm_active"] == why
    hw.on_sample(_gpu_rec(103.0, {"index": 0, "gpu_util": 0.7, "sm_active": 0.6, "missing": {}}))
    (gpu,) = hw.snapshot("bf16", None)["gpus"]
    assert gpu["sm_active"] == 0.6 and "sm_active" not in gpu["missing"]


def test_a_lost_gpu_is_noted_and_keeps_its_last_figures():
    hw = _state(_device(0), _device(1))
    ok = {"gpu_util": 0.98, "sm_active": 0.85, "tensor_active": 0.5, "dram_active": 0.3,
          "power_w": 650.0, "mem_used_bytes": 60 * 2**30}  # fmt: skip
    hw.on_sample(_gpu_rec(101.0, {"index": 0, **ok, "energy_mj": 1_000_000},
                          {"index": 1, **ok, "energy_mj": 2_000_000}))  # fmt: skip
    hw.on_sample(_gpu_rec(102.0, {"index": 0, **ok, "energy_mj": 1_650_000},
                          {"index": 1, **ok, "energy_mj": 2_640_000}))  # fmt: skip
    lost = {"index": 1, "lost": True, "missing": {f: LOST for f in ("gpu_util", "power_w")}}
    points = hw.on_sample(_gpu_rec(103.0, {"index": 0, **ok, "energy_mj": 2_300_000}, lost))
    assert hw.lost == {1}
    assert not any(name.startswith("gpu1/") for name, _ in points)  # its chart just stops
    hw.on_sample(_gpu_rec(104.0, {"index": 0, **ok}, {"index": 1, "lost": True}))
    snap = hw.snapshot("bf16", None)
    assert snap["lost"] == [1]
    gpu1 = snap["gpus"][1]
    assert gpu1["gpu_util"] == 0.98 and gpu1["power_w"] == 650.0  # the last figures stay
    # energy until it was lost: 2,640,000 - 2,000,000 mJ = 640 J
    assert gpu1["ofu"] == 0.5 and gpu1["energy_j"] == pytest.approx(640.0)
    assert "gpu_util" not in gpu1["missing"]  # shown, so not "missing"
    assert any("GPU 1 was lost" in n and "last figures" in n for n in hw.notes())
    assert snap["gpus"][0]["energy_j"] == pytest.approx(1300.0)  # GPU 0 goes on


def test_a_gpu_lost_before_its_first_reading_shows_the_reason():
    hw = _state()
    hw.on_sample(_gpu_rec(101.0, {"index": 0, "lost": True, "missing": {"gpu_util": LOST}}))
    (gpu,) = hw.snapshot("bf16", None)["gpus"]
    assert gpu["gpu_util"] is None and gpu["missing"]["gpu_util"] == LOST
    assert hw.lost == {0}


# --- chart points, MIG, the engine --------------------------------------------------------


def test_ladder_points_are_named_gpu_index_field():
    hw = _state(_device(0), _device(1))
    points = hw.on_sample(_gpu_rec(101.0,
        {"index": 0, "gpu_util": 1.0, "sm_active": 0.8, "sm_occupancy": 0.3,
         "tensor_active": 0.5, "dram_active": 0.25, "power_w": 600.0},
        {"index": 1, "gpu_util": 0.9},
        {"index": 7, "gpu_util": 0.9},  # not a device of this run: ignored
    ))  # fmt: skip
    assert points == [("gpu0/gpu_util", 1.0), ("gpu0/sm_active", 0.8),
                      ("gpu0/sm_occupancy", 0.3), ("gpu0/tensor_active", 0.5),
                      ("gpu0/dram_active", 0.25), ("gpu1/gpu_util", 0.9)]  # fmt: skip


def test_the_engine_charts_the_ladder_against_seconds_of_the_run():
    eng = Engine()
    eng.apply(records.make("run_start", 100.0, id="r", name="n", argv=[], version="0", opts={}))
    eng.apply(_devices_rec(_device(0), t=100.1))
    eng.apply(_gpu_rec(102.5, {"index": 0, "sm_active": 0.8, "energy_mj": 10}))
    series = eng.timeline.full()["series"]
    assert series["gpu0/sm_active"][0] == [2.5]  # x: 102.5 - 100.0 s
    assert series["gpu0/sm_active"][1] == [0.8]


def test_mig_instances_are_not_counted_as_whole_gpus():
    mig = "NVIDIA H100 80GB HBM3 MIG 3g.40gb"
    only_mig = _state(_device(0, mig, mig=True, gpu_index=0, power=None),
                      _device(1, mig, mig=True, gpu_index=0, power=None))  # fmt: skip
    assert only_mig.whole_gpus() == 0 and only_mig.device_name() is None
    mixed = _state(_device(0, mig, mig=True, gpu_index=0, power=None), _device(1, H100))
    assert mixed.whole_gpus() == 1 and mixed.device_name() == H100
    mixed.on_sample(_gpu_rec(101.0, {"index": 0, "tensor_active": 0.4},
                             {"index": 1, "tensor_active": 0.4}))  # fmt: skip
    inst, whole = mixed.snapshot("bf16", None)["gpus"]
    assert inst["ofu"] == 0.4 and inst["observed_flops_per_s"] is None  # no peak of its own
    assert "MIG instance" in inst["missing"]["observed_flops_per_s"]
    assert whole["observed_flops_per_s"] == pytest.approx(0.4 * 989.5e12)


def test_a_fake_backend_is_labelled_a_demonstration_and_none_says_why():
    fake = HardwareState()
    fake.on_devices(_devices_rec(_device(0), backend="fake:h100"))
    assert fake.fake and "a demonstration, not a measurement" in fake.notes()[0]
    none = HardwareState()
    none.on_devices(records.make("gpu_devices", 1.0, backend="none", devices=[],
                                 reason="no NVML: libnvidia-ml.so.1 not found"))  # fmt: skip
    assert none.notes() == ["no GPU counters: no NVML: libnvidia-ml.so.1 not found"]
    assert none.snapshot(None, None)["gpus"] == []
    assert HardwareState().snapshot(None, None) is None  # no sampler yet: null, not empty


def test_devices_past_sixteen_are_counted_in_a_note_not_shown():
    hw = _state(*(_device(i) for i in range(20)))
    assert len(hw.snapshot("bf16", None)["gpus"]) == 16
    assert "4 GPU(s) past the first 16 not shown (the run log has their readings)" in hw.notes()


def test_hardware_notes_are_few_and_short_whatever_happens():
    hw = HardwareState()
    hw.on_devices(records.make("gpu_devices", 1.0, backend="none", devices=[],
                               reason="x" * 5000))  # fmt: skip
    hw.on_devices(_devices_rec(*(_device(i) for i in range(20)), backend="fake:h100x20"))
    hw.on_sample(_gpu_rec(2.0, *({"index": i, "lost": True} for i in range(16))))
    notes = hw.notes()
    assert len(notes) == 3 and all(len(n) <= 500 for n in notes)
    assert notes[1].startswith("GPUs 0, 1, 2, ") and "were lost mid-run" in notes[1]
    none = HardwareState()
    none.on_devices(records.make("gpu_devices", 1.0, backend="none", devices=[],
                                 reason="y" * 5000))  # fmt: skip
    assert len(none.notes()[0]) == 500 and none.notes()[0].endswith("…")


# --- per-process GPU memory ------------------------------------------------------------------


def test_training_memory_sums_only_the_training_processes_per_gpu():
    hw = _state(_device(0), _device(1))
    gib = 2**30
    # JSON turns pid keys into strings: the supervisor's records carry them that way
    hw.on_sample(_gpu_rec(101.0, {"index": 0, "process_mem_bytes": {"100": 3 * gib, "999": gib}},
                          {"index": 1}))  # fmt: skip
    snap = hw.snapshot("bf16", None, pids=[100, 101])
    # GPU 0: only pid 100 trains (3 GiB); pid 999 is someone else's process
    assert snap["gpus"][0]["train_mem_bytes"] == 3 * gib
    assert snap["units"]["train_mem_bytes"] == "bytes"
    # GPU 1: NVML gave no per-process list: unknown with a reason, never 0
    assert snap["gpus"][1]["train_mem_bytes"] is None
    assert "per-process" in snap["gpus"][1]["missing"]["train_mem_bytes"]
    none_here = hw.snapshot("bf16", None, pids=[5])
    assert none_here["gpus"][0]["train_mem_bytes"] is None
    assert "no training process" in none_here["gpus"][0]["missing"]["train_mem_bytes"]
