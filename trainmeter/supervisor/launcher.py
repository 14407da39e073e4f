"""``tm``'s run mode: start the training command as a child, supervise it, report.

The ``tm`` process is the supervisor: it serves the socket, writes the run log (the one
writer) and keeps the live engine, while the child runs with the agent injected through
``sitecustomize``. What is served beside the run (the dashboard page, the Prometheus endpoint)
is the command layer's, started and stopped through :class:`Views` (``commands/serve.py``).
Signals reach the child once, as without ``tm`` (:mod:`.signals`), and ``tm`` ends with the
child's exit status.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from trainmeter.core.envnames import NO_TAP, PAD_TOKENS, SOCKET
from trainmeter.core.summary import summary_line
from trainmeter.supervisor import signals
from trainmeter.supervisor.exit_counts import apply_exit_files
from trainmeter.supervisor.ingest import Server, private_socket_path
from trainmeter.supervisor.live import Live
from trainmeter.supervisor.sampler import DEFAULT_HZ, start_sampler

BOOT_DIR = Path(__file__).resolve().parent.parent / "agent" / "boot"
# After the child exits: wait for the agents' last lines while they arrive (some in the last
# DRAIN_QUIET_S), DRAIN_MAX_S at most; then count what is left for DRAIN_CUT_S (docs/reliability.md)
DRAIN_MAX_S = 30.0
DRAIN_QUIET_S = 1.0
DRAIN_CUT_S = 0.5
DRAIN_POLL_S = 0.05  # the longest sleep between the drain's checks (it is woken sooner)


def child_env(socket_path: str, no_tap: bool = False, base: dict | None = None,
              pad_tokens: str | None = None) -> dict[str, str]:  # fmt: skip
    """The child's environment: the agent bootstrap first on PYTHONPATH, the socket path, and
    ``--pad-tokens`` (``count`` or ``skip``, docs/spec.md "Tokens and padding") when given."""
    env = dict(os.environ if base is None else base)
    parts = [str(BOOT_DIR)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(parts)
    env[SOCKET] = socket_path
    if no_tap:
        env[NO_TAP] = "1"
    if pad_tokens:
        env[PAD_TOKENS] = pad_tokens
    return env


class Views:
    """What is served beside a run (the dashboard page, the Prometheus endpoint): the command
    layer's, so the supervisor imports no web code. :func:`run_command` calls :meth:`start`
    before the run opens, :meth:`opened` once it is open, and :meth:`close` after the run log
    is closed; this base serves nothing. None of them may stop the run: a view that cannot
    start says so in one line and is left out."""

    def start(self, live: Live) -> dict[str, Any]:
        """Before the run opens: options to add to the run's ``opts`` (an address served)."""
        return {}

    def opened(self, live: Live) -> str:
        """Once the run is open: what the start line says after the run id
        (``" · dashboard URL"``), or ""."""
        return ""

    def close(self) -> None:
        """After the run log is closed (``run_end`` written): send the final state and stop
        serving, before ``live``'s subscribers are woken for good."""


def run_command(cmd: list[str], name: str, opts: dict[str, Any], *, quiet: bool = False,
                no_tap: bool = False, root: str | None = None, gpu_backend: str | None = None,
                sample_hz: float = DEFAULT_HZ, views: Views | None = None) -> int:  # fmt: skip
    """Run ``cmd`` under trainmeter; returns the exit code ``tm`` should end with.

    ``gpu_backend`` (``sources.open_backend``'s spec; None: NVML when it loads) is sampled
    ``sample_hz`` times a second into the run log. ``views`` (default: none) serve the run
    while it is open (:class:`Views`).

    A child killed by signal N makes ``tm`` kill itself with N after closing the log, so the
    calling shell sees the same death; the returned ``128 + N`` is the fallback.
    """
    views = views if views is not None else Views()
    path = private_socket_path()
    live = Live(root)
    server = Server(path, live)
    server.serve_in_thread()
    opts = {**opts, **views.start(live)}
    info = live.open_run(name, cmd, opts)
    say = (lambda s: None) if quiet else (lambda s: print(s, file=sys.stderr, flush=True))
    url = views.opened(live)
    say(f"[trainmeter] run {info['run_id']}{url} · {' '.join(cmd)} · log {info['log']}")
    try:
        env = child_env(path, no_tap, pad_tokens=opts.get("pad_tokens"))
        proc = subprocess.Popen(cmd, env=env, **signals.child_options())
    except OSError as exc:
        print(f"tm: cannot start {cmd[0]!r}: {exc.strerror or exc}", file=sys.stderr)
        live.close_run("error", 127)
        _stop(server, path, views)
        return 127
    sampler = start_sampler(live, gpu_backend, sample_hz, lambda: [proc.pid, *live.agent_pids()])
    rc = signals.wait(proc)
    _drain_agents(live, say, server.pending)
    apply_exit_files(live, os.path.dirname(path))  # counts an agent could not send at its exit
    live.unclosed_note()  # an agent that never closed (os._exit, SIGKILL): its tail is lost
    if sampler is not None:
        sampler.stop()
    status = "ok" if rc == 0 else "interrupted" if _interrupted(rc) else "error"
    snap = live.close_run(status, rc)
    _stop(server, path, views)
    if snap is not None:
        if not live.agents_seen:
            snap.setdefault("notes", []).append("no agent connected: is trainmeter installed "
                                                "in the child's Python?")  # fmt: skip
            say(
                "[trainmeter] no agent connected: the child never imported torch or trainmeter, "
                "or is not a Python of an environment with trainmeter installed (tm -- python "
                "... runs the first python on PATH: use the one trainmeter is installed in)"
            )
        say(summary_line(snap))
    if rc < 0:
        _die_like(-rc)
        return 128 - rc
    return rc


