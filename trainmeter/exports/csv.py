"""``tm export csv``: every series in one long-format CSV (``series, step, t, value``).

One row per point (:mod:`trainmeter.exports.points`): ``series`` its name (FLOPs and MFU
series carry their convention: ``mfu/hf``), ``step`` rank 0's optimizer step, ``t`` seconds
since the run started, ``value`` in the series' unit. Written with Python's :mod:`csv` module
(RFC 4180 quoting, so any series name reads back). ``--passport`` adds ``<stem>-passport.csv``
with the passport's figures as ``name, value`` rows (:func:`trainmeter.core.passport.flat`).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from trainmeter.core import passport as core_passport
from trainmeter.exports.points import Point, StepRows
from trainmeter.exports.run import RunData

HEADER = ("series", "step", "t", "value")


def _step_rows(rows: StepRows) -> str:
    """The CSV rows of a :class:`StepRows`, the bytes ``csv.writer`` writes for each point
    (``str`` of a number is its ``repr``; a name quoted as the writer quotes it), formatted
    with one ``%`` operation."""
    line = "".join(_quoted(name).replace("%", "%%") + ",%s,%s,%s\r\n" for name in rows.names)
    per = 3 * len(rows.names)
    fields: list = [None] * (per * len(rows.step))
    t = list(map(repr, rows.t))  # once a row (its points share it): a float's repr is costly
    step = list(map(str, rows.step))  # and so is an int's str, 0.1 us
    for p, col in enumerate(rows.cols):  # row by row: each point's step, t and value
        fields[3 * p :: per] = step
        fields[3 * p + 1 :: per] = t
        fields[3 * p + 2 :: per] = col
    return (line * len(rows.step)) % tuple(fields)


def _quoted(name: str) -> str:
    """``name`` as ``csv.writer`` writes a field (quoted only where it must be); kept for
    the names a run charts at every step (a few), looked up again for each batch."""
    got = _QUOTED.get(name)
    if got is None:
        out = io.StringIO()
        csv.writer(out, lineterminator="").writerow((name, 0))
        got = out.getvalue()[:-2]
        if len(_QUOTED) < 256:
            _QUOTED[name] = got
    return got


_QUOTED: dict[str, str] = {}


def export(run: RunData, out: str | None = None, with_passport: bool = False) -> str:
    """Write the CSV (default ``<run folder>/series.csv``); returns its path.

    Raises: OSError when the file cannot be written or the log read.
    """
    path = Path(out) if out else run.folder / "series.csv"
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(HEADER)
        for item in run.rows():
            if item.__class__ is Point:
                w.writerow((item.series, item.step, repr(item.t), repr(item.value)))
            else:  # a run of steps: their rows formatted at once, as the writer writes them
                f.write(_step_rows(item))
    if with_passport:
        config, summary = core_passport.flat(run.passport)
        side = path.with_name(f"{path.stem}-passport.csv")
        with open(side, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(("name", "value"))
            w.writerows({**config, **summary}.items())
        return f"{path} and {side}"
    return str(path)
