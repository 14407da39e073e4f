"""``tm view [RUN]``: look at a finished run in JupyterLab, or on the ``tm`` page.

- By default: write ``replay.ipynb`` into the run folder from the template
  ``notebooks/replay.ipynb`` (its ``parameters`` cell gets the run folder; ``nbformat`` reads
  and writes it), start JupyterLab on 127.0.0.1 in the run folder as a detached process (its
  own session, so it outlives ``tm view``; its output goes to ``jupyterlab.log`` there) and open
  the notebook in a browser. An existing ``replay.ipynb`` is kept as it is (it may hold the
  person's own cells).
- ``--no-browser``: the same, but print the notebook's URL instead of opening a browser (on a
  remote node: forward the port with ``ssh -L``).
- ``--web``: serve the ``tm`` dashboard page for the replayed run until Ctrl-C
  (:mod:`trainmeter.web.server`, fed :class:`trainmeter.jupyter.replay.Replayed`).

JupyterLab runs with the run folder as its root: Jupyter refuses to open files under a hidden
folder such as ``.trainmeter`` unless it is the root (``ContentsManager.allow_hidden``).
A browser is opened only where one can show a page (a display, macOS, Windows): on a headless
node Python's ``webbrowser`` would start a text browser in the terminal.

Exit status: 0; 1 when the run is not found or JupyterLab does not start; 2 for a usage error
or when JupyterLab is not installed (the message says ``pip install "trainmeter[lab]"``).
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from trainmeter.commands.args import Parser, port_arg, run_arguments
from trainmeter.web import DEFAULT_PORT

NOTEBOOK = "replay.ipynb"
LAB_LOG = "jupyterlab.log"
LAB_START_S = 90.0  # JupyterLab takes a few seconds to start, more on a loaded node
_PACKAGE = Path(__file__).resolve().parents[1]
# the template: inside the package in a wheel, notebooks/ in a source checkout
TEMPLATES = (_PACKAGE / "notebooks" / NOTEBOOK, _PACKAGE.parent / "notebooks" / NOTEBOOK)
NO_LAB = ('JupyterLab is not installed: pip install "trainmeter[lab]" '
          "(or serve the dashboard page instead: tm view RUN --web)")  # fmt: skip


def _parser() -> Parser:
    # Parser refuses abbreviations: a mistyped --no-browse must not start JupyterLab
    p = Parser(prog="tm view", description="Open a finished run's replay notebook in "
                "JupyterLab, or serve its dashboard page (--web).")  # fmt: skip
    run_arguments(p)
    p.add_argument("--no-browser", action="store_true", help="print the URL, open no browser")
    p.add_argument("--web", action="store_true", help="serve the tm page for the run instead "
                   "of a notebook, until Ctrl-C")  # fmt: skip
    p.add_argument("--port", type=port_arg, default=None,
                   help=f"port on 127.0.0.1 (--web: default {DEFAULT_PORT} or the next free one; "
                        "JupyterLab: default any free port)")  # fmt: skip
    return p


def main(argv: list[str]) -> int:
    """``tm view``; returns the exit status."""
    args = _parser().parse_args(argv)
    from trainmeter.supervisor.store import find_run

    try:
        folder = find_run(args.run, args.dir).resolve()
    except FileNotFoundError as exc:
        print(f"tm: {exc}", file=sys.stderr)
        return 1
    if args.web:
        return serve_page(folder, args.port, browser=not args.no_browser)
    if importlib.util.find_spec("jupyterlab") is None:
        print(f"tm: {NO_LAB}", file=sys.stderr)
        return 2
    try:
        path, written = write_notebook(folder)
    except OSError as exc:
        print(f"tm: cannot write {folder / NOTEBOOK}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    print(f"[trainmeter] {'wrote' if written else 'kept the existing'} {path}")
    return open_lab(folder, args.port, browser=not args.no_browser)


def template() -> Path:
    """The replay notebook's template.

    Raises:
        FileNotFoundError: neither the packaged nor the checkout's template exists.
    """
    for path in TEMPLATES:
        if path.is_file():
            return path
    raise FileNotFoundError(f"the replay notebook template is missing ({TEMPLATES[-1]})")


def write_notebook(folder: Path) -> tuple[Path, bool]:
    """Write ``folder/replay.ipynb`` from the template with ``RUN`` set to ``folder``; an
    existing one is kept. Returns (its path, whether it was written now).

    Raises:
        OSError: the folder is not writable or the template is missing.
    """
    import nbformat

    path = folder / NOTEBOOK
    if path.exists():
        return path, False
    nb = nbformat.read(template(), as_version=4)
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", ()))
    cell.source = f"RUN = {str(folder)!r}  # the run folder (written by tm view)"
    nbformat.validate(nb)
    tmp = path.with_suffix(".ipynb.tmp")
    nbformat.write(nb, tmp)
    os.replace(tmp, path)  # never a half-written notebook under the final name
    return path, True


def open_lab(folder: Path, port: int | None, browser: bool) -> int:
    """Start JupyterLab in ``folder`` (detached) and open or print the notebook's URL."""
    port = port or _free_port()
    token = secrets.token_hex(24)
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
           f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
           f"--ServerApp.root_dir={folder}"]  # fmt: skip
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")  # a rented node's container often runs as root; tm did too
    env = {**os.environ, "JUPYTER_TOKEN": token}  # not on the command line: ps shows that
    with open(folder / LAB_LOG, "ab") as log:
        proc = subprocess.Popen(cmd, cwd=folder, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=log, start_new_session=True)  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    if not _wait_lab(proc, base, token):
        print(f"tm: JupyterLab did not start (exit code {proc.returncode}); its output is in "
              f"{folder / LAB_LOG}", file=sys.stderr)  # fmt: skip
        return 1
    url = f"{base}/lab/tree/{NOTEBOOK}?token={token}"
    print(f"[trainmeter] JupyterLab (pid {proc.pid}) serves it at {url}")
    _browse(url, browser)
    print(f"[trainmeter] stop JupyterLab with: kill {proc.pid}")
    return 0