INTERRUPTS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # a stop asked for, not a fault


def _interrupted(rc: int) -> bool:
    """Whether the child's exit code ``rc`` says it was stopped on request: killed by
    SIGINT, SIGTERM or SIGHUP (a Ctrl-C, a scheduler's preemption, ``kill``, a closed terminal),
    or exited 128 + N after handling one (the shell's convention), as ``tm attach`` ends a run
    stopped by them."""
    return any(rc in (-int(s), 128 + int(s)) for s in INTERRUPTS)


def _drain_agents(live: Live, say=lambda s: None, pending=lambda: False) -> None:
    """After the child exits: wait while an agent is connected (or a connection has not said
    what it is yet, or ``pending()``: one waits in the socket's backlog, not accepted yet) and
    its lines still arrive (some in the last ``DRAIN_QUIET_S``, or its process has ended, so
    only its buffered lines are left), ``DRAIN_MAX_S`` at most; then count what is left as
    "cut at end of run" for ``DRAIN_CUT_S`` more, without applying it, and say so (one line on
    stderr via ``say``).

    No fixed wait: it sleeps on ``live.cond``, which the socket's handlers notify when lines
    are applied and when a connection ends, so it returns as soon as the last agent has closed
    its connection and every line of it is read (``DRAIN_POLL_S`` only bounds each sleep, for
    what notifies nothing: control lines, a process that ends)."""

    def counted() -> bool:
        return bool(live.agents_connected or live.opening)

    def waiting() -> bool:  # pending() takes the accept lock: never called inside live.cond
        return counted() or pending()

    start = time.monotonic()
    seen, moved = live.lines_in, start
    while waiting():
        now = time.monotonic()
        if live.lines_in != seen:
            seen, moved = live.lines_in, now
        if now - start >= DRAIN_MAX_S:
            break
        # a silent agent whose process still lives may never send more (a grandchild); a
        # connection whose process ended has only its buffered lines left: read them all
        if now - moved >= DRAIN_QUIET_S and _any_alive(live):
            break
        _sleep_on(live, seen, counted(), min(DRAIN_POLL_S, start + DRAIN_MAX_S - now))
    if not waiting():
        return
    waited = time.monotonic() - start
    live.cutting = True
    before = live.drop_count("cut at end of run")
    cut_end = time.monotonic() + DRAIN_CUT_S
    while waiting() and time.monotonic() < cut_end:
        left = min(DRAIN_POLL_S, cut_end - time.monotonic())
        _sleep_on(live, live.lines_in, counted(), left)
    cut = live.drop_count("cut at end of run") - before
    if cut:
        say(
            f"[trainmeter] stopped waiting for the agents after {waited:.1f} s (at most "
            f"{DRAIN_MAX_S:.0f} s): {cut:,} records cut at the end of the run, counted"
        )


def _sleep_on(live: Live, seen: int, counted: bool, timeout: float) -> None:
    """Sleep until ``live`` changes (a line applied, a connection accepted or ended) or
    ``timeout`` s pass. Not at all when lines came in since ``seen``, or when the connections
    ``counted`` (some were) have all ended meanwhile: the caller looks again at once. With none
    counted, one waits in the backlog, and its accept wakes this sleep."""
    with live.cond:
        ended = counted and not (live.agents_connected or live.opening)
        if live.lines_in == seen and not ended:
            live.cond.wait(max(0.0, timeout))


def _any_alive(live: Live) -> bool:
    """Is the process of any connected agent still running (or a connection unknown yet)?"""
    with live.cond:
        peers = list(live.agent_peers)
        if live.opening or None in peers:
            return True
    for pid in peers:
        try:
            os.kill(pid, 0)
            return True
        except ProcessLookupError:
            continue
        except PermissionError:
            return True
    return False


def _stop(server: Server, path: str, views: Views) -> None:
    views.close()
    server.live.shutdown()
    server.shutdown()
    server.server_close()
    shutil.rmtree(os.path.dirname(path), ignore_errors=True)


def _die_like(signum: int) -> None:
    """End this process by the child's signal (after the log is closed)."""
    if signum in (signal.SIGKILL, signal.SIGSTOP):
        return
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
