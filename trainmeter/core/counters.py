"""Hardware counter metrics as pure functions, and the dashboard's ``hardware`` snapshot.

What NVML reports (``trainmeter/sources/gpu.py`` reads it) is turned into figures here: activity
fractions, OFU, observed FLOP/s, DRAM bytes/s, arithmetic intensity, ridge point, energy,
power and throttle reasons. These are *counter metrics*: they sit beside MFU and the model
metrics, never in their place (docs/architecture.md the counters-beside invariant). Definitions:
docs/spec.md "Numbers" and "Snapshot keys for the dashboard".

Conventions shared with ``core.metrics``: a missing input (None) gives a missing output (None);
a negative or non-finite input is a programming error (ValueError). The snapshot builders
(``gpu_entry``, ``host_entry``, ``hardware_snapshot``) are the exception: they read samples that
came from hardware or a replayed log, so an impossible value becomes None with its reason in
``missing`` instead of raising.

API (all pure; ``EnergyMeter`` holds one running total):

- ``fraction_from_percent(percent) -> float | None``: NVML's 0-100 % to a clamped 0..1 fraction.
- ``ofu(tensor_active) -> float | None``: observed FLOPs utilisation, a fraction.
- ``observed_flops(tensor_active, peak_flops) -> float | None``: FLOP/s.
- ``dram_bytes_per_s(dram_active, peak_bw) -> float | None``: bytes/s.
- ``arithmetic_intensity(flops_per_s, bytes_per_s) -> float | None``: FLOP/byte.
- ``ridge_point(peak_flops, peak_bw) -> float | None``: FLOP/byte.
- ``energy_delta_j(old_mj, new_mj) -> float | None``: J between two counter readings.
- ``EnergyMeter().update(energy_mj) -> float | None``: J since the first reading.
- ``power_w(milliwatts) -> float | None`` and ``mean_power_w(energy_j, seconds) -> float | None``.
- ``THROTTLE_REASONS`` and ``throttle_names(mask) -> list[str] | None``.
- ``gpu_entry(device, sample, *, peak_flops, peak_bw, energy_j, no_peak_reason) -> dict``.
- ``host_entry(host) -> dict``.
- ``hardware_snapshot(devices, samples, host=None, *, dtype, declared_peak, energy_j) -> dict``.

``device``, ``sample`` and ``host`` are plain mappings: ``DeviceInfo.as_dict()``,
``GpuSample.as_dict()`` and ``HostSample.as_dict()`` from ``trainmeter.sources``, or the same
dictionaries read back from a run log (so replay builds the same snapshot). Standard library
and ``core.peaks`` only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from trainmeter.core.metrics import check_number as _check
from trainmeter.core.peaks import match_device, resolve_peak

# --- activities -----------------------------------------------------------------------------


def fraction_from_percent(percent: float | None) -> float | None:
    """A 0..1 fraction from an NVML percentage (0-100).

    Input: ``percent``, as NVML GPM metrics and ``nvmlDeviceGetUtilizationRates`` report it.
    Formula: ``min(max(percent, 0), 100) / 100``. Counter differences can land a hair outside
    0-100 (rounding between two samples), so the value is clamped rather than rejected.
    Returns None for None, a non-number or a non-finite value (NaN from a broken counter): a
    reading of the hardware is never a programming error.
    """
    if isinstance(percent, bool) or not isinstance(percent, (int, float)):
        return None
    if not math.isfinite(percent):
        return None
    return min(max(float(percent), 0.0), 100.0) / 100.0


def ofu(tensor_active: float | None) -> float | None:
    """Observed FLOPs utilisation (OFU): the fraction of time the tensor pipes were active.

    Input: ``tensor_active``, the fraction (0..1) of the sample window in which the SMs' tensor
    pipes were busy: NVML GPM metric ``NVML_GPM_METRIC_ANY_TENSOR_UTIL`` (id 5, "percentage of
    time the GPU's SMs were doing ANY tensor operations", nvidia-ml-py ``pynvml.py``), which is
    DCGM's ``DCGM_FI_PROF_PIPE_TENSOR_ACTIVE`` on Hopper and newer (docs/spec.md
    "Hardware counters").
    Formula: ``ofu = tensor_active``. A tensor pipe that is active runs at its full rate, so this
    is the tensor FLOP rate the hardware observed as a fraction of its dense peak
    (``observed_flops / peak_flops``), in the run's dtype.
    Leaves out: FLOPs on the CUDA cores (non-tensor FP32, softmax, norms); that an active pipe
    may run a cheaper dtype than the peak assumes (an FP8 GEMM in a BF16 run over-reads, an
    FP32 one under-reads). Shown beside MFU, never in its place (the counters-beside invariant).
    Raises ValueError outside 0..1.
    """
    _check("tensor_active", tensor_active, upper=1.0)
    return None if tensor_active is None else float(tensor_active)


def observed_flops(tensor_active: float | None, peak_flops: float | None) -> float | None:
    """Observed tensor FLOP/s of one device.

    Inputs: ``tensor_active`` (0..1, see ``ofu``); ``peak_flops``, the device's dense peak for
    the run's dtype in FLOP/s (``core.peaks.resolve_peak``).
    Formula: ``tensor_active * peak_flops`` (FLOP/s).
    Source: NVIDIA DCGM documentation, "Profiling Metrics": PIPE_TENSOR_ACTIVE "is the ratio of
    cycles the tensor (HMMA / IMMA) pipe is active", so at full pipe rate the FLOP rate is that
    ratio times the peak. Same omissions as ``ofu``.
    Raises ValueError for a fraction outside 0..1 or a negative or non-finite peak.
    """
    _check("tensor_active", tensor_active, upper=1.0)
    _check("peak_flops", peak_flops)
    if tensor_active is None or peak_flops is None:
        return None
    return float(tensor_active) * float(peak_flops)


def dram_bytes_per_s(dram_active: float | None, peak_bw: float | None) -> float | None:
    """DRAM traffic of one device in bytes/s.

    Inputs: ``dram_active``, the fraction (0..1) of peak DRAM bandwidth used over the window:
    NVML GPM ``NVML_GPM_METRIC_DRAM_BW_UTIL`` (id 10, "percentage of DRAM bw used vs
    theoretical maximum"; DCGM ``DRAM_ACTIVE``); ``peak_bw``, the datasheet memory bandwidth in
    bytes/s (``core.peaks.DeviceRow.mem_bw``).
    Formula: ``dram_active * peak_bw`` (bytes/s).
    Raises ValueError for a fraction outside 0..1 or a negative or non-finite bandwidth.
    """
    _check("dram_active", dram_active, upper=1.0)
    _check("peak_bw", peak_bw)
    if dram_active is None or peak_bw is None:
        return None
    return float(dram_active) * float(peak_bw)


def arithmetic_intensity(flops_per_s: float | None, bytes_per_s: float | None) -> float | None:
    """Observed arithmetic intensity in FLOP/byte: observed FLOP/s over DRAM bytes/s.

    Inputs: ``flops_per_s`` (``observed_flops``), ``bytes_per_s`` (``dram_bytes_per_s``), over
    the same window. Formula: ``flops_per_s / bytes_per_s``.
    Source: the roofline model, Williams, Waterman and Patterson, "Roofline: an insightful visual
    performance model for multicore architectures", CACM 52(4), 2009 (operational intensity).
    An average over every kernel in the window: compare it with ``ridge_point`` as a hint, never
    as proof that a run is compute- or memory-bound (docs/spec.md "Hardware counters").
    Returns None when an input is None or there was no DRAM traffic (no intensity rather than
    infinity). Raises ValueError for a negative or non-finite input.
    """
    _check("flops_per_s", flops_per_s)
    _check("bytes_per_s", bytes_per_s)
    if flops_per_s is None or bytes_per_s is None or bytes_per_s == 0:
        return None
    return float(flops_per_s) / float(bytes_per_s)


def ridge_point(peak_flops: float | None, peak_bw: float | None) -> float | None:
    """The roofline's ridge point in FLOP/byte: peak FLOP/s over peak memory bandwidth.

    Inputs: ``peak_flops`` (dense, run's dtype, FLOP/s), ``peak_bw`` (bytes/s), one device.
    Formula: ``peak_flops / peak_bw``. Above it a kernel can reach the compute roof; below it
    the bandwidth roof caps it. Source: Williams et al. 2009 (see ``arithmetic_intensity``).
    Returns None when an input is None or the bandwidth is 0. Raises ValueError for a negative
    or non-finite input.
    """
    _check("peak_flops", peak_flops)
    _check("peak_bw", peak_bw)
    if peak_flops is None or peak_bw is None or peak_bw == 0:
        return None
    return float(peak_flops) / float(peak_bw)


# --- energy and power -----------------------------------------------------------------------


def energy_delta_j(old_mj: float | None, new_mj: float | None) -> float | None:
    """Energy in J between two readings of NVML's energy counter.

    Inputs: two readings of ``nvmlDeviceGetTotalEnergyConsumption`` (mJ since the driver last
    loaded; Volta and newer; it updates every 20-100 ms, so difference it over windows of 1 s
    or more: docs/spec.md "Hardware sampling").
    Formula: ``(new_mj - old_mj) / 1000``. When ``new_mj < old_mj`` the counter restarted (a
    driver reload or GPU reset; a 64-bit mJ counter does not wrap in practice), so the new
    reading is counted from zero: ``new_mj / 1000``. The energy between the old reading and the
    restart is lost (an undercount), and the result is never negative.
    Returns None when either reading is None. Raises ValueError for a negative or non-finite one.
    """
    _check("old_mj", old_mj)
    _check("new_mj", new_mj)
    if old_mj is None or new_mj is None:
        return None
    if new_mj < old_mj:
        return float(new_mj) / 1000.0
    return (float(new_mj) - float(old_mj)) / 1000.0


class EnergyMeter:
    """Running energy of one device in J, from successive readings of its mJ counter.

    ``update(energy_mj)`` adds ``energy_delta_j(previous, energy_mj)`` and returns the total
    since the first reading (0.0 after the first). A None reading (a failed read) is skipped:
    the next good reading is differenced against the last good one, so no energy is lost or
    counted twice. Returns None until a first reading arrives. A counter restart is handled as
    in ``energy_delta_j`` (never negative). ``rebase()`` makes the next reading a new start
    (the sampler paused; what the GPU used meanwhile is not counted). One meter per device; not
    thread-safe.
    """

    def __init__(self) -> None:
        self._last: float | None = None
        self._total = 0.0
        self._rebased = False

    @property
    def energy_j(self) -> float | None:
        """Joules since the first reading, or None before any reading."""
        return None if self._last is None else self._total

    def rebase(self) -> None:
        """Forget the last reading but keep the total: the next reading starts a new difference
        (after a pause in sampling whose energy must not be counted). Before any reading, a
        no-op."""
        if self._last is not None:
            self._rebased = True

    def update(self, energy_mj: float | None) -> float | None:
        """Fold in one counter reading (mJ); return the running total in J (or None)."""
        if energy_mj is None:
            return self.energy_j
        _check("energy_mj", energy_mj)
        if self._last is not None and not self._rebased:
            self._total += energy_delta_j(self._last, energy_mj) or 0.0
        self._last = float(energy_mj)
        self._rebased = False
        return self._total


def power_w(milliwatts: float | None) -> float | None:
    """Board power in W from NVML's ``nvmlDeviceGetPowerUsage`` (mW).

    Formula: ``milliwatts / 1000``. NVML's figure is a 1 s average on Ampere (except GA100)
    and newer, closer to instantaneous on older parts (NVML's ``nvmlDeviceGetPowerUsage``
    documentation). Returns None for None; ValueError for a negative or non-finite value.
    """
    _check("milliwatts", milliwatts)
    return None if milliwatts is None else float(milliwatts) / 1000.0


def mean_power_w(energy_j: float | None, seconds: float | None) -> float | None:
    """Average power in W over a window: energy (J, ``energy_delta_j``) over its length (s).

    Formula: ``energy_j / seconds``. Exact for the window, unlike a power reading, which is a
    1 s average at one instant. Returns None for a None input or an empty window (seconds 0);
    ValueError for a negative or non-finite one.
    """
    _check("energy_j", energy_j)
    _check("seconds", seconds)
    if energy_j is None or seconds is None or seconds == 0:
        return None
    return float(energy_j) / float(seconds)


# --- throttle (clocks event) reasons --------------------------------------------------------

# Bit values from nvidia-ml-py 13.615 pynvml.py: nvmlClocksEventReason* (0x1-0x100); the last
# two exist there only under the older name (nvmlClocksThrottleReasonBoardLimit 0x200,
# nvmlClocksThrottleReasonReliability 0x400). tests/unit/test_counters.py checks every value
# against an installed pynvml.
THROTTLE_REASONS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
    (0x200, "board_limit"),
    (0x400, "reliability"),
)


def throttle_names(mask: int | None) -> list[str] | None:
    """Names of the reasons set in an NVML clocks-event (throttle) reasons bitmask.

    Input: ``nvmlDeviceGetCurrentClocksEventReasons`` (older name
    ``nvmlDeviceGetCurrentClocksThrottleReasons``), a bitmask. Output: the names in
    ``THROTTLE_REASONS`` for each set bit, lowest bit first; a bit NVML may add later is named
    ``unknown_0x<hex>`` rather than dropped. 0 gives ``[]`` (clocks not held back). ``gpu_idle``
    is not a slowdown to worry about: nothing is running. Returns None for None; ValueError for
    a negative or non-integer mask.
    """
    if mask is None:
        return None
    if isinstance(mask, bool) or not isinstance(mask, int) or mask < 0:
        raise ValueError(f"mask must be an integer >= 0, got {mask!r}")
    known = dict(THROTTLE_REASONS)
    names = []
    bit = 1
    while bit <= mask:
        if mask & bit:
            names.append(known.get(bit, f"unknown_0x{bit:x}"))
        bit <<= 1
    return names


# --- the dashboard's hardware snapshot ------------------------------------------------------

GPU_KEYS = (
    "index",
    "name",
    "gpu_util",
    "sm_active",
    "sm_occupancy",
    "tensor_active",
    "dram_active",
    "ofu",
    "observed_flops_per_s",
    "dram_bytes_per_s",
    "intensity",
    "ridge_point",
    "mem_used_bytes",
    "mem_total_bytes",
    "power_w",
    "power_limit_w",
    "energy_j",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "throttle",
    "missing",
)
"""Keys of one entry of ``hardware["gpus"]``, in order (docs/spec.md)."""

UNITS = {
    "gpu_util": "fraction",
    "sm_active": "fraction",
    "sm_occupancy": "fraction",
    "tensor_active": "fraction",
    "dram_active": "fraction",
    "ofu": "fraction",
    "observed_flops_per_s": "FLOP/s",
    "dram_bytes_per_s": "bytes/s",
    "intensity": "FLOP/byte",
    "ridge_point": "FLOP/byte",
    "mem_used_bytes": "bytes",
    "mem_total_bytes": "bytes",
    "power_w": "W",
    "power_limit_w": "W",
    "energy_j": "J",
    "sm_clock_mhz": "MHz",
    "mem_clock_mhz": "MHz",
    "cpu_util": "fraction",
    "rss_bytes": "bytes",
}
"""The unit of every numeric field of ``hardware`` (``hardware["units"]`` carries it)."""

_ACTIVITIES = ("gpu_util", "sm_active", "sm_occupancy", "tensor_active", "dram_active")
_NUMBERS = ("mem_used_bytes", "mem_total_bytes", "power_w", "sm_clock_mhz", "mem_clock_mhz")
NO_SAMPLE = "not sampled yet"
NEVER_SAMPLED = "not sampled"  # a run that has ended: no reading will come


def _no_sample(is_open: bool) -> str:
    """Why a field of a device or the host with no reading at all is missing: "not sampled
    yet" while the run is open, "not sampled" once it has ended."""
    return NO_SAMPLE if is_open else NEVER_SAMPLED


def _number(value) -> float | int | None:
    """``value`` if it is a finite number >= 0, else None (a sample is never trusted blindly)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _fraction(value) -> float | None:
    value = _number(value)
    return None if value is None or value > 1 else float(value)


def gpu_entry(
    device: Mapping,
    sample: Mapping | None,
    *,
    peak_flops: float | None = None,
    peak_bw: float | None = None,
    energy_j: float | None = None,
    no_peak_reason: str | None = None,
    is_open: bool = True,
) -> dict:
    """One entry of ``hardware["gpus"]`` (keys ``GPU_KEYS``, docs/spec.md).

    Inputs: ``device``, the static facts (``DeviceInfo.as_dict()``: index, name,
    mem_total_bytes, power_limit_w, ...); ``sample``, the latest reading (``GpuSample.as_dict()``)
    or None before the first; ``peak_flops`` (dense, run's dtype, FLOP/s) and ``peak_bw``
    (bytes/s) of this device, None when unknown; ``energy_j``, this device's energy since the
    run started (``EnergyMeter``); ``no_peak_reason``, what to say when a peak is missing;
    ``is_open``, the run has not ended (a field never sampled reads "not sampled yet", else
    "not sampled").
    Derived: ``intensity = arithmetic_intensity(observed_flops(tensor_active, peak_flops),
    dram_bytes_per_s(dram_active, peak_bw))`` and ``ridge_point(peak_flops, peak_bw)``, FLOP/byte;
    ``throttle = throttle_names(sample["throttle_mask"])``.
    Every None field has its reason in ``missing`` (the sample's own reasons first). Never raises
    on odd sample values: an impossible one becomes None with a reason.
    """
    sample = sample or {}
    entry = _sanitized(device, sample, energy_j)
    reasons = _sample_reasons(sample)
    peak_reason = no_peak_reason or "no dense peak or memory bandwidth known for this device"
    _derive(entry, reasons, _number(peak_flops), _number(peak_bw), peak_reason)
    _explain(entry, reasons, device, sample, is_open)
    return {key: entry[key] for key in GPU_KEYS}


def _sample_reasons(sample: Mapping) -> dict[str, str]:
    """The sample's own reasons for its missing fields (strings, whatever the sampler sent)."""
    given = sample.get("missing")
    return {str(k): str(v) for k, v in given.items()} if isinstance(given, Mapping) else {}


def _sanitized(device: Mapping, sample: Mapping, energy_j: float | None) -> dict:
    """The measured fields, each a plausible value or None: activities in [0, 1], counts and
    physical quantities finite and >= 0, a throttle mask an int >= 0 (named)."""
    entry: dict = {"index": device.get("index"), "name": device.get("name")}
    for key in _ACTIVITIES:
        entry[key] = _fraction(sample.get(key))
    for key in _NUMBERS:
        entry[key] = _number(sample.get(key))
    if entry["mem_total_bytes"] is None:
        entry["mem_total_bytes"] = _number(device.get("mem_total_bytes"))
    entry["power_limit_w"] = _number(device.get("power_limit_w"))
    entry["energy_j"] = _number(energy_j)
    mask = sample.get("throttle_mask")
    ok_mask = isinstance(mask, int) and not isinstance(mask, bool) and mask >= 0
    entry["throttle"] = throttle_names(mask) if ok_mask else None
    return entry


def _derive(entry: dict, reasons: dict, peak_flops: float | None, peak_bw: float | None,
            peak_reason: str) -> None:  # fmt: skip
    """The derived fields (OFU, observed FLOP/s, DRAM bytes/s, ridge point, arithmetic
    intensity) into ``entry``, and for each one left None, why, into ``reasons``."""
    entry["ridge_point"] = ridge_point(peak_flops, peak_bw)
    entry["ofu"] = ofu(entry["tensor_active"])
    entry["observed_flops_per_s"] = entry["dram_bytes_per_s"] = None
    if entry["tensor_active"] is not None and peak_flops:
        entry["observed_flops_per_s"] = observed_flops(entry["tensor_active"], float(peak_flops))
    if entry["dram_active"] is not None and peak_bw:
        entry["dram_bytes_per_s"] = dram_bytes_per_s(entry["dram_active"], float(peak_bw))
    for key, needs in (("ofu", "tensor_active"), ("observed_flops_per_s", "tensor_active"),
                       ("dram_bytes_per_s", "dram_active")):  # fmt: skip
        if entry[key] is None and entry[needs] is None:
            reasons.setdefault(key, reasons.get(needs) or f"needs {needs} (NVML GPM)")
        elif entry[key] is None:
            reasons.setdefault(key, peak_reason)
    entry["intensity"] = None
    if entry["ridge_point"] is None:
        reasons.setdefault("ridge_point", peak_reason)
        reasons.setdefault("intensity", peak_reason)
    elif entry["tensor_active"] is None or entry["dram_active"] is None:
        reasons.setdefault("intensity", "needs tensor and DRAM activity (NVML GPM)")
    elif entry["dram_active"] == 0:
        reasons.setdefault("intensity", "no DRAM traffic in this window")
    else:
        flops = observed_flops(entry["tensor_active"], float(peak_flops))
        entry["intensity"] = arithmetic_intensity(
            flops, dram_bytes_per_s(entry["dram_active"], float(peak_bw))
        )


def _explain(entry: dict, reasons: dict, device: Mapping, sample: Mapping, is_open: bool) -> None:
    """``entry["missing"]``: a reason for every None field, in this order: the sample's own or
    a derivation's (already in ``reasons``), an invalid value the sample sent, the device's
    static facts, a lost device, then "not sampled yet" ("not sampled" once the run has
    ended) / "not reported"."""
    for key in (*_ACTIVITIES, *_NUMBERS, "throttle_mask"):
        shown = "throttle" if key == "throttle_mask" else key
        if sample.get(key) is not None and entry[shown] is None:
            reasons[shown] = f"invalid value in the sample: {ascii(sample.get(key))[:60]}"
    static = device.get("missing")
    if isinstance(static, Mapping):  # facts read once at open: name, memory, power limit
        for key in ("name", "mem_total_bytes", "power_limit_w"):
            if key in static:
                reasons.setdefault(key, str(static[key]))
    if isinstance(device.get("lost"), str):
        for key in GPU_KEYS:
            reasons.setdefault(key, device["lost"])
    renamed = {"energy_mj": "energy_j", "throttle_mask": "throttle"}
    for key, why in list(reasons.items()):
        if key in renamed:
            reasons.setdefault(renamed[key], why)
    fallback = _no_sample(is_open) if not sample else "not reported"
    for key in GPU_KEYS:
        if key != "missing" and entry.get(key) is None:
            reasons.setdefault(key, fallback)
    entry["missing"] = {k: v for k, v in reasons.items() if k in entry and entry[k] is None}


HOST_KEYS = ("cpu_util", "mem_used_bytes", "mem_total_bytes", "rss_bytes", "missing")
"""Keys of ``hardware["host"]``: docs/spec.md's four, plus ``missing`` {field: reason}."""


def host_entry(host: Mapping | None, is_open: bool = True) -> dict:
    """``hardware["host"]`` from a ``HostSample.as_dict()`` (or None before the first).

    ``cpu_util`` is a fraction 0..1 of all CPUs, memory and RSS in bytes; a None field has its
    reason in ``missing`` ("not sampled yet" with no reading at all, "not sampled" once the run
    has ended: ``is_open`` False). Never raises on odd values.
    """
    host = host or {}
    given = host.get("missing")
    reasons = dict(given) if isinstance(given, Mapping) else {}
    entry = {
        "cpu_util": _fraction(host.get("cpu_util")),
        "mem_used_bytes": _number(host.get("mem_used_bytes")),
        "mem_total_bytes": _number(host.get("mem_total_bytes")),
        "rss_bytes": _number(host.get("rss_bytes")),
    }
    fallback = _no_sample(is_open) if not host else "not reported"
    entry["missing"] = {k: str(reasons.get(k, fallback)) for k, v in entry.items() if v is None}
    return entry


def _peaks_for(device: Mapping, dtype: str | None, declared_peak: float | None,
               is_open: bool = True):  # fmt: skip
    """(peak_flops, peak_bw, reason) for one device from the peak table or a declared peak."""
    name = device.get("name")
    if device.get("mig"):
        # A MIG instance owns a slice of the SMs and memory; the table holds whole GPUs.
        return None, None, "a MIG instance has no peak of its own (the table holds whole GPUs)"
    peak = resolve_peak(name, dtype, declared_peak)
    row = match_device(name)
    if peak is None:
        if row is None:
            return None, None, f"no dense peak known for {name!r}; declare one with --peak"
        if dtype is None:
            seen = "is not known yet" if is_open else "was never seen"
            return None, row.mem_bw, f"the run's dtype {seen} (no peak to compare with)"
        return None, row.mem_bw, f"no dense peak for dtype {dtype!r} on {row.label}"
    if row is None:
        return peak.flops, None, f"no memory bandwidth known for {name!r}"
    return peak.flops, row.mem_bw, None


def hardware_snapshot(
    devices: Sequence[Mapping],
    samples: Sequence[Mapping] | Mapping[int, Mapping],
    host: Mapping | None = None,
    *,
    dtype: str | None = None,
    declared_peak: float | None = None,
    energy_j: Mapping[int, float | None] | None = None,
    is_open: bool = True,
) -> dict:
    """The snapshot's ``hardware`` value: ``{"gpus": [gpu_entry...], "host": host_entry}``.

    Inputs: ``devices`` (``DeviceInfo.as_dict()`` each); ``samples``, the latest sample per
    device, as a sequence or as {index: sample} (a device without one shows "not sampled yet",
    or "not sampled" once the run has ended);
    ``host`` (``HostSample.as_dict()`` or None); ``dtype``, the run's compute dtype (for the
    peak); ``declared_peak`` (FLOP/s, ``--peak``; wins over the table as in
    ``core.peaks.resolve_peak``); ``energy_j`` {index: J since the run started}; ``is_open``,
    the run has not ended (what no reading will now come for says so, never "yet").
    Peaks per device come from ``core.peaks`` by the NVML name; a MIG instance gets none.
    """
    if isinstance(samples, Mapping):
        by_index = dict(samples)
    else:
        by_index = {s.get("index"): s for s in samples if isinstance(s, Mapping)}
    energy = energy_j or {}
    gpus = []
    for device in devices:
        index = device.get("index")
        flops, bw, why = _peaks_for(device, dtype, declared_peak, is_open)
        gpus.append(
            gpu_entry(
                device,
                by_index.get(index),
                peak_flops=flops,
                peak_bw=bw,
                energy_j=energy.get(index),
                no_peak_reason=why,
                is_open=is_open,
            )
        )
    return {"gpus": gpus, "host": host_entry(host, is_open)}


__all__ = [
    "GPU_KEYS",
    "HOST_KEYS",
    "THROTTLE_REASONS",
    "EnergyMeter",
    "arithmetic_intensity",
    "dram_bytes_per_s",
    "energy_delta_j",
    "fraction_from_percent",
    "gpu_entry",
    "hardware_snapshot",
    "host_entry",
    "mean_power_w",
    "observed_flops",
    "ofu",
    "power_w",
    "ridge_point",
    "throttle_names",
]
