"""The run's hardware state, folded from the sampler's records: the snapshot's ``hardware``.

The supervisor's sampler (``trainmeter/supervisor/sampler.py``) writes two record kinds to the
run log (docs/spec.md "Run log"):

- ``gpu_devices``: once per run, the GPU backend (``backend``: "nvml", "none", "fake:h100x2"),
  why it has no GPUs (``reason``) and each device's static facts (``devices``: list of
  ``sources.base.DeviceInfo.as_dict()``);
- ``gpu``: every tick, ``gpus`` (list of ``GpuSample.as_dict()`` with None fields left out, and
  ``missing`` only when it changed since the device's previous sample) and ``host``
  (``HostSample.as_dict()``).

:class:`HardwareState` keeps the latest sample per device and one energy meter per device, so
replay rebuilds the same figures the live view had. Every derived figure comes from
:mod:`trainmeter.core.counters`.
"""

from __future__ import annotations

from typing import Any

from trainmeter.core import counters

LADDER = ("gpu_util", "sm_active", "sm_occupancy", "tensor_active", "dram_active")
"""Fractions charted over time, as timeline series ``gpu<i>/<field>`` (x: seconds of the run)."""
MAX_DEVICES = 16  # GPUs kept per node (an 8-GPU node with MIG halves fits); more are counted


class HardwareState:
    """Latest GPU and host readings of one run, with energy integrated per device."""

    def __init__(self) -> None:
        self.backend: str | None = None
        self.reason: str | None = None
        self.devices: list[dict[str, Any]] = []
        self.samples: dict[int, dict[str, Any]] = {}
        self.missing: dict[int, dict[str, str]] = {}
        self.meters: dict[int, counters.EnergyMeter] = {}
        self.host: dict[str, Any] | None = None
        self.lost: set[int] = set()

    @property
    def fake(self) -> bool:
        """True when the readings come from a scripted fake backend (a demonstration)."""
        return bool(self.backend and self.backend.startswith("fake"))

    def on_devices(self, rec: dict[str, Any]) -> None:
        """Fold a ``gpu_devices`` record: the backend and the static device facts."""
        self.backend = str(rec.get("backend") or "none")
        self.reason = rec.get("reason")
        devices = [d for d in rec.get("devices") or [] if isinstance(d, dict)]
        self.devices = devices[:MAX_DEVICES]
        keep = {d.get("index") for d in self.devices}
        self.meters = {i: m for i, m in self.meters.items() if i in keep}

    def on_sample(self, rec: dict[str, Any]) -> list[tuple[str, float]]:
        """Fold a ``gpu`` record; returns the chart points ``[(series name, fraction)]``."""
        points: list[tuple[str, float]] = []
        known = {d.get("index") for d in self.devices}
        for s in rec.get("gpus") or []:
            i = s.get("index") if isinstance(s, dict) else None
            if i not in known:
                continue
            if isinstance(s.get("missing"), dict):
                self.missing[i] = s["missing"]
            self.samples[i] = {**s, "missing": self.missing.get(i, {})}
            meter = self.meters.setdefault(i, counters.EnergyMeter())
            meter.update(s.get("energy_mj"))
            if s.get("lost"):
                self.lost.add(i)
            for field in LADDER:
                y = s.get(field)
                if isinstance(y, (int, float)) and not isinstance(y, bool):
                    points.append((f"gpu{i}/{field}", float(y)))
        host = rec.get("host")
        if isinstance(host, dict):
            self.host = host
        return points

    def energy_j(self) -> float | None:
        """Energy of the run's GPUs since the sampler's first reading, J (None: no counter)."""
        values = [m.energy_j for m in self.meters.values() if m.energy_j is not None]
        return sum(values) if values else None

    def device_name(self) -> str | None:
        """The first whole GPU's NVML name (used for the peak only with a fake backend)."""
        for d in self.devices:
            if not d.get("mig") and d.get("name"):
                return str(d["name"])
        return None

    def whole_gpus(self) -> int:
        """GPUs that are not MIG instances."""
        return sum(1 for d in self.devices if not d.get("mig"))

    def snapshot(self, dtype: str | None, declared_peak: float | None) -> dict[str, Any] | None:
        """The snapshot's ``hardware`` (docs/spec.md); None before the sampler reported."""
        if self.backend is None:
            return None
        energy = {i: m.energy_j for i, m in self.meters.items()}
        hw = counters.hardware_snapshot(
            self.devices,
            self.samples,
            self.host,
            dtype=dtype,
            declared_peak=declared_peak,
            energy_j=energy,
        )
        hw["units"] = counters.UNITS
        hw["backend"] = self.backend
        hw["reason"] = self.reason
        hw["lost"] = sorted(self.lost)
        return hw

    def notes(self) -> list[str]:
        """Plain sentences about what the hardware figures are (fake, lost GPUs, none)."""
        out = []
        if self.fake:
            out.append(f"GPU counters come from the {self.backend} fake backend: a demonstration, "
                       "not a measurement")  # fmt: skip
        elif self.backend == "none" and self.reason:
            out.append(f"no GPU counters: {self.reason}")
        for i in sorted(self.lost):
            out.append(f"GPU {i} was lost mid-run (NVML stopped answering); its last figures stay")
        return out
