"""The wire/run-log schema: what is accepted, what is refused and why."""

import json

import pytest

from trainmeter.core import records
from trainmeter.core.records import RecordError


def test_make_stamps_version_kind_and_time():
    rec = records.make("step", 12.5, step=3, rank=0, tokens=64, samples=4)
    assert rec == {"v": 1, "k": "step", "t": 12.5, "step": 3, "rank": 0, "tokens": 64, "samples": 4}


def test_encode_then_decode_round_trips_one_line():
    rec = records.make("series", 1.0, name="train_loss", value=2.5, step=7)
    line = records.encode(rec)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert records.decode(line) == rec


@pytest.mark.parametrize(
    ("line", "why"),
    [
        (b"not json", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"v": 1, "k": "nope", "t": 1}', "unknown record kind"),
        (b'{"v": 99, "k": "note", "t": 1, "text": "x"}', "unsupported schema version"),
        (b'{"v": 1, "k": "step", "t": 1, "rank": 0}', "missing field 'step'"),
        (b'{"v": 1, "k": "step", "t": 1, "step": "3", "rank": 0}', "field 'step' has type str"),
        (b'{"v": 1, "k": "step", "t": 1, "step": true, "rank": 0}', "field 'step' has type bool"),
        (b'{"v": 1, "k": "note", "t": NaN, "text": "x"}', "finite number"),
        (b'{"v": 1, "k": "series", "t": 1, "name": "l", "value": Infinity}', "must be finite"),
        # an integer past a float's range: OverflowError inside isfinite, refused as a record
        (b'{"v": 1, "k": "series", "t": 1, "name": "l", "value": 1' + b"0" * 400 + b"}", "finite"),
        (b'{"v": 1, "k": "note", "t": 1' + b"0" * 400 + b', "text": "x"}', "finite number"),
    ],
)
def test_decode_refuses_malformed_lines_with_a_reason(line, why):
    with pytest.raises(RecordError, match=why):
        records.decode(line)


def test_optional_fields_may_be_absent_or_null():
    absent = records.decode(json.dumps({"v": 1, "k": "step", "t": 1, "step": 1, "rank": 0}))
    null = {"v": 1, "k": "step", "t": 1, "step": 1, "rank": 0, "tokens": None}
    assert "tokens" not in absent
    assert records.decode(json.dumps(null))["tokens"] is None


def test_a_steps_batch_expands_to_one_step_record_each():
    batch = {"v": 1, "k": "steps", "rank": 1, "t": [1.0, 2.0], "step": [1, 2],
             "tokens": [32, 0], "samples": [4, 0]}  # fmt: skip
    recs = records.decode_wire(json.dumps(batch))
    assert [(r["k"], r["step"], r["rank"], r["tokens"]) for r in recs] == [
        ("step", 1, 1, 32),
        ("step", 2, 1, None),  # 0 tokens: none seen
    ]
    with pytest.raises(RecordError, match="equal-length"):
        records.decode_wire(json.dumps({**batch, "step": [1]}))


def test_a_steps_batch_with_microsecond_offsets_gives_the_times_back():
    # what the sender writes: t0 plus whole microseconds (1.5 s + 250 us, by hand)
    batch = {"v": 1, "k": "steps", "rank": 0, "t0": 1.5, "dt_us": [0, 250], "step": [1, 2],
             "tokens": [8, 8], "samples": [1, 1]}  # fmt: skip
    recs = records.decode_wire(json.dumps(batch))
    assert [r["t"] for r in recs] == [1.5, pytest.approx(1.50025, abs=1e-9)]
    for bad in ({"dt_us": [0, 2.5]}, {"t0": "1.5"}, {"dt_us": [0]}):
        with pytest.raises(RecordError):
            records.decode_wire(json.dumps({**batch, **bad}))


_BATCH = {"v": 1, "k": "steps", "rank": 2, "t": [1.0, 2.5], "step": [1, 2], "tokens": [32, 0],
          "samples": [4, 0]}  # fmt: skip


def _one_by_one(batch: dict) -> list[dict]:
    """The independent oracle: each row built and checked by ``validate`` on its own."""
    rows = zip(batch["t"], batch["step"], batch["tokens"], batch["samples"], strict=True)
    return [records.validate({"v": batch["v"], "k": "step", "t": t, "step": n,
                              "rank": batch["rank"], "tokens": tok or None,
                              "samples": smp or None}) for t, n, tok, smp in rows]  # fmt: skip


@pytest.mark.parametrize(
    "bad",
    [
        {"t": [1.0, "2"]}, {"t": [1.0, True]}, {"t": [1.0, 1e400]},  # 1e400 decodes as inf
        {"step": [1, 2.0]}, {"step": [1, True]}, {"step": [1, None]},
        {"tokens": [32, 1.5]}, {"tokens": [32, True]}, {"samples": [4, "4"]},
        {"rank": "0"}, {"v": 99},
    ],
)  # fmt: skip
def test_a_steps_batch_row_is_refused_wherever_validate_would_refuse_it(bad):
    batch = {**_BATCH, **bad}
    with pytest.raises(RecordError):
        _one_by_one(batch)  # the oracle refuses it too
    with pytest.raises(RecordError):
        records.decode_wire(json.dumps(batch))


def test_a_good_steps_batch_gives_what_row_by_row_validation_gives():
    assert records.decode_wire(json.dumps(_BATCH)) == _one_by_one(_BATCH)


@pytest.mark.parametrize(
    "rec",
    [
        {"v": 1, "k": "step", "t": 1700000000.123456, "step": 5, "rank": 0, "tokens": 32,
         "samples": None},
        {"v": 1, "k": "step", "t": 1e-07, "step": 2**40, "rank": 3, "tokens": None, "samples": 4},
        {"v": 1, "k": "step", "t": 7, "step": 1, "rank": 0, "tokens": 1, "samples": 1},  # int t
        {"v": 1, "k": "note", "t": 1.0, "step": 1, "rank": 0, "tokens": 1, "samples": 1},
    ],
)  # fmt: skip
def test_a_step_line_is_byte_for_byte_what_json_dumps_writes(rec):
    assert records.encode(rec) == (json.dumps(rec, separators=(",", ":")) + "\n").encode()


def test_encode_refuses_nan_so_no_invalid_json_reaches_the_log():
    with pytest.raises(ValueError):
        records.encode({"v": 1, "k": "note", "t": float("nan"), "text": "x"})
