"""Every rank's arrival, lag, the synchronous straggler rule and the per-rank time split
(trainmeter/core/ranks.py, docs/spec.md "Stragglers"), from hand-built records with lags
computed by hand; and the arrival column on its way there (the sender's reader, decode_wire,
the backward tap's time stamp)."""

import json
import time
from collections import deque

import pytest

from trainmeter.agent.sender import QueueReader
from trainmeter.core import ranks as R
from trainmeter.core.engine import Engine
from trainmeter.core.records import decode_wire, encode

T0 = 1000.0
STEP_S = 0.1


def _engine(hosts=None) -> Engine:
    """An engine with a run open at ``T0 - 1`` and one agent per rank (``hosts``: rank ->
    host; default 4 ranks on one host)."""
    eng = Engine()
    eng.apply({"v": 1, "k": "run_start", "t": T0 - 1, "id": "r", "name": "r", "argv": [],
               "version": "1"})  # fmt: skip
    hosts = hosts or dict.fromkeys(range(4), "node-a")
    for rank, host in hosts.items():
        eng.apply({"v": 1, "k": "agent_hello", "t": T0 - 1, "pid": 100 + rank, "rank": rank,
                   "world_size": len(hosts), "host": host})  # fmt: skip
    return eng


def _step(eng, rank, n, t, arr):
    eng.apply({"v": 1, "k": "step", "t": t, "step": n, "rank": rank, "tokens": None,
               "samples": None, "arr": arr})  # fmt: skip


def _sync_step(eng, n, late, clock=0.0, ranks=None):
    """Step ``n`` of every rank in ``late`` (rank -> arrival after the step's start, s): all
    leave together at ``T0 + n * STEP_S`` (+ ``clock``, that node's clock offset)."""
    for rank, a in late.items():
        start = T0 + (n - 1) * STEP_S + clock
        _step(eng, rank, n, T0 + n * STEP_S + clock, start + a)


def _flagged(eng) -> list:
    return eng.snapshot()["stragglers"]


SLOW = {0: 0.000, 1: 0.002, 2: 0.030, 3: 0.001}  # rank 2 reaches backward 30 ms late


def test_lag_cost_and_wait_are_the_arrivals_against_the_lower_median():
    eng = _engine()
    for n in range(1, 21):
        _sync_step(eng, n, SLOW)
    snap = eng.snapshot()
    # arrivals sorted 0, 1, 2, 30 ms: the lower median (2nd smallest) is 1 ms
    assert snap["rank_lag_s"] == pytest.approx(
        {"0": -0.001, "1": 0.001, "2": 0.029, "3": 0.0}, abs=1e-9
    )
    # the job waits on rank 2, the last: 30 - 1 ms a step; 29 % of the 0.1 s step
    assert snap["straggler_cost_s"] == pytest.approx({"0": 0, "1": 0, "2": 0.029, "3": 0}, abs=1e-9)
    assert snap["straggler_share"]["2"] == pytest.approx(0.29, abs=1e-6)
    assert snap["stragglers"] == [2] and snap["straggler_rule"] == {"2": "lag"}
    # every rank's step interval is the same: the interval rule sees nothing
    assert eng.stragglers == []
    # no span from any rank: no split, and no cause but that
    assert snap["rank_time_split"] is None
    assert snap["straggler_cause"] == {"2": "rank 2: cause unknown (no time spans from enough "
                                             "ranks)"}  # fmt: skip


def test_a_rank_is_flagged_at_the_5th_slow_evaluation_and_unflagged_below_5_percent():
    eng = _engine()
    flags = []
    for n in range(1, 31):
        _sync_step(eng, n, SLOW)
        flags.append(_flagged(eng))
    # step 1 has no step time (no interval yet); steps 2-4 fewer than 5 lags; steps 5..9 are
    # the five slow evaluations: flagged at step 9
    assert flags[7] == [] and flags[8] == [2], flags
    late = {0: 0.0, 1: 0.002, 2: 0.0, 3: 0.001}  # rank 2 keeps up: lag 0 (median 0)
    after = []
    for n in range(31, 51):
        _sync_step(eng, n, late)
        after.append(_flagged(eng))
    # the window's trimmed mean: (19 - k) x 29 ms / 19 after k steps at lag 0; below 10 % at
    # k = 13 (9.2 ms) but above 5 % until k = 16 (4.6 ms): hysteresis keeps the flag to 15
    assert after[12] == [2] and after[14] == [2] and after[15] == [], after


