"""Every series of a run at full resolution, re-read from its log for ``tm export``.

The live chart keeps at most a few thousand points per series (core/timeline.py thins the
older half); the run log keeps every one. This module replays ``run.jsonl`` through the same
:class:`~trainmeter.core.engine.Engine` the live view used, taking each point the engine
would chart as it is made, and keeps none of them: memory stays constant however long the run.

Series, each point with the step clock's optimizer step and its time. The step clock is rank
0's steps, or in a node's own run without rank 0 (docs/multinode.md) its lowest rank's, as the
engine's (``Engine._clock_rank``); "the clock's steps" below:

- what the training loop reported (``series`` records: ``train_loss``, ...), every name, at
  its own step (the step clock's when the record had none, as the engine does);
- ``tokens_per_s`` (tokens over the last 20 timed steps), at each of the clock's timed steps;
- ``tokens``: tokens fed so far (all ranks), at each of the clock's steps (none in a run whose
  inputs are not token ids: it has no tokens, not 0 of them);
- ``samples_per_s`` (every rank's own samples over its last 20 timed steps, summed: the
  snapshot's ``samples_per_s`` as it stood), at each of the clock's timed steps, for any model;
- ``samples``: samples fed so far (all ranks), at each of the clock's steps;
- ``mfu/<convention>`` for every convention with FLOPs per token, when the run has a peak, at
  each of the clock's timed steps: the engine's own chart series, the snapshot's MFU as it stood
  at that step (``Engine._mfu_scale``), which the dashboard draws as MFU over time;
- ``gpu<i>/<field>`` (GPU-Util, SM activity, ...) at each sampler reading: these run on time
  (``axis`` ``"time"``), their step is the step clock's at the reading.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import chain, repeat
from operator import sub
from os import PathLike
from typing import Any

from trainmeter.core import fold_steps
from trainmeter.core.engine import MAX_COUNT, Engine, ours, read_summary
from trainmeter.core.logread import LogReader
from trainmeter.core.records import Steps
from trainmeter.core.timeline import Timeline, scaled
from trainmeter.exports import numtext

STEP, TIME = "step", "time"  # what a series is charted against
OWN = frozenset({"tokens", "samples", "samples_per_s"})  # series of the export's own, not charted


@dataclass(frozen=True, slots=True)
class Point:
    """One point of one series.

    Attributes:
        series: its name (``train_loss``, ``tokens_per_s``, ``mfu/hf``, ``gpu0/sm_active``).
        step: the step clock's optimizer step (steps).
        t: seconds since the run started (s).
        time: when it was recorded, seconds since the Unix epoch (s).
        value: the value, in the series' own unit.
        axis: ``"step"`` or ``"time"``: what the dashboard charts it against.
    """

    series: str
    step: int
    t: float
    time: float
    value: float
    axis: str


class _Tap(Timeline):
    """A timeline that keeps nothing and hands each point the engine charts to ``out``
    (a batch's points come through ``fold_steps.fold``'s tap instead)."""

    def __init__(self, out: list) -> None:
        super().__init__()
        self.out = out

    def append(self, name: str, x: float, y: float, scale: tuple | None = None) -> bool:
        self.out.append((name, y))
        if scale:  # the points of the series derived from this one (core/timeline.py)
            den, names, factors = scale
            got = [(n, scaled([y], v, den)[0]) for n, v in zip(names, factors, strict=True)]
            self.out += [(n, v) for n, v in got if v < math.inf]  # overflowed: no figure
        return True

    def extend(self, name: str, xs: list, ys: list, scale: tuple | None = None) -> None:
        pass


@dataclass(frozen=True, slots=True)
class StepRows:
    """Consecutive steps of the step clock's rank that each give the same series' points, as
    columns: row ``k``'s points are ``Point(names[p], step[k], t[k], time[k], cols[p][k],
    "step")`` for each ``p`` in order (what :func:`iter_points` yields for them, a batch at a
    time).

    Attributes:
        names: the series, in the order of each row's points.
        step: the step clock's optimizer step of each row (steps).
        t: seconds since the run started (s); ``time``: seconds since the Unix epoch (s).
        cols: each series' values, one a row.
    """

    names: tuple[str, ...]
    step: list[int]
    t: list[float]
    time: list[float]
    cols: list[list]

    def points(self) -> Iterator[Point]:
        """The rows' points, row by row."""
        for k, step in enumerate(self.step):
            t, now = self.t[k], self.time[k]
            for name, col in zip(self.names, self.cols, strict=True):
                yield Point(name, step, t, now, col[k], STEP)


