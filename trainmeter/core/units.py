"""Reading and writing the numbers people type and read: counts, FLOP/s, SI, durations.

Standard library only. Definitions: docs/spec.md "Numbers" ("Units").
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

# Count suffixes: B (billion) and G (giga) are the same 1e9; M is mega, never milli.
_COUNT_SUFFIX = {"": 0, "k": 3, "m": 6, "b": 9, "g": 9, "t": 12}
_FLOPS_SUFFIX = {"": 0, "k": 3, "m": 6, "g": 9, "t": 12, "p": 15, "e": 18}
_NUMBER = r"[+-]?(?:\d+(?:_\d+)*(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?"
_COUNT_RE = re.compile(rf"\s*({_NUMBER})\s*([kmbgt]?)\s*", re.IGNORECASE)
_FLOPS_RE = re.compile(rf"\s*({_NUMBER})\s*([kmgtpe]?)\s*(?:flop(?:s|/s)?)?\s*", re.IGNORECASE)
_COUNT_FORMS = (
    "a whole number with an optional K/M/B/G/T suffix (20B, 1.5M, 500k), "
    "an exponent (2e10) or underscores (20_000)"
)
_FLOPS_FORMS = (
    "a number of FLOP/s with an optional K/M/G/T/P/E prefix and optional FLOPS or FLOP/s unit "
    "(312T, 312e12, 312 TFLOPS, 989.5 TFLOP/s, 1.5P)"
)
_SI_PREFIXES = ("", "k", "M", "G", "T", "P", "E", "Z", "Y")
_MIN_PEAK = 1e9  # no accelerator peaks below 1 GFLOP/s: a smaller figure lacks its unit


def _decimal(number: str) -> Decimal:
    return Decimal(number.replace("_", ""))


def parse_count(text: str | int, *, positive: bool = False) -> int:
    """A count (tokens, steps, parameters) from text such as "20B", "1.5M", "2e10", "20_000".

    Inputs: ``text``, a string (an int passes through); ``positive`` rejects zero and negatives.
    Rule: decimal number times 10**3/6/9/9/12 for K/M/B/G/T (case-insensitive: "m" is million),
    computed exactly (``decimal``), and the result must be a whole number.
    Source: SI prefixes (BIPM SI Brochure, 9th ed., table 7) plus B for billion as used for
    token and parameter counts.
    Raises: ValueError naming the bad text and the accepted forms; also for a fractional result
    ("1.5" tokens) and, with ``positive=True``, for a result <= 0.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    elif isinstance(text, str):
        value = _parse_count_text(text)
    else:
        raise ValueError(f"cannot read {text!r} as a count; use {_COUNT_FORMS}")
    if positive and value <= 0:
        raise ValueError(f"{text!r} must be a count > 0")
    return value


def _parse_count_text(text: str) -> int:
    m = _COUNT_RE.fullmatch(text)
    if m is None:
        raise ValueError(f"cannot read {text!r} as a count; use {_COUNT_FORMS}")
    try:
        value = _decimal(m.group(1)).scaleb(_COUNT_SUFFIX[m.group(2).lower()])
    except InvalidOperation:
        raise ValueError(f"cannot read {text!r} as a count; use {_COUNT_FORMS}") from None
    if value != value.to_integral_value():
        raise ValueError(f"{text!r} is not a whole count; use {_COUNT_FORMS}")
    return int(value)


