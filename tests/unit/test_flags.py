"""Every number or name a flag takes is refused at the door when it is not finite or beyond its
stated bound: exit 2 and one line naming the flag, before anything starts (core/units.py's
bounds; docs/reliability.md "Inputs"). The %%trainmeter magic reads its options with the same
rules and refuses them as a UsageError, before its cell body runs."""

from __future__ import annotations

import pytest

from trainmeter import cli
from trainmeter.commands.run import run_opts, run_parser

HUGE = "9" * 5000  # past int()'s 4300-digit limit
LONG = "1" * 4000  # an int() reads it: bounds, not the parser, must refuse it

# (argv, what the one line says), each refused with exit 2
REFUSED = [
    (["--budget-tokens", "1e400"], "--budget-tokens: '1e400' is beyond the largest count"),
    (["--budget-tokens", "1e30"], "--budget-tokens: '1e30' is beyond the largest count"),
    (["--budget-tokens", HUGE], "--budget-tokens: '99999"),
    (["--budget-tokens", "1e999999999B"], "is beyond the largest count accepted, 1e18"),
    (["--budget-tokens", "inf"], "--budget-tokens: cannot read 'inf' as a count"),
    (["--budget-tokens", "nan"], "--budget-tokens: cannot read 'nan' as a count"),
    (["--budget-tokens", "-5"], "--budget-tokens: '-5' must be a count > 0"),
    (["--budget-tokens", "0"], "--budget-tokens: '0' must be a count > 0"),
    (["--budget-flops", "1e400"], "--budget-flops: cannot read '1e400' as a FLOPs count"),
    (["--budget-flops", "1e31"], "--budget-flops: cannot read '1e31' as a FLOPs count"),
    (["--budget-flops", "inf"], "--budget-flops: cannot read 'inf' as a FLOPs count"),
    (["--peak", "1e400"], "--peak: '1e400' is beyond the largest figure accepted, 1e18 FLOP/s"),
    (["--peak", "1e19"], "--peak: '1e19' is beyond the largest figure accepted"),
    (["--peak", "inf"], "--peak: cannot read 'inf' as FLOP/s"),
    (["--peak", "nan"], "--peak: cannot read 'nan' as FLOP/s"),
    (["--sample-hz", "nan"], "the sampling rate is 1 to 10 Hz"),
    (["--sample-hz", "inf"], "the sampling rate is 1 to 10 Hz"),
    (["--sample-hz", "1e400"], "the sampling rate is 1 to 10 Hz"),
    (["--port", "1e400"], "is not a port"),
    (["--port", LONG], "is not a port"),
    (["--port", "65536"], "is not a port"),
    (["--prometheus", "1e400"], "is not [HOST:]PORT"),
    (["--prometheus", f"127.0.0.1:{LONG}"], "is not [HOST:]PORT"),
    (["--name", "x" * 201], "a run name is 1 to 200 printable characters"),
    (["--name", "a\nb"], "a run name is 1 to 200 printable characters"),
    (["--name", ""], "a run name is 1 to 200 printable characters"),
    (["--device", "x" * 3000], "--device: unknown GPU 'xxxx"),
    (["--dtype", "x" * 3000], "unknown dtype"),
    (["--gpu-backend", "x" * 3000], "--gpu-backend: unknown GPU source 'xxxx"),
    (["plan", "--tokens", "1e400"], "'1e400' is beyond the largest count accepted, 1e18"),
    (["plan", "--tokens", "inf"], "cannot read 'inf' as a count"),
    (["plan", "--gpus", "1e400"], "is not a GPU count from 1 to 1e12"),
    (["plan", "--gpus", LONG], "is not a GPU count from 1 to 1e12"),
    (["plan", "--layers", LONG], "is not a whole number from 1 to 1e12"),
    (["plan", "--context", HUGE], "is not a whole number from 1 to 1e12"),
    (["plan", "--width", "0"], "is not a whole number from 1 to 1e12"),
    (["plan", "--mfu", "nan"], "is not an MFU in (0, 1]"),
    (["plan", "--mfu", "inf"], "is not an MFU in (0, 1]"),
    (["plan", "--price", "1e400"], "is not a price per GPU-hour from 0 to 1e6"),
    (["plan", "--price", "1e7"], "is not a price per GPU-hour from 0 to 1e6"),
    (["plan", "--price", "nan"], "is not a price per GPU-hour from 0 to 1e6"),
    (["plan", "--peak", "1e400"], "is beyond the largest figure accepted, 1e18 FLOP/s"),
    (["attach", "1e400"], "is not a process id (a whole number from 1 to 4194304"),
    (["attach", "99999999999"], "is not a process id (a whole number from 1 to 4194304"),
    (["attach", LONG], "is not a process id"),
    (["attach", "--sample-hz", "inf", "1"], "the sampling rate is 1 to 10 Hz"),
    (["attach", "--name", "x" * 201, "1"], "a run name is 1 to 200 printable characters"),
    (["view", "--port", "1e400"], "is not a port"),
    # an empty value is refused, never taken as no value
    (["--budget-tokens", ""], "--budget-tokens: cannot read '' as a count"),
    (["--budget-flops", ""], "--budget-flops: cannot read '' as a FLOPs count"),
    (["--peak", ""], "--peak: cannot read '' as FLOP/s"),
    (["--device", ""], "--device: give a GPU name"),
    # a run's folder must be one that is there or can be made, and written to
    (["--dir", "/etc/passwd"], "argument --dir: '/etc/passwd': not a folder"),
    (["--dir", "/proc/1"], "argument --dir: '/proc/1': not writable"),
    (["--dir", "x" * 5000], "File name too long"),
    (["attach", "--dir", "/etc/passwd", "1"], "'/etc/passwd': not a folder"),
    # tm plan's MODEL: no traceback for a name too long, no endless read of /dev/zero
    (["plan", "x" * 5000, "--tokens", "1B"], "unknown model 'xxxx"),
    (["plan", "/dev/zero", "--tokens", "1B"], "'/dev/zero' is over 16 MiB: not a config.json"),
]


