"""``tm attach PID`` on a real running Python process: process facts in the run log, a clean exit
when the process ends, and Ctrl-C that stops the watching without touching the process."""

import getpass
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import _env, read_log, run_tm

pytestmark = pytest.mark.slow

# A program that was started without trainmeter: one child process, then a sleep loop until the
# test writes `stop`. Its command line carries a secret that must never reach the log.
TARGET = """
import pathlib, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
pathlib.Path("ready").write_text(str(child.pid))
while not pathlib.Path("stop").exists():
    time.sleep(0.05)
child.kill()
child.wait()
"""


def _wait_for(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("timed out")


def _start_target(cwd: Path) -> subprocess.Popen:
    (cwd / "loop.py").write_text(TARGET)
    target = subprocess.Popen([sys.executable, "loop.py", "--token", "hunter2"], cwd=cwd)
    _wait_for(lambda: (cwd / "ready").exists())
    return target


def _attach(cwd: Path, pid: int) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "trainmeter.cli", "attach", str(pid), "--no-web",
           "--gpu-backend", "fake:h100x1"]  # fmt: skip
    return subprocess.Popen(cmd, cwd=cwd, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip


def _facts_seen(cwd: Path) -> dict | None:
    """The first process reading that already sees the child (the log exists by then)."""
    if not list((cwd / ".trainmeter" / "runs").glob("*/run.jsonl")):
        return None
    procs = [r["process"] for r in read_log(cwd) if r["k"] == "gpu" and "process" in r]
    return next((p for p in procs if p.get("children")), None)


def test_attach_watches_a_running_process_and_exits_when_it_ends(workdir):
    started = time.time()
    target = _start_target(workdir)
    tm = _attach(workdir, target.pid)
    try:
        live = _wait_for(lambda: _facts_seen(workdir))
        assert tm.poll() is None  # still watching
        child = int((workdir / "ready").read_text())
        assert live["pids"] == [target.pid, child] and live["children"] == 1
        assert live["rss_bytes"] > 1_000_000 and live["threads"] >= 2 and live["alive"]
        t_stop = time.monotonic()
        (workdir / "stop").write_text("")
        # the target is not reaped until tm attach exits: it ends as a zombie, as under a parent
        # that is slow to wait() for it
        _, err = tm.communicate(timeout=20)
        took = time.monotonic() - t_stop
    finally:
        tm.kill()
        target.wait(timeout=20)
    assert tm.returncode == 0, err
    assert took < 2.5, f"tm attach took {took:.2f} s to notice the end"
    assert f"attached to process {target.pid}" in err and f"process {target.pid} ended" in err
    log = read_log(workdir)
    assert "hunter2" not in json.dumps(log)  # redacted, in run_start's argv and the facts alike
    assert log[0]["opts"] == {"attached": target.pid} and log[-1]["k"] == "run_end"
    snap = json.loads(run_tm(["replay", "--json"], workdir).stdout)
    p = snap["process"]
    assert p["pid"] == target.pid and p["user"] == getpass.getuser()
    assert p["cmdline"] == f"{sys.executable} loop.py --token ***"
    assert snap["run"]["name"] == "loop"  # its script's name, as tm names a run
    assert abs(p["started"] - started) < 2.0  # btime is whole seconds: within a second or so
    assert (p["alive"], p["state"], p["pids"]) == (False, "ended", [])
    assert any(n.startswith(f"no agent: tm attach watches process {target.pid}")
               for n in snap["notes"])  # fmt: skip
    assert snap["run"]["state"] == "finished" and snap["run"]["exit_code"] is None
    assert [g["name"] for g in snap["hardware"]["gpus"]] == ["NVIDIA H100 80GB HBM3"]
    assert snap["step"] == 0 and snap["mfu"] is None


def test_ctrl_c_stops_watching_and_leaves_the_process_running(workdir):
    target = _start_target(workdir)
    tm = _attach(workdir, target.pid)
    try:
        _wait_for(lambda: _facts_seen(workdir))
        tm.send_signal(signal.SIGINT)
        _, err = tm.communicate(timeout=20)
        assert tm.returncode == 130, err
        time.sleep(0.3)
        assert target.poll() is None  # never signalled
        assert "still runs; stopped watching" in err
        snap = json.loads(run_tm(["replay", "--json"], workdir).stdout)
        assert snap["run"]["state"] == "interrupted" and snap["process"]["alive"] is True
    finally:
        tm.kill()
        (workdir / "stop").write_text("")
        target.wait(timeout=20)
