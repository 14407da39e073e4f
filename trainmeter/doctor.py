"""``tm doctor``: what trainmeter can see on this node, and what to do about each gap.

``look(spec=None) -> dict`` gathers the report (JSON-ready); ``lines(report) -> list[str]``
prints it for a person. Nothing here imports torch, a tracker or a CUDA binding: versions come
from ``importlib.metadata`` and importability from ``importlib.util.find_spec`` (which finds a
package without running it), and the GPUs are read through ``trainmeter.sources`` (NVML only:
no CUDA context, docs/architecture.md the no-CUDA-context invariant).

Report keys:

- ``trainmeter``: version; ``python``: {version, executable}.
- ``nvml``: {package: "nvidia-ml-py", installed, version, backend (the spec looked through:
  "nvml", "none", "fake:h100x2"), loaded (NVML answered), reason (why not), driver_version,
  nvml_version, cuda_driver_version, fake (a scripted backend: a demonstration)}.
- ``gpus``: one per device the backend sees: {index, name, uuid, peak ({dtype, tflops, device,
  source, verified} for bf16, or None), peak_text (the peak in words, or "unknown: declare one
  with --peak"), gpm, gpm_reason, mig ("on", "off", "not supported", ...), mig_instance,
  power_limit_w, power_limit_reason, mem_total_bytes, lost}.
- ``torch``: {installed, version, importable}; ``trackers``: {name: version or None} for
  wandb, tensorboard, mlflow, lightning, transformers.
- ``frontend``: {bundle (all four files present), path, missing}.
- ``gaps``: one line per gap, each saying what to do.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import platform
import sys
from pathlib import Path
from typing import Any

from trainmeter._version import __version__
from trainmeter.core import peaks

PEAK_DTYPE = "bf16"  # the dtype doctor shows each GPU's peak for (training's usual one)
UNKNOWN_PEAK = "unknown: declare one with --peak"
STATIC = Path(__file__).resolve().parent / "static"
BUNDLE = ("widget.js", "widget.css", "page.js", "page.css")
TRACKERS = {  # shown name: distributions that provide it, first found wins
    "wandb": ("wandb",),
    "tensorboard": ("tensorboard",),
    "mlflow": ("mlflow", "mlflow-skinny"),
    "lightning": ("lightning", "pytorch-lightning"),
    "transformers": ("transformers",),
}


def _version(*dists: str) -> str | None:
    """The installed version of the first of ``dists`` found, else None (nothing imported)."""
    for dist in dists:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _findable(module: str) -> bool:
    """Whether ``import module`` would find it, without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _peak(name: str | None, mig: bool) -> tuple[dict | None, str]:
    if mig:
        return None, f"{UNKNOWN_PEAK} (a MIG instance has no peak of its own)"
    resolved = peaks.resolve_peak(name, PEAK_DTYPE)
    if resolved is None:
        row = peaks.match_device(name)
        if row is not None:  # known card without a bf16 rate (T4, V100)
            return None, f"{UNKNOWN_PEAK} ({row.label} has no dense {PEAK_DTYPE} rate)"
        return None, UNKNOWN_PEAK
    peak = {
        "dtype": resolved.dtype,
        "tflops": resolved.flops / 1e12,
        "device": resolved.device,
        "source": resolved.source,
        "verified": resolved.verified,
    }
    checked = "verified" if resolved.verified else "not verified against the PDF"
    text = (f"{peak['tflops']:g} TFLOP/s dense {resolved.dtype}, {resolved.device} "
            f"(exact NVML name; {checked})")  # fmt: skip
    return peak, text


