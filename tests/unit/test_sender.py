"""The agent's sender against a stand-in supervisor on a real Unix socket: counts by reason in
``dropped`` records, series shed under pressure, a bounded outbound buffer, writes that never
block, reconnection with backoff, sync timeouts that leave it on, and close()'s deadline."""

import json
import os
import socket
import threading
import time

import pytest

from trainmeter.agent import guard
from trainmeter.agent import sender as sm
from trainmeter.agent.sender import Sender
from trainmeter.core import records


class Supervisor:
    """Accepts connections on ``path``; reads lines (unless ``reading`` is cleared) and answers
    ``{"ctl": "sync"}`` with an ack (unless ``acking`` is cleared)."""

    def __init__(self, path):
        self.path = path
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(path)
        self.srv.listen(16)
        self.reading, self.acking = threading.Event(), threading.Event()
        self.reading.set()
        self.acking.set()
        self.conns: list[list[dict]] = []
        self.socks = []
        self.late = []  # sync ids not acked while acking was off
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.srv.accept()
            except OSError:
                return
            lines: list[dict] = []
            self.conns.append(lines)
            self.socks.append(conn)
            threading.Thread(target=self._serve, args=(conn, lines), daemon=True).start()

    def _serve(self, conn, lines):
        buf = b""
        while True:
            self.reading.wait()
            try:
                chunk = conn.recv(1 << 20)
            except OSError:
                return
            if not chunk:
                return
            buf += chunk
            *done, buf = buf.split(b"\n")
            for raw in done:
                rec = json.loads(raw)
                lines.append(rec)
                if rec.get("ctl") == "sync":
                    if self.acking.is_set():
                        conn.sendall(json.dumps({"ack": rec["id"]}).encode() + b"\n")
                    else:
                        self.late.append((conn, rec["id"]))

    def ack_late(self):
        for conn, n in self.late:
            conn.sendall(json.dumps({"ack": n}).encode() + b"\n")

    def kill(self):
        """The supervisor dies: its listening socket and every connection close."""
        self.srv.close()
        os.unlink(self.path)
        for c in self.socks:
            c.shutdown(socket.SHUT_RDWR)  # a recv in another thread would hold a bare close
            c.close()

    def records(self, kind=None):
        return [r for lines in self.conns for r in lines if kind is None or r.get("k") == kind]


@pytest.fixture
def sup(tmp_path):
    s = Supervisor(str(tmp_path / "s.sock"))
    yield s
    s.reading.set()


@pytest.fixture
def make(fresh_guard):
    made = []

    def new(path, interval=0.02):
        s = Sender(path, {"ctl": "agent", "pid": 1, "rank": 3}, interval=interval)
        made.append(s)
        return s

    yield new
    for s in made:
        s._stop.set()
        s._wake.set()


def _series(name, i):
    return {"v": 1, "k": "series", "t": 1.0, "name": name, "value": float(i), "step": i}


def _wait(cond, timeout=5.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)
    return False


def test_counts_go_out_as_cumulative_dropped_records_at_most_twice_a_second(sup, make):
    s = make(sup.path)
    s.count("emit value out of range")
    assert _wait(lambda: sup.records("dropped"))
    s.count("emit value out of range", 2)
    s.count("emit step not an integer")
    assert _wait(lambda: len(sup.records("dropped")) == 2)
    first, second = sup.records("dropped")
    assert first["counts"] == {"emit value out of range": 1}
    assert second["counts"] == {"emit value out of range": 3, "emit step not an integer": 1}
    assert second["source"] == "agent" and second["pid"] == os.getpid() and second["rank"] == 3
    assert second["t"] - first["t"] >= sm.DROP_EVERY - 0.01
    time.sleep(0.7)  # no change: no new record
    assert len(sup.records("dropped")) == 2


