"""A steps batch folded a batch at a time (``Engine.apply_steps``, core/fold_steps.py) and
written in one call (``RunLog.append_steps``) leaves exactly what its rows one by one leave:
the same snapshot, chart history, log bytes and raised rows, in the common case and in each
case it hands back to ``Engine.apply``."""

import json
import random

import pytest

from trainmeter.core import fold_steps, records
from trainmeter.core.engine import Engine, StepsFailed
from trainmeter.supervisor.live import Live

T0 = 1.7e9
MODEL = {"v": 1, "k": "model", "t": T0 + 1, "params": 124_000_000,
         "embedding_params": 40_000_000, "token_embedding_params": 38_000_000, "layers": 12,
         "width": 768, "heads": 12, "kv_heads": 12, "head_dim": 64, "ffn": 3072,
         "gated_mlp": False, "vocab": 50257, "seq_len": 512, "tied_embeddings": True,
         "device": "cuda", "device_name": "NVIDIA H100 80GB HBM3", "dtype": "bfloat16",
         "run_dtype": "bfloat16", "rank": 0}  # fmt: skip


def _hello(rank=0, world=1, pid=100):
    return {"v": 1, "k": "agent_hello", "t": T0 + 0.5, "pid": pid + rank, "rank": rank,
            "world_size": world, "host": "h", "python": "3.11"}  # fmt: skip


