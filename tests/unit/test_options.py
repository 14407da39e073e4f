"""A run's options (trainmeter/core/options.py): one function reads the flags of ``tm`` and of
``%%trainmeter`` alike, and the frozen record refuses what no flag could give."""

import dataclasses

import pytest
from IPython.core.magic_arguments import parse_argstring

from trainmeter.commands.run import run_opts, run_parser
from trainmeter.core.options import LoggedOptions, RunOptions, from_record, run_options
from trainmeter.jupyter import magics

FLAGS = ["--budget-tokens", "20B", "--budget-flops", "2.5e21", "--peak", "312T",
         "--device", "h100-sxm", "--dtype", "bfloat16", "--convention", "hf"]  # fmt: skip


def test_tm_and_the_magic_record_the_same_options_for_the_same_flags():
    tm = run_opts(run_parser().parse_args([*FLAGS, "--", "true"]))
    cell = magics._opts(parse_argstring(magics.TrainmeterMagics.trainmeter, " ".join(FLAGS)))
    # by hand: 20B = 2e10 tokens, 312T = 3.12e14 FLOP/s, bfloat16 is bf16
    expected = {"budget_tokens": 20_000_000_000, "budget_flops": 2.5e21, "convention": "hf",
                "peak_flops": 3.12e14, "device": "h100-sxm", "dtype": "bf16"}  # fmt: skip
    assert {k: tm[k] for k in expected} == expected
    assert {k: cell[k] for k in expected} == expected
    assert tm["pad_tokens"] == "count" and cell["pad_tokens"] is None  # the magic has no flag
    assert set(tm) == set(cell) == {f.name for f in dataclasses.fields(RunOptions)}


@pytest.mark.parametrize(
    "kwargs, flag",
    [({"budget_tokens": "0"}, "--budget-tokens"), ({"budget_flops": "lots"}, "--budget-flops"),
     ({"peak": ""}, "--peak"), ({"device": "h100-sxmm"}, "--device"),
     ({"dtype": "fp13"}, "dtype")],
)  # fmt: skip
def test_a_bad_flag_is_one_line_naming_it(kwargs, flag):
    with pytest.raises(ValueError) as info:
        run_options(**kwargs)
    assert flag in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    "field, value",
    [("budget_tokens", 0), ("budget_tokens", True), ("budget_tokens", 1.5),
     ("budget_flops", float("inf")), ("budget_flops", 0.0), ("peak_flops", 0.5),
     ("peak_flops", float("nan")), ("convention", "palm"), ("dtype", "bfloat16"),
     ("pad_tokens", "drop")],
)  # fmt: skip
def test_the_record_refuses_what_no_flag_gives(field, value):
    with pytest.raises(ValueError, match=field):
        RunOptions(**{field: value})


def test_the_record_is_frozen_and_keyword_only():
    opts = RunOptions(budget_tokens=10)
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.budget_tokens = 11
    with pytest.raises(TypeError):
        RunOptions(10)  # positional: refused
    assert run_options().record() == dict.fromkeys(opts.record())  # nothing given: all None


# -- reading a log's opts back (the engine's one door) ------------------------------------------
def _replayed(opts) -> dict:
    """The snapshot of a short run whose run_start carries ``opts`` (validated, as replay
    reads a log), without its ``run`` (which names the options' record)."""
    from trainmeter.core import records
    from trainmeter.core.engine import Engine

    eng = Engine()
    recs = [{"k": "run_start", "t": 100.0, "id": "r", "name": "n", "argv": [], "version": "0",
             "opts": opts},
            {"k": "agent_hello", "t": 100.5, "pid": 1, "rank": 0, "world_size": 1},
            {"k": "model", "t": 100.6, "params": 1000, "embedding_params": 100,
             "token_embedding_params": 100, "layers": 2, "width": 8, "heads": 2, "seq_len": 4,
             "vocab": 50, "device": "cpu"},
            {"k": "step", "t": 101.0, "step": 1, "rank": 0, "tokens": 40, "samples": 2},
            {"k": "step", "t": 102.0, "step": 2, "rank": 0, "tokens": 40,
             "samples": 2}]  # fmt: skip
    for rec in recs:
        eng.apply(records.validate({"v": 1, **rec}))
    return {k: v for k, v in eng.snapshot().items() if k != "run"}


def test_a_record_reads_back_as_the_options_it_was_written_from():
    opts = run_options(budget_tokens="20B", budget_flops="2.5e21", convention="hf", peak="312T",
                       device="h100-sxm", dtype="bfloat16", pad_tokens="skip")  # fmt: skip
    read = from_record(opts.record())
    assert RunOptions(**{f.name: getattr(read, f.name) for f in dataclasses.fields(RunOptions)}) \
        == opts  # fmt: skip
    assert (read.attached, read.gpus, read.plan_mfu) == (None, None, None)
    logged = from_record({"attached": 4242, "gpus": 2, "plan_mfu": 0.5, "prometheus": "h:1"})
    assert (logged.attached, logged.gpus, logged.plan_mfu) == (4242, 2, 0.5)
    assert from_record({"budget_tokens": 2e10}).budget_tokens == 20_000_000_000  # a whole float


@pytest.mark.parametrize("opts", [None, [1, 2], "budget", 7])
def test_opts_that_are_not_an_object_read_as_none_given(opts):
    assert from_record(opts) == LoggedOptions()


# values a log can hold (validate() takes them: numbers and strings) that no flag gives
NO_FLAG_GIVES = [
    {"budget_tokens": 0}, {"budget_tokens": -5}, {"budget_tokens": 0.5},
    {"budget_flops": -1.0}, {"budget_flops": 0.0},
    {"peak_flops": 0.5}, {"peak_flops": 1e25}, {"convention": ""}, {"convention": "palm"},
    {"dtype": "fp13"}, {"dtype": ""}, {"pad_tokens": "drop"}, {"device": ""},
    {"attached": 1.5}, {"gpus": -2}, {"plan_mfu": 0},
]  # fmt: skip


@pytest.mark.parametrize("bad", NO_FLAG_GIVES, ids=lambda d: repr(d)[:40])
def test_a_malformed_option_replays_as_not_given(bad):
    """A log always replays: an option no flag could give is read as not given (never an
    error), so the run's snapshot is the one with no such option."""
    key = next(iter(bad))
    if key not in ("gpus", "plan_mfu"):  # those two are kept as logged; the engine checks them
        assert getattr(from_record(bad), key) in (None, "")
    plain = _replayed({})
    got = _replayed(bad)
    if key == "plan_mfu":  # said in a note, as it always was
        assert [n for n in got["notes"] if n not in plain["notes"]] == [
            "plan: MFU 0 is not a fraction in (0, 1]; planned with 0.4"
        ]
        got["notes"] = plain["notes"]
    assert got == plain


def test_the_engine_reads_the_options_through_from_record_only():
    """No ``opts.get`` inside the engine: every option it uses is a field of LoggedOptions."""
    from pathlib import Path

    from trainmeter.core import engine

    source = Path(engine.__file__).read_text()
    assert "from_record(self.opts)" in source
    assert "opts.get(" not in source and 'opts["' not in source