def test_under_pressure_a_series_keeps_its_rate_per_name_and_every_shed_point_is_counted(
    sup, make, monkeypatch
):
    s = make(sup.path, interval=3600)
    clock = [100.2]
    monkeypatch.setattr(sm.time, "monotonic", lambda: clock[0])
    s.shedding = True
    for i in range(25):
        s.put(_series("a", i))
        s.put(_series("b", i))
    clock[0] = 101.0  # the next second: 10 more of each
    for i in range(25):
        s.put(_series("a", i))
    # by hand: 10 of a and 10 of b kept in second 100, 10 of a in second 101
    assert len(s.queue) == 30
    assert s.drops == {sm.SHED: 15 + 15 + 15}
    s.put({"v": 1, "k": "note", "t": 1.0, "text": "kept"})  # only series are shed
    s.put_step((1.0, 1, 0, 0, 0))
    assert len(s.queue) == 32


def test_a_full_outbound_buffer_drops_series_first_never_steps(make, tmp_path, monkeypatch):
    monkeypatch.setattr(sm, "MAX_OUT_BYTES", 20_000)
    monkeypatch.setattr(sm, "LOW_CHUNK", 10**9)  # a flush's series in one chunk
    s = make(str(tmp_path / "none.sock"), interval=3600)  # never connects: all stays buffered
    monkeypatch.setattr(s, "_write", lambda: None)
    for i in range(2000):  # ~2000 x 70 bytes of series in one flush: more than 20 kB
        s.put(_series("loss", i))
    s.put_step((1.0, 1, 0, 0, 0))
    s.flush()
    assert not s.queue and s.drops == {sm.FULL: 2000}  # the flush's one series chunk refused
    # the step, what clocks it (backward.py) and the counts are buffered; the series are not
    assert [json.loads(d)["k"] for d, _ in s.out.hi] == ["steps", "step_clock", "dropped"]
    for i in range(100):
        s.put(_series("loss", i))
    s.flush()  # a small series chunk fits
    assert s.drops == {sm.FULL: 2000} and len(s.out.lo) == 1


def _paused(s, monkeypatch):
    """The socket takes nothing while ``paused[0]`` (a supervisor stopped for good, as far as
    the outbound buffer can tell); then writes as usual."""
    paused, real = [True], s._write
    monkeypatch.setattr(s, "_write", lambda: None if paused[0] else real())
    return paused


def _expanded(sup):
    """What the stand-in received, as the supervisor expands it (steps batches to records)."""
    lines = [raw for raw in sup.records() if "ctl" not in raw]  # not the hello and syncs
    return [r for raw in lines for r in records.decode_wire(json.dumps(raw))]


MERGE_STEPS = 200  # one step a flush: far more than a 2,000-byte buffer holds


def _fill_with_steps(s):
    """MERGE_STEPS steps, 0.5 s apart from t = 1000 s, each with 100 tokens, 2 samples and a
    seq_sq of 400 (two sequences of 50), one flush each."""
    for n in range(1, MERGE_STEPS + 1):
        s.put_step((1000.0 + 0.5 * n, n, 100, 2, 400))
        s.flush()


def test_steps_the_full_buffer_cannot_take_are_merged_and_sent_once_it_has_room(
    sup, make, monkeypatch
):
    monkeypatch.setattr(sm, "HARD_OUT_BYTES", 2_000)
    s = make(sup.path, interval=3600)
    paused = _paused(s, monkeypatch)
    _fill_with_steps(s)
    assert s.drops == {}  # no step refused: none counted "outbound buffer full"
    assert s.out.nbytes <= 2_000 and s.agg is not None
    kept = [n for d, _ in s.out.hi for b in [json.loads(d)] if b["k"] == "steps"
            for n in b["step"]]  # fmt: skip
    assert kept == list(range(1, len(kept) + 1)) and 5 < len(kept) < MERGE_STEPS
    k = MERGE_STEPS - len(kept)  # the steps that did not fit: merged, in constant memory
    assert (s.agg.k, s.agg.step, s.agg.t) == (k, MERGE_STEPS, 1000.0 + 0.5 * MERGE_STEPS)
    paused[0] = False  # the supervisor reads again: the buffer drains, then the merged row
    s.flush()
    assert s.agg is None and s.sync(timeout=2.0)
    steps = [r for r in _expanded(sup) if r["k"] == "step"]
    assert [r["step"] for r in steps] == [*kept, MERGE_STEPS]
    assert not [r for r in steps[:-1] if "agg" in r]
    last = steps[-1]
    # the merged row: k steps of 100 tokens, 2 samples and a seq_sq of 400 each (by hand)
    assert last["agg"] == k and last["t"] == 1000.0 + 0.5 * MERGE_STEPS
    assert (last["tokens"], last["samples"], last["seq_sq"]) == (100 * k, 2 * k, 400 * k)
    assert s.drops == {}


