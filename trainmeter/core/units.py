"""Reading what people type (counts, FLOP/s, run names) and writing the numbers they read
(SI, durations).

Standard library only. Definitions: docs/spec.md "Numbers" ("Units").
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, DecimalException

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
# Upper bounds: a typed figure beyond them is a typo (1e400, a missing decimal point), and one
# accepted would overflow the float arithmetic of every figure built on it.
# Tokens, steps, parameters: 10**18 is over 60 000 times the largest published training set
# (Llama 3: 15.6e12 tokens, arXiv:2407.21783).
MAX_COUNT = 10**18
# A device's dense peak: 1e18 FLOP/s is over 100 times the fastest datasheet figure in
# core/peaks.py (B200 dense FP4, 9e15).
MAX_PEAK = 1e18
# A training budget: 1e30 FLOPs is over 1000 times the largest training compute estimated for
# any model to date (Epoch AI, "Notable AI Models": below 1e27 FLOP in 2025).
MAX_FLOPS_BUDGET = 1e30


def quoted(text: object, width: int = 40) -> str:
    """``text`` quoted for an error line, cut to ``width`` characters (a 5000-digit typo is
    named, not echoed)."""
    r = repr(text)
    return r if len(r) <= width else r[: width - 3] + "..."


def _exp(x: float) -> str:
    return f"{x:.0e}".replace("e+", "e")  # 1e18, as people type it


def _decimal(number: str) -> Decimal:
    return Decimal(number.replace("_", ""))


def parse_count(text: str | int, *, positive: bool = False, limit: int = MAX_COUNT) -> int:
    """A count (tokens, steps, parameters) from text such as "20B", "1.5M", "2e10", "20_000".

    Inputs: ``text``, a string (an int passes through); ``positive`` rejects zero and negatives;
    ``limit`` the largest count accepted (default :data:`MAX_COUNT`, 10**18).
    Rule: decimal number times 10**3/6/9/9/12 for K/M/B/G/T (case-insensitive: "m" is million),
    computed exactly (``decimal``), and the result must be a whole number.
    Source: SI prefixes (BIPM SI Brochure, 9th ed., table 7) plus B for billion as used for
    token and parameter counts.
    Raises: ValueError naming the bad text and the accepted forms; also for a fractional result
    ("1.5" tokens), a result beyond ``limit`` (or below ``-limit``: "1e400", "inf" is no
    number) and, with ``positive=True``, for a result <= 0.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        value = Decimal(text)
    elif isinstance(text, str):
        value = _parse_count_text(text)
    else:
        raise ValueError(f"cannot read {quoted(text)} as a count; use {_COUNT_FORMS}")
    if abs(value) > limit:  # compared as a Decimal: int(Decimal("1e99999999")) never ends
        raise ValueError(f"{quoted(text)} is beyond the largest count accepted, {_exp(limit)}")
    if positive and value <= 0:
        raise ValueError(f"{quoted(text)} must be a count > 0")
    return int(value)


def _parse_count_text(text: str) -> Decimal:
    m = _COUNT_RE.fullmatch(text)
    if m is None:
        raise ValueError(f"cannot read {quoted(text)} as a count; use {_COUNT_FORMS}")
    try:
        value = _decimal(m.group(1)).scaleb(_COUNT_SUFFIX[m.group(2).lower()])
        whole = value == value.to_integral_value()
    except DecimalException:  # an exponent beyond decimal's context (1e999999999)
        raise ValueError(
            f"{quoted(text)} is beyond the largest count accepted, {_exp(MAX_COUNT)}"
        ) from None
    if not whole:
        raise ValueError(f"{quoted(text)} is not a whole count; use {_COUNT_FORMS}")
    return value


