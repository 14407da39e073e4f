"""Checkpoints: replay from the last one gives the full replay's engine, field by field, at the
end and after every checkpoint of a run cut mid-way; a damaged checkpoint is refused, counted,
and replay reads from an earlier one or from the first line; a log without any reads as
before; ``tm ls`` reads the log's head and its last checkpoint, nothing between.

The run is written by a real ``Live`` (the supervisor) with the cadence made small, so it
holds many checkpoints: two ranks with arrivals and spans, a loss, a model, a fake GPU sampled,
a segment boundary, drops, notes and more series names than are kept.
"""

import json
import random
import zlib

import pytest
from conftest import Clock

from trainmeter.commands.ls import ls_row
from trainmeter.core import checkpoint, engine, logread, records
from trainmeter.core.engine import MAX_SERIES, replay
from trainmeter.core.timeline import name_key
from trainmeter.sources import open_backend
from trainmeter.supervisor import ingest
from trainmeter.supervisor import live as live_mod
from trainmeter.supervisor.live import Live
from trainmeter.supervisor.sampler import Sampler

MODEL = {"params": 1000, "embedding_params": 100, "token_embedding_params": 100, "layers": 2,
         "width": 8, "heads": 2, "seq_len": 4, "vocab": 50, "device": "cpu"}  # fmt: skip
STEPS = 120


def _send(live, clock, kind, **fields):
    live.ingest([records.decode(records.encode(records.make(kind, clock(), **fields)))])


def _cell(live, clock, sampler, first, steps):
    live.segment_start("nb", {"budget_tokens": 100_000, "peak_flops": 1e12}, new=False)
    for step in range(first, first + steps):
        clock.tick(0.5)
        _send(live, clock, "span", name="data", rank=0, dur=0.1)
        _send(live, clock, "span", name="eval", rank=1, dur=0.05)
        for rank in (0, 1):
            arr = clock() - 0.01 * (1 + rank * (step % 3))
            _send(live, clock, "step", step=step, rank=rank, tokens=32, samples=4, arr=arr,
                  seq_sq=128)  # fmt: skip
        _send(live, clock, "series", name="train_loss", value=1.0 / step, step=step)
        if step % 10 == 0:
            _send(live, clock, "series", name=f"extra_{step}", value=float(step), step=step)
        if step % 4 == 0:
            sampler.tick()
        if step % 37 == 0:
            _send(live, clock, "note", text=f"a note at step {step}", source="test")
    live.segment_end("ok")