def iter_points(
    lines: Iterable[bytes | str] | str | PathLike,
    passport: dict[str, Any] | None = None,
    read: dict | None = None,
) -> Iterator[Point]:
    """The run's points in log order (malformed lines skipped, as replay skips them).

    Args:
        lines: the run log: its path, or its lines.
        passport: the run's passport; not read (every series, MFU's too, is the engine's).
        read: filled, once the log is read, with what the reader skipped (``engine.read_summary``
            ``{"skipped", "by", "cut", "text"}``); left empty when it skipped nothing.
    """
    for item in iter_rows(lines, read):
        if item.__class__ is Point:
            yield item
        else:
            yield from item.points()


def iter_rows(
    lines: Iterable[bytes | str] | str | PathLike, read: dict | None = None
) -> Iterator[Point | StepRows]:
    """:func:`iter_points`, with the points of a run of steps folded at once (the log's
    consecutive step lines, ``Engine.apply_steps``'s common case) as :class:`StepRows`
    where every row gives the same series. The step lines a sampler's reading or a series
    point cut (one a second, one every few steps) are folded as one run, those records in
    their places (``fold_steps.fold_run``): a fold's own work once per run, not per piece."""
    charted: list[tuple[str, float]] = []
    eng = Engine()
    eng.timeline = _Tap(charted)  # the engine's own chart points come out here
    start = None
    reader = LogReader(lines, loads=numtext.loads())
    run = _Run()
    for rec in reader.batches():  # bad lines skipped, as replay skips them
        if rec.__class__ is dict:
            if run.parts and run.carries(rec):
                run.add(rec)
                continue
            if run.parts:
                start = yield from _flush(eng, run.take(), charted, start, reader)
            start = yield from _record(eng, rec, charted, start, reader)
            continue
        if run.parts and not run.takes(rec):
            start = yield from _flush(eng, run.take(), charted, start, reader)
        run.add(rec)
    if run.parts:
        start = yield from _flush(eng, run.take(), charted, start, reader)
    if read is not None:
        read.update(read_summary(reader, "export") or {})


MAX_RUN = 1 << 14  # rows held for one fold (a few MiB of columns at most)


class _Run:
    """Steps batches of one rank and the records between them (``series`` with a step, ``gpu``
    readings), in log order, held to be folded as one run (``fold_steps.fold_run``)."""

    def __init__(self) -> None:
        self.parts: list = []
        self.rows = 0

    def carries(self, rec: dict) -> bool:
        """Whether ``rec`` may wait in the run (``fold_run`` takes it, or hands back)."""
        k = rec["k"]
        return (k == "gpu" or (k == "series" and rec.get("step") is not None)) and (
            self.rows < MAX_RUN
        )

    def takes(self, b: Any) -> bool:
        """Whether the batch ``b`` may join the run: the same rank and columns, room left."""
        first = self.parts[0]
        return (b.rank == first.rank and b.agg is None and b.arr is None and first.agg is None
                and first.arr is None and (b.seq_sq is None) == (first.seq_sq is None)
                and self.rows < MAX_RUN)  # fmt: skip

    def add(self, item: Any) -> None:
        self.parts.append(item)
        if item.__class__ is not dict:
            self.rows += len(item)

    def take(self) -> list:
        """The parts held, in log order; none held after."""
        parts, self.parts, self.rows = self.parts, [], 0
        return parts


def _flush(eng: Engine, parts: list, charted: list, start: float | None, reader: Any) -> Any:
    """Yield the points of a held run (:class:`_Run`), folded at once where ``fold_run``
    takes it; else its first batch and the records after it as the log gave them, and the
    rest folded at once again (the log's first rows: no step clock before them), else a part
    at a time; returns the run's start (s)."""
    if len(parts) > 1:
        got = yield from _fold_run(eng, parts, charted, start, reader)
        if got is not None:
            return got
        k = next((k for k in range(1, len(parts)) if parts[k].__class__ is not dict), len(parts))
        start = yield from _one_by_one(eng, parts[:k], charted, start, reader)
        parts = parts[k:]
        if len(parts) > 1:
            got = yield from _fold_run(eng, parts, charted, start, reader)
            if got is not None:
                return got
    return (yield from _one_by_one(eng, parts, charted, start, reader))