def look(spec: str | None = None) -> dict[str, Any]:
    """Everything ``tm doctor`` reports (see the module docstring). Opens the GPU backend
    ``spec`` (``sources.open_backend``; None: NVML when it loads) and closes it again.

    Raises:
        ValueError: ``spec`` is not an accepted form (naming the forms).
    """
    from trainmeter.sources import BackendUnavailable, NoneBackend, check_spec, open_backend

    spec = check_spec(spec)
    nvml: dict[str, Any] = {
        "package": "nvidia-ml-py",
        "version": _version("nvidia-ml-py"),
        "backend": spec or "nvml",
        "loaded": False,
        "reason": None,
        "driver_version": None,
        "nvml_version": None,
        "cuda_driver_version": None,
        "fake": bool(spec and spec.startswith("fake")),
    }
    nvml["installed"] = nvml["version"] is not None or _findable("pynvml")
    try:
        backend = open_backend(spec)
    except BackendUnavailable as err:
        backend = NoneBackend(str(err), kind=spec or "nvml")
    gpus: list[dict[str, Any]] = []
    try:
        nvml["backend"] = backend.kind if spec else nvml["backend"]
        nvml["loaded"] = not isinstance(backend, NoneBackend)
        reason = backend.reason
        nvml["reason"] = reason.removeprefix("no NVML: ") if reason else None
        system = backend.system() if hasattr(backend, "system") else {}
        for key in ("driver_version", "nvml_version", "cuda_driver_version"):
            nvml[key] = system.get(key)
        modes = system.get("mig_modes", {})
        for d in backend.devices():
            peak, text = _peak(d.name, d.mig)
            mode = modes.get(d.gpu_index, "unknown")
            gpus.append({
                "index": d.index, "name": d.name, "uuid": d.uuid, "peak": peak,
                "peak_text": text, "gpm": d.gpm, "gpm_reason": d.gpm_reason, "mig": mode,
                "mig_instance": d.mig, "gpu_index": d.gpu_index,
                "power_limit_w": d.power_limit_w,
                "power_limit_reason": d.missing.get("power_limit_w"),
                "mem_total_bytes": d.mem_total_bytes,
                "lost": d.lost,
            })  # fmt: skip
    finally:
        backend.close()
    missing = [name for name in BUNDLE if not (STATIC / name).is_file()]
    report = {
        "trainmeter": __version__,
        "python": {"version": platform.python_version(), "executable": sys.executable},
        "nvml": nvml,
        "gpus": gpus,
        "torch": {
            "installed": _version("torch") is not None,
            "version": _version("torch"),
            "importable": _findable("torch"),
        },
        "trackers": {name: _version(*dists) for name, dists in TRACKERS.items()},
        "frontend": {"bundle": not missing, "path": str(STATIC), "missing": missing},
    }
    report["gaps"] = gaps(report)
    return report


def gaps(report: dict[str, Any]) -> list[str]:
    """One line per gap in ``report``, each saying what it costs and what to do."""
    out = []
    nvml = report["nvml"]
    if nvml["fake"]:
        out.append(f"GPUs come from the {nvml['backend']} fake backend: a demonstration, not "
                   "this node; drop --gpu-backend to look at the real GPUs")  # fmt: skip
    if not nvml["installed"] and not nvml["fake"]:
        out.append("nvidia-ml-py is not installed: no GPU counters; pip install "
                   "'trainmeter[gpu]'")  # fmt: skip
    elif not nvml["loaded"] and nvml["backend"] != "none":
        out.append(f"NVML did not load, so no GPU counters: {nvml['reason']}; on a GPU node "
                   "install the NVIDIA driver; without GPUs MFU needs --device NAME or "
                   "--peak")  # fmt: skip
    elif nvml["loaded"] and not report["gpus"]:
        out.append(f"NVML sees no usable GPU: {nvml['reason']}; check what nvidia-smi lists "
                   "(NVML ignores CUDA_VISIBLE_DEVICES)")  # fmt: skip
    for g in report["gpus"]:
        who = f"GPU {g['index']} ({g['name'] or 'unnamed'})"
        if g["lost"]:
            out.append(f"{who} could not be opened: {g['lost']}; check nvidia-smi, it may need "
                       "a reset")  # fmt: skip
            continue
        if g["peak"] is None:
            out.append(f"{who}: no dense peak known, so no MFU: declare one with --peak "
                       "(the datasheet's dense, not sparse, figure for your dtype)")  # fmt: skip
        if not g["gpm"]:
            out.append(f"{who}: SM activity, occupancy, tensor and DRAM activity, OFU and "
                       f"intensity are not measured, {g['gpm_reason']}; GPU-Util, power, energy "
                       "and clocks still are")  # fmt: skip
    torch = report["torch"]
    if not torch["installed"]:
        out.append("torch is not installed here: the agent reads models through torch; "
                   "trainmeter.emit() still records series")  # fmt: skip
    elif not torch["importable"]:
        out.append(f"torch {torch['version']} is installed but not importable from this Python "
                   f"({report['python']['executable']}): run tm with the training "
                   "environment's Python")  # fmt: skip
    if not report["frontend"]["bundle"]:
        out.append(f"the front-end bundle is missing ({', '.join(report['frontend']['missing'])} "
                   f"in {report['frontend']['path']}): no widget or page; in a source checkout "
                   "run npm install && npm run build")  # fmt: skip
    return out