def parse_flops(text: str | float) -> float:
    """A FLOP/s figure (a declared peak) from text such as "312T", "312e12", "312 TFLOPS".

    Inputs: ``text``, a string (a number passes through, in FLOP/s).
    Rule: number times 10**3/6/9/12/15 for K/M/G/T/P (case-insensitive), then an optional unit
    word "FLOPS", "FLOP/s" or "FLOPs"; result in FLOP/s.
    Source: SI prefixes (BIPM SI Brochure, 9th ed., table 7).
    Raises: ValueError naming the bad text and the accepted forms; also for a result that is
    not finite or below 1 GFLOP/s (almost surely a missing prefix: "312" meant "312T").
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    elif isinstance(text, str):
        m = _FLOPS_RE.fullmatch(text)
        if m is None or not m.group(1):
            raise ValueError(f"cannot read {text!r} as FLOP/s; use {_FLOPS_FORMS}")
        value = float(_decimal(m.group(1)).scaleb(_FLOPS_SUFFIX[m.group(2).lower()]))
    else:
        raise ValueError(f"cannot read {text!r} as FLOP/s; use {_FLOPS_FORMS}")
    if not math.isfinite(value) or value < _MIN_PEAK:
        raise ValueError(
            f"{text!r} is {value!r} FLOP/s, not a plausible peak (>= 1 GFLOP/s); "
            f"did you mean {text}T? Use {_FLOPS_FORMS}"
        )
    return value


def _significant(value: float, digits: int) -> str:
    """``value`` (>= 0) with ``digits`` significant digits, trailing zeros kept."""
    if value == 0:
        return "0"
    decimals = max(digits - 1 - math.floor(math.log10(value)), 0)
    return f"{value:.{decimals}f}"


def format_si(x: float | None, unit: str = "", digits: int = 3) -> str:
    """``x`` with an SI prefix and ``digits`` significant digits: "5.83 GFLOP", "3.05 k tokens/s".

    Inputs: ``x`` (any unit, None for missing); ``unit`` appended after the prefix (joined to
    it when the unit starts with a capital letter, as in "GFLOP", "TB/s", "kW"; separated by a
    space otherwise, as in "k tokens/s"); ``digits`` significant digits (>= 1).
    Rule: the largest prefix k, M, G, T, P, E, Z, Y keeping the mantissa >= 1; no prefix below
    1000 (and none below 1: 0.452 stays "0.452").
    Source: SI prefixes (BIPM SI Brochure, 9th ed., table 7).
    Returns "n/a" for None or NaN; "inf ..." for infinities. Raises ValueError if digits < 1.
    """
    if isinstance(digits, bool) or not isinstance(digits, int) or digits < 1:
        raise ValueError(f"digits must be an int >= 1, got {digits!r}")
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    sign = "-" if x < 0 else ""
    size = abs(float(x))
    if math.isinf(size):
        return _join(f"{sign}inf", "", unit)
    step = min(math.floor(math.log10(size) / 3), len(_SI_PREFIXES) - 1) if size >= 1000 else 0
    text = _significant(size / 10 ** (3 * step), digits)
    if float(text) >= 1000 and step < len(_SI_PREFIXES) - 1:
        step += 1
        text = _significant(float(text) / 1000, digits)
    return _join(sign + text, _SI_PREFIXES[step], unit)


def _join(number: str, prefix: str, unit: str) -> str:
    if not unit:
        return f"{number} {prefix}" if prefix else number
    if prefix and not unit[0].isupper():
        return f"{number} {prefix} {unit}"
    return f"{number} {prefix}{unit}"


def _round_half_up(x: float) -> int:
    return math.floor(x + 0.5)


def format_duration(seconds: float | None) -> str:
    """A duration for people: "45.2 s", "3 min 07 s", "1 h 02 min", "2 d 03 h".

    Inputs: ``seconds`` (s; None for missing).
    Rule: under a minute, one decimal of seconds; under an hour, minutes and seconds; under a
    day, hours and minutes; beyond, days and hours. Each rounds half up at its last unit, and a
    value that rounds up to the next unit is shown in it ("59.97 s" -> "1 min 00 s").
    Source: definition.
    Returns "n/a" for None, NaN or infinity. Raises ValueError for a negative duration.
    """
    if seconds is None:
        return "n/a"
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise ValueError(f"seconds must be a number, got {seconds!r}")
    if not math.isfinite(seconds):
        return "n/a"
    if seconds < 0:
        raise ValueError(f"a duration cannot be negative, got {seconds!r}")
    if seconds < 59.95:
        return f"{seconds:.1f} s"
    total_s = _round_half_up(seconds)
    if total_s < 3600:
        minutes, secs = divmod(total_s, 60)
        return f"{minutes} min {secs:02d} s"
    total_min = _round_half_up(seconds / 60)
    if total_min < 24 * 60:
        hours, minutes = divmod(total_min, 60)
        return f"{hours} h {minutes:02d} min"
    days, hours = divmod(_round_half_up(seconds / 3600), 24)
    return f"{days} d {hours:02d} h"


__all__ = ["format_duration", "format_si", "parse_count", "parse_flops"]


def parse_flops_budget(text: str) -> float:
    """A training FLOPs budget (``--budget-flops``), read like a peak (:func:`parse_flops`).

    Returns:
        FLOPs (float).
    Raises:
        ValueError: not a FLOPs count, with the accepted forms.
    """
    try:
        return parse_flops(text)
    except ValueError:
        raise ValueError(f"cannot read --budget-flops {text!r} as a FLOPs count; use a number "
                         "of FLOPs (at least 1e9) with an optional K/M/G/T/P/E prefix: 1e18, "
                         "250P, 2.5E, 3e21 FLOPs") from None  # fmt: skip
