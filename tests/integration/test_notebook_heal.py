"""Monitoring that heals in a notebook, in a real kernel as test_notebook.py
runs one: the notebook's supervisor is killed (between cells, mid-cell) or paused at a cell's
end, and every ``%%trainmeter`` cell still runs its body; the next one is recorded in a new run
whose step records are the cell's own loop, counted here.

The loop trains a tiny model with torch.optim.AdamW for ``STEPS`` steps on batches of
``BATCH x SEQ`` token ids: each run log must hold steps 1..STEPS, each with BATCH * SEQ tokens
(both by hand, from the loop below).
"""

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest
from test_notebook import _kernel

pytestmark = pytest.mark.slow

STEPS, BATCH, SEQ = 7, 4, 5
SETUP = f"""
import os, signal, threading, time
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Embedding(16, 8), torch.nn.Linear(8, 16))
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)

def train(steps, after=None):
    for i in range(steps):
        x = torch.randint(0, 16, ({BATCH}, {SEQ}))
        loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), x.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad()
        if after is not None:
            after(i + 1)
    return steps

from trainmeter.jupyter import extension

def supervisor_pid():
    return extension._session.proc.pid

def pause(pid, seconds):  # SIGSTOP this supervisor, SIGCONT it after `seconds` (unless
    # the next cell has stopped it for good by then)
    def resume():
        try:
            os.kill(pid, signal.SIGCONT)
        except OSError:
            pass
    threading.Timer(seconds, resume).start()
    os.kill(pid, signal.SIGSTOP)
"""
HEAL = re.compile(r"\[trainmeter\] the supervisor \(pid (\d+)\) (.*); started a new one "
                  r"\(pid (\d+)\) in ([\d.]+) s; (.*)")  # fmt: skip


def _run(kc, code, timeout=120):
    """Execute ``code``; returns (reply content, stdout, stderr) as the cell showed them."""
    out = {"stdout": [], "stderr": []}

    def hook(msg):
        if msg["msg_type"] == "stream":
            out[msg["content"]["name"]].append(msg["content"]["text"])

    reply = kc.execute_interactive(code, timeout=timeout, output_hook=hook)
    return reply["content"], "".join(out["stdout"]), "".join(out["stderr"])


def _value(kc, expr):
    content, out, err = _run(kc, f"print(repr({expr}))")
    assert content["status"] == "ok", (content, err)
    return eval(out.strip())


@pytest.fixture
def kernel(tmp_path):
    """A kernel in ``tmp_path`` with trainmeter loaded, the model built, one recorded cell."""
    km, kc = _kernel()
    try:
        content, _, err = _run(kc, f"import os; os.chdir({str(tmp_path)!r})\n"
                               "%load_ext trainmeter")  # fmt: skip
        assert content["status"] == "ok", err
        assert _run(kc, SETUP)[0]["status"] == "ok"
        content, out, err = _run(kc, f"%%trainmeter --no-widget\ntrain({STEPS})")
        assert content["status"] == "ok" and "trainmeter: finished" in out, (out, err)
        yield kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def _logs(cwd) -> dict[Path, list[dict]]:
    logs = sorted((Path(cwd) / ".trainmeter" / "runs").glob("*/run.jsonl"))
    recs = {p: [json.loads(x) for x in p.read_text().splitlines() if x.strip()] for p in logs}
    return {p: [r for r in rs if r["k"] != "checkpoint"] for p, rs in recs.items()}


def _new_log(cwd, before) -> list[dict]:
    """The records of the one run log that is not in ``before``."""
    new = [recs for p, recs in _logs(cwd).items() if p not in before]
    assert len(new) == 1, f"{len(new)} new run logs"
    return new[0]