def test_merged_steps_unsent_at_close_are_counted_as_the_steps_they_stand_for(
    make, tmp_path, monkeypatch
):
    monkeypatch.setattr(sm, "HARD_OUT_BYTES", 2_000)
    s = make(str(tmp_path / "s.sock"), interval=3600)  # no supervisor ever reads
    _paused(s, monkeypatch)
    _fill_with_steps(s)
    assert s.agg is not None and s.drops == {}
    t = time.monotonic()
    s.close()
    assert time.monotonic() - t < sm.CLOSE_DEADLINE_S
    # every step (those buffered one by one and the merged ones, k for their one row) and the
    # step_clock record of the first step (backward.py): none sent
    assert s.drops == {sm.UNSENT: MERGE_STEPS + 1}


def test_close_leaves_its_final_counts_in_a_file_beside_the_socket(
    sup, make, tmp_path, monkeypatch, capsys
):
    s = make(sup.path, interval=3600)
    s.put(_series("first", 0))
    assert s.sync(timeout=2.0)
    _paused(s, monkeypatch)  # the supervisor stops reading: the final record cannot go
    for i in range(5):
        s.put(_series("late", i))
    s.count("emit value out of range", 2)
    s.close()
    left = list(tmp_path.iterdir())
    path = tmp_path / records.EXIT_FILE.format(pid=os.getpid())
    assert sorted(p.name for p in left) == sorted(["s.sock", path.name])  # no temporary file
    rec = records.decode(path.read_bytes())  # one whole, valid record
    # the 5 late series were never sent; the 2 emits counted by hand above
    assert rec["counts"] == {"emit value out of range": 2, sm.UNSENT: 5} == s.drops
    assert (rec["k"], rec["source"], rec["pid"], rec["rank"]) == ("dropped", "agent",
                                                                  os.getpid(), 3)  # fmt: skip
    err = capsys.readouterr().err
    assert "left for the supervisor, which logs it at the run's end" in err, err


def test_a_paused_supervisor_never_blocks_the_sender_which_keeps_reading_the_queue(sup, make):
    s = make(sup.path)
    s.put(_series("first", 0))  # the sender connects when it has something to send
    assert _wait(lambda: sup.records("series"))
    sup.reading.clear()  # the supervisor stops reading (SIGSTOP)
    sent = 0
    t0 = time.monotonic()
    while time.monotonic() - t0 < 2.0:  # ~2 s of a flood: far more than the socket buffer
        for _ in range(2000):
            s.put(_series(f"s{sent % 3000}", sent))
            sent += 1

        s.put_step((time.time(), sent, 0, 0, 0))
        time.sleep(0.001)
    assert _wait(lambda: len(s.queue) < 1000, 2.0)  # the thread goes on reading the queue
    t = time.monotonic()
    assert s.flush() is True
    assert time.monotonic() - t < 0.5  # a flush from the training side never waits
    assert s.drops.get(sm.SHED, 0) > 0
    sup.reading.set()
    s.close()

    def accounted():  # what the stand-in read so far (its thread may still be reading)
        got, counts = len(sup.records("series")), sup.records("dropped")
        return got + sum(counts[-1]["counts"].values()) if counts else got

    _wait(lambda: accounted() == sent + 1, 5.0)
    assert accounted() == sent + 1  # sent, and the first one: nothing unaccounted


