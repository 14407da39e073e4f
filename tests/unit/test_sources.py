"""GPU and host sources, tested against fakes (no GPU here: the no-GPU-library invariant).

The NVML backend runs against ``FakeNvml`` (a scripted stand-in for the ``pynvml`` module,
injected into it) under a manual clock. Values that a test pins come from a ``Pinned`` fake that
returns fixed readings, so every expected number is the hand conversion written beside it.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import ClassVar

import pytest
from conftest import Clock

from trainmeter.core.counters import EnergyMeter, hardware_snapshot
from trainmeter.sources import (
    SPEC_FORMS,
    BackendUnavailable,
    GpuBackend,
    HostSource,
    NoneBackend,
    NvmlBackend,
    open_backend,
)
from trainmeter.sources import fake as fakes
from trainmeter.sources.base import GPM_FIELDS, NO_GPM, NO_GPM_LIBRARY, SAMPLE_FIELDS
from trainmeter.sources.fake import A100, H100, H100_MIG, FakeNvml, trace
from trainmeter.sources.gpu import GPM_METRICS, load_nvml, metric_id


class Pinned(FakeNvml):
    """Fixed readings, so tests can pin the conversions by hand."""

    gpm_percent: ClassVar[dict[int, float]] = {1: 99.0, 2: 84.0, 3: 31.0, 5: 47.0, 10: 29.0}

    def nvmlDeviceGetUtilizationRates(self, h):
        super().nvmlDeviceGetUtilizationRates(h)
        return SimpleNamespace(gpu=97, memory=40)

    def nvmlDeviceGetMemoryInfo(self, h):
        self._enter("nvmlDeviceGetMemoryInfo", h)
        return SimpleNamespace(total=85_520_809_984, used=64_424_509_440, free=0)

    def nvmlDeviceGetPowerUsage(self, h):
        self._enter("nvmlDeviceGetPowerUsage", h)
        return 612_345

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        self._enter("nvmlDeviceGetTotalEnergyConsumption", h)
        return 3_600_000_000 + 600_000 * self.calls["nvmlDeviceGetTotalEnergyConsumption"]

    def nvmlDeviceGetClockInfo(self, h, kind):
        self._enter("nvmlDeviceGetClockInfo", h)
        return 2619 if kind == self.NVML_CLOCK_MEM else 1755

    def _reasons(self, h):
        return 0x44  # SwPowerCap | HwThermalSlowdown

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        self._enter("nvmlDeviceGetComputeRunningProcesses", h)
        return [
            SimpleNamespace(pid=4242, usedGpuMemory=1_000),
            SimpleNamespace(pid=4242, usedGpuMemory=500),  # one pid, two contexts: summed
            SimpleNamespace(pid=77, usedGpuMemory=None),  # NVML could not tell
        ]

    def nvmlGpmMetricsGet(self, request):
        super().nvmlGpmMetricsGet(request)
        for i in range(request.numMetrics):
            m = request.metrics[i]
            if m.nvmlReturn == 0:
                m.value = self.gpm_percent[m.metricId]
        return request


def _backend(nvml, clock, **kw):
    return NvmlBackend(nvml, clock=clock, wall=clock, **kw)


# --- choosing a backend -------------------------------------------------------------------


def test_open_backend_accepts_the_documented_specs():
    assert SPEC_FORMS == ("nvml", "none", "fake:h100xN", "fake:a100xN", "fake:mig",
                          "fake:nonvml", "fake:lost")  # fmt: skip
    clock = Clock()
    h100x2 = open_backend("fake:h100x2", clock=clock)
    assert isinstance(h100x2, GpuBackend) and len(h100x2.devices()) == 2
    assert [d.name for d in open_backend("fake:a100", clock=clock).devices()] == [A100.name]
    assert open_backend("FAKE:H100", clock=clock).kind == "fake:h100"
    none = open_backend("none")
    assert isinstance(none, NoneBackend) and none.devices() == [] and none.sample() == []


@pytest.mark.parametrize("spec", ["gpu", "fake", "fake:", "fake:h200", "fake:h100x0", "nvml2", 3])
def test_an_unknown_spec_names_the_accepted_forms(spec):
    with pytest.raises(ValueError) as err:
        open_backend(spec)
    assert all(form in str(err.value) for form in SPEC_FORMS)


def test_no_nvml_library_gives_a_none_backend_with_the_reason():
    backend = open_backend("fake:nonvml")
    assert isinstance(backend, NoneBackend)
    assert (
        backend.reason == "no NVML: libnvidia-ml.so.1 not found (no NVIDIA driver on this machine)"
    )
    with pytest.raises(BackendUnavailable, match="libnvidia-ml"):
        NvmlBackend(FakeNvml([], init_error=12))


def test_without_nvidia_ml_py_auto_gives_none_and_an_explicit_nvml_raises(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    with pytest.raises(BackendUnavailable, match="nvidia-ml-py is not installed"):
        load_nvml()
    backend = open_backend(None)
    assert isinstance(backend, NoneBackend) and "nvidia-ml-py" in backend.reason
    with pytest.raises(BackendUnavailable):
        open_backend("nvml")


def test_sources_load_no_cuda_binding():
    code = (
        "import sys, trainmeter.sources, trainmeter.sources.gpu, trainmeter.sources.fake, "
        "trainmeter.sources.host, trainmeter.core.counters\n"
        "from trainmeter.sources import open_backend\n"
        "b = open_backend(None); b.sample(); b.close()\n"
        "f = open_backend('fake:h100x2'); f.sample(); f.close()\n"
        "print(' '.join(sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[2])  # fmt: skip
    roots = {m.split(".")[0] for m in out.stdout.split()}
    assert not roots & {"torch", "cupy", "pycuda", "cuda", "jax", "tensorflow", "numba"}


# --- the NVML backend against a fake library ----------------------------------------------


def test_static_facts_come_from_nvml_in_its_units():
    clock = Clock()
    (dev,) = _backend(Pinned([H100], clock=clock), clock).devices()
    assert dev.name == "NVIDIA H100 80GB HBM3"
    assert dev.uuid.startswith("GPU-")
    # 81559 MiB = 81559 * 1,048,576 = 85,520,809,984 bytes; 700,000 mW = 700 W
    assert dev.mem_total_bytes == 85_520_809_984
    assert dev.power_limit_w == 700.0
    assert dev.gpm and not dev.mig and dev.gpu_index == 0


def test_cheap_reads_are_converted_by_hand():
    clock = Clock()
    backend = _backend(Pinned([H100], clock=clock), clock)
    clock.tick(1.0)
    (s,) = backend.sample()
    assert s.time_s == clock.t
    assert s.gpu_util == 0.97  # 97 % -> 0.97
    assert s.mem_used_bytes == 64_424_509_440 and s.mem_total_bytes == 85_520_809_984
    assert s.power_w == pytest.approx(612.345)  # 612,345 mW
    assert s.energy_mj == 3_600_600_000  # first read: 3.6e9 + 600,000 * 1
    assert (s.sm_clock_mhz, s.mem_clock_mhz) == (1755, 2619)
    assert s.throttle_mask == 0x44
    assert s.process_mem_bytes == {4242: 1_500}  # 1,000 + 500; pid 77's None is left out
    # GPM over the 1 s window since open: 84 %, 31 %, 47 %, 29 % -> fractions
    assert (s.sm_active, s.sm_occupancy, s.tensor_active, s.dram_active) == pytest.approx(
        (0.84, 0.31, 0.47, 0.29)
    )
    assert s.missing == {} and not s.lost
    json.dumps(s.as_dict())  # a sample goes into the run log as is


def test_gpm_samples_are_allocated_once_and_swapped_every_tick():
    clock = Clock()
    nvml = FakeNvml([H100, H100], clock=clock)
    backend = _backend(nvml, clock)
    assert nvml.allocs == 4  # two per device, at open
    for _ in range(10):
        clock.tick(0.25)
        backend.sample()
    assert nvml.allocs == 4  # never reallocated per tick
    assert nvml.calls["nvmlGpmMetricsGet"] == 20
    for dev in (0, 1):
        windows = nvml.windows[dev::2]
        for (a1, a2), (b1, b2) in itertools.pairwise(windows):
            assert b1 is a2  # the newest sample starts the next window
            assert b2 is a1  # the older one is reused as the spare
        assert all(t2 - t1 == pytest.approx(0.25) for t1, t2 in nvml.window_times[dev::2])
    backend.close()
    backend.close()  # idempotent
    assert nvml.frees == 4 and nvml.calls["nvmlShutdown"] == 1


def test_gpm_waits_for_100_ms_between_samples():
    clock = Clock()
    nvml = Pinned([H100], clock=clock)
    backend = _backend(nvml, clock)
    gets = nvml.calls["nvmlGpmSampleGet"]
    assert gets == 1  # primed at open
    clock.tick(0.05)
    (s,) = backend.sample()
    assert all(getattr(s, f) is None for f in GPM_FIELDS)
    assert s.missing["tensor_active"] == "GPM needs 100 ms between samples; 50 ms so far"
    assert nvml.calls["nvmlGpmSampleGet"] == gets  # no sample taken inside the window
    assert s.gpu_util == 0.97  # the cheap reads still happen
    clock.tick(0.06)  # 110 ms since the primed sample
    (s,) = backend.sample()
    assert s.tensor_active == pytest.approx(0.47)
    (t1, t2) = nvml.window_times[-1]
    assert t2 - t1 == pytest.approx(0.11)


def test_the_first_tick_has_no_gpm_value_when_priming_failed():
    clock = Clock()
    nvml = FakeNvml([H100], clock=clock, fail={("nvmlGpmSampleGet", 0): 999})
    backend = _backend(nvml, clock)
    del nvml.fail[("nvmlGpmSampleGet", 0)]
    clock.tick(1.0)
    (s,) = backend.sample()  # primes now
    assert s.sm_active is None and "first GPM window" in s.missing["sm_active"]
    clock.tick(1.0)
    (s,) = backend.sample()
    assert s.sm_active is not None


def test_each_metric_has_its_own_return_code():
    clock = Clock()
    nvml = Pinned([H100], clock=clock, metric_returns={5: 3, 10: 2})  # NOT_SUPPORTED, INVALID
    backend = _backend(nvml, clock)
    clock.tick(1.0)
    (s,) = backend.sample()
    assert s.sm_active == pytest.approx(0.84) and s.sm_occupancy == pytest.approx(0.31)
    assert s.tensor_active is None and s.dram_active is None
    assert s.missing["tensor_active"] == "not supported on this GPU (NVML GPM metric)"
    assert s.missing["dram_active"] == "NVML GPM metric error 2: Invalid Argument"


@pytest.mark.parametrize("size", [98, 210, 477])
def test_the_request_is_sized_by_the_binding_not_hard_coded(size):
    clock = Clock()
    nvml = Pinned([H100], clock=clock, metric_max=size)
    backend = _backend(nvml, clock)
    clock.tick(1.0)
    (s,) = backend.sample()
    assert s.dram_active == pytest.approx(0.29)


def test_a_binding_with_room_for_fewer_metrics_says_so():
    clock = Clock()
    nvml = Pinned([H100], clock=clock, metric_max=3)
    backend = _backend(nvml, clock)
    clock.tick(1.0)
    (s,) = backend.sample()
    assert s.tensor_active == pytest.approx(0.47)
    assert s.dram_active is None and "holds only 3" in s.missing["dram_active"]


def test_metric_ids_made_tuples_by_a_buggy_binding_still_work():
    nvml = SimpleNamespace(NVML_GPM_METRIC_ANY_TENSOR_UTIL=(5,), NVML_GPM_METRIC_SM_UTIL=2)
    assert metric_id(nvml, "NVML_GPM_METRIC_ANY_TENSOR_UTIL", 5) == 5
    assert metric_id(nvml, "NVML_GPM_METRIC_DRAM_BW_UTIL", 10) == 10  # absent: NVML's number
    clock = Clock()
    buggy = Pinned([H100], clock=clock)
    buggy.NVML_GPM_METRIC_ANY_TENSOR_UTIL = (5,)
    backend = _backend(buggy, clock)
    clock.tick(1.0)
    (s,) = backend.sample()
    assert s.tensor_active == pytest.approx(0.47)


def test_a_failed_call_is_none_with_a_reason_and_the_rest_still_reads():
    clock = Clock()
    fail = {("nvmlDeviceGetPowerUsage", 0): 3, ("nvmlDeviceGetTotalEnergyConsumption", 0): 999}
    backend = _backend(Pinned([H100], clock=clock, fail=fail), clock)
    clock.tick(1.0)
    (s,) = backend.sample()
    assert s.power_w is None and s.missing["power_w"] == "not supported on this GPU (NVML)"
    assert s.energy_mj is None and s.missing["energy_mj"] == "NVML error 999: Unknown Error"
    assert s.gpu_util == 0.97 and s.tensor_active == pytest.approx(0.47)
    assert set(s.missing) == {"power_w", "energy_mj"}


def test_an_odd_value_from_nvml_never_escapes_sample():
    clock = Clock()
    nvml = Pinned([H100], clock=clock)
    nvml.nvmlDeviceGetUtilizationRates = lambda h: object()  # no .gpu
    nvml.nvmlDeviceGetComputeRunningProcesses = None  # an old binding without it
    backend = _backend(nvml, clock)
    (s,) = backend.sample()
    assert s.gpu_util is None and "unexpected value" in s.missing["gpu_util"]
    assert "has no nvmlDeviceGetComputeRunningProcesses" in s.missing["process_mem_bytes"]


def test_throttle_reasons_fall_back_to_the_older_name():
    clock = Clock()
    nvml = Pinned([H100], clock=clock, fail={("nvmlDeviceGetCurrentClocksEventReasons", 0): 13})
    backend = _backend(nvml, clock)
    for _ in range(3):
        (s,) = backend.sample()
        assert s.throttle_mask == 0x44
    assert nvml.calls["nvmlDeviceGetCurrentClocksEventReasons"] == 1  # tried once, then dropped
    assert nvml.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 3
    old = Pinned([H100], clock=clock)
    old.nvmlDeviceGetCurrentClocksEventReasons = None  # binding older than the rename
    (s,) = _backend(old, clock).sample()
    assert s.throttle_mask == 0x44


def test_a_lost_gpu_is_marked_lost_and_left_alone():
    clock = Clock()
    nvml = fakes.profile("lost", clock=clock)
    backend = _backend(nvml, clock)
    for _ in range(fakes.LOST_AFTER):
        clock.tick(1.0)
        ok, other = backend.sample()
        assert not other.lost and other.gpu_util is not None
    clock.tick(1.0)
    ok, lost = backend.sample()
    assert lost.lost and not ok.lost and ok.tensor_active is not None
    why = "GPU lost (NVML_ERROR_GPU_IS_LOST): it needs a reset or a reboot"
    assert all(lost.missing[f] == why for f in SAMPLE_FIELDS)
    calls = sum(nvml.calls.values())
    ok_calls = nvml.calls["nvmlDeviceGetUtilizationRates"]
    clock.tick(1.0)
    ok, lost = backend.sample()
    assert lost.lost and lost.missing["power_w"] == why
    # only GPU 0 was read: one utilization read and nothing on the lost GPU
    assert nvml.calls["nvmlDeviceGetUtilizationRates"] == ok_calls + 1
    # GPU 0 only: 8 cheap reads (utilization, memory, power, energy, 2 clocks, throttle,
    # processes) + 1 GPM sample + 1 metrics request = 10
    assert sum(nvml.calls.values()) - calls == 10


def test_a_gpu_on_which_every_call_fails_is_lost_after_three_samples():
    clock = Clock()
    names = [n for n in dir(FakeNvml) if n.startswith("nvmlDevice") or n == "nvmlGpmSampleGet"]
    nvml = FakeNvml([H100], clock=clock)
    backend = _backend(nvml, clock)
    nvml.fail = {(n, 0): 999 for n in names}  # e.g. the driver wedged after open
    for k in range(3):
        clock.tick(1.0)
        (s,) = backend.sample()
        assert s.lost == (k == 2)
    assert "every NVML call failed 3 times in a row" in s.missing["gpu_util"]


def test_not_supported_everywhere_is_not_a_lost_gpu():
    clock = Clock()
    names = [n for n in dir(FakeNvml) if n.startswith("nvmlDeviceGet")]
    nvml = FakeNvml([A100], clock=clock)
    backend = _backend(nvml, clock)
    nvml.fail = {(n, 0): 3 for n in names}
    for _ in range(5):
        (s,) = backend.sample()
    assert not s.lost


def test_an_ampere_has_no_gpm_and_allocates_nothing():
    clock = Clock()
    nvml = FakeNvml([A100], clock=clock)
    backend = _backend(nvml, clock)
    (dev,) = backend.devices()
    assert not dev.gpm and dev.gpm_reason == NO_GPM and nvml.allocs == 0
    clock.tick(1.0)
    (s,) = backend.sample()
    assert s.gpu_util is not None
    assert all(getattr(s, f) is None and s.missing[f] == NO_GPM for f in GPM_FIELDS)


@pytest.mark.parametrize("code, why", [(3, NO_GPM), (13, NO_GPM_LIBRARY)])
def test_gpm_support_errors_degrade_with_a_reason(code, why):
    clock = Clock()
    (dev,) = _backend(FakeNvml([H100], clock=clock, gpm_query_error=code), clock).devices()
    assert not dev.gpm and dev.gpm_reason == why


def test_a_mig_instance_is_one_device_with_gpm_through_the_mig_call():
    clock = Clock()
    nvml = FakeNvml([H100_MIG], clock=clock)
    backend = _backend(nvml, clock)
    (dev,) = backend.devices()
    assert dev.mig and dev.gpu_instance_id == 2 and dev.gpu_index == 0
    assert dev.name == "NVIDIA H100 80GB HBM3 MIG 3g.40gb"
    assert dev.mem_total_bytes == 40448 * 2**20
    assert dev.power_limit_w is None and "MIG" in dev.missing["power_limit_w"]
    clock.tick(10.0)
    (s,) = backend.sample()
    assert nvml.calls["nvmlGpmMigSampleGet"] == 2 and nvml.calls["nvmlGpmSampleGet"] == 0
    assert s.tensor_active is not None and s.mem_used_bytes is not None
    assert s.gpu_util is None and s.missing["gpu_util"] == "not reported for a MIG instance by NVML"
    assert not s.lost


def test_a_sample_after_close_says_closed():
    clock = Clock()
    backend = _backend(FakeNvml([H100], clock=clock), clock)
    backend.close()
    (s,) = backend.sample()
    assert s.missing["gpu_util"] == "the GPU sampler is closed"


def test_the_backend_uses_only_names_the_real_binding_has():
    pynvml = pytest.importorskip("pynvml")
    used = [n for n in dir(FakeNvml) if n.startswith(("nvml", "NVML_")) and n[4:5] != "_"]
    missing = [n for n in used if not hasattr(pynvml, n)]
    assert missing == []
    for _field, name, number in GPM_METRICS:
        assert metric_id(pynvml, name, -1) == number
    req = pynvml.c_nvmlGpmMetricsGet_t()
    names = {f[0] for f in type(req)._fields_}
    assert {"version", "numMetrics", "sample1", "sample2", "metrics"} <= names
    assert {"metricId", "nvmlReturn", "value"} <= {f[0] for f in type(req.metrics[0])._fields_}
    assert pynvml.NVML_GPM_METRICS_GET_VERSION == 1


def test_the_backend_fills_the_real_ctypes_request():
    pynvml = pytest.importorskip("pynvml")

    class RealStruct(FakeNvml):
        c_nvmlGpmMetricsGet_t = pynvml.c_nvmlGpmMetricsGet_t

        def nvmlGpmSampleAlloc(self):
            self.allocs += 1
            return pynvml.c_nvmlGpmSample_t()

        def nvmlGpmSampleGet(self, h, sample):
            return sample

        def nvmlGpmMetricsGet(self, req):
            assert req.version == 1 and req.numMetrics == 4
            for i in range(req.numMetrics):
                req.metrics[i].nvmlReturn = 0
                req.metrics[i].value = 10.0 * req.metrics[i].metricId  # id 2 -> 20 %, ...
            return req

    clock = Clock()
    nvml = RealStruct([H100], clock=clock)
    nvml.c_nvmlGpmMetricsGet_t = pynvml.c_nvmlGpmMetricsGet_t
    backend = _backend(nvml, clock)
    clock.tick(1.0)
    (s,) = backend.sample()
    # ids 2, 3, 5, 10 -> 20 %, 30 %, 50 %, 100 %
    assert (s.sm_active, s.sm_occupancy, s.tensor_active, s.dram_active) == pytest.approx(
        (0.2, 0.3, 0.5, 1.0)
    )


# --- the scripted fakes ---------------------------------------------------------------------


def test_the_fake_trace_keeps_the_ladder_in_order():
    for key in (0, 1, 7, 201):
        for step in range(1500):
            a = trace(key, step * 0.61)  # 0 to 915 s: idle, ramp, eval, checkpoint
            assert 1 >= a["gpu_util"] >= a["sm_active"] >= a["sm_occupancy"] >= 0
            assert a["sm_active"] >= a["tensor_active"] >= 0
            assert 0 <= a["dram_active"] <= 1


def test_the_fake_is_deterministic_and_looks_like_training():
    def run():
        clock = Clock()
        backend = open_backend("fake:h100x2", clock=clock)
        out = []
        for _ in range(30):
            clock.tick(1.0)
            out.append([s.as_dict() for s in backend.sample()])
        return out

    first, second = run(), run()
    assert first == second
    late = first[-1][0]  # 30 s in: training
    assert 0.95 <= late["gpu_util"] <= 1.0
    assert 0.3 <= late["tensor_active"] <= 0.6
    assert 0.15 <= late["dram_active"] <= 0.4
    assert 400 <= late["power_w"] <= 700
    assert first[0][0]["throttle_mask"] == 0x1  # idle while loading


def test_the_fake_energy_counter_is_power_times_time():
    clock = Clock()
    backend = open_backend("fake:h100", clock=clock)
    readings = []
    for _ in range(60):
        clock.tick(0.5)
        (s,) = backend.sample()
        readings.append((s.energy_mj, s.power_w))
    for (e1, p1), (e2, p2) in itertools.pairwise(readings):
        assert e2 >= e1  # monotonic
        # trapezoid: (P1 + P2) / 2 * 0.5 s, in mJ (1 mJ of int truncation each side)
        assert e2 - e1 == pytest.approx((p1 + p2) / 2 * 0.5 * 1000, abs=3)
    meter = EnergyMeter()
    for e, _ in readings:
        meter.update(e)
    assert meter.energy_j == pytest.approx((readings[-1][0] - readings[0][0]) / 1000)


def test_the_fake_drives_a_full_hardware_snapshot():
    clock = Clock()
    backend = open_backend("fake:h100x2", clock=clock)
    devices = [d.as_dict() for d in backend.devices()]
    for _ in range(20):
        clock.tick(1.0)
        samples = [s.as_dict() for s in backend.sample()]
    hw = hardware_snapshot(devices, json.loads(json.dumps(samples)), None, dtype="bf16")
    for gpu in hw["gpus"]:
        assert gpu["intensity"] is not None and gpu["missing"] == {"energy_j": "not reported"}
        assert gpu["ridge_point"] == pytest.approx(295.373134328)


# --- the host ---------------------------------------------------------------------------------


def _proc(tmp_path: Path, stat: str) -> Path:
    (tmp_path / "stat").write_text(stat + "cpu0 1 2 3 4 5 6 7 8 0 0\n")
    (tmp_path / "meminfo").write_text(
        "MemTotal:       16384000 kB\nMemFree:         1000000 kB\nMemAvailable:    4096000 kB\n"
    )
    for pid, kb in ((123, 2048), (456, 1024)):
        (tmp_path / str(pid)).mkdir(exist_ok=True)
        (tmp_path / str(pid) / "status").write_text(f"Name:\tpython\nVmRSS:\t    {kb} kB\n")
    return tmp_path


def test_host_cpu_memory_and_rss_from_proc_by_hand(tmp_path):
    clock = Clock()
    proc = _proc(tmp_path, "cpu  100 0 50 800 50 0 0 0 0 0\n")
    host = HostSource(proc, clock=clock)
    first = host.sample([123])
    assert first.cpu_util is None and "two readings" in first.missing["cpu_util"]
    _proc(tmp_path, "cpu  400 0 150 1300 100 0 0 50 0 0\n")
    s = host.sample([123, 456, 789])
    # total 1000 -> 400+150+1300+100+50 = 2000; busy 150 -> 2000-1300-100 = 600; 450/1000
    assert s.cpu_util == pytest.approx(0.45)
    # used = (16,384,000 - 4,096,000) kB * 1024 = 12,582,912,000 B; total 16,777,216,000 B
    assert (s.mem_used_bytes, s.mem_total_bytes) == (12_582_912_000, 16_777_216_000)
    # 2048 kB + 1024 kB = 3072 KiB = 3,145,728 B; pid 789 has exited
    assert s.rss_by_pid == {123: 2_097_152, 456: 1_048_576} and s.rss_bytes == 3_145_728
    assert "789" in s.missing["rss_by_pid"]
    json.dumps(s.as_dict())


def test_host_without_proc_gives_reasons_not_exceptions(tmp_path):
    s = HostSource(tmp_path / "nowhere").sample([1])
    assert s.cpu_util is s.mem_used_bytes is s.rss_bytes is None
    assert all("missing" in s.missing[k] for k in ("cpu_util", "mem_used_bytes", "rss_bytes"))


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_host_reads_this_machine():
    host = HostSource()
    host.sample()
    s = host.sample([os.getpid()])
    assert s.rss_bytes and s.rss_bytes > 1_000_000
    assert 0 < s.mem_used_bytes < s.mem_total_bytes