def _one_by_one(eng: Engine, parts: list, charted: list, start: float | None, reader: Any) -> Any:
    """Yield the points of ``parts`` one at a time, as the log gave them; returns the run's
    start (s)."""
    for part in parts:
        if part.__class__ is dict:
            start = yield from _record(eng, part, charted, start, reader)
        else:
            start = yield from _steps(eng, part, charted, start, reader)
    return start


def _fold_run(eng: Engine, parts: list, charted: list, start: float | None, reader: Any) -> Any:
    """Yield the points of ``parts`` folded as one run; returns the run's start (s), or None
    (nothing yielded, nothing changed) when ``fold_run`` does not take it."""
    b, cuts = _joined(parts)
    tap: dict = {}
    between: list = []
    if start is None:
        start = eng.run.get("started", b.t[0])

    def apply(recs: list) -> None:
        between.append([p for rec in recs for p in _applied(eng, rec, charted, start, reader)[0]])

    if not fold_steps.fold_run(eng, b, cuts, apply, tap):
        return None
    table, lo = _step_rows(tap, start), 0
    for (row, _), pts in zip(cuts, between, strict=True):
        yield from _slice(table, lo, row)
        yield from pts
        lo = row
    yield from _slice(table, lo, len(b))
    return start


def _joined(parts: list) -> tuple[Steps, list]:
    """The Steps batches of ``parts`` as one batch, and ``fold_run``'s cuts: ``(row,
    records)``, the records that come before row ``row``."""
    bs: list = []
    cuts: list = []
    rows = 0
    for p in parts:
        if p.__class__ is not dict:
            bs.append(p)
            rows += len(p)
        elif cuts and cuts[-1][0] == rows:
            cuts[-1][1].append(p)
        else:
            cuts.append((rows, [p]))
    if len(bs) == 1:
        return bs[0], cuts
    one, cat = bs[0], chain.from_iterable
    seq = None if one.seq_sq is None else list(cat(b.seq_sq for b in bs))
    return Steps(one.v, one.rank, list(cat(b.t for b in bs)), list(cat(b.step for b in bs)),
                 list(cat(b.tokens for b in bs)), list(cat(b.samples for b in bs)),
                 seq), cuts  # fmt: skip


def _steps(eng: Engine, b: Any, charted: list, start: float | None, reader: Any) -> Any:
    """Fold one batch and yield its points (rows the fold does not take, as records);
    returns the run's start (s)."""
    i = 0
    while i < len(b):
        tap: dict = {}
        j = fold_steps.fold(eng, b, i, tap)
        if j == i:  # a row the engine takes as its record
            start = yield from _record(eng, b.row(i), charted, start, reader)
            i += 1
            continue
        if start is None:
            start = eng.run.get("started", b.t[i])
        yield from _slice(_step_rows(tap, start), 0, j - i)  # the clock's rows: fold takes no other
        i = j
    return start


def _record(eng: Engine, rec: dict, charted: list, start: float | None, reader: Any) -> Any:
    """Apply one record and yield its points; returns the run's start (s)."""
    got, start = _applied(eng, rec, charted, start, reader)
    yield from got
    return start


def _applied(eng: Engine, rec: dict, charted: list, start: float | None, reader: Any) -> tuple:
    """Apply one record: ``(its points, the run's start)``. A record the engine raises on is
    counted in ``reader`` and gives no point, as replay counts it."""
    timed_s = eng.clock.timed_s
    try:
        eng.apply(rec)
    except Exception as exc:  # a validated record never should (core/engine.py _fold)
        reader.count(rec["k"], f"apply failed: {type(exc).__name__}")
        charted.clear()
        return [], start
    if start is None:
        start = eng.run.get("started", rec["t"])
    timed = eng.clock.timed_s > timed_s  # a timed step of the step clock
    got = list(_points(rec, eng, charted, rec["t"] - start, timed))
    charted.clear()
    return got, start