def test_a_failed_socket_is_counted_and_the_sender_reconnects_with_its_hello(sup, make, tmp_path):
    stopped = []
    s = make(sup.path)
    s.on_stop = lambda: stopped.append(True)
    s.put(_series("a", 1))
    assert _wait(lambda: sup.records("series"))
    path = sup.path
    sup.kill()
    s.put(_series("a", 2))  # written into a dead connection, or refused at connect
    assert _wait(lambda: s.drops.get(sm.GONE, 0) >= 1, 3.0)
    again = Supervisor(path)  # a new supervisor at the same path
    s.put(_series("a", 3))
    assert _wait(lambda: again.records("series"), 6.0)
    assert again.conns[0][0] == {"ctl": "agent", "pid": 1, "rank": 3}  # hello first
    assert s.alive and not stopped and not guard.is_off("sender")


def test_a_reconnect_after_the_rank_was_adopted_says_the_adopted_rank(sup, make):
    s = make(sup.path)
    s.put(_series("a", 1))
    assert _wait(lambda: sup.records("series"))
    s.set_rank(5, 8)  # torch.distributed's rank, after the first connection's hello said 3
    path = sup.path
    sup.kill()
    s.put(_series("a", 2))
    assert _wait(lambda: s.drops.get(sm.GONE, 0) >= 1, 3.0)
    again = Supervisor(path)
    s.put(_series("a", 3))
    assert _wait(lambda: again.records("series"), 6.0)
    assert again.conns[0][0] == {"ctl": "agent", "pid": 1, "rank": 5, "world_size": 8}
    assert s.rank == s.reader.rank == 5


def test_reconnect_backoff_doubles_from_a_tenth_of_a_second_to_five(make, tmp_path):
    s = make(str(tmp_path / "nobody.sock"), interval=3600)
    waits = []
    for _ in range(9):
        s.put(_series("a", 1))
        s._retry_at = 0.0  # as if the backoff had passed
        before = time.monotonic()
        s.flush()
        waits.append(round(s._retry_at - before, 1))
    assert waits == [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0]
    assert s.drops == {sm.GONE: 9} and s.alive


def test_a_sync_timeout_returns_false_leaves_the_sender_on_and_a_late_ack_is_taken(sup, make):
    s = make(sup.path)
    assert s.sync(timeout=2.0) is True
    sup.acking.clear()  # a paused supervisor: no answer in time
    t = time.monotonic()
    assert s.sync(timeout=0.3) is False
    assert time.monotonic() - t < 0.6 and s.alive
    sup.acking.set()
    sup.ack_late()  # the first one's ack arrives late, before the next sync's
    assert s.sync(timeout=2.0) is True and s.alive


def test_retarget_counts_what_it_drops_as_supervisor_gone(sup, make, tmp_path):
    s = make(str(tmp_path / "old.sock"), interval=3600)
    for i in range(5):
        s.put(_series("a", i))
    s.put_step((1.0, 1, 0, 0, 0))
    s.put_step((1.1, 2, 0, 0, 0))
    # 5 series, 2 steps and the step_clock record of the first step (backward.py) dropped,
    # counted for the new run
    s.retarget(sup.path)
    assert s.drops == {sm.GONE: 8}
    s.put(_series("b", 1))
    assert s.sync(timeout=2.0)
    assert [r["name"] for r in sup.records("series")] == ["b"]
    assert sup.records("dropped")[-1]["counts"] == {sm.GONE: 8}


def test_close_under_a_paused_supervisor_takes_about_a_second_and_says_what_was_not_sent(
    sup, make, capsys
):
    s = make(sup.path)
    s.put(_series("first", 0))  # the sender connects when it has something to send
    assert _wait(lambda: sup.records("series"))
    sup.reading.clear()
    for i in range(200_000):
        s.put(_series(f"n{i % 500}", i))
    t = time.monotonic()
    s.close()
    took = time.monotonic() - t
    assert took < sm.CLOSE_DEADLINE_S + 0.2, took
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "records were not sent to the supervisor" in err[0], err
    assert s.drops.get(sm.UNSENT, 0) > 0


def test_close_sends_everything_and_the_final_dropped_record_within_the_deadline(sup, make):
    s = make(sup.path, interval=3600)
    for i in range(1000):
        s.put(_series("x", i))
    s.count("emit value out of range")
    s.close()
    assert _wait(lambda: sup.records("dropped"))
    assert len(sup.records("series")) == 1000
    assert sup.records("dropped")[-1]["counts"] == {"emit value out of range": 1}
    assert sup.records("dropped")[-1]["final"] is True


