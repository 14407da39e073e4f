"""The run log: ``.trainmeter/runs/<run id>/run.jsonl``, append-only, one record a line.

Only the supervisor writes it (the one-writer invariant), and stamps every line with its number
``"n"``. A write that fails (a full disk) keeps the line in memory and retries at the next append,
so nothing is lost while the process lives and memory holds; what is lost is counted
(``RunLog.lost_lines``; the supervisor logs it as a ``dropped`` record, source ``disk``) and what is
still unwritten at close is reported with the log's path.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from trainmeter.core.envnames import JOB_ID
from trainmeter.core.records import Steps, encode, step_lines

DEFAULT_ROOT = Path(".trainmeter")
MAX_PENDING_BYTES = 256 << 20  # held in memory while the disk refuses writes


def runs_dir(root: Path | str | None = None) -> Path:
    """``<root>/runs`` (root defaults to ``./.trainmeter``)."""
    return Path(root or DEFAULT_ROOT) / "runs"


def new_run_id(now: float | None = None) -> str:
    """``YYYYmmdd-HHMMSS-xxxx`` in local time: sorts by start, unique within a second."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    return f"{stamp}-{os.urandom(2).hex()}"  # secrets.token_hex(2), without its 4 ms import


# Where a multi-node job says who it is (docs/multinode.md), first found wins. TRAINMETER_JOB_ID
# is the user's own; Slurm sets its ids in every task srun starts; torchrun's rendezvous id and
# MASTER_ADDR/PORT reach tm only when the job script exports them (torchrun sets them for its
# children, after tm started).
JOB_ID_ENV = ((JOB_ID, ""), ("SLURM_JOB_ID", "slurm:"),
              ("TORCHELASTIC_RUN_ID", "torchelastic:"))  # fmt: skip
NODE_RANK_ENV = ("SLURM_NODEID", "GROUP_RANK", "NODE_RANK", "PET_NODE_RANK")
NODES_ENV = ("SLURM_NNODES", "SLURM_JOB_NUM_NODES", "NNODES", "PET_NNODES")


def _env_int(env: Mapping[str, str], names: tuple[str, ...]) -> int | None:
    for name in names:
        try:
            return int(env[name])
        except (KeyError, ValueError):
            continue
    return None


def job_facts(env: Mapping[str, str]) -> dict | None:
    """The job and node this supervisor belongs to, from the environment ``tm`` started in.

    Returns ``{"id", "node_rank", "nodes"}`` (any may be None), or None when the environment
    names none of them. ``id``: ``$TRAINMETER_JOB_ID``; else ``slurm:<SLURM_JOB_ID>[.<step>]``;
    else ``torchelastic:<TORCHELASTIC_RUN_ID>`` (not its default ``none``); else
    ``master:<MASTER_ADDR>:<MASTER_PORT>``. ``node_rank`` and ``nodes`` come from the first of
    :data:`NODE_RANK_ENV` and :data:`NODES_ENV` that holds a whole number.
    """
    job_id = None
    for name, prefix in JOB_ID_ENV:
        value = env.get(name, "").strip()
        if value and value != "none":
            step = env.get("SLURM_STEP_ID", "").strip() if name == "SLURM_JOB_ID" else ""
            job_id = f"{prefix}{value}" + (f".{step}" if step else "")
            break
    if job_id is None and env.get("MASTER_ADDR") and env.get("MASTER_PORT"):
        job_id = f"master:{env['MASTER_ADDR']}:{env['MASTER_PORT']}"
    facts = {"id": job_id, "node_rank": _env_int(env, NODE_RANK_ENV),
             "nodes": _env_int(env, NODES_ENV)}  # fmt: skip
    return facts if any(v is not None for v in facts.values()) else None


def job_world_size(env: Mapping[str, str]) -> int | None:
    """The job's world size (``$WORLD_SIZE``, a whole number > 0) when the environment the
    supervisor started in says it, else None (torchrun sets it only for its children)."""
    n = _env_int(env, ("WORLD_SIZE",))
    return n if n is not None and n > 0 else None


def is_multi_node(job: Mapping | None) -> bool:
    """True when ``job`` (:func:`job_facts`) says more than one node, or names a node rank
    without a node count."""
    if not job:
        return False
    nodes = job.get("nodes")
    return nodes > 1 if nodes is not None else job.get("node_rank") is not None


def run_folder_name(run_id: str, host: str, job: Mapping | None = None, ranks=()) -> str:
    """A run folder's name: the run id, or ``<run id>-<host>[-r<lo>-<hi>]`` for one node of a
    multi-node job (``is_multi_node(job)``, or ranks that do not start at 0).

    ``ranks``: the ranks seen so far (known at the run's end); a single rank reads ``-r<lo>``.
    ``host`` keeps letters, digits, ``.``, ``_`` and ``-`` (others become ``_``), 64 at most.
    """
    ranks = sorted(ranks)
    if not (is_multi_node(job) or (ranks and ranks[0] > 0)):
        return run_id
    safe = "".join(c if c.isascii() and (c.isalnum() or c in "._-") else "_" for c in host)
    name = f"{run_id}-{safe[:64] or 'node'}"
    if ranks:
        lo, hi = ranks[0], ranks[-1]
        name += f"-r{lo}" if lo == hi else f"-r{lo}-{hi}"
    return name


def run_folders(root: Path | str | None = None) -> list[Path]:
    """The run folders under ``root`` (those holding a ``run.jsonl``), oldest first.

    Ordered by the id's start second, then by the ``t`` of the log's first record: two runs
    started in the same second have ids that differ only in their random suffix.
    """
    base = runs_dir(root)
    if not base.is_dir():
        return []
    return sorted((d for d in base.glob("*") if (d / "run.jsonl").is_file()), key=_start_key)