def test_one_long_step_does_not_flag_a_rank():
    eng = _engine()
    for n in range(1, 41):
        late = {**SLOW, 2: 2.0 if n == 10 else 0.001}  # one 2 s checkpoint on rank 2
        _sync_step(eng, n, late)
        assert _flagged(eng) == [], n  # trimmed: the window's largest lag is left out


def test_uncoupled_ranks_are_not_judged_by_lag():
    # rank 1 steps 30 % slower and never waits: it finishes step n after rank 0 left it
    eng = _engine({0: "a", 1: "a"})
    for n in range(1, 41):
        _step(eng, 0, n, T0 + n * STEP_S, T0 + n * STEP_S - 0.01)
        _step(eng, 1, n, T0 + n * 1.3 * STEP_S, T0 + n * 1.3 * STEP_S - 0.01)
    snap = eng.snapshot()
    assert snap["rank_lag_s"] is None and snap["straggler_cost_s"] is None
    assert snap["stragglers"] == [1] and snap["straggler_rule"] == {"1": "interval"}


def test_each_node_is_lagged_against_its_own_ranks():
    # ranks 0, 1 on node a; 2, 3 on node b whose clock is 5 s ahead; rank 3 is 30 ms late
    eng = _engine({0: "a", 1: "a", 2: "b", 3: "b"})
    for n in range(1, 21):
        _sync_step(eng, n, {0: 0.0, 1: 0.001})
        _sync_step(eng, n, {2: 0.0, 3: 0.030}, clock=5.0)
    snap = eng.snapshot()
    # two ranks a node: the lower median is the earlier one
    assert snap["rank_lag_s"] == pytest.approx(
        {"0": 0.0, "1": 0.001, "2": 0.0, "3": 0.030}, abs=1e-6
    )
    assert snap["stragglers"] == [3]
    assert snap["straggler_cost_s"]["3"] == pytest.approx(0.030, abs=1e-6)


def test_a_merged_logs_node_labels_group_the_ranks():
    # tm merge labels every record with its node; the hellos here name one host (and the
    # nodes' pids could collide): the label decides. Node b's clock is 3 s behind.
    eng = _engine({0: "h", 1: "h", 2: "h", 3: "h"})
    for n in range(1, 21):
        for rank, late, clock, node in ((0, 0.0, 0.0, 0), (1, 0.004, 0.0, 0),
                                        (2, 0.0, -3.0, 1), (3, 0.001, -3.0, 1)):  # fmt: skip
            start = T0 + (n - 1) * STEP_S + clock
            eng.apply({"v": 1, "k": "step", "t": T0 + n * STEP_S + clock, "step": n,
                       "rank": rank, "tokens": None, "samples": None, "arr": start + late,
                       "node": node})  # fmt: skip
    assert eng.snapshot()["rank_lag_s"] == pytest.approx(
        {"0": 0.0, "1": 0.004, "2": 0.0, "3": 0.001}, abs=1e-6
    )


def test_records_of_one_step_joined_whatever_order_they_come_in():
    eng = _engine({0: "a", 1: "a"})
    _sync_step(eng, 1, {0: 0.0, 1: 0.004})
    for rank in (1, 0):  # rank 1's flush of steps 2..6 first, then rank 0's
        for n in range(2, 7):
            _sync_step(eng, n, {rank: {0: 0.0, 1: 0.004}[rank]})
    assert eng.snapshot()["rank_lag_s"] == pytest.approx({"0": 0.0, "1": 0.004}, abs=1e-9)
    assert len(eng.ranks.ranks[1].lags) == 6


def test_a_rank_that_stops_leaves_its_steps_to_close_without_it():
    eng = _engine({0: "a", 1: "a", 2: "a"})
    for n in range(1, 4):
        _sync_step(eng, n, {0: 0.0, 1: 0.0, 2: 0.01})
    for n in range(4, 4 + R.JOIN_STEPS + 1):  # rank 2 is gone
        _sync_step(eng, n, {0: 0.0, 1: 0.002})
    g = eng.ranks.groups[""]
    # at step 68 step 4 is JOIN_STEPS behind: closed with two ranks, and so is every step
    # after it at once
    assert len(g.open) == 0 and g.need == 2
    assert len(eng.ranks.ranks[1].lags) == R.LAG_WINDOW
    assert eng.snapshot()["rank_lag_s"]["1"] == pytest.approx(0.002, abs=1e-9)


