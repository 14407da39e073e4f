"""``tm`` end to end on the example GPT: the run log, the summary, exit codes, signals, numerics."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from conftest import EXAMPLE, _env, losses, read_log, run_plain, run_tm

from trainmeter._version import __version__

pytestmark = pytest.mark.slow


def test_a_40_step_run_logs_every_step_and_replay_agrees_with_the_summary(workdir):
    out = run_tm(["--", sys.executable, EXAMPLE, "--steps", "40"], workdir)
    assert out.returncode == 0, out.stderr
    summary = out.stderr.strip().splitlines()[-1]
    assert re.search(r"40 steps · 81\.9 k tokens · [\d.]+ (k )?tokens/s ·", summary), summary
    assert "FLOP/token [titan]" in summary and "log .trainmeter/runs/" in summary
    log = read_log(workdir)
    steps = [r for r in log if r["k"] == "step"]
    assert [r["step"] for r in steps] == list(range(1, 41))
    assert all(r["tokens"] == 16 * 128 for r in steps)  # batch 16 x 128 bytes, by hand
    assert log[0]["k"] == "run_start" and log[-1]["k"] == "run_end"
    train = [r["value"] for r in log if r["k"] == "series" and r["name"] == "train_loss"]
    printed = [float(line.split()[-1]) for line in losses(out.stdout) if "val_loss" not in line]
    assert [round(v, 6) for v in train] == printed
    replayed = run_tm(["replay", "--json"], workdir)
    snap = json.loads(replayed.stdout)
    assert snap["step"] == 40 and snap["tokens"] == 40 * 2048
    assert snap["run"]["state"] == "finished"
    assert set(snap["flops_per_token"]) == {"hf", "megatron", "titan", "embeddings"}
    assert snap["series"]["val_loss"]["step"] == 40
    assert run_tm(["replay"], workdir).stdout.strip() == summary


def test_printed_losses_are_identical_with_and_without_tm(workdir):
    plain = run_plain([EXAMPLE, "--steps", "25"], workdir)
    watched = run_tm(["-q", EXAMPLE, "--steps", "25"], workdir)
    assert plain.returncode == watched.returncode == 0
    assert losses(watched.stdout) == losses(plain.stdout) and len(losses(plain.stdout)) == 26


def test_a_failing_script_keeps_its_exit_code_and_traceback_and_the_log_closes(workdir):
    plain = run_plain([EXAMPLE, "--steps", "10", "--fail-at-step", "5"], workdir)
    watched = run_tm(["-q", EXAMPLE, "--steps", "10", "--fail-at-step", "5"], workdir)
    assert plain.returncode == watched.returncode == 1
    tb = plain.stderr[plain.stderr.index("Traceback") :]
    assert tb in watched.stderr  # same traceback, byte for byte
    log = read_log(workdir)
    assert log[-1]["k"] == "run_end" and log[-1]["status"] == "error"
    assert log[-1]["exit_code"] == 1
    snap = json.loads(run_tm(["replay", "--json"], workdir).stdout)
    assert snap["step"] == 5 and snap["run"]["state"] == "failed"
    assert run_tm(["replay"], workdir).stdout.startswith("trainmeter: failed (exit 1) · 5 steps")


SLEEPER = """
import signal, sys, time
def bye(signum, frame):
    print("child got", signal.Signals(signum).name, flush=True)
    sys.exit(7)
