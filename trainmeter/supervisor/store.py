"""The run log: ``.trainmeter/runs/<run id>/run.jsonl``, append-only, one record a line.

Only the supervisor writes it (invariant 5). A write that fails (a full disk) keeps the record
in memory and retries at the next append, so nothing is lost while the process lives; what is
still unwritten at close is reported with the log's path.
"""

from __future__ import annotations

import os
import secrets
import sys
import time
from pathlib import Path

from trainmeter.core.records import encode

DEFAULT_ROOT = Path(".trainmeter")
MAX_PENDING_BYTES = 256 << 20  # held in memory while the disk refuses writes


def runs_dir(root: Path | str | None = None) -> Path:
    """``<root>/runs`` (root defaults to ``./.trainmeter``)."""
    return Path(root or DEFAULT_ROOT) / "runs"


def new_run_id(now: float | None = None) -> str:
    """``YYYYmmdd-HHMMSS-xxxx`` in local time: sorts by start, unique within a second."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    return f"{stamp}-{secrets.token_hex(2)}"


def find_run(run: str | None, root: Path | str | None = None) -> Path:
    """The run folder for ``run`` (a folder, a ``run.jsonl`` path, an id or id prefix, or None
    for the newest run).

    Raises:
        FileNotFoundError: with a message naming what was looked for and where.
    """
    if run:
        p = Path(run)
        if p.is_file() and p.name == "run.jsonl":
            return p.parent
        if (p / "run.jsonl").is_file():
            return p
    base = runs_dir(root)
    runs = sorted(d for d in base.glob("*") if (d / "run.jsonl").is_file()) if base.is_dir() else []
    if run:
        runs = [d for d in runs if d.name.startswith(run)]
    if not runs:
        what = f"run matching {run!r}" if run else "runs"
        raise FileNotFoundError(f"no {what} under {base.resolve()} (start one with `tm train.py`)")
    return runs[-1]


class RunLog:
    """Append records to one run's log.

    Args:
        folder: the run folder (created, with parents).
    Raises:
        OSError: the folder or file cannot be created.
    """

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.path = folder / "run.jsonl"
        # Unbuffered: os.write reports partial writes, so a retry never duplicates a line.
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._pending = bytearray()
        self.lost_bytes = 0
        self.write_errors = 0

    def append(self, rec: dict) -> None:
        """Encode and write one record (kept in memory if the disk refuses it)."""
        self.append_many((rec,))

    def append_many(self, recs) -> None:
        """Encode and write records with one write call (kept in memory if refused)."""
        self._pending += b"".join(map(encode, recs))
        self._drain()

    def _drain(self) -> None:
        while self._pending and self._fd is not None:
            try:
                n = os.write(self._fd, self._pending)
            except OSError as exc:
                self._refused(exc)
                return
            del self._pending[:n]

    def _refused(self, exc: OSError) -> None:
        self.write_errors += 1
        if self.write_errors == 1:
            print(f"[trainmeter] cannot write {self.path}: {exc}; keeping records in memory "
                  "and retrying", file=sys.stderr)  # fmt: skip
        excess = len(self._pending) - MAX_PENDING_BYTES
        if excess > 0:
            self.lost_bytes += excess
            del self._pending[:excess]

    def close(self) -> None:
        """Write what is pending, fsync and close; report bytes that never reached the disk."""
        if self._fd is None:
            return
        self._drain()
        try:
            os.fsync(self._fd)
        except OSError:
            pass
        os.close(self._fd)
        self._fd = None
        unwritten = len(self._pending) + self.lost_bytes
        if unwritten:
            print(f"[trainmeter] {unwritten} bytes of records could not be written to {self.path}",
                  file=sys.stderr)  # fmt: skip
