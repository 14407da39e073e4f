"""A finished run, replayed from its log into the widget the live cell uses.

Replay is the live code path run again: :func:`trainmeter.core.engine.replay` folds the run log
through :class:`~trainmeter.core.engine.Engine`, the class the supervisor feeds as records
arrive, and its :class:`~trainmeter.core.timeline.Timeline` rebuilds the chart history point by
point. So a finished run shows the snapshot and the chart history its live view ended with
(``tests/integration/test_replay.py`` compares them field by field; docs/replay.md).

- :func:`load`: a run (id, id prefix, folder or ``run.jsonl``) -> :class:`Replayed`, the
  snapshot and the chart history; it also has the read side of
  :class:`~trainmeter.supervisor.live.Live` that the web page serves (``tm view --web``);
- :func:`show_run`: the widget for it (``trainmeter.show_run``);
- :func:`series_table`, :func:`text_table`, :func:`passport_markdown`: what the replay
  notebook's later cells show (``notebooks/replay.ipynb``).

Nothing here imports anywidget or IPython until :func:`show_run` is called, so ``tm view
--web`` works without a notebook stack.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainmeter.core.engine import replay
from trainmeter.core.logread import LogReader
from trainmeter.supervisor.store import find_run

LOG = "run.jsonl"


@dataclass(frozen=True)
class Replayed:
    """One finished run as its live view ended: ``snapshot`` (docs/spec.md "Snapshot") and
    ``history`` (``{"seq": n, "series": {name: [[x...], [y...]]}}``, ``Timeline.full()``).

    It answers what :class:`trainmeter.web.server.WebServer` asks a ``Live`` (``update``,
    ``info``, ``wait_change``, ``closed``): a run that no longer changes, so an open page gets
    the whole state, then the stream's ``end``.
    """

    folder: Path
    snapshot: dict[str, Any]
    history: dict[str, Any]
    closed = True  # nothing more will come: the page's event stream ends after the first state

    @property
    def log(self) -> Path:
        return self.folder / LOG

    def info(self) -> dict[str, Any]:
        run = self.snapshot.get("run") or {}
        return {"run_id": run.get("id"), "segment": run.get("segment"), "log": str(self.log)}

    def update(self, seq: int) -> dict[str, Any]:
        """``Live.update``'s shape: every point when ``seq < 0``, else none (none are new)."""
        points = self.history if seq < 0 else {"seq": self.history["seq"], "series": {}}
        return {"snapshot": self.snapshot, "points": points, "full": seq < 0}

    def wait_change(self, version: int, timeout: float) -> int:
        """The version never changes (0): never waits."""
        return 0


def load(run: str | Path | None = None, dir: str | Path | None = None) -> Replayed:
    """Replay a run's log.

    Args:
        run: a run id, an id prefix, a run folder or its ``run.jsonl``; None: the newest run.
        dir: the ``.trainmeter`` folder runs are looked up in (default ``./.trainmeter``).

    Raises:
        FileNotFoundError: no such run (the message names what was looked for and where).
    """
    folder = find_run(str(run) if run is not None else None, dir)
    log = folder / LOG
    # bad lines skipped and counted (core/logread.py); a log written in the last 30 s is a
    # live run's, any other without run_end "ended without a close"; OSError: unreadable
    eng = replay(log, now=time.time())
    snap = eng.snapshot()
    snap["run"]["log"] = str(log)  # as Live.snapshot and `tm replay` say where the log is
    return Replayed(folder, snap, eng.timeline.full())


def show_run(run: str | Path | None = None, *, dir: str | Path | None = None,
             display: bool = True):  # fmt: skip
    """Show a finished run in the trainmeter widget: the snapshot and the whole chart history
    its live view ended with, not live.

    Args:
        run, dir: as in :func:`load` (None: the newest run under ``./.trainmeter``).
        display: display the widget in the notebook now (assign the result, or a cell that
            ends with the call shows it twice).

    Returns:
        The :class:`~trainmeter.jupyter.widget.TrainmeterWidget`.

    Raises:
        FileNotFoundError: no such run; ``widget.BundleMissingError``: the front-end bundle
        was not built.
    """
    from trainmeter.jupyter.widget import TrainmeterWidget

    done = load(run, dir)
    widget = TrainmeterWidget()
    widget.set_history(done.history)
    widget.update(done.snapshot)
    if display:
        from IPython.display import display as show

        show(widget)
    return widget


def _records(folder: Path):
    """The run log's records in order; bad lines are skipped, as replay skips them."""
    yield from LogReader(folder / LOG)


def series_table(run: str | Path | None = None, dir: str | Path | None = None) -> dict:
    """Every value the training loop reported, one row per step: ``{"step": [s...], name:
    [value or None...]}``, rows in step order, names in order of first appearance (a dict of
    columns, as ``pandas.DataFrame`` takes it).

    Read from the run log, so nothing is thinned as in the chart. A value sent without a step
    goes to rank 0's step at the time, and a later value of the same name and step replaces an
    earlier one: the engine's rules (docs/spec.md "Snapshot", ``series``).

    Raises:
        FileNotFoundError: as :func:`load`.
    """
    folder = find_run(str(run) if run is not None else None, dir)
    rows: dict[int, dict[str, float]] = {}
    names: dict[str, None] = {}
    clock = 0  # rank 0's optimizer steps so far
    for rec in _records(folder):
        if rec["k"] == "step" and rec.get("rank") == 0:
            clock = rec["step"]
        elif rec["k"] == "series":
            step = rec.get("step")
            names.setdefault(rec["name"])
            rows.setdefault(clock if step is None else step, {})[rec["name"]] = rec["value"]
    steps = sorted(rows)
    table: dict[str, list] = {"step": steps}
    for name in names:
        table[name] = [rows[s].get(name) for s in steps]
    return table


def text_table(columns: dict[str, list], last: int = 20) -> str:
    """``columns`` (as :func:`series_table` gives) as aligned text: its last ``last`` rows,
    numbers to 6 significant digits, a missing value as ``-``."""
    names = list(columns)
    n = len(columns[names[0]]) if names else 0
    start = max(0, n - last)

    def cell(v: Any) -> str:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "-"
        return f"{v:.6g}" if isinstance(v, float) else str(v)

    body = [[cell(columns[c][i]) for c in names] for i in range(start, n)]
    width = [max(len(r[j]) for r in [names, *body]) for j in range(len(names))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, width, strict=True)) for r in [names, *body]]
    shown = f"the last {n - start} of {n} rows" if start else f"{n} rows"
    return "\n".join([*lines, f"({shown})"])


def passport_markdown(snapshot: dict[str, Any]) -> str:
    """The run's passport as Markdown (:mod:`trainmeter.core.passport`): model size, tokens,
    FLOPs under each named convention, GPU-hours, energy, hardware, MFU with its convention."""
    from trainmeter._version import __version__
    from trainmeter.core import passport, passport_md

    return passport_md.markdown(passport.build(snapshot, version=__version__))
