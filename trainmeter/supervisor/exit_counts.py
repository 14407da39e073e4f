"""The agents' final counts from the files they leave at exit (docs/reliability.md "The
training process").

An agent's ``close()`` has a deadline (1 s): when the supervisor is paused then (SIGSTOP), the
final ``dropped`` record cannot reach the socket. So the agent also writes it, whole (a
temporary name, then ``os.replace``), as ``core.records.EXIT_FILE`` in the folder of the
supervisor's socket, which only this user can enter (mode 0700). When the run ends, after
the end-of-run drain, :func:`apply_exit_files` reads every such file: each is validated like
any record the socket carries (``core.records.decode``, then a ``dropped`` record of source
``agent`` whose pid is the one its name says) and handed to ``Live.exit_counts``, which logs
the counts the log does not hold yet; then the file is removed, so it is applied once. A file
that is not such a record, or larger than ``MAX_EXIT_BYTES``, is removed and counted
("malformed exit file", source ``supervisor``); no traceback.
"""

from __future__ import annotations

import os
import re
import stat
from typing import Any

from trainmeter.core.records import EXIT_FILE, RecordError, decode
from trainmeter.supervisor.live import Live

MAX_EXIT_BYTES = 64 * 1024  # an agent's record is under 5 kB (32 reasons of 120 characters)
MAX_EXIT_FILES = 4096  # files read at one run's end (one per process that had an agent)
_NAME = re.compile(re.escape(EXIT_FILE).replace(r"\{pid\}", r"([0-9]{1,10})") + r"\Z")
MALFORMED = "malformed exit file"


def apply_exit_files(live: Live, folder: str) -> int:
    """Apply the exit files in ``folder`` (the socket's) to the open run, then remove them;
    returns how many added counts the log did not hold. Never raises."""
    try:
        names = sorted(n for n in os.listdir(folder) if _NAME.match(n))
    except OSError:  # no folder (removed already): nothing was left
        return 0
    applied = 0
    for name in names[:MAX_EXIT_FILES]:
        path = os.path.join(folder, name)
        rec = _read(path, int(_NAME.match(name).group(1)))
        try:
            os.unlink(path)
        except OSError:
            pass
        if rec is None:
            live.count_drop(MALFORMED, note=f"an exit file that is no agent's counts: {name}")
        elif live.exit_counts(rec):
            applied += 1
    if len(names) > MAX_EXIT_FILES:
        live.count_drop("exit files past the bound", len(names) - MAX_EXIT_FILES,
                        note=f"read the first {MAX_EXIT_FILES} exit files")  # fmt: skip
    return applied


def _read(path: str, pid: int) -> dict[str, Any] | None:
    """The ``dropped`` record in the file at ``path``, left by process ``pid``, or None when
    it cannot be read or is not one (too large, not a record, another kind, source or pid)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # a fifo: not what an agent writes
                return None
            data = f.read(MAX_EXIT_BYTES + 1)
    except OSError:
        return None
    if len(data) > MAX_EXIT_BYTES:
        return None
    try:
        rec = decode(data)
    except (RecordError, RecursionError):
        return None
    ok = rec["k"] == "dropped" and rec["source"] == "agent" and rec.get("pid") == pid
    return rec if ok else None
