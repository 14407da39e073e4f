"""The supervisor's live side: it applies before it writes, and counts what it could not keep
(a record the engine refused, lines a full disk lost), so the log, the snapshot and a replay
agree on what was dropped."""

import errno
import json
import os

from trainmeter.core import records
from trainmeter.core.engine import replay
from trainmeter.supervisor import live as live_mod
from trainmeter.supervisor import store
from trainmeter.supervisor.live import Live


def _clock():
    t = [1000.0]

    def tick():
        t[0] += 0.5
        return t[0]

    return tick


def _steps(a, b):
    return [records.make("step", 1000.0 + n, step=n, rank=0, tokens=10) for n in range(a, b + 1)]


def _log(live):
    recs = [json.loads(x) for x in live.log_path.read_bytes().splitlines()]
    return [r for r in recs if r["k"] != "checkpoint"]  # checkpoints: state, not records


def test_a_record_the_engine_raises_on_is_counted_and_never_written(tmp_path, monkeypatch):
    live = Live(tmp_path, clock=_clock())
    live.open_run("t", ["train.py"], {})
    real = live.engine.apply

    def picky(rec):
        if rec.get("name") == "boom":
            raise KeyError("boom")
        return real(rec)

    monkeypatch.setattr(live.engine, "apply", picky)
    bad = records.make("series", 1001.0, name="boom", value=1.0, step=1)
    nan = {**records.make("note", 1001.0, text="x"), "extra": float("nan")}  # JSON has no NaN
    assert live.ingest([*_steps(1, 2), bad, nan, *_steps(3, 3)])
    assert live.snapshot()["dropped"] == {
        "total": 2, "by": {"apply failed: KeyError (supervisor)": 1,
                           "malformed record (supervisor)": 1}}  # fmt: skip
    snap = live.close_run("ok", 0)
    log = _log(live)
    assert [r["step"] for r in log if r["k"] == "step"] == [1, 2, 3]
    assert not [r for r in log if r.get("name") == "boom" or r.get("text") == "x"]
    drops = [r for r in log if r["k"] == "dropped"]
    # the first count is written at once, the second at the run's end (DROP_FLUSH_S apart)
    first = {"apply failed: KeyError": 1}
    both = {**first, "malformed record": 1}
    assert [d["counts"] for d in drops] == [first, both]
    assert drops[0]["source"] == "supervisor" and drops[0]["pid"] == os.getpid()
    assert [r["n"] for r in log] == list(range(1, len(log) + 1))
    with open(live.log_path, "rb") as f:
        assert replay(f).snapshot()["dropped"] == snap["dropped"]


def test_supervisor_counts_reach_the_log_at_most_once_a_second_and_at_the_end(tmp_path):
    live = Live(tmp_path, clock=_clock())
    live.open_run("t", ["train.py"], {})
    for _ in range(50):
        live.count_drop("line too long", note="a line over 1 MiB was dropped")
    live.close_run("ok", 0)
    log = _log(live)
    drops = [r["counts"] for r in log if r["k"] == "dropped"]
    # the first count is written at once (none written yet), the other 49 at the run's end
    assert drops == [{"line too long": 1}, {"line too long": 50}]
    assert [r["text"] for r in log if r["k"] == "note"] == ["a line over 1 MiB was dropped"]


def test_lines_a_full_disk_lost_are_in_the_snapshot_at_once_and_in_the_log_after(
    tmp_path, monkeypatch, full_disk
):
    live = Live(tmp_path, clock=_clock())
    live.open_run("t", ["train.py"], {})
    # room for 3 step lines held in memory: the disk refuses 10, so 7 are lost
    line = len(records.encode(_steps(1, 1)[0])) + len(',"n":10')
    monkeypatch.setattr(store, "MAX_PENDING_BYTES", 3 * line + 5)
    disk = full_disk()
    for n in range(1, 11):
        live.ingest(_steps(n, n))
    snap = live.snapshot()
    assert snap["step"] == 10  # the engine has every step
    assert snap["dropped"] == {"total": 7, "by": {"disk full (disk)": 7}}
    disk.full = False
    live.ingest(_steps(11, 11))
    final = live.close_run("ok", 0)
    log = _log(live)
    assert [r["step"] for r in log if r["k"] == "step"] == [1, 2, 3, 11]
    assert [r["counts"] for r in log if r["k"] == "dropped"] == [{"disk full": 7}]
    assert final["dropped"]["total"] == 7
    with open(live.log_path, "rb") as f:
        assert replay(f).snapshot()["dropped"] == final["dropped"]


def test_lines_still_held_at_close_are_in_the_final_snapshot(tmp_path, monkeypatch):
    live = Live(tmp_path, clock=_clock())
    live.open_run("t", ["train.py"], {})
    live.ingest(_steps(1, 2))

    def refuse(fd, data):
        raise OSError(errno.EDQUOT, "Disk quota exceeded")

    monkeypatch.setattr(os, "write", refuse)
    live.ingest(_steps(3, 5))
    final = live.close_run("ok", 0)
    # the 3 steps and the run_end are held, never written
    assert final["dropped"] == {"total": 4, "by": {"disk quota exceeded (disk)": 4}}
    assert live_mod.DISK_REASONS[errno.ENOSPC] == "disk full"


def test_the_run_start_argv_is_redacted_by_pattern_and_by_name(tmp_path):
    live = Live(tmp_path, clock=_clock())
    key = "sk-" + "Abc123Def456Ghi789"
    argv = ["train.py", "-k", key, "--passphrase", "x y", "postgres://u:PW@h/db", key]
    live.open_run("t", argv, {})
    live.close_run("ok", 0)
    start = _log(live)[0]
    assert start["argv"] == ["train.py", "-k", "***", "--passphrase", "***",
                             "postgres://u:***@h/db", "***"]  # fmt: skip
    assert key not in live.log_path.read_text() and "PW" not in live.log_path.read_text()
