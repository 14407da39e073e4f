"""Stragglers under synchronous data parallel: a 4-rank gloo DDP job on CPU under ``tm``, one
rank made slow by extra host work or by its data loader, or none (docs/spec.md "Stragglers").

Every rank of a DDP job steps at the slowest rank's pace, so the step-interval rule sees
nothing; the arrival lag does. Each run's log is replayed record by record, so the tests see
when a rank was first flagged (in rank 0's steps) and that no other rank ever was."""

import re
import sys

import pytest
from conftest import FIXTURES, read_log, run_tm

pytest.importorskip("torch")

from trainmeter.core.engine import Engine

pytestmark = pytest.mark.slow
SCRIPT = FIXTURES / "ddp_straggler_train.py"
SLOW = 2


def _run(workdir, steps: int, *args: str) -> tuple[str, list[dict]]:
    """The fixture under ``tm`` with 4 ranks; (its stdout, its run log's records)."""
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=4"]
    out = run_tm(["-q", "--", *launch, SCRIPT, "--steps", steps, *args], workdir)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout, read_log(workdir)


def _replay(records: list[dict]) -> tuple[dict, dict[int, int]]:
    """(the final snapshot, {rank: rank 0's step when it was first flagged}), the records
    applied one at a time as the live supervisor applies them."""
    eng, first = Engine(), {}
    for rec in records:
        eng.apply(rec)
        if rec["k"] == "step":
            flagged = eng.ranks.snapshot(eng.stragglers, 0.0)["stragglers"] or []
            for r in flagged:
                first.setdefault(r, eng.clock.step)
    return eng.snapshot(), first


def _injected(stdout: str) -> float:
    return float(re.search(r"injected delay_s ([0-9.]+)", stdout).group(1))


def test_a_rank_with_extra_host_work_is_the_one_straggler_and_its_cost_is_the_delay(workdir):
    """Rank 0 logs its loss to TensorBoard, as DDP scripts do: its arrivals must still come
    (the backward tap keeps stamping once a tracker reports the loss)."""
    stdout, log = _run(workdir, 30, "--slow-rank", SLOW, "--delay", "0.03", "--where", "step",
                       "--tensorboard", workdir / "tb")  # fmt: skip
    assert any(r["k"] == "series" and r.get("source") == "tensorboard" for r in log)
    rank0 = [r for r in log if r["k"] == "step" and r["rank"] == 0]
    assert sum(1 for r in rank0 if r.get("arr")) >= len(rank0) - 1  # the first may lack one
    snap, first = _replay(log)
    assert snap["ranks"] == {"0": 30, "1": 30, "2": 30, "3": 30}
    assert set(first) == {SLOW}, (first, snap["rank_lag_s"])  # that rank and no other, ever
    assert first[SLOW] <= 20, first
    # the intervals are all alike (the all-reduce makes every rank wait): only the lag sees it
    assert snap["stragglers"] == [SLOW] and snap["straggler_rule"] == {str(SLOW): "lag"}
    delay = _injected(stdout)  # the extra sleep per step as it really took (about 0.03 s)
    cost = snap["straggler_cost_s"][str(SLOW)]
    assert abs(cost - delay) <= 0.25 * delay, (cost, delay)
    others = [v for r, v in snap["straggler_cost_s"].items() if r != str(SLOW)]
    assert max(others) < 0.1 * delay, snap["straggler_cost_s"]
    # its time is its own work; the others' is waiting for it, taken out of their compute
    split = snap["rank_time_split"]
    assert split[str(SLOW)]["wait"] < 0.2 * split["0"]["wait"], split
    assert "compute or host work" in snap["straggler_cause"][str(SLOW)], snap["straggler_cause"]


def test_a_rank_with_a_slow_data_loader_is_flagged_with_data_wait_as_the_cause(workdir):
    stdout, log = _run(workdir, 30, "--slow-rank", SLOW, "--delay", "0.03", "--where", "data")
    snap, first = _replay(log)
    assert set(first) == {SLOW} and first[SLOW] <= 20, (first, snap["rank_lag_s"])
    delay = _injected(stdout)
    cost = snap["straggler_cost_s"][str(SLOW)]
    assert abs(cost - delay) <= 0.25 * delay, (cost, delay)
    cause = snap["straggler_cause"][str(SLOW)]
    assert cause.startswith(f"rank {SLOW}: data loader (+"), cause
    ms = float(re.search(r"\+(\d+) ms/step data wait", cause).group(1))
    assert abs(ms / 1e3 - delay) <= 0.25 * delay, (cause, delay)
    split = snap["rank_time_split"]
    assert split[str(SLOW)]["data"] > 20 * split["0"]["data"], split  # 0.9 s against ~0.01 s


def test_no_rank_is_flagged_in_200_steps_without_a_delay(workdir):
    _, log = _run(workdir, 200)
    snap, first = _replay(log)
    assert snap["ranks"] == {"0": 200, "1": 200, "2": 200, "3": 200}
    assert first == {}, (first, snap["rank_lag_s"])
    assert snap["stragglers"] == [] and snap["straggler_cause"] == {}
    assert all(abs(v) < 0.005 for v in snap["rank_lag_s"].values()), snap["rank_lag_s"]
