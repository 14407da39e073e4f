"""The live side of one supervisor: the open run, its log and engine, and change notices.

All mutation happens under one lock, so records from many agent connections are written to
the log (the one writer, the one-writer invariant) and folded into the engine in one order.
Subscribers wait on a condition for the next change.
"""

from __future__ import annotations

import errno
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainmeter._version import __version__
from trainmeter.core import checkpoint, records
from trainmeter.core.engine import Engine, StepsFailed
from trainmeter.core.redact import redact_argv
from trainmeter.supervisor.store import RunLog, job_facts, new_run_id, run_folder_name, runs_dir

DROP_FLUSH_S = 1.0  # the supervisor's drop counts reach the log at most this often
# checkpoints (core/checkpoint.py, docs/spec.md "Checkpoints"): one when the log has grown by
# CHECKPOINT_GROWTH times the last one's size since it (at least CHECKPOINT_MIN_BYTES), looked
# at after each ingested line or batch (a compare of the bytes written); and one after run_end
CHECKPOINT_GROWTH = 10
CHECKPOINT_MIN_BYTES = 1 << 20
DISK_REASONS = {errno.ENOSPC: "disk full", errno.EDQUOT: "disk quota exceeded"}


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
        self.opening = 0  # socket connections whose first line is not read yet
        self.agent_peers: list[int | None] = []  # the pid of each connected agent (None: unknown)
        self.lines_in = 0  # lines the socket read, good or bad (the end-of-run drain's progress)
        self.cutting = False  # the run is closing: agent lines are counted, not applied
        self._drops: dict[str, int] = {}  # this run's supervisor drop counts, by reason
        self._drops_dirty, self._drops_t = False, 0.0
        self._disk_seen = self._disk_written = 0  # RunLog.lost_lines in the engine, in the log
        self._agent_counts: dict[Any, dict[str, int]] = {}  # pid -> its newest agent counts
        self.closed_pids: set = set()  # pids whose agent's final record came (unclosed_note)
        self._ckpt_end = self._ckpt_size = 0  # the last checkpoint's end in the log, its bytes
        self._ckpt_due = CHECKPOINT_MIN_BYTES  # the log's bytes written when one is due next

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
            self.cutting = False
            self._drops, self._drops_dirty, self._drops_t = {}, False, 0.0
            self._disk_seen = self._disk_written = 0
            self._agent_counts = {}
            self.closed_pids = set()
            self._ckpt_end = self._ckpt_size = 0
            self._ckpt_due = self.log.written + CHECKPOINT_MIN_BYTES
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
                self._flush_drops(force=True)
                fields = {"error": error[:2000]} if error else {}
                self._write(records.make("segment_end", self.clock(), segment=self.segment,
                                         status=status, **fields))  # fmt: skip
                self.segment_open = False
                self.checkpoint()
            return self.snapshot()

    def close_run(self, status: str, exit_code: int | None = None) -> dict[str, Any] | None:
        """Write ``run_end``, close the log; returns the final snapshot (None if no run)."""
        with self.cond:
            if self.log is None:
                return None
            if self.segment_open:
                self.segment_end(status)
            self._flush_drops(force=True)
            self._write(records.make("run_end", self.clock(), status=status, exit_code=exit_code))
            self._disk_at_close()
            snap = self.snapshot()
            self._write_passport(snap)
            self.checkpoint(force=True)  # the log's last line: replay reads the run from it
            self.log.close()
            self.log = None
            snap["run"]["log"] = str(self._name_by_ranks())
            return snap

    def _disk_at_close(self) -> None:
        """Lines the disk has not taken by now will never reach it: in the final snapshot."""
        self.log.append_lines(())  # one more try
        lost = self.log.lost_lines + self.log.pending_lines
        if lost != self._disk_seen:
            self._disk_seen = lost
            self.engine.apply(self._drop_record("disk", self._disk_counts(lost)))

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
        from trainmeter.supervisor import passport_files

        try:
            passport_files.write(self.log.folder, snap)
        except Exception as exc:  # OSError (disk full), or a bug: either way keep the log
            text = f"passport not written: {type(exc).__name__}: {exc}"
            print(f"[trainmeter] {text}", file=sys.stderr)
            self._write(records.make("note", self.clock(), text=text, source="supervisor"))

    # -- records in -----------------------------------------------------------------------------
    def ingest(self, recs: list[dict[str, Any]]) -> bool:
        """Fold validated records (``records.decode_wire`` or ``records.make`` made them) into
        the engine and write those it applied, with one write call; dropped (False) when no
        run is open.

        A record JSON cannot encode, or one the engine raises on, is counted (a ``dropped``
        record, source ``supervisor``) and never written: what is in the log is what the
        engine applied, so a replay rebuilds it (docs/reliability.md).
        """
        if isinstance(recs, records.Steps):
            return self._ingest_steps(recs)
        with self.cond:
            if self.log is None:
                self.dropped += len(recs)
                return False
            lines, bad = [], {}
            for rec in recs:
                try:
                    line = records.encode(rec)
                except (TypeError, ValueError):  # NaN or an object deep inside a field
                    bad["malformed record"] = bad.get("malformed record", 0) + 1
                    continue
                try:
                    self.engine.apply(rec)
                except Exception as exc:  # a bug or a shape validate() let through
                    why = f"apply failed: {type(exc).__name__}"
                    bad[why] = bad.get(why, 0) + 1
                    continue
                lines.append(line)
            self.log.append_lines(lines)
            self._after_write()
            one = recs[0] if len(recs) == 1 and lines else {}  # an agent's counts, applied:
            if one.get("k") == "dropped" and one["source"] == "agent":  # what exit_counts
                self._agent_counts[one.get("pid")] = one["counts"]  # compares with
                if one.get("final"):
                    self.closed_pids.add(one.get("pid"))
            for why, n in bad.items():  # after the lines: the log's order is the engine's
                self.count_drop(why, n)
            self._flush_drops()
            if self.log.written >= self._ckpt_due:
                self.checkpoint()
            self.version += 1
            self.cond.notify_all()
            return True

    def _ingest_steps(self, steps: records.Steps) -> bool:
        """:meth:`ingest` of a steps batch's rows (``records.decode_batch``): folded by
        ``Engine.apply_steps`` and written by ``RunLog.append_steps``, the same state and
        the same lines as the rows one by one, without a dict per step. A row the engine
        raises on is counted and not written, as there."""
        with self.cond:
            if self.log is None:
                self.dropped += len(steps)
                return False
            bad: dict[str, int] = {}
            done, start, n = [], 0, len(steps)
            while start < n:
                try:
                    self.engine.apply_steps(steps, start)
                except StepsFailed as exc:
                    done.append((start, exc.index))
                    why = f"apply failed: {type(exc.error).__name__}"
                    bad[why] = bad.get(why, 0) + 1
                    start = exc.index + 1
                else:
                    done.append((start, n))
                    break
            if done == [(0, n)]:
                self.log.append_steps(steps)
            else:
                self.log.append_lines([records.encode(steps.row(i))
                                       for a, b in done for i in range(a, b)])  # fmt: skip
            self._after_write()
            for why, count in bad.items():  # after the lines: the log's order is the engine's
                self.count_drop(why, count)
            self._flush_drops()
            if self.log.written >= self._ckpt_due:
                self.checkpoint()
            self.version += 1
            self.cond.notify_all()
            return True

    def exit_counts(self, rec: dict[str, Any]) -> bool:
        """An agent's final counts from its exit file (supervisor/exit_counts.py: a validated
        ``dropped`` record, source ``agent``): when any count is above what the log holds
        for that pid (counts are cumulative per pid), a note and a ``dropped`` record with the
        larger of each count are written and applied; True then. False when the log already
        holds them all (the record reached the socket after all), or no run is open."""
        with self.cond:
            if self.log is None:
                return False
            pid = rec.get("pid")
            if rec.get("final"):
                self.closed_pids.add(pid)
            held = self._agent_counts.get(pid, {})
            counts = {k: max(n, held.get(k, 0)) for k, n in {**held, **rec["counts"]}.items()}
            if counts == held:
                return False
            if len(counts) > records.MAX_DROP_REASONS:  # reasons the log held and it lacks
                counts = dict(rec["counts"])
            self.note(f"pid {pid} (rank {rec.get('rank')}): its final counts, read from the "
                      "file it left at exit (its last dropped record had not arrived)")  # fmt: skip
            self._write(records.make("dropped", self.clock(), source="agent", counts=counts,
                                     pid=pid, rank=rec.get("rank")))  # fmt: skip
            self._agent_counts[pid] = counts
            return True

    def count_drop(self, reason: str, n: int = 1, note: str | None = None) -> None:
        """Count ``n`` records the supervisor refused, by ``reason`` (a short phrase).

        The run's cumulative counts reach the snapshot at once and the log as a ``dropped``
        record (source ``supervisor``) at most every ``DROP_FLUSH_S`` seconds and at the end
        of a segment or run. ``note``: a message written once per run, the first time
        ``reason`` is counted. With no run open, only :attr:`dropped` counts them.
        """
        with self.cond:
            if self.log is None:
                self.dropped += n
                return
            reason = reason[: records.MAX_DROP_REASON]
            if reason not in self._drops and len(self._drops) >= records.MAX_DROP_REASONS - 1:
                reason = "other"
            first = reason not in self._drops
            self._drops[reason] = self._drops.get(reason, 0) + n
            self._drops_dirty = True
            if first and note:
                self.note(note)
            self._flush_drops()

    def drop_count(self, reason: str) -> int:
        """How many records this run's supervisor has counted under ``reason`` so far."""
        with self.cond:
            return self._drops.get(reason, 0)

    def _drop_record(self, source: str, counts: dict[str, int]) -> dict[str, Any]:
        return records.make("dropped", self.clock(), source=source, counts=dict(counts),
                            pid=os.getpid(), rank=None)  # fmt: skip

    def _flush_drops(self, force: bool = False) -> None:
        """Write the supervisor's counts when they changed, at most every DROP_FLUSH_S."""
        now = time.monotonic()
        if self._drops_dirty and (force or now - self._drops_t >= DROP_FLUSH_S):
            self._drops_dirty, self._drops_t = False, now
            self._write(self._drop_record("supervisor", self._drops))

    def checkpoint(self, force: bool = False) -> bool:
        """Write a checkpoint of the engine into the log when the cadence says so (module
        constants; ``force``: now, the run's end); True when one was written.

        Never while the log does not hold what the engine applied (lines held back or lost
        by the disk): a checkpoint is what a replay of the log so far gives. A state that
        cannot be written (core/checkpoint.py) is left out, and replay reads further back.
        """
        with self.cond:
            log, now = self.log, self.clock()
            if log is None or log.holding or log.lost_lines or self._disk_seen:
                return False
            size = log.size()
            gap = max(CHECKPOINT_MIN_BYTES, CHECKPOINT_GROWTH * self._ckpt_size)
            self._ckpt_due = self._ckpt_end + gap  # looked at again once the log is so long
            if size is None or not (force or size - self._ckpt_end >= gap):
                return False
            self._flush_drops(force=True)  # counts a snapshot applied: into the log first
            size = log.size()
            if size is None or log.holding:
                return False
            try:
                line = checkpoint.line(self.engine, now, size, log.n, self.run_id)
            except Exception:  # CheckpointError, or a bug: never a reason to stop ingesting
                self._ckpt_end = size  # tried again once the log has grown as much again
                self._ckpt_due = size + gap
                return False
            if not log.append_unnumbered(line):
                return False
            self._ckpt_end, self._ckpt_size = size + len(line), len(line)
            gap = max(CHECKPOINT_MIN_BYTES, CHECKPOINT_GROWTH * len(line))
            self._ckpt_due = self._ckpt_end + gap
            return True

    def _disk_counts(self, lost: int) -> dict[str, int]:
        err = self.log.last_error
        code = getattr(err, "errno", None)
        reason = DISK_REASONS.get(code) or f"write failed: {errno.errorcode.get(code, code)}"
        return {reason: lost}

    def _after_write(self) -> None:
        """Lines the disk lost (store.RunLog.lost_lines) are in the snapshot at once, and in
        the log as a ``dropped`` record (source ``disk``) once the disk takes writes again."""
        lost = self.log.lost_lines
        if lost != self._disk_seen:
            self._disk_seen = lost
            self.engine.apply(self._drop_record("disk", self._disk_counts(lost)))
        if lost != self._disk_written and not self.log.holding:
            self._disk_written = lost  # first: the write below comes back here
            self._write(self._drop_record("disk", self._disk_counts(lost)))

    def note(self, text: str) -> None:
        """Record a short message for the person (if a run is open)."""
        with self.cond:
            if self.log is not None:
                self._write(records.make("note", self.clock(), text=text, source="supervisor"))

    def _write(self, rec: dict[str, Any]) -> None:
        line = records.encode(rec)
        self.engine.apply(rec)
        self.log.append_lines((line,))
        self._after_write()
        self.version += 1
        self.cond.notify_all()

    # -- snapshots out --------------------------------------------------------------------------
    def unclosed_note(self) -> None:
        """After the child and its agents are done (``tm``'s end): a note for each training
        process whose agent sent no final record and left no exit file. It ended without
        closing its agent (``os._exit``, SIGKILL such as the OOM killer's, a crash in C): what
        it had not yet sent, its last steps among them, is in neither the log nor a count."""
        pids = [p for p in self.agent_pids() if p not in self.closed_pids]
        if not pids:
            return
        more = f" and {len(pids) - 8} more" if len(pids) > 8 else ""
        self.note(f"pid {', '.join(map(str, pids[:8]))}{more}: ended without closing "
                  "trainmeter's agent (os._exit, SIGKILL such as the OOM killer's, or a crash), "
                  "so what it had not yet sent (its last steps, up to its last flush, 0.1 s) is "
                  "neither in the log nor counted")  # fmt: skip

    def agent_pids(self) -> list[int]:
        """Pids of the agents that said hello in this run (the training processes)."""
        with self.cond:
            return self.engine.agent_pids() if self.engine is not None else []

    def info(self) -> dict[str, Any]:
        with self.cond:
            log = str(self.log_path) if self.log_path else None
            return {"run_id": self.run_id, "segment": self.segment, "log": log}

    def snapshot(self) -> dict[str, Any]:
        """The engine's snapshot now, plus where the log is."""
        with self.cond:
            if self.engine is None:
                return {"v": 1, "run": {"state": "idle"}, "step": 0, "notes": ["no run yet"]}
            if self._drops_dirty:  # counts not yet in the log are in the snapshot already
                self.engine.apply(self._drop_record("supervisor", self._drops))
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