def _split_run(eng, n_steps=21, data=None, elapsed=None):
    """Three ranks, all leaving step n at T0 + n x 0.1 s; before step n each waits
    ``data[rank]`` s for its batch (a span from 1 ms after the previous step), then 10 ms
    to backward(), its arrival (none at step 1)."""
    data = data or {0: 0.002, 1: 0.040, 2: 0.003}
    for n in range(1, n_steps + 1):
        prev = T0 + (n - 1) * STEP_S
        for rank, d in data.items():
            eng.apply({"v": 1, "k": "span", "t": prev + 0.001, "name": "data", "dur": d,
                       "rank": rank})  # fmt: skip
        for rank, d in data.items():
            _step(eng, rank, n, T0 + n * STEP_S, None if n == 1 else prev + 0.001 + d + 0.01)


def test_time_split_per_rank_takes_the_wait_out_of_compute():
    eng = _engine({0: "a", 1: "a", 2: "a"})
    _split_run(eng)
    split = eng.ranks.snapshot(None, 3.1)["rank_time_split"]  # the run: T0 - 1 to T0 + 2.1
    # arrivals 13, 51, 14 ms after each step: waits 38, 0, 37 ms at steps 2..21 (20 steps);
    # compute = 20 timed intervals x (100 ms - data - wait) = 20 x 60 ms for every rank;
    # start-up: the 1.1 s before the first step (T0 + 0.1) less the rank's first data wait;
    # nothing is left for "other" (the run ends at the last step)
    assert split["0"] == pytest.approx({"compute": 1.2, "data": 21 * 0.002, "checkpoint": 0,
                                        "eval": 0, "wait": 20 * 0.038, "startup": 1.1 - 0.002,
                                        "other": 0.0}, abs=1e-9)  # fmt: skip
    assert split["1"] == pytest.approx({"compute": 1.2, "data": 21 * 0.040, "checkpoint": 0,
                                        "eval": 0, "wait": 0.0, "startup": 1.1 - 0.040,
                                        "other": 0.0}, abs=1e-9)  # fmt: skip
    assert all(sum(split[r].values()) == pytest.approx(3.1) for r in ("0", "1", "2"))


def test_a_slow_data_loader_is_named_as_the_cause():
    eng = _engine({0: "a", 1: "a", 2: "a"})
    _split_run(eng)
    snap = eng.snapshot()
    assert snap["stragglers"] == [1]
    # lag: 51 ms against the lower median 14 ms = 37 ms; data a step 40 ms against 3 ms
    assert snap["straggler_cost_s"]["1"] == pytest.approx(0.037, abs=1e-9)
    assert snap["straggler_cause"] == {
        "1": "rank 1: data loader (+37 ms/step data wait over the median rank)"
    }


def test_slow_compute_is_named_as_the_cause():
    eng = _engine({0: "a", 1: "a", 2: "a"})
    data = {0: 0.002, 1: 0.002, 2: 0.003}
    for n in range(1, 22):
        prev = T0 + (n - 1) * STEP_S
        for rank, d in data.items():
            eng.apply({"v": 1, "k": "span", "t": prev + 0.001, "name": "data", "dur": d,
                       "rank": rank})  # fmt: skip
        for rank, d in data.items():
            work = 0.050 if rank == 1 else 0.010  # rank 1: 40 ms more before backward()
            _step(eng, rank, n, T0 + n * STEP_S, None if n == 1 else prev + 0.001 + d + work)
    cause = eng.snapshot()["straggler_cause"]
    # arrivals 13, 53, 14 ms after each step; compute a timed step = 100 - data - wait:
    # rank 1 100 - 2 - 0 = 98 ms, the others 100 - 2 - 40 = 58 and 100 - 3 - 39 = 58 ms
    # (the lower median): 40 ms over it
    assert cause == {"1": "rank 1: compute or host work outside data, checkpoint and eval "
                          "(+40 ms/step over the median rank)"}  # fmt: skip


