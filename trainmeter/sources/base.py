"""The GPU backend seam: static device facts, one sample per device per tick, and the protocol.

A backend is anything with ``devices()``, ``sample()`` and ``close()`` (``GpuBackend``). The
supervisor's sampler thread calls ``sample()`` once per tick (1-10 Hz) and never sees NVML:
``gpu.NvmlBackend`` reads the hardware, ``fake.FakeNvml`` stands in for it, ``NoneBackend``
says why there is nothing. ``trainmeter.sources.open_backend`` picks one from a spec string.

Types (all JSON-ready through ``as_dict()``, so a sample can go into the run log as is and the
engine can rebuild the snapshot with ``core.counters.hardware_snapshot`` on replay):

``DeviceInfo`` (static, read once at open)
    index (int, position in ``devices()``), name (NVML name, "NVIDIA H100 80GB HBM3"), uuid,
    mem_total_bytes, power_limit_w (enforced limit, W), gpm (bool: NVML GPM counters
    available), gpm_reason (why not), mig (bool: this device is a MIG instance), gpu_index
    (the physical GPU's NVML index), gpu_instance_id (MIG GPU instance id, else None),
    lost (reason string when the device could not even be opened), missing {field: reason}.

``GpuSample`` (one per device per ``sample()``)
    index, time_s (wall clock, ``time.time()``, like record ``t``), gpu_util, sm_active,
    sm_occupancy, tensor_active, dram_active (fractions 0..1: GPU-Util from
    ``nvmlDeviceGetUtilizationRates``, the rest NVML GPM metrics 2, 3, 5, 10 over the window
    since the previous sample), mem_used_bytes, mem_total_bytes, power_w, energy_mj (the
    counter since driver load, mJ: difference it with ``core.counters.EnergyMeter``),
    sm_clock_mhz, mem_clock_mhz, throttle_mask (clocks-event reasons bitmask; names from
    ``core.counters.throttle_names``), process_mem_bytes ({pid: bytes} of compute processes
    on the device, pids as the host's NVML sees them; JSON turns the keys into strings),
    lost (bool), missing {field: plain reason} for every field that is None.

A backend's ``sample()`` never raises: every failure is a None field with its reason.
Standard library only.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Protocol, runtime_checkable

# Reasons shown to the user (docs/spec.md: "a field the device cannot report is null with its
# reason in missing").
NO_GPM = "not on this GPU: needs Hopper or newer (NVML GPM)"
NO_GPM_LIBRARY = "this NVML (driver or nvidia-ml-py) has no GPM functions"
GPM_FIRST = "first GPM window still open: needs two samples at least 100 ms apart"
NO_NVML_PACKAGE = "nvidia-ml-py is not installed (pip install 'trainmeter[gpu]')"
MIG_NOT_SUPPORTED = "not reported for a MIG instance by NVML"

GPM_FIELDS = ("sm_active", "sm_occupancy", "tensor_active", "dram_active")
SAMPLE_FIELDS = (
    "gpu_util",
    *GPM_FIELDS,
    "mem_used_bytes",
    "mem_total_bytes",
    "power_w",
    "energy_mj",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "throttle_mask",
    "process_mem_bytes",
)
"""The measured fields of ``GpuSample`` (each None with a reason in ``missing`` when absent)."""


class BackendUnavailable(RuntimeError):
    """An explicitly requested backend cannot start (``open_backend("nvml")`` without NVML).

    ``str(err)`` is the plain reason ("no NVML: NVML Shared Library Not Found").
    """


@dataclass
class DeviceInfo:
    """Static facts of one device, read once when the backend opens (see module docstring)."""

    index: int
    name: str | None = None
    uuid: str | None = None
    mem_total_bytes: int | None = None
    power_limit_w: float | None = None
    gpm: bool = False
    gpm_reason: str | None = None
    mig: bool = False
    gpu_index: int | None = None
    gpu_instance_id: int | None = None
    lost: str | None = None
    missing: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict:
        """A JSON-ready copy."""
        return asdict(self)


@dataclass
class GpuSample:
    """One reading of one device (see module docstring for units and sources)."""

    index: int
    time_s: float
    gpu_util: float | None = None
    sm_active: float | None = None
    sm_occupancy: float | None = None
    tensor_active: float | None = None
    dram_active: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    power_w: float | None = None
    energy_mj: int | None = None
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    throttle_mask: int | None = None
    process_mem_bytes: dict[int, int] | None = None
    lost: bool = False
    missing: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict:
        """A JSON-ready copy."""
        return asdict(self)

    def fill_missing(self, reason: str) -> None:
        """Give every None field without a reason yet this ``reason``."""
        for name in SAMPLE_FIELDS:
            if getattr(self, name) is None:
                self.missing.setdefault(name, reason)


@runtime_checkable
class GpuBackend(Protocol):
    """What the sampler needs from a GPU source.

    ``kind``: the spec it was opened with ("nvml", "none", "fake:h100x2"). ``reason``: why it
    has no devices (None when it has some). ``devices()``: static facts, same list every call.
    ``sample()``: one ``GpuSample`` per device, in ``devices()`` order; never raises; call it
    from one thread. ``close()``: frees what it holds; idempotent; never raises.
    """

    kind: str
    reason: str | None

    def devices(self) -> list[DeviceInfo]: ...

    def sample(self) -> list[GpuSample]: ...

    def close(self) -> None: ...


class NoneBackend:
    """No GPU source: no devices, empty samples, and the reason why (shown as "not measured")."""

    def __init__(self, reason: str, kind: str = "none") -> None:
        self.kind = kind
        self.reason = reason

    def devices(self) -> list[DeviceInfo]:
        return []

    def sample(self) -> list[GpuSample]:
        return []

    def close(self) -> None:
        return None

    def __repr__(self) -> str:
        return f"NoneBackend({self.reason!r})"
