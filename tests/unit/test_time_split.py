"""Time spans and stragglers on the supervisor side: the ``spans`` wire batch, the sender's
order, the engine's ``time_split`` (hand-computed) and ``stragglers`` (docs/spec.md "Time
spans", "Stragglers")."""

import json

import pytest

from trainmeter.core import engine as E
from trainmeter.core import records
from trainmeter.core.engine import Engine, replay

# -- the wire -------------------------------------------------------------------------------------


def test_a_spans_batch_expands_into_span_records():
    line = json.dumps({"v": 1, "k": "spans", "rank": 3, "name": ["data", "eval"],
                       "t": [10.0, 11.5], "dur": [0.25, 1.0]})  # fmt: skip
    recs = records.decode_wire(line)
    assert recs == [
        {"v": 1, "k": "span", "t": 10.0, "name": "data", "dur": 0.25, "rank": 3},
        {"v": 1, "k": "span", "t": 11.5, "name": "eval", "dur": 1.0, "rank": 3},
    ]
    # what the run log holds replays as the same record
    assert records.decode(records.encode(recs[0])) == recs[0]


@pytest.mark.parametrize(
    "batch",
    [
        {"name": ["data"], "t": [1.0, 2.0], "dur": [0.1]},  # ragged
        {"name": "data", "t": [1.0], "dur": [0.1]},  # not columns
        {"name": ["data"], "t": [1.0], "dur": [-0.1]},  # negative duration
        {"name": ["data"], "t": [1.0], "dur": [True]},  # not a number
        {"name": ["x" * 33], "t": [1.0], "dur": [0.1]},  # kind too long
    ],
)
def test_a_bad_spans_batch_is_refused(batch):
    with pytest.raises(records.RecordError):
        records.decode_wire(json.dumps({"v": 1, "k": "spans", "rank": 0, **batch}))


def test_a_span_of_a_kind_this_version_does_not_know_is_kept_not_used():
    rec = records.make("span", 5.0, name="compile", dur=1.0, rank=0)  # a newer agent
    eng = Engine()
    eng.apply(records.make("run_start", 0.0, id="r", name="r", argv=[], version="0"))
    eng.apply(rec)
    assert eng.snapshot()["time_split"] is None


class _Sock:
    def __init__(self):
        self.sent = b""

    def sendall(self, data):
        self.sent += data

    def send(self, data):  # the sender writes without blocking (agent/sender.py's Outbound)
        self.sent += bytes(data)
        return len(data)


def test_the_sender_sends_steps_then_spans_then_records(monkeypatch):
    from trainmeter.agent.sender import Sender

    sender = Sender("/nonexistent.sock", {"ctl": "agent", "rank": 2}, interval=3600)
    sock = _Sock()
    monkeypatch.setattr(sender, "_connect", lambda: sock)
    sender.put({"v": 1, "k": "note", "t": 1.0, "text": "hi"})
    sender.queue.append(("data", 1.0, 0.123456789))  # a span (kind, start, seconds)
    sender.queue.append((1.5, 1, 32, 4, 256))  # a step (t, step, tokens, samples, seq_sq)
    sender.queue.append(("checkpoint", 1.6, 0.5))
    sender._write_queued()
    lines = [json.loads(x) for x in sock.sent.splitlines()]
    # the first step also says what clocks the steps (agent/backward.py's step_clock record)
    assert [x["k"] for x in lines] == ["steps", "spans", "note", "step_clock"]
    assert lines[1] == {"v": 1, "k": "spans", "rank": 2, "name": ["data", "checkpoint"],
                        "t": [1.0, 1.6], "dur": [0.1234568, 0.5]}  # fmt: skip
    sender._stop.set()


# -- time_split -----------------------------------------------------------------------------------


def _rec(kind, t, **fields):
    return records.make(kind, t, **fields)


def _step(t, n, rank=0):
    return _rec("step", t, step=n, rank=rank, tokens=32, samples=4)


def _span(kind, t, dur, rank=0):
    return _rec("span", t, name=kind, dur=dur, rank=rank)


