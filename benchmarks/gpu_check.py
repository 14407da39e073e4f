"""What only a real GPU can confirm: one script, a few minutes on a Hopper GPU.

    python benchmarks/gpu_check.py [--matmul-s 20] [--size 8192] [--gpt-steps 400] [--out DIR]

On a machine without an NVIDIA GPU (NVML does not load, or sees no GPU) it prints one line
saying so and exits 0. Otherwise, on GPU 0 (``CUDA_DEVICE_ORDER=PCI_BUS_ID`` for the children,
so CUDA's device 0 is NVML's index 0):

1. **Static facts** through trainmeter's NVML backend: name, driver, NVML and CUDA driver
   versions, GPM support, MIG mode, the matched dense peak.
2. **The 100 ms rule**: a second backend with no minimum gap takes GPM samples 20 ms apart, then
   100 ms apart, and says what NVML returned (values or errors) for each metric.
3. **A bf16 matmul loop under ``tm``** (``tm --gpu-backend nvml --dtype bf16 --sample-hz 4``):
   an N x N bf16 GEMM for ``--matmul-s`` seconds in a child process, timed with CUDA events, so
   ``measured TFLOP/s = 2 N^3 x iterations / elapsed``. From the run log: which GPM metrics had
   values, the mean tensor-pipe activity over the samples whose window lies inside the loop,
   the OFU-derived FLOP/s (``tensor_active x dense bf16 peak``), energy over the loop from the
   counter next to power x time, the clocks-event reasons seen, and the compute processes NVML
   listed (the ``tm`` pid must not be among them; ``/proc/<tm pid>/maps`` must not map
   libcuda). ``nvidia-smi --query-compute-apps=pid`` is polled as a second witness.
4. **The tiny GPT under ``tm``** (``examples/train_gpt.py --device cuda``, bf16 autocast): MFU
   from ``tm replay`` beside OFU (mean tensor activity while it trained), and the run's energy.

5. **The loss from backward() on the device** (``benchmarks/loss_on_device.py`` under ``tm``):
   a CUDA loop under ``torch.cuda.set_sync_debug_mode("error")`` (a synchronizing call raises),
   whose ``backward_loss`` series must hold every step's loss, equal to the values the loop
   printed after it, with no warning from trainmeter: the agent read them through its pinned
   slots and polled events, never a synchronization.

It prints one short table and, with ``--out DIR``, writes ``gpu_check.json`` and both run logs
there. Budget: about 3 minutes on an H100/H200 (torch's CUDA start-up twice, 20 s of GEMMs, the
GPT); every child has a timeout, so it ends within 8 minutes whatever happens. Record the
results in docs/hardware-checklist.md.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from trainmeter.core import peaks  # noqa: E402  (after the path fix-up above)
from trainmeter.sources import NoneBackend, NvmlBackend, open_backend  # noqa: E402
from trainmeter.sources.base import GPM_FIELDS  # noqa: E402

EXAMPLE = ROOT / "examples" / "train_gpt.py"
DEADLINE_S = 450.0  # stop starting new steps after this (the whole check: under 8 minutes)
MATMUL_TIMEOUT_S = 180.0
GPT_TIMEOUT_S = 200.0
SAMPLE_HZ = 4.0

MATMUL = r"""
import json, os, sys, time
import torch
n, seconds = int(sys.argv[1]), float(sys.argv[2])
dev = torch.device("cuda", 0)
a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
for _ in range(5):
    c = a @ b  # warm-up: cuBLAS picks its kernel
torch.cuda.synchronize()
time.sleep(3.0)  # an idle stretch the sampler sees before the loop
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
t0 = time.time()
start.record()
iters = 0
while time.time() - t0 < seconds:
    for _ in range(20):
        c = a @ b
    iters += 20
    torch.cuda.synchronize()
