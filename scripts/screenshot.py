"""Pictures of the dashboard from the product itself, for a person to look at.

Runs a real tiny run under the real supervisor: ``tm --gpu-backend fake:h100x2 -- torchrun
--nproc_per_node=2 examples/train_gpt.py`` (two ranks on this machine's CPU; the GPU counters come
from the scripted fake NVML backend, a demonstration the dashboard says it is) in a temporary
folder, and captures in headless Chromium (Playwright, scripts/screenshot.mjs):

- the ``tm`` page it serves, live: as soon as it answers (the run starting), then mid-run, whole
  at 1400 px (light and dark, the OS preference) and 500 px wide;
- the Jupyter widget (``trainmeter/static/widget.js``, loaded as anywidget loads it, its model's
  ``snapshot`` and ``history`` traits set to what the kernel's bridge sets at the cell's end: the
  run's log replayed) in JupyterLab's light and dark themes (their real CSS variables, read from
  the installed jupyterlab package), at a notebook column (500 px) and a wide window (1400 px),
  and once with the view's controls used (convention hf, log scale, a price of $2.50).

With ``--panels`` (the pictures of docs/img/), each panel as it sits in the whole dashboard, at
two widths: narrow, the widget in JupyterLab's light theme at a notebook cell's width
(``NARROW`` px, the finished run's traits: ``panel-<name>-narrow.png``), and wide, the live page
mid-run at ``WIDE`` px (``panel-<name>-wide.png``); and the whole dashboard at each
(``dashboard-narrow.png``, ``dashboard-wide.png``). A ``panel-*.png`` or ``dashboard-*.png`` in
the folder that this run did not make (an older layout's name) is removed.

    npm run build && python scripts/screenshot.py [--out /tmp/trainmeter-shots]
    python scripts/screenshot.py --panels --out docs/img   # the pictures of docs/img/
    python scripts/screenshot.py --backend none      # no GPU counters: the CPU run's reasons
    python scripts/screenshot.py --run RUN           # the widget of an existing run (no new run)
    python scripts/screenshot.py --readme            # the README's picture (below), nothing else

Prints each PNG's path and any console error the pages logged, and with ``--panels`` any text
of a panel that runs past the panel's right edge (cut); exits 1 if there was one. Needs the
bundle (``npm run build``), the npm dev packages (``npm ci``) and a Chromium binary (Debian:
``apt-get install chromium``). The README's picture, docs/img/widget.png, is taken in JupyterLab
itself, by ``scripts/readme_picture.sh`` (the quickstart notebook run as a user runs it, a few
minutes): ``--readme`` runs that script and exits with its status.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.server
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STATIC = ROOT / "trainmeter" / "static"
VENV = ROOT / ".venv" / "bin"
URL_RE = re.compile(r"http://127\.0\.0\.1:\d+/t/[^/\s]+/")
PANELS = ("cockpit", "efficiency", "hardware", "time", "plan", "passport")
NARROW = 800  # px: a JupyterLab notebook cell's output in a laptop's window, the widget
WIDE = 1400  # px: the tm page in a desktop browser window
RANK_TOKENS = 16 * 128  # a rank's tokens per step: train_gpt.py's 16 sequences of 128 bytes

HARNESS = """<!doctype html>
<html><head><meta charset="utf-8"><title>trainmeter widget</title><link rel="icon" href="data:,">
<style>%(theme_css)s</style>
<link rel="stylesheet" href="widget.css">
<style>
  body { margin: 0; padding: 12px 14px; background: var(--jp-layout-color0, Canvas); }