def _scenario(span_after_step=True):
    """Rank 0 from 100 to 106 s, by hand:

    100.0-100.5       the interpreter, imports, the model: start-up
    100.5 data 0.5    before the first step: data, not inside an interval
    101.0 warmup 1.0  first forward to first step: in `other`
    102   step 1      (untimed: the segment's first)
    102.1 data 0.4    inside (102, 103]
    103   step 2      timed 1 s
    103.2 data 0.3    inside (103, 104]; sent after step 3 when span_after_step (one flush)
    104   step 3      timed 1 s
    104.1 checkpoint 0.5   inside (104, 105]
    105   step 4      timed 1 s
    105.2 eval 0.6    after the last step: eval, not inside an interval
    106   run end
    timed 3 s - inside (0.4 + 0.3 + 0.5) = compute 1.8; data 1.2; checkpoint 0.5; eval 0.6;
    start-up: the 2 s before the first step less the data 0.5 and the warm-up 1.0 = 0.5;
    elapsed 6 s - 4.1 - 0.5 = other 1.4 (the warm-up 1.0, and 0.4 after the last step).
    """
    recs = [
        _rec("run_start", 100.0, id="r", name="r", argv=[], version="0"),
        _rec("agent_hello", 100.0, pid=1, rank=0, world_size=1),
        _span("data", 100.5, 0.5),
        _span("warmup", 101.0, 1.0),
        _step(102.0, 1),
        _span("data", 102.1, 0.4),
        _step(103.0, 2),
    ]
    late = [_step(104.0, 3), _span("data", 103.2, 0.3)]
    recs += late if span_after_step else late[::-1]
    recs += [
        _span("checkpoint", 104.1, 0.5),
        _step(105.0, 4),
        _span("eval", 105.2, 0.6),
        _rec("run_end", 106.0, status="ok", exit_code=0),
    ]
    return recs


def _fold(recs):
    eng = Engine()
    for r in recs:
        eng.apply(r)
    return eng


def test_time_split_by_hand():
    snap = _fold(_scenario()).snapshot()
    split = snap["time_split"]
    assert split == pytest.approx({"compute": 1.8, "data": 1.2, "checkpoint": 0.5, "eval": 0.6,
                                   "startup": 0.5, "other": 1.4, "warmup": 1.0})  # fmt: skip
    parts = ("compute", "data", "checkpoint", "eval", "startup", "other")
    assert parts == E.SPLIT
    assert sum(split[k] for k in parts) == pytest.approx(snap["elapsed_s"]) == pytest.approx(6.0)
    assert snap["rank_time_split"]["0"]["startup"] == pytest.approx(0.5)  # the same rule


def test_a_span_sent_in_the_same_flush_as_a_later_step_lands_in_the_same_bucket():
    a = _fold(_scenario(span_after_step=True)).snapshot()["time_split"]
    b = _fold(_scenario(span_after_step=False)).snapshot()["time_split"]
    assert a == pytest.approx(b)


def test_replay_of_the_log_gives_the_same_time_split():
    recs = _scenario()
    live = _fold(recs).snapshot()
    replayed = replay(records.encode(r) for r in recs).snapshot()
    assert replayed["time_split"] == live["time_split"]
    assert replayed == live


def test_time_split_is_null_until_a_span_and_counts_only_rank_0_inside_segments():
    recs = _scenario()
    assert _fold([r for r in recs if r["k"] != "span"]).snapshot()["time_split"] is None
    others = [dict(r, rank=1) if r["k"] == "span" else r for r in recs]
    assert _fold(others).snapshot()["time_split"] is None
    # a span begun before the segment counts only from the segment's start
    eng = _fold([*recs[:2], _span("data", 99.0, 1.5)])
    assert eng.snapshot()["time_split"]["data"] == pytest.approx(0.5)


def test_a_run_without_rank_0_says_its_split_is_in_the_run_of_rank_0s_node():
    # one node's own run of a two-node job: ranks 2 and 3 step and send spans
    recs = [dict(r, rank=r["rank"] + 2) if "rank" in r else r for r in _scenario()]
    snap = _fold(recs).snapshot()
    assert snap["time_split"] is None  # the split is rank 0's
    why = snap["reasons"]["time_split"]
    assert "this run has none" in why and "--no-tap" not in why  # not blamed on the taps
    no_spans = [r for r in _scenario() if r["k"] != "span"]  # rank 0's run, no span: taps
    assert "--no-tap" in _fold(no_spans).snapshot()["reasons"]["time_split"]


def test_notebook_segments_leave_out_the_gaps_and_start_over_at_each_first_step():
    recs = [
        _rec("segment_start", 0.0, segment=1),
        _step(1.0, 1),
        _step(2.0, 2),
        _span("eval", 2.5, 0.5),  # after the cell's last step: pending, never inside
        _rec("segment_end", 3.0, segment=1, status="ok"),
        _span("data", 5.0, 1.0),  # between cells: not counted
        _rec("segment_start", 10.0, segment=2),
        _span("data", 10.2, 0.3),  # before this cell's first step
        _step(11.0, 3),  # untimed: the cell's first step
        _span("data", 11.1, 0.2),
        _step(12.0, 4),
        _rec("segment_end", 13.0, segment=2, status="ok"),
    ]
    split = _fold(recs).snapshot()["time_split"]
    # timed: (1, 2] and (11, 12] = 2 s, less 0.2 inside; elapsed 3 + 3 = 6 s; start-up: the
    # run's time before its first step, 0 to 1 s (the second cell's first step is "other")
    assert split == pytest.approx({"compute": 1.8, "data": 0.5, "checkpoint": 0.0, "eval": 0.5,
                                   "startup": 1.0, "other": 2.2, "warmup": 0.0})  # fmt: skip


