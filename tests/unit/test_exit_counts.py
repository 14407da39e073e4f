"""The agents' final counts from their exit files (supervisor/exit_counts.py): applied once,
only where they add to what the log holds for that pid; a malformed file is counted, never
raised on; the log, the snapshot and a replay then agree."""

import json
import os

from trainmeter.core import records
from trainmeter.core.engine import replay
from trainmeter.core.records import EXIT_FILE
from trainmeter.supervisor.exit_counts import MALFORMED, MAX_EXIT_BYTES, apply_exit_files
from trainmeter.supervisor.live import Live

PID = 4242  # the agent's pid (any: the supervisor does not ask the kernel)
SHED, UNSENT = "series shed under load", "unsent at exit"


def _clock():
    t = [1000.0]

    def tick():
        t[0] += 0.5
        return t[0]

    return tick


def _dropped(counts, pid=PID, rank=0):
    return records.make("dropped", 999.0, source="agent", counts=counts, pid=pid, rank=rank)


def _leave(folder, rec, pid=PID):
    """What the agent's close() writes (agent/sender.py ``_leave_counts``)."""
    path = folder / EXIT_FILE.format(pid=pid)
    path.write_bytes(records.encode(rec))
    return path


def _open(tmp_path):
    live = Live(tmp_path / "runs", clock=_clock())
    live.open_run("t", ["train.py"], {})
    sock = tmp_path / "sock"  # the supervisor's socket folder
    sock.mkdir()
    return live, sock


def _log(live):
    recs = [json.loads(x) for x in live.log_path.read_bytes().splitlines()]
    return [r for r in recs if r["k"] != "checkpoint"]  # checkpoints: state, not records


def _agent_counts(log):
    return [r["counts"] for r in log if r["k"] == "dropped" and r["source"] == "agent"]


def test_an_exit_file_adds_the_counts_the_log_lacks_once(tmp_path):
    live, sock = _open(tmp_path)
    live.ingest([_dropped({SHED: 5})])  # the last record that reached the socket
    # the agent then shed 2 more and left 3 unsent at its exit: its final, cumulative counts
    path = _leave(sock, _dropped({SHED: 7, UNSENT: 3}))
    assert apply_exit_files(live, str(sock)) == 1
    assert not path.exists()  # applied once: the file is gone
    _leave(sock, _dropped({SHED: 7, UNSENT: 3}))  # the same counts again (a duplicate)
    assert apply_exit_files(live, str(sock)) == 0
    snap = live.close_run("ok", 0)
    log = _log(live)
    assert _agent_counts(log) == [{SHED: 5}, {SHED: 7, UNSENT: 3}]  # one record added, once
    assert [r["pid"] for r in log if r["k"] == "dropped"] == [PID, PID]
    assert any(f"pid {PID} (rank 0): its final counts, read from the file" in r.get("text", "")
               for r in log)  # fmt: skip
    # 7 shed + 3 unsent (the newest record per pid replaces the earlier: core/drops.py)
    assert snap["dropped"]["total"] == 10
    assert replay([json.dumps(r) for r in log]).snapshot()["dropped"] == snap["dropped"]


def test_counts_the_log_already_holds_add_nothing(tmp_path):
    live, sock = _open(tmp_path)
    live.ingest([_dropped({SHED: 7, UNSENT: 3})])  # the final record did arrive
    _leave(sock, _dropped({SHED: 7, UNSENT: 3}))
    assert apply_exit_files(live, str(sock)) == 0
    live.close_run("ok", 0)
    log = _log(live)
    assert _agent_counts(log) == [{SHED: 7, UNSENT: 3}]
    assert not [r for r in log if r["k"] == "note"]


def test_a_process_whose_counts_never_reached_the_socket_gets_them_from_its_file(tmp_path):
    live, sock = _open(tmp_path)
    _leave(sock, _dropped({UNSENT: 12}, pid=7, rank=1), pid=7)
    assert apply_exit_files(live, str(sock)) == 1
    snap = live.close_run("ok", 0)
    assert snap["dropped"] == {"total": 12, "by": {f"{UNSENT} (agent)": 12}}


def test_a_malformed_exit_file_is_counted_removed_and_never_raised_on(tmp_path):
    live, sock = _open(tmp_path)
    bad = {
        "not JSON": b"{not json",
        "another kind": records.encode(records.make("note", 1.0, text="x")),
        "another source": records.encode(
            records.make("dropped", 1.0, source="supervisor", counts={"x": 1}, pid=PID)
        ),
        "a bad count": json.dumps({**_dropped({SHED: 1}), "counts": {SHED: -1}}).encode(),
        "too large": b" " * MAX_EXIT_BYTES + records.encode(_dropped({SHED: 1})),
    }
    for i, data in enumerate(bad.values()):
        (sock / EXIT_FILE.format(pid=PID + i)).write_bytes(data)
    # a record whose pid is not the one its file's name says
    _leave(sock, _dropped({SHED: 1}, pid=PID + 100), pid=PID + 99)
    os.mkfifo(sock / EXIT_FILE.format(pid=PID + 98))  # no regular file: never read (no hang)
    (sock / (EXIT_FILE.format(pid=PID) + ".tmp")).write_bytes(b"half")  # not yet renamed
    (sock / "supervisor.sock").write_bytes(b"")  # other names are not exit files
    assert apply_exit_files(live, str(sock)) == 0
    left = sorted(p.name for p in sock.iterdir())
    assert left == sorted([EXIT_FILE.format(pid=PID) + ".tmp", "supervisor.sock"])
    snap = live.close_run("ok", 0)
    # 5 bad files, 1 with another pid, 1 fifo: 7, each counted by the supervisor
    assert snap["dropped"] == {"total": 7, "by": {f"{MALFORMED} (supervisor)": 7}}
    assert not _agent_counts(_log(live))


def test_no_folder_or_no_run_is_no_error(tmp_path):
    live = Live(tmp_path / "runs", clock=_clock())
    assert apply_exit_files(live, str(tmp_path / "gone")) == 0
    sock = tmp_path / "sock"
    sock.mkdir()
    _leave(sock, _dropped({SHED: 1}))
    assert apply_exit_files(live, str(sock)) == 0  # no run open: nothing to log it in
