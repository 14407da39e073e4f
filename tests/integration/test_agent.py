"""The agent inside a real training process (started by ``tm``): step clock, tokens per step,
model facts, and the never-raise invariant (an internal failure never reaches the loop)."""

import json
import os
import subprocess
import sys

import pytest
from conftest import FIXTURES, _env, losses, read_log, run_plain, run_tm

pytestmark = pytest.mark.slow
TINY = FIXTURES / "tiny_train.py"


def _steps(log):
    return [r for r in log if r["k"] == "step"]


def _hand_tokens(stdout):
    return [int(line.split()[-1]) for line in losses(stdout)]


def test_one_step_record_per_optimizer_step_with_hand_counted_tokens(workdir):
    out = run_tm(["-q", TINY, "--steps", "6"], workdir)
    assert out.returncode == 0, out.stderr
    steps = _steps(read_log(workdir))
    assert [r["step"] for r in steps] == [1, 2, 3, 4, 5, 6]
    assert [r["tokens"] for r in steps] == _hand_tokens(out.stdout) == [32] * 6  # 4 x 8


def test_gradient_accumulation_and_variable_lengths_sum_to_the_hand_count(workdir):
    out = run_tm(["-q", TINY, "--steps", "5", "--grad-accum", "4", "--var-len"], workdir)
    assert out.returncode == 0, out.stderr
    steps = _steps(read_log(workdir))
    # the script counts batch x seq over its 4 micro-batches itself (different every step)
    hand = _hand_tokens(out.stdout)
    assert len(set(hand)) > 1
    assert [r["tokens"] for r in steps] == hand


def test_forward_passes_without_gradients_are_not_training_tokens(workdir):
    out = run_tm(["-q", TINY, "--steps", "4", "--eval-every", "1"], workdir)
    assert out.returncode == 0, out.stderr
    assert [r["tokens"] for r in _steps(read_log(workdir))] == [32] * 4


def test_model_record_counts_parameters_and_embeddings(workdir):
    out = run_tm(["-q", TINY, "--steps", "2"], workdir)
    assert out.returncode == 0, out.stderr
    (model,) = [r for r in read_log(workdir) if r["k"] == "model"]
    # Embedding 50x16 = 800; Linear 16x16+16 = 272; Linear 16x50+50 = 850 -> 1922 in all
    assert model["params"] == 1922
    assert model["embedding_params"] == model["token_embedding_params"] == 800
    assert model["seq_len"] == 8 and model["vocab"] == 50 and model["width"] == 16
    assert model["device"] == "cpu" and model["run_dtype"] == "fp32"


@pytest.mark.parametrize(
    "entry",
    ["step_hook", "step_method", "forward_hook", "discovery", "emit", "sender", "attach"],
)
def test_an_internal_failure_warns_once_and_leaves_the_loop_untouched(workdir, entry):
    plain = run_plain([TINY, "--steps", "8"], workdir)
    watched = run_tm(["-q", TINY, "--steps", "8", "--fault", entry], workdir)
    assert watched.returncode == 0, watched.stderr
    assert losses(watched.stdout) == losses(plain.stdout)  # same numbers, to the last digit
    warnings = [ln for ln in watched.stderr.splitlines() if "internal error" in ln]
    assert len(warnings) == 1, watched.stderr
    assert "forced failure" in warnings[0] or "Error" in warnings[0]


def test_a_child_whose_supervisor_is_gone_trains_unchanged_with_one_warning(workdir):
    from trainmeter.supervisor.launcher import child_env

    plain = run_plain([TINY, "--steps", "6"], workdir)
    env = child_env(str(workdir / "no-such.sock"), base=_env())
    out = subprocess.run([sys.executable, TINY, "--steps", "6"], cwd=workdir, env=env,
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0
    assert losses(out.stdout) == losses(plain.stdout)
    said = [ln for ln in out.stderr.splitlines() if "[trainmeter]" in ln]
    # the lost socket, and at exit what was not sent (the run log, there is none, lacks it)
    assert len(said) == 2, out.stderr
    assert "lost the supervisor's socket" in said[0]
    assert "records were not sent to the supervisor" in said[1]
    assert "supervisor gone; the run log does not have this count)" in said[1]


def test_a_broken_trainmeter_install_never_stops_the_child(workdir):
    from trainmeter.supervisor.launcher import child_env

    fake = workdir / "fake" / "trainmeter"
    (fake / "agent").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "agent" / "__init__.py").write_text("raise ImportError('half-installed')\n")
    env = child_env(str(workdir / "x.sock"), base=_env())
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"].split(os.pathsep)[0], str(fake.parent)])
    out = subprocess.run([sys.executable, "-c", "print('trained')"], cwd=workdir, env=env,
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 0 and out.stdout == "trained\n" and out.stderr == ""


def test_every_torchrun_rank_connects_and_tokens_count_the_world(workdir):
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    out = run_tm(["-q", "--", torchrun, "--nproc_per_node=2", TINY, "--steps", "5"], workdir)
    assert out.returncode == 0, out.stderr
    log = read_log(workdir)
    ranks = sorted({r["rank"] for r in log if r["k"] == "agent_hello" and r["world_size"] == 2})
    assert ranks == [0, 1]
    snap = json.loads(run_tm(["replay", "--json"], workdir).stdout)
    # rank 0 is the clock: 5 steps; tokens: 5 steps x (4 x 8) x 2 ranks, by hand
    assert snap["step"] == 5 and snap["tokens"] == 320 and snap["ranks"] == {"0": 5, "1": 5}


def test_bad_emits_are_counted_in_the_log_and_the_summary_and_later_emits_arrive(workdir):
    code = ("import trainmeter\n"
            "trainmeter.emit(step=1, x=10**400)\n"  # beyond float range
            "trainmeter.emit(step='abc', x=1.0, y=2.0)\n"  # the call's two values
            "trainmeter.emit(step=2, x=complex(1, 1))\n"
            "trainmeter.emit(step=3, x=0.25)\n")  # fmt: skip
    out = run_tm(["--no-web", "--", sys.executable, "-c", code], workdir, timeout=120)
    assert out.returncode == 0, out.stderr
    log = read_log(workdir)
    assert [(r["name"], r["value"], r["step"]) for r in log if r["k"] == "series"] == [
        ("x", 0.25, 3)
    ]
    (counts,) = [r["counts"] for r in log if r["k"] == "dropped" and r["source"] == "agent"][-1:]
    assert counts == {"emit value out of range": 1, "emit step not an integer": 2,
                      "emit value not a real number": 1}  # fmt: skip
    summary = out.stderr.strip().splitlines()[-1]
    assert "4 records dropped (2 emit step not an integer (agent)" in summary, summary
