"""Scripted stand-ins for NVML, so a dashboard can be shown and tested without a GPU.

``FakeNvml`` has the names ``gpu.NvmlBackend`` uses from ``pynvml`` (functions, constants,
``NVMLError``, ``c_nvmlGpmMetricsGet_t``), so a fake backend is the real backend driven by a
fake library: ``NvmlBackend(FakeNvml(...))``. What it reports is a deterministic function of
the device and the time since the fake was made (no randomness, no state except the energy
counter, which integrates power over the times it is read).

API:

``profile(name, *, clock=time.time) -> FakeNvml``
    ``name``: "h100xN" (N Hopper H100 SXM, NVML name "NVIDIA H100 80GB HBM3", with GPM), "a100xN"
    ("NVIDIA A100-SXM4-80GB", no GPM: the ladder below GPU-Util is None with its reason), "mig"
    (one H100 in MIG mode with one 3g.40gb instance), "nonvml" (``nvmlInit`` fails as when
    libnvidia-ml.so.1 is absent), "lost" (two H100s; GPU 1 is lost after ``LOST_AFTER``
    samples: every NVML call on it then raises NVML_ERROR_GPU_IS_LOST). "h100" = "h100x1".
``PROFILES``: the accepted names, for error messages.
``FakeNvml(gpus, *, clock=time.time, init_error=None, metric_max=98, metric_returns=None,
fail=None, gpm_query_error=None)``: build one by hand (tests do). Counters for tests:
``calls`` (per function name), ``allocs``, ``frees``, ``windows`` (the (sample1, sample2)
pairs ``nvmlGpmMetricsGet`` was given) and ``window_times`` (their times then).
``trace(key, t) -> dict``: the activity fractions of the scripted training run.
``FakeNvml.adopt(pid)``: every device then lists ``pid`` as its compute process and the script
is ``ADOPT_RUNNING_S`` seconds in (``tm attach`` over a fake: a program already training).

The trace: 3 s idle (loading), a 2 s ramp (first step, compile), then training with a 6 s
evaluation every 120 s and a 4 s checkpoint every 300 s. Its values keep the ladder
GPU-Util >= SM activity >= SM occupancy, and tensor activity <= SM activity (a tensor pipe is
only busy inside an active SM). Power follows the activity up to the board limit (with the
power-cap throttle reason near it), and the energy counter is monotonic: it adds the mean
power times the time between reads.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import ClassVar

MiB = 1024 * 1024
GiB = 1024 * MiB
LOST_AFTER = 8
FAKE_PID = 4242  # device k's training process is FAKE_PID + k (pids of nothing real)
ADOPT_RUNNING_S = 10.0  # an adopted process is past the script's 3 s idle and 2 s ramp

# NVML return codes (nvml.h; the same numbers as pynvml's NVML_ERROR_*).
SUCCESS, INVALID_ARGUMENT, NOT_SUPPORTED, NOT_FOUND = 0, 2, 3, 6
LIBRARY_NOT_FOUND, FUNCTION_NOT_FOUND, GPU_IS_LOST, VERSION_MISMATCH = 12, 13, 15, 25


class FakeNVMLError(Exception):
    """Raised like ``pynvml.NVMLError``: ``.value`` is the NVML return code."""

    _TEXT: ClassVar[dict[int, str]] = {
        INVALID_ARGUMENT: "Invalid Argument",
        NOT_SUPPORTED: "Not Supported",
        4: "Insufficient Permissions",
        NOT_FOUND: "Not Found",
        9: "Driver Not Loaded",
        LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
        FUNCTION_NOT_FOUND: "Function Not Found",
        GPU_IS_LOST: "GPU is lost",
        VERSION_MISMATCH: "Argument Version Mismatch",
        999: "Unknown Error",
    }

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return self._TEXT.get(self.value, f"NVML Error with code {self.value}")


@dataclass(frozen=True)
class FakeMig:
    """One MIG instance: its GPU instance id, NVML name, memory and share of the GPU's SMs."""

    gpu_instance_id: int
    name: str
    mem_total: int
    share: float


