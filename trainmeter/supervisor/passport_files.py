"""``passport.md`` and ``passport.json`` in a run folder: written when a run closes, read (or
rebuilt from ``run.jsonl`` for an old or crashed run) by ``tm passport`` and ``tm export``.

The figures come from :mod:`trainmeter.core.passport` (pure); this module only touches files.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from trainmeter._version import __version__
from trainmeter.core import passport, passport_md
from trainmeter.core.engine import replay

PASSPORT_JSON = "passport.json"
PASSPORT_MD = "passport.md"


def write(folder: Path, snap: dict[str, Any], version: str = __version__) -> dict[str, Any]:
    """Build the passport of ``snap`` and write both files into ``folder``.

    Each file is written to a temporary name and renamed, so a reader never sees half a file.
    Returns: the passport dict. Raises: OSError when the folder refuses the write.
    """
    p = passport.build(snap, version=version)
    _replace(folder / PASSPORT_JSON, json.dumps(p, indent=2) + "\n")
    _replace(folder / PASSPORT_MD, passport_md.markdown(p))
    return p


def _replace(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def rebuild(folder: Path, version: str = __version__) -> dict[str, Any]:
    """The passport rebuilt from ``folder/run.jsonl`` (replay, as ``tm replay`` does).

    Raises: OSError when the log cannot be read.
    """
    # bad lines skipped and counted (core/logread.py); a log written in the last 30 s is a
    # live run's (running), any other without run_end "ended without a close"
    snap = replay(folder / "run.jsonl", now=time.time()).snapshot()
    return passport.build(snap, version=version)


def load(folder: Path) -> tuple[dict[str, Any], bool]:
    """``(passport, rebuilt)``: the run folder's ``passport.json``, else (none, or unreadable)
    the passport rebuilt from its log (``rebuilt`` True).

    Raises: OSError when neither the passport nor the log can be read.
    """
    try:
        p = json.loads((folder / PASSPORT_JSON).read_text(encoding="utf-8"))
        if isinstance(p, dict) and p.get("passport") == passport.PASSPORT_VERSION:
            return p, False
    except (OSError, ValueError, RecursionError):  # unreadable or not ours: rebuild it
        pass
    return rebuild(folder), True
