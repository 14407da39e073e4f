"""Hardware sources for the supervisor's sampler: GPUs (NVML or a fake) and the host (/proc).

Outside the training process only (the supervisor and ``tm``): never imported by the agent.
Only ``sources/gpu.py`` touches NVML, lazily; nothing here imports a CUDA binding, so reading
the GPUs creates no CUDA context (docs/architecture.md the no-CUDA-context invariant).

API:

``open_backend(spec: str | None = None, *, clock=time.time) -> GpuBackend``
    ``None``: NVML when it loads (pynvml importable and ``nvmlInit`` succeeds), else a
    ``NoneBackend`` whose ``reason`` says why. ``"nvml"``: NVML or ``BackendUnavailable``.
    ``"none"``: no GPU sampling. ``"fake:<profile>"``: the real NVML backend over a scripted
    fake library (``fake.PROFILES``: h100xN, a100xN, mig, nonvml, lost); ``clock`` drives the
    fake's script and its 100 ms GPM rule (tests pass a manual clock). Anything else:
    ValueError naming the accepted forms (``SPEC_FORMS``).
``GpuBackend``, ``DeviceInfo``, ``GpuSample``, ``NoneBackend``, ``BackendUnavailable``: see
``sources.base``. ``NvmlBackend``: ``sources.gpu``. ``HostSource``, ``HostSample``:
``sources.host``.

A typical tick (the caller's loop; ``core.counters`` turns it into the snapshot's
``hardware``)::

    backend, host = open_backend(None), HostSource()
    devices = [d.as_dict() for d in backend.devices()]
    meters = {d["index"]: EnergyMeter() for d in devices}
    samples = [s.as_dict() for s in backend.sample()]
    energy = {s["index"]: meters[s["index"]].update(s["energy_mj"]) for s in samples}
    hardware = hardware_snapshot(devices, samples, host.sample([pid]).as_dict(),
                                 dtype="bf16", energy_j=energy)
"""

from __future__ import annotations

import time
from collections.abc import Callable

from trainmeter.core.units import quoted
from trainmeter.sources.base import (
    BackendUnavailable,
    DeviceInfo,
    GpuBackend,
    GpuSample,
    NoneBackend,
)
from trainmeter.sources.gpu import NvmlBackend
from trainmeter.sources.host import HostSample, HostSource

# ``SPEC_FORMS``, the spec strings ``open_backend`` accepts (plus None for "NVML if it loads"),
# names the fake profiles: it is made on first use (:func:`__getattr__`), with the fakes, which
# every run but a fake one leaves unimported (their import is several ms of each tm start).


def __getattr__(name: str):
    if name == "SPEC_FORMS":
        from trainmeter.sources.fake import PROFILES

        forms = ("nvml", "none", *(f"fake:{p}" for p in PROFILES))
        globals()["SPEC_FORMS"] = forms
        return forms
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _profile(name: str, **kwargs):
    from trainmeter.sources.fake import profile

    return profile(name, **kwargs)


def _bad(spec, detail: str | None = None) -> ValueError:
    forms = ", ".join(__getattr__("SPEC_FORMS"))
    why = f" ({detail})" if detail else ""
    return ValueError(f"unknown GPU source {quoted(spec)}{why}; accepted: {forms}")


def open_backend(spec: str | None = None, *, clock: Callable[[], float] = time.time) -> GpuBackend:
    """The GPU backend for ``spec`` (see the module docstring)."""
    if spec is None:
        try:
            return NvmlBackend()
        except BackendUnavailable as err:
            return NoneBackend(str(err))
    if not isinstance(spec, str):
        raise _bad(spec)
    key = spec.strip().lower()
    if key == "nvml":
        return NvmlBackend()
    if key == "none":
        return NoneBackend("GPU sampling is turned off")
    kind, _, name = key.partition(":")
    if kind != "fake" or not name:
        raise _bad(spec)
    try:
        nvml = _profile(name, clock=clock)
    except ValueError as err:
        raise _bad(spec, _detail(err)) from err
    try:
        return NvmlBackend(nvml, clock=clock, wall=clock, kind=key)
    except BackendUnavailable as err:
        return NoneBackend(str(err), kind=key)


def check_spec(spec: str | None) -> str | None:
    """``spec`` normalized (stripped, lower case) if ``open_backend`` would accept it; opens
    nothing (a command line checks its flag before starting the run).

    Raises:
        ValueError: an unknown form or fake profile, naming the accepted forms (``SPEC_FORMS``),
            as ``open_backend`` does.
    """
    if spec is None:
        return None
    key = str(spec).strip().lower()
    if key in ("nvml", "none"):
        return key
    kind, _, name = key.partition(":")
    if kind != "fake" or not name:
        raise _bad(spec)
    try:
        _profile(name)
    except ValueError as err:
        raise _bad(spec, _detail(err)) from err
    return key


def _detail(err: ValueError) -> str | None:
    """What a fake profile's error says beyond "unknown" (a bad GPU count), else None."""
    text = str(err)
    return None if text.startswith("unknown fake GPU profile") else text


__all__ = [
    "SPEC_FORMS",
    "BackendUnavailable",
    "DeviceInfo",
    "GpuBackend",
    "GpuSample",
    "HostSample",
    "HostSource",
    "NoneBackend",
    "NvmlBackend",
    "check_spec",
    "open_backend",
]
