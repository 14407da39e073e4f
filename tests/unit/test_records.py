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


# -- deep validation: a record validate() accepts never breaks the engine --

_BASE = {"v": 1, "t": 100.0}
_START = {**_BASE, "k": "run_start", "id": "r", "name": "n", "argv": ["a"], "version": "1"}


def _hostile_records():
    """Records as a hostile or broken writer might produce them: each is refused by
    validate() or, once accepted, folds and snapshots without raising."""
    nums = [0, -1, 2**53, 2**63, 10**400, 1.5, -1e308, True, "7", None, [], {}]
    out = []
    for x in nums:
        out += [
            {**_START, "opts": {"budget_tokens": x, "gpus": x, "plan_mfu": x, "peak_flops": x}},
            {**_START, "opts": {"device": x, "dtype": x, "convention": x}},
            {**_BASE, "k": "segment_start", "segment": 2, "opts": {"budget_flops": x}},
            {**_BASE, "k": "gpu", "gpus": [{"index": 0, "energy_mj": x, "gpu_util": x}],
             "host": {"cpu_util": x}},
            {**_BASE, "k": "gpu", "gpus": [{"index": x}]},
            {**_BASE, "k": "gpu_devices", "backend": "nvml", "devices": [{"index": x, "name": x}]},
            {**_BASE, "k": "model", "params": x, "embedding_params": 0,
             "token_embedding_params": 0, "layers": x, "heads": x, "width": x, "gpus": x},
            {**_BASE, "k": "agent_hello", "pid": 1, "rank": 0, "world_size": 1, "host": x},
            {**_BASE, "k": "step", "step": 1, "rank": 0, "tokens": x, "samples": x},
            {**_BASE, "k": "series", "name": "loss", "value": x, "step": x},
            {**_BASE, "k": "run_end", "status": "ok", "exit_code": x},
        ]  # fmt: skip
    out += [
        {**_START, "opts": [1, 2]},
        {**_START, "opts": "budget"},
        {**_START, "argv": [{"a": 1}]},
        {**_BASE, "k": "gpu", "gpus": "x"},
        {**_BASE, "k": "gpu", "gpus": [[0]]},
        {**_BASE, "k": "gpu", "gpus": [{"index": 0, "missing": [1]}]},
        {**_BASE, "k": "gpu", "gpus": [], "host": []},
        {**_BASE, "k": "gpu", "gpus": [], "process": {"pids": "1"}},
        {**_BASE, "k": "gpu_devices", "backend": "nvml", "devices": [None]},
        {**_BASE, "k": "gpu", "gpus": [{"index": 0}] * 10_000},
    ]
    return out


def test_a_run_start_whose_opts_is_not_an_object_is_refused():
    with pytest.raises(RecordError, match="'opts' must be an object"):
        records.validate({**_START, "opts": [1]})


def test_a_gpu_record_with_a_string_energy_or_a_list_index_is_refused():
    with pytest.raises(RecordError, match="'energy_mj' must be a finite number"):
        records.validate({**_BASE, "k": "gpu", "gpus": [{"index": 0, "energy_mj": "12"}]})
    with pytest.raises(RecordError, match="'index' must be an int"):
        records.validate({**_BASE, "k": "gpu", "gpus": [{"index": [0]}]})


def test_every_kind_takes_a_line_number_n_and_refuses_a_bad_one():
    assert records.validate({**_START, "n": 1})["n"] == 1
    for bad in (0, -3, 1.0, "1", True):
        with pytest.raises(RecordError, match="'n'"):
            records.validate({**_START, "n": bad})


def test_a_validated_hostile_record_never_makes_the_engine_raise():
    from trainmeter.core.engine import Engine
    from trainmeter.core.summary import summary_line

    accepted = refused = 0
    for rec in _hostile_records():
        eng = Engine()
        eng.apply(records.validate(dict(_START)))
        try:
            records.validate(rec)
        except RecordError:
            refused += 1
            continue
        accepted += 1
        eng.apply(rec)
        snap = eng.snapshot()
        json.dumps(snap, allow_nan=False)  # every figure finite and JSON-able
        summary_line(snap)
    # both kinds occur, so the test covers what validate lets through (counted by hand from
    # the list: the 10 ints and floats among `nums` pass where a field takes a number)
    assert accepted > 20 and refused > 20


def _batch(**more):
    """A steps batch of two rows as the agent sends it (agent/sender.py ``QueueReader``)."""
    return {"v": 1, "k": "steps", "rank": 0, "t0": 10.0, "dt_us": [0, 500_000], "step": [1, 9],
            "tokens": [4, 32], "samples": [1, 8], "seq_sq": [16, 128], **more}  # fmt: skip


def test_a_steps_batch_agg_column_gives_a_merged_row_its_agg_and_a_plain_row_none():
    recs = records.decode_wire(json.dumps(_batch(agg=[None, 8])))
    assert "agg" not in recs[0]  # one step: the record it always was
    assert recs[1]["agg"] == 8 and recs[1]["step"] == 9 and recs[1]["t"] == 10.5
    assert "agg" not in records.decode_wire(json.dumps(_batch(agg=[1, 1])))[1]
    with_arr = records.decode_wire(json.dumps(_batch(agg=[1, 8], arr_us=[None, 100])))
    assert with_arr[1]["agg"] == 8 and with_arr[1]["arr"] == pytest.approx(10.5 - 1e-4)
    rec = records.make("step", 1.0, step=9, rank=0, tokens=32, samples=8, agg=8)
    assert records.decode(records.encode(rec)) == rec  # the run log's line round-trips


@pytest.mark.parametrize("agg", [[0, 8], [1, -2], [1, True], [1, 2.0], [1, 2**53], [8], "8"])
def test_an_agg_that_is_no_whole_number_of_steps_or_ragged_is_refused(agg):
    with pytest.raises(RecordError, match="agg"):
        records.decode_wire(json.dumps(_batch(agg=agg)))


@pytest.mark.parametrize("agg", [0, -1, 2**53, 1.5, True])
def test_a_step_record_with_a_bad_agg_is_refused(agg):
    with pytest.raises(RecordError, match="agg"):
        records.validate({"v": 1, "k": "step", "t": 1.0, "step": 9, "rank": 0, "agg": agg})