def test_close_sends_a_final_dropped_record_even_with_nothing_dropped(sup, make):
    """The supervisor learns the process closed its agent (one that ended by os._exit sends
    none: supervisor/live.py unclosed_note)."""
    s = make(sup.path)
    s.put(_series("x", 1))
    assert _wait(lambda: sup.records("series"))
    assert sup.records("dropped") == []  # nothing dropped: no record on the way
    s.close()
    assert _wait(lambda: sup.records("dropped"))
    (last,) = sup.records("dropped")
    assert (last["counts"], last["final"], last["pid"]) == ({}, True, os.getpid())


def test_close_on_a_stalled_socket_counts_queued_series_unencoded_and_keeps_the_steps(
    sup, make, monkeypatch
):
    s = make(sup.path, interval=3600)
    s.put(_series("first", 0))
    assert s.sync(timeout=2.0)
    sup.reading.clear()  # SIGSTOP: the socket fills and then takes nothing
    for i in range(40_000):
        s.put(_series(f"n{i % 500}", i))
    s.flush()  # ~2.5 MB: the kernel takes a few hundred kB, the rest waits in the buffer
    assert s.out.nbytes > 0
    for i in range(40_000):  # queued at the loop's end, after the socket stopped
        s.put(_series(f"late{i}", i))
    s.put_step((1.0, 1, 0, 0, 0))
    encoded, line = [], sm._line
    monkeypatch.setattr(sm, "_line", lambda obj: encoded.append(obj.get("k")) or line(obj))
    t = time.monotonic()
    s.close()
    took = time.monotonic() - t
    # one stall (CLOSE_STALL_S) shows the pause, one more for the final dropped record; the
    # 40,000 late series are counted, not encoded (~0.15 s of JSON on this machine)
    assert took < 2 * sm.CLOSE_STALL_S + 0.3, took
    assert "series" not in encoded and encoded.count("steps") == 1, (encoded, s.drops)
    assert s.drops[sm.UNSENT] >= 40_000 + 1  # the late series, the step cut with the buffer
    sup.reading.set()  # resumed after the child's exit: what reached it is whole lines
    time.sleep(0.5)
    assert len(sup.conns) == 1  # no connection after close(), none begun mid-line (a bug)


def test_close_sends_each_series_newest_shed_point_and_takes_it_off_the_shed_count(
    sup, make, monkeypatch
):
    s = make(sup.path, interval=3600)
    clock = [100.2]
    monkeypatch.setattr(sm.time, "monotonic", lambda: clock[0])
    s.shedding = True
    for i in range(25):  # second 100: a keeps 0..9, b keeps 0..9; 15 of each shed
        s.put(_series("a", i))
        s.put(_series("b", i))
    s.put(_series("b", 99))  # b's newest point, shed too
    monkeypatch.setattr(sm.time, "monotonic", time.monotonic)
    s.close()
    assert _wait(lambda: sup.records("dropped"))
    got = [(r["name"], r["step"]) for r in sup.records("series")]
    # by hand: 10 kept of each, then the newest shed of each (a 24, b 99) sent at close
    assert got[-2:] == [("a", 24), ("b", 99)] and len(got) == 22, got
    assert sup.records("dropped")[-1]["counts"] == {sm.SHED: 15 + 16 - 2}  # 51 put, 22 sent


def test_an_internal_error_in_the_final_flush_warns_once_and_stops_the_sender(
    sup, make, monkeypatch, capsys
):
    """The CI flake of the ``--fault sender`` test: a short run ended before the sender thread
    ever flushed, so the only call of the broken ``_connect`` was close()'s, whose failure was
    swallowed without a word (the never-raise invariant promises one line)."""

    def boom(self):
        raise RuntimeError("forced failure in sender")

    monkeypatch.setattr(Sender, "_connect", boom)
    s = make(sup.path, interval=60.0)  # the thread sleeps: close() does the first flush
    s.put(_series("loss", 1))
    s.close()
    err = capsys.readouterr().err
    assert err.count("internal error") == 1, err
    assert "forced failure in sender" in err
    assert not s.alive
