"""``tm export wandb``: the run as an offline Weights & Biases run, written by the real
``wandb`` package (no account, no network: ``wandb sync DIR`` uploads it later).

- **History**: every series at full resolution (:mod:`trainmeter.exports.points`). W&B keeps
  one history row per ``log`` call; series charted against the optimizer step carry a
  ``step`` column and series charted against time (the GPU counters) a ``time_s`` column
  (seconds since the run started), each declared as its series' x-axis with
  ``define_metric(name, step_metric=...)``, W&B's way to chart series on their own axes.
  Consecutive points on the same step (or the same reading) share one row.
- **Config**: the run's facts from the passport, among them ``convention`` (the one shown
  first) and ``conventions`` (every name); **summary**: the passport's figures, each FLOPs and
  MFU figure under a name carrying its convention (``flops_spent/hf``, ``mfu_avg/titan``)
  (:func:`trainmeter.core.passport.flat`). W&B also keeps each series' last value there.
- The W&B run ends with the training run's exit code (0 when it finished), so a failed
  training run shows as failed. W&B's own system metrics, code and git capture are off: the
  figures are the training run's, not those of the machine that exports.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from trainmeter.core.passport import flat
from trainmeter.exports import require
from trainmeter.exports.points import STEP, TIME, Point
from trainmeter.exports.run import RunData

X_AXIS = {STEP: "step", TIME: "time_s"}  # the x-axis column of each kind of series


def export(run: RunData, out: str | None = None, project: str = "trainmeter") -> str:
    """Write the offline run under ``<out or run folder>/wandb/``; returns its folder.

    Raises:
        MissingPackage: wandb is not installed.
        OSError: the folder cannot be written or the log read.
    """
    wandb = require("wandb", "wandb")
    config, summary = flat(run.passport)
    root = Path(out) if out else run.folder
    root.mkdir(parents=True, exist_ok=True)
    settings = wandb.Settings(
        silent=True,
        console="off",
        x_disable_stats=True,
        x_disable_machine_info=True,
        x_disable_meta=True,
        save_code=False,
        disable_git=True,
        x_save_requirements=False,
    )
    wb = wandb.init(
        mode="offline",
        dir=str(root),
        project=project,
        name=run.name,
        config=config,
        settings=settings,
    )
    code = 1
    try:
        for axis in X_AXIS.values():
            wb.define_metric(axis, hidden=True)
        declared: set[str] = set()
        for row, axis in rows(run.points()):
            for name in row.keys() - declared - set(X_AXIS.values()):
                wb.define_metric(name, step_metric=X_AXIS[axis])
                declared.add(name)
            wb.log(row)
        wb.summary.update(summary)
        code = _exit_code(run.passport)
    finally:
        wb.finish(exit_code=code)
    return str(wb.settings.sync_dir)


def _exit_code(passport: dict) -> int:
    """The training run's exit code; 0 when it finished without one, 1 when it failed."""
    run = passport.get("run") or {}
    code = run.get("exit_code")
    if isinstance(code, int) and not isinstance(code, bool):
        return code
    return 0 if run.get("state") in ("finished", "running", "idle", None) else 1


def _name(series: str) -> str:
    """A series name that cannot be taken for an x-axis column."""
    return f"series/{series}" if series in X_AXIS.values() else series


def rows(points: Iterable[Point]) -> Iterator[tuple[dict, str]]:
    """History rows ``({x-axis column: x, series: value, ...}, axis)``: consecutive points
    with the same axis and x (step, or time of the reading) share a row until a series
    repeats."""
    row: dict = {}
    key = None
    for p in points:
        k = (p.axis, p.step if p.axis == STEP else p.t)
        name = _name(p.series)
        if k != key or name in row:
            if row:
                yield row, key[0]
            row, key = {X_AXIS[p.axis]: k[1]}, k
        row[name] = p.value
    if row:
        yield row, key[0]