def _assert_recorded(recs, segments=1):
    """One whole training cell per segment: steps 1..STEPS each time, BATCH * SEQ tokens each."""
    steps = [r for r in recs if r["k"] == "step"]
    assert [s["step"] for s in steps] == list(range(1, STEPS * segments + 1))
    assert [s["tokens"] for s in steps] == [BATCH * SEQ] * (STEPS * segments)
    starts = [r["segment"] for r in recs if r["k"] == "segment_start"]
    assert starts == list(range(1, segments + 1))
    assert [r["status"] for r in recs if r["k"] == "segment_end"] == ["ok"] * segments
    # each cell's losses (from backward(); decided at the cell's end: STEPS < the clock's
    # 8-step watch) are applied before its segment_end, so its summary has them
    seg, losses = 0, {}
    for r in recs:
        if r["k"] == "segment_end":
            seg += 1
        elif r["k"] == "series" and r["name"] == "backward_loss":
            losses.setdefault(seg, []).append(r["step"])
    assert losses == {i: list(range(i * STEPS + 1, (i + 1) * STEPS + 1)) for i in range(segments)}


def _heal_line(err, old):
    """The one stderr line that says the supervisor was replaced; returns its match."""
    lines = [ln for ln in err.splitlines() if ln.startswith("[trainmeter] the supervisor")]
    assert len(lines) == 1, err
    m = HEAL.fullmatch(lines[0])
    assert m and int(m[1]) == old, lines[0]
    return m


def _gone(pid, within=5.0):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        time.sleep(0.05)
    return not Path(f"/proc/{pid}").exists()


def test_kill_9_between_cells_the_next_cell_runs_restarts_and_is_recorded(kernel, tmp_path):
    old = _value(kernel, "supervisor_pid()")
    old_socket = Path(_value(kernel, "extension._session.socket"))
    os.kill(old, signal.SIGKILL)
    before = _logs(tmp_path)
    # the widget on: a dead supervisor must not break the bridge either
    content, out, err = _run(kernel, f"%%trainmeter\ndone = train({STEPS})")
    assert content["status"] == "ok", (out, err)
    m = _heal_line(err, old)
    assert m[2] == "had stopped (killed by SIGKILL)" and m[5] == "this cell starts a new run"
    new = int(m[3])
    assert new == _value(kernel, "supervisor_pid()") != old and Path(f"/proc/{new}").exists()
    assert _value(kernel, "done") == STEPS  # the body ran
    assert not old_socket.parent.exists()  # the dead one's socket folder is not left behind
    assert "trainmeter: finished" in out and f"{STEPS} steps" in out
    _assert_recorded(_new_log(tmp_path, before))
    # and the cell after that continues the new run as its segment 2
    assert _run(kernel, f"%%trainmeter --no-widget\ntrain({STEPS})")[0]["status"] == "ok"
    _assert_recorded(_new_log(tmp_path, before), segments=2)


def test_kill_9_mid_cell_the_cell_finishes_its_loop_and_the_next_is_recorded(kernel, tmp_path):
    old = _value(kernel, "supervisor_pid()")
    cell = (
        "%%trainmeter --no-widget\n"
        "seen = []\n"
        "def kill_at(i):\n"
        "    seen.append(i)\n"
        "    if i == 3:\n"
        "        time.sleep(0.3)  # the sender has flushed steps 1-3 to it\n"
        "        os.kill(supervisor_pid(), signal.SIGKILL)\n"
        "        time.sleep(0.3)  # the next flushes meet a dead socket\n"
        f"train({STEPS}, after=kill_at)"
    )
    content, out, err = _run(kernel, cell)
    assert content["status"] == "ok", (out, err)
    assert _value(kernel, "seen") == list(range(1, STEPS + 1))  # the loop ran to its end
    assert f"the supervisor (pid {old}) stopped during this cell" in err
    assert "Traceback" not in out + err
    before = _logs(tmp_path)
    content, out, err = _run(kernel, f"%%trainmeter --no-widget\nafter = train({STEPS})")
    assert content["status"] == "ok" and _value(kernel, "after") == STEPS
    _heal_line(err, old)
    _assert_recorded(_new_log(tmp_path, before))