def test_bounded_by_max_ranks_and_quiet_with_one_rank():
    r = R.Ranks(max_ranks=2)
    for rank in range(4):
        r.on_step(rank, 1, T0, T0 - 0.01, None, True, {})
    assert sorted(r.ranks) == [0, 1]
    eng = _engine({0: "a"})
    for n in range(1, 10):
        _sync_step(eng, n, {0: 0.0})
    snap = eng.snapshot()
    assert snap["rank_lag_s"] is None and snap["stragglers"] is None
    assert snap["straggler_rule"] == {} and snap["straggler_cause"] == {}


def test_helpers():
    assert R.lower_median([1.0, 2.0, 3.0, 30.0]) == 2.0
    assert R.lower_median([5.0, 7.0]) == 5.0
    assert R.trimmed_mean([1.0, 2.0, 9.0]) == 1.5
    assert R.trimmed_mean([4.0, 8.0]) == 6.0
    agents = {1: {"rank": 0, "host": "a", "world_size": 1},  # torchrun's own agent
              2: {"rank": 0, "host": "a", "world_size": 4},
              3: {"rank": 1, "host": "b", "world_size": 4}}  # fmt: skip
    assert R.groups_of(agents) == {0: "a", 1: "b"}
    assert R.groups_of({1: {"rank": 0, "host": "a", "world_size": 2}}) == {0: ""}
    assert R.groups_of({1: {"rank": 0, "host": "a", "world_size": 1}}) == {}


# -- the arrival column ---------------------------------------------------------------------
def test_the_reader_writes_each_steps_last_backward_as_arr_us():
    reader, q = QueueReader(3), deque()
    # step 1: two backward calls (accumulation), the last at T0 + 0.25; step 2: one at
    # T0 + 0.58; step 3: none; a backward at T0 + 0.7 whose step comes in the next flush
    q.extend([(T0 + 0.1, 1.0), (T0 + 0.25, 1.0), T0 + 0.5, (T0 + 0.58, 2.0), T0 + 0.6, T0 + 0.65,
              (T0 + 0.7, 3.0)])  # fmt: skip
    batch, _, _ = reader.read(q)
    assert batch["t0"] == T0 + 0.5 and batch["dt_us"] == [0, 100000, 150000]
    # microseconds from the arrival to its step: 0.5 - 0.25 s, 0.6 - 0.58 s
    assert batch["arr_us"] == [250000, 20000, None]
    q.extend([T0 + 0.9, (0.0, 1.0), T0 + 1.0])  # 0.0: a backward not stamped
    batch, _, _ = reader.read(q)
    assert batch["arr_us"] == [200000, None]
    q.append(T0 + 1.1)
    batch, _, _ = reader.read(q)
    assert "arr_us" not in batch  # no arrival in it: no column
    rows = decode_wire(json.dumps(
        {"v": 1, "k": "steps", "rank": 3, "t0": T0 + 0.5, "dt_us": [0, 100000, 150000],
         "step": [1, 2, 3], "tokens": [0, 0, 0], "samples": [0, 0, 0], "seq_sq": [0, 0, 0],
         "arr_us": [250000, 20000, None]}))  # fmt: skip
    assert [r.get("arr") for r in rows] == [T0 + 0.5 - 0.25, T0 + 0.6 - 0.02, None]
    assert "arr" not in rows[2]  # no arrival: the step record it always was
    for r in rows:  # the supervisor's fast step line: json.dumps's own bytes
        assert encode(r) == (json.dumps(r, separators=(",", ":")) + "\n").encode()


def test_decode_wire_refuses_a_bad_arrival_column():
    from trainmeter.core.records import RecordError

    base = {"v": 1, "k": "steps", "rank": 0, "t0": T0, "dt_us": [0], "step": [1],
            "tokens": [0], "samples": [0], "seq_sq": [0]}  # fmt: skip
    for bad in ([1.5], ["x"], [True], [1, 2], [2 * 10**12]):
        with pytest.raises(RecordError):
            decode_wire(json.dumps({**base, "arr_us": bad}))
    from trainmeter.core.records import validate

    step = {"v": 1, "k": "step", "t": T0, "step": 1, "rank": 0, "tokens": None}
    for bad in (1e300, -1.0, "x", True):  # a run log's arr: a time like t, or null
        with pytest.raises(RecordError):
            validate({**step, "arr": bad})
    assert validate({**step, "arr": None}) and validate({**step, "arr": T0 - 0.01})


