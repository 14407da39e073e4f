"""tm attach's pieces: the process source over a hand-written /proc, the GPUs a process uses,
the sampler's process deltas, and the engine's attached-run snapshot. Figures are computed by
hand in the comments (proc(5) for the fields)."""

import json
import os
from pathlib import Path

import pytest
from conftest import Clock

from trainmeter.commands import attach
from trainmeter.core import records
from trainmeter.core.engine import MAX_MODEL_FIELDS, MAX_RANKS, Engine, replay
from trainmeter.sources import NoneBackend, open_backend
from trainmeter.sources.process import (
    MAX_CMDLINE,
    OnlyDevices,
    ProcessSource,
    gpus_used,
    read_stat,
)
from trainmeter.supervisor.live import Live, redact_argv
from trainmeter.supervisor.sampler import Sampler

HZ = os.sysconf("SC_CLK_TCK")  # the clock ticks the source divides by (100 on Linux)
BTIME = 1_700_000_000
UID = os.getuid()


def _stat(pid, comm, state, ppid, utime, stime, threads, start):
    # fields 1..24 of /proc/<pid>/stat; 14 utime, 15 stime, 20 num_threads, 22 starttime
    rest = [state, ppid, 1, 1, 0, -1, 0, 0, 0, 0, 0, utime, stime, 0, 0, 20, 0, threads, 0, start]
    return f"{pid} ({comm}) " + " ".join(map(str, rest)) + " 1000 10\n"