def _batch(rng, rank, step0, t0, n, *, jitter=False, seq=True, zeros=False, arr=False, agg=False,
           back=False, notok=False):  # fmt: skip
    dt = [int(k * 1000 + (rng.randint(0, 900) if jitter else 0)) for k in range(n)]
    if back and n > 3:
        dt[n // 2] = dt[n // 2 - 1]  # a repeated time: an untimed row
    tok = [rng.choice([0, 4096]) if zeros else 4096 * rng.randint(1, 3) for _ in range(n)]
    if notok:  # an image model's: samples, no token ids
        tok = [0] * n
    b = {"v": 1, "k": "steps", "rank": rank, "t0": t0, "dt_us": dt,
         "step": list(range(step0, step0 + n)), "tokens": tok, "samples": [8] * n}  # fmt: skip
    if seq:
        b["seq_sq"] = [x * rng.choice([512, 256]) if jitter else x * 512 for x in tok]
    if arr:
        b["arr_us"] = [rng.choice([None, 300]) for _ in range(n)]
    if agg:
        b["agg"] = [rng.choice([None, 1, 3]) for _ in range(n)]
    return (json.dumps(b, separators=(",", ":")) + "\n").encode()


def _lines(seed, ranks=1, t0=T0 + 10, **kw):
    rng = random.Random(seed)
    out, step, t = [], 1, t0
    for _ in range(rng.randint(30, 60)):
        n = rng.randint(0, 60)
        for rank in range(ranks):
            out.append(_batch(rng, rank, step, t, n, **kw))
        step += n
        t += n * 0.001 + rng.choice([0.0005, 0.2])
    return out


def _gpu(t, rng):
    """A sampler's reading of one GPU (the fields a real one has)."""
    return records.make("gpu", t, host={"time_s": t, "cpu_util": 0.3}, gpus=[{
        "index": 0, "time_s": t, "gpu_util": 0.98, "sm_active": rng.random(),
        "sm_occupancy": 0.42, "tensor_active": 0.55, "dram_active": 0.33,
        "mem_used_bytes": 7.2e10, "mem_total_bytes": 8.5e10, "power_w": 650.0,
        "energy_mj": 1000.0 * t, "sm_clock_mhz": 1980.0, "mem_clock_mhz": 2619.0}])  # fmt: skip


def _between(live, got, rng):
    """After a batch: a sampler's reading, series points (with a step, without one, a name
    of ours), or nothing, as a log of a real run has between its step lines."""
    rows = got if isinstance(got, list) else got.rows()
    if not rows:
        return
    t, step = rows[-1]["t"], rows[-1]["step"]
    for _ in range(rng.choice([0, 1, 1, 2])):
        t += 0.0001
        kind = rng.choice(["gpu", "loss", "loss", "stepless", "ours"])
        if kind == "gpu":
            live.ingest([_gpu(t, rng)])
            continue
        name = {"loss": "train_loss", "stepless": "lr", "ours": "mfu/hf"}[kind]
        live.ingest([records.make("series", t, name=name, value=rng.random(),
                                  step=None if kind == "stepless" else step)])  # fmt: skip


def _run(tmp_path, name, lines, *, batched, peak=True, ranks=1, segments=(), between=None,
         fake=False):  # fmt: skip
    live = Live(root=tmp_path / name, clock=lambda: T0)
    live.open_run("x", ["x"], {"peak_flops": 1e15} if peak else {})
    if between is not None:  # the sampler's GPU; a demonstration's fake one: a reading may
        # move MFU's divisor
        live.ingest([records.make("gpu_devices", T0, backend="fake:h100" if fake else "nvml",
                                  reason=None, devices=[{"index": 0, "name": "NVIDIA H100 80GB "
                                                         "HBM3", "gpm": True}])])  # fmt: skip
    for rank in range(ranks):
        live.ingest([records.validate(_hello(rank, ranks))])
    live.ingest([records.validate(MODEL)])
    for k, line in enumerate(lines):
        if k in segments:
            live.ingest([records.make("note", T0 + 5, text="x")])
            live.engine.apply(records.make("segment_start", T0 + 10 + k, segment=k))
        got = records.decode_batch(line) if batched else records.decode_wire(line)
        live.ingest(got)
        if between is not None:
            _between(live, got, between)
    snap = live.snapshot()
    snap["run"] = {k: v for k, v in snap["run"].items() if k not in ("id", "log")}  # the folder's
    history = live.engine.timeline.full()
    log = live.log_path.read_bytes().split(b"\n", 1)[1]  # after run_start (its id, its folder)
    live.close_run("ok")
    return snap, history, log, live.engine


CASES = {
    "plain": {},
    "jitter and lengths": {"jitter": True},
    "no seq_sq": {"seq": False},
    "zero counts": {"zeros": True, "jitter": True},
    "arrivals": {"arr": True},
    "arrivals, no seq_sq": {"arr": True, "seq": False},
    "merged rows": {"agg": True},
    "a repeated time": {"back": True, "jitter": True},
    "no tokens": {"notok": True, "jitter": True},
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("seed", [1, 2])
def test_a_batch_folds_as_its_rows_one_by_one(tmp_path, case, seed):
    lines = _lines(seed, **CASES[case])
    one = _run(tmp_path, "one", lines, batched=False)
    many = _run(tmp_path, "many", lines, batched=True)
    assert many[0] == one[0]  # snapshot, field by field
    assert many[1] == one[1]  # chart history with its sequence numbers
    assert many[2] == one[2]  # log, byte for byte


@pytest.mark.parametrize("peak", [True, False])
def test_two_ranks_and_segments_fold_as_rows(tmp_path, peak):
    lines = _lines(3, ranks=2, jitter=True)
    one = _run(tmp_path, "one", lines, batched=False, peak=peak, ranks=2, segments={5, 9})
    many = _run(tmp_path, "many", lines, batched=True, peak=peak, ranks=2, segments={5, 9})
    assert many[:3] == one[:3]


def test_a_segment_restart_and_a_small_timeline_fold_as_rows(tmp_path):
    lines = _lines(4, jitter=True)
    one = _run(tmp_path, "one", lines, batched=False, segments={3, 4, 20})
    many = _run(tmp_path, "many", lines, batched=True, segments={3, 4, 20})
    assert many[:3] == one[:3]


def test_the_windows_are_summed_afresh_at_the_same_steps(tmp_path):
    rng = random.Random(5)
    lines, t = [], T0 + 10
    for k in range(40):  # 4,000 steps: past several multiples of 1024, at odd offsets
        lines.append(_batch(rng, 0, 1 + k * 100, t, 100, jitter=True))
        t += 0.1 + 0.0001 * k
    one = _run(tmp_path, "one", lines, batched=False)
    many = _run(tmp_path, "many", lines, batched=True)
    assert many[:3] == one[:3]
    a, b = one[3], many[3]
    assert a.clock.recent_s == b.clock.recent_s
    assert a.counts.own[0].recent_s == b.counts.own[0].recent_s
    assert a.ranks.ranks[0].recent_s == b.ranks.ranks[0].recent_s


@pytest.mark.parametrize("seed", [6, 7])
def test_window_sums_that_round_round_as_row_by_row(tmp_path, seed):
    # Intervals between times of one binade (near 1.7e9: multiples of 2**-22 s) add up exactly
    # in any order; times rising from near 0 cross many binades, so the windows' sums round
    # and only the engine's own order (drop the old interval, then add the new) gives its bits.
    lines = _lines(seed, t0=1e-6 * random.Random(seed).random(), jitter=True)
    one = _run(tmp_path, "one", lines, batched=False)
    many = _run(tmp_path, "many", lines, batched=True)
    assert many[:3] == one[:3]
    a, b = one[3], many[3]
    assert a.clock.recent_s == b.clock.recent_s and a.clock.timed_s == b.clock.timed_s
    assert a.counts.own[0].recent_s == b.counts.own[0].recent_s
    assert a.ranks.ranks[0].recent_s == b.ranks.ranks[0].recent_s


def test_a_rate_too_large_to_be_finite_is_none_batched_as_one_by_one(tmp_path):
    # 5e-324 s between two steps: tokens/s is infinite, so no rate (RankCounts.rate); the
    # fold hands those rows to Engine.apply, which says the same and raises nothing
    tiny = {"v": 1, "k": "steps", "rank": 0, "t": [0.0, 5e-324, 1e-323, 1.0, 2.0],
            "step": [1, 2, 3, 4, 5], "tokens": [64] * 5, "samples": [1] * 5,
            "seq_sq": [64 * 64] * 5}  # fmt: skip
    lines = [json.dumps(tiny).encode()]
    one = _run(tmp_path, "one", lines, batched=False)
    many = _run(tmp_path, "many", lines, batched=True)
    assert many[:3] == one[:3]
    assert one[0]["dropped"] is None and one[0]["step"] == 5


def test_a_row_that_raises_is_counted_and_not_written_as_one_by_one(tmp_path, monkeypatch):
    # no validated step record raises in the engine; one made to (step 3) shows that a
    # batch's raising row is counted and left out of the log as the rows one by one are
    on_step = Engine._on_step

    def raising(self, rec, *args, **kw):
        if rec["step"] == 3:
            raise ValueError("made to raise")
        return on_step(self, rec, *args, **kw)

    monkeypatch.setattr(Engine, "_on_step", raising)
    monkeypatch.setattr(fold_steps, "fold", lambda eng, b, i, tap=None: i)  # row by row
    lines = [_batch(random.Random(8), 0, 1, T0 + 10, 6)]
    one = _run(tmp_path, "one", lines, batched=False)
    many = _run(tmp_path, "many", lines, batched=True)
    assert many[:3] == one[:3]
    assert "apply failed: ValueError" in json.dumps(one[0]["dropped"])
    assert b'"step":3,' not in many[2] and b'"step":4,' in many[2]


def test_apply_steps_names_the_row_that_raised():
    eng = Engine()
    b = records.Steps(1, 0, [T0, T0 + 1], [1, 2], [1, 1], [1, 1])
    eng.rank_clocks = None  # any row raises
    with pytest.raises(StepsFailed) as got:
        eng.apply_steps(b)
    assert got.value.index == 0


def test_step_lines_are_what_encode_and_the_stamp_write():
    b = records.Steps(1, 2, [T0 + 0.1, T0 + 0.25], [7, 8], [None, 5], [3, None], [None, 9],
                      [None, T0])  # fmt: skip
    want = b"".join(
        records.encode(r)[:-2] + b',"n":%d}\n' % n for n, r in enumerate(b.rows(), start=4)
    )
    assert records.step_lines(b, 4) == want
    b.seq_sq = None  # an arrival without seq_sq is written too
    want = b"".join(
        records.encode(r)[:-2] + b',"n":%d}\n' % n for n, r in enumerate(b.rows(), start=4)
    )
    assert records.step_lines(b, 4) == want
    assert records.step_lines(records.Steps(1, 0, [1], [1], [1], [1]), 1) is None  # int time


@pytest.mark.parametrize("seed", range(3))
def test_the_unrolled_thinning_keeps_what_the_point_by_point_rule_keeps(seed):
    from trainmeter.core import timeline

    rng = random.Random(seed)
    for _ in range(300):
        ys = [float(rng.choice([0, 1, 2, 3, -0.0, 0.5])) for _ in range(rng.randint(0, 80))]
        full = len(ys) // 2 - (len(ys) // 2) % 4
        assert timeline._keep_floats(ys, full) == timeline._keep_any(ys, full)
    assert not timeline._finite_floats([1.0, float("nan")])
    assert not timeline._finite_floats([1.0, float("inf")])
    assert not timeline._finite_floats([1.0, 2])


def _replay_rows(lines):
    """Replay as it was: every record of the reader, one by one."""
    from trainmeter.core.engine import read_summary
    from trainmeter.core.logread import LogReader

    eng, reader = Engine(), LogReader(lines)
    for rec in reader:
        try:
            eng.apply(rec)
        except Exception as exc:
            reader.count(rec["k"], f"apply failed: {type(exc).__name__}")
    eng.log_read = read_summary(reader)
    if eng.log_read is not None:
        eng.note(eng.log_read["text"])
    if eng.run["state"] in ("running", "idle") and eng.last_t is not None:
        eng.end_unclosed()
    return eng


def _damaged(log: bytes, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    lines = log.splitlines(keepends=True)
    for _ in range(rng.randint(1, 12)):
        k = rng.randrange(len(lines))
        what = rng.choice(["dup", "drop", "swap", "junk", "nan", "unnumbered", "int t", "cut"])
        if what == "dup":
            lines.insert(k, lines[k])
        elif what == "drop":
            del lines[k]
        elif what == "swap" and k + 1 < len(lines):
            lines[k], lines[k + 1] = lines[k + 1], lines[k]
        elif what == "junk":
            lines.insert(k, b'{"v":1,"k":"step","t":1e400,"step":1,"rank":0}\n')
        elif what == "nan":
            lines[k] = lines[k].replace(b'"tokens":', b'"tokens":-')
        elif what == "unnumbered":
            lines[k] = lines[k].split(b',"n":')[0] + b"}\n"
        elif what == "int t":
            lines[k] = lines[k].replace(b'"t":17', b'"t":1', 1).replace(b".", b"", 1)
        elif what == "cut":
            lines[-1] = lines[-1][: len(lines[-1]) // 2]
    return lines


@pytest.mark.parametrize("seed", range(6))
def test_replay_by_batches_is_replay_line_by_line_on_any_log(tmp_path, seed):
    from trainmeter.core.engine import replay

    lines = _lines(seed, jitter=seed % 2 == 0, zeros=seed == 3)
    log = _run(tmp_path, "x", lines, batched=True, segments={4})[2]
    for k in range(3):
        damaged = _damaged(log, seed * 10 + k) if k else log.splitlines(keepends=True)
        a, b = replay(damaged), _replay_rows(damaged)
        assert a.snapshot() == b.snapshot()
        assert a.timeline.full() == b.timeline.full()


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("block", [64, 997, 1 << 22])
def test_a_log_file_read_by_blocks_is_read_as_its_lines(tmp_path, monkeypatch, seed, block):
    """batches() of a file (step lines found a block at a time, blocks cut anywhere) gives
    what reading its lines one by one gives: the same snapshot, chart and counts."""
    from trainmeter.core import logread
    from trainmeter.core.engine import replay

    monkeypatch.setattr(logread, "BLOCK", block)
    monkeypatch.setattr(logread, "MAX_LINE", 600)  # a line longer than a block, and one over
    lines = _lines(seed, jitter=seed % 2 == 0, zeros=seed == 3)
    log = _run(tmp_path, "x", lines, batched=True, segments={4})[2]
    damaged = _damaged(log, seed) if seed else log.splitlines(keepends=True)
    k = len(damaged) // 2
    damaged[k:k] = [b'{"v":1,"k":"note","t":1700000011.0,"text":"' + b"a" * 550 + b'"}\n',
                    b"\n", b'{"v":1,"k":"note","t":1700000011.0,"text":"' + b"b" * 900 + b'"}\n',
                    b"junk\r\n", b'{"v":1,"k":"step","t":1.5\r}\n']  # fmt: skip
    if seed == 2:  # the last line without its newline: a step line that reads whole
        damaged[-1] = damaged[-1].rstrip(b"\n")
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"".join(damaged))
    a, b = replay(path), _replay_rows(damaged)
    assert a.snapshot() == b.snapshot()
    assert a.timeline.full() == b.timeline.full()
    reader, rows = logread.LogReader(path), logread.LogReader(damaged)
    assert sum(len(x) if isinstance(x, records.Steps) else 1 for x in reader.batches()) == len(
        list(rows)
    )
    assert (reader.skipped, reader.lines, reader.records, reader.cut, reader.last_t) == (
        rows.skipped, rows.lines, rows.records, rows.cut, rows.last_t)  # fmt: skip


def _points_rows(lines):
    """Export's points as they were: every record of the reader applied and its points
    taken one by one."""
    from trainmeter.core.logread import LogReader
    from trainmeter.exports import points

    charted: list = []
    eng = Engine()
    eng.timeline = points._Tap(charted)
    start = None
    for rec in LogReader(lines):
        timed_s = eng.clock.timed_s
        eng.apply(rec)
        if start is None:
            start = eng.run.get("started", rec["t"])
        timed = eng.clock.timed_s > timed_s
        yield from points._points(rec, eng, charted, rec["t"] - start, timed)
        charted.clear()


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("peak", [True, False])
@pytest.mark.parametrize("fast", [True, False], ids=["orjson", "repr"])
@pytest.mark.parametrize("between", [False, True], ids=["steps", "readings between"])
def test_export_points_and_csv_rows_are_those_of_the_records_one_by_one(
    tmp_path, monkeypatch, seed, peak, fast, between
):
    import csv
    import io

    from trainmeter.exports import csv as export_csv
    from trainmeter.exports import numtext, points
    from trainmeter.exports.run import RunData

    assert numtext.fast()  # the test extra installs orjson: both ways are tested here
    if not fast:
        monkeypatch.setattr(numtext, "orjson", None)

    kw = [
        {},
        {"jitter": True},
        {"zeros": True, "jitter": True},
        {"notok": True},
        {"jitter": True, "t0": 3e-7},
    ][seed]  # the last: window sums that round (above)
    lines = _lines(seed, **kw)
    rng = random.Random(seed) if between else None  # gpu and series lines between step lines
    log = _run(tmp_path, "x", lines, batched=True, peak=peak, segments={4}, between=rng,
               fake=seed == 2)[2]  # fmt: skip
    damaged = _damaged(log, seed) if seed % 2 else log.splitlines(keepends=True)
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"".join(damaged))
    want = list(_points_rows(damaged))
    runs: list = []  # (folded at once, kinds of the records between its rows)
    real = fold_steps.fold_run

    def spy(eng, b, cuts, apply, tap=None):
        runs.append((real(eng, b, cuts, apply, tap), {r["k"] for _, rs in cuts for r in rs}))
        return runs[-1][0]

    monkeypatch.setattr(fold_steps, "fold_run", spy)
    assert list(points.iter_points(path)) == want
    if between:  # runs were folded with readings between, but not where those move MFU
        assert any(ok and "gpu" in kinds for ok, kinds in runs) == (seed != 2)
        assert any(ok and "series" in kinds for ok, kinds in runs)
    got, plain = io.StringIO(), io.StringIO()
    w, ref = csv.writer(got), csv.writer(plain)
    for item in points.iter_rows(path):
        if isinstance(item, points.Point):
            w.writerow((item.series, item.step, repr(item.t), repr(item.value)))
        else:
            got.write(b"".join(export_csv._step_chunks(item)).decode())
    ref.writerows((p.series, p.step, repr(p.t), repr(p.value)) for p in want)
    assert got.getvalue() == plain.getvalue()
    assert any(isinstance(x, points.StepRows) for x in points.iter_rows(path))
    # the whole file: the writer's rows of single points and the batches' bytes in log order
    out = tmp_path / "series.csv"
    export_csv.export(RunData(tmp_path, {}), out=str(out))
    assert out.read_bytes() == b"series,step,t,value\r\n" + plain.getvalue().encode()


def test_a_series_name_is_quoted_in_the_csv_as_the_writer_quotes_it():
    from trainmeter.exports import csv as export_csv
    from trainmeter.exports.points import StepRows

    rows = StepRows(("tokens", 'a,"b"%s'), [1, 2], [0.5, 1.5], [10.5, 11.5], [[3, 4], [0.1, 2]])
    assert b"".join(export_csv._step_chunks(rows)) == (
        b'tokens,1,0.5,3\r\n"a,""b""%s",1,0.5,0.1\r\ntokens,2,1.5,4\r\n"a,""b""%s",2,1.5,2\r\n'
    )


def test_an_exported_series_named_as_one_of_the_engines_own_is_said_apart(tmp_path):
    from trainmeter.exports import points

    recs = [records.make("run_start", 100.0, id="r", name="n", argv=[], version="0", opts={}),
            records.make("series", 101.0, name="mfu/hf", value=0.5, step=1),
            records.make("series", 102.0, name="loss", value=2.0, step=1)]  # fmt: skip
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"".join(records.encode(r) for r in recs))
    got = [(p.series, p.value) for p in points.iter_points(path)]
    assert got == [("mfu/hf (training code)", 0.5), ("loss", 2.0)]


@pytest.mark.parametrize("seed", range(3))
def test_timed_rows_are_those_whose_interval_grows_the_sum(seed):
    from trainmeter.core.fold_steps import _timed

    rng = random.Random(seed)
    for _ in range(2000):
        start = rng.choice([0.0, 1.0, 1e6, 3.7e9, 1e15, rng.random() * 10 ** rng.randint(-3, 16)])
        dts = [rng.choice([1e-12, 1e-9, 5e-324, 0.01, rng.random()])
               for _ in range(rng.randint(1, 9))]  # fmt: skip
        want, s = [], start
        for dt in dts:  # the step clock, row by row: timed when its seconds grew
            want.append(s + dt > s)
            s += dt
        assert _timed(start, dts) == want, (start, dts)


def _shifted(line: bytes, steps: int, seconds: float) -> bytes:
    """A ``steps`` batch line moved ``steps`` steps and ``seconds`` later."""
    b = json.loads(line)
    b["step"] = [s + steps for s in b["step"]]
    b["t0"] += seconds
    return (json.dumps(b, separators=(",", ":")) + "\n").encode()


@pytest.mark.parametrize("seed", range(4))
def test_a_run_folded_with_readings_between_leaves_what_its_records_in_log_order_leave(
    tmp_path, seed
):
    """``fold_run`` on a real engine (its chart too, each point's sequence number in log
    order) against every record of the log applied one by one."""
    from trainmeter.core.logread import LogReader
    from trainmeter.exports import points

    lines = _lines(seed, jitter=seed % 2 == 1, zeros=seed == 2)
    if seed == 3:  # the first batches without tokens: a run's first rows have no rate
        rng, t, first = random.Random(seed), T0 + 10, []
        for k in range(4):
            first.append(_batch(rng, 0, 1 + 20 * k, t + 0.03 * k, 20, notok=True))
        lines = first + [_shifted(line, 80, 0.2) for line in lines]
    log = _run(tmp_path, "x", lines, batched=True, between=random.Random(seed))[2]
    want = Engine()
    for rec in LogReader(log.splitlines(keepends=True)):
        want.apply(rec)
    got, parts, took = Engine(), [], []

    def fold(held):
        return fold_steps.fold_run(got, *points._joined(held),
                                   lambda recs: [got.apply(r) for r in recs])  # fmt: skip

    def flush():  # as the export: once more after the first batch (the log's first rows)
        held, ok = list(parts), bool(parts) and fold(parts)
        if not ok and held:
            got.apply_steps(held.pop(0))
            while held and isinstance(held[0], dict):
                got.apply(held.pop(0))
            ok = bool(held) and fold(held)
        if not ok:
            for p in held:
                got.apply(p) if isinstance(p, dict) else got.apply_steps(p)
        took.append(ok and any(isinstance(p, dict) for p in held))
        parts.clear()

    for item in LogReader(log.splitlines(keepends=True)).batches():
        if isinstance(item, dict):
            carried = item["k"] == "gpu" or (item["k"] == "series" and item.get("step") is not None)
            if parts and carried:
                parts.append(item)
                continue
            flush()
            got.apply(item)
        else:
            parts.append(item)
    flush()
    assert any(took)
    assert got.snapshot(now=T0) == want.snapshot(now=T0)
    assert got.timeline.full() == want.timeline.full()
    for seq in range(0, want.timeline.seq + 1, 7):  # each point's sequence number: log order
        assert got.timeline.since(seq) == want.timeline.since(seq)
