"""Counter metrics and the hardware snapshot, pinned against hand arithmetic.

Each expected number below is worked out by hand in the comment above it, from the H100 SXM
row (BF16 dense 989.5 TFLOP/s, 3.35 TB/s) and the A100 80GB SXM row (312 TFLOP/s, 2039 GB/s)
of docs/spec.md "Peaks"; a wrong formula or unit makes the test fail.
"""

from __future__ import annotations

import math

import pytest

from trainmeter.core.counters import (
    GPU_KEYS,
    THROTTLE_REASONS,
    EnergyMeter,
    arithmetic_intensity,
    dram_bytes_per_s,
    energy_delta_j,
    fraction_from_percent,
    gpu_entry,
    hardware_snapshot,
    host_entry,
    mean_power_w,
    observed_flops,
    ofu,
    power_w,
    ridge_point,
    throttle_names,
)

H100_BF16 = 989.5e12
H100_BW = 3.35e12
H100 = "NVIDIA H100 80GB HBM3"


def test_ridge_point_of_an_h100_sxm_in_bf16():
    # 989.5e12 FLOP/s / 3.35e12 B/s = 295.3731... FLOP/byte
    assert ridge_point(H100_BF16, H100_BW) == pytest.approx(295.373134328, rel=1e-9)
    assert round(ridge_point(H100_BF16, H100_BW), 1) == 295.4


def test_ridge_point_of_an_a100_80gb_sxm_in_bf16():
    # 312e12 / 2039e9 = 153.0161844... FLOP/byte
    assert ridge_point(312e12, 2039e9) == pytest.approx(153.0161844, rel=1e-9)


def test_observed_flops_is_tensor_activity_times_the_dense_peak():
    # 0.45 * 989.5e12 = 445.275e12 FLOP/s
    assert observed_flops(0.45, H100_BF16) == pytest.approx(445.275e12, rel=1e-12)


def test_ofu_is_the_tensor_pipe_activity_fraction():
    # OFU = tensor_active = observed FLOP/s / peak: 445.275e12 / 989.5e12 = 0.45
    assert ofu(0.45) == 0.45
    assert observed_flops(0.45, H100_BF16) / H100_BF16 == pytest.approx(ofu(0.45))


def test_dram_bytes_per_s_is_dram_activity_times_peak_bandwidth():
    # 0.30 * 3.35e12 = 1.005e12 B/s
    assert dram_bytes_per_s(0.30, H100_BW) == pytest.approx(1.005e12, rel=1e-12)


def test_arithmetic_intensity_is_observed_flops_over_dram_bytes():
    # 445.275e12 / 1.005e12 = 443.0597... FLOP/byte (above the 295.4 ridge)
    got = arithmetic_intensity(observed_flops(0.45, H100_BF16), dram_bytes_per_s(0.30, H100_BW))
    assert got == pytest.approx(443.059701493, rel=1e-9)


def test_no_dram_traffic_gives_no_intensity_rather_than_infinity():
    assert arithmetic_intensity(1e12, 0.0) is None
    assert ridge_point(1e12, 0) is None


@pytest.mark.parametrize(
    "fn, args",
    [
        (ofu, (None,)),
        (observed_flops, (None, H100_BF16)),
        (observed_flops, (0.5, None)),
        (dram_bytes_per_s, (0.5, None)),
        (arithmetic_intensity, (None, 1.0)),
        (ridge_point, (H100_BF16, None)),
        (energy_delta_j, (None, 5)),
        (power_w, (None,)),
        (mean_power_w, (10.0, 0)),
    ],
)
def test_a_missing_input_gives_a_missing_figure(fn, args):
    assert fn(*args) is None


@pytest.mark.parametrize(
    "fn, args",
    [
        (ofu, (1.2,)),
        (ofu, (-0.1,)),
        (observed_flops, (0.5, -1.0)),
        (dram_bytes_per_s, (math.nan, 1.0)),
        (ridge_point, (math.inf, 1.0)),
        (energy_delta_j, (-1, 5)),
        (power_w, ("300",)),
    ],
)
def test_impossible_inputs_are_programming_errors(fn, args):
    with pytest.raises(ValueError):
        fn(*args)


def test_fraction_from_percent_clamps_counter_overshoot():
    # 84 % -> 0.84; 100.4 % (rounding between two GPM samples) -> 1.0; NaN -> None
    assert fraction_from_percent(84.0) == pytest.approx(0.84)
    assert fraction_from_percent(100.4) == 1.0
    assert fraction_from_percent(-0.2) == 0.0
    assert fraction_from_percent(math.nan) is None
    assert fraction_from_percent(None) is None


def test_energy_between_two_counter_readings_in_joules():
    # 1,250,000 mJ - 1,000,000 mJ = 250,000 mJ = 250 J
    assert energy_delta_j(1_000_000, 1_250_000) == 250.0