@dataclass(frozen=True)
class FakeGpu:
    """One scripted physical GPU (figures as NVML reports them for the real part)."""

    name: str
    mem_total: int
    power_limit_w: float
    idle_w: float
    sm_clock_max: int
    mem_clock: int
    gpm: bool
    mig: tuple[FakeMig, ...] = ()
    lost_after: int | None = None  # utilization reads before the GPU is lost
    mig_capable: bool = True  # A100/H100 are; NVML answers NOT_SUPPORTED on parts that are not


H100 = FakeGpu("NVIDIA H100 80GB HBM3", 81559 * MiB, 700.0, 72.0, 1980, 2619, gpm=True)
A100 = FakeGpu("NVIDIA A100-SXM4-80GB", 81920 * MiB, 400.0, 58.0, 1410, 1593, gpm=False)
H100_MIG = FakeGpu(
    H100.name, H100.mem_total, 700.0, 72.0, 1980, 2619, gpm=True,
    mig=(FakeMig(2, "NVIDIA H100 80GB HBM3 MIG 3g.40gb", 40448 * MiB, 3 / 7),),
)  # fmt: skip
PROFILES = ("h100xN", "a100xN", "mig", "nonvml", "lost")


# --- the scripted run ---------------------------------------------------------------------


def _hash01(*parts: int) -> float:
    """A deterministic number in [0, 1) from integers (splitmix64)."""
    x = 0x9E3779B97F4A7C15
    for part in parts:
        x = (x ^ (part & 0xFFFFFFFFFFFFFFFF)) * 0xBF58476D1CE4E5B9 & 0xFFFFFFFFFFFFFFFF
        x = (x ^ (x >> 27)) * 0x94D049BB133111EB & 0xFFFFFFFFFFFFFFFF
        x ^= x >> 31
    return (x >> 11) / float(1 << 53)


def _smooth(key: int, t: float, k: int, period: float = 3.0) -> float:
    """Smooth deterministic noise in [0, 1): cosine interpolation between hashed knots."""
    u = t / period
    i = math.floor(u)
    w = (1 - math.cos(math.pi * (u - i))) / 2
    return (1 - w) * _hash01(key, i, k) + w * _hash01(key, i + 1, k)


def _busy(t: float) -> tuple[float, float]:
    """(share of time with a kernel running, tensor share factor) of the script at ``t`` s."""
    if t < 3.0:
        return 0.0, 0.0
    if t < 5.0:
        return (t - 3.0) / 2.0, 0.6
    if (t - 5.0) % 300.0 >= 296.0:  # checkpoint: the GPU mostly waits on the disk
        return 0.12, 0.2
    if (t - 5.0) % 120.0 >= 114.0:  # evaluation: forward only, smaller batches
        return 0.85, 0.7
    return 1.0, 1.0


def trace(key: int, t: float) -> dict[str, float]:
    """Activity fractions (0..1) of device ``key`` at ``t`` seconds into the scripted run.

    Ordered by construction: gpu_util >= sm_active >= sm_occupancy, sm_active >= tensor_active.
    Typical training values: GPU-Util 0.98-1, SM activity 0.78-0.9, occupancy 0.25-0.4,
    tensor activity 0.4-0.55, DRAM activity 0.2-0.34.
    """
    busy, tensor = _busy(t)
    n = [_smooth(key, t, k) for k in range(5)]
    level = 1.0 - 0.015 * (key % 8)
    gpu_util = busy * (0.975 + 0.025 * n[0])
    sm_active = gpu_util * (0.80 + 0.10 * n[1]) * level
    return {
        "gpu_util": gpu_util,
        "sm_active": sm_active,
        "sm_occupancy": sm_active * (0.32 + 0.12 * n[2]),
        "tensor_active": sm_active * (0.52 + 0.10 * n[3]) * tensor,
        "dram_active": busy * (0.20 + 0.14 * n[4]),
    }


# --- the fake library -----------------------------------------------------------------------


class _Handle:
    def __init__(self, gpu: int, mig: int | None = None) -> None:
        self.gpu, self.mig = gpu, mig

    @property
    def key(self) -> int:
        return self.gpu if self.mig is None else 100 * (self.gpu + 1) + self.mig