def _tm(argv: list[str], capsys) -> tuple[int, str]:
    run = argv[0] not in ("plan", "attach", "view")
    try:
        rc = cli.main(argv + (["--", "true"] if run else []))
    except SystemExit as exc:  # argparse's own exit
        rc = exc.code
    return rc, capsys.readouterr().err


@pytest.mark.parametrize(("argv", "said"), REFUSED, ids=lambda a: str(a)[:48])
def test_a_flag_value_that_is_not_finite_or_beyond_its_bound_is_one_line_and_exit_2(
    argv, said, capsys
):
    rc, err = _tm(argv, capsys)
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and said in lines[0], err
    assert len(lines[0]) < 400  # a 5000-character typo is named, not echoed


def test_the_bounds_themselves_are_accepted():
    # the largest values each rule states, read back exactly (by hand: 10**18, 1e18, 1e30)
    argv = ["--budget-tokens", "1e18", "--budget-flops", "1e30", "--peak", "1e18"]
    args = run_parser().parse_args([*argv, "--name", "n" * 200, "--", "true"])
    opts = run_opts(args)
    assert opts["budget_tokens"] == 10**18
    assert opts["budget_flops"] == 1e30 and opts["peak_flops"] == 1e18
    assert args.name == "n" * 200


# The magic: the same rules, as a UsageError raised before the body (IPython shows one line).
MAGIC_REFUSED = [
    ("--budget-tokens 1e400", "--budget-tokens: '1e400' is beyond the largest count"),
    ("--budget-tokens inf", "--budget-tokens: cannot read 'inf' as a count"),
    ("--budget-flops 1e400", "--budget-flops: cannot read '1e400' as a FLOPs count"),
    ("--peak 1e400", "--peak: '1e400' is beyond the largest figure accepted"),
    ("--peak nan", "--peak: cannot read 'nan' as FLOP/s"),
    (f"--name {'x' * 201}", "a run name is 1 to 200 printable characters"),
    (f"--device {'x' * 3000}", "--device: unknown GPU 'xxxx"),
    ("--budget-tokens ''", "--budget-tokens: cannot read"),
]


@pytest.mark.parametrize(("line", "said"), MAGIC_REFUSED, ids=lambda a: str(a)[:40])
def test_a_magic_option_out_of_bounds_is_a_usage_error(line, said):
    from IPython.core.error import UsageError
    from IPython.core.magic_arguments import parse_argstring

    from trainmeter.jupyter import magics

    args = parse_argstring(magics.TrainmeterMagics.trainmeter, line)
    with pytest.raises(UsageError) as err:
        magics._opts(args)
    assert said in str(err.value) and len(str(err.value)) < 400


def test_help_lists_every_subcommand_with_its_own_line(capsys):
    """``tm --help`` names each subcommand of the dispatch table with its summary, one line
    each (a new subcommand without a summary fails here)."""
    from trainmeter.commands import SUBCOMMANDS, SUMMARIES

    assert set(SUMMARIES) == set(SUBCOMMANDS)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    listed = [ln.split()[1] for ln in out.splitlines() if ln.startswith("  tm ")]
    assert listed == list(SUBCOMMANDS)
    for name, summary in SUMMARIES.items():
        assert f"{name}  " in out and summary in out, name