def test_a_supervisor_paused_at_a_cells_end_does_not_hold_the_kernel(kernel, tmp_path):
    old = _value(kernel, "supervisor_pid()")
    (old_log,) = _logs(tmp_path)
    cell = (
        "%%trainmeter --no-widget\n"
        f"train({STEPS})\n"
        "pid = supervisor_pid()\n"
        "pause(pid, 10.0)\n"
        "stopped_at = time.time()"
    )
    content, out, err = _run(kernel, cell)
    returned = time.time()
    assert content["status"] == "ok", (out, err)
    held = returned - _value(kernel, "stopped_at")
    # magics: SYNC_TIMEOUT_S (1.0) + END_PING_TIMEOUT_S (0.5) = 1.5 s, plus the reply's trip;
    # at least the sync's 1 s shows that the pause was met (not a cell that raced past it)
    assert 1.0 <= held < 4.0, (held, out, err)
    assert f"the supervisor (pid {old}) did not answer at the cell's end" in err, err
    assert "Traceback" not in out + err
    # the next cell, still within the 10 s pause: stopped for good, a new one records it
    before = _logs(tmp_path)
    t0 = time.monotonic()
    content, out, err = _run(kernel, f"%%trainmeter --no-widget\nnext_ = train({STEPS})")
    assert content["status"] == "ok" and _value(kernel, "next_") == STEPS, (out, err)
    m = _heal_line(err, old)
    assert m[2] == "did not answer within 2 s; stopped it", m[0]
    assert time.monotonic() - t0 < 10.0  # the ping's 2 s, the stop, the start and the loop
    _assert_recorded(_new_log(tmp_path, before))
    assert _gone(old)
    # stopped for good with SIGTERM (then SIGCONT), it closed its run before it exited
    assert [r["k"] for r in _logs(tmp_path)[old_log][-2:]] == ["segment_end", "run_end"]
    # the paused one does not come back and write on once its timer would have resumed it
    size = old_log.stat().st_size
    time.sleep(max(0.0, _value(kernel, "stopped_at") + 11.0 - time.time()))
    assert old_log.stat().st_size == size


def test_a_short_pause_at_a_cells_end_the_next_cell_continues_the_same_run(kernel, tmp_path):
    """Resumed before the next cell: no restart; the late segment_end is sent first, and the
    next cell is segment 2 of the same run with its steps counted."""
    old = _value(kernel, "supervisor_pid()")
    (log,) = _logs(tmp_path)
    cell = (
        "%%trainmeter --no-widget\n"
        f"train({STEPS})\n"
        "pid = supervisor_pid()\n"
        "threading.Timer(3.0, os.kill, (pid, signal.SIGCONT)).start()\n"
        "os.kill(pid, signal.SIGSTOP)"
    )
    content, out, err = _run(kernel, cell)
    assert content["status"] == "ok" and "did not answer at the cell's end" in err, err
    time.sleep(3.0)  # resumed by now
    content, out, err = _run(kernel, f"%%trainmeter --no-widget\ntrain({STEPS})")
    assert content["status"] == "ok", (out, err)
    assert "[trainmeter] the supervisor" not in err, err  # not restarted
    assert _value(kernel, "supervisor_pid()") == old
    assert _logs(tmp_path).keys() == {log}
    recs = _logs(tmp_path)[log]
    steps = [r["step"] for r in recs if r["k"] == "step"]
    # the fixture's cell, the paused cell (its steps went out before the pause), this cell
    assert steps == list(range(1, 3 * STEPS + 1))
    assert [r["tokens"] for r in recs if r["k"] == "step"] == [BATCH * SEQ] * (3 * STEPS)
    assert [r["segment"] for r in recs if r["k"] == "segment_start"] == [1, 2, 3]
    assert [r["status"] for r in recs if r["k"] == "segment_end"] == ["ok"] * 3
    assert f"{3 * STEPS} steps" in out