end.record()
torch.cuda.synchronize()
t1 = time.time()
ms = start.elapsed_time(end)
props = torch.cuda.get_device_properties(0)
print("GPU_CHECK " + json.dumps({
    "pid": os.getpid(), "n": n, "iters": iters, "seconds": ms / 1000, "t0": t0, "t1": t1,
    "tflops": 2 * n ** 3 * iters / (ms / 1000) / 1e12, "device": torch.cuda.get_device_name(0),
    "uuid": str(getattr(props, "uuid", "")), "torch": torch.__version__,
    "cuda": torch.version.cuda,
}), flush=True)
time.sleep(2.0)  # idle again: the sampler sees the loop end
"""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(ROOT), env.get("PYTHONPATH", "")] if p)
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # CUDA device 0 = NVML index 0
    env.pop("TRAINMETER_SOCKET", None)
    env.pop("TRAINMETER_GPU_BACKEND", None)
    return env


def _log(cwd: Path) -> list[dict]:
    (log,) = sorted((cwd / ".trainmeter" / "runs").glob("*/run.jsonl"))[-1:]
    return [json.loads(x) for x in log.read_text().splitlines() if x.strip()]


def _replay(cwd: Path) -> dict:
    from trainmeter.core.engine import replay

    (log,) = sorted((cwd / ".trainmeter" / "runs").glob("*/run.jsonl"))[-1:]
    with open(log, "rb") as f:
        return replay(f).snapshot()


def _gpu0(log: list[dict]) -> list[dict]:
    """GPU 0's samples, with ``missing`` carried forward as the engine does."""
    out, missing = [], {}
    for rec in log:
        if rec["k"] != "gpu":
            continue
        for g in rec["gpus"]:
            if g.get("index") == 0:
                missing = g.get("missing", missing)
                out.append({**g, "missing": missing})
    return out


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


def _fmt(x, digits=3, unit="") -> str:
    if x is None:
        return "n/a"
    return f"{x:.{digits}g}{unit}"


class Witness(threading.Thread):
    """Polls ``nvidia-smi --query-compute-apps=pid`` once a second: a second source of pids."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.pids: set[int] = set()
        self.error: str | None = None
        self.done = threading.Event()

    def run(self) -> None:
        smi = shutil.which("nvidia-smi")
        if smi is None:
            self.error = "nvidia-smi not found"
            return
        while not self.done.wait(1.0):
            try:
                out = subprocess.run(
                    [smi, "--query-compute-apps=pid", "--format=csv,noheader"],
                    capture_output=True,
                    text=True,
                    timeout=10,
                )
                self.pids |= {int(x) for x in out.stdout.split() if x.strip().isdigit()}
            except Exception as err:  # a witness only
                self.error = f"{type(err).__name__}: {err}"


def _libcuda_mapped(pid: int) -> bool | None:
    """Whether libcuda (the CUDA driver API, which makes contexts) is mapped in ``pid``."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return None
    return "libcuda.so" in maps or "libcudart" in maps


def _tm(args: list[str], cwd: Path, timeout: float, watch_pid: bool = False):
    """Run ``tm ARGS`` in ``cwd``; returns (CompletedProcess-like, tm pid, libcuda in tm, smi)."""
    cmd = [sys.executable, "-m", "trainmeter.cli", "--no-web", *args]
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    witness = Witness() if watch_pid else None
    mapped: list[bool | None] = []
    if witness:
        witness.start()

    def peek():
        while proc.poll() is None:
            mapped.append(_libcuda_mapped(proc.pid))
            time.sleep(1.0)

    peeker = threading.Thread(target=peek, daemon=True)
    peeker.start()
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        err += f"\n[gpu_check: killed after {timeout:.0f} s]"
    if witness:
        witness.done.set()
    seen = [m for m in mapped if m is not None]
    result = {
        "rc": proc.returncode,
        "stdout": out,
        "stderr": err,
        "pid": proc.pid,
        "libcuda_in_tm": any(seen) if seen else None,
        "smi_pids": sorted(witness.pids) if witness else None,
        "smi_error": witness.error if witness else None,
    }
    return result


# --- the checks -------------------------------------------------------------------------------


def static_facts(backend) -> dict:
    system = backend.system()
    dev = backend.devices()[0]
    peak = peaks.resolve_peak(dev.name, "bf16")
    row = peaks.match_device(dev.name)
    return {
        "name": dev.name,
        "uuid": dev.uuid,
        "gpus": len(backend.devices()),
        "driver": system.get("driver_version"),
        "nvml": system.get("nvml_version"),
        "cuda_driver": system.get("cuda_driver_version"),
        "gpm": dev.gpm,
        "gpm_reason": dev.gpm_reason,
        "mig": system.get("mig_modes", {}).get(dev.gpu_index),
        "mig_instance": dev.mig,
        "power_limit_w": dev.power_limit_w,
        "peak_bf16": peak.flops if peak else None,
        "peak_device": peak.device if peak else None,
        "mem_bw": row.mem_bw if row else None,
    }


