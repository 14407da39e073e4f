"""Finished runs out to files and trackers: CSV, W&B, MLflow.

Each target is one module with ``export(run, out=..., ...) -> str`` (where it wrote), called by
``tm export`` (:mod:`trainmeter.commands.export`). They read the run folder only: the full
resolution series come from ``run.jsonl`` (:mod:`trainmeter.exports.points`), the summary
figures from the passport the supervisor wrote
(:mod:`trainmeter.supervisor.passport_files`). Trackers are imported
inside the function that needs them; a missing one raises :class:`MissingPackage`.
"""

from __future__ import annotations

import importlib
from types import ModuleType


class MissingPackage(RuntimeError):
    """A target's package is not installed; the message is the one line to print."""


def require(module: str, target: str, pip_name: str | None = None) -> ModuleType:
    """Import ``module`` for ``tm export TARGET``.

    Raises:
        MissingPackage: not installed; the message says which ``pip install`` fixes it.
    """
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingPackage(
            f"export {target} needs the {pip_name or module} package: "
            f"pip install {pip_name or module}"
        ) from None