def test_a_supervisor_paused_mid_cell_under_a_flood_does_not_hold_the_kernel(kernel, tmp_path):
    """Paused while the loop goes on emitting: the sender's socket buffer fills and its thread
    blocks writing; the cell's end must not wait on it, and the next cell is recorded."""
    old = _value(kernel, "supervisor_pid()")
    cell = (
        "%%trainmeter --no-widget\n"
        "import trainmeter\n"
        "pid = supervisor_pid()\n"
        "pause(pid, 30.0)\n"
        "t0, i = time.time(), 0\n"
        "while time.time() - t0 < 2.0:  # ~10^5 series points: far over a socket buffer\n"
        "    i += 1\n"
        "    trainmeter.emit(step=i, **{f'metric_{k}': float(i) for k in range(50)})\n"
        "loop_end = time.time()"
    )
    content, out, err = _run(kernel, cell)
    returned = time.time()
    assert content["status"] == "ok", (out, err)
    held = returned - _value(kernel, "loop_end")
    assert held < 4.0, (held, out, err)  # 1.25 s sync wait + 0.5 s ping, as above
    assert f"the supervisor (pid {old}) did not answer at the cell's end" in err, err
    assert _value(kernel, "i") > 1000  # the loop was not held either
    before = _logs(tmp_path)
    content, out, err = _run(kernel, f"%%trainmeter --no-widget\nnext_ = train({STEPS})")
    assert content["status"] == "ok" and _value(kernel, "next_") == STEPS, (out, err)
    _heal_line(err, old)
    _assert_recorded(_new_log(tmp_path, before))
    assert _gone(old)


def test_a_supervisor_that_cannot_restart_leaves_the_cell_running_with_its_own_error(
    kernel, tmp_path
):
    old = _value(kernel, "supervisor_pid()")
    os.kill(old, signal.SIGKILL)
    # the new supervisor cannot bind its socket (no such folder): it exits at once
    no_dir = "lambda: '/nonexistent-tm/supervisor.sock'"
    _run(kernel, "from trainmeter.jupyter import extension\n"
                 "real_path = extension.private_socket_path\n"
                 f"extension.private_socket_path = {no_dir}")  # fmt: skip
    content, out, err = _run(kernel, "%%trainmeter\nran = train(3)\n1 / 0")
    assert content["status"] == "error" and content["ename"] == "ZeroDivisionError"
    assert _value(kernel, "ran") == 3  # the body ran, and its own exception is the cell's
    lines = [ln for ln in err.splitlines() if ln.startswith("[trainmeter]")]
    assert lines == ["[trainmeter] this cell runs unwatched: RuntimeError: the trainmeter "
                     "supervisor did not start (exit code 1)"], err  # fmt: skip
    assert "trainmeter: finished" not in out
    # once it can start again, the next cell heals and is recorded
    _run(kernel, "extension.private_socket_path = real_path")
    before = _logs(tmp_path)
    content, out, err = _run(kernel, f"%%trainmeter --no-widget\ntrain({STEPS})")
    assert content["status"] == "ok", (out, err)
    assert "had stopped (exit code 1); started a new one" in err, err
    _assert_recorded(_new_log(tmp_path, before))


def test_status_after_a_kill_restarts_the_supervisor_and_says_so_in_one_line(kernel, tmp_path):
    old = _value(kernel, "supervisor_pid()")
    os.kill(old, signal.SIGKILL)
    content, out, err = _run(kernel, "%trainmeter status")
    assert content["status"] == "ok"
    m = _heal_line(err, old)
    assert m[2] == "had stopped (killed by SIGKILL)"
    assert m[5] == "the next %%trainmeter cell starts a new run"
    assert len(err.strip().splitlines()) == 1, err
    new = int(m[3])
    assert new == _value(kernel, "supervisor_pid()") and Path(f"/proc/{new}").exists()
    assert out.startswith("trainmeter: idle")  # the new supervisor has no run yet
    content, out, err = _run(kernel, "%trainmeter status")  # healthy now: no line
    assert content["status"] == "ok" and err == "", err
    before = _logs(tmp_path)
    assert _run(kernel, f"%%trainmeter --no-widget\ntrain({STEPS})")[0]["status"] == "ok"
    _assert_recorded(_new_log(tmp_path, before))


def test_reload_ext_after_a_kill_leaves_a_working_agent(kernel, tmp_path):
    old = _value(kernel, "supervisor_pid()")
    os.kill(old, signal.SIGKILL)
    time.sleep(0.3)
    content, out, err = _run(kernel, "%reload_ext trainmeter")
    assert content["status"] == "ok", err
    assert _value(kernel, "supervisor_pid()") != old
    before = _logs(tmp_path)
    content, out, err = _run(kernel, f"%%trainmeter --no-widget\ntrain({STEPS})")
    assert content["status"] == "ok" and f"{STEPS} steps" in out, (out, err)
    _assert_recorded(_new_log(tmp_path, before))
