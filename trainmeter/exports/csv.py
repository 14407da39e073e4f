"""``tm export csv``: every series in one long-format CSV (``series, step, t, value``).

One row per point (:mod:`trainmeter.exports.points`): ``series`` its name (FLOPs and MFU
series carry their convention: ``mfu/hf``), ``step`` rank 0's optimizer step, ``t`` seconds
since the run started, ``value`` in the series' unit. Written with Python's :mod:`csv` module
(RFC 4180 quoting, so any series name reads back). ``--passport`` adds ``<stem>-passport.csv``
with the passport's figures as ``name, value`` rows (:func:`trainmeter.core.passport.flat`).
"""

from __future__ import annotations

import csv
from pathlib import Path

from trainmeter.core import passport as core_passport
from trainmeter.exports.run import RunData

HEADER = ("series", "step", "t", "value")


def export(run: RunData, out: str | None = None, with_passport: bool = False) -> str:
    """Write the CSV (default ``<run folder>/series.csv``); returns its path.

    Raises: OSError when the file cannot be written or the log read.
    """
    path = Path(out) if out else run.folder / "series.csv"
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(HEADER)
        w.writerows((p.series, p.step, repr(p.t), repr(p.value)) for p in run.points())
    if with_passport:
        config, summary = core_passport.flat(run.passport)
        side = path.with_name(f"{path.stem}-passport.csv")
        with open(side, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(("name", "value"))
            w.writerows({**config, **summary}.items())
        return f"{path} and {side}"
    return str(path)