def _run(root, monkeypatch):
    """A run with many checkpoints; its log's path."""
    monkeypatch.setattr(live_mod, "CHECKPOINT_MIN_BYTES", 2048)
    monkeypatch.setattr(live_mod, "CHECKPOINT_GROWTH", 1)
    clock = Clock()
    live = Live(root, clock=clock)
    backend = open_backend("fake:h100x1", clock=clock)
    sampler = Sampler(live, backend, None, clock=clock, active=lambda: live.segment_open)
    live.open_run("ckpt", ["train.py"], {})
    for pid, rank in ((7, 0), (8, 1)):
        _send(live, clock, "agent_hello", pid=pid, rank=rank, world_size=2, host="h")
    _send(live, clock, "model", **MODEL)
    _cell(live, clock, sampler, 1, STEPS // 2)
    for i in range(MAX_SERIES):  # names past the bound: refused, counted by name_key
        _send(live, clock, "series", name=f"s{i}", value=1.0)
    clock.tick(60.0)
    _send(live, clock, "dropped", source="agent", counts={"series shed": 3}, pid=7, rank=0)
    _cell(live, clock, sampler, STEPS // 2 + 1, STEPS // 2)
    live.close_run("ok", 0)
    return live.log_path


@pytest.fixture
def log(tmp_path, monkeypatch):
    return _run(tmp_path, monkeypatch)


def diff(a, b, path=""):
    """Every field where two JSON trees differ (floats exactly)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}/{k}: on one side" for k in a.keys() ^ b.keys()]
        return out + [d for k in a.keys() & b.keys() for d in diff(a[k], b[k], f"{path}/{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True))
                for d in diff(x, y, f"{path}/{i}")]  # fmt: skip
    if type(a) is not type(b) or a != b:
        return [f"{path}: {a!r} != {b!r}"]
    return []


def _both(path, now=None):
    """The engine from the last checkpoint on, and the full replay's."""
    return replay(path, now=now), replay(path, now=now, full=True)


def _same(fast, full):
    assert diff(fast.snapshot(), full.snapshot()) == []
    assert diff(fast.timeline.full(), full.timeline.full()) == []
    assert fast.timeline.since(0) == full.timeline.since(0)  # sequence numbers too


def _checkpoint_ends(data: bytes) -> list[int]:
    """Where each checkpoint line ends in ``data``."""
    ends, at = [], 0
    for line in data.splitlines(keepends=True):
        at += len(line)
        if line.startswith(logread.CHECKPOINT):
            ends.append(at)
    return ends


def _resumed_at(path):
    eng, reader, refused = checkpoint.resume(path, engine)
    return (reader.start if eng is not None else None), refused


def test_the_run_holds_many_checkpoints_and_the_last_is_the_logs_last_line(log):
    data = log.read_bytes()
    ends = _checkpoint_ends(data)
    assert len(ends) >= 6 and ends[-1] == len(data)
    assert _resumed_at(log) == (len(data), {})  # nothing after it to fold


def test_replay_from_the_last_checkpoint_equals_the_full_replay_field_by_field(log):
    fast, full = _both(log)
    _same(fast, full)
    snap = fast.snapshot()
    assert snap["step"] == STEPS and snap["run"]["state"] == "finished"
    assert snap["hardware"]["gpus"][0]["sm_active"] is not None and snap["energy_j"] > 0
    assert snap["rank_time_split"]["1"]["eval"] > 0 and snap["dropped"]["total"] == 3
    assert any("not kept, past the table's 64 places" in n for n in snap["notes"])
    assert snap["log"] is None  # nothing skipped, nothing refused


def test_after_every_checkpoint_and_a_few_lines_more_the_two_replays_agree(log, tmp_path):
    """The log cut after each checkpoint, and 1 and 7 lines later: what a reader of a live
    run sees. Both replays at the newest record's time (the run is running)."""
    data = log.read_bytes()
    cut = tmp_path / "cut.jsonl"
    for end in _checkpoint_ends(data):
        for more in (0, 1, 7):
            stop = end
            for _ in range(more):
                nl = data.find(b"\n", stop)
                stop = nl + 1 if nl >= 0 else len(data)
            cut.write_bytes(data[:stop])
            newest = max(r["t"] for r in logread.LogReader(cut))
            last = max(e for e in _checkpoint_ends(data) if e <= stop)
            assert _resumed_at(cut)[0] == last  # from there, not from the first line
            fast, full = _both(cut, now=newest)
            _same(fast, full)


def test_a_checkpoint_in_the_middle_of_a_step_batch_splits_nothing(log, tmp_path):
    """Replay from a checkpoint, then every line after it: the engine and its chart history
    continue as if never stopped (the Steps fold resumes mid-run)."""
    data = log.read_bytes()
    first = _checkpoint_ends(data)[0]
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(data[:first] + data[first:].replace(b"\n" + logread.CHECKPOINT, b"\n{"))
    fast, full = _both(cut)  # the later checkpoints are now bad lines: counted alike
    assert _resumed_at(cut)[0] == first
    _same(fast, full)


def _forged(rec) -> bytes:
    """``rec`` as a checkpoint line whose CRC-32 is made anew for its state, as a writer who
    knows the format would: what refuses it is then the checks behind the CRC."""
    body = json.dumps(rec["state"], separators=(",", ":")).encode()
    head = {k: v for k, v in rec.items() if k not in ("state", "crc")}
    text = json.dumps(head, separators=(",", ":")).encode()[:-1]
    crc = zlib.crc32(body, zlib.crc32(text))  # of all but itself (checkpoint.crc_of)
    return b'%s,"crc":%d,"state":%s}\n' % (text, crc, body)


def _rewrite_last(log, tmp_path, change) -> "tuple":
    """The log with its last checkpoint's record changed by ``change`` (:func:`_forged`)."""
    data = log.read_bytes()
    lines = data.splitlines(keepends=True)
    rec = json.loads(lines[-1])
    change(rec)
    out = tmp_path / "bad.jsonl"
    out.write_bytes(b"".join(lines[:-1]) + _forged(rec))
    return out


def _state(rec):
    return rec["state"]["engine"]["a"]


def _series(rec, name):
    return _state(rec)["timeline"]["a"]["_series"]["m"][name]["a"]


def _clock(rec):
    return _state(rec)["clock"]["a"]


DAMAGE = {
    "wrong type": lambda r: _clock(r).update(step="12"),
    "huge int": lambda r: _clock(r).update(tokens=10**30),
    "huge float": lambda r: _clock(r).update(timed_s=1e308, recent_s=-1e308),
    "a deque past its bound": lambda r: _clock(r)["recent"].update(q=_clock(r)["recent"]["q"] * 3),
    "a chart past its cap": lambda r: _series(r, "train_loss").update(
        xs=list(range(5000)), ys=[1.0] * 5000, seqs=list(range(5000))
    ),
    "a scale index past the table": lambda r: _series(r, "tokens_per_s")["sc"].__setitem__(
        0, len(_state(r)["timeline"]["a"]["scales"])
    ),
    "a scale over zero": lambda r: _state(r)["timeline"]["a"]["scales"][0]["t"].__setitem__(0, 0),
    "a derived series with points": lambda r: _series(r, "mfu/hf").update(
        xs=[1], ys=[1.0], seqs=[1], sc=[-1]
    ),
    "a scale twice": lambda r: _state(r)["timeline"]["a"]["scales"].append(
        _state(r)["timeline"]["a"]["scales"][0]
    ),
    "a derived series led by one without scales": lambda r: _series(r, "mfu/hf").update(
        of="train_loss"
    ),
    "a derived series no scale names": lambda r: _state(r)["timeline"]["a"]["_series"]["m"].update(
        {"mfu/nothing": _state(r)["timeline"]["a"]["_series"]["m"]["mfu/hf"]}
    ),
    "a derived series led by none": lambda r: _series(r, "mfu/hf").update(of="nothing"),
    "an unknown class": lambda r: _state(r).update(clock={"o": "os.system", "a": {}}),
    "an attribute too many": lambda r: _clock(r).update(evil=1),
    "another run's": lambda r: r.update(run="20200101-000000-dead"),
    "moved in the file": lambda r: r.update(at=r["at"] - 1),
    "another format": lambda r: r["state"].update(format=99),
    "a bad position": lambda r: r["log"].update(holes=[-1]),
    "not a state": lambda r: r.update(state={"format": checkpoint.FORMAT, "engine": [1, 2]}),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_checkpoint_is_refused_counted_and_an_earlier_one_used(log, tmp_path, damage):
    bad = _rewrite_last(log, tmp_path, DAMAGE[damage])
    start, refused = _resumed_at(bad)
    assert sum(refused.values()) == 1 and start < bad.stat().st_size  # the one before it
    fast, full = _both(bad)
    got = fast.snapshot()
    reason = next(iter(got["log"]["by"]))
    assert got["log"]["skipped"] == 1 and reason.startswith("checkpoint: ")
    assert "CRC" not in reason  # refused by the check behind the CRC
    want = full.snapshot()
    assert want["log"] is None  # the full replay reads no checkpoint
    got["notes"] = [n for n in got["notes"] if not n.startswith("replay skipped")]
    assert diff({**got, "log": None}, want) == []
    assert diff(fast.timeline.full(), full.timeline.full()) == []


def test_a_last_checkpoint_cut_short_or_mangled_is_passed_over(log, tmp_path):
    data = log.read_bytes()
    last = _checkpoint_ends(data)[-2]  # the end of the one before the last
    bad = tmp_path / "bad.jsonl"
    for broken in (data[:-100], data[:-100] + b"\n", data[:-200] + b"x" * 200):
        bad.write_bytes(broken)
        start, _ = _resumed_at(bad)
        assert start == last
        fast, full = _both(bad)
        assert fast.snapshot()["step"] == full.snapshot()["step"] == STEPS
        assert diff(fast.timeline.full(), full.timeline.full()) == []


def test_every_checkpoint_damaged_means_a_full_replay(log, tmp_path):
    data = log.read_bytes().replace(b'"format":%d' % checkpoint.FORMAT, b'"format":7')
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(data)
    assert _resumed_at(bad)[0] is None
    fast, full = _both(bad)
    tried = min(checkpoint.MAX_TRIED, len(_checkpoint_ends(data)))
    assert fast.snapshot()["log"]["skipped"] == tried
    assert diff(fast.timeline.full(), full.timeline.full()) == []
    assert fast.snapshot()["step"] == STEPS


def test_random_damage_to_a_checkpoint_never_raises_out_of_replay(log, tmp_path):
    data = log.read_bytes()
    start = data.rindex(b"\n", 0, len(data) - 1) + 1
    rng = random.Random(5)
    bad = tmp_path / "bad.jsonl"
    for _ in range(60):
        line = bytearray(data[start:-1])
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(line))
            line[i] = rng.choice(b'0123456789{}[]",:-.e ntfaslru"')
        bad.write_bytes(data[:start] + bytes(line) + b"\n")
        snap = replay(bad).snapshot()  # never raises
        assert snap["step"] == STEPS


def test_a_log_without_checkpoints_reads_exactly_as_before(log, tmp_path):
    old = tmp_path / "old.jsonl"
    old.write_bytes(b"".join(x for x in log.read_bytes().splitlines(keepends=True)
                             if not x.startswith(logread.CHECKPOINT)))  # fmt: skip
    assert _resumed_at(old) == (None, {})
    fast, full = _both(old)
    _same(fast, full)
    _same(replay(log), full)  # the checkpoints change nothing a replay gives
    a, b = logread.LogReader(log), logread.LogReader(old)
    assert list(a) == list(b) and (a.lines, a.records, a.skipped) == (b.lines, b.records, {})


def test_tm_ls_reads_the_head_and_the_last_checkpoint_only(log):
    """The lines between are overwritten with garbage of the same length: ``tm ls`` still
    lists the run's steps, a full replay does not."""
    data = bytearray(log.read_bytes())
    head = data.index(b"\n") + 1
    last = data.rindex(b"\n", 0, len(data) - 1) + 1
    for i in range(head, last):
        if data[i] != 0x0A:
            data[i] = ord("#")
    log.write_bytes(bytes(data))
    row = ls_row(log.parent, now=2e9)
    assert f"{STEPS:>7} steps" in row and "finished" in row and "skipped" not in row
    assert replay(log, full=True).snapshot()["step"] == 0


def test_a_checkpoint_line_is_no_record_to_any_reader(log, tmp_path):
    """Read forward (replay --full, tm merge, tm export), a checkpoint is skipped unread and
    uncounted, even over 1 MiB; one written in another key order is skipped too."""
    recs, reader = logread.read(log)
    assert "checkpoint" not in {r["k"] for r in recs} and reader.skipped == {}
    big = log.read_bytes() + logread.CHECKPOINT + b'"pad":"' + b"x" * (3 << 20) + b'"}\n'
    other = json.dumps({"k": "checkpoint", "v": 1, "t": 1.0, "at": 0, "upto": 0, "log": {},
                        "crc": 0, "state": {}}).encode()  # fmt: skip
    path = tmp_path / "big.jsonl"
    path.write_bytes(big + other + b"\n")
    again, reader = logread.read(path)
    assert again == recs and reader.skipped == {} and reader.lines == len(recs)
    with open(path, "rb") as f:  # an open file (an iterable of lines) too
        assert logread.read(f)[0] == recs


@pytest.mark.parametrize("block", [64, 997, 1 << 22])
def test_read_a_block_at_a_time_a_checkpoint_over_the_line_bound_is_skipped_uncounted(
    log, tmp_path, monkeypatch, block
):
    """The full fold reads a file in blocks (``batches()``): a checkpoint line longer than
    ``MAX_LINE``, ended inside a block or running past it, is skipped like any checkpoint, not
    counted as a line over the bound (the full replay equals the same log without them)."""
    old = tmp_path / "old.jsonl"
    old.write_bytes(b"".join(x for x in log.read_bytes().splitlines(keepends=True)
                             if not x.startswith(logread.CHECKPOINT)))  # fmt: skip
    want = replay(old, full=True).snapshot()
    monkeypatch.setattr(logread, "BLOCK", block)
    monkeypatch.setattr(logread, "MAX_LINE", 600)  # every checkpoint of this run is longer
    assert all(len(line) > 600 for _, line in _lines_ending(log.read_bytes()))
    got = replay(log, full=True).snapshot()
    assert not (got.get("log") or {}).get("skipped")
    assert diff(got, want) == []


def test_agents_cannot_send_a_checkpoint_and_validate_knows_it(log):
    assert "checkpoint" in ingest.SUPERVISOR_KINDS
    line = log.read_bytes().splitlines()[-1]
    rec = logread.parse_checkpoint(line)
    assert rec["k"] == "checkpoint" and rec["upto"] == rec["log"]["high"]
    with pytest.raises(records.RecordError):
        records.validate({**rec, "at": "0"})


def test_checkpoints_stay_a_bounded_share_of_the_log(log):
    """Each checkpoint comes once the log has grown by CHECKPOINT_GROWTH (here 1) times the
    previous one's size since it (the last, after run_end, is forced), and no later than the
    line that took it there (each record here is ingested alone, every line under 2 KiB): the
    lines after a checkpoint are bounded by its size, however fast the run's clock goes (the
    run's clock here moves 0.5 s a step)."""
    data = log.read_bytes()
    prev_end = prev_size = 0
    for end in _checkpoint_ends(data)[:-1]:
        start = data.rindex(b"\n", 0, end - 1) + 1
        gap = max(2048, prev_size)
        assert gap <= start - prev_end < gap + 2048
        prev_end, prev_size = end, end - start


def test_a_refused_name_keeps_one_key_in_every_process():
    """Refused series names are counted by a key a checkpoint carries to another process
    (Python's str hash differs per process)."""
    assert name_key("loss/extra") == 4021433932278175706
    assert 0 <= name_key("x" * 500) < 2**63


@pytest.mark.parametrize("chunk", [5, 23, 24, 25, 4096])
def test_checkpoints_are_found_from_the_end_whatever_the_pieces_read(log, monkeypatch, chunk):
    """A checkpoint's first bytes split across two pieces read backwards is found once; one
    that does not begin a line is no checkpoint."""
    data = log.read_bytes()
    want = [(end - len(line), line) for end, line in _lines_ending(data)][::-1][:8]
    monkeypatch.setattr(logread, "CHUNK", chunk)
    assert list(logread.checkpoints(log)) == want
    log.write_bytes(data + b"x" + logread.CHECKPOINT + b"}\n" + logread.CHECKPOINT + b"cut")
    got = list(logread.checkpoints(log))
    assert got[0] == (len(data) + len(logread.CHECKPOINT) + 3, None) and got[1:] == want[:7]


def _lines_ending(data):
    at = 0
    for line in data.splitlines(keepends=True):
        at += len(line)
        if line.startswith(logread.CHECKPOINT):
            yield at, line


def _mutate(node, rng):
    """``node`` with about 2 % of its scalars changed to another value of the same type."""
    if isinstance(node, dict):
        return {k: _mutate(v, rng) for k, v in node.items()}
    if isinstance(node, list):
        return [_mutate(v, rng) for v in node]
    if rng.random() >= 0.02 or node is None:
        return node
    if type(node) is bool:
        return not node
    if type(node) is int:
        return rng.choice([0, 1, -1, 7, 2**53, -(2**62), node * 1000])
    if type(node) is float:
        return rng.choice([0.0, -1.0, 3.5, 1e-300, 1e12, -1e12, node * 1e6])
    return rng.choice(["", "x", "data", "0", "train_loss", node + "!"])


def test_a_checkpoint_of_values_no_run_reaches_never_makes_replay_raise(log, tmp_path):
    """Types and bounds kept, values changed (counts that disagree, negative times): such a
    state may pass every check and fail only once the lines after it are folded; replay
    then reads the whole log. 200 such checkpoints, each with 2 checkpoints' worth of lines
    after it: no replay, snapshot or chart history raises."""
    data = log.read_bytes()
    ends = _checkpoint_ends(data)
    start = data.rindex(b"\n", 0, ends[-3] - 1) + 1
    rec = json.loads(data[start : ends[-3]])
    tail = b"".join(x for x in data[ends[-3] :].splitlines(keepends=True)
                    if not x.startswith(logread.CHECKPOINT))  # fmt: skip
    rng = random.Random(1)
    bad = tmp_path / "bad.jsonl"
    for _ in range(200):
        line = _forged({**rec, "state": _mutate(rec["state"], rng)})
        bad.write_bytes(data[:start] + line + tail)
        eng = replay(bad)
        json.dumps(eng.snapshot(), allow_nan=False)
        assert eng.snapshot()["step"] == STEPS and eng.timeline.full()["seq"] > 0


def test_a_byte_changed_in_a_checkpoint_is_found_by_its_crc_before_it_is_read(log, tmp_path):
    """A digit of the state changed (a step count 120 -> 920), one of the position (`upto`),
    a field added to the line: the CRC-32, or the fields, refuse the checkpoint, counted; the
    run reads as in full. Without the CRC the changed digits would have been believed (a
    valid state; `upto` and the reader's `high` changed together)."""
    data = log.read_bytes()
    start = data.rindex(b"\n", 0, len(data) - 1) + 1
    last = data[start:]
    assert last.count(b'"step":120') >= 1
    for bad_line, why in (
        (last.replace(b'"step":120', b'"step":920', 1), "CRC-32"),
        (last[:-2] + b',"pad":"' + b"x" * 1000 + b'"}\n', "CRC-32"),
        (
            last.replace(b'"upto":720', b'"upto":721', 1).replace(b'"high":720', b'"high":721', 1),
            "CRC-32",
        ),
        (_forged({**json.loads(last), "pad": "x"}), "fields other than"),
    ):
        bad = tmp_path / "bad.jsonl"
        bad.write_bytes(data[:start] + bad_line)
        got, want = replay(bad).snapshot(), replay(bad, full=True).snapshot()
        assert [k for k in got["log"]["by"] if why in k], got["log"]
        assert got["step"] == want["step"] == STEPS


def test_a_forged_negative_time_makes_no_surface_raise_and_reads_in_full(log, tmp_path):
    """Seconds below zero pass the state's bounds (a lag may be negative) but make the
    duration formats raise: the checkpoint is found unsound, replay reads the whole log, and
    ``tm ls``, the summary and the passport print the full replay's figures."""
    from trainmeter.core import passport, passport_md, summary

    bad = _rewrite_last(log, tmp_path, lambda r: _state(r).update(active_s=-1.0))
    got = replay(bad)
    assert got.snapshot()["log"]["by"] == {f"checkpoint: {checkpoint.UNSOUND}": 1}
    assert got.snapshot()["elapsed_s"] == replay(bad, full=True).snapshot()["elapsed_s"] >= 0
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "run.jsonl").write_bytes(bad.read_bytes())
    assert f"{STEPS:>7} steps" in ls_row(folder, now=2e9)
    snap = got.snapshot()
    assert summary.summary_line(snap) and passport_md.markdown(passport.build(snap))


def test_a_checkpoint_that_fails_once_folded_on_means_a_full_replay(log, monkeypatch):
    monkeypatch.setattr(checkpoint, "sound", lambda eng: False)
    fast, full = _both(log)
    got = fast.snapshot()
    assert got["log"]["by"] == {f"checkpoint: {checkpoint.UNSOUND}": 1}
    assert diff(fast.timeline.full(), full.timeline.full()) == []
    assert got["step"] == STEPS


def test_each_checkpoint_holds_the_position_a_reader_of_the_log_before_it_has(log, tmp_path):
    data = log.read_bytes()
    before = tmp_path / "before.jsonl"
    for end in _checkpoint_ends(data):
        start = data.rindex(b"\n", 0, end - 1) + 1
        before.write_bytes(data[:start])
        reader = logread.LogReader(before)
        for _ in reader.batches():
            pass
        assert json.loads(data[start:end])["log"] == reader.position()


def test_a_state_with_no_checkpoint_form_stops_nothing(tmp_path, monkeypatch):
    """A state the codec refuses (here: every one) is left out, the run goes on, its log
    replays in full, and the supervisor tries again only once the log has grown as much."""
    calls = []

    def refuse(*args):
        calls.append(args)
        raise checkpoint.CheckpointError("no form")

    monkeypatch.setattr(checkpoint, "line", refuse)
    log = _run(tmp_path, monkeypatch)
    assert not any(x.startswith(logread.CHECKPOINT) for x in log.read_bytes().splitlines())
    assert 2 <= len(calls) <= log.stat().st_size // 2048 + 2
    assert replay(log).snapshot()["step"] == STEPS