def parse_flops(text: str | float, *, limit: float = MAX_PEAK) -> float:
    """A FLOP/s figure (a declared peak) from text such as "312T", "312e12", "312 TFLOPS".

    Inputs: ``text``, a string (a number passes through, in FLOP/s); ``limit`` the largest
    figure accepted (default :data:`MAX_PEAK`, 1e18 FLOP/s).
    Rule: number times 10**3/6/9/12/15 for K/M/G/T/P (case-insensitive), then an optional unit
    word "FLOPS", "FLOP/s" or "FLOPs"; result in FLOP/s.
    Source: SI prefixes (BIPM SI Brochure, 9th ed., table 7).
    Raises: ValueError naming the bad text and the accepted forms; also for a result that is
    not finite, above ``limit``, or below 1 GFLOP/s (almost surely a missing prefix: "312"
    meant "312T").
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = _to_float(text)
    elif isinstance(text, str):
        m = _FLOPS_RE.fullmatch(text)
        if m is None or not m.group(1):
            raise ValueError(f"cannot read {quoted(text)} as FLOP/s; use {_FLOPS_FORMS}")
        try:
            value = float(_decimal(m.group(1)).scaleb(_FLOPS_SUFFIX[m.group(2).lower()]))
        except DecimalException:  # an exponent beyond decimal's context
            value = math.inf
    else:
        raise ValueError(f"cannot read {quoted(text)} as FLOP/s; use {_FLOPS_FORMS}")
    if not math.isfinite(value) or value > limit:
        raise ValueError(
            f"{quoted(text)} is beyond the largest figure accepted, {_exp(limit)} FLOP/s"
        )
    if value < _MIN_PEAK:
        # a positive bare number most likely lacks its prefix ("312" for 312T); "-1T" or
        # "5MT" would be no better
        bare = value > 0 and str(text).strip()[-1:].isdigit()
        hint = f"did you mean {text}T? " if bare else ""
        raise ValueError(
            f"{quoted(text)} is {value!r} FLOP/s, not a plausible peak (>= 1 GFLOP/s); "
            f"{hint}Use {_FLOPS_FORMS}"
        )
    return value


def _to_float(x: float) -> float:
    try:
        return float(x)
    except OverflowError:  # an int beyond float range
        return math.inf


MAX_NAME = 200  # characters of a run name: it heads the page, the passport and tm ls


def flag_value(flag: str, parse, text: str):
    """``parse(text)`` for the option ``flag`` (``"--budget-tokens"``): its ValueError names the
    flag, so the one error line says which option was refused.

    Raises: ValueError "--flag: <why>".
    """
    try:
        return parse(text)
    except ValueError as exc:
        why = str(exc)
        raise ValueError(why if why.startswith(flag) else f"{flag}: {why}") from None


def run_name(text: str) -> str:
    """A run name (``--name`` of ``tm``, ``tm attach`` and ``%%trainmeter``): 1 to
    :data:`MAX_NAME` printable characters, returned unchanged.

    Raises: ValueError naming the rule.
    """
    if not isinstance(text, str) or not 0 < len(text) <= MAX_NAME or not text.isprintable():
        raise ValueError(f"{quoted(text)}: a run name is 1 to {MAX_NAME} printable "
                         "characters")  # fmt: skip
    return text


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
    1000 (and none below 1: 0.452 stays "0.452"); from 1000 Y on, scientific with no prefix
    ("1.00e+30 FLOP").
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
    if float(text) >= 1000:  # past the largest prefix: scientific, as js/format.js si writes it
        return _join(f"{sign}{size:.{digits - 1}e}", "", unit)
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


__all__ = ["format_duration", "format_si", "parse_count", "parse_flops", "quoted"]


def parse_token_budget(text: str) -> int:
    """A token budget (``--budget-tokens`` of ``tm`` and ``%%trainmeter``): a count > 0
    (:func:`parse_count`, at most :data:`MAX_COUNT`).

    Raises: ValueError as :func:`parse_count`.
    """
    return parse_count(text, positive=True)


def parse_flops_budget(text: str) -> float:
    """A training FLOPs budget (``--budget-flops``), read like a peak (:func:`parse_flops`),
    at most :data:`MAX_FLOPS_BUDGET` (1e30 FLOPs).

    Returns:
        FLOPs (float).
    Raises:
        ValueError: not a FLOPs count between 1e9 and 1e30, with the accepted forms.
    """
    try:
        return parse_flops(text, limit=MAX_FLOPS_BUDGET)
    except ValueError:
        raise ValueError(f"cannot read {quoted(text)} as a FLOPs count; use a "
                         "number of FLOPs (1e9 to 1e30) with an optional K/M/G/T/P/E prefix: 1e18, "
                         "250P, 2.5E, 3e21 FLOPs") from None  # fmt: skip
