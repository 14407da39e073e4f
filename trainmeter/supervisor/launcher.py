"""``tm``'s run mode: start the training command as a child, supervise it, report.

The ``tm`` process is the supervisor: it serves the socket, writes the run log (the one
writer), keeps the live engine and serves the dashboard page on loopback
(:mod:`trainmeter.web.server`), while the child runs with the agent injected through
``sitecustomize``. Signals reach the child once, as without ``tm`` (:mod:`.signals`), and
``tm`` ends with the child's exit status.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from trainmeter.agent.runtime import ENV_NO_TAP, ENV_PAD_TOKENS, ENV_SOCKET
from trainmeter.core.summary import summary_line
from trainmeter.supervisor import signals
from trainmeter.supervisor.exit_counts import apply_exit_files
from trainmeter.supervisor.ingest import Server, private_socket_path
from trainmeter.supervisor.live import Live
from trainmeter.supervisor.sampler import DEFAULT_HZ, start_sampler
from trainmeter.web import DEFAULT_PORT

BOOT_DIR = Path(__file__).resolve().parent.parent / "agent" / "boot"
# After the child exits: wait for the agents' last lines while they arrive (some in the last
# DRAIN_QUIET_S), DRAIN_MAX_S at most; then count what is left for DRAIN_CUT_S (docs/reliability.md)
DRAIN_MAX_S = 30.0
DRAIN_QUIET_S = 1.0
DRAIN_CUT_S = 0.5


def child_env(socket_path: str, no_tap: bool = False, base: dict | None = None,
              pad_tokens: str | None = None) -> dict[str, str]:  # fmt: skip
    """The child's environment: the agent bootstrap first on PYTHONPATH, the socket path, and
    ``--pad-tokens`` (``count`` or ``skip``, docs/spec.md "Tokens and padding") when given."""
    env = dict(os.environ if base is None else base)
    parts = [str(BOOT_DIR)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(parts)
    env[ENV_SOCKET] = socket_path
    if no_tap:
        env[ENV_NO_TAP] = "1"
    if pad_tokens:
        env[ENV_PAD_TOKENS] = pad_tokens
    return env


def run_command(cmd: list[str], name: str, opts: dict[str, Any], *, quiet: bool = False,
                no_tap: bool = False, root: str | None = None, web: bool = True,
                port: int = DEFAULT_PORT, gpu_backend: str | None = None,
                sample_hz: float = DEFAULT_HZ,
                prometheus: tuple[str, int] | None = None) -> int:  # fmt: skip
    """Run ``cmd`` under trainmeter; returns the exit code ``tm`` should end with.

    With ``web``, the dashboard page is served on 127.0.0.1 from ``port`` (or the next free
    port above it) and its URL is in the start line; a page that cannot start is one line on
    stderr, never a reason not to run the command. ``gpu_backend`` (``sources.open_backend``'s
    spec; None: NVML when it loads) is sampled ``sample_hz`` times a second into the run log.

    A child killed by signal N makes ``tm`` kill itself with N after closing the log, so the
    calling shell sees the same death; the returned ``128 + N`` is the fallback.

    ``prometheus`` (host, port): serve live metrics there for Prometheus
    (:mod:`trainmeter.web.prometheus`); the bound address is in the start line and in the run's
    options (``prometheus``); one that cannot start is one line on stderr, like the page.
    """
    path = private_socket_path()
    live = Live(root)
    server = Server(path, live)
    server.serve_in_thread()
    metrics = _start_metrics(live, prometheus) if prometheus else None
    if metrics is not None:
        opts = {**opts, "prometheus": metrics.address}
    info = live.open_run(name, cmd, opts)
    say = (lambda s: None) if quiet else (lambda s: print(s, file=sys.stderr, flush=True))
    page = open_page(live, web, port)
    url = f" · dashboard {page.url}" if page is not None else ""
    url += f" · prometheus {metrics.url}" if metrics is not None else ""
    say(f"[trainmeter] run {info['run_id']}{url} · {' '.join(cmd)} · log {info['log']}")
    try:
        env = child_env(path, no_tap, pad_tokens=opts.get("pad_tokens"))
        proc = subprocess.Popen(cmd, env=env, **signals.child_options())
    except OSError as exc:
        print(f"tm: cannot start {cmd[0]!r}: {exc.strerror or exc}", file=sys.stderr)
        live.close_run("error", 127)
        _stop(server, path, page, metrics)
        return 127
    sampler = start_sampler(live, gpu_backend, sample_hz, lambda: [proc.pid, *live.agent_pids()])
    rc = signals.wait(proc)
    _drain_agents(live, say)
    apply_exit_files(live, os.path.dirname(path))  # counts an agent could not send at its exit
    if sampler is not None:
        sampler.stop()
    status = "ok" if rc == 0 else "interrupted" if rc in (-signal.SIGINT, 130) else "error"
    snap = live.close_run(status, rc)
    _stop(server, path, page, metrics)
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


def _drain_agents(live: Live, say=lambda s: None) -> None:
    """After the child exits: wait while an agent is connected (or a connection has not said
    what it is yet) and its lines still arrive (some in the last ``DRAIN_QUIET_S``, or its
    process has ended, so only its buffered lines are left), ``DRAIN_MAX_S`` at most; then
    count what is left as "cut at end of run" for ``DRAIN_CUT_S`` more, without applying
    it, and say so (one line on stderr via ``say``)."""
    start = time.monotonic()
    seen, moved = live.lines_in, start
    while live.agents_connected or live.opening:
        now = time.monotonic()
        if live.lines_in != seen:
            seen, moved = live.lines_in, now
        if now - start >= DRAIN_MAX_S:
            break
        # a silent agent whose process still lives may never send more (a grandchild); a
        # connection whose process ended has only its buffered lines left: read them all
        if now - moved >= DRAIN_QUIET_S and _any_alive(live):
            break
        threading.Event().wait(0.02)
    if not (live.agents_connected or live.opening):
        return
    waited = time.monotonic() - start
    live.cutting = True
    before = live.drop_count("cut at end of run")
    cut_end = time.monotonic() + DRAIN_CUT_S
    while (live.agents_connected or live.opening) and time.monotonic() < cut_end:
        threading.Event().wait(0.02)
    cut = live.drop_count("cut at end of run") - before
    if cut:
        say(
            f"[trainmeter] stopped waiting for the agents after {waited:.1f} s (at most "
            f"{DRAIN_MAX_S:.0f} s): {cut:,} records cut at the end of the run, counted"
        )


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


def open_page(live: Live, web: bool, port: int):
    """The dashboard page for ``live`` (``tm`` and ``tm attach``): None without ``web`` or when
    it cannot start (one line on stderr). End it with :func:`close_page` once the run is closed."""
    return _start_page(live, port) if web else None


def close_page(live: Live, page=None) -> None:
    """Send open pages the final state (``run_end`` is written) and the stream's end, then wake
    ``live``'s subscribers for good."""
    if page is not None:
        page.close()
    live.shutdown()


def _start_page(live: Live, port: int):
    """The dashboard page, or None (after one line on stderr) when it cannot start."""
    try:
        from trainmeter.web.server import start_page

        return start_page(live, port)
    except Exception as exc:  # the page is a view: never a reason not to run the command
        print(f"[trainmeter] no dashboard page ({exc!r}); the run goes on", file=sys.stderr)
        return None


def _start_metrics(live: Live, address: tuple[str, int]):
    """The Prometheus endpoint, or None (after one line on stderr) when it cannot start."""
    from trainmeter.supervisor.store import job_facts
    from trainmeter.web.prometheus import start_exporter

    try:
        job = job_facts(os.environ) or {}
        return start_exporter(live.snapshot, *address, job_id=job.get("id"))
    except OSError as exc:  # a port taken: the metrics are a view, never a reason not to run
        print(f"[trainmeter] no Prometheus endpoint on {address[0]}:{address[1]} "
              f"({exc.strerror or exc}); the run goes on", file=sys.stderr)  # fmt: skip
        return None


def _stop(server: Server, path: str, page=None, metrics=None) -> None:
    if metrics is not None:
        metrics.close()
    close_page(server.live, page)
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