def test_a_counter_reset_counts_the_new_reading_from_zero_never_negative():
    # driver reload: 5,000,000 mJ then 40,000 mJ -> the 40,000 mJ since the reset = 40 J
    assert energy_delta_j(5_000_000, 40_000) == 40.0


def test_energy_meter_sums_deltas_skips_failed_reads_and_survives_a_reset():
    meter = EnergyMeter()
    assert meter.energy_j is None
    # 0 J at the first reading; +600 J (600,000 mJ); a failed read changes nothing;
    # +400 J against the last good reading; reset to 30,000 mJ: +30 J. 0+600+400+30 = 1030 J
    assert meter.update(2_000_000) == 0.0
    assert meter.update(2_600_000) == 600.0
    assert meter.update(None) == 600.0
    assert meter.update(3_000_000) == 1000.0
    assert meter.update(30_000) == 1030.0


def test_power_from_milliwatts_and_mean_power_from_energy():
    # 612,345 mW = 612.345 W; 3600 J over 6 s = 600 W
    assert power_w(612_345) == pytest.approx(612.345)
    assert mean_power_w(3600.0, 6.0) == 600.0


def test_throttle_reasons_decode_from_the_bitmask_lowest_bit_first():
    # 0x44 = 0x4 (SwPowerCap) | 0x40 (HwThermalSlowdown)
    assert throttle_names(0x44) == ["sw_power_cap", "hw_thermal_slowdown"]
    assert throttle_names(0x1) == ["gpu_idle"]
    assert throttle_names(0) == []
    assert throttle_names(None) is None
    # a bit NVML may add later is named, not dropped: 0x804 = 0x800 | 0x4
    assert throttle_names(0x804) == ["sw_power_cap", "unknown_0x800"]


def test_throttle_bits_match_the_installed_nvml_binding():
    pynvml = pytest.importorskip("pynvml")
    names = {
        "gpu_idle": "GpuIdle",
        "applications_clocks_setting": "ApplicationsClocksSetting",
        "sw_power_cap": "SwPowerCap",
        "hw_slowdown": "HwSlowdown",
        "sync_boost": "SyncBoost",
        "sw_thermal_slowdown": "SwThermalSlowdown",
        "hw_thermal_slowdown": "HwThermalSlowdown",
        "hw_power_brake_slowdown": "HwPowerBrakeSlowdown",
        "display_clock_setting": "DisplayClockSetting",
        "board_limit": "BoardLimit",
        "reliability": "Reliability",
    }
    for bit, name in THROTTLE_REASONS:
        new = getattr(pynvml, f"nvmlClocksEventReason{names[name]}", None)
        old = getattr(pynvml, f"nvmlClocksThrottleReason{names[name]}")
        assert old == bit, name
        assert new in (None, bit), name


def _device(**kw):
    base = {"index": 0, "name": H100, "mem_total_bytes": 85_520_809_984, "power_limit_w": 700.0}
    return {**base, **kw}


def _sample(**kw):
    base = {
        "index": 0,
        "time_s": 1000.0,
        "gpu_util": 0.99,
        "sm_active": 0.84,
        "sm_occupancy": 0.31,
        "tensor_active": 0.45,
        "dram_active": 0.30,
        "mem_used_bytes": 64 * 2**30,
        "mem_total_bytes": 85_520_809_984,
        "power_w": 612.345,
        "energy_mj": 3_600_000_000,
        "sm_clock_mhz": 1980,
        "mem_clock_mhz": 2619,
        "throttle_mask": 0x4,
        "process_mem_bytes": {4242: 63 * 2**30},
        "lost": False,
        "missing": {},
    }
    return {**base, **kw}


def test_hardware_snapshot_of_an_h100_in_bf16_has_the_spec_shape_and_hand_numbers():
    hw = hardware_snapshot([_device()], [_sample()], None, dtype="bf16", energy_j={0: 1234.5})
    (gpu,) = hw["gpus"]
    assert tuple(gpu) == GPU_KEYS
    # intensity: 0.45*989.5e12 / (0.30*3.35e12) = 443.0597; ridge 989.5e12/3.35e12 = 295.373
    assert gpu["intensity"] == pytest.approx(443.059701493, rel=1e-9)
    assert gpu["ridge_point"] == pytest.approx(295.373134328, rel=1e-9)
    assert gpu["throttle"] == ["sw_power_cap"]
    assert gpu["energy_j"] == 1234.5
    assert gpu["power_limit_w"] == 700.0
    assert gpu["missing"] == {}
    assert hw["host"]["missing"]["cpu_util"] == "not sampled yet"


