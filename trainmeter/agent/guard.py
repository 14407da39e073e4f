"""The never-raise invariant: nothing the agent runs ever raises into the training process.

Each entry point (a hook, emit, the sender thread, the bootstrap) catches its own failure,
reports it once on stderr, and goes quiet: ``failed(name, exc)`` marks that entry point off.
"""

from __future__ import annotations

import sys

_off: set[str] = set()
_reported: set[str] = set()


def is_off(name: str) -> bool:
    """True once entry point ``name`` has failed (it then does nothing)."""
    return name in _off


def failed(name: str, exc: BaseException) -> None:
    """Turn entry point ``name`` off and print one line about it; never raises."""
    _off.add(name)
    warn_once(name, f"{name} stopped after an internal error: {type(exc).__name__}: {exc}")


def revive(name: str) -> None:
    """Turn entry point ``name`` back on (a notebook's sender pointed at a new supervisor)."""
    _off.discard(name)


def warn_once(key: str, text: str) -> None:
    """Print ``[trainmeter] text`` to stderr the first time ``key`` is seen; never raises."""
    if key in _reported:
        return
    _reported.add(key)
    try:
        print(f"[trainmeter] {text} (training continues; trainmeter stays quiet)", file=sys.stderr)
    except Exception:
        pass
