"""NVML backend: the one module that touches NVML (``pynvml``, from the ``nvidia-ml-py`` package).

NVML creates no CUDA context (docs/architecture.md the no-CUDA-context invariant), and this module
imports no CUDA binding (torch, cupy, pycuda, cuda); ``pynvml`` itself is imported lazily by
``load_nvml()``, so importing this module costs nothing on a machine without it.

API:

``load_nvml() -> module``
    ``import pynvml``; ``BackendUnavailable`` with a plain reason when it is not installed.
``NvmlBackend(nvml=None, *, clock=time.monotonic, wall=time.time, min_gpm_interval_s=0.1,
lost_after=3, kind="nvml")``
    ``nvml``: the pynvml module, or any object with the same names (``fake.FakeNvml``; tests
    inject one); None loads the real one. ``nvmlInit`` runs once here; failure raises
    ``BackendUnavailable("no NVML: <why>")``. Then ``devices()``, ``sample()``, ``close()`` as
    in ``base.GpuBackend``; ``sample()`` never raises. ``system()``: driver, NVML and CUDA
    driver versions and each physical GPU's MIG mode (for ``tm doctor``).

Per tick and device (docs/spec.md "Hardware sampling"):

- Cheap reads: ``nvmlDeviceGetUtilizationRates(h).gpu`` (GPU-Util, %), ``GetMemoryInfo``
  (bytes), ``GetPowerUsage`` (mW), ``GetTotalEnergyConsumption`` (mJ), ``GetClockInfo`` (SM and
  memory, MHz), ``GetCurrentClocksEventReasons`` (falling back to the older
  ``GetCurrentClocksThrottleReasons``), ``GetComputeRunningProcesses`` (per-pid bytes).
- GPM (Hopper and newer, when ``nvmlGpmQueryDeviceSupport(h).isSupportedDevice``): two samples
  per device are allocated once at open and *swapped* each tick, never reallocated; the first
  is taken at open. A tick reads metrics only when at least ``min_gpm_interval_s`` (NVIDIA asks
  for 100 ms) has passed since the previous GPM sample; otherwise the four GPM fields are None
  with that reason and the window simply grows. ``nvmlGpmMetricsGet`` gets a request with
  ``version = NVML_GPM_METRICS_GET_VERSION``, sized by the binding's own struct
  (``len(request.metrics)``: 98, 210 or 477 depending on the version, never hard-coded), and
  each metric's own ``nvmlReturn`` is checked: a value counts only when it is 0. Metric ids
  are read from the binding (a 2025 build made some of them one-element tuples through
  trailing commas; those are unwrapped), falling back to NVML's numbers.
- MIG: with MIG mode on, each MIG instance is one device (its own handle for memory and
  processes); GPM goes through ``nvmlGpmMigSampleGet(parent, gpu_instance_id, sample)``. Reads
  NVML refuses on a MIG handle are None with "not reported for a MIG instance by NVML".
- Failures: any exception from a call makes that call's fields None with a reason.
  ``NVML_ERROR_GPU_IS_LOST`` marks the device lost at once; ``lost_after`` samples in a row in
  which every call failed (other than "not supported"/"no permission") mark it lost too. A
  lost device is not called again; its samples have ``lost=True`` and the reason everywhere.

Verified against fakes only (``tests/unit/test_sources.py``); not yet run on a GPU.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from trainmeter.core.counters import fraction_from_percent, power_w
from trainmeter.sources.base import (
    GPM_FIELDS,
    GPM_FIRST,
    MIG_NOT_SUPPORTED,
    NO_GPM,
    NO_GPM_LIBRARY,
    NO_NVML_PACKAGE,
    BackendUnavailable,
    DeviceInfo,
    GpuSample,
)

# (sample field, binding constant, NVML's number for it); nvml.h nvmlGpmMetricId_t.
GPM_METRICS = (
    ("sm_active", "NVML_GPM_METRIC_SM_UTIL", 2),
    ("sm_occupancy", "NVML_GPM_METRIC_SM_OCCUPANCY", 3),
    ("tensor_active", "NVML_GPM_METRIC_ANY_TENSOR_UTIL", 5),
    ("dram_active", "NVML_GPM_METRIC_DRAM_BW_UTIL", 10),
)
_THROTTLE_FNS = (
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
)
_NOT_AVAILABLE = (0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF)  # NVML_VALUE_NOT_AVAILABLE as uint / ulonglong
_FAILED = object()
NVML_LIBRARY = "libnvidia-ml.so.1"
NO_NVML_LIBRARY = f"{NVML_LIBRARY} not found (no NVIDIA driver on this machine)"


def load_nvml():
    """The ``pynvml`` module, imported on first use; ``BackendUnavailable`` when not installed."""
    try:
        import pynvml  # noqa: TID251 - this module is the one NVML gateway
    except ImportError as err:
        raise BackendUnavailable(f"no NVML: {NO_NVML_PACKAGE}") from err
    return pynvml


def check_nvml_library() -> None:
    """Raise ``BackendUnavailable`` as ``nvmlInit`` would when NVML's library cannot load
    (Linux: ``libnvidia-ml.so.1``, the name pynvml loads), found with ctypes alone: on a
    machine without the NVIDIA driver, importing pynvml (about 20 ms) only to hear that is
    a cost every ``tm`` run would pay. The reason is the one the import and ``nvmlInit`` would
    give (the package's absence first). Nothing off Linux, or when the library loads."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        ctypes.CDLL(NVML_LIBRARY)
        return
    except OSError:
        pass
    import importlib.util

    try:
        installed = importlib.util.find_spec("pynvml") is not None
    except (ImportError, ValueError):
        installed = False
    raise BackendUnavailable(f"no NVML: {NO_NVML_LIBRARY if installed else NO_NVML_PACKAGE}")


def metric_id(nvml, name: str, default: int) -> int:
    """A GPM metric id from the binding, unwrapping a one-element tuple (``X = 5,`` bug)."""
    value = getattr(nvml, name, default)
    if isinstance(value, (tuple, list)):
        value = value[0] if value else default
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _has(nvml, name: str) -> bool:
    """Whether the binding has a callable ``name`` (an old nvidia-ml-py may lack it)."""
    return callable(getattr(nvml, name, None))


def _uint(value) -> int | None:
    """An NVML unsigned value as int, None for NVML_VALUE_NOT_AVAILABLE."""
    value = int(value)
    return None if value in _NOT_AVAILABLE or value < 0 else value


def _text(value) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return None if value is None else str(value)


def _cuda_version(value) -> str | None:
    """NVML's CUDA driver version integer (12040) as "12.4" (major * 1000 + minor * 10)."""
    value = int(value)
    return None if value <= 0 else f"{value // 1000}.{value % 1000 // 10}"


def _procs(raw) -> dict[int, int]:
    """{pid: used GPU bytes} from ``nvmlDeviceGetComputeRunningProcesses``."""
    out: dict[int, int] = {}
    for proc in raw:
        pid, used = getattr(proc, "pid", None), getattr(proc, "usedGpuMemory", None)
        if isinstance(pid, int) and isinstance(used, int) and used not in _NOT_AVAILABLE:
            out[pid] = out.get(pid, 0) + used
    return out


class _Device:
    """One device's handles and GPM state (internal)."""

    def __init__(self, info: DeviceInfo, handle, parent, gpu_instance_id: int | None) -> None:
        self.info = info
        self.handle = handle  # reads (a MIG instance's own handle)
        self.parent = parent  # the physical GPU (GPM)
        self.gi = gpu_instance_id
        self.pair: list | None = None  # [previous, spare] GPM samples, swapped each tick
        self.request = None  # one c_nvmlGpmMetricsGet_t, reused
        self.prev_t: float | None = None  # clock() of pair[0]; None until primed
        self.lost: str | None = info.lost
        self.fail_streak = 0


class _Reader:
    """Calls NVML for one device sample: failures become reasons, loss is noticed."""

    def __init__(self, backend: NvmlBackend, dev: _Device, sample: GpuSample) -> None:
        self.b, self.dev, self.s = backend, dev, sample
        self.ok = self.hard = 0
        self.lost: str | None = None
        self.last_code: int | None = None  # NVML code of the last failed call

    def note(self, fields, reason: str) -> None:
        for name in fields:
            self.s.missing[name] = reason

    def call(self, fields, fn_name: str, *args):
        """``nvml.<fn_name>(*args)`` or ``_FAILED`` (reasons noted for ``fields``)."""
        if self.lost:
            self.note(fields, self.lost)
            return _FAILED
        fn = getattr(self.b.nvml, fn_name, None)
        if fn is None:
            self.note(fields, f"this nvidia-ml-py has no {fn_name}")
            return _FAILED
        try:
            value = fn(*args)
        except Exception as err:
            code = self.last_code = self.b.code(err)
            if code == self.b.GPU_IS_LOST:
                self.lost = self.b.why(err)
            elif code not in self.b.SOFT:
                self.hard += 1
            self.note(fields, self.lost or self.b.why(err, mig=self.dev.info.mig))
            return _FAILED
        self.ok += 1
        return value

    def take(self, fields, convert: Callable, fn_name: str, *args) -> None:
        """Call, convert the result to one value per field, and set them on the sample."""
        raw = self.call(fields, fn_name, *args)
        if raw is _FAILED:
            return
        try:
            values = convert(raw)
            values = tuple(values) if len(fields) > 1 else (values,)
            if len(values) != len(fields):
                raise ValueError(f"{len(values)} values for {len(fields)} fields")
        except Exception as err:
            self.note(fields, f"unexpected value from NVML {fn_name}: {err!r}")
            return
        for name, value in zip(fields, values, strict=True):
            setattr(self.s, name, value)
            if value is None:
                self.s.missing.setdefault(name, f"NVML gave no value ({fn_name})")


class NvmlBackend:
    """GPU samples from NVML (see the module docstring). One instance per process."""

    def __init__(
        self,
        nvml=None,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        min_gpm_interval_s: float = 0.1,
        lost_after: int = 3,
        kind: str = "nvml",
    ) -> None:
        if nvml is None:
            check_nvml_library()
        self.nvml = load_nvml() if nvml is None else nvml
        self.kind = kind
        self.reason: str | None = None
        self._clock, self._wall = clock, wall
        self._min_gap = float(min_gpm_interval_s)
        self._lost_after = int(lost_after)
        self._closed = False
        nv = self.nvml
        self._error = getattr(nv, "NVMLError", Exception)
        self.NOT_SUPPORTED = getattr(nv, "NVML_ERROR_NOT_SUPPORTED", 3)
        self.FUNCTION_NOT_FOUND = getattr(nv, "NVML_ERROR_FUNCTION_NOT_FOUND", 13)
        self.GPU_IS_LOST = getattr(nv, "NVML_ERROR_GPU_IS_LOST", 15)
        no_permission = getattr(nv, "NVML_ERROR_NO_PERMISSION", 4)
        self.SOFT = (self.NOT_SUPPORTED, no_permission, self.FUNCTION_NOT_FOUND)
        self._metrics = [(f, metric_id(nv, name, num)) for f, name, num in GPM_METRICS]
        self._gpm_version = int(getattr(nv, "NVML_GPM_METRICS_GET_VERSION", 1))
        self._throttle_fns = [n for n in _THROTTLE_FNS if _has(nv, n)]
        try:
            nv.nvmlInit()
        except Exception as err:
            raise BackendUnavailable(f"no NVML: {self.why(err)}") from err
        try:
            count = int(nv.nvmlDeviceGetCount())
        except Exception as err:
            self._shutdown()
            raise BackendUnavailable(f"NVML could not count GPUs: {self.why(err)}") from err
        self._devices: list[_Device] = []
        self._gpu_count = count
        self._mig_modes: dict[int, str] = {}  # physical GPU index: "on", "off", "not supported"
        for gpu_index in range(count):
            self._devices.extend(self._open_gpu(gpu_index))
        if not self._devices:
            self.reason = "NVML found no GPU" if count == 0 else "no usable GPU (MIG, no instances)"

    # --- errors ---------------------------------------------------------------------------

    def code(self, err: BaseException) -> int | None:
        """The NVML return code of an NVMLError, else None."""
        return getattr(err, "value", None) if isinstance(err, self._error) else None

    def why(self, err: BaseException, *, mig: bool = False) -> str:
        """A plain reason for a failed call."""
        code = self.code(err)
        if code == self.NOT_SUPPORTED:
            return MIG_NOT_SUPPORTED if mig else "not supported on this GPU (NVML)"
        if code == self.FUNCTION_NOT_FOUND:
            return "this NVML driver lacks the function"
        if code == self.GPU_IS_LOST:
            return "GPU lost (NVML_ERROR_GPU_IS_LOST): it needs a reset or a reboot"
        if code == getattr(self.nvml, "NVML_ERROR_LIBRARY_NOT_FOUND", 12):
            return NO_NVML_LIBRARY
        if code == getattr(self.nvml, "NVML_ERROR_DRIVER_NOT_LOADED", 9):
            return "the NVIDIA driver is not loaded"
        try:
            text = str(err)
        except Exception:
            text = ""
        if code is not None:
            return f"NVML error {code}: {text}" if text else f"NVML error {code}"
        return f"{type(err).__name__}: {text}"

    def _code_text(self, code: int) -> str:
        """A reason for a GPM metric's own nvmlReturn."""
        if code == self.NOT_SUPPORTED:
            return "not supported on this GPU (NVML GPM metric)"
        try:
            return f"NVML GPM metric error {code}: {self._error(code)}"
        except Exception:
            return f"NVML GPM metric error {code}"

    # --- open -----------------------------------------------------------------------------

    def _open_gpu(self, gpu_index: int) -> list[_Device]:
        nv = self.nvml
        index = len(self._devices)
        try:
            handle = nv.nvmlDeviceGetHandleByIndex(gpu_index)
        except Exception as err:
            lost = f"could not open GPU {gpu_index}: {self.why(err)}"
            info = DeviceInfo(index=index, gpu_index=gpu_index, lost=lost)
            return [_Device(info, None, None, None)]
        mig_on = False
        try:
            mig_on = int(nv.nvmlDeviceGetMigMode(handle)[0]) == getattr(
                nv, "NVML_DEVICE_MIG_ENABLE", 1
            )
            self._mig_modes[gpu_index] = "on" if mig_on else "off"
        except Exception as err:  # not a MIG-capable GPU (NOT_SUPPORTED) or an old binding
            code = self.code(err)
            self._mig_modes[gpu_index] = (
                "not supported" if code == self.NOT_SUPPORTED else f"unknown: {self.why(err)}"
            )
        gpm, gpm_reason = self._gpm_support(handle)
        if not mig_on:
            info = self._facts(handle, index, gpu_index, gpm, gpm_reason)
            return [self._arm(_Device(info, handle, handle, None))]
        if gpm and not _has(nv, "nvmlGpmMigSampleGet"):
            gpm, gpm_reason = False, NO_GPM_LIBRARY
        out = []
        try:
            slots = int(nv.nvmlDeviceGetMaxMigDeviceCount(handle))
        except Exception:
            slots = 0
        for slot in range(slots):
            try:
                mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except Exception:
                continue  # an empty slot (NVML_ERROR_NOT_FOUND)
            try:
                gi = int(nv.nvmlDeviceGetGpuInstanceId(mig))
            except Exception:
                gi = None
            ok = gpm and gi is not None
            why = gpm_reason if not gpm else (None if ok else "no GPU instance id for GPM")
            info = self._facts(mig, index + len(out), gpu_index, ok, why, mig=True, gi=gi)
            out.append(self._arm(_Device(info, mig, handle, gi)))
        return out

    def _gpm_support(self, handle) -> tuple[bool, str | None]:
        fn = getattr(self.nvml, "nvmlGpmQueryDeviceSupport", None)
        if fn is None or not _has(self.nvml, "nvmlGpmMetricsGet"):
            return False, NO_GPM_LIBRARY
        try:
            support = fn(handle)
        except Exception as err:
            code = self.code(err)
            if code == self.NOT_SUPPORTED:
                return False, NO_GPM
            if code == self.FUNCTION_NOT_FOUND:
                return False, NO_GPM_LIBRARY
            return False, f"NVML GPM unavailable: {self.why(err)}"
        return (True, None) if getattr(support, "isSupportedDevice", 0) else (False, NO_GPM)

    def _facts(self, handle, index, gpu_index, gpm, gpm_reason, *, mig=False, gi=None):
        nv, missing = self.nvml, {}

        def get(name, fn_name, *args):
            try:
                return getattr(nv, fn_name)(handle, *args)
            except Exception as err:
                missing[name] = self.why(err, mig=mig)
                return None

        memory = get("mem_total_bytes", "nvmlDeviceGetMemoryInfo")
        limit = get("power_limit_w", "nvmlDeviceGetEnforcedPowerLimit")
        if limit is None and _has(nv, "nvmlDeviceGetPowerManagementLimit"):
            limit = get("power_limit_w", "nvmlDeviceGetPowerManagementLimit")
            if limit is not None:
                missing.pop("power_limit_w", None)
        return DeviceInfo(
            index=index,
            name=_text(get("name", "nvmlDeviceGetName")),
            uuid=_text(get("uuid", "nvmlDeviceGetUUID")),
            mem_total_bytes=None if memory is None else _uint(memory.total),
            power_limit_w=None if limit is None else power_w(_uint(limit)),
            gpm=gpm,
            gpm_reason=gpm_reason,
            mig=mig,
            gpu_index=gpu_index,
            gpu_instance_id=gi,
            missing=missing,
        )

    def _arm(self, dev: _Device) -> _Device:
        """Allocate the device's two GPM samples and request once, and take the first sample."""
        if not dev.info.gpm:
            return dev
        nv, taken = self.nvml, []
        try:
            taken.append(nv.nvmlGpmSampleAlloc())
            taken.append(nv.nvmlGpmSampleAlloc())
            dev.request = nv.c_nvmlGpmMetricsGet_t()
        except Exception as err:
            self._free(taken)
            dev.info.gpm, dev.info.gpm_reason = False, f"NVML GPM unavailable: {self.why(err)}"
            return dev
        dev.pair = taken
        try:
            self._gpm_get(dev, dev.pair[0])
            dev.prev_t = self._clock()
        except Exception:
            dev.prev_t = None  # primed on the first tick instead
        return dev

    def _gpm_get(self, dev: _Device, sample) -> None:
        if dev.info.mig:
            self.nvml.nvmlGpmMigSampleGet(dev.parent, dev.gi, sample)
        else:
            self.nvml.nvmlGpmSampleGet(dev.parent, sample)

    # --- the backend protocol -------------------------------------------------------------

    def devices(self) -> list[DeviceInfo]:
        """Static facts of each device, in sample order."""
        return [dev.info for dev in self._devices]

    def sample(self) -> list[GpuSample]:
        """One ``GpuSample`` per device. Never raises. Call from one thread."""
        wall = self._wall()
        out = []
        for dev in self._devices:
            try:
                sample = self._sample(dev, wall)
            except Exception as err:  # a bug here must never stop the sampler
                sample = GpuSample(index=dev.info.index, time_s=wall)
                sample.fill_missing(f"internal error reading NVML: {type(err).__name__}: {err}")
            out.append(sample)
        return out

    def _sample(self, dev: _Device, wall: float) -> GpuSample:
        s = GpuSample(index=dev.info.index, time_s=wall)
        if self._closed or dev.lost:
            s.lost = bool(dev.lost)
            s.fill_missing(dev.lost or "the GPU sampler is closed")
            return s
        r, h, nv = _Reader(self, dev, s), dev.handle, self.nvml
        r.take(
            ("gpu_util",),
            lambda u: fraction_from_percent(u.gpu),
            "nvmlDeviceGetUtilizationRates",
            h,
        )
        fields = ("mem_used_bytes", "mem_total_bytes")
        r.take(fields, lambda m: (_uint(m.used), _uint(m.total)), "nvmlDeviceGetMemoryInfo", h)
        r.take(("power_w",), lambda mw: power_w(_uint(mw)), "nvmlDeviceGetPowerUsage", h)
        r.take(("energy_mj",), _uint, "nvmlDeviceGetTotalEnergyConsumption", h)
        sm, mem = getattr(nv, "NVML_CLOCK_SM", 1), getattr(nv, "NVML_CLOCK_MEM", 2)
        r.take(("sm_clock_mhz",), _uint, "nvmlDeviceGetClockInfo", h, sm)
        r.take(("mem_clock_mhz",), _uint, "nvmlDeviceGetClockInfo", h, mem)
        self._throttle(r, h)
        r.take(("process_mem_bytes",), _procs, "nvmlDeviceGetComputeRunningProcesses", h)
        self._gpm(dev, r)
        if r.lost:
            dev.lost = r.lost
        elif r.ok == 0 and r.hard > 0:
            dev.fail_streak += 1
            if dev.fail_streak >= self._lost_after:
                dev.lost = (
                    f"GPU unreachable: every NVML call failed {dev.fail_streak} times in a row"
                )
        else:
            dev.fail_streak = 0
        if dev.lost:
            s.lost = True
            for name in s.missing:
                s.missing[name] = dev.lost
        s.fill_missing(dev.lost or "not reported")
        return s

    def _throttle(self, r: _Reader, handle) -> None:
        """Clocks-event reasons under the current name, else the older "throttle" name."""
        for fn_name in list(self._throttle_fns):
            before = r.ok
            r.take(("throttle_mask",), _uint, fn_name, handle)
            if r.ok > before or r.lost:
                return
            if r.last_code == self.FUNCTION_NOT_FOUND:
                self._throttle_fns.remove(fn_name)  # old driver: use the older name from now on
                r.s.missing.pop("throttle_mask", None)
                continue
            return
        r.s.missing.setdefault("throttle_mask", "this nvidia-ml-py has no clocks-event reasons")

    def _gpm(self, dev: _Device, r: _Reader) -> None:
        """Fill the four GPM fields for this tick (module docstring: swap, 100 ms rule)."""
        if not dev.info.gpm or dev.pair is None:
            r.note(GPM_FIELDS, dev.info.gpm_reason or NO_GPM)
            return
        if r.lost:
            r.note(GPM_FIELDS, r.lost)
            return
        now = self._clock()
        if dev.prev_t is None:
            if r.call(GPM_FIELDS, *self._gpm_call(dev, dev.pair[0])) is not _FAILED:
                dev.prev_t = now
                r.note(GPM_FIELDS, GPM_FIRST)
            return
        gap = now - dev.prev_t
        if gap < self._min_gap:
            ms = round(self._min_gap * 1000)
            r.note(GPM_FIELDS, f"GPM needs {ms} ms between samples; {gap * 1000:.0f} ms so far")
            return
        prev, cur = dev.pair
        if r.call(GPM_FIELDS, *self._gpm_call(dev, cur)) is _FAILED:
            return  # the previous sample stays valid; the next window is just longer
        dev.pair = [cur, prev]  # swap: the sample just taken is the next window's start
        dev.prev_t = now
        self._read_metrics(dev, r, prev, cur)

    def _gpm_call(self, dev: _Device, sample) -> tuple:
        if dev.info.mig:
            return ("nvmlGpmMigSampleGet", dev.parent, dev.gi, sample)
        return ("nvmlGpmSampleGet", dev.parent, sample)

    def _read_metrics(self, dev: _Device, r: _Reader, first, second) -> None:
        req = dev.request
        capacity = len(req.metrics)  # the binding's NVML_GPM_METRIC_MAX, never hard-coded
        wanted = self._metrics[:capacity]
        for name, _ in self._metrics[capacity:]:
            r.note((name,), f"this nvidia-ml-py's GPM request holds only {capacity} metrics")
        req.version = self._gpm_version
        req.numMetrics = len(wanted)
        req.sample1, req.sample2 = first, second
        unknown = getattr(self.nvml, "NVML_ERROR_UNKNOWN", 999)
        for i, (_, mid) in enumerate(wanted):
            req.metrics[i].metricId = mid
            req.metrics[i].nvmlReturn = unknown  # so an entry NVML left alone is not read
        fields = tuple(name for name, _ in wanted)
        if r.call(fields, "nvmlGpmMetricsGet", req) is _FAILED:
            return
        by_id = {mid: name for name, mid in wanted}
        for i in range(len(wanted)):
            metric = req.metrics[i]
            name = by_id.get(int(metric.metricId))
            if name is None:
                continue
            code = int(metric.nvmlReturn)
            if code != 0:
                r.note((name,), self._code_text(code))
                continue
            value = fraction_from_percent(metric.value)
            setattr(r.s, name, value)
            if value is None:
                r.note((name,), "NVML GPM gave a value that is not a finite number")
        for name in fields:
            if getattr(r.s, name) is None:
                r.s.missing.setdefault(name, "NVML GPM returned no value for this metric")

    # --- the node, for tm doctor ------------------------------------------------------------

    def system(self) -> dict:
        """What NVML says about the node (``tm doctor``); never raises.

        Keys: ``driver_version`` ("550.54.15"), ``nvml_version`` ("12.550.54.15"),
        ``cuda_driver_version`` (the CUDA version the driver supports, "12.4", from
        ``nvmlSystemGetCudaDriverVersion``'s 12040), ``gpu_count`` (physical GPUs NVML counted),
        ``mig_modes`` ({physical GPU index: "on", "off", "not supported" or "unknown: why"}),
        ``missing`` ({key: reason} for a version NVML could not give).
        """
        out: dict = {"gpu_count": self._gpu_count, "mig_modes": dict(self._mig_modes)}
        missing: dict[str, str] = {}
        reads = (
            ("driver_version", "nvmlSystemGetDriverVersion", _text),
            ("nvml_version", "nvmlSystemGetNVMLVersion", _text),
            ("cuda_driver_version", "nvmlSystemGetCudaDriverVersion", _cuda_version),
        )
        for key, fn_name, convert in reads:
            out[key] = None
            fn = getattr(self.nvml, fn_name, None)
            if self._closed:
                missing[key] = "the GPU sampler is closed"
            elif fn is None:
                missing[key] = f"this nvidia-ml-py has no {fn_name}"
            else:
                try:
                    out[key] = convert(fn())
                except Exception as err:
                    missing[key] = self.why(err)
        out["missing"] = missing
        return out

    # --- close ----------------------------------------------------------------------------

    def _free(self, samples) -> None:
        for sample in samples:
            try:
                self.nvml.nvmlGpmSampleFree(sample)
            except Exception:
                pass

    def _shutdown(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except Exception:
            pass

    def close(self) -> None:
        """Free the GPM samples and shut NVML down once. Idempotent; never raises."""
        if self._closed:
            return
        self._closed = True
        for dev in self._devices:
            if dev.pair:
                self._free(dev.pair)
                dev.pair = None
        self._shutdown()

    def __enter__(self) -> NvmlBackend:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"NvmlBackend(kind={self.kind!r}, devices={len(self._devices)})"
