"""A run folder as the exporters read it: its passport and its full-resolution points."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainmeter.exports.points import Point, StepRows, iter_points, iter_rows
from trainmeter.supervisor import passport_files


@dataclass(frozen=True)
class RunData:
    """One run folder (``.trainmeter/runs/<id>``).

    Attributes:
        folder: the run folder.
        passport: its ``passport.json``, or the passport rebuilt from the log.
        read: once :meth:`points` or :meth:`rows` has read the whole log, what its reader
            skipped (``engine.read_summary``: ``text`` says it); empty when nothing was.
    """

    folder: Path
    passport: dict[str, Any]
    read: dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def open(cls, folder: Path) -> RunData:
        """Read the passport (rebuilt when missing). Raises: OSError (unreadable log)."""
        return cls(Path(folder), passport_files.load(Path(folder))[0])

    @property
    def log(self) -> Path:
        return self.folder / "run.jsonl"

    @property
    def name(self) -> str:
        run = self.passport.get("run") or {}
        return str(run.get("name") or run.get("id") or self.folder.name)

    def points(self) -> Iterator[Point]:
        """Every point of every series, in log order (one pass over the log, constant memory).

        Raises: OSError when the log cannot be read.
        """
        yield from iter_points(self.log, self.passport, self.read)

    def rows(self) -> Iterator[Point | StepRows]:
        """:meth:`points`, a run of steps at a time where they give the same series
        (:func:`~trainmeter.exports.points.iter_rows`).

        Raises: OSError when the log cannot be read.
        """
        yield from iter_rows(self.log, self.read)
