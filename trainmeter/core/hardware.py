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
MAX_NOTE = 500  # characters of one note, as the engine's notes (engine.MAX_NOTE)
# Bounds on what a record can put in the snapshot (docs/spec.md "Bounds on an update"):
MAX_DEVICE_NAME = 96  # NVML's own name buffer (NVML_DEVICE_NAME_V2_BUFFER_SIZE)
MAX_BACKEND = 64
MAX_REASON = 200  # one `missing` reason
MAX_REASON_KEY = 40
MAX_REASONS = 28  # `missing` entries per device (one per field at most)
MAX_NODE = 200  # characters of a merged run's node label (a host name, -<position> added)


MEAN_FIELDS = ("gpu_util", "ofu", "observed_flops_per_s")
"""The fields of ``gpu_mean``: averaged over the sampled GPUs (docs/spec.md)."""
_NO_GPU = {  # why a mean is missing when no GPU was sampled
    "gpu_util": "not measured yet: no GPU sampled",
    "ofu": "not measured yet: needs GPU counters (NVML GPM, Hopper or newer)",
    "observed_flops_per_s": "not measured yet: needs GPU counters (NVML GPM, Hopper or newer)",
}


def gpu_means(hardware: dict[str, Any] | None, is_open: bool = True) -> dict[str, Any]:
    """The snapshot's ``gpu_mean``: each of ``MEAN_FIELDS`` averaged over the GPUs of
    ``hardware`` (the snapshot's) that have it, a lost GPU's last figure included; GPU-Util
    (fraction), OFU (fraction, a counter: beside MFU, never in its place) and observed FLOP/s
    per GPU. A field no GPU has is None with its reason in ``missing``: the first GPU's own
    reason for it (printable ASCII, at most ``MAX_REASON`` characters), else "not measured
    yet" (and what it needs, when no GPU was sampled); a run that has ended (``is_open``
    False) says "not measured", never "yet". Formula: ``sum(values) / len(values)``."""
    gpus = [g for g in (hardware or {}).get("gpus") or [] if isinstance(g, dict)]
    out: dict[str, Any] = {}
    missing: dict[str, str] = {}
    for field in MEAN_FIELDS:
        values = [
            float(g[field]) for g in gpus
            if isinstance(g.get(field), (int, float)) and not isinstance(g.get(field), bool)
        ]  # fmt: skip
        out[field] = sum(values) / len(values) if values else None
        if not values:
            why = (gpus[0].get("missing") or {}).get(field) if gpus else None
            if why:
                missing[field] = _clip(why, MAX_REASON)
            else:
                why = "not measured yet" if gpus else _NO_GPU[field]
                missing[field] = why if is_open else why.replace("not measured yet", "not measured")
    out["missing"] = missing
    return out


def _clip(text: Any, limit: int) -> str:
    """``text`` as printable ASCII (others become "?"), cut to ``limit`` characters: the
    sampler's strings are ASCII, and a bounded string of ASCII has a bounded JSON size."""
    text = "".join(c if " " <= c <= "~" else "?" for c in str(text)[:limit])
    return text if len(text) < limit else text[: limit - 3] + "..."


def _reasons(missing: Any) -> dict[str, str]:
    """A `missing` dict cut to its bounds (field names and reasons are the sampler's own)."""
    if not isinstance(missing, dict):
        return {}
    items = [(k, v) for k, v in missing.items() if isinstance(k, str) and len(k) <= MAX_REASON_KEY]
    return {k: _clip(v, MAX_REASON) for k, v in items[:MAX_REASONS]}


def _keep_last(last: dict[str, Any], now: dict[str, Any], missing: dict) -> dict[str, Any]:
    """A lost device's entry: its last reading's figures, the new sample's time and ``lost``,
    and the loss as the reason only for what the last reading did not have either."""
    kept = {k: v for k, v in last.items() if k != "missing"}
    kept.update(lost=True, time_s=now.get("time_s", kept.get("time_s")))
    reasons = {k: v for k, v in missing.items() if kept.get(k) is None}
    return {**kept, "missing": reasons}


def _node_of(device: dict[str, Any]) -> tuple[str | None, int | None]:
    """A device's node label (printable ASCII, at most ``MAX_NODE`` characters) and its index
    on that node, as ``tm merge`` writes them; (None, None) in a node's own run."""
    node, index = device.get("node"), device.get("node_index")
    if not isinstance(node, str):
        return None, None
    ok = isinstance(index, int) and not isinstance(index, bool) and 0 <= index < 2**31
    return _clip(node, MAX_NODE), index if ok else None