class _GpmSample:
    """An opaque GPM sample: which device and when it was taken."""

    def __init__(self) -> None:
        self.key: int | None = None
        self.t: float | None = None


def _request_type(metric_max: int) -> type:
    """A ``c_nvmlGpmMetricsGet_t`` look-alike whose metric array holds ``metric_max``."""

    class Request:
        def __init__(self) -> None:
            self.version = 0
            self.numMetrics = 0
            self.sample1 = self.sample2 = None
            self.metrics = [
                SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0) for _ in range(metric_max)
            ]

    return Request


class FakeNvml:
    """A scripted ``pynvml`` (see the module docstring)."""

    NVMLError = FakeNVMLError
    NVML_SUCCESS = SUCCESS
    NVML_ERROR_INVALID_ARGUMENT = INVALID_ARGUMENT
    NVML_ERROR_NOT_SUPPORTED = NOT_SUPPORTED
    NVML_ERROR_NO_PERMISSION = 4
    NVML_ERROR_NOT_FOUND = NOT_FOUND
    NVML_ERROR_LIBRARY_NOT_FOUND = LIBRARY_NOT_FOUND
    NVML_ERROR_FUNCTION_NOT_FOUND = FUNCTION_NOT_FOUND
    NVML_ERROR_GPU_IS_LOST = GPU_IS_LOST
    NVML_ERROR_UNKNOWN = 999
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_DEVICE_MIG_ENABLE = 1
    NVML_GPM_METRICS_GET_VERSION = 1
    NVML_GPM_METRIC_GRAPHICS_UTIL = 1
    NVML_GPM_METRIC_SM_UTIL = 2
    NVML_GPM_METRIC_SM_OCCUPANCY = 3
    NVML_GPM_METRIC_ANY_TENSOR_UTIL = 5
    NVML_GPM_METRIC_DRAM_BW_UTIL = 10
    _METRIC_FIELD: ClassVar[dict[int, str]] = {
        1: "gpu_util",
        2: "sm_active",
        3: "sm_occupancy",
        5: "tensor_active",
        10: "dram_active",
    }

    def __init__(
        self,
        gpus: list[FakeGpu] | tuple[FakeGpu, ...],
        *,
        clock: Callable[[], float] = time.time,
        init_error: int | None = None,
        metric_max: int = 98,
        metric_returns: dict[int, int] | None = None,
        fail: dict[tuple[str, int], int] | None = None,
        gpm_query_error: int | None = None,
    ) -> None:
        """``fail``: {(function name, gpu index): NVML code} to raise on every such call;
        ``metric_returns``: {metric id: NVML code} written into that metric's own nvmlReturn."""
        self.gpus = tuple(gpus)
        self.clock = clock
        self.t0 = clock()
        self.init_error = init_error
        self.c_nvmlGpmMetricsGet_t = _request_type(metric_max)
        self.metric_returns = dict(metric_returns or {})
        self.fail = dict(fail or {})
        self.gpm_query_error = gpm_query_error
        self.calls: Counter[str] = Counter()
        self.allocs = self.frees = 0
        self.windows: list[tuple[_GpmSample, _GpmSample]] = []
        self.window_times: list[tuple[float, float]] = []  # (sample1.t, sample2.t) at the time
        self.initialized = False
        self._energy: dict[int, tuple[float, float]] = {}  # key: (t, mJ)
        self._util_reads: Counter[int] = Counter()
        self.pid: int | None = None  # adopt(): the one process every device lists

    def adopt(self, pid: int, running_s: float = ADOPT_RUNNING_S) -> None:
        """List ``pid`` as every device's compute process, and move the script ``running_s``
        seconds on: ``tm attach`` arrives while the program already trains. Call before the
        first read (the energy counter starts at the first read)."""
        self.pid = int(pid)
        self.t0 -= running_s

    # --- plumbing ---------------------------------------------------------------------------

    def _t(self) -> float:
        return self.clock() - self.t0

    def _enter(self, fn: str, handle: _Handle | None = None) -> None:
        self.calls[fn] += 1
        if not self.initialized:
            raise FakeNVMLError(1)
        if handle is None:
            return
        gpu = self.gpus[handle.gpu]
        if gpu.lost_after is not None and self._util_reads[handle.gpu] > gpu.lost_after:
            raise FakeNVMLError(GPU_IS_LOST)
        code = self.fail.get((fn, handle.gpu))
        if code is not None:
            raise FakeNVMLError(code)

    def _now(self, handle: _Handle, t: float | None = None) -> dict:
        """The scripted state of a device at ``t`` s into the run (default: now)."""
        t = self._t() if t is None else t
        gpu = self.gpus[handle.gpu]
        act = trace(handle.key, t)
        load = 0.2 * act["gpu_util"] + 0.5 * act["sm_active"] + 0.6 * act["tensor_active"]
        wobble = (_smooth(handle.key, t, 7, period=1.3) - 0.5) * (40.0 if load else 4.0)
        top = 0.96 * gpu.power_limit_w
        watts = min(gpu.idle_w + (top - gpu.idle_w) * load + wobble, gpu.power_limit_w)
        capped = watts >= 0.94 * gpu.power_limit_w
        return {"t": t, "act": act, "watts": max(watts, 0.0), "capped": capped, "gpu": gpu}

    # --- init and devices ----------------------------------------------------------------------

    def nvmlInit(self) -> None:
        self.calls["nvmlInit"] += 1
        if self.init_error is not None:
            raise FakeNVMLError(self.init_error)
        self.initialized = True

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.initialized = False

    DRIVER_VERSION = "550.54.15"  # a real R550 driver's version strings (nvidia-smi prints it)

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return self.DRIVER_VERSION

    def nvmlSystemGetNVMLVersion(self) -> str:
        self._enter("nvmlSystemGetNVMLVersion")
        return f"12.{self.DRIVER_VERSION}"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._enter("nvmlSystemGetCudaDriverVersion")
        return 12040  # CUDA 12.4, as R550 reports

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise FakeNVMLError(INVALID_ARGUMENT)
        return _Handle(index)

    def nvmlDeviceGetName(self, h: _Handle) -> str:
        self._enter("nvmlDeviceGetName", h)
        gpu = self.gpus[h.gpu]
        return gpu.name if h.mig is None else gpu.mig[h.mig].name

    def nvmlDeviceGetUUID(self, h: _Handle) -> str:
        self._enter("nvmlDeviceGetUUID", h)
        x = int(_hash01(h.key, 99) * (1 << 48))
        prefix = "GPU" if h.mig is None else "MIG"
        return f"{prefix}-fa4e{h.key:04x}-0000-4000-8000-{x:012x}"

    def nvmlDeviceGetMigMode(self, h: _Handle) -> list[int]:
        self._enter("nvmlDeviceGetMigMode", h)
        if not self.gpus[h.gpu].mig_capable:
            raise FakeNVMLError(NOT_SUPPORTED)
        on = int(bool(self.gpus[h.gpu].mig))
        return [on, on]

    def nvmlDeviceGetMaxMigDeviceCount(self, h: _Handle) -> int:
        self._enter("nvmlDeviceGetMaxMigDeviceCount", h)
        return 7 if self.gpus[h.gpu].mig else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: _Handle, index: int) -> _Handle:
        self._enter("nvmlDeviceGetMigDeviceHandleByIndex", h)
        if index >= len(self.gpus[h.gpu].mig):
            raise FakeNVMLError(NOT_FOUND)
        return _Handle(h.gpu, index)

    def nvmlDeviceGetGpuInstanceId(self, h: _Handle) -> int:
        self._enter("nvmlDeviceGetGpuInstanceId", h)
        if h.mig is None:
            raise FakeNVMLError(INVALID_ARGUMENT)
        return self.gpus[h.gpu].mig[h.mig].gpu_instance_id

    def nvmlDeviceGetEnforcedPowerLimit(self, h: _Handle) -> int:
        self._enter("nvmlDeviceGetEnforcedPowerLimit", h)
        if h.mig is not None:
            raise FakeNVMLError(NOT_SUPPORTED)
        return int(self.gpus[h.gpu].power_limit_w * 1000)

    # --- cheap reads ---------------------------------------------------------------------------

    def nvmlDeviceGetUtilizationRates(self, h: _Handle) -> SimpleNamespace:
        self._util_reads[h.gpu] += 1
        self._enter("nvmlDeviceGetUtilizationRates", h)
        if h.mig is not None:
            raise FakeNVMLError(NOT_SUPPORTED)
        now = self._now(h)
        return SimpleNamespace(gpu=round(100 * now["act"]["gpu_util"]), memory=0)

    def _mem_used(self, h: _Handle, total: int, t: float) -> int:
        ramp = min(max((t - 3.0) / 2.0, 0.0), 1.0)
        wobble = 1.5 * GiB * _smooth(h.key, t, 8, period=7.0)
        return int(0.5 * GiB + ramp * (0.74 * total - 0.5 * GiB + wobble))

    def nvmlDeviceGetMemoryInfo(self, h: _Handle) -> SimpleNamespace:
        self._enter("nvmlDeviceGetMemoryInfo", h)
        gpu = self.gpus[h.gpu]
        total = gpu.mem_total if h.mig is None else gpu.mig[h.mig].mem_total
        used = self._mem_used(h, total, self._t())
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetPowerUsage(self, h: _Handle) -> int:
        self._enter("nvmlDeviceGetPowerUsage", h)
        if h.mig is not None:
            raise FakeNVMLError(NOT_SUPPORTED)
        return int(self._now(h)["watts"] * 1000)

    def nvmlDeviceGetTotalEnergyConsumption(self, h: _Handle) -> int:
        """mJ since "driver load": mean power times the time between reads (monotonic)."""
        self._enter("nvmlDeviceGetTotalEnergyConsumption", h)
        if h.mig is not None:
            raise FakeNVMLError(NOT_SUPPORTED)
        now = self._now(h)
        last_t, mj = self._energy.get(h.key, (now["t"], 3.6e9 + 1e8 * h.key))
        dt = max(now["t"] - last_t, 0.0)
        if dt > 0:
            before = self._now(h, last_t)["watts"]
            mj += (before + now["watts"]) / 2 * dt * 1000
        self._energy[h.key] = (max(now["t"], last_t), mj)
        return int(mj)

    def nvmlDeviceGetClockInfo(self, h: _Handle, kind: int) -> int:
        self._enter("nvmlDeviceGetClockInfo", h)
        now = self._now(h)
        gpu = now["gpu"]
        if kind == self.NVML_CLOCK_MEM:
            return gpu.mem_clock
        if now["act"]["gpu_util"] == 0:
            return 345
        if now["capped"]:
            over = (now["watts"] - 0.94 * gpu.power_limit_w) / (0.06 * gpu.power_limit_w)
            return int(gpu.sm_clock_max - 180 * min(over, 1.0))
        return gpu.sm_clock_max

    def _reasons(self, h: _Handle) -> int:
        now = self._now(h)
        if now["act"]["gpu_util"] == 0:
            return 0x1  # GpuIdle
        return 0x4 if now["capped"] else 0x0  # SwPowerCap

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: _Handle) -> int:
        self._enter("nvmlDeviceGetCurrentClocksEventReasons", h)
        return self._reasons(h)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: _Handle) -> int:
        """The same bitmask under its pre-rename name (older drivers)."""
        self._enter("nvmlDeviceGetCurrentClocksThrottleReasons", h)
        return self._reasons(h)

    def nvmlDeviceGetComputeRunningProcesses(self, h: _Handle) -> list:
        self._enter("nvmlDeviceGetComputeRunningProcesses", h)
        t = self._t()
        if t < 3.0:
            return []
        gpu = self.gpus[h.gpu]
        total = gpu.mem_total if h.mig is None else gpu.mig[h.mig].mem_total
        used = self._mem_used(h, total, t) - GiB // 2
        pid = FAKE_PID + h.key if self.pid is None else self.pid
        return [SimpleNamespace(pid=pid, usedGpuMemory=used)]

    # --- GPM -----------------------------------------------------------------------------------

    def nvmlGpmQueryDeviceSupport(self, h: _Handle) -> SimpleNamespace:
        self._enter("nvmlGpmQueryDeviceSupport", h)
        if self.gpm_query_error is not None:
            raise FakeNVMLError(self.gpm_query_error)
        return SimpleNamespace(version=1, isSupportedDevice=int(self.gpus[h.gpu].gpm))

    def nvmlGpmSampleAlloc(self) -> _GpmSample:
        self._enter("nvmlGpmSampleAlloc")
        self.allocs += 1
        return _GpmSample()

    def nvmlGpmSampleFree(self, sample: _GpmSample) -> None:
        self._enter("nvmlGpmSampleFree")
        self.frees += 1

    def nvmlGpmSampleGet(self, h: _Handle, sample: _GpmSample) -> _GpmSample:
        self._enter("nvmlGpmSampleGet", h)
        if not self.gpus[h.gpu].gpm or self.gpus[h.gpu].mig:
            raise FakeNVMLError(NOT_SUPPORTED)
        sample.key, sample.t = h.key, self._t()
        return sample

    def nvmlGpmMigSampleGet(self, h: _Handle, gpu_instance_id: int, sample: _GpmSample):
        self._enter("nvmlGpmMigSampleGet", h)
        gpu = self.gpus[h.gpu]
        ids = [m.gpu_instance_id for m in gpu.mig]
        if not gpu.gpm or gpu_instance_id not in ids:
            raise FakeNVMLError(NOT_SUPPORTED if not gpu.gpm else NOT_FOUND)
        sample.key, sample.t = _Handle(h.gpu, ids.index(gpu_instance_id)).key, self._t()
        return sample

    def nvmlGpmMetricsGet(self, request):
        self.calls["nvmlGpmMetricsGet"] += 1
        s1, s2 = request.sample1, request.sample2
        if request.version != self.NVML_GPM_METRICS_GET_VERSION:
            raise FakeNVMLError(VERSION_MISMATCH)
        if request.numMetrics > len(request.metrics):
            raise FakeNVMLError(INVALID_ARGUMENT)
        if s1 is None or s2 is None or s1.t is None or s2.t is None or s1.key != s2.key:
            raise FakeNVMLError(INVALID_ARGUMENT)
        self.windows.append((s1, s2))
        self.window_times.append((s1.t, s2.t))
        # the window's mean, from five points across it
        points = [trace(s1.key, s1.t + (s2.t - s1.t) * (i + 0.5) / 5) for i in range(5)]
        for i in range(request.numMetrics):
            metric = request.metrics[i]
            field = self._METRIC_FIELD.get(metric.metricId)
            code = self.metric_returns.get(metric.metricId, SUCCESS if field else NOT_SUPPORTED)
            metric.nvmlReturn = code
            metric.value = 100 * sum(p[field] for p in points) / 5 if code == 0 else 0.0
        return request


def profile(name: str, *, clock: Callable[[], float] = time.time) -> FakeNvml:
    """A scripted ``FakeNvml`` by name (``PROFILES``); ValueError naming them otherwise."""
    key = name.strip().lower()
    count = 1
    base, sep, times = key.partition("x")
    if base in ("h100", "a100"):
        if sep:
            if not times.isdigit() or not 1 <= int(times) <= 16:
                raise ValueError(f"bad GPU count in fake profile {name!r}: use 1 to 16")
            count = int(times)
        return FakeNvml([H100 if base == "h100" else A100] * count, clock=clock)
    if key == "mig":
        return FakeNvml([H100_MIG], clock=clock)
    if key == "nonvml":
        return FakeNvml([], clock=clock, init_error=LIBRARY_NOT_FOUND)
    if key == "lost":
        lost = replace(H100, lost_after=LOST_AFTER)
        return FakeNvml([H100, lost], clock=clock)
    raise ValueError(f"unknown fake GPU profile {name!r}; accepted: {', '.join(PROFILES)}")
