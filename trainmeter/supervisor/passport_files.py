"""``passport.md`` and ``passport.json`` in a run folder: written when a run closes, read (or
rebuilt from ``run.jsonl`` for an old or crashed run) by ``tm passport`` and ``tm export``.

A stored passport is shown as written only when this trainmeter wrote it in its own words: the
same version (``written_by``), every key this version writes, and the same revision of the
reasons' words (``wording``, ``core/reasons.py`` ``WORDING``). Any other is rebuilt from the log,
so that a run closed before a change of words reads as the dashboard, which replays the log,
reads it; when the log cannot be read, the stored one is shown and :func:`load` says so.

The figures come from :mod:`trainmeter.core.passport` (pure); this module only touches files.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from trainmeter._version import __version__
from trainmeter.core import passport, passport_md, reasons, strict_json
from trainmeter.core.engine import replay

PASSPORT_JSON = "passport.json"
PASSPORT_MD = "passport.md"


def write(folder: Path, snap: dict[str, Any], version: str = __version__) -> dict[str, Any]:
    """Build the passport of ``snap`` and write both files into ``folder``.

    Each file is written to a temporary name and renamed, so a reader never sees half a file.
    Returns: the passport dict. Raises: OSError when the folder refuses the write.
    """
    p = passport.build(snap, version=version)
    _replace(folder / PASSPORT_JSON, strict_json.dumps(p, indent=2) + "\n")
    _replace(folder / PASSPORT_MD, passport_md.markdown(p))
    return p


def _replace(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def rebuild(folder: Path, version: str = __version__, full: bool = False) -> dict[str, Any]:
    """The passport rebuilt from ``folder/run.jsonl`` (replay, as ``tm replay`` does; ``full``:
    from every line, as ``tm replay --full``).

    Raises: OSError when the log cannot be read.
    """
    # bad lines skipped and counted (core/logread.py); a log written in the last 30 s is a
    # live run's (running), any other without run_end "ended without a close"
    snap = replay(folder / "run.jsonl", now=time.time(), full=full).snapshot()
    return passport.build(snap, version=version)


def stale(p: Any, version: str = __version__) -> str | None:
    """Why a stored passport is not what this version would write ("was written by trainmeter
    0.0.9, not 0.1.0", "lacks wording", ...), or None when it is."""
    if not isinstance(p, dict) or p.get("passport") != passport.PASSPORT_VERSION:
        return "is in another passport format"
    if p.get("written_by") != version:
        return f"was written by trainmeter {str(p.get('written_by'))[:40]}, not {version}"
    lacks = [k for k in passport.build({}, version=version) if k not in p]
    if lacks:
        return f"lacks {', '.join(lacks[:5])}{', ...' if len(lacks) > 5 else ''}"
    if p.get("wording") != reasons.WORDING:
        return "was written in other words for missing figures"
    return None


def load(folder: Path, version: str = __version__) -> tuple[dict[str, Any], str | None]:
    """``(passport, said)``: the run folder's ``passport.json`` with ``said`` None when this
    version wrote it in its own words (:func:`stale`); else the passport rebuilt from the log,
    or, when the log cannot be read, the stored one as written, with ``said`` a sentence saying
    which it is and why ("... has no passport; rebuilt from its log").

    Raises: OSError when neither the passport nor the log can be read.
    """
    try:
        stored = json.loads((folder / PASSPORT_JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # none, or unreadable: rebuild it
        return rebuild(folder, version), f"{folder} has no passport; rebuilt from its log"
    why = stale(stored, version)
    if why is None:
        return stored, None
    try:
        return rebuild(folder, version), f"{folder}/{PASSPORT_JSON} {why}; rebuilt from its log"
    except OSError as exc:
        if not isinstance(stored, dict):
            raise
        return stored, (f"{folder}/{PASSPORT_JSON} {why}, and its log cannot be read "
                        f"({exc.strerror or exc}): shown as written")  # fmt: skip
