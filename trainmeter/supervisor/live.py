"""The live side of one supervisor: the open run, its log and engine, and change notices.

All mutation happens under one lock, so records from many agent connections are written to
the log (the one writer, invariant 5) and folded into the engine in one order. Subscribers
wait on a condition for the next change.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainmeter._version import __version__
from trainmeter.core import records
from trainmeter.core.engine import Engine
from trainmeter.supervisor.store import RunLog, job_facts, new_run_id, run_folder_name, runs_dir

_SECRET_WORDS = ("token", "key", "secret", "password", "passwd", "auth", "credential")


def redact_argv(argv: list[str]) -> list[str]:
    """Hide values that look like secrets (``--api-key X``, ``--token=X``, ``KEY=X``).

    The run log holds physics, never secrets (SPEC "Run log").
    """
    out, hide_next = [], False
    for arg in argv:
        low = arg.lower()
        if hide_next:
            out.append("***")
            hide_next = False
        elif "=" in arg and any(w in low.split("=", 1)[0] for w in _SECRET_WORDS):
            out.append(arg.split("=", 1)[0] + "=***")
        elif low.startswith("-") and any(w in low for w in _SECRET_WORDS):
            out.append(arg)
            hide_next = True
        else:
            out.append(arg)
    return out


class Live:
    """One supervisor's runs, one at a time.

    Args:
        root: the ``.trainmeter`` folder runs go under.
        clock: wall-clock seconds (injected for tests).
    """

    def __init__(self, root: Path | str | None = None, clock: Callable[[], float] = time.time):
        self.root = root
        self.clock = clock
        self.cond = threading.Condition(threading.RLock())
        self.engine: Engine | None = None
        self.log: RunLog | None = None
        self.run_id: str | None = None
        self.log_path: Path | None = None
        self.host = ""
        self.job: dict[str, Any] | None = None  # store.job_facts: the multi-node job, if any
        self.segment = 0
        self.segment_open = False
        self.version = 0
        self.dropped = 0
        self.closed = False
        self.agents_connected = 0
        self.agents_seen = 0

    # -- runs and segments ----------------------------------------------------------------------
    def open_run(self, name: str, argv: list[str], opts: dict[str, Any]) -> dict[str, Any]:
        """Close any open run, start a new one and write its ``run_start``."""
        with self.cond:
            if self.log is not None:
                self.close_run("ok")
            now = self.clock()
            self.run_id = new_run_id(now)
            self.host, self.job = socket.gethostname(), job_facts(os.environ)
            folder = run_folder_name(self.run_id, self.host, self.job)
            self.log = RunLog(runs_dir(self.root) / folder)
            self.log_path = self.log.path
            self.engine = Engine()
            self.segment = 0
            job = {"job": self.job} if self.job else {}  # docs/multinode.md
            self._write(records.make(
                "run_start", now, id=self.run_id, name=name, argv=redact_argv(list(argv)),
                version=__version__, cwd=os.getcwd(), host=self.host,
                opts=_clean_opts(opts), **job,
            ))  # fmt: skip
            return self.info()

    def segment_start(self, name: str, opts: dict[str, Any], new: bool) -> dict[str, Any]:
        """A ``%%trainmeter`` cell begins: continue the open run, or open one (``new``)."""
        with self.cond:
            if self.log is None or new:
                self.open_run(name, ["%%trainmeter"], opts)
            self.segment += 1
            self.segment_open = True
            self._write(records.make("segment_start", self.clock(), segment=self.segment,
                                     opts=_clean_opts(opts)))  # fmt: skip
            return self.info()

    def segment_end(self, status: str, error: str | None = None) -> dict[str, Any]:
        """The cell ended (``ok``, ``error`` or ``interrupted``); returns the snapshot."""
        with self.cond:
            if self.log is not None and self.segment_open:
                fields = {"error": error[:2000]} if error else {}
                self._write(records.make("segment_end", self.clock(), segment=self.segment,
                                         status=status, **fields))  # fmt: skip
                self.segment_open = False
            return self.snapshot()

    def close_run(self, status: str, exit_code: int | None = None) -> dict[str, Any] | None:
        """Write ``run_end``, close the log; returns the final snapshot (None if no run)."""
        with self.cond:
            if self.log is None:
                return None
            if self.segment_open:
                self.segment_end(status)
            self._write(records.make("run_end", self.clock(), status=status, exit_code=exit_code))
            snap = self.snapshot()
            self._write_passport(snap)
            self.log.close()
            self.log = None
            snap["run"]["log"] = str(self._name_by_ranks())
            return snap

    def _name_by_ranks(self) -> Path:
        """Rename a multi-node run's folder to carry the ranks it saw (``store.run_folder_name``:
        ``<run id>-<host>-r8-15``), known only now; returns the log's path."""
        old = self.log_path.parent
        ranks = _ranks_seen(self.engine)
        new = old.with_name(run_folder_name(self.run_id, self.host, self.job, ranks))
        if new != old:
            try:
                old.rename(new)
                self.log_path = new / self.log_path.name
            except OSError as exc:
                print(f"[trainmeter] cannot rename {old} to {new.name}: {exc}", file=sys.stderr)
        return self.log_path

    def _write_passport(self, snap: dict[str, Any]) -> None:
        """``passport.md``/``passport.json`` beside the log (docs/spec.md "Passport and
        exports"). A failure is noted in the log and on stderr, never raised: the log closes
        whatever happens here (``tm passport`` rebuilds a missing passport from it)."""
        from trainmeter.exports import passport_files

        try:
            passport_files.write(self.log.folder, snap)
        except Exception as exc:  # OSError (disk full), or a bug: either way keep the log
            text = f"passport not written: {type(exc).__name__}: {exc}"
            print(f"[trainmeter] {text}", file=sys.stderr)
            self._write(records.make("note", self.clock(), text=text, source="supervisor"))

    # -- records in -----------------------------------------------------------------------------
    def ingest(self, recs: list[dict[str, Any]]) -> bool:
        """Write and fold validated agent records (one write call); dropped (False) when no
        run is open."""
        with self.cond:
            if self.log is None:
                self.dropped += len(recs)
                return False
            self.log.append_many(recs)
            for rec in recs:
                self.engine.apply(rec)
            self.version += 1
            self.cond.notify_all()
            return True

    def note(self, text: str) -> None:
        """Record a short message for the person (if a run is open)."""
        with self.cond:
            if self.log is not None:
                self._write(records.make("note", self.clock(), text=text, source="supervisor"))

    def _write(self, rec: dict[str, Any]) -> None:
        self.log.append(rec)
        self.engine.apply(rec)
        self.version += 1
        self.cond.notify_all()

    # -- snapshots out --------------------------------------------------------------------------
    def agent_pids(self) -> list[int]:
        """Pids of the agents that said hello in this run (the training processes)."""
        with self.cond:
            return list(self.engine.agents) if self.engine is not None else []

    def info(self) -> dict[str, Any]:
        with self.cond:
            log = str(self.log_path) if self.log_path else None
            return {"run_id": self.run_id, "segment": self.segment, "log": log}

    def snapshot(self) -> dict[str, Any]:
        """The engine's snapshot now, plus where the log is."""
        with self.cond:
            if self.engine is None:
                return {"v": 1, "run": {"state": "idle"}, "step": 0, "notes": ["no run yet"]}
            snap = self.engine.snapshot(now=self.clock() if self.log is not None else None)
            snap["run"]["log"] = str(self.log_path)
            return snap

    def timeline_since(self, seq: int) -> dict[str, Any]:
        with self.cond:
            if self.engine is None:
                return {"seq": 0, "series": {}}
            return self.engine.timeline.since(seq) if seq >= 0 else self.engine.timeline.full()

    def update(self, seq: int) -> dict[str, Any]:
        """One subscriber update: ``{"snapshot", "points", "full"}``, the points appended after
        ``seq`` (everything kept when ``seq < 0``), taken under one lock so the two agree.

        Its JSON size is bounded whatever training code sends (docs/spec.md "Bounds on an
        update"); ``tests/unit/test_bounds.py`` checks the bound over a million-step run.
        """
        with self.cond:
            return {"snapshot": self.snapshot(), "points": self.timeline_since(seq),
                    "full": seq < 0}  # fmt: skip

    def wait_change(self, version: int, timeout: float) -> int:
        """Block until ``version`` is stale or ``timeout`` s pass; returns the current version."""
        with self.cond:
            if self.version == version and not self.closed:
                self.cond.wait(timeout)
            return self.version

    def shutdown(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()


def _ranks_seen(engine: Engine) -> set[int]:
    """Ranks that stepped or said hello in a world of more than one (a launcher's own agent,
    such as torchrun's, is alone in a world of 1 and says rank 0)."""
    hello = {a["rank"] for a in engine.agents.values()
             if isinstance(a.get("rank"), int) and (a.get("world_size") or 1) > 1}  # fmt: skip
    return set(engine.rank_steps) | hello


def _clean_opts(opts: dict[str, Any]) -> dict[str, Any]:
    """Keep only JSON-able option values that are physics (never a price)."""
    keep = {}
    for k, v in opts.items():
        if "price" in k.lower():
            print("[trainmeter] a price is never stored; ignored", file=sys.stderr)
            continue
        if v is None or isinstance(v, (str, int, float, bool)):
            keep[k] = v
    return keep
