"""``%load_ext trainmeter``: the supervisor process, the kernel's agent, the magics.

One :class:`Session` per kernel. Loading twice is harmless; ``%unload_ext`` stops the
supervisor after it closes the run log; ``%reload_ext`` does both.

Monitoring heals (docs/reliability.md): before each ``%%trainmeter`` cell and each
``%trainmeter`` line, :meth:`Session.check` pings the supervisor. One that has exited, or that
does not answer within ``PING_TIMEOUT_S`` (paused, wedged), is stopped for good and replaced by
a new one, the kernel's agent is pointed at the new socket (``Sender.retarget``), and one line
on stderr says so. The new supervisor has no open run: the next cell is segment 1 of a new run.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import sys
import time

from trainmeter._version import __version__
from trainmeter.agent import runtime
from trainmeter.supervisor import client
from trainmeter.supervisor.ingest import private_socket_path

START_TIMEOUT_S = 15.0  # a new supervisor answers its first ping within this, or it failed
# A healthy supervisor answers a ping in milliseconds, from its own thread, even while it
# ingests a flood: one silent for 2 s is paused (SIGSTOP, a suspended laptop) or wedged.
PING_TIMEOUT_S = 2.0
EXIT_GRACE_S = 0.5  # how long a supervisor that failed its ping gets to be seen exited (reaped)
STOP_WAIT_S = 2.0  # after SIGCONT + SIGTERM, before SIGKILL (a clean exit closes its log)
REQUEST_TIMEOUT_S = 10.0  # segment_start, snapshot, end_run, from a supervisor that just answered

_session: Session | None = None
_atexit_registered = False


class Session:
    """The kernel's link to its supervisor process.

    Raises:
        RuntimeError: the supervisor did not start (from the constructor).
    """

    def __init__(self) -> None:
        self.cwd = os.getcwd()  # a restarted supervisor writes its runs where the first did
        self.shown: list = []  # bridges of %trainmeter show, stopped at unload
        # (status, error) of a cell whose end the supervisor did not answer: sent before the
        # next segment_start if the same supervisor answers again
        self.unclosed: tuple[str, str | None] | None = None
        self._start()
        self.agent = None
        self._point_agent()

    # -- the supervisor process -----------------------------------------------------------------
    def _start(self) -> None:
        self.socket = private_socket_path()
        cmd = [sys.executable, "-m", "trainmeter.supervisor", "--socket", self.socket,
               "--parent", str(os.getpid())]  # fmt: skip
        # Its own session: the kernel's interrupt (SIGINT to the process group) must not stop it.
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, start_new_session=True,
                                     cwd=self.cwd)  # fmt: skip
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                client.request(self.socket, "ping", timeout=1.0)
                return
            except (OSError, RuntimeError, ValueError):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self._stop_for_good()
                    raise RuntimeError("the trainmeter supervisor did not start "
                                       f"(exit code {self.proc.poll()})") from None  # fmt: skip
                time.sleep(0.05)

    def _stop_for_good(self) -> None:
        """End the supervisor whatever its state, and remove its socket folder. A paused one is
        continued so that it sees SIGTERM (it closes its log and exits) rather than waking
        later and writing on beside its successor; SIGKILL after ``STOP_WAIT_S``."""
        proc = self.proc
        if proc.poll() is None:
            try:
                proc.send_signal(signal.SIGTERM)
                proc.send_signal(signal.SIGCONT)  # SIGTERM is pending: handled once it runs
                proc.wait(timeout=STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5.0)
            except OSError:
                pass
        shutil.rmtree(os.path.dirname(self.socket), ignore_errors=True)

    def _point_agent(self) -> None:
        """The kernel's agent (created once per process, disarmed between cells), sending to
        this session's socket: after a restart or ``%reload_ext`` it is the agent that was
        already there, retargeted (its sender comes back on if it had stopped)."""
        self.agent = runtime.install(self.socket, armed=False)
        sender = getattr(self.agent, "sender", None)
        if sender is not None and (sender.path != self.socket or not sender.healthy):
            sender.retarget(self.socket)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def answers(self, timeout: float = PING_TIMEOUT_S) -> bool:
        """Whether the supervisor is running and answers a ping within ``timeout`` seconds."""
        if not self.alive():
            return False
        try:
            client.request(self.socket, "ping", timeout=timeout)
            return True
        except Exception:  # refused, timed out, closed mid-reply
            return False

    def check(self, cell: bool = True) -> str | None:
        """Restart a supervisor that has exited or does not answer a ping within
        ``PING_TIMEOUT_S``; returns the line that says so (None when it was fine).

        Args:
            cell: a ``%%trainmeter`` cell asks (the line says this cell starts a new run).

        Raises:
            RuntimeError: the new supervisor did not start (the next call tries again).
        """
        if self.answers(PING_TIMEOUT_S):
            self._point_agent()  # a sender stopped by a pause it outlived comes back on
            return None
        old = self.proc.pid
        try:  # a process killed just before the ping may not be reaped yet: its reason is truer
            code = self.proc.wait(timeout=EXIT_GRACE_S)
        except subprocess.TimeoutExpired:
            code = None
        if code is None:
            why = f"did not answer within {PING_TIMEOUT_S:g} s; stopped it"
        else:
            why = f"had stopped ({_exit_text(code)})"
        t0 = time.monotonic()
        self._stop_for_good()
        for bridge in self.shown:  # they followed the old socket
            bridge.stop()
        self.shown = []
        self.unclosed = None
        self._start()
        self._point_agent()
        then = (
            "this cell starts a new run" if cell else "the next %%trainmeter cell starts a new run"
        )
        return (f"[trainmeter] the supervisor (pid {old}) {why}; started a new one "
                f"(pid {self.proc.pid}) in {time.monotonic() - t0:.1f} s; {then}")  # fmt: skip

    def request(self, cmd: str, timeout: float = REQUEST_TIMEOUT_S, **fields) -> dict:
        """One request to the supervisor.

        Raises:
            OSError: unreachable, or no reply within ``timeout`` seconds.
            RuntimeError: the supervisor refused it.
        """
        return client.request(self.socket, cmd, timeout=timeout, **fields)

    def close(self) -> None:
        """Stop the bridges and the agent, then the supervisor (it closes the run log first)."""
        for bridge in self.shown:
            bridge.stop()
        runtime.uninstall()
        try:
            self.request("shutdown", timeout=PING_TIMEOUT_S)
            self.proc.wait(timeout=10.0)
        except Exception:  # gone, paused, or slow to exit
            pass
        self._stop_for_good()


def load(ipython) -> None:
    global _session, _atexit_registered
    if _session is not None:
        note = _session.check(cell=False)
        if note:
            print(note, file=sys.stderr)
        print(f"trainmeter {__version__} is already loaded (supervisor pid {_session.proc.pid})")
        return
    from trainmeter.jupyter.magics import TrainmeterMagics

    _session = Session()
    ipython.register_magics(TrainmeterMagics(ipython, loaded=loaded, show=show))
    if not _atexit_registered:
        atexit.register(_close_at_exit)
        _atexit_registered = True
    print(f"trainmeter {__version__}: supervisor pid {_session.proc.pid}; "
          "put %%trainmeter at the top of a training cell")  # fmt: skip


def unload(ipython) -> None:
    global _session
    if _session is not None:
        _session.close()
        _session = None


def loaded() -> Session | None:
    """The session if the extension is loaded (its supervisor not checked), else None."""
    return _session


def session() -> Session:
    """The loaded session, its supervisor checked first (:meth:`Session.check`: one that
    stopped or does not answer is replaced, with a line on stderr).

    Raises:
        RuntimeError: the extension is not loaded, or a new supervisor did not start.
    """
    if _session is None:
        raise RuntimeError("trainmeter is not loaded: run %load_ext trainmeter first")
    note = _session.check(cell=False)
    if note:
        print(note, file=sys.stderr)
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

        log = find_run(run) / "run.jsonl"  # read from its last checkpoint on
        eng = replay(log, now=time.time())  # a run still written to is running
        widget.set_history(eng.timeline.full())
        widget.update(eng.snapshot())
    display(widget)
    return widget


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _close_at_exit() -> None:
    try:
        unload(None)
    except Exception:
        pass