def _processes(pids) -> set[tuple[str | None, str]]:
    """The training processes as (node, pid text): a bare pid is a node's own run's (node
    None); a ``(node, pid)`` pair keeps its node. Process keys in a sample are strings (JSON)."""
    out = set()
    for p in pids:
        node, pid = p if isinstance(p, tuple) and len(p) == 2 else (None, p)
        out.add((node if isinstance(node, str) else None, str(pid)))
    return out


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
        self.dropped_devices = 0  # devices past MAX_DEVICES: counted in a note, not shown

    @property
    def fake(self) -> bool:
        """True when the readings come from a scripted fake backend (a demonstration)."""
        return bool(self.backend and self.backend.startswith("fake"))

    def on_devices(self, rec: dict[str, Any]) -> None:
        """Fold a ``gpu_devices`` record: the backend and the static device facts."""
        self.backend = _clip(rec.get("backend") or "none", MAX_BACKEND)
        self.reason = _clip(rec["reason"], MAX_NOTE) if rec.get("reason") else None
        devices = [
            {**d, "name": _clip(d["name"], MAX_DEVICE_NAME) if d.get("name") else d.get("name"),
             "missing": _reasons(d.get("missing"))}
            for d in rec.get("devices") or [] if isinstance(d, dict)
        ]  # fmt: skip
        self.devices = devices[:MAX_DEVICES]
        self.dropped_devices = len(devices) - len(self.devices)
        keep = {d.get("index") for d in self.devices}
        self.meters = {i: m for i, m in self.meters.items() if i in keep}

    def on_sample(self, rec: dict[str, Any]) -> list[tuple[str, float]]:
        """Fold a ``gpu`` record; returns the chart points ``[(series name, fraction)]``.

        A device's ``missing`` is carried from its previous sample when this one omits it (the
        sampler sends it only when it changes). A lost device keeps its last figures (and adds
        no chart points). ``resume: true`` (the first sample after the sampler paused, between
        notebook cells) restarts every energy meter's difference from this reading, so the time
        nobody trained is not counted.
        """
        points: list[tuple[str, float]] = []
        resume = rec.get("resume") is True
        known = {d.get("index") for d in self.devices}
        for s in rec.get("gpus") or []:
            i = s.get("index") if isinstance(s, dict) else None
            if i not in known:
                continue
            if isinstance(s.get("missing"), dict):
                self.missing[i] = _reasons(s["missing"])
            mask = s.get("throttle_mask")
            if isinstance(mask, int) and mask >= 1 << 64:  # NVML's reasons are a 64-bit mask
                s = {**s, "throttle_mask": None}
            meter = self.meters.setdefault(i, counters.EnergyMeter())
            if resume:
                meter.rebase()
            meter.update(s.get("energy_mj"))
            if s.get("lost"):
                self.lost.add(i)
            if i in self.lost and i in self.samples:
                # a lost GPU answers nothing more: keep its last figures, marked lost
                self.samples[i] = _keep_last(self.samples[i], s, self.missing.get(i, {}))
                continue
            self.samples[i] = {**s, "missing": self.missing.get(i, {})}
            for field in LADDER:
                y = s.get(field)
                if isinstance(y, (int, float)) and not isinstance(y, bool):
                    points.append((f"gpu{i}/{field}", float(y)))
        host = rec.get("host")
        if isinstance(host, dict):
            self.host = {**host, "missing": _reasons(host.get("missing"))}
        return points

    def _train_mem(self, entry: dict[str, Any], wanted: set | None, node) -> int | None:
        """GPU memory of the training processes on this GPU, bytes (None: not reported).
        ``wanted``: the training processes as (node, pid text) pairs (None: every process);
        ``node``: this GPU's node (None: a node's own run). A pid counts only on its own
        node's GPUs (pids repeat across a merged log's nodes)."""
        procs = (self.samples.get(entry["index"]) or {}).get("process_mem_bytes")
        if not isinstance(procs, dict) or not procs:
            entry["missing"]["train_mem_bytes"] = "per-process GPU memory not reported by NVML"
            return None
        node = node if isinstance(node, str) else None
        sizes = [v for k, v in procs.items() if (wanted is None or (node, str(k)) in wanted)
                 and isinstance(v, int) and not isinstance(v, bool) and v >= 0]  # fmt: skip
        if not sizes:
            entry["missing"]["train_mem_bytes"] = "no training process on this GPU"
            return None
        return sum(sizes)

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

    def snapshot(
        self, dtype: str | None, declared_peak: float | None, pids=None, is_open: bool = True
    ) -> dict[str, Any] | None:
        """The snapshot's ``hardware`` (docs/spec.md); None before the sampler reported.
        ``is_open``: the run has not ended (a reading that never came says "not sampled", and
        a dtype never seen says so, without "yet", once it has).

        ``pids``: the training processes, each a pid (a node's own run) or a ``(node, pid)``
        pair (the engine's agents: a merged log's pids repeat across nodes); each GPU entry's
        ``train_mem_bytes`` sums their GPU memory where NVML reports it per process, a pair's
        only on the GPUs of its node (a fake backend's processes all count: its pids are made
        up). Each entry has ``node`` and ``node_index``: in a merged run (``tm merge``) the
        GPU's node label and its index on that node, else None.
        """
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
            is_open=is_open,
        )
        wanted = None if self.fake or pids is None else _processes(pids)
        for entry, device in zip(hw["gpus"], self.devices, strict=True):
            entry["node"], entry["node_index"] = _node_of(device)
            entry["train_mem_bytes"] = self._train_mem(entry, wanted, device.get("node"))
        hw["units"] = {**counters.UNITS, "train_mem_bytes": "bytes"}
        hw["backend"] = self.backend
        hw["reason"] = self.reason
        hw["lost"] = sorted(self.lost)
        return hw

    def notes(self) -> list[str]:
        """Plain sentences about what the hardware figures are (fake or none, lost GPUs, GPUs
        not shown): at most three, each at most ``MAX_NOTE`` characters."""
        out = []
        if self.fake:
            out.append(f"GPU counters come from the {self.backend} fake backend: a demonstration, "
                       "not a measurement")  # fmt: skip
        elif self.backend == "none" and self.reason:
            out.append(f"no GPU counters: {self.reason}")
        if self.lost:
            which = ", ".join(str(i) for i in sorted(self.lost))
            if len(self.lost) == 1:
                out.append(f"GPU {which} was lost mid-run (NVML stopped answering); its last "
                           "figures stay")  # fmt: skip
            else:
                out.append(f"GPUs {which} were lost mid-run (NVML stopped answering); their "
                           "last figures stay")  # fmt: skip
        if self.dropped_devices:
            out.append(f"{self.dropped_devices} GPU(s) past the first {MAX_DEVICES} not shown "
                       "(the run log has their readings)")  # fmt: skip
        return [text if len(text) <= MAX_NOTE else text[: MAX_NOTE - 1] + "…" for text in out]