</style>
</head>
<body %(body_attrs)s>
<div id="out"></div>
<script type="module">
import widget from "./widget.js";
const state = %(state)s;
// A stand-in for the Jupyter widget model with the traits the bridge sets (jupyter/widget.py);
// like anywidget, initialize() and render() each get their own proxy object over it.
const attrs = {
  version: state.version, layout: {}, snapshot: state.snapshot, history: state.history,
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
await widget.initialize({model: proxy()});
widget.render({model: proxy(), el: document.getElementById("out")});
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


def write_site(site: Path, state: dict) -> None:
    """The widget harness in JupyterLab's light and dark themes: site/light.html, site/dark.html."""
    for name in ("widget.js", "widget.css"):
        shutil.copy(STATIC / name, site / name)
    for theme in ("light", "dark"):
        light = "true" if theme == "light" else "false"
        body = f'data-jp-theme-light="{light}" data-jp-theme-name="JupyterLab {theme.title()}"'
        html = HARNESS % {
            "theme_css": jupyterlab_theme_css(theme),
            "body_attrs": body,
            "state": json.dumps(state).replace("</", "<\\/"),  # no </script> from a series name
        }
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


def replayed(log: Path) -> dict:
    """The widget's traits at a finished cell: the run's snapshot and full timeline, rebuilt
    from its log as ``tm replay`` rebuilds them."""
    sys.path.insert(0, str(ROOT))
    from trainmeter.core.engine import replay

    with open(log, "rb") as f:
        eng = replay(f)
    version = json.loads((ROOT / "package.json").read_text())["version"]
    return {"version": version, "snapshot": eng.snapshot(), "history": eng.timeline.full()}


def shoot(chromium: str, pages: list[dict]) -> list[str]:
    """Take the pictures (scripts/screenshot.mjs); returns the errors the pages logged."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"chromium": chromium, "pages": pages}, f)
    try:
        proc = subprocess.run(
            ["node", str(ROOT / "scripts" / "screenshot.mjs"), f.name],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=1800,
            check=False,
        )
    finally:
        os.unlink(f.name)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"screenshot.mjs failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    result = json.loads(lines[-1])
    for png in result["shots"]:
        print(png)
    return result["errors"]


class Run:
    """``tm`` training ``examples/train_gpt.py`` in ``folder``: its page URL, its output."""

    def __init__(self, folder: Path, steps: int, ranks: int, backend: str) -> None:
        script = [str(ROOT / "examples" / "train_gpt.py"), "--steps", str(steps)]
        if ranks > 1:
            script = ["--", str(VENV / "torchrun"), f"--nproc_per_node={ranks}", *script]
        budget = int(1.6 * steps * ranks * RANK_TOKENS)  # past the run's end: it has an ETA
        argv = [str(VENV / "tm"), "--port", "0", "--gpu-backend", backend, "--name",
                "train_gpt", "--budget-tokens", str(budget), *script]  # fmt: skip
        self.folder = folder
        self.output: list[str] = []
        self.url: str | None = None
        self._found = threading.Event()
        self.proc = subprocess.Popen(
            argv,
            cwd=folder,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # stop() reaches the ranks too
        )
        threading.Thread(target=self._read, name="screenshot-tm", daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.output.append(line)
            m = URL_RE.search(line)
            if m and self.url is None:
                self.url = m.group(0)
                self._found.set()
        self._found.set()

    def wait_url(self) -> str:
        if not self._found.wait(120) or self.url is None:
            self.stop()
            raise SystemExit("tm printed no dashboard URL:\n" + "".join(self.output[-40:]))
        return self.url

    def log(self) -> Path:
        """The run's log, once tm has exited."""
        if self.proc.wait(timeout=600) != 0:
            raise SystemExit("the run failed:\n" + "".join(self.output[-40:]))
        return next((self.folder / ".trainmeter" / "runs").glob("*/run.jsonl"))

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=30)


def panel_shots(url: str, out: Path, width: int, name: str) -> list[dict]:
    """The dashboard at ``url``, ``width`` px wide: whole (``dashboard-<name>.png``), then each
    panel where it sits (``panel-<panel>-<name>.png``)."""
    shots = [{"png": str(out / f"dashboard-{name}.png")}]
    shots += [{"png": str(out / f"panel-{p}-{name}.png"), "panel": p, "inPlace": True}
              for p in PANELS]  # fmt: skip
    return [{"url": url, "width": width, "height": 900, "colorScheme": "light", "shots": shots}]


