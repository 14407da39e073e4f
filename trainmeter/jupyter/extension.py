"""``%load_ext trainmeter``: the supervisor process, the kernel's agent, the magics.

One :class:`Session` per kernel. Loading twice is harmless; ``%unload_ext`` stops the
supervisor after it closes the run log; ``%reload_ext`` does both.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import time

from trainmeter._version import __version__
from trainmeter.agent import runtime
from trainmeter.supervisor import client
from trainmeter.supervisor.ingest import private_socket_path

START_TIMEOUT_S = 15.0

_session: Session | None = None


class Session:
    """The kernel's link to its supervisor process."""

    def __init__(self) -> None:
        self.socket = private_socket_path()
        cmd = [sys.executable, "-m", "trainmeter.supervisor", "--socket", self.socket,
               "--parent", str(os.getpid())]  # fmt: skip
        # Its own session: the kernel's interrupt (SIGINT to the process group) must not stop it.
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, start_new_session=True)
        self._wait_ready()
        self.agent = runtime.install(self.socket, armed=False)
        self.shown: list = []  # bridges of %trainmeter show, stopped at unload

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                client.request(self.socket, "ping", timeout=1.0)
                return
            except (OSError, RuntimeError):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.proc.kill()
                    raise RuntimeError("the trainmeter supervisor did not start "
                                       f"(exit code {self.proc.poll()})") from None  # fmt: skip
                time.sleep(0.05)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def request(self, cmd: str, **fields) -> dict:
        return client.request(self.socket, cmd, **fields)

    def close(self) -> None:
        for bridge in self.shown:
            bridge.stop()
        runtime.uninstall()
        try:
            self.request("shutdown", timeout=5.0)
            self.proc.wait(timeout=10.0)
        except (OSError, RuntimeError, subprocess.TimeoutExpired):
            self.proc.terminate()


def load(ipython) -> None:
    global _session
    if _session is not None and _session.alive():
        print(f"trainmeter {__version__} is already loaded (supervisor pid {_session.proc.pid})")
        return
    from trainmeter.jupyter.magics import TrainmeterMagics

    _session = Session()
    ipython.register_magics(TrainmeterMagics)
    atexit.register(_close_at_exit)
    print(f"trainmeter {__version__}: supervisor pid {_session.proc.pid}; "
          "put %%trainmeter at the top of a training cell")  # fmt: skip


def unload(ipython) -> None:
    global _session
    if _session is not None:
        _session.close()
        _session = None


def session() -> Session:
    """The loaded session.

    Raises:
        RuntimeError: the extension is not loaded.
    """
    if _session is None or not _session.alive():
        raise RuntimeError("trainmeter is not loaded: run %load_ext trainmeter first")
    return _session


def show(run: str | None = None):
    """Display the live run's widget (``run=None``), or a finished run from its log."""
    from IPython.display import display

    from trainmeter.jupyter.widget import TrainmeterWidget

    widget = TrainmeterWidget()
    if run is None:
        from trainmeter.jupyter.bridge import Bridge

        s = session()
        s.shown.append(Bridge(s.socket, widget))
    else:
        from trainmeter.core.engine import replay
        from trainmeter.supervisor.store import find_run

        log = find_run(run) / "run.jsonl"
        with open(log, "rb") as f:
            eng = replay(f)
        widget.set_history(eng.timeline.full())
        widget.update(eng.snapshot())
    display(widget)
    return widget


def _close_at_exit() -> None:
    try:
        unload(None)
    except Exception:
        pass