def test_an_ampere_without_gpm_shows_gpu_util_and_says_why_the_ladder_is_missing():
    why = "not on this GPU: needs Hopper or newer (NVML GPM)"
    ladder = ("sm_active", "sm_occupancy", "tensor_active", "dram_active")
    sample = _sample(**{k: None for k in ladder}, missing={k: why for k in ladder})
    device = _device(name="NVIDIA A100-SXM4-80GB", power_limit_w=400.0)
    (gpu,) = hardware_snapshot([device], [sample], dtype="bf16")["gpus"]
    assert gpu["gpu_util"] == 0.99
    assert all(gpu[k] is None and gpu["missing"][k] == why for k in ladder)
    # the ridge point needs only peaks: 312e12 / 2039e9 = 153.016
    assert gpu["ridge_point"] == pytest.approx(153.0161844, rel=1e-9)
    assert gpu["intensity"] is None and "GPM" in gpu["missing"]["intensity"]


def test_no_peak_means_no_intensity_or_ridge_point_with_a_reason():
    mig = _device(name="NVIDIA H100 80GB HBM3 MIG 3g.40gb", mig=True)
    unknown = _device(index=1, name="NVIDIA A10G")
    declared = _device(index=2, name="NVIDIA A10G")
    samples = [_sample(index=i) for i in range(3)]
    hw = hardware_snapshot([mig, unknown], samples, dtype="bf16")
    assert "MIG" in hw["gpus"][0]["missing"]["ridge_point"]
    assert "A10G" in hw["gpus"][1]["missing"]["intensity"]
    # a declared peak has FLOP/s but the A10G has no bandwidth row: still no ridge point
    (gpu,) = hardware_snapshot([declared], samples, dtype="bf16", declared_peak=125e12)["gpus"]
    assert gpu["ridge_point"] is None and "bandwidth" in gpu["missing"]["ridge_point"]
    # an H100 before the run's dtype is known
    (gpu,) = hardware_snapshot([_device()], samples[:1], dtype=None)["gpus"]
    assert gpu["ridge_point"] is None and "dtype" in gpu["missing"]["ridge_point"]


def test_odd_values_from_a_log_become_none_with_a_reason_never_an_exception():
    sample = _sample(sm_active=1.7, power_w=-3.0, throttle_mask="0x4", mem_used_bytes=math.nan)
    (gpu,) = hardware_snapshot([_device()], [sample], dtype="bf16", energy_j={0: 1.0})["gpus"]
    assert gpu["sm_active"] is None and gpu["power_w"] is None
    assert gpu["throttle"] is None and gpu["mem_used_bytes"] is None
    assert set(gpu["missing"]) == {"sm_active", "power_w", "throttle", "mem_used_bytes"}
    assert gpu["missing"]["sm_active"] == "invalid value in the sample: 1.7"


def test_a_device_without_a_sample_yet_says_so():
    (gpu,) = hardware_snapshot([_device()], {}, dtype="bf16")["gpus"]
    assert gpu["gpu_util"] is None and gpu["missing"]["gpu_util"] == "not sampled yet"
    assert gpu["mem_total_bytes"] == 85_520_809_984  # from the static facts


def test_once_the_run_has_ended_what_never_came_says_so_without_yet():
    """A run that has ended (``is_open`` False) gets no more readings: "not sampled", and a
    dtype that never came "was never seen", for the GPUs and the host alike."""
    hw = hardware_snapshot([_device()], {}, None, dtype=None, is_open=False)
    (gpu,) = hw["gpus"]
    assert gpu["missing"]["gpu_util"] == gpu["missing"]["power_w"] == "not sampled"
    never = "the run's dtype was never seen (no peak to compare with)"
    assert gpu["missing"]["ridge_point"] == never
    assert set(hw["host"]["missing"].values()) == {"not sampled"}
    said = [*gpu["missing"].values(), *hw["host"]["missing"].values()]
    assert not [w for w in said if "yet" in w]
    # a reading that came keeps its own words either way
    hw = hardware_snapshot([_device()], [_sample()], dtype="bf16", energy_j={0: 1.0}, is_open=False)
    assert hw["gpus"][0]["missing"] == {}


def test_static_reasons_of_the_device_reach_the_entry():
    device = _device(power_limit_w=None, missing={"power_limit_w": "not reported for MIG"})
    gpu = gpu_entry(device, _sample())
    assert gpu["missing"]["power_limit_w"] == "not reported for MIG"


def test_host_entry_keeps_the_spec_keys_and_reasons():
    host = host_entry(
        {"cpu_util": 0.45, "mem_used_bytes": 12_582_912_000, "mem_total_bytes": 16_777_216_000,
         "rss_bytes": None, "missing": {"rss_bytes": "process 7 not running"}}
    )  # fmt: skip
    assert host == {
        "cpu_util": 0.45,
        "mem_used_bytes": 12_582_912_000,
        "mem_total_bytes": 16_777_216_000,
        "rss_bytes": None,
        "missing": {"rss_bytes": "process 7 not running"},
    }
