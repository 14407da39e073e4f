"""Numbers as text for ``tm export csv``, a column at a time: each as Python writes it
(``str`` of an int, ``repr`` of a float: the shortest text that reads back as the same float).

Writing a float's text is most of an export's work (0.5 us each by ``repr``). With the
``fast`` extra installed (orjson, https://github.com/ijl/orjson), a column is written in one
C call. orjson writes the same shortest round-trip digits as ``repr`` but spells some numbers
its own way: ``0.00001`` for ``1e-05``, ``1e16`` for ``1e+16``, ``null`` for NaN and
infinity, ``true`` for True. A column whose text holds one of those spellings is written by
``repr`` instead, so an export's bytes never depend on whether the extra is installed
(tests/unit/test_numtext.py checks both ways on every kind of number).
"""

from __future__ import annotations

import re
from typing import Any

try:
    import orjson
except ImportError:  # the extra is optional: repr writes the same text, slower
    orjson = None


def json_text(items: list) -> bytes | None:
    """orjson's JSON text of ``items`` (a list of numbers, or of tuples of numbers), or None
    when orjson is not installed or a number in it is not spelled as Python writes it."""
    if orjson is None:
        return None
    try:
        out = orjson.dumps(items)
    except TypeError:  # an int over 64 bits, or something not a number
        return None
    # "e": an exponent, true or false; "n": null; "0.0000" at a number's start (after "[",
    # "," or "-"): a float below 1e-4 in full (10.00001 is spelled as repr spells it)
    if b"e" in out or b"n" in out or (b"0.0000" in out and _TINY.search(out)):
        return None
    return out


_TINY = re.compile(rb"[\[,-]0\.0000")


def loads() -> Any:
    """orjson's parser for the log's lines (``LogReader``'s ``loads``: it reads a line as
    ``json`` does, ``logread.parse`` says where it is tried), or None without the extra."""
    return None if orjson is None else orjson.loads


def fast() -> bool:
    """Whether the ``fast`` extra (orjson) is installed."""
    return orjson is not None
