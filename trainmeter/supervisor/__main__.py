"""The notebook's supervisor process: ``python -m trainmeter.supervisor --socket P --parent PID``.

Started by ``%load_ext trainmeter`` as its own process (not a kernel thread), so a kernel
crash cannot take the run log with it. It serves the socket, writes the run log, and exits
within ``PARENT_POLL_S`` seconds of its kernel's death after closing the log properly.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import threading

from trainmeter.supervisor.ingest import Server
from trainmeter.supervisor.live import Live

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
    server = Server(args.socket, live, commands)
    server.serve_in_thread()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(PARENT_POLL_S):
        if not _alive(args.parent):
            live.close_run("error")  # the kernel died: close the log so it replays
            break
    live.close_run("ok")
    live.shutdown()
    server.shutdown()
    server.server_close()
    shutil.rmtree(os.path.dirname(args.socket), ignore_errors=True)
    return 0


def _commands(live: Live, stop: threading.Event) -> dict:
    def seg_start(msg):
        return live.segment_start(msg.get("name") or "notebook", msg.get("opts") or {},
                                  bool(msg.get("new")))  # fmt: skip

    def seg_end(msg):
        snap = live.segment_end(msg.get("status", "ok"), msg.get("error"))
        return {"snapshot": snap, "history": live.timeline_since(-1)}

    def end_run(msg):
        return {"snapshot": live.close_run(msg.get("status", "ok"))}

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