@pytest.mark.parametrize("stamp", [True, False, None])
def test_the_lean_backward_wrapper_stamps_each_call_of_a_many_rank_run(stamp):
    torch = pytest.importorskip("torch")
    from trainmeter.agent.backward import BackwardTap

    class _Agent:
        class sender:
            put_step = deque().append
            count = staticmethod(lambda reason, n=1: None)  # Sender.count: nothing dropped here

    queue = _Agent.sender.put_step.__self__
    tap = BackwardTap(_Agent(), torch)
    tap.start()
    tap.lean(stamp)  # None: torch.distributed is not initialized here, so no stamp
    try:
        w = torch.ones(2, requires_grad=True)
        before = time.time()
        (w * 2).sum().backward()
        after = time.time()
    finally:
        tap.stop()
    (t, loss), *_ = queue
    assert (before <= t <= after) if stamp else t == 0.0
    assert loss.item() == 4.0


def test_the_per_rank_keys_carry_at_most_64_ranks_the_flagged_first():
    n = 1024
    eng = _engine(dict.fromkeys(range(n), "h"))
    for step in range(1, 16):
        prev = T0 + (step - 1) * STEP_S
        for rank in range(n):
            eng.apply({"v": 1, "k": "span", "t": prev + 0.001, "name": "data",
                       "dur": 0.001 + (0.03 if rank % 2 else 0.0), "rank": rank})  # fmt: skip
        # the odd ranks' loaders take 30 ms more: half the ranks, above the lower median
        _sync_step(eng, step, {r: 0.01 + (0.03 if r % 2 else 0.0) for r in range(n)})
    snap = eng.snapshot()
    assert snap["stragglers"] == list(range(1, n, 2))  # every flagged rank is listed
    keys = ("rank_lag_s", "straggler_cost_s", "straggler_share", "straggler_rule",
            "straggler_cause", "rank_time_split")  # fmt: skip
    for key in keys:
        assert list(snap[key]) == [str(r) for r in range(1, 128, 2)], key  # 64, flagged first
    assert snap["straggler_cause"]["1"] == ("rank 1: data loader (+30 ms/step data wait over "
                                            "the median rank)")  # fmt: skip
    # the bound docs/spec.md "Stragglers" states: 64 ranks x (3 numbers of 38 bytes, a split
    # of 244, a rule of 28 and a cause of at most 180) + 1024 x 11 bytes of stragglers
    size = len(json.dumps({k: snap[k] for k in (*keys, "stragglers")}, separators=(",", ":")))
    assert size <= R.MAX_DETAIL * (3 * 38 + 244 + 28 + 180) + n * 11 + 200


def test_a_stamping_rank_whose_loss_comes_from_a_tracker_keeps_stamping_its_arrivals():
    """Rank 0 of a DDP job logs its loss to a tracker (emit, wandb): the backward tap must not
    stop there, or rank 0 sends no arrival and the job's lag is never joined (a 2-rank
    examples/train_gpt.py showed one joined step in 60). It stamps ``(t, None)``: no loss."""
    torch = pytest.importorskip("torch")
    from trainmeter.agent.backward import BackwardTap

    class _Agent:
        class sender:
            put_step = deque().append
            count = staticmethod(lambda reason, n=1: None)

    queue = _Agent.sender.put_step.__self__
    tap = BackwardTap(_Agent(), torch)
    tap.start()
    tap.lean(True)
    assert tap.stamping and tap.stamp_only()
    try:
        w = torch.ones(2, requires_grad=True)
        before = time.time()
        (w * 2).sum().backward()
        after = time.time()
    finally:
        tap.stop()
    [(t, loss)] = queue
    assert before <= t <= after and loss is None


def test_the_taps_keep_a_stamping_backward_tap_once_a_tracker_reports_the_loss(fresh_guard):
    torch = pytest.importorskip("torch")
    from conftest import StandInAgent

    from trainmeter.agent.torch_taps import TorchTaps

    taps = TorchTaps(StandInAgent(), torch)
    taps.attach()
    try:
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        model(torch.ones(1, 2)).sum().backward()
        opt.step()
        taps.backward.lean(True)  # as in a run of two ranks (no process group here)
        taps.train_loss_reported()
        assert taps.backward.on  # still stamping
        model(torch.ones(1, 2)).sum().backward()
        assert taps.agent.sender.queue[-1][1] is None  # its time, no loss
        taps.backward.stamping = False  # one rank: the tap stops as before
        taps._superseded = False
        taps.train_loss_reported()
        assert not taps.backward.on
    finally:
        taps.detach()