def _mib(n: int | None) -> str:
    return "?" if n is None else f"{n / 2**30:.1f} GiB"


def lines(report: dict[str, Any]) -> list[str]:
    """``report`` as the lines ``tm doctor`` prints."""
    py = report["python"]
    out = [f"trainmeter {report['trainmeter']} · Python {py['version']} ({py['executable']})"]
    nvml = report["nvml"]
    pkg = f"nvidia-ml-py {nvml['version']}" if nvml["version"] else "nvidia-ml-py not installed"
    if nvml["loaded"]:
        cuda = nvml["cuda_driver_version"] or "?"
        state = (f"driver {nvml['driver_version'] or '?'} · NVML {nvml['nvml_version'] or '?'} "
                 f"· CUDA {cuda} (the driver's; no CUDA context made)")  # fmt: skip
    else:
        state = f"not loaded: {nvml['reason']}"
    fake = " (fake: a demonstration)" if nvml["fake"] else ""
    out.append(f"NVML: {pkg}; backend {nvml['backend']}{fake}; {state}")
    out.append(f"GPUs: {len(report['gpus'])}")
    for g in report["gpus"]:
        out.append(f"  GPU {g['index']}: {g['name'] or '?'}")
        if g["lost"]:
            out.append(f"    lost: {g['lost']}")
            continue
        out.append(f"    peak ({PEAK_DTYPE}): {g['peak_text']}")
        gpm = "yes" if g["gpm"] else f"no ({g['gpm_reason']})"
        mig = f"instance of GPU {g['gpu_index']}" if g["mig_instance"] else g["mig"]
        limit = f"n/a ({g['power_limit_reason'] or 'not reported'})"
        if g["power_limit_w"] is not None:
            limit = f"{g['power_limit_w']:g} W"
        out.append(f"    GPM: {gpm} · MIG: {mig} · power limit {limit} · memory "
                   f"{_mib(g['mem_total_bytes'])}")  # fmt: skip
    torch = report["torch"]
    if torch["installed"]:
        can = "importable" if torch["importable"] else "NOT importable"
        out.append(f"torch: {torch['version']} ({can}; not imported by doctor)")
    else:
        out.append("torch: not installed")
    trackers = ", ".join(f"{k} {v}" if v else f"{k} -" for k, v in report["trackers"].items())
    out.append(f"trackers: {trackers}")
    fe = report["frontend"]
    out.append(f"front-end bundle: {'present' if fe['bundle'] else 'MISSING'} ({fe['path']})")
    if report["gaps"]:
        out.append("to do:")
        out.extend(f"  - {gap}" for gap in report["gaps"])
    else:
        out.append("to do: nothing; trainmeter sees everything it can use here")
    return out
