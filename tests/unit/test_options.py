"""A run's options (trainmeter/core/options.py): one function reads the flags of ``tm`` and of
``%%trainmeter`` alike, and the frozen record refuses what no flag could give."""

import dataclasses

import pytest
from IPython.core.magic_arguments import parse_argstring

from trainmeter.commands.run import run_opts, run_parser
from trainmeter.core.options import RunOptions, run_options
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