def test_a_huge_span_cannot_overflow_the_sums():
    eng = _fold(_scenario()[:2] + [_span("data", 100.0, 1e308)] * 3)
    split = eng.snapshot()["time_split"]
    assert split["data"] == 3 * E.MAX_SPAN_S and split["other"] == 0.0
    assert json.dumps(split, allow_nan=False)


# -- stragglers -----------------------------------------------------------------------------------


def _ranks(intervals: dict[int, float], steps: int) -> list[dict]:
    """Step records of ranks stepping every ``intervals[rank]`` seconds, in time order."""
    recs = [_rec("run_start", 0.0, id="r", name="r", argv=[], version="0")]
    recs += [_rec("agent_hello", 0.0, pid=r + 1, rank=r, world_size=len(intervals))
             for r in intervals]  # fmt: skip
    steps_ = [(dt * k, r, k) for r, dt in intervals.items() for k in range(1, steps + 1)]
    recs += [_step(t, k, rank=r) for t, r, k in sorted(steps_)]
    return recs


def _stragglers_by_step(recs):
    """Rank 0's step -> the snapshot's stragglers right after it."""
    eng, out = Engine(), {}
    for r in recs:
        eng.apply(r)
        if r["k"] == "step" and r["rank"] == 0:
            out[r["step"]] = eng.snapshot()["stragglers"]
    return out


def test_a_rank_30_percent_slower_is_flagged_after_5_evaluations_and_no_other():
    seen = _stragglers_by_step(_ranks({0: 1.0, 1: 1.0, 2: 1.3, 3: 1.0}, 30))
    # step 2: only rank 0 has a timed interval yet (the others' come after it at t = 2)
    assert seen[1] is None and seen[2] is None
    # from step 3 every rank has a mean; rank 2 is slow at steps 3, 4, 5, 6, 7
    assert [seen[k] for k in (3, 4, 5, 6)] == [[], [], [], []]
    assert all(seen[k] == [2] for k in range(7, 31))


def test_within_the_margin_no_rank_is_flagged():
    seen = _stragglers_by_step(_ranks({0: 1.0, 1: 1.0, 2: 1.14, 3: 1.05}, 30))
    assert all(v == [] for k, v in seen.items() if k >= 3)


def test_two_ranks_one_rank_and_recovery():
    # two ranks: the lower median is the faster one, so the slower is flagged
    assert _stragglers_by_step(_ranks({0: 1.0, 1: 1.3}, 20))[20] == [1]
    assert _stragglers_by_step(_ranks({0: 1.0}, 20))[20] is None  # one rank: not measured
    # a rank that was slow and is no longer: its window's mean falls back under the margin
    recs = _ranks({0: 1.0, 1: 1.0, 2: 1.5}, 20)
    last2 = max(r["t"] for r in recs if r["k"] == "step" and r["rank"] == 2)
    more = [_step(20.0 + k, 20 + k, rank=r) for k in range(1, 41) for r in (0, 1)]
    more += [_step(last2 + k, 100 + k, rank=2) for k in range(1, 41)]
    more.sort(key=lambda r: (r["t"], r["rank"]))
    seen = _stragglers_by_step(recs + more)
    assert seen[20] == [2] and seen[60] == []


def test_stragglers_stay_bounded_at_worst():
    """At most half the ranks can sit above the lower median, so the list holds at most
    MAX_RANKS // 2 ranks of at most 10 digits (docs/spec.md "Bounds on an update")."""
    big = {2**31 - 1 - i: (2.0 if i % 2 else 1.0) for i in range(E.MAX_RANKS + 50)}
    recs = _ranks({0: 1.0, **big}, 3)
    recs += [_step(3.0 + k, 3 + k) for k in range(1, 8)]  # 7 more evaluations
    snap = _fold(recs).snapshot()
    flagged = snap["stragglers"]
    assert len(snap["ranks"]) == E.MAX_RANKS
    assert 0 < len(flagged) <= E.MAX_RANKS // 2
    assert len(json.dumps(flagged, separators=(",", ":"))) <= E.MAX_RANKS // 2 * 11 + 2


def test_a_forked_child_stops_the_taps_and_keeps_nothing(monkeypatch):
    from trainmeter.agent.sender import Sender

    sender = Sender("/nonexistent.sock", {"ctl": "agent", "rank": 0}, interval=3600)
    stopped = []
    sender.on_stop = lambda: stopped.append(True)
    sender.queue.append((1.5, 1, 32, 4))
    sender.forget_after_fork()  # what runtime's os.register_at_fork handler calls in the child
    assert stopped == [True] and not sender.queue and not sender.alive
    sender._stop.set()