def gpm_rule() -> dict:
    """GPM windows of 20 ms and of 100 ms on an idle GPU, with trainmeter's own 100 ms guard
    turned off, to see what NVML itself does below 100 ms."""
    out = {}
    backend = NvmlBackend(min_gpm_interval_s=0.0)
    try:
        time.sleep(0.2)
        backend.sample()  # a window of 200 ms: primes nothing, just a known state
        for gap in (0.02, 0.1, 0.02):
            time.sleep(gap)
            (s, *_) = backend.sample()
            out[f"{int(gap * 1000)} ms"] = {
                f: (getattr(s, f) if getattr(s, f) is not None else f"none: {s.missing.get(f)}")
                for f in GPM_FIELDS
            }
    finally:
        backend.close()
    return out


def matmul(work: Path, size: int, seconds: float, peak: float | None) -> dict:
    r = _tm(
        [
            "--gpu-backend",
            "nvml",
            "--dtype",
            "bf16",
            "--sample-hz",
            str(SAMPLE_HZ),
            "--",
            sys.executable,
            "-c",
            MATMUL,
            str(size),
            str(seconds),
        ],
        work,
        MATMUL_TIMEOUT_S,
        watch_pid=True,
    )
    line = next((x for x in r["stdout"].splitlines() if x.startswith("GPU_CHECK ")), None)
    if r["rc"] != 0 or line is None:
        return {"error": f"tm exit {r['rc']}: {r['stderr'][-2000:]}"}
    child = json.loads(line.split(" ", 1)[1])
    return analyze_matmul(child, _log(work), _replay(work), r, peak)


def analyze_matmul(child: dict, log: list[dict], snap: dict, r: dict, peak: float | None) -> dict:
    """The matmul run's figures from its run log (``r``: ``_tm``'s result)."""
    samples = _gpu0(log)
    period = 1.0 / SAMPLE_HZ
    inside = [s for s in samples if child["t0"] + period <= s["time_s"] <= child["t1"]]
    before = [s for s in samples if s["time_s"] < child["t0"] - period]
    tensor = [s["tensor_active"] for s in inside if s.get("tensor_active") is not None]
    mean_tensor = _mean(tensor)
    present = sorted({f for s in inside for f in GPM_FIELDS if s.get(f) is not None})
    last = samples[-1]["missing"] if samples else {}
    absent = {f: last.get(f, "no sample") for f in GPM_FIELDS if f not in present}
    energy = [(s["time_s"], s["energy_mj"]) for s in inside if s.get("energy_mj") is not None]
    e_j = (energy[-1][1] - energy[0][1]) / 1000 if len(energy) > 1 else None
    e_s = energy[-1][0] - energy[0][0] if len(energy) > 1 else None
    steps = [b[1] - a[1] for a, b in itertools.pairwise(energy)]
    nvml_pids = {int(p) for s in samples for p in (s.get("process_mem_bytes") or {})}
    return {
        "child": child,
        "samples": len(samples),
        "inside": len(inside),
        "gpm_present": present,
        "gpm_absent": absent,
        "tensor_active": mean_tensor,
        "tensor_active_min": min(tensor, default=None),
        "tensor_active_max": max(tensor, default=None),
        "sm_active": _mean(s.get("sm_active") for s in inside),
        "sm_occupancy": _mean(s.get("sm_occupancy") for s in inside),
        "dram_active": _mean(s.get("dram_active") for s in inside),
        "gpu_util": _mean(s.get("gpu_util") for s in inside),
        "ofu_flops": mean_tensor * peak if mean_tensor is not None and peak else None,
        "sm_clock_mhz": _mean(s.get("sm_clock_mhz") for s in inside),
        # the highest SM clock of the run (the boost clock an idle GPU shows as work starts)
        "sm_clock_max_mhz": max(
            (s["sm_clock_mhz"] for s in samples if s.get("sm_clock_mhz")), default=None
        ),
        "energy_j": e_j,
        "energy_s": e_s,
        "energy_power_w": e_j / e_s if e_j is not None and e_s else None,
        "mean_power_w": _mean(s.get("power_w") for s in inside),
        "energy_steps_negative": sum(1 for d in steps if d < 0),
        "energy_steps_zero": sum(1 for d in steps if d == 0),
        "throttle_loop": sorted({n for s in inside for n in _names(s.get("throttle_mask"))}),
        "throttle_idle": sorted({n for s in before for n in _names(s.get("throttle_mask"))}),
        "run_energy_j": snap.get("energy_j"),
        "tm_pid": r["pid"],
        "nvml_pids": sorted(nvml_pids),
        "smi_pids": r["smi_pids"],
        "smi_error": r["smi_error"],
        "libcuda_in_tm": r["libcuda_in_tm"],
    }


