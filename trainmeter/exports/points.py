"""Every series of a run at full resolution, re-read from its log for ``tm export``.

The live chart keeps at most a few thousand points per series (core/timeline.py thins the
older half); the run log keeps every one. This module replays ``run.jsonl`` through the same
:class:`~trainmeter.core.engine.Engine` the live view used, taking each point the engine
would chart as it is made, and keeps none of them: memory stays constant however long the run.

Series, each point with rank 0's optimizer step and its time:

- what the training loop reported (``series`` records: ``train_loss``, ...), every name, at
  its own step (the step clock's when the record had none, as the engine does);
- ``tokens_per_s`` (tokens over the last 20 timed steps), at each of rank 0's timed steps;
- ``tokens``: tokens fed so far (all ranks), at each of rank 0's steps (none in a run whose
  inputs are not token ids: it has no tokens, not 0 of them);
- ``samples_per_s`` (every rank's own samples over its last 20 timed steps, summed: the
  snapshot's ``samples_per_s`` as it stood), at each of rank 0's timed steps, for any model;
- ``samples``: samples fed so far (all ranks), at each of rank 0's steps;
- ``mfu/<convention>`` for every convention with FLOPs per token, when the run has a peak, at
  each of rank 0's timed steps: the engine's own chart series, the snapshot's MFU as it stood
  at that step (``Engine._chart_mfu``), which the dashboard draws as MFU over time;
- ``gpu<i>/<field>`` (GPU-Util, SM activity, ...) at each sampler reading: these run on time
  (``axis`` ``"time"``), their step is the step clock's at the reading.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from trainmeter.core.engine import MAX_COUNT, Engine
from trainmeter.core.logread import LogReader
from trainmeter.core.timeline import Timeline

STEP, TIME = "step", "time"  # what a series is charted against


@dataclass(frozen=True, slots=True)
class Point:
    """One point of one series.

    Attributes:
        series: its name (``train_loss``, ``tokens_per_s``, ``mfu/hf``, ``gpu0/sm_active``).
        step: rank 0's optimizer step (steps).
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
    """A timeline that keeps nothing and hands each point the engine charts to ``out``."""

    def __init__(self, out: list) -> None:
        super().__init__()
        self.out = out

    def append(self, name: str, x: float, y: float) -> bool:
        self.out.append((name, y))
        return True


def iter_points(
    lines: Iterable[bytes | str], passport: dict[str, Any] | None = None
) -> Iterator[Point]:
    """The run's points in log order (malformed lines skipped, as replay skips them).

    Args:
        lines: the run log's lines.
        passport: the run's passport; not read (every series, MFU's too, is the engine's).
    """
    charted: list[tuple[str, float]] = []
    eng = Engine()
    eng.timeline = _Tap(charted)  # the engine's own chart points come out here
    start = None
    for rec in LogReader(lines):  # bad lines skipped, as replay skips them (core/logread.py)
        timed_s = eng.clock.timed_s
        eng.apply(rec)
        if start is None:
            start = eng.run.get("started", rec["t"])
        timed = eng.clock.timed_s > timed_s  # a timed step of the step clock
        yield from _points(rec, eng, charted, rec["t"] - start, timed)
        charted.clear()


def _points(rec: dict, eng: Engine, charted: list, t: float, timed: bool) -> Iterator[Point]:
    kind, step, now = rec["k"], eng.clock.step, rec["t"]
    if kind == "series":
        # every name (the engine charts the first 64 only), at the engine's step rule
        s = rec.get("step")
        at = s if s is not None and 0 <= s < MAX_COUNT else step
        yield Point(rec["name"], at, t, now, float(rec["value"]), STEP)
    elif kind == "gpu":
        for name, y in charted:
            yield Point(name, step, t, now, y, TIME)
    elif kind == "step" and rec["rank"] == 0:
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
