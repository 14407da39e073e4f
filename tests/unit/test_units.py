"""Parsing counts and FLOP/s, formatting SI values and durations (expected values by hand)."""

from __future__ import annotations

import math
import re

import pytest

from trainmeter.core.units import (
    MAX_FLOPS_BUDGET,
    format_duration,
    format_si,
    parse_count,
    parse_flops,
    parse_flops_budget,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("20B", 20 * 10**9),
        ("20b", 20 * 10**9),
        ("20G", 20 * 10**9),  # G and B are both 1e9
        ("1.5M", 1_500_000),  # 1.5 * 10^6
        ("1.5m", 1_500_000),  # m is million for counts, never milli
        ("500k", 500_000),
        ("2T", 2 * 10**12),
        ("2e10", 20 * 10**9),
        ("20_000", 20_000),
        ("7", 7),
        (" 20 B ", 20 * 10**9),
        ("0", 0),
        ("-5", -5),
        (12345, 12345),
    ],
)
def test_parse_count_reads_suffixes_exponents_and_underscores(text, expected):
    assert parse_count(text) == expected


@pytest.mark.parametrize("text", ["abc", "20X", "", "20BB", "2_0_", "1.5", "0.3k2", "1e"])
def test_parse_count_rejects_bad_text_naming_it_and_the_accepted_forms(text):
    with pytest.raises(ValueError) as info:
        parse_count(text)
    assert repr(text) in str(info.value)
    assert "K/M/B/G/T" in str(info.value)


@pytest.mark.parametrize("text", ["0", "-5", "-1B"])
def test_parse_count_positive_flag_rejects_zero_and_negatives(text):
    with pytest.raises(ValueError, match="> 0"):
        parse_count(text, positive=True)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("312T", 312e12),
        ("312e12", 312e12),
        ("312 TFLOPS", 312e12),
        ("312tflop/s", 312e12),
        ("989.5 TFLOP/s", 989.5e12),
        ("1.5P", 1.5e15),
        ("2.25 PFLOPS", 2.25e15),
        ("65 tflops", 65e12),
        ("500 GFLOPs", 500e9),
        ("2.5E", 2.5e18),  # exa: a FLOPs budget (--budget-flops 2.5E)
        ("2E18", 2e18),  # an exponent, not the exa prefix
        ("3e21 FLOPs", 3e21),
        (312e12, 312e12),
    ],
)
def test_parse_flops_reads_prefixes_and_unit_words(text, expected):
    # the exa forms are budgets, beyond a peak's bound: read with the budget's
    assert parse_flops(text, limit=MAX_FLOPS_BUDGET) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("1e400", "beyond the largest count accepted, 1e18"),  # float() of it is inf
        ("1e19", "beyond the largest count accepted, 1e18"),
        ("1e30", "beyond the largest count accepted, 1e18"),
        ("-1e19", "beyond the largest count accepted, 1e18"),
        ("1e999999999", "beyond the largest count accepted, 1e18"),  # decimal's Emax
        ("1e999999999B", "beyond the largest count accepted, 1e18"),  # scaleb overflows
        ("9" * 5000, "beyond the largest count accepted, 1e18"),
        ("inf", "cannot read 'inf' as a count"),
        ("nan", "cannot read 'nan' as a count"),
        ("-5", "must be a count > 0"),
    ],
)
def test_a_count_beyond_its_bound_or_not_finite_is_one_clear_error(text, said):
    with pytest.raises(ValueError, match=re.escape(said)) as err:
        parse_count(text, positive=True)
    assert len(str(err.value)) < 300  # a 5000-digit typo is named, not echoed


def test_the_count_bound_itself_is_accepted():
    assert parse_count("1e18") == 10**18 == parse_count(10**18)  # MAX_COUNT, exactly
    with pytest.raises(ValueError):
        parse_count(10**18 + 1)


@pytest.mark.parametrize("text", ["1e400", "1e19", "10000P", "1e999999999P", 10**400, 1e300])
def test_a_peak_beyond_1e18_flop_s_or_not_finite_is_refused(text):
    with pytest.raises(ValueError, match="beyond the largest figure accepted, 1e18 FLOP/s"):
        parse_flops(text)


def test_a_flops_budget_is_bounded_at_1e30():
    assert parse_flops_budget("1e30") == 1e30 and parse_flops_budget("2.5E") == 2.5e18
    for text in ("1e31", "1e400", "inf"):
        with pytest.raises(ValueError, match="1e9 to 1e30"):
            parse_flops_budget(text)


@pytest.mark.parametrize("text", ["fast", "T", "312 TB/s", "-5T", "0T", "", "312 XFLOPS"])
def test_parse_flops_rejects_text_that_is_not_a_positive_rate(text):
    with pytest.raises(ValueError):
        parse_flops(text)


def test_parse_flops_catches_a_missing_prefix():
    with pytest.raises(ValueError, match="312T"):
        parse_flops("312")


@pytest.mark.parametrize("text", ["-1", "0", "5M", "-2e9"])
def test_a_peak_that_no_prefix_would_mend_gets_no_suggestion(text):
    # "-1" had "did you mean -1T?", which fails too (and reads as a flag)
    with pytest.raises(ValueError, match="not a plausible peak") as got:
        parse_flops(text)
    assert "did you mean" not in str(got.value)


@pytest.mark.parametrize(
    ("value", "unit", "digits", "expected"),
    [
        (5.8295e9, "FLOP", 3, "5.83 GFLOP"),  # 5.8295 G -> 3 significant digits
        (3050, "tokens/s", 3, "3.05 k tokens/s"),
        (512, "tokens/s", 3, "512 tokens/s"),
        (3.35e12, "B/s", 3, "3.35 TB/s"),
        (999.6, "W", 3, "1.00 kW"),  # rounds up into the next prefix
        (6_282_473_472, "FLOP", 5, "6.2825 GFLOP"),
        (0.452, "", 3, "0.452"),
        (3.0, "", 3, "3.00"),
        (20e9, "", 3, "20.0 G"),
        (0, "FLOP", 3, "0 FLOP"),
        (-2500, "W", 3, "-2.50 kW"),
        # past the largest prefix (Y, 1e24): scientific, never a mantissa of hundreds of digits
        (999.4e24, "FLOP", 3, "999 YFLOP"),
        (999.96e24, "FLOP", 3, "1.00e+27 FLOP"),
        (1e300, "tokens/s", 3, "1.00e+300 tokens/s"),
        (-5e30, "W", 4, "-5.000e+30 W"),
    ],
)
def test_format_si_uses_prefixes_and_significant_digits(value, unit, digits, expected):
    assert format_si(value, unit, digits) == expected


def test_format_si_shows_missing_values_as_not_available():
    assert format_si(None, "FLOP") == "n/a"
    assert format_si(math.nan) == "n/a"
    assert format_si(math.inf, "FLOP") == "inf FLOP"


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (45.23, "45.2 s"),
        (0, "0.0 s"),
        (59.97, "1 min 00 s"),  # rounds up into minutes
        (187, "3 min 07 s"),  # 3*60 + 7
        (3725, "1 h 02 min"),  # 3600 + 2*60 + 5
        (3599.7, "1 h 00 min"),
        (2 * 86400 + 3 * 3600 + 10, "2 d 03 h"),
    ],
)
def test_format_duration_picks_the_two_largest_units(seconds, expected):
    assert format_duration(seconds) == expected


def test_format_duration_of_nothing_is_not_available():
    assert format_duration(None) == "n/a"
    assert format_duration(math.inf) == "n/a"
    with pytest.raises(ValueError):
        format_duration(-1)