def _names(mask) -> list[str]:
    from trainmeter.core.counters import throttle_names

    if isinstance(mask, bool) or not isinstance(mask, int) or mask < 0:
        return []
    return throttle_names(mask) or []


def gpt(work: Path, steps: int) -> dict:
    r = _tm(
        [
            "--gpu-backend",
            "nvml",
            "--sample-hz",
            str(SAMPLE_HZ),
            "--",
            sys.executable,
            str(EXAMPLE),
            "--device",
            "cuda",
            "--steps",
            str(steps),
            "--batch-size",
            "64",
            "--eval-every",
            "0",
        ],
        work,
        GPT_TIMEOUT_S,
    )
    if r["rc"] != 0:
        return {"error": f"tm exit {r['rc']}: {r['stderr'][-2000:]}"}
    return analyze_gpt(_log(work), _replay(work), r)


def analyze_gpt(log: list[dict], snap: dict, r: dict) -> dict:
    """The tiny GPT run's MFU beside OFU (mean tensor activity over its last 90 % of steps)."""
    step_t = [rec["t"] for rec in log if rec["k"] == "step"]
    samples = _gpu0(log)
    lo, hi = (step_t[len(step_t) // 10], step_t[-1]) if step_t else (0.0, 0.0)
    during = [s for s in samples if lo <= s["time_s"] <= hi]
    conv = snap.get("convention")
    return {
        "steps": snap.get("step"),
        "tokens_per_s": snap.get("tokens_per_s_avg"),
        "convention": conv,
        "mfu": (snap.get("mfu_avg") or {}).get(conv),
        "peak": snap.get("peak"),
        "dtype": (snap.get("model") or {}).get("run_dtype"),
        "ofu": _mean(s.get("tensor_active") for s in during),
        "samples": len(during),
        "gpu_util": _mean(s.get("gpu_util") for s in during),
        "energy_j": snap.get("energy_j"),
        "elapsed_s": snap.get("elapsed_s"),
        "libcuda_in_tm": r["libcuda_in_tm"],
        "tm_pid": r["pid"],
        "nvml_pids": sorted({int(p) for s in samples for p in (s.get("process_mem_bytes") or {})}),
    }


PROBE = r"""
import json, sys
from trainmeter.sources import NvmlBackend

def mapped():
    with open("/proc/self/maps") as f:
        return "libcuda.so" in f.read()

class Spy:
    # pynvml with a look at this process's maps after every nvml* call
    def __init__(self, module):
        self.module, self.first = module, None

    def __getattr__(self, name):
        fn = getattr(self.module, name)
        if not (callable(fn) and name.startswith("nvml")):
            return fn

        def call(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            finally:
                if self.first is None and mapped():
                    self.first = name
        return call

import pynvml, time
before = mapped()
spy = Spy(pynvml)
backend = NvmlBackend(spy)
backend.devices()
for _ in range(3):
    backend.sample()
    time.sleep(0.15)
sampler = spy.first
backend.system()  # tm doctor's facts: not asked by the sampler
print(json.dumps({"before": before, "sampler": sampler, "doctor": spy.first}))
backend.close()
"""


def libcuda_probe() -> dict:
    """Which NVML call, if any, maps libcuda into a process that only samples (the sampler's
    calls, then ``system()``'s): {before, sampler, doctor} (function names or None)."""
    try:
        out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                             env=_env(), timeout=60)  # fmt: skip
        return json.loads(out.stdout.strip().splitlines()[-1])
    except Exception as err:  # a diagnostic only
        return {"error": f"{type(err).__name__}: {err}"}


LOSS_CHILD = ROOT / "benchmarks" / "loss_on_device.py"
LOSS_STEPS = 200
LOSS_TIMEOUT_S = 120.0


def loss_on_device(work: Path) -> dict:
    """Check 5: the loss read off the device without a synchronization (module docstring)."""
    r = _tm(["--", sys.executable, str(LOSS_CHILD), "--steps", str(LOSS_STEPS)], work,
            LOSS_TIMEOUT_S)  # fmt: skip
    if r["rc"] != 0:
        return {"error": f"child exit {r['rc']}: {r['stderr'][-1500:]}"}
    return analyze_loss(r["stdout"], r["stderr"], _log(work))


def analyze_loss(stdout: str, stderr: str, log: list[dict]) -> dict:
    """The ``backward_loss`` series of the run against the ``LOSSES`` line the loop printed."""
    printed = [ln for ln in stdout.splitlines() if ln.startswith("LOSSES ")]
    if not printed:
        return {"error": "the loop printed no LOSSES line"}
    expected = json.loads(printed[0].split(" ", 1)[1])
    # trainmeter's lines on stderr other than its start line ("[trainmeter] run ID ...")
    warned = [ln for ln in stderr.splitlines()
              if "[trainmeter]" in ln and not ln.startswith("[trainmeter] run ")]  # fmt: skip
    got = {rec["step"]: rec["value"] for rec in log
           if rec["k"] == "series" and rec["name"] == "backward_loss"}  # fmt: skip
    missing = [i for i in range(1, len(expected) + 1) if i not in got]
    differ = [i for i, v in got.items() if not 1 <= i <= len(expected) or v != expected[i - 1]]
    dropped = [rec.get("counts") for rec in log if rec["k"] == "dropped"]
    return {
        "steps": len(expected),
        "recorded": len(got),
        "missing_steps": missing,
        "differ_steps": sorted(differ),
        "equal": not missing and not differ,
        "dropped": dropped[-1] if dropped else None,  # the agent's last cumulative counts
        "warnings": warned,
        "ok": not missing and not differ and not warned,
    }


# --- the table --------------------------------------------------------------------------------


def context_verdict(m: dict, nvml_maps: str | None = None) -> str:
    """PASS when tm is no compute process and libcuda is not mapped in it, or is mapped by an
    NVML call itself (``nvml_maps``: the first one after which it was, from :func:`libcuda_probe`:
    the driver's library loads libcuda to answer, which makes no context)."""
    child, tm = m["child"]["pid"], m["tm_pid"]
    seen = set(m["nvml_pids"]) | set(m["smi_pids"] or [])
    cuda = m["libcuda_in_tm"]
    maps = (
        "libcuda not mapped in tm"
        if cuda is False
        else f"libcuda mapped in tm by NVML's own {nvml_maps}, no context"
        if cuda and nvml_maps
        else "libcuda MAPPED in tm"
        if cuda
        else "tm's maps unreadable"
    )
    if tm in seen:
        return f"FAIL: tm pid {tm} holds a CUDA context ({maps}; compute pids {sorted(seen)})"
    if cuda and not nvml_maps:
        return f"FAIL: {maps}, and no NVML call maps it (compute pids {sorted(seen)})"
    if child not in seen:
        return (
            f"inconclusive by pid: NVML lists {sorted(seen)}, not the child {child} (another "
            f"pid namespace?); {maps}"
        )
    return f"PASS: tm pid {tm} not among compute pids {sorted(seen)} (child {child} is); {maps}"


def _rule_text(rule: dict) -> str:
    """Per window: how many GPM metrics had a value, else NVML's first reason."""
    parts = []
    for window, fields in rule.items():
        values = [v for v in fields.values() if isinstance(v, float)]
        reasons = [v for v in fields.values() if not isinstance(v, float)]
        text = f"{len(values)}/{len(fields)} values"
        if reasons:
            text += f" ({reasons[0]})"
        parts.append(f"{window}: {text}")
    return " | ".join(parts)


def _ordered(m: dict) -> str:
    """Whether the mean ladder is in order: GPU-Util >= SM >= occupancy, tensor <= SM."""
    a = [m.get(k) for k in ("gpu_util", "sm_active", "sm_occupancy", "tensor_active")]
    if any(x is None for x in a):
        return "order n/a"
    ok = a[0] >= a[1] >= a[2] and a[3] <= a[1]
    return "in order" if ok else "OUT OF ORDER"


def _joules(x) -> str:
    return "n/a" if x is None else f"{x:,.0f}"


def table(r: dict) -> list[str]:
    f = r["static"]
    rows = [
        (
            "GPU",
            f"{f['name']} ({f['gpus']} seen) · driver {f['driver']} · NVML {f['nvml']} "
            f"· CUDA {f['cuda_driver']} · MIG {f['mig']}",
        ),
        (
            "dense bf16 peak",
            f"{_fmt(f['peak_bf16'] and f['peak_bf16'] / 1e12, 5)} TFLOP/s ({f['peak_device']})",
        ),
    ]
    rows.append(("GPM support", "yes" if f["gpm"] else f"no: {f['gpm_reason']}"))
    if "gpm_rule" in r:
        rows.append(("GPM windows (no 100 ms guard)", _rule_text(r["gpm_rule"])))
    m = r.get("matmul", {})
    if "error" in m:
        rows.append(("matmul under tm", m["error"].splitlines()[-1]))
    elif m:
        c = m["child"]
        rows += [
            ("GPM metrics present", ", ".join(m["gpm_present"]) or "none"),
            (
                "GPM metrics absent",
                ", ".join(f"{k} ({v})" for k, v in m["gpm_absent"].items()) or "none",
            ),
            (
                "tensor-pipe activity (matmul)",
                f"mean {_fmt(m['tensor_active'])} over "
                f"{m['inside']} samples (min {_fmt(m['tensor_active_min'])}, max "
                f"{_fmt(m['tensor_active_max'])}); ladder GPU-Util {_fmt(m['gpu_util'])}, SM "
                f"{_fmt(m['sm_active'])}, occupancy {_fmt(m['sm_occupancy'])} "
                f"({_ordered(m)}); DRAM {_fmt(m['dram_active'])}",
            ),
            (
                "matmul TFLOP/s measured",
                f"{c['tflops']:.1f} (bf16 {c['n']}^3 x {c['iters']} in "
                f"{c['seconds']:.1f} s, CUDA events; torch {c['torch']}, CUDA {c['cuda']})",
            ),
            (
                "OFU-derived TFLOP/s",
                f"{_fmt(m['ofu_flops'] and m['ofu_flops'] / 1e12, 4)} "
                "(tensor activity x dense peak); measured / OFU-derived "
                f"{_fmt(m['ofu_flops'] and c['tflops'] * 1e12 / m['ofu_flops'])}",
            ),
            (
                "energy (matmul loop)",
                f"{_joules(m['energy_j'])} J over {_fmt(m['energy_s'])} s = "
                f"{_fmt(m['energy_power_w'])} W from the counter vs {_fmt(m['mean_power_w'])} W "
                f"mean power reading; steps <0: {m['energy_steps_negative']}, =0: "
                f"{m['energy_steps_zero']}",
            ),
            (
                "clocks-event reasons",
                f"loop: {', '.join(m['throttle_loop']) or 'none'}; idle: "
                f"{', '.join(m['throttle_idle']) or 'none'}",
            ),
            (
                "SM clock (matmul)",
                f"{_fmt(m.get('sm_clock_mhz'))} MHz in the loop, highest of the run "
                f"{_fmt(m.get('sm_clock_max_mhz'))} MHz; OFU-derived x loop/highest clock "
                f"{_fmt(_clocked(m) and _clocked(m) / 1e12, 4)} TFLOP/s, measured / that "
                f"{_fmt(_clocked(m) and c['tflops'] * 1e12 / _clocked(m))}",
            ),
            ("no CUDA context in tm", context_verdict(m, _probe_fn(r))),
            ("libcuda probe (NVML calls)", _probe_text(r.get("libcuda_probe") or {})),
        ]
    g = r.get("gpt", {})
    if "error" in g:
        rows.append(("tiny GPT under tm", g["error"].splitlines()[-1]))
    elif g:
        mfu = g["mfu"]
        rows += [
            (
                "MFU vs OFU (tiny GPT)",
                f"MFU {_fmt(mfu and mfu * 100)}% [{g['convention']}] vs "
                f"OFU {_fmt(g['ofu'] and g['ofu'] * 100)}% ({g['samples']} samples; "
                f"{_fmt(g['tokens_per_s'])} tokens/s, dtype {g['dtype']}, GPU-Util "
                f"{_fmt(g['gpu_util'])})",
            ),
            ("energy (tiny GPT run)", f"{_joules(g['energy_j'])} J over {_fmt(g['elapsed_s'])} s"),
            ("libcuda in tm (GPT run)", str(g["libcuda_in_tm"])),
        ]
    rows.append(("loss from backward() on GPU", _loss_text(r.get("loss", {}))))
    width = max(len(k) for k, _ in rows)
    return [f"{k.ljust(width)}  {v}" for k, v in rows]


def _loss_text(m: dict) -> str:
    if "error" in m:
        return m["error"].splitlines()[-1] if m["error"] else "error"
    if not m:
        return "not run"
    verdict = "OK" if m["ok"] else "FAILED"
    differ = m["differ_steps"]
    return (f"{verdict}: {m['recorded']} of {m['steps']} steps recorded, values "
            f"{'differ at steps ' + str(differ[:5]) if differ else 'equal where recorded'}, "
            f"missing {_steps_text(m['missing_steps'])}, dropped {m['dropped'] or 'none'}, under "
            f"sync debug mode 'error'; trainmeter warnings: {len(m['warnings'])}")  # fmt: skip


def _clocked(m: dict) -> float | None:
    """The OFU-derived FLOP/s scaled by the loop's SM clock over the run's highest."""
    clk, idle, ofu = m.get("sm_clock_mhz"), m.get("sm_clock_max_mhz"), m.get("ofu_flops")
    return ofu * clk / idle if ofu and clk and idle else None


def _probe_fn(r: dict) -> str | None:
    p = r.get("libcuda_probe") or {}
    return p.get("sampler")


def _probe_text(p: dict) -> str:
    if "error" in p:
        return p["error"]
    return (f"mapped before NVML: {p.get('before')}; first sampler call that maps it: "
            f"{p.get('sampler') or 'none'}; after system() (tm doctor): "
            f"{p.get('doctor') or 'none'}")  # fmt: skip


def _steps_text(steps: list[int]) -> str:
    return f"{len(steps)} ({steps[:8]}{' ...' if len(steps) > 8 else ''})" if steps else "none"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--matmul-s", type=float, default=20.0, help="seconds of GEMMs (default 20)")
    p.add_argument("--size", type=int, default=8192, help="GEMM size N (default 8192)")
    p.add_argument("--gpt-steps", type=int, default=400, help="tiny GPT steps (default 400)")
    p.add_argument("--out", type=Path, help="write gpu_check.json and the run logs here")
    args = p.parse_args(argv)
    began = time.monotonic()

    probe = open_backend(None)
    if isinstance(probe, NoneBackend) or not probe.devices():
        why = probe.reason or "NVML found no GPU"
        probe.close()
        print(f"gpu_check: no NVIDIA GPU here ({why}); nothing to check")
        return 0
    try:
        result: dict = {
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "static": static_facts(probe),
        }
    finally:
        probe.close()
    if importlib.util.find_spec("torch") is None:
        print(
            f"gpu_check: {result['static']['name']} found but torch is not installed; "
            "install torch with CUDA to run the checks"
        )
        return 1
    print(f"gpu_check: {result['static']['name']}; about 3 minutes", file=sys.stderr, flush=True)
    result["libcuda_probe"] = libcuda_probe()
    try:
        result["gpm_rule"] = gpm_rule()
    except Exception as err:
        result["gpm_rule"] = {"error": {"tensor_active": f"{type(err).__name__}: {err}"}}
    work = Path(tempfile.mkdtemp(prefix="gpu_check-"))
    try:
        (work / "matmul").mkdir()
        (work / "gpt").mkdir()
        peak = result["static"]["peak_bf16"]
        print("gpu_check: bf16 matmul loop under tm", file=sys.stderr, flush=True)
        result["matmul"] = matmul(work / "matmul", args.size, args.matmul_s, peak)
        if time.monotonic() - began < DEADLINE_S:
            print("gpu_check: tiny GPT under tm", file=sys.stderr, flush=True)
            result["gpt"] = gpt(work / "gpt", args.gpt_steps)
        else:
            result["gpt"] = {"error": "skipped: out of time"}
        (work / "loss").mkdir()
        if time.monotonic() - began < DEADLINE_S:
            print("gpu_check: the loss from backward() on the device", file=sys.stderr, flush=True)
            result["loss"] = loss_on_device(work / "loss")
        else:
            result["loss"] = {"error": "skipped: out of time"}
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            for name in ("matmul", "gpt", "loss"):
                for log in (work / name / ".trainmeter" / "runs").glob("*/run.jsonl"):
                    shutil.copy(log, args.out / f"{name}.run.jsonl")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result["took_s"] = time.monotonic() - began
    lines = table(result)
    print("\n".join(lines))
    print(f"took {result['took_s']:.0f} s")
    if args.out:
        (args.out / "gpu_check.json").write_text(json.dumps(result, indent=2, default=str))
        (args.out / "gpu_check.txt").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
