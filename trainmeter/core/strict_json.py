"""Strict JSON of a snapshot or a passport: a non-finite float is written as null.

A figure computed from finite inputs can still overflow (a rate of 1e301 tokens/s times FLOPs
per token); Python's ``json`` would write ``Infinity``, which no JSON reader takes (a browser's
``JSON.parse`` refuses it). Such a figure is written as unknown. Standard library only.
"""

from __future__ import annotations

import json
import math
from typing import Any


def dumps(obj: Any, **kw: Any) -> str:
    """``json.dumps(obj, allow_nan=False, **kw)``, with each NaN or infinite float as null.

    Raises: TypeError, as ``json.dumps`` does, for what JSON cannot hold.
    """
    try:
        return json.dumps(obj, allow_nan=False, **kw)
    except ValueError:  # a non-finite float somewhere: copy with nulls (rare, so not first)
        return json.dumps(finite(obj), allow_nan=False, **kw)


def finite(obj: Any) -> Any:
    """``obj`` (dicts, lists and tuples of JSON values) with each NaN or infinite float None."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj
