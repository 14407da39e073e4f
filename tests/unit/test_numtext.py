"""Numbers as text for ``tm export csv`` (trainmeter/exports/numtext.py): orjson's text is
taken only where it is Python's own (``repr`` of a float, ``str`` of an int, the reference
here), so an export's bytes are the same with the ``fast`` extra and without it."""

import importlib.util
import math
import random
import sys

import pytest

from trainmeter.exports import csv as export_csv
from trainmeter.exports import numtext
from trainmeter.exports.points import StepRows


def _number(rng):
    """A number of any kind a column could hold, the awkward ones often."""
    kind = rng.randrange(8)
    if kind == 0:  # any finite float, subnormals and the largest included
        return math.ldexp(rng.random(), rng.randint(-1074, 1024)) * rng.choice([1, -1])
    if kind == 1:  # the usual: rates, fractions, seconds
        return 10 ** rng.uniform(-6, 18) * rng.choice([1, 1, 1, -1])
    if kind == 2:
        return rng.choice([0.0, -0.0, 1e-4, 1e16, 9999999999999998.0, 0.1, 1e-05, 5e-324])
    if kind == 3:
        return rng.choice([math.nan, math.inf, -math.inf, True, False, None])
    if kind == 4:
        return rng.randint(-(2**70), 2**70)  # over 64 bits, some
    return rng.randint(0, 2**53)  # counts and steps


def _python(col):
    return b",".join(repr(x).encode() for x in col)


def test_the_fast_text_is_pythons_or_none():
    assert numtext.fast()  # the test extra installs orjson: this test needs it
    rng = random.Random(0)
    taken = 0
    for _ in range(20_000):
        col = [_number(rng) for _ in range(rng.randint(1, 6))]
        got = numtext.json_text(col)
        if got is not None:
            taken += 1
            assert got[1:-1] == _python(col), col
    assert taken > 1000  # the comparison above ran on many columns


def test_the_usual_numbers_take_the_fast_way():
    rng = random.Random(1)
    for _ in range(2000):  # floats from 1e-4 to 1e16 and ints below 2**63: orjson's own text
        col = [10 ** rng.uniform(-4, 15.9) for _ in range(20)] + [rng.randrange(2**63)]
        got = numtext.json_text(col)
        assert got is not None and got[1:-1] == _python(col)


def test_a_number_with_four_zeros_after_its_point_above_1e_4_takes_the_fast_way():
    # "0.0000" inside a number (10.00001, 3.00000012): the text repr writes too; only a
    # number that starts with it (below 1e-4, which repr writes with an exponent) is not
    for col in ([10.00001], [3.00000012, 1.0], [[7, 100.000005]], [-20.00003]):
        got = numtext.json_text(col)
        assert got is not None and got.replace(b"[", b"").replace(b"]", b"") == b",".join(
            repr(x).encode() for x in (col[0] if isinstance(col[0], list) else col)
        ), col
    for col in ([0.00001], [-0.00001], [[7, 0.00002]], [1.5, 0.00009]):
        assert numtext.json_text(col) is None, col


def test_a_number_orjson_spells_its_own_way_is_left_to_repr():
    for x in (1e-05, 5e-05, 1e16, 1.5e300, math.nan, math.inf, True, None, 2**64):
        assert numtext.json_text([1.5, x]) is None, x


def test_without_orjson_nothing_is_fast(monkeypatch):
    monkeypatch.setattr(numtext, "orjson", None)
    assert not numtext.fast() and numtext.json_text([1.5]) is None


@pytest.mark.parametrize("seed", range(3))
def test_step_rows_are_the_same_bytes_with_and_without_orjson(monkeypatch, seed):
    rng = random.Random(seed)
    m = 50
    cols = [
        list(range(8192, 8192 * (m + 1), 8192)),  # tokens
        [rng.uniform(1e5, 1e6) for _ in range(m)],  # tokens/s
        [rng.uniform(1e-7, 1e-3) for _ in range(m)],  # a tiny MFU: some below 1e-4
        [_number(rng) for _ in range(m)],  # anything at all
    ]
    rows = StepRows(("tokens", "tokens_per_s", "mfu/hf", "odd"), list(range(1, m + 1)),
                    [rng.uniform(0, 20) for _ in range(m)], [0.0] * m, cols)  # fmt: skip
    fast = b"".join(export_csv._step_chunks(rows))
    monkeypatch.setattr(numtext, "orjson", None)
    assert b"".join(export_csv._step_chunks(rows)) == fast
    lines = fast.decode().split("\r\n")
    assert len(lines) == 4 * m + 1 and lines[-1] == ""
    assert lines[2] == f"mfu/hf,1,{rows.t[0]!r},{cols[2][0]!r}"  # Python's text, by hand


def test_the_module_loads_without_orjson(monkeypatch):
    monkeypatch.setitem(sys.modules, "orjson", None)  # import orjson raises ImportError
    spec = importlib.util.spec_from_file_location("numtext_copy", numtext.__file__)
    fresh = importlib.util.module_from_spec(spec)  # a copy: the module itself stays as it is
    spec.loader.exec_module(fresh)
    assert fresh.orjson is None and fresh.json_text([1.0]) is None
