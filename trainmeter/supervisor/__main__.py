"""The notebook's supervisor process: ``python -m trainmeter.supervisor --socket P --parent PID``.

Started by ``%load_ext trainmeter`` as its own process (not a kernel thread), so a kernel
crash cannot take the run log with it. It serves the socket, writes the run log, samples the
GPUs and the host while a ``%%trainmeter`` cell runs (``trainmeter.supervisor.sampler``; the
backend from ``$TRAINMETER_GPU_BACKEND``, default NVML when it loads, the rate from
``$TRAINMETER_SAMPLE_HZ``, default 1), and exits within ``PARENT_POLL_S`` seconds of its
kernel's death after closing the log properly.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import threading

from trainmeter.core.envnames import GPU_BACKEND, SAMPLE_HZ
from trainmeter.core.records import SEGMENT_STATUSES
from trainmeter.supervisor.exit_counts import apply_exit_files
from trainmeter.supervisor.ingest import Server
from trainmeter.supervisor.live import Live
from trainmeter.supervisor.sampler import DEFAULT_HZ, MAX_HZ, MIN_HZ, Sampler

PARENT_POLL_S = 0.5


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m trainmeter.supervisor")
    p.add_argument("--socket", required=True)
    p.add_argument("--parent", type=int, required=True, help="kernel pid to follow")
    p.add_argument("--dir", default=None, help="the .trainmeter folder")
    args = p.parse_args(argv)
    live = Live(args.dir)
    stop = threading.Event()
    commands = _commands(live, stop)
    server = Server(args.socket, live, commands, controller=args.parent)
    server.serve_in_thread()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    sampler = _sampler(live, args.parent)
    folder = os.path.dirname(args.socket)  # where an agent leaves its final counts at exit
    while not stop.wait(PARENT_POLL_S):
        if not _alive(args.parent):
            sampler.stop()
            apply_exit_files(live, folder)
            live.close_run("error")  # the kernel died: close the log so it replays
            break
    sampler.stop()
    apply_exit_files(live, folder)
    live.close_run("ok")
    live.shutdown()
    server.shutdown()
    server.server_close()
    shutil.rmtree(os.path.dirname(args.socket), ignore_errors=True)
    return 0


def _sampler(live: Live, kernel: int) -> Sampler:
    """Sample while a cell runs (``live.segment_open``). A backend that cannot open (a bad
    ``$TRAINMETER_GPU_BACKEND``, an explicit ``nvml`` without NVML) becomes "no GPU counters"
    with its reason, shown in every run's notes: no run is open yet to take a note now."""
    from trainmeter.sources import HostSource, NoneBackend, check_spec, open_backend

    spec = os.environ.get(GPU_BACKEND) or None
    try:
        backend = open_backend(check_spec(spec))
    except Exception as exc:
        backend = NoneBackend(f"${GPU_BACKEND}={spec}: {exc}")
    try:
        hz = float(os.environ.get(SAMPLE_HZ) or DEFAULT_HZ)
    except ValueError:
        hz = DEFAULT_HZ
    if not MIN_HZ <= hz <= MAX_HZ:
        hz = DEFAULT_HZ

    def pids():
        return [kernel, *live.agent_pids()]

    return Sampler(live, backend, HostSource(), hz=hz, pids=pids,
                   active=lambda: live.segment_open).start()  # fmt: skip


def _commands(live: Live, stop: threading.Event) -> dict:
    """The requests the kernel sends. Every one but ``ping`` and ``snapshot`` changes the run
    and is taken only from the kernel (``ingest.Server``'s ``controller``); its fields are
    read as the types they should be, a wrong one replaced by the default."""

    def seg_start(msg):
        name, opts = msg.get("name"), msg.get("opts")
        return live.segment_start(name if isinstance(name, str) and name else "notebook",
                                  opts if isinstance(opts, dict) else {},
                                  msg.get("new") is True)  # fmt: skip

    def seg_end(msg):
        error = msg.get("error")
        snap = live.segment_end(_status(msg), error if isinstance(error, str) else None)
        return {"snapshot": snap, "history": live.timeline_since(-1)}

    def end_run(msg):
        return {"snapshot": live.close_run(_status(msg))}

    def shutdown(msg):
        stop.set()
        return {}

    return {
        "segment_start": seg_start,
        "segment_end": seg_end,
        "snapshot": lambda msg: {
            "snapshot": live.snapshot(),
            "history": live.timeline_since(-1),
            "info": live.info(),
        },
        "end_run": end_run,
        "shutdown": shutdown,
        "ping": lambda msg: {"pid": os.getpid()},
    }


def _status(msg: dict) -> str:
    """A request's ``status``: one of ``records.SEGMENT_STATUSES``, ``ok`` when absent,
    ``error`` when it is something else."""
    status = msg.get("status", "ok")
    return status if status in SEGMENT_STATUSES else "error"


def _alive(pid: int) -> bool:
    """Is the kernel alive? Our parent while it lives; else a live, non-zombie process."""
    if os.getppid() == pid:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return _not_zombie(pid)


def _not_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


if __name__ == "__main__":
    sys.exit(main())