def page_shots(url: str, out: Path, steps: int, panels: bool) -> list[dict]:
    """The live page: as it first answers, then mid-run whole; or (``panels``) mid-run at
    ``WIDE`` px, whole and panel by panel."""
    mid = max(2, steps * 3 // 5)
    if panels:
        return [{**page, "waitStep": mid} for page in panel_shots(url, out, WIDE, "wide")]
    return [
        {"url": url, "width": 500, "height": 900, "colorScheme": "light", "waitStep": 0,
         "shots": [{"png": str(out / "page-start-light-500.png")}]},
        {"url": url, "width": 1400, "height": 900, "colorScheme": "light", "waitStep": mid,
         "shots": [{"png": str(out / "page-light-1400.png")}]},
        {"url": url, "width": 1400, "height": 900, "colorScheme": "dark", "waitStep": mid,
         "shots": [{"png": str(out / "page-dark-1400.png")}]},
        {"url": url, "width": 500, "height": 900, "colorScheme": "light", "waitStep": mid,
         "shots": [{"png": str(out / "page-light-500.png")}]},
    ]  # fmt: skip


def widget_shots(base: str, out: Path, panels: bool = False) -> list[dict]:
    """The widget with the finished run's traits, in JupyterLab's themes; or (``panels``) in the
    light theme at ``NARROW`` px, whole and panel by panel."""
    if panels:
        return panel_shots(f"{base}/light.html", out, NARROW, "narrow")
    shots = [("widget-light-500", "light", 500, False), ("widget-dark-500", "dark", 500, False),
             ("widget-light-1400", "light", 1400, False), ("widget-dark-1400", "dark", 1400, False),
             ("widget-controls-light-1400", "light", 1400, True)]  # fmt: skip
    return [{"url": f"{base}/{theme}.html", "width": width, "height": 900, "act": act,
             "shots": [{"png": str(out / f"{name}.png")}]}
            for name, theme, width, act in shots]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/trainmeter-shots"))
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    parser.add_argument("--steps", type=int, default=150, help="optimizer steps of the run")
    parser.add_argument("--ranks", type=int, default=2, help="ranks (torchrun) of the run")
    parser.add_argument("--backend", default="fake:h100x2", help="tm --gpu-backend")
    parser.add_argument("--panels", action="store_true",
                        help=f"only each panel and the whole dashboard, {NARROW} px (the widget) "
                        f"and {WIDE} px (the page) wide (--panels --out docs/img)")  # fmt: skip
    parser.add_argument("--run", help="no new run: the widget of this run's log (id or folder)")
    parser.add_argument("--readme", action="store_true",
                        help="only the README's picture, docs/img/widget.png: runs "
                        "scripts/readme_picture.sh (JupyterLab; a few minutes)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.readme:
        return readme_picture()
    if not (STATIC / "widget.js").is_file():
        print("no bundle: run `npm install && npm run build` first", file=sys.stderr)
        return 2
    args.out = args.out.resolve()  # screenshot.mjs runs in the repository root
    args.out.mkdir(parents=True, exist_ok=True)
    errors: list[str] = []
    with tempfile.TemporaryDirectory(prefix="tm-shots-") as tmp:
        if args.run:
            sys.path.insert(0, str(ROOT))
            from trainmeter.supervisor.store import find_run

            log = find_run(args.run) / "run.jsonl"
        else:
            run = Run(Path(tmp), args.steps, args.ranks, args.backend)
            try:
                url = run.wait_url()
                print(f"run: {' '.join(run.proc.args[1:])}\npage: {url}")
                errors += shoot(args.chromium, page_shots(url, args.out, args.steps, args.panels))
                log = run.log()
            finally:
                run.stop()
        site = Path(tmp) / "site"
        site.mkdir()
        write_site(site, replayed(log))
        with serve(site) as base:
            errors += shoot(args.chromium, widget_shots(base, args.out, args.panels))
    if args.panels:
        _remove_stale(args.out)
    return _report(errors)


def _remove_stale(out: Path) -> None:
    """Remove the panel pictures in ``out`` that ``--panels`` no longer makes (an older name)."""
    made = {f"dashboard-{w}.png" for w in ("narrow", "wide")}
    made |= {f"panel-{p}-{w}.png" for p in PANELS for w in ("narrow", "wide")}
    for png in sorted([*out.glob("panel-*.png"), *out.glob("dashboard-*.png")]):
        if png.name not in made:
            png.unlink()
            print(f"removed {png} (not made any more)")


def readme_picture() -> int:
    """docs/img/widget.png, the README's picture: ``scripts/readme_picture.sh`` (it builds the
    bundle and runs the quickstart notebook in JupyterLab under Playwright); its exit status."""
    script = ROOT / "scripts" / "readme_picture.sh"
    return subprocess.run(["bash", str(script)], cwd=ROOT, check=False).returncode


def _report(errors: list[str]) -> int:
    for line in errors:
        print(f"    {line}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
