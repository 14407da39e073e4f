"""The supervisor's socket as a boundary: whatever a same-user process sends, no
traceback, bounded memory, a rank fixed by its hello, the run changed only by the process that
started the supervisor, and every refusal counted in the snapshot and the log.

Most tests serve a ``Live`` in this process (``ingest.Server``); the traceback, memory and
control tests run the notebook's supervisor process (``python -m trainmeter.supervisor``) with
this test as its kernel (``--parent``), its stderr captured.
"""

import json
import os
import socket
import subprocess
import sys
import time

import pytest
from conftest import _env

from trainmeter.core import records
from trainmeter.core.engine import replay
from trainmeter.supervisor import client, ingest
from trainmeter.supervisor.live import Live

MIB = 1 << 20


def _line(obj) -> bytes:
    return (json.dumps(obj) + "\n").encode()


def _step(n, rank=0):
    return records.encode(records.make("step", 1000.0 + n, step=n, rank=rank, tokens=8))


def _hello(rank=0, world=1, pid=4242):
    return {"ctl": "agent", "pid": pid, "rank": rank, "world_size": world}


def _agent(path, hello) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    s.connect(path)
    s.sendall(_line(hello))
    return s


def _sync(s, n=1) -> dict:
    """Wait until the supervisor has handled every line sent before (the agent's barrier)."""
    s.sendall(_line({"ctl": "sync", "id": n}))
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = s.recv(4096)
        assert chunk, "the supervisor closed the connection"
        buf += chunk
    return json.loads(buf.splitlines()[-1])


@pytest.fixture
def served(tmp_path, monkeypatch):
    """A Live with an open run, served on a socket in this process."""
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    live = Live(tmp_path / ".trainmeter")
    live.open_run("boundary", ["train.py"], {})
    path = str(tmp_path / "s.sock")
    server = ingest.Server(path, live)
    server.serve_in_thread()
    yield live, path
    server.shutdown()
    server.server_close()


def _by(live) -> dict:
    return (live.snapshot().get("dropped") or {}).get("by", {})


def _logged(live) -> list[dict]:
    with open(live.log_path, "rb") as f:
        return [r for r in map(json.loads, f.read().splitlines()) if r["k"] != "checkpoint"]


def test_a_2_mib_line_is_counted_and_the_connection_goes_on(served):
    live, path = served
    s = _agent(path, _hello())
    s.sendall(_step(1) + b"x" * (2 * MIB) + b"\n" + _step(2))
    assert _sync(s) == {"ack": 1}
    assert live.snapshot()["step"] == 2
    assert _by(live) == {"line too long (supervisor)": 1}
    final = live.close_run("ok", 0)
    log = _logged(live)
    assert [r["step"] for r in log if r["k"] == "step"] == [1, 2]
    assert [r["counts"] for r in log if r["k"] == "dropped"][-1] == {"line too long": 1}
    with open(live.log_path, "rb") as f:
        assert replay(f).snapshot()["dropped"] == final["dropped"]


def test_a_forged_rank_a_hello_outside_the_world_and_supervisor_kinds_are_refused(served):
    live, path = served
    s = _agent(path, _hello(rank=0, world=2))
    run_end = records.encode(records.make("run_end", 1001.0, status="ok", exit_code=0))
    other = records.encode(records.make("dropped", 1001.0, source="disk", counts={"x": 1}))
    s.sendall(_step(1) + _step(1, rank=1) + run_end + other + _step(2))
    assert _sync(s) == {"ack": 1}
    outside = _agent(path, _hello(rank=2, world=2, pid=4343))  # rank 2 of 2: no such rank
    outside.sendall(_step(1, rank=2) + _step(2, rank=2))
    assert _sync(outside) == {"ack": 1}
    assert live.snapshot()["ranks"] == {"0": 2}  # only rank 0's own steps
    assert _by(live) == {
        "kind not allowed from an agent (supervisor)": 2,  # run_end, a disk's dropped
        "hello rank outside the world (supervisor)": 2,
        "rank differs from hello (supervisor)": 1,
    }
    live.close_run("ok", 0)
    log = _logged(live)
    assert [r["k"] for r in log].count("run_end") == 1  # the supervisor's own
    counts = [r["counts"] for r in log if r["k"] == "dropped" and r["source"] == "supervisor"]
    assert sum(counts[-1].values()) == 5
    notes = [r["text"] for r in log if r["k"] == "note"]
    assert "pid 4242: rank differs from hello" in notes