signal.signal(signal.SIGTERM, bye)
print("ready", flush=True)
time.sleep(60)
"""


def _start_tm(workdir, code):
    cmd = [sys.executable, "-m", "trainmeter.cli", "-q", "--", sys.executable, "-c", code]
    proc = subprocess.Popen(cmd, cwd=workdir, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout.readline().strip() == "ready"
    return proc


def test_sigterm_reaches_the_child_and_tm_exits_with_its_code(workdir):
    proc = _start_tm(workdir, SLEEPER)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert "child got SIGTERM" in out
    assert proc.returncode == 7
    assert read_log(workdir)[-1]["exit_code"] == 7


def test_sigint_interrupts_the_child_and_tm_dies_the_same_way(workdir):
    code = "import time\nprint('ready', flush=True)\ntime.sleep(60)"
    proc = _start_tm(workdir, code)
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)  # not from a terminal: tm forwards it
    _, err = proc.communicate(timeout=30)
    assert "KeyboardInterrupt" in err
    assert proc.returncode == -signal.SIGINT  # like the child: killed by SIGINT
    end = read_log(workdir)[-1]
    assert end["status"] == "interrupted"


def test_a_flag_typo_says_which_flag_was_meant(workdir):
    out = run_tm(["--budget-tokenz", "20B", EXAMPLE], workdir)
    assert out.returncode == 2
    assert "did you mean --budget-tokens" in out.stderr
    assert not (workdir / ".trainmeter").exists()  # nothing started


def test_a_bad_budget_is_refused_before_anything_starts(workdir):
    out = run_tm(["--budget-tokens", "lots", EXAMPLE], workdir)
    assert out.returncode == 2 and "lots" in out.stderr


def test_version_prints_the_package_version(workdir):
    out = run_tm(["--version"], workdir)
    assert out.stdout.strip() == f"trainmeter {__version__}"


def test_quiet_prints_nothing_but_the_child_output(workdir):
    out = run_tm(["-q", "--", sys.executable, "-c", "print('wrapped')"], workdir)
    assert out.returncode == 0 and out.stdout == "wrapped\n" and out.stderr == ""


def test_a_missing_command_exits_127_and_closes_the_log(workdir):
    out = run_tm(["--", "no-such-command-xyz"], workdir)
    assert out.returncode == 127 and "cannot start" in out.stderr
    assert read_log(workdir)[-1]["k"] == "run_end"


def test_a_non_python_child_runs_and_the_summary_says_no_agent_connected(workdir):
    out = run_tm(["--", "sh", "-c", "echo hi; exit 3"], workdir)
    assert out.returncode == 3 and out.stdout == "hi\n"
    assert "no agent connected" in out.stderr


def test_no_command_says_what_is_missing(workdir):
    out = run_tm([], workdir)
    assert out.returncode == 2 and "nothing to run" in out.stderr


def test_a_script_that_is_not_there_is_named(workdir):
    out = run_tm(["nope.py"], workdir)
    assert out.returncode == 2 and "no such script: nope.py" in out.stderr


def test_secrets_in_argv_never_reach_the_log(workdir):
    code = "print('ok')"
    out = run_tm(["-q", "--", sys.executable, "-c", code, "--api-key", "sk-123", "TOKEN=abc"],
                 workdir)  # fmt: skip
    assert out.returncode == 0
    text = next((workdir / ".trainmeter" / "runs").glob("*/run.jsonl")).read_text()
    assert "sk-123" not in text and "abc" not in text and "***" in text


def test_the_child_environment_chains_an_existing_sitecustomize(workdir):
    other = workdir / "site"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nos.environ['OTHER_SITE'] = 'ran'\n")
    code = "import os, sys; print(os.environ.get('OTHER_SITE'), 'trainmeter.agent' in sys.modules)"
    env = {"PYTHONPATH": os.pathsep.join([str(other), _env()["PYTHONPATH"]])}
    out = run_tm(["-q", "--", sys.executable, "-c", code], workdir, env=env)
    assert out.stdout.split() == ["ran", "True"]


def test_the_end_of_run_drain_waits_for_an_agent_still_sending(workdir):
    # the child exits at once; its grandchild (its own agent, through the inherited
    # environment) connects within 1 s and emits for 6 s more: tm waits while lines arrive
    # (launcher.DRAIN_QUIET_S), where a fixed 3 s drain cut the last half
    grandchild = ("import time, trainmeter\n"
                  "for i in range(60):\n"
                  "    trainmeter.emit(step=i, x=float(i))\n"
                  "    time.sleep(0.1)\n")  # fmt: skip
    code = ("import subprocess, sys, time, trainmeter\n"
            "trainmeter.emit(step=0, child=1.0)\n"
            f"subprocess.Popen([sys.executable, '-c', {grandchild!r}])\n"
            "time.sleep(1.5)\n")  # fmt: skip
    out = run_tm(["-q", "--no-web", "--", sys.executable, "-c", code], workdir, timeout=120)
    assert out.returncode == 0, out.stderr
    log = read_log(workdir)
    assert [r["step"] for r in log if r["k"] == "series" and r["name"] == "x"] == list(range(60))
    assert not [r for r in log if r["k"] == "dropped" and r["source"] == "supervisor"]
