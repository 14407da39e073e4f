"""Screenshots of the dashboard from the built bundle, for a person to look at.

Serves a static harness page on loopback that loads ``trainmeter/static/widget.js`` the way
anywidget does (``initialize`` with one model proxy, ``render`` with another, then "points"
deltas), with a fake model fed realistic snapshots (every key of docs/spec.md "Snapshot keys for
the dashboard") and 300 steps of chart history, and takes headless-Chromium screenshots in
JupyterLab's light and dark themes (their real CSS variables, read from the installed jupyterlab
package) at a narrow notebook column (500 px) and a wide window (1400 px).

Variants: ``gpu`` (2 x H100, every counter sampled, time split and stragglers not measured yet),
``a100`` (2 x A100: the GPM counters are null with their reason, a FLOPs budget, a time split and
a straggler), ``cpu`` (no peak, no GPUs, ``hardware`` null, markup in names from training code)
and ``early`` (before the first step).

    npm run build && python scripts/screenshot.py [--out /tmp/trainmeter-shots] [--chromium PATH]
    python scripts/screenshot.py --run RUN    # a real run's log instead (id, prefix or folder)

Prints each PNG's path and any console error or ``[trainmeter]`` message the page logged; exits 1 if
the page logged an error. Standard library only; needs a Chromium binary (Debian: ``apt-get install
chromium``).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.server
import json
import math
import random
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STATIC = ROOT / "trainmeter" / "static"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
    "--hide-scrollbars",
    "--virtual-time-budget=4000",
    "--enable-logging=stderr",
    "--v=0",
]

# (name, variant, theme, width, height): theme "light"/"dark" use JupyterLab's variables, "os-dark"
# uses none (the `tm` page, other hosts) with the OS preference set to dark. Narrow is a notebook
# column (~500 px), wide a full window (~1400 px); the heights take the whole dashboard.
SHOTS = [
    ("gpu-light-500", "gpu", "light", 500, 3300),
    ("gpu-dark-500", "gpu", "dark", 500, 3300),
    ("gpu-light-1400", "gpu", "light", 1400, 1750),
    ("gpu-dark-1400", "gpu", "dark", 1400, 1750),
    ("a100-light-1400", "a100", "light", 1400, 1750),
    ("a100-dark-500", "a100", "dark", 500, 3300),
    ("cpu-light-500", "cpu", "light", 500, 2300),
    ("cpu-dark-1400", "cpu", "dark", 1400, 1400),
    ("early-light-500", "early", "light", 500, 2000),
    ("gpu-osdark-1400", "gpu", "os-dark", 1400, 1750),
    # the view's own controls used: convention hf, log scale, a price of $2.50 per GPU-hour
    ("gpu-controls-light-1400", "gpu&act=1", "light", 1400, 1750),
]


def loss_history(steps: int = 300, seed: int = 0) -> dict:
    """A plausible run: training loss every step (noisy, decaying), validation every 25 steps."""
    rng = random.Random(seed)
    xs = list(range(1, steps + 1))
    train = [2.1 + 3.4 * math.exp(-s / 55) + rng.gauss(0, 0.09) for s in xs]
    vxs = list(range(25, steps + 1, 25))
    val = [2.18 + 3.3 * math.exp(-s / 60) + rng.gauss(0, 0.02) for s in vxs]
    return {"train_loss": [xs, train], "val_loss": [vxs, val]}


def rate_history(rate: float, steps: int = 300, seed: int = 1) -> list:
    """tokens_per_s per step (the engine's timeline series): a warm-up, then noise, one dip."""
    rng = random.Random(seed)
    xs = list(range(2, steps + 1))
    ys = []
    for s in xs:
        warm = 1 - math.exp(-s / 12)
        dip = 0.55 if 180 <= s < 186 else 1.0  # a checkpoint save: the dip must survive thinning
        ys.append(rate * warm * dip * (1 + rng.gauss(0, 0.015)))
    return [xs, ys]


LADDER_FIELDS = ("gpu_util", "sm_active", "sm_occupancy", "tensor_active", "dram_active")


def hardware_history(gpus: list[dict], steps: int = 300, seed: int = 2) -> dict:
    """gpu<i>/<field> series (fractions) that end at each GPU's sampled value; a GPU that cannot
    report a field (null in the sample) has no series for it."""
    rng = random.Random(seed)
    out = {}
    for g in gpus:
        for field in LADDER_FIELDS:
            last = g.get(field)
            if last is None:
                continue
            xs = list(range(5, steps + 1, 5))
            ys = [
                max(0.0, min(1.0, last * (1 - math.exp(-x / 15)) * (1 + rng.gauss(0, 0.03))))
                for x in xs
            ]
            ys[-1] = last
            out[f"gpu{g['index']}/{field}"] = [xs, ys]
    return out


_H100_BF16, _H100_BW = 989.5e12, 3.35e12  # dense FLOP/s and bytes/s (trainmeter/core/peaks.py)


def _h100(index: int, throttle: list[str]) -> dict:
    tensor, dram = 0.22 - 0.01 * index, 0.41
    return {
        "index": index,
        "name": "NVIDIA H100 80GB HBM3",
        "gpu_util": 0.98,
        "sm_active": 0.71 - 0.03 * index,
        "sm_occupancy": 0.38,
        "tensor_active": tensor,
        "dram_active": dram,
        # derived as the supervisor derives them (core/counters.py), from the H100 SXM row
        "ofu": tensor,
        "observed_flops_per_s": tensor * _H100_BF16,
        "dram_bytes_per_s": dram * _H100_BW,
        "intensity": (tensor * _H100_BF16) / (dram * _H100_BW),
        "ridge_point": _H100_BF16 / _H100_BW,
        "mem_used_bytes": 65_712_472_064,
        "mem_total_bytes": 85_520_809_984,
        "power_w": 512.4 - 20 * index,
        "power_limit_w": 700.0,
        "energy_j": 9.31e5 - 2e4 * index,
        "sm_clock_mhz": 1980,
        "mem_clock_mhz": 2619,
        "throttle": throttle,
        "missing": {},
    }


def _a100(index: int) -> dict:
    gpm = "needs Hopper or newer (NVML GPM)"
    return {
        "index": index,
        "name": "NVIDIA A100-SXM4-80GB",
        "gpu_util": 0.93,
        "sm_active": None,
        "sm_occupancy": None,
        "tensor_active": None,
        "dram_active": None,
        "ofu": None,
        "observed_flops_per_s": None,
        "dram_bytes_per_s": None,
        "intensity": None,
        "ridge_point": 312e12 / 2.039e12,  # A100 SXM4 80GB: dense BF16 over bandwidth
        "mem_used_bytes": 52_613_349_376,
        "mem_total_bytes": 85_899_345_920,
        "power_w": 341.0,
        "power_limit_w": 400.0,
        "energy_j": None,
        "sm_clock_mhz": 1410,
        "mem_clock_mhz": 1593,
        "throttle": ["sw_power_cap"] if index else [],
        "missing": {
            "sm_active": gpm,
            "sm_occupancy": gpm,
            "tensor_active": gpm,
            "dram_active": gpm,
            "ofu": gpm,
            "observed_flops_per_s": gpm,
            "dram_bytes_per_s": gpm,
            "intensity": gpm,
            "energy_j": "the energy counter needs Volta or newer and a driver that exposes it",
        },
    }


def _gpu_run(
    *, device: str, peak: float, gpus: int, rate: float, hw: list[dict], extra: dict
) -> dict:
    """A GPU run whose figures agree with each other as the engine's would."""
    fpt = {"hf": 7.47e8, "megatron": 8.02e8, "titan": 8.60e8, "embeddings": 1.05e9}
    step, tokens_per_step, elapsed = 300, 524288, 1843.6
    tokens = step * tokens_per_step
    budget = 2_000_000_000
    eta = (budget - tokens) / rate
    plan_mfu = 0.40
    plan_rate = plan_mfu * gpus * peak / fpt["titan"]
    return {
        "v": 1,
        "run": {
            "id": "20261130-091500-ab12",
            "name": "train_gpt",
            "state": "running",
            "started": 1764494100.0,
            "segment": 2,
            "version": "0.1.0",
        },
        "step": step,
        "tokens": tokens,
        "elapsed_s": elapsed,
        "train_time_s": 1790.2,
        "tokens_per_s": rate,
        "tokens_per_s_avg": rate * 0.996,
        "step_time_s": tokens_per_step / rate,
        "budget_tokens": budget,
        "budget_flops": None,
        "progress": tokens / budget,
        "eta_s": eta,
        "model": {
            "name": "GPT",
            "params": 124_475_904,
            "embedding_params": 38_597_376,
            "layers": 12,
            "width": 768,
            "heads": 12,
            "vocab": 50257,
            "seq_len": 1024,
            "context": 1024,
            "dtype": "float32",
            "run_dtype": "bfloat16",
            "device": "cuda",
            "device_name": device,
            "gpus": 1,
        },
        "ranks": {str(r): step for r in range(gpus)},
        "gpus": gpus,
        "gpu_hours": gpus * elapsed / 3600,
        "gpu_hours_to_finish": gpus * eta / 3600,
        "convention": "titan",
        "flops_per_token": fpt,
        "flops_per_token_counted": 1.12e9,
        "flops_spent": {k: v * tokens for k, v in fpt.items()},
        "flops_required": {k: v * budget for k, v in fpt.items()},
        "model_flops_per_s": {k: v * rate for k, v in fpt.items()},
        "model_flops_per_s_per_gpu": {k: v * rate / gpus for k, v in fpt.items()},
        "peak": {
            "flops": peak,
            "dtype": "bf16",
            "device": device,
            "source": "table",
            "citation": "NVIDIA datasheet (dense BF16)",
            "verified": True,
        },
        "mfu": {k: rate * v / (gpus * peak) for k, v in fpt.items()},
        "mfu_avg": {k: 0.996 * rate * v / (gpus * peak) for k, v in fpt.items()},
        "plan": {
            "mfu": plan_mfu,
            "tokens_per_s": plan_rate,
            "eta_s": (budget - tokens) / plan_rate,
            "source": "assumed MFU, core/plan.py default",
        },
        "rank_step_time_s": {str(r): tokens_per_step / rate * (1 + 0.012 * r) for r in range(gpus)},
        "stragglers": None,
        "time_split": None,
        "energy_j": sum(g["energy_j"] for g in hw if g.get("energy_j") is not None) or None,
        "hardware": {
            "gpus": hw,
            "host": {
                "cpu_util": 0.375,
                "mem_used_bytes": 188_978_561_024,
                "mem_total_bytes": 2_199_023_255_552,
                "rss_bytes": 13_207_024_640,
            },
        },
        "notes": [],
        **extra,
    }


def snapshots(series: dict) -> tuple[dict, dict]:
    """(snapshots by variant, chart history by variant)."""
    train = series["train_loss"][1]
    ema = train[0]
    for y in train:
        ema = 0.9 * ema + 0.1 * y
    loss = {
        "train_loss": {"step": 300, "value": train[-1], "ema": ema, "role": "train_loss"},
        "val_loss": {
            "step": 300,
            "value": series["val_loss"][1][-1],
            "ema": None,
            "role": "val_loss",
        },
    }
    reported = {
        **loss,
        "lr": {"step": 300, "value": 5.8e-4, "ema": None},
        "grad_norm": {"step": 300, "value": 0.91, "ema": 0.95},
        "eval/accuracy": {"step": 300, "value": 0.412, "ema": None},
    }
    h100 = [_h100(0, []), _h100(1, ["sw_power_cap"])]
    gpu = _gpu_run(
        device="NVIDIA H100 80GB HBM3",
        peak=9.895e14,
        gpus=2,
        rate=182_340.5,
        hw=h100,
        extra={"series": reported},
    )
    a100s = [_a100(0), _a100(1)]
    a100 = _gpu_run(
        device="NVIDIA A100-SXM4-80GB",
        peak=3.12e14,
        gpus=2,
        rate=71_250.0,
        hw=a100s,
        extra={
            "series": reported,
            # a FLOPs budget (counted in the run's convention) instead of a token budget
            "budget_flops": 1.0e18,
            "time_split": {
                "compute": 1502.1,
                "data": 181.4,
                "checkpoint": 64.0,
                "eval": 71.5,
                "other": 24.6,
            },
            "stragglers": [1],
        },
    )
    a100["budget_tokens"] = 1.0e18 / a100["flops_per_token"]["titan"]
    a100["progress"] = a100["tokens"] / a100["budget_tokens"]
    a100["eta_s"] = (a100["budget_tokens"] - a100["tokens"]) / a100["tokens_per_s"]
    a100["gpu_hours_to_finish"] = 2 * a100["eta_s"] / 3600
    a100["flops_required"] = {
        k: v * a100["budget_tokens"] for k, v in a100["flops_per_token"].items()
    }
    a100["run"] = {**a100["run"], "name": "gpt-a100-flops-budget"}
    cpu = {
        "v": 1,
        # Markup in a run name must show as text, never as HTML.
        "run": {
            "id": "20261130-091500-ab12",
            "name": "train_gpt <b>not bold</b><img src=x>",
            "state": "finished",
            "started": 1764494100.0,
            "segment": 1,
        },
        "step": 300,
        "tokens": 1228800,
        "elapsed_s": 61.2,
        "tokens_per_s": 3000.5,
        "tokens_per_s_avg": 2950.0,
        "step_time_s": 0.51,
        "budget_tokens": 20000000,
        "budget_flops": None,
        "progress": 0.0614,
        "eta_s": None,
        "model": {
            "name": "GPT",
            "params": 820000,
            "embedding_params": 49152,
            "layers": 4,
            "width": 128,
            "heads": 4,
            "vocab": 256,
            "seq_len": 128,
            "dtype": "float32",
            "device": "cpu",
            "gpus": 0,
        },
        "ranks": {"0": 300},
        "gpus": 0,
        "gpu_hours": None,
        "gpu_hours_to_finish": None,
        "convention": "titan",
        "flops_per_token": {"hf": 4.7e6, "megatron": 5.1e6, "titan": 5.3e6, "embeddings": 5.6e6},
        "flops_per_token_counted": None,
        "flops_spent": {
            "hf": 5.78e12,
            "megatron": 6.27e12,
            "titan": 6.51e12,
            "embeddings": 6.88e12,
        },
        "flops_required": {
            "hf": 9.4e13,
            "megatron": 1.02e14,
            "titan": 1.06e14,
            "embeddings": 1.12e14,
        },
        "model_flops_per_s": {
            "hf": 1.41e10,
            "megatron": 1.53e10,
            "titan": 1.59e10,
            "embeddings": 1.68e10,
        },
        "model_flops_per_s_per_gpu": None,
        "peak": None,
        "mfu": None,
        "mfu_avg": None,
        "plan": None,
        "rank_step_time_s": {"0": 0.51},
        "stragglers": None,
        "time_split": None,
        "energy_j": None,
        "hardware": None,
        "series": {
            **loss,
            # a series name from training code that looks like markup: shown as text
            "<img src=x onerror=alert(1)>/loss": {"step": 300, "value": 1.5, "ema": None},
        },
        "notes": [
            "no MFU: no dense peak is known for cpu; declare one with --peak",
            "tokens per step inferred from the batch shape (128 x 32)",
        ],
    }
    early = {
        "v": 1,
        "run": {
            "id": "20261130-091500-ab12",
            "name": "train_gpt",
            "state": "running",
            "segment": 1,
        },
        "step": None,
        "tokens": None,
        "elapsed_s": 1.2,
        "tokens_per_s": None,
        "budget_tokens": None,
        "eta_s": None,
        "model": None,
        "convention": "titan",
        "flops_per_token": None,
        "peak": None,
        "mfu": None,
        "gpus": None,
        "gpu_hours": None,
        "hardware": None,
        "time_split": None,
        "series": {},
        "notes": [
            "waiting for the first optimizer step",
            "no MFU: no dense peak is known for unknown; declare one with --peak",
        ],
    }
    history = {
        "gpu": {
            **series,
            "tokens_per_s": rate_history(gpu["tokens_per_s"]),
            **hardware_history(h100),
        },
        "a100": {
            **series,
            "tokens_per_s": rate_history(a100["tokens_per_s"]),
            **hardware_history(a100s),
        },
        "cpu": {
            **series,
            "tokens_per_s": rate_history(cpu["tokens_per_s"]),
            "<img src=x onerror=alert(1)>/loss": [[100, 200, 300], [1.9, 1.6, 1.5]],
        },
        "early": {},
    }
    return {"gpu": gpu, "a100": a100, "cpu": cpu, "early": early}, history


HARNESS = """<!doctype html>
<html><head><meta charset="utf-8"><title>loading</title>
<style>%(theme_css)s</style>
<link rel="stylesheet" href="widget.css">
<style>
  body { margin: 0; padding: 12px 14px; background: var(--jp-layout-color0, Canvas); }
  @media (prefers-color-scheme: dark) { body:not([data-jp-theme-light]) { background: #0d1117; } }
</style>
</head>
<body %(body_attrs)s>
<div id="out"></div>
<script type="module">
import widget from "./widget.js";
const fixture = %(fixture)s;
const params = new URLSearchParams(location.search);
const variant = params.get("variant") || "gpu";

// A stand-in for the Jupyter widget model; like anywidget, initialize() and render() each get
// their own proxy object over it, so the widget must find its store without relying on identity.
const attrs = {
  version: fixture.version, layout: {}, snapshot: fixture.snapshots[variant], history: {},
};
const handlers = new Map();
const emit = (name, ...args) => (handlers.get(name) || []).forEach((fn) => fn(...args));
const proxy = () => ({
  get: (k) => attrs[k],
  set: (k, v) => { attrs[k] = v; emit("change:" + k); },
  on: (name, fn) => handlers.set(name, [...(handlers.get(name) || []), fn]),
  off: (name, fn) => handlers.set(name, (handlers.get(name) || []).filter((f) => f !== fn)),
  send: () => {},
  save_changes: () => {},
});

if (variant === "real") {  // a real run's log, replayed (--run): its snapshot and full history
  attrs.history = fixture.history;
  await widget.initialize({model: proxy()});
  widget.render({model: proxy(), el: document.getElementById("out")});
} else if (variant !== "early") {
  // The first 280 steps as a full history, the rest as "points" deltas, one of them before any
  // view exists (the store lives in initialize) and one stale (must be ignored).
  const cut = ([xs, ys], from, to) => {
    const keep = xs.map((x) => x > from && x <= to);
    return [xs.filter((_, i) => keep[i]), ys.filter((_, i) => keep[i])];
  };
  const all = fixture.series[variant] || {};
  const pick = (from, to) =>
    Object.fromEntries(Object.entries(all).map(([n, s]) => [n, cut(s, from, to)]));
  attrs.history = {seq: 280, series: pick(0, 280)};
  await widget.initialize({model: proxy()});
  emit("msg:custom", {type: "points", seq: 290, series: pick(280, 290)});
  emit("msg:custom", {type: "points", seq: 285, series: {train_loss: [[281], [99]]}});
  widget.render({model: proxy(), el: document.getElementById("out")});
  emit("msg:custom", {type: "points", seq: 300, series: pick(290, 300)});
} else {
  await widget.initialize({model: proxy()});
  widget.render({model: proxy(), el: document.getElementById("out")});
}
// Use the view's controls the way a person would (only for shots that ask: &act=1).
if (params.get("act")) {
  const byId = (id) => document.querySelector(`[data-testid="${id}"]`);
  const select = byId("tm-convention");
  select.value = "hf";
  select.dispatchEvent(new Event("change"));
  const log = byId("tm-log-scale");
  log.checked = true;
  log.dispatchEvent(new Event("change"));
  const price = byId("tm-price");
  price.value = "2.5";
  price.dispatchEvent(new Event("input"));
}
// One panel alone (&panel=hardware), full width: the per-panel pictures in docs/img/.
const only = params.get("panel");
if (only) {
  document.querySelectorAll('[data-testid^="tm-panel-"]').forEach((p) => {
    p.style.display = p.dataset.testid === `tm-panel-${only}` ? "" : "none";
    p.style.gridColumn = "1 / -1";
  });
  document.querySelectorAll(".tm-notes").forEach((n) => { n.style.display = "none"; });
}
// The markup-looking names must stay text: fail loudly if any became an element.
if (document.querySelector("#out img, #out b")) {
  console.error("[trainmeter] markup from training code was parsed as HTML");
}
requestAnimationFrame(() => requestAnimationFrame(() => { document.title = "ready"; }));
</script>
</body></html>
"""


def jupyterlab_theme_css(theme: str) -> str:
    """The installed JupyterLab's own theme stylesheet (its --jp-* variables), or "" if absent."""
    name = "theme-dark-extension" if theme == "dark" else "theme-light-extension"
    try:
        import jupyterlab  # optional: only for realistic colours
    except ImportError:
        return ""
    css = Path(jupyterlab.__file__).parent / "themes" / "@jupyterlab" / name / "index.css"
    return css.read_text() if css.is_file() else ""


def write_site(site: Path, theme: str, fixture: dict) -> None:
    for name in ("widget.js", "widget.css"):
        shutil.copy(STATIC / name, site / name)
    if theme in ("light", "dark"):
        light = "true" if theme == "light" else "false"
        body = f'data-jp-theme-light="{light}" data-jp-theme-name="JupyterLab {theme.title()}"'
        css = jupyterlab_theme_css(theme)
    else:
        body, css = "", ""
    html = HARNESS % {"theme_css": css, "body_attrs": body, "fixture": json.dumps(fixture)}
    (site / f"{theme}.html").write_text(html)


@contextlib.contextmanager
def serve(directory: Path):
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="screenshot-http", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


def shoot(chromium: str, url: str, png: Path, width: int, height: int, dark_os: bool) -> list[str]:
    """Take one screenshot; returns the console lines worth showing."""
    flags = [*CHROMIUM_FLAGS, f"--window-size={width},{height}", f"--screenshot={png}"]
    if dark_os:
        flags += ["--force-dark-mode", "--blink-settings=preferredColorScheme=0"]
    with tempfile.TemporaryDirectory(prefix="tm-chromium-") as profile:
        proc = subprocess.run(
            [chromium, *flags, f"--user-data-dir={profile}", url],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    if not png.is_file():
        raise SystemExit(
            f"chromium wrote no screenshot ({proc.returncode}):\n{proc.stderr[-2000:]}"
        )
    return [
        line
        for line in proc.stderr.splitlines()
        if "CONSOLE" in line or "Uncaught" in line or "[trainmeter]" in line
    ]


def replayed(run: str) -> tuple[dict, dict]:
    """(snapshot, full timeline) of a run, rebuilt from its log as ``tm replay`` does."""
    sys.path.insert(0, str(ROOT))
    from trainmeter.core.engine import replay
    from trainmeter.supervisor.store import find_run

    with open(find_run(run) / "run.jsonl", "rb") as f:
        eng = replay(f)
    return eng.snapshot(), eng.timeline.full()


PANEL_SHOTS = (("cockpit", 400), ("efficiency", 520), ("hardware", 650), ("time", 330),
               ("plan", 420), ("passport", 560))  # fmt: skip
"""Each panel and the window height that holds it at 1000 px wide (the header sits on top)."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/trainmeter-shots"))
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    parser.add_argument("--run", help="shoot this run's replayed log instead of the fixtures")
    parser.add_argument("--only", help="comma-separated parts of shot names to take (gpu-dark,cpu)")
    parser.add_argument("--panels", action="store_true",
                        help="one picture per panel (2 x H100 fixture, light) into --out "
                             "(--panels --out docs/img)")  # fmt: skip
    args = parser.parse_args(argv)
    if not (STATIC / "widget.js").is_file():
        print("no bundle: run `npm install && npm run build` first", file=sys.stderr)
        return 2
    version = json.loads((ROOT / "package.json").read_text())["version"]
    snaps, history = snapshots(loss_history())
    fixture = {"version": version, "series": history, "snapshots": snaps}
    shots = SHOTS
    if args.only:
        shots = [s for s in shots if any(part in s[0] for part in args.only.split(","))]
    if args.panels:
        shots = [(f"panel-{name}", f"gpu&panel={name}", "light", 1000, height)
                 for name, height in PANEL_SHOTS]  # fmt: skip
    if args.run:
        fixture["snapshots"]["real"], fixture["history"] = replayed(args.run)
        shots = [("run-light-500", "real", "light", 500, 3000),
                 ("run-dark-1400", "real", "dark", 1400, 1600)]  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    failed = False
    with tempfile.TemporaryDirectory(prefix="tm-harness-") as tmp:
        site = Path(tmp)
        for theme in ("light", "dark", "os-dark"):
            write_site(site, theme, fixture)
        with serve(site) as base:
            for name, variant, theme, width, height in shots:
                png = args.out / f"{name}.png"
                png.unlink(missing_ok=True)
                lines = shoot(
                    args.chromium,
                    f"{base}/{theme}.html?variant={variant}",
                    png,
                    width,
                    height,
                    dark_os=theme == "os-dark",
                )
                print(png)
                for line in lines:
                    print(f"    {line}")
                    failed |= "ERROR" in line or "Uncaught" in line
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