def _slice(table: StepRows | list, lo: int, hi: int) -> Iterator[Point | StepRows]:
    """Rows ``lo`` to ``hi`` of a :func:`_step_rows` table."""
    if lo >= hi:
        return
    if table.__class__ is not StepRows:
        for row in table[lo:hi]:
            yield from row
    elif lo == 0 and hi == len(table.step):
        yield table
    else:
        yield StepRows(table.names, table.step[lo:hi], table.t[lo:hi], table.time[lo:hi],
                       [col[lo:hi] for col in table.cols])  # fmt: skip


def _step_rows(tap: dict, start: float) -> StepRows | list[list[Point]]:
    """The points of the clock's folded rows (``fold_steps.rows_left``): one :class:`StepRows`
    when every row gives the same series (the usual case), else each row's points."""
    steps, tokens, samples, charted = tap["steps"], tap["tokens"], tap["samples"], tap["charted"]
    sps = tap["samples_per_s"]
    if not all(tap["timed"]):
        sps = [r if ok else None for r, ok in zip(sps, tap["timed"], strict=True)]
    names, chart_cols = fold_steps.chart_columns(tap["chart"])
    m = len(steps)
    overflowed = any(math.inf in col for col in chart_cols)  # an MFU too large: no figure
    # tokens and samples are counts so far, never falling: the rows all have some, or none,
    # when the first and the last agree
    if (bool(tokens[0]) == bool(tokens[-1]) and bool(samples[0]) == bool(samples[-1])
            and charted.count(charted[0]) == m and sps.count(None) in (0, m)
            and not overflowed):  # fmt: skip
        names_out: list[str] = []
        cols: list[list] = []
        if tokens[0] or not samples[0]:  # a run fed no token ids has no tokens to chart
            names_out.append("tokens")
            cols.append(tokens)
        if charted[0]:
            names_out += names
            cols += chart_cols
        if samples[0]:
            names_out.append("samples")
            cols.append(samples)
        if sps[0] is not None:
            names_out.append("samples_per_s")
            cols.append(sps)
        ts = tap["t"]
        return StepRows(tuple(names_out), steps, list(map(sub, ts, repeat(start))), ts, cols)
    pos = [k for k in range(m) if charted[k]]  # the chart's columns hold the charted rows
    at = dict(zip(pos, range(len(pos)), strict=True))
    out = []
    for k in range(m):
        row = []
        if tokens[k] or not samples[k]:
            row.append(("tokens", tokens[k]))
        if charted[k]:
            row += [(name, col[at[k]]) for name, col in zip(names, chart_cols, strict=True)
                    if col[at[k]] < math.inf]  # fmt: skip
        if samples[k]:
            row.append(("samples", samples[k]))
        if sps[k] is not None:
            row.append(("samples_per_s", sps[k]))
        now = tap["t"][k]
        out.append([Point(name, steps[k], now - start, now, y, STEP) for name, y in row])
    return out


def _points(rec: dict, eng: Engine, charted: list, t: float, timed: bool) -> Iterator[Point]:
    kind, step, now = rec["k"], eng.clock.step, rec["t"]
    if kind == "series":
        # every name (the engine charts the first 64 only), at the engine's step rule
        s = rec.get("step")
        at = s if s is not None and 0 <= s < MAX_COUNT else step
        name = rec["name"]  # one named as a series of ours: said apart from it
        yield Point(f"{name} (training code)" if ours(name) or name in OWN else name, at, t,
                    now, float(rec["value"]), STEP)  # fmt: skip
    elif kind == "gpu":
        for name, y in charted:
            yield Point(name, step, t, now, y, TIME)
    elif kind == "step" and rec["rank"] == eng.clock_rank:
        c = eng.clock
        if c.tokens or not c.samples:  # a run fed no token ids has no tokens to chart
            yield Point("tokens", step, t, now, c.tokens, STEP)
        for name, y in charted:  # tokens_per_s, then mfu/<c>
            yield Point(name, step, t, now, y, STEP)
        if c.samples:
            yield Point("samples", step, t, now, c.samples, STEP)
        rate = eng.counts.rate(eng.world, samples=True) if timed else None
        if rate is not None:  # computed here, not per step in the live engine
            yield Point("samples_per_s", step, t, now, rate, STEP)