def _start_key(folder: Path) -> tuple[str, float, str]:
    try:
        with open(folder / "run.jsonl", "rb") as f:
            t = json.loads(f.readline(1 << 20)).get("t", 0.0)  # bounded, as core/logread
        t = float(t) if isinstance(t, (int, float)) else 0.0
    except (OSError, ValueError, AttributeError, RecursionError, OverflowError):  # deep, 10**400
        t = 0.0
    return folder.name[:15], t, folder.name


def find_run(run: str | None, root: Path | str | None = None) -> Path:
    """The run folder for ``run`` (a folder, a ``run.jsonl`` path, an id, an id prefix (the
    newest run whose id starts so), or None for the newest run).

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
    runs = run_folders(root)
    hint = "list them with `tm ls`" if runs else "start one with `tm train.py`"
    if run:  # the run named exactly, else the newest whose id starts so
        runs = [d for d in runs if d.name == run] or [d for d in runs if d.name.startswith(run)]
    if not runs:
        what = f"run matching {run!r}" if run else "runs"
        raise FileNotFoundError(f"no {what} under {base.resolve()} ({hint})")
    return runs[-1]


class RunLog:
    """Append records to one run's log, each line stamped ``"n"``: 1, 2, 3, ... in this file
    (core/logread.py finds duplicated and missing lines by it).

    A write the disk refuses (a full disk) keeps the lines in memory, in order, and retries at
    the next append; past :data:`MAX_PENDING_BYTES` held, new lines are lost, never stamped,
    and counted in :attr:`lost_lines` (the ``n`` of the lines written stay gapless).

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
        self.written = os.fstat(self._fd).st_size  # bytes in the file: counted, no syscall
        self._pending = bytearray()
        self.n = 0  # lines stamped so far (written or pending)
        self.lost_lines = 0  # lines never stamped: the memory held for a refusing disk was full
        self.write_errors = 0
        self.last_error: OSError | None = None

    @property
    def holding(self) -> bool:
        """True while lines wait in memory for a disk that refused them."""
        return bool(self._pending)

    @property
    def pending_lines(self) -> int:
        """Lines stamped and not yet (wholly) on disk."""
        return self._pending.count(b"\n")

    def append(self, rec: dict) -> None:
        """Encode and write one record (kept in memory if the disk refuses it).

        Raises:
            ValueError, TypeError: ``rec`` is not JSON (NaN, an object JSON has no form for).
        """
        self.append_lines((encode(rec),))

    def append_many(self, recs) -> None:
        """Encode and write records with one write call (kept in memory if refused).

        Raises:
            ValueError, TypeError: a record is not JSON; nothing is written then.
        """
        self.append_lines([encode(r) for r in recs])

    def append_lines(self, lines) -> None:
        """Stamp and write lines :func:`~trainmeter.core.records.encode` made (each one JSON
        object ending ``}\\n``), with one write call (two when lines were held back)."""
        if self._pending:
            self._drain()  # make room first: the disk may take them again
        room = MAX_PENDING_BYTES - len(self._pending)
        n = self.n
        for line in lines:
            if len(line) > room:
                self.lost_lines += 1
                continue
            n += 1
            stamped = b'%s,"n":%d}\n' % (line[:-2], n)
            room -= len(stamped)
            self._pending += stamped
        self.n = n
        self._drain()

    def append_steps(self, steps: Steps) -> None:
        """Write the ``step`` lines of a :class:`~trainmeter.core.records.Steps` batch: the
        lines :meth:`append_lines` would write for ``encode`` of each row, formatted in one
        call (:func:`~trainmeter.core.records.step_lines`) when the disk takes writes."""
        text = None if self._pending else step_lines(steps, self.n + 1)
        if text is None or len(text) > MAX_PENDING_BYTES:
            self.append_lines([encode(r) for r in steps.rows()])
            return
        self.n += len(steps)
        self._pending += text
        self._drain()

    def append_unnumbered(self, line: bytes) -> bool:
        """Write one line without a number: a checkpoint (core/checkpoint.py), a copy of state
        that is no record. Written only when nothing is held back and it fits what may be
        held; False when not written."""
        if self._pending or self._fd is None or len(line) > MAX_PENDING_BYTES:
            return False
        self._pending += line
        self._drain()
        return True

    def size(self) -> int | None:
        """Bytes in the file now (None when closed or unreadable)."""
        if self._fd is None:
            return None
        try:
            return os.fstat(self._fd).st_size
        except OSError:
            return None

    def _drain(self) -> None:
        while self._pending and self._fd is not None:
            try:
                n = os.write(self._fd, self._pending)
            except OSError as exc:
                self._refused(exc)
                return
            del self._pending[:n]
            self.written += n

    def _refused(self, exc: OSError) -> None:
        self.write_errors += 1
        self.last_error = exc
        if self.write_errors == 1:
            print(f"[trainmeter] cannot write {self.path}: {exc}; keeping records in memory "
                  "and retrying", file=sys.stderr)  # fmt: skip

    def close(self) -> int:
        """Write what is pending, fsync and close; report lines that never reached the disk.

        Returns:
            lines lost: never stamped (:attr:`lost_lines`) plus those still pending now.
        """
        if self._fd is None:
            return self.lost_lines + self.pending_lines
        self._drain()
        try:
            os.fsync(self._fd)
        except OSError:
            pass
        os.close(self._fd)
        self._fd = None
        unwritten = self.lost_lines + self.pending_lines
        if unwritten:
            print(f"[trainmeter] {unwritten} records could not be written to {self.path}",
                  file=sys.stderr)  # fmt: skip
        return unwritten