def test_one_re_hello_adopts_the_rank_torch_distributed_gives(served):
    # agent/runtime.py adopt_rank: RANK was not set (mp.spawn), so the hello said 0 of 1
    live, path = served
    s = _agent(path, _hello(rank=0, world=1))
    adopt = records.encode(records.make("agent_hello", 1000.5, pid=4242, rank=1, world_size=2))
    again = records.encode(records.make("agent_hello", 1003.0, pid=4242, rank=0, world_size=2))
    s.sendall(_step(1) + adopt + _step(2, rank=1) + again + _step(3, rank=0))
    assert _sync(s) == {"ack": 1}
    snap = live.snapshot()
    assert snap["ranks"] == {"0": 1, "1": 1}  # step 1 before the re-hello, step 2 after
    assert _by(live) == {"rank differs from hello (supervisor)": 2}  # the second re-hello, step 3


def test_the_jobs_world_size_bounds_a_hello(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    live = Live(tmp_path / ".trainmeter")
    live.open_run("boundary", ["train.py"], {})
    path = str(tmp_path / "s.sock")
    server = ingest.Server(path, live)
    server.serve_in_thread()
    try:
        big = _agent(path, _hello(rank=3, world=4))  # a world of 4 in a job of 2
        big.sendall(_step(1, rank=3))
        assert _sync(big) == {"ack": 1}
        ok = _agent(path, _hello(rank=1, world=2, pid=4343))
        ok.sendall(_step(1, rank=1))
        assert _sync(ok) == {"ack": 1}
        assert live.snapshot()["ranks"] == {"1": 1}
        assert _by(live) == {"hello rank outside the world (supervisor)": 1}
        notes = live.snapshot()["notes"]
        said = "refused an agent whose hello says rank 3 of 4 (the job's $WORLD_SIZE is 2)"
        assert f"supervisor: {said}" in notes
    finally:
        server.shutdown()
        server.server_close()


def test_a_handler_error_is_counted_with_one_line_and_no_traceback(served, monkeypatch, capfd):
    live, path = served

    def broken(line):
        raise KeyError("a bug")

    monkeypatch.setattr(ingest, "decode_batch", broken)  # what every agent line goes through
    for _ in range(3):
        s = _agent(path, _hello())
        s.sendall(_step(1))
        s.shutdown(socket.SHUT_WR)
        assert s.recv(10) == b""  # the handler ended
        s.close()
    time.sleep(0.1)
    err = capfd.readouterr().err
    assert "Traceback" not in err
    assert err.count("a socket connection failed (KeyError)") == 1
    assert _by(live) == {"handler error: KeyError (supervisor)": 3}


def test_a_fast_connection_is_paused_not_cut(served, monkeypatch):
    # 2,000 lines a second at most: 400 lines take at least 0.1 s x (400 / 200 - 1) = 0.1 s
    live, path = served
    monkeypatch.setattr(ingest, "RATE_LINES", 2000)
    s = _agent(path, _hello())
    start = time.monotonic()
    s.sendall(b"".join(_step(n) for n in range(1, 401)))
    assert _sync(s) == {"ack": 1}
    assert time.monotonic() - start >= 0.1
    assert live.snapshot()["step"] == 400 and not _by(live)


# -- the notebook's supervisor process ----------------------------------------------------------
@pytest.fixture
def supervisor(tmp_path):
    folder = tmp_path / "sock"
    folder.mkdir(mode=0o700)
    path = str(folder / "supervisor.sock")
    cmd = [sys.executable, "-m", "trainmeter.supervisor", "--socket", path,
           "--parent", str(os.getpid()), "--dir", str(tmp_path / ".trainmeter")]  # fmt: skip
    proc = subprocess.Popen(cmd, env=_env({"TRAINMETER_GPU_BACKEND": "none"}),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    deadline = time.monotonic() + 30
    while not os.path.exists(path):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
        time.sleep(0.05)
    yield proc, path
    if proc.poll() is None:
        proc.terminate()
        proc.wait(10)


def _stop(proc, path) -> str:
    """Shut the supervisor down (from its parent, this test); its stderr."""
    client.request(path, "shutdown")
    _, err = proc.communicate(timeout=30)
    return err.decode()


def _vm_hwm(pid) -> int:
    """Peak resident memory of ``pid`` so far, bytes (/proc/PID/status VmHWM, in kB)."""
    with open(f"/proc/{pid}/status") as f:
        line = next(x for x in f if x.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


def test_bad_lines_of_every_kind_print_no_traceback(supervisor):
    proc, path = supervisor
    client.request(path, "segment_start", name="cell", opts={})
    raw = [
        b'{"ctl": not json\n',  # a malformed control line where records go
        b'{"ctl": "sync", "id": [1]}\n',  # a sync whose id is not a number
        b'{"ctl"}\n',
        b"[" * 100_000 + b"\n",  # JSON nested 100,000 deep
        b'{"v": 1, "k": "step", "t": 1e400, "step": 1, "rank": 0}\n',
        b"\xff\xfe not utf-8\n",
    ]
    s = _agent(path, _hello(pid=os.getpid()))
    s.sendall(b"".join(raw))
    assert _sync(s) == {"ack": 1}
    firsts = [
        b"not json\n",
        b"[1, 2]\n",
        b'{"ctl": "subscribe", "hz": "fast"}\n',
        b'{"ctl": "request", "cmd": ["x"]}\n',
        b'{"ctl": "agent", "rank": "0"}\n',
    ]
    for first in firsts:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
            c.settimeout(5)
            c.connect(path)
            c.sendall(first)
            c.shutdown(socket.SHUT_WR)
            try:
                c.recv(1 << 16)
            except TimeoutError:
                pass  # the subscriber waits for a change: it lives, that is all
    reply = client.request(path, "segment_end", status=["x"], error=5)  # fields of wrong types
    by = reply["snapshot"]["dropped"]["by"]
    assert by == {
        "malformed record (supervisor)": 3,
        "malformed control line (supervisor)": 3,
        "malformed first line (supervisor)": 2,  # not json, [1, 2]: closed, counted
        "unknown request (supervisor)": 1,  # cmd ["x"]
    }
    assert "Traceback" not in _stop(proc, path)


def test_a_32_mib_line_keeps_the_supervisor_memory_bounded(supervisor):
    proc, path = supervisor
    client.request(path, "segment_start", name="cell", opts={})
    s = _agent(path, _hello(pid=os.getpid()))
    s.sendall(_step(1))
    assert _sync(s, 1) == {"ack": 1}
    before = _vm_hwm(proc.pid)
    s.sendall(b"x" * (32 * MIB) + b"\n" + _step(2))  # held whole, it would be 32 MiB at least
    assert _sync(s, 2) == {"ack": 2}
    grew = _vm_hwm(proc.pid) - before
    assert grew < 8 * MIB, f"peak memory grew {grew / MIB:.1f} MiB"
    snap = client.request(path, "snapshot")["snapshot"]
    assert snap["step"] == 2 and snap["dropped"]["by"] == {"line too long (supervisor)": 1}
    assert "Traceback" not in _stop(proc, path)


def test_end_run_from_another_process_is_refused_and_counted(supervisor, tmp_path):
    proc, path = supervisor
    client.request(path, "segment_start", name="cell", opts={})
    code = "\n".join([
        "import json, sys",
        "from trainmeter.supervisor import client",
        "for cmd in ('end_run', 'shutdown', 'segment_end', 'ping'):",
        "    try:",
        "        print(json.dumps(client.request(sys.argv[1], cmd)))",
        "    except RuntimeError as exc:",
        "        print(json.dumps({'error': str(exc)}))",
    ])  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code, path], env=_env(), capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    replies = [json.loads(x) for x in out.stdout.splitlines()]
    refused = "is accepted only from the process that started this supervisor"
    assert [r.get("error") for r in replies[:3]] == [
        f"{cmd!r} {refused}" for cmd in ("end_run", "shutdown", "segment_end")
    ]
    assert replies[3]["ok"] is True  # a ping is anyone's
    snap = client.request(path, "snapshot")["snapshot"]
    assert snap["run"]["state"] == "running"  # the run went on
    assert snap["dropped"]["by"] == {"control request from another process (supervisor)": 3}
    final = client.request(path, "end_run")["snapshot"]  # from the parent: taken
    assert final["run"]["state"] == "finished"
    with open(final["run"]["log"], "rb") as f:
        log = [json.loads(x) for x in f.read().splitlines()]
    dropped = [r for r in log if r["k"] == "dropped"]
    assert dropped[-1]["counts"] == {"control request from another process": 3}
    assert "Traceback" not in _stop(proc, path)


def test_the_drain_waits_while_lines_arrive_then_counts_what_it_cuts(served, monkeypatch):
    import threading

    from trainmeter.supervisor import launcher

    live, path = served
    monkeypatch.setattr(launcher, "DRAIN_MAX_S", 1.0)
    s = _agent(path, _hello())
    stop, sent = threading.Event(), []

    def flood():  # an agent that never stops sending: one step every 5 ms
        n = 0
        while not stop.is_set():
            n += 1
            s.sendall(_step(n))
            sent.append(n)
            time.sleep(0.005)

    t = threading.Thread(target=flood, daemon=True)
    t.start()
    while not live.agents_connected:  # its hello read: an agent (the child exits long after)
        time.sleep(0.01)
    said = []
    start = time.monotonic()
    launcher._drain_agents(live, said.append)
    waited = time.monotonic() - start
    stop.set()
    t.join()
    s.close()
    while live.agents_connected:  # the handler reads to the end of the connection
        time.sleep(0.01)
    assert 1.0 <= waited < 1.0 + launcher.DRAIN_CUT_S + 1.0
    final = live.close_run("ok", 0)
    cut = final["dropped"]["by"]["cut at end of run (supervisor)"]
    logged = [r["step"] for r in _logged(live) if r["k"] == "step"]
    assert cut > 0 and len(logged) + cut == len(sent)  # every step sent: logged or counted
    assert len(said) == 1 and "records cut at the end of the run" in said[0]


def test_connections_past_the_bound_are_closed_and_counted(served, monkeypatch):
    live, path = served
    monkeypatch.setattr(ingest, "MAX_CONNECTIONS", 3)
    held = [_agent(path, _hello(pid=5000 + i)) for i in range(3)]
    for s in held:
        assert _sync(s) == {"ack": 1}  # all 3 served
    try:
        extra = _agent(path, _hello(pid=6000))
        assert extra.recv(10) == b""  # closed at once
    except (BrokenPipeError, ConnectionResetError):
        pass  # closed at once, before or after its hello was sent
    assert _by(live) == {"too many connections (supervisor)": 1}
    held[0].close()
    assert _sync(_served_again(path)) == {"ack": 1}  # room again, once its thread has ended


def _served_again(path, timeout=10.0) -> socket.socket:
    """A new agent connection, tried until the server has room (a closed connection's thread
    ends a moment after its socket: on a loaded machine, more than a fixed sleep)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            s = _agent(path, _hello(pid=7000))
            s.sendall(_line({"ctl": "sync", "id": 0}))
            if s.recv(4096):
                return s
        except (BrokenPipeError, ConnectionResetError):
            pass
        assert time.monotonic() < deadline, "no room for a new connection"
        time.sleep(0.05)


def test_under_tm_a_forger_is_refused_and_the_summary_line_says_it(tmp_path):
    from conftest import read_log, run_tm

    # a child that writes to tm's socket itself: a 2 MiB line, a forged run_end, an end_run
    code = "\n".join([
        "import json, os, socket",
        "s = socket.socket(socket.AF_UNIX)",
        "s.connect(os.environ['TRAINMETER_SOCKET'])",
        "s.sendall(b'{\"ctl\": \"agent\", \"pid\": 1, \"rank\": 0, \"world_size\": 1}\\n')",
        "s.sendall(b'x' * (2 << 20) + b'\\n')",
        "s.sendall(b'{\"v\": 1, \"k\": \"run_end\", \"t\": 1.0, \"status\": \"ok\"}\\n')",
        "s.sendall(b'{\"ctl\": \"sync\", \"id\": 1}\\n')",
        "assert s.recv(100) == b'{\"ack\":1}\\n'",
        "r = socket.socket(socket.AF_UNIX)",
        "r.connect(os.environ['TRAINMETER_SOCKET'])",
        "r.sendall(b'{\"ctl\": \"request\", \"cmd\": \"end_run\"}\\n')",
        "print(r.recv(1000).decode().strip())",
        "g = socket.socket(socket.AF_UNIX)",  # a first line that is no hello at all
        "g.connect(os.environ['TRAINMETER_SOCKET'])",
        "g.sendall(b'garbage\\n')",
        "g.recv(10)",  # closed by the supervisor
    ])  # fmt: skip
    out = run_tm(["--no-web", "--", sys.executable, "-c", code], tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["ok"] is False  # tm takes no request that changes the run
    assert "Traceback" not in out.stderr
    summary = out.stderr.strip().splitlines()[-1]
    assert "4 records dropped (1 line too long (supervisor), " in summary, summary  # 3 named
    log = read_log(tmp_path)
    assert [r["k"] for r in log].count("run_end") == 1
    assert log[-2]["k"] == "dropped" and log[-2]["counts"] == {
        "line too long": 1, "kind not allowed from an agent": 1, "unknown request": 1,
        "malformed first line": 1}  # fmt: skip


@pytest.mark.parametrize("alive", [True, False])
def test_a_silent_agent_is_waited_for_only_while_its_process_may_still_send(
    served, monkeypatch, alive
):
    from trainmeter.supervisor import launcher

    live, path = served
    monkeypatch.setattr(launcher, "DRAIN_QUIET_S", 0.3)
    monkeypatch.setattr(launcher, "DRAIN_MAX_S", 1.5)
    if not alive:  # as when the agent's process has exited with lines still buffered
        monkeypatch.setattr(launcher, "_any_alive", lambda live: False)
    s = _agent(path, _hello())
    assert _sync(s) == {"ack": 1}
    said, start = [], time.monotonic()
    launcher._drain_agents(live, said.append)
    waited = time.monotonic() - start
    s.close()
    # alive: 0.3 s of silence, then 0.5 s counting (nothing); ended: the 1.5 s bound, then 0.5 s
    low = 0.3 + launcher.DRAIN_CUT_S if alive else 1.5 + launcher.DRAIN_CUT_S
    assert low <= waited < low + 0.5
    assert said == []  # nothing was cut: nothing said
