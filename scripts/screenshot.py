"""Screenshots of the dashboard from the built bundle, for a person to look at.

Serves a static harness page on loopback that loads ``trainmeter/static/widget.js`` the way
anywidget does (``initialize`` with one model proxy, ``render`` with another, then "points"
deltas), with a fake model fed a realistic snapshot and a 300-point loss history, and takes
headless-Chromium screenshots in JupyterLab's light and dark themes (their real CSS variables, read
from the installed jupyterlab package) at a narrow notebook column and a wide window.

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
# uses none (the `tm` page, other hosts) with the OS preference set to dark.
SHOTS = [
    ("gpu-light-420", "gpu", "light", 420, 1000),
    ("gpu-dark-420", "gpu", "dark", 420, 1000),
    ("gpu-light-1200", "gpu", "light", 1200, 640),
    ("gpu-dark-1200", "gpu", "dark", 1200, 640),
    ("cpu-light-420", "cpu", "light", 420, 1000),
    ("cpu-dark-1200", "cpu", "dark", 1200, 640),
    ("early-light-420", "early", "light", 420, 760),
    ("gpu-osdark-1200", "gpu", "os-dark", 1200, 640),
]


def loss_history(steps: int = 300, seed: int = 0) -> dict:
    """A plausible run: training loss every step (noisy, decaying), validation every 25 steps."""
    rng = random.Random(seed)
    xs = list(range(1, steps + 1))
    train = [2.1 + 3.4 * math.exp(-s / 55) + rng.gauss(0, 0.09) for s in xs]
    vxs = list(range(25, steps + 1, 25))
    val = [2.18 + 3.3 * math.exp(-s / 60) + rng.gauss(0, 0.02) for s in vxs]
    return {"train_loss": [xs, train], "val_loss": [vxs, val]}


def snapshots(series: dict) -> dict:
    train = series["train_loss"][1]
    ema = train[0]
    for y in train:
        ema = 0.9 * ema + 0.1 * y
    loss = {
        "train_loss": {"step": 300, "value": train[-1], "ema": ema},
        "val_loss": {"step": 300, "value": series["val_loss"][1][-1], "ema": None},
    }
    gpu = {
        "v": 1,
        "run": {
            "id": "20261130-091500-ab12",
            "name": "train_gpt",
            "state": "running",
            "started": 1764494100.0,
            "segment": 2,
        },
        "step": 300,
        "tokens": 300 * 524288,
        "elapsed_s": 1843.6,
        "tokens_per_s": 852340.5,
        "tokens_per_s_avg": 849120.0,
        "step_time_s": 0.6151,
        "budget_tokens": 2_000_000_000,
        "progress": 300 * 524288 / 2e9,
        "eta_s": 2161.0,
        "model": {
            "name": "GPT",
            "params": 124_475_904,
            "embedding_params": 38_597_376,
            "layers": 12,
            "width": 768,
            "heads": 12,
            "vocab": 50257,
            "seq_len": 1024,
            "dtype": "bfloat16",
            "device": "NVIDIA H100 80GB HBM3",
            "gpus": 8,
        },
        "convention": "titan",
        "flops_per_token": {
            "hf": 7.47e8,
            "megatron": 8.02e8,
            "titan": 8.60e8,
            "embeddings": 1.05e9,
        },
        "flops_spent": {
            "hf": 1.17e17,
            "megatron": 1.26e17,
            "titan": 1.35e17,
            "embeddings": 1.65e17,
        },
        "peak": {
            "flops": 9.895e14,
            "dtype": "bf16",
            "device": "NVIDIA H100 80GB HBM3",
            "source": "table",
            "citation": "NVIDIA H100 Tensor Core GPU datasheet (dense BF16, SXM5)",
        },
        "mfu": {"hf": 0.0804, "megatron": 0.0864, "titan": 0.0926, "embeddings": 0.113},
        "series": loss,
        "notes": [],
    }
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
        "progress": 0.0614,
        "eta_s": 6600.0,
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
        "convention": "titan",
        "flops_per_token": {"hf": 4.7e6, "megatron": 5.1e6, "titan": 5.3e6, "embeddings": 5.6e6},
        "flops_spent": {"hf": 7.7e11, "titan": 8.7e11},
        "peak": None,
        "mfu": None,
        "series": loss,
        "notes": [
            "no MFU: no peak is known for this device (cpu); declare one with --peak",
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
        "series": {},
        "notes": ["waiting for the first optimizer step"],
    }
    return {"gpu": gpu, "cpu": cpu, "early": early}


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
  // The first 280 points as a full history, the last 20 as two "points" deltas, one of them before
  // any view exists (the store lives in initialize) and one stale (must be ignored).
  const cut = ([xs, ys], from, to) => {
    const keep = xs.map((x) => x > from && x <= to);
    return [xs.filter((_, i) => keep[i]), ys.filter((_, i) => keep[i])];
  };
  const {train_loss: T, val_loss: V} = fixture.series;
  attrs.history = {seq: 280, series: {train_loss: cut(T, 0, 280), val_loss: cut(V, 0, 280)}};
  await widget.initialize({model: proxy()});
  emit("msg:custom", {type: "points", seq: 290, series: {train_loss: cut(T, 280, 290)}});
  emit("msg:custom", {type: "points", seq: 285, series: {train_loss: [[281], [99]]}});
  widget.render({model: proxy(), el: document.getElementById("out")});
  const last = {train_loss: cut(T, 290, 300), val_loss: cut(V, 290, 300)};
  emit("msg:custom", {type: "points", seq: 300, series: last});
} else {
  await widget.initialize({model: proxy()});
  widget.render({model: proxy(), el: document.getElementById("out")});
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/trainmeter-shots"))
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    parser.add_argument("--run", help="shoot this run's replayed log instead of the fixtures")
    args = parser.parse_args(argv)
    if not (STATIC / "widget.js").is_file():
        print("no bundle: run `npm install && npm run build` first", file=sys.stderr)
        return 2
    version = json.loads((ROOT / "package.json").read_text())["version"]
    series = loss_history()
    fixture = {"version": version, "series": series, "snapshots": snapshots(series)}
    shots = SHOTS
    if args.run:
        fixture["snapshots"]["real"], fixture["history"] = replayed(args.run)
        shots = [("run-light-420", "real", "light", 420, 1000),
                 ("run-dark-1200", "real", "dark", 1200, 640)]  # fmt: skip
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