def _process(proc, pid, *, comm="python", state="S", ppid=1, ticks=(0, 0), threads=1,
             start=500, rss_kb=1000, uid=UID, argv=("python", "train.py"),
             children=None):  # fmt: skip
    d = proc / str(pid)
    (d / "task" / str(pid)).mkdir(parents=True, exist_ok=True)
    (d / "stat").write_text(_stat(pid, comm, state, ppid, *ticks, threads, start))
    (d / "status").write_text(f"Name:\t{comm}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"
                              f"VmRSS:\t    {rss_kb} kB\n")  # fmt: skip
    (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    if children is not None:
        (d / "task" / str(pid) / "children").write_text(" ".join(map(str, children)))


@pytest.fixture
def proc(tmp_path):
    (tmp_path / "stat").write_text(f"cpu  1 2 3 4\nbtime {BTIME}\n")
    return tmp_path


def test_stat_fields_are_read_after_the_last_parenthesis(proc):
    _process(proc, 100, comm="my (odd) name", ticks=(7, 5), threads=3, start=42)
    st = read_stat(proc, 100)
    assert (st.state, st.ppid, st.cpu_ticks, st.threads, st.start_ticks) == ("S", 1, 12, 3, 42)


def test_facts_of_a_process_and_its_child_by_hand(proc):
    clock = Clock()
    argv = ("python", "train.py", "--api-key", "SECRET")
    _process(proc, 100, ticks=(200, 100), threads=4, start=12_345, rss_kb=1000, children=[101],
             argv=argv)  # fmt: skip
    _process(proc, 101, ppid=100, ticks=(50, 50), threads=2, rss_kb=500, children=[])
    src = ProcessSource(100, proc, clock=clock, redact=redact_argv)
    first = src.sample()
    assert first.cpu_percent is None and "two readings" in first.missing["cpu_percent"]
    clock.tick(2.0)
    _process(proc, 100, ticks=(350, 150), threads=4, start=12_345, rss_kb=1000, children=[101],
             argv=argv)  # fmt: skip
    _process(proc, 101, ppid=100, ticks=(100, 100), threads=2, rss_kb=500, children=[])
    s = src.sample()
    # busy ticks: (500 - 300) + (200 - 100) = 300 over 2 s: 100 x 300 / HZ / 2 (150% at 100 Hz)
    assert s.cpu_percent == pytest.approx(100 * 300 / HZ / 2)
    # 1000 kB + 500 kB = 1500 KiB = 1,536,000 B; 4 + 2 threads; one child
    assert (s.rss_bytes, s.threads, s.children, s.pids) == (1_536_000, 6, 1, [100, 101])
    assert s.started == pytest.approx(BTIME + 12_345 / HZ)
    assert s.cmdline == "python train.py --api-key ***"  # the secret never reaches the log
    assert s.uid == os.getuid() and s.state == "sleeping" and s.alive and s.missing == {}
    json.dumps(s.as_dict())


def test_children_come_from_a_scan_when_the_kernel_has_no_children_file(proc):
    _process(proc, 100)
    _process(proc, 205, ppid=100)
    _process(proc, 206, ppid=205)
    _process(proc, 300, ppid=1)
    assert ProcessSource(100, proc).pids() == [100, 205, 206]


def test_a_zombie_a_reused_pid_and_a_vanished_process_have_ended(proc):
    _process(proc, 100, start=500)
    src = ProcessSource(100, proc)
    assert src.alive()
    _process(proc, 100, state="Z", start=500)
    assert not src.alive()  # exited, not yet reaped by its parent
    _process(proc, 100, start=900)
    assert not src.alive()  # another process got the pid
    (proc / "100" / "stat").unlink()
    assert not src.alive() and src.pids() == []
    with pytest.raises(ProcessLookupError):
        ProcessSource(100, proc)
    _process(proc, 100, state="Z")
    with pytest.raises(ProcessLookupError, match="already ended"):
        ProcessSource(100, proc)


def test_an_ended_process_keeps_its_facts_and_loses_its_figures(proc):
    clock = Clock()
    _process(proc, 100, children=[])
    src = ProcessSource(100, proc, clock=clock)
    src.sample()
    _process(proc, 100, state="Z")
    clock.tick(3.0)
    s = src.sample()
    assert (s.alive, s.state, s.ended, s.cmdline) == (False, "ended", clock.t, "python train.py")
    assert s.cpu_percent is s.rss_bytes is s.threads is None and s.pids == []
    assert s.missing["rss_bytes"] == "process 100 has ended"
    clock.tick(1.0)
    assert src.sample().ended == clock.t - 1.0  # when it was first seen gone


def test_a_long_command_line_is_cut(proc):
    _process(proc, 100, argv=("x" * 3000,), children=[])
    assert len(ProcessSource(100, proc).sample().cmdline) == MAX_CMDLINE


def test_the_gpus_a_process_uses_come_from_nvmls_process_lists():
    samples = [{"index": 0, "process_mem_bytes": {"7": 1}}, {"index": 1},
               {"index": 2, "process_mem_bytes": {8: 5, 9: 1}}]  # fmt: skip
    assert gpus_used(samples, [8]) == [2]
    assert gpus_used(samples, [7, 9]) == [0, 2]
    assert gpus_used(samples, [1]) == []


def test_only_devices_passes_on_the_chosen_gpus_with_their_indices():
    backend = open_backend("fake:h100x4", clock=Clock())
    only = OnlyDevices(backend, [1, 3])
    assert [d.index for d in only.devices()] == [1, 3]
    assert [s.index for s in only.sample()] == [1, 3]
    assert (only.kind, only.reason) == ("fake:h100x4", None)


def test_an_adopted_fake_lists_the_watched_pid_and_is_already_training():
    clock = Clock()
    backend = open_backend("fake:h100x2", clock=clock)
    backend.nvml.adopt(31337)
    s = backend.sample()
    # the script is 10 s in: past 3 s idle and the 2 s ramp, so the process holds memory
    assert [list(x.process_mem_bytes) for x in s] == [[31337], [31337]]
    assert all(x.gpu_util >= 0.97 for x in s)  # trace(): gpu_util = 0.975 + 0.025 x noise


# --- the sampler and the engine ----------------------------------------------------------------


def _attached_log(tmp_path, facts):
    """Sample a fixed list of process readings into a fresh attached run; returns its records."""
    live = Live(tmp_path / ".trainmeter")
    live.open_run("loop", ["python", "loop.py"], {"attached": 100})
    feed = iter(facts)
    sampler = Sampler(live, NoneBackend("off"), None, process=lambda: next(feed))
    for _ in facts:
        assert sampler.tick()
    live.close_run("ok")
    recs = [json.loads(x) for x in live.log_path.read_text().splitlines()]
    return [r for r in recs if r["k"] != "checkpoint"]  # checkpoints: state, not records


def test_the_sampler_logs_process_facts_once_then_only_what_changed(tmp_path):
    a = {"pid": 100, "cmdline": "python loop.py", "rss_bytes": 10, "alive": True}
    b = {**a, "rss_bytes": 20}
    recs = _attached_log(tmp_path, [a, b, b, {**b, "alive": False}])
    procs = [r.get("process") for r in recs if r["k"] == "gpu"]
    assert procs == [a, {"rss_bytes": 20}, None, {"alive": False}]
    snap = replay(json.dumps(r) for r in recs).snapshot()
    assert snap["process"] == {**b, "alive": False}


def test_the_last_reading_at_stop_logs_the_process_only_and_the_gpus_keep_their_figures(tmp_path):
    clock = Clock()
    live = Live(tmp_path / ".trainmeter", clock=clock)
    live.open_run("loop", ["python", "loop.py"], {"attached": 100})
    facts = iter([{"pid": 100, "alive": True}, {"pid": 100, "alive": False}])
    sampler = Sampler(live, open_backend("fake:h100x1", clock=clock), None, clock=clock,
                      process=lambda: next(facts))  # fmt: skip
    clock.tick(1.0)
    assert sampler.tick()
    before = live.snapshot()["hardware"]["gpus"][0]
    clock.tick(0.01)  # too soon for another GPM window: that reading would blank the ladder
    sampler.stop(last=True)
    last = json.loads(live.log_path.read_text().splitlines()[-1])
    assert (last["k"], last["gpus"], last["host"]) == ("gpu", [], None)
    assert last["process"] == {"alive": False}
    snap = live.snapshot()
    assert snap["hardware"]["gpus"][0]["sm_active"] == before["sm_active"] is not None
    assert snap["process"] == {"pid": 100, "alive": False}


def test_an_attached_run_says_why_there_is_no_loss_or_flops_and_counts_its_gpus():
    eng = Engine()
    eng.apply(records.make("run_start", 10.0, id="r", name="n", argv=[], version="0",
                           opts={"attached": 4242}))  # fmt: skip
    eng.apply(records.make("gpu_devices", 10.0, backend="nvml", devices=[{"index": 0},
                           {"index": 1}], reason=None))  # fmt: skip
    procs = {"process_mem_bytes": {"4242": 1000, "999": 7}}
    eng.apply(records.make("gpu", 11.0, gpus=[{"index": 0, **procs}], host=None,
                           process={"pid": 4242, "pids": [4242]}))  # fmt: skip
    snap = eng.snapshot(now=3610.0)
    notes = snap["notes"]
    assert notes[0].startswith("no agent: tm attach watches process 4242 from outside")
    assert not any(n.startswith(("FLOPs/token:", "no MFU")) for n in notes)  # said once, above
    # two real GPUs watched for 3600 s: 2 x 3600 / 3600 = 2 GPU-hours
    assert (snap["gpus"], snap["gpu_hours"]) == (2, 2.0)
    # GPU memory counts the watched process only: 1000 B, not the other process's 7
    assert snap["hardware"]["gpus"][0]["train_mem_bytes"] == 1000
    assert snap["process"] == {"pid": 4242, "pids": [4242]}


def test_a_run_under_tm_has_no_process_key_and_keeps_its_own_notes():
    eng = Engine()
    eng.apply(records.make("run_start", 10.0, id="r", name="n", argv=[], version="0", opts={}))
    snap = eng.snapshot()
    assert snap["process"] is None
    assert any(n.startswith("no MFU: ") for n in snap["notes"])
    # no model yet: said by the reasons of the figures it leaves out, not again as a note
    assert snap["reasons"]["model"].startswith("not measured yet: no model seen yet")
    assert not any("no model" in n for n in snap["notes"])


def test_process_facts_from_a_record_are_bounded():
    eng = Engine()
    eng.apply(records.make("run_start", 1.0, id="r", name="n", argv=[], version="0",
                           opts={"attached": 1}))  # fmt: skip
    junk = {f"k{i}": "x" * 10_000 for i in range(500)}
    junk.update(pids=[*range(5000), "x", True], missing={"a" * 999: "b" * 99_999})
    for t in (2.0, 3.0):  # a second record cannot add names past the bound either
        eng.apply(records.make("gpu", t, gpus=[], host=None, process={**junk, f"new{t}": 1}))
    p = eng.snapshot()["process"]
    assert len(p) <= MAX_MODEL_FIELDS and "new3.0" not in p
    assert all(len(v) <= 200 for v in p.values() if isinstance(v, str))  # engine.MAX_NAME
    assert len(json.dumps(p)) < 20_000


def test_pids_are_bounded_to_ints(tmp_path):
    eng = Engine()
    eng.apply(records.make("gpu", 1.0, gpus=[], host=None,
                           process={"pids": [1, "2", True, 2**70, 3]}))  # fmt: skip
    assert eng.snapshot()["process"]["pids"] == [1, 3]
    eng.apply(records.make("gpu", 2.0, gpus=[], host=None,
                           process={"pids": list(range(MAX_RANKS + 9))}))  # fmt: skip
    assert len(eng.snapshot()["process"]["pids"]) == MAX_RANKS


# --- the command's errors ----------------------------------------------------------------------


def _main(capsys, argv):
    rc = attach.main(argv)
    return rc, capsys.readouterr().err


def test_a_pid_that_runs_nothing_is_a_usage_error(capsys, monkeypatch):
    def gone(pid):
        raise ProcessLookupError(3, "No such process")

    monkeypatch.setattr("trainmeter.sources.process.check_pid", gone)
    rc, err = _main(capsys, ["999999", "--no-web"])
    assert rc == 2 and err == "tm: no process 999999 is running (see `ps`)\n"


def test_another_users_process_is_refused_and_never_signalled(capsys, monkeypatch):
    def theirs(pid):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr("trainmeter.sources.process.check_pid", theirs)
    rc, err = _main(capsys, ["1", "--no-web"])
    assert rc == 2 and "process 1 belongs to another user" in err and err.count("\n") == 1


def test_its_own_pid_and_a_bad_pid_are_usage_errors(capsys):
    rc, err = _main(capsys, [str(os.getpid())])
    assert rc == 2 and "is tm attach itself" in err
    with pytest.raises(SystemExit) as exc:
        attach.main(["-5"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.startswith("tm: ")


def test_a_bad_gpu_backend_is_a_usage_error(capsys):
    rc, err = _main(capsys, ["1", "--gpu-backend", "fake:h200"])
    assert rc == 2 and err.startswith("tm: --gpu-backend: unknown GPU source 'fake:h200'")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_the_source_reads_this_process():
    s = ProcessSource(os.getpid()).sample()
    assert s.alive and s.rss_bytes > 1_000_000 and s.threads >= 1 and s.user
    assert "pytest" in s.cmdline or "python" in s.cmdline