def _wait_lab(proc: subprocess.Popen, base: str, token: str) -> bool:
    """Wait until JupyterLab answers its status API (True) or exits (False); after
    ``LAB_START_S`` say so and go on (True): it may still come up."""
    deadline = time.monotonic() + LAB_START_S
    req = urllib.request.Request(f"{base}/api/status", headers={"Authorization": f"token {token}"})
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(req, timeout=2.0) as resp:
                if resp.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.25)
    print(f"[trainmeter] JupyterLab has not answered in {LAB_START_S:.0f} s; it may still be "
          "starting", file=sys.stderr)  # fmt: skip
    return True


def serve_page(folder: Path, port: int | None, browser: bool) -> int:
    """Serve the ``tm`` page for the replayed run in ``folder`` until Ctrl-C (or SIGTERM)."""
    from trainmeter.jupyter.replay import load
    from trainmeter.web.server import WebServer

    try:
        done = load(folder)  # bad lines skipped and counted (core/logread.py)
    except OSError as exc:
        print(f"tm: cannot read {folder / 'run.jsonl'}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    try:
        web = WebServer(done, DEFAULT_PORT if port is None else port).start()
    except OSError as exc:
        print(f"tm: no dashboard page: {exc.strerror or exc}", file=sys.stderr)
        return 1
    print(f"[trainmeter] run {folder.name} · dashboard {web.url}", flush=True)
    run = done.snapshot["run"]
    if run.get("state") in ("idle", "running"):
        print("[trainmeter] this run has not ended: the page shows its log so far, not live")
    elif run.get("state") == "ended":  # no run_end: the supervisor stopped without a close
        print(f"[trainmeter] this run {run.get('state_text')}: the page shows its log up to then")
    _browse(web.url, browser)
    print("[trainmeter] serving until Ctrl-C", flush=True)
    try:
        _wait_for_signal()
    except KeyboardInterrupt:
        pass
    finally:
        web.close()
    return 0


def _wait_for_signal() -> None:
    """Block until SIGINT (KeyboardInterrupt) or SIGTERM (turned into one)."""
    import signal

    def stop(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    forever = threading.Event()
    while not forever.wait(3600):
        pass


def _browse(url: str, browser: bool) -> None:
    """Open ``url`` in a browser when asked and one can show it; else say how to get there."""
    if browser and _can_show_pages():
        import webbrowser

        try:
            if webbrowser.open(url):
                return
        except Exception:  # a broken browser setup: the URL is printed either way
            pass
    if browser:
        print("[trainmeter] no browser here (no display): open the URL above where you browse "
              "(on a remote node, forward the port first: ssh -L PORT:127.0.0.1:PORT)")  # fmt: skip


def _can_show_pages() -> bool:
    gui = os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    return bool(gui) or sys.platform in ("darwin", "win32")


def _free_port() -> int:
    """A port the system says is free now (JupyterLab binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
