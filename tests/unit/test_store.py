"""The run log: one writer, append-only, nothing lost when the disk refuses a write."""

import errno
import os

import pytest

from trainmeter.core import records
from trainmeter.core.engine import replay
from trainmeter.supervisor import store


def _step(n):
    return records.make("step", float(n), step=n, rank=0, tokens=8)


def test_a_full_disk_loses_nothing_and_duplicates_nothing(tmp_path, monkeypatch, capsys):
    log = store.RunLog(tmp_path / "run")
    real_write, calls = os.write, {"n": 0}

    def flaky(fd, data):  # refuse twice (ENOSPC), then write only half, then work
        calls["n"] += 1
        if calls["n"] in (2, 3):
            raise OSError(errno.ENOSPC, "No space left on device")
        if calls["n"] == 4:
            return real_write(fd, bytes(data[: len(data) // 2]))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", flaky)
    for n in range(1, 7):
        log.append(_step(n))
    log.close()
    assert "cannot write" in capsys.readouterr().err  # said once, clearly
    lines = (tmp_path / "run" / "run.jsonl").read_bytes().splitlines()
    assert [records.decode(x)["step"] for x in lines] == [1, 2, 3, 4, 5, 6]


def test_records_still_pending_at_close_are_reported(tmp_path, monkeypatch, capsys):
    log = store.RunLog(tmp_path / "run")

    def refuse(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", refuse)
    log.append(_step(1))
    log.close()
    assert "could not be written" in capsys.readouterr().err


def test_find_run_takes_the_newest_an_id_prefix_or_a_folder(tmp_path):
    base = store.runs_dir(tmp_path)
    for rid in ("20260101-000000-aaaa", "20260102-000000-bbbb"):
        store.RunLog(base / rid).append(_step(1))
    assert store.find_run(None, tmp_path).name == "20260102-000000-bbbb"
    assert store.find_run("20260101", tmp_path).name == "20260101-000000-aaaa"
    assert store.find_run(str(base / "20260101-000000-aaaa"), tmp_path).name.endswith("aaaa")


def test_find_run_takes_a_run_named_exactly_before_the_newest_it_begins(tmp_path):
    base = store.runs_dir(tmp_path)
    for rid in ("exp", "exp2", "exp3"):  # hand-named folders: "exp" begins all three
        store.RunLog(base / rid).append(_step(1))
    assert store.find_run("exp", tmp_path).name == "exp"
    assert store.find_run("exp2", tmp_path).name == "exp2"


def test_find_run_without_runs_says_where_it_looked(tmp_path):
    with pytest.raises(FileNotFoundError, match="no runs under"):
        store.find_run(None, tmp_path)


def test_a_log_cut_mid_line_still_replays_up_to_the_last_whole_line(tmp_path):
    log = store.RunLog(tmp_path / "run")
    log.append(_step(1))
    log.append(_step(2))
    log.close()
    path = tmp_path / "run" / "run.jsonl"
    path.write_bytes(path.read_bytes() + b'{"v":1,"k":"step","t":3,"st')  # killed mid-write
    with open(path, "rb") as f:
        assert replay(f).snapshot()["step"] == 2


def test_runs_started_in_the_same_second_are_ordered_by_their_first_record(tmp_path):
    # ids differ only in the random suffix: "ffff" started first, "0000" a moment later
    runs = tmp_path / "runs"
    for name, t in (("20261130-120000-ffff", 1.0), ("20261130-120000-0000", 1.5)):
        (runs / name).mkdir(parents=True)
        (runs / name / "run.jsonl").write_text(f'{{"v": 1, "k": "run_start", "t": {t}}}\n')
    assert [d.name for d in store.run_folders(tmp_path)] == [
        "20261130-120000-ffff", "20261130-120000-0000"]  # fmt: skip
    assert store.find_run(None, tmp_path).name == "20261130-120000-0000"  # the newest


def test_every_line_is_stamped_n_from_1_in_its_file(tmp_path):
    log = store.RunLog(tmp_path / "run")
    log.append(records.make("note", 1.0, text="a", source="supervisor"))
    log.append_many([_step(1), _step(2)])
    log.close()
    lines = (tmp_path / "run" / "run.jsonl").read_bytes().splitlines()
    assert [records.decode(x)["n"] for x in lines] == [1, 2, 3]
    # the step line keeps encode()'s bytes, "n" last
    assert lines[1] == b'{"v":1,"k":"step","t":1.0,"step":1,"rank":0,"tokens":8,"n":2}'


def test_past_the_memory_bound_new_lines_are_lost_counted_and_n_stays_gapless(
    tmp_path, monkeypatch, capsys, full_disk
):
    line = len(records.encode(_step(1))) + len(',"n":1')  # one step line with its stamp
    monkeypatch.setattr(store, "MAX_PENDING_BYTES", 2 * line + 10)  # room for 2 lines
    log = store.RunLog(tmp_path / "run")
    disk = full_disk()
    for n in range(1, 6):  # 2 held, 3 lost
        log.append(_step(n))
    assert (log.pending_lines, log.lost_lines) == (2, 3)
    assert log.last_error.errno == errno.ENOSPC
    disk.full = False
    log.append(_step(6))
    assert log.close() == 3
    lines = (tmp_path / "run" / "run.jsonl").read_bytes().splitlines()
    got = [(r["step"], r["n"]) for r in map(records.decode, lines)]
    assert got == [(1, 1), (2, 2), (6, 3)]
    assert "3 records could not be written" in capsys.readouterr().err
