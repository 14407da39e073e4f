"""Tracker taps: what a loop sends to wandb, TensorBoard or MLflow reaches the run log.

End to end (the real packages, under ``tm``): one script per tracker logs a tiny model's loss
only through that tracker; the run log holds its series with their steps and role, and
``tm replay --json`` shows it; a script logging through all three shows none under
``--no-tap``; the printed losses are the same without ``tm`` (the same-numerics invariant); every
tap failing inside leaves each tracker call working and its result unchanged (the never-raise
invariant). The six runs (about 45 s of CPU: torch and each tracker's import dominate) go two at a
time.

In process (a stand-in agent, stand-in tracker modules, and the real tensorboardX): the
wrapper's contract, value reading (the no-device-sync invariant), steps, wrap-once and unwrap.
"""

import glob
import importlib.util
import inspect
import json
import math
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURES, _env, losses, read_log, run_jobs, run_tm

from trainmeter.agent import trackers
from trainmeter.agent.trackers import TrackerTaps

pytestmark = pytest.mark.slow

PACKAGES = ("wandb", "tensorboard", "mlflow", "tensorboardX", "torch")


def test_the_tracker_packages_are_installed():
    """The end-to-end tests need the real packages (``pip install -e ".[test]"``): missing
    ones fail here by name, and the runs below fail too, rather than being skipped."""
    missing = [name for name in PACKAGES if importlib.util.find_spec(name) is None]
    assert not missing, f"install the test extra: pip install -e '.[test]' (missing {missing})"


# -- end to end ---------------------------------------------------------------------------------
TM = ["-q", "--no-web"]
JOBS = {  # name -> (tm flags or None for a plain run, script, script args); longest first
    "fault": (TM, "log_all_trackers.py", ["--fault"]),
    "no-tap": ([*TM, "--no-tap"], "log_all_trackers.py", []),
    "mlflow": (TM, "log_mlflow.py", []),
    "wandb": (TM, "log_wandb.py", []),
    "tensorboard": (TM, "log_tensorboard.py", []),
    "plain": (None, "log_tensorboard.py", []),
}


def _tracker_env(workdir: Path) -> dict:
    return {
        "WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DIR": str(workdir),
        "WANDB_CONFIG_DIR": str(workdir / ".wandb-config"),
        "WANDB_CACHE_DIR": str(workdir / ".wandb-cache"),
        "WANDB_DATA_DIR": str(workdir / ".wandb-data"),
        "MLFLOW_TRACKING_URI": f"file:{workdir / 'mlruns'}", "MLFLOW_ALLOW_FILE_STORE": "true",
    }  # fmt: skip


def _job(name: str, root: Path) -> dict:
    flags, script, args = JOBS[name]
    workdir = root / name
    workdir.mkdir()
    env = _tracker_env(workdir)
    if flags is None:
        cmd = [sys.executable, FIXTURES / script, *args]
        out = subprocess.run(cmd, cwd=workdir, env=_env(env), capture_output=True, text=True,
                             timeout=300)  # fmt: skip
        return {"out": out, "dir": workdir}
    out = run_tm([*flags, FIXTURES / script, *args], workdir, env=env)
    replayed = run_tm(["replay", "--json"], workdir)
    return {"out": out, "dir": workdir, "log": read_log(workdir),
            "snap": json.loads(replayed.stdout) if replayed.returncode == 0 else None}  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("trackers")
    return run_jobs(_job, JOBS, root)


def _printed(job) -> list[float]:
    return [float(line.split()[-1]) for line in losses(job["out"].stdout)]


def _tapped(job) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for rec in job["log"]:
        if rec["k"] == "series":
            out.setdefault(rec["name"], []).append(rec)
    return out


# tracker -> (train loss name, its steps, val loss name, its steps, other series seen)
EXPECTED = {
    "wandb": ("train/loss", list(range(1, 11)), "val/loss", [5, 10], {"loss_tensor", "opt.lr"}),
    "tensorboard": ("Loss/train", list(range(4, 41, 4)), "loss/val", [20, 40], {"loss/train"}),
    "mlflow": ("train_loss", list(range(1, 11)), "eval_loss", [5, 10], set()),
}


@pytest.mark.parametrize("tracker", EXPECTED)
def test_a_trackers_loss_reaches_the_run_log_with_its_steps_and_role(runs, tracker):
    train, train_steps, val, val_steps, others = EXPECTED[tracker]
    job = runs[tracker]
    printed = _printed(job)
    assert len(printed) == 10
    series = _tapped(job)
    assert set(series) == {train, val, *others}
    assert all(r["source"] == tracker for recs in series.values() for r in recs)
    assert [r["step"] for r in series[train]] == train_steps
    assert [round(r["value"], 8) for r in series[train]] == printed
    assert {r.get("role") for r in series[train]} == {"train_loss"}
    assert [r["step"] for r in series[val]] == val_steps
    assert [round(r["value"], 8) for r in series[val]] == [round(printed[s - 1] + 1, 8)
                                                          for s in (5, 10)]  # fmt: skip
    assert {r.get("role") for r in series[val]} == {"val_loss"}
    snap = job["snap"]
    assert snap["series"][train]["step"] == train_steps[-1]
    assert round(snap["series"][train]["value"], 8) == printed[-1]
    assert snap["series"][val]["step"] == val_steps[-1]
    # tm replay --json names the role of each catalogued series (engine keeps it)
    assert snap["series"][train]["role"] == "train_loss"
    assert snap["series"][val]["role"] == "val_loss"
    assert snap["step"] == 10  # the optimizer steps, from the torch taps
    if tracker == "wandb":  # a 0-d CPU tensor is read; a nested dict is named as wandb shows it
        assert [round(r["value"], 8) for r in series["loss_tensor"]] == printed
        assert "role" not in series["opt.lr"][0] and series["opt.lr"][0]["value"] == 0.1
    if tracker == "tensorboard":  # add_scalars: one name per line, a tensor value read too
        assert [r["step"] for r in series["loss/train"]] == [20, 40]
        assert series["loss/train"][0]["role"] == "train_loss"


def test_no_tap_shows_no_tracker_series(runs):
    """``--no-tap`` on a script that logs through all three trackers: no series at all."""
    job = runs["no-tap"]
    assert _printed(job) == _printed(runs["tensorboard"])
    assert "returned mlflow NoneType RunOperations" in job["out"].stdout
    assert _tapped(job) == {}
    assert job["snap"]["series"] == {}
    assert not any(r["k"] == "step" for r in job["log"])  # torch taps are off as well


def test_the_losses_are_identical_with_and_without_tm(runs):
    """The same-numerics invariant for a tracker-logging script (and the others share its loop and
    seed)."""
    plain = losses(runs["plain"]["out"].stdout)
    assert len(plain) == 10
    for name in ("tensorboard", "wandb", "mlflow", "fault", "no-tap"):
        assert losses(runs[name]["out"].stdout) == plain, name


def test_a_failing_tap_leaves_each_tracker_call_working_and_its_result_unchanged(runs):
    """The never-raise invariant: every tap raises inside at its first call (tracker_loop.py
    --fault); each says so once, records nothing more, and each tracker still gets every value."""
    job = runs["fault"]
    out, err = job["out"].stdout, job["out"].stderr
    assert "returned wandb NoneType" in out
    assert "returned tensorboard NoneType" in out
    assert "returned mlflow NoneType RunOperations" in out  # synchronous=False's handle
    for tap in ("wandb", "tensorboard", "mlflow"):
        line = f"[trainmeter] {tap} tap stopped after an internal error: RuntimeError: forced"
        assert err.count(line) == 1, err
    # nothing from the trackers; with no tracker loss recorded, the loss comes from backward()
    tapped = _tapped(job)
    assert set(tapped) == {"backward_loss"}
    assert [r["step"] for r in tapped["backward_loss"]] == list(range(1, 11))
    assert {r["source"] for r in tapped["backward_loss"]} == {"backward"}
    assert [r["step"] for r in job["log"] if r["k"] == "step"] == list(range(1, 11))
    printed = _printed(job)
    workdir = job["dir"]
    (metrics,) = glob.glob(str(workdir / "mlruns" / "*" / "*" / "metrics" / "train_loss"))
    values = [float(line.split()[1]) for line in Path(metrics).read_text().splitlines()]
    assert [round(v, 8) for v in values] == printed
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    (events,) = glob.glob(str(workdir / "tb" / "events.out.tfevents.*"))
    scalars = [(e.step, v.tensor.float_val[0]) for e in EventFileLoader(events).Load()
               for v in e.summary.value]  # fmt: skip
    assert [s for s, _ in scalars] == list(range(1, 11))
    assert [round(v, 6) for _, v in scalars] == [round(v, 6) for v in printed]  # float32
    (wandb_log,) = glob.glob(str(workdir / "wandb" / "offline-run-*" / "run-*.wandb"))
    assert Path(wandb_log).read_bytes().count(b"train/loss") >= 10


# -- in process: the wrapper's contract ---------------------------------------------------------
SENTINEL = object()


class Agent:
    """Stands in for runtime.Agent: what the taps use of it."""

    def __init__(self, events=None):
        self.step, self.armed = 7, True
        self.events = [] if events is None else events

    def put(self, kind, **fields):
        self.events.append({"k": kind, **fields})

    def series(self):
        return [e for e in self.events if isinstance(e, dict) and e["k"] == "series"]


@pytest.fixture(autouse=True)
def _fresh_guard(fresh_guard):
    pass


def _fake_wandb(events):
    mod = types.ModuleType("wandb")

    class Run:
        def log(self, data, step=None, commit=None):
            """Upload run data."""
            events.append(("wandb.log", step))
            return SENTINEL

    mod.Run = Run
    return mod


def _fake_tensorboard(events, name="torch.utils.tensorboard"):
    mod = types.ModuleType(name)

    class SummaryWriter:
        def add_scalar(self, tag, scalar_value, global_step=None, walltime=None):
            """Add scalar data to summary."""
            events.append(("add_scalar", tag))
            if scalar_value == "bad":
                raise ValueError("not a number")
            return SENTINEL

        def add_scalars(self, main_tag, tag_scalar_dict, global_step=None, walltime=None):
            for tag, value in tag_scalar_dict.items():  # a tapped call making tapped calls
                self.add_scalar(f"{main_tag}_{tag}", value, global_step)
            return SENTINEL

    mod.SummaryWriter = SummaryWriter
    return mod


def _fake_mlflow(events, monkeypatch):
    mod = types.ModuleType("mlflow")

    def log_metric(key, value, step=None, synchronous=None):
        """Log a metric under the current run."""
        events.append(("log_metric", key))
        return SENTINEL

    def log_metrics(metrics, step=None, synchronous=None):
        events.append(("log_metrics", step))
        return SENTINEL

    mod.log_metric, mod.log_metrics = log_metric, log_metrics
    fluent = types.ModuleType("mlflow.tracking.fluent")
    fluent.log_metric, fluent.log_metrics = log_metric, log_metrics
    monkeypatch.setitem(sys.modules, "mlflow.tracking.fluent", fluent)
    return mod, fluent


@pytest.fixture
def taps():
    made = []

    def make(events=None):
        t = TrackerTaps(Agent(events))
        made.append(t)
        return t

    yield make
    for t in made:
        t.detach()


def _calls(wandb, tb, mlflow):
    """One call through each tap: what each returned."""
    return [
        wandb.Run().log({"train/loss": 1.5}, step=3),
        tb.SummaryWriter().add_scalar("Loss/train", 2.5, 4),
        mlflow.log_metric("eval_loss", 3.5),
        mlflow.log_metrics({"val/loss": 4.5}, step=5),
    ]


def _all_attached(taps, events, monkeypatch):
    """Taps with fake wandb, TensorBoard and MLflow attached, each logging calls to ``events``."""
    t = taps(events)
    wandb, tb = _fake_wandb(events), _fake_tensorboard(events)
    mlflow, _ = _fake_mlflow(events, monkeypatch)
    for mod in (wandb, tb, mlflow):
        t.attach(mod)
    return t, (wandb, tb, mlflow)


def test_each_tap_calls_the_tracker_first_and_returns_its_result_unchanged(taps, monkeypatch):
    events = []
    t, (wandb, tb, mlflow) = _all_attached(taps, events, monkeypatch)
    assert all(r is SENTINEL for r in _calls(wandb, tb, mlflow))
    kinds = [e[0] if isinstance(e, tuple) else e["name"] for e in events]
    assert kinds == ["wandb.log", "train/loss", "add_scalar", "Loss/train",
                     "log_metric", "eval_loss", "log_metrics", "val/loss"]  # fmt: skip
    got = [(e["name"], e["value"], e["step"], e["source"], e.get("role")) for e in t.agent.series()]
    assert got == [
        ("train/loss", 1.5, 3, "wandb", "train_loss"),
        ("Loss/train", 2.5, 4, "tensorboard", "train_loss"),
        ("eval_loss", 3.5, 7, "mlflow", "val_loss"),  # no step given: the agent's
        ("val/loss", 4.5, 5, "mlflow", "val_loss"),
    ]


def test_a_trackers_own_exception_propagates_unchanged_and_records_nothing(taps):
    t = taps()
    tb = _fake_tensorboard([])
    t.attach(tb)
    with pytest.raises(ValueError, match="not a number") as info:
        tb.SummaryWriter().add_scalar("loss", "bad", 1)
    assert info.value.args == ("not a number",)
    assert t.agent.series() == []
    assert tb.SummaryWriter().add_scalar("loss", 1.0, 2) is SENTINEL  # and the tap still works
    assert [e["step"] for e in t.agent.series()] == [2]


def test_an_internal_error_in_each_tap_warns_once_and_the_calls_still_work(
    taps, monkeypatch, capsys
):
    events = []
    t, (wandb, tb, mlflow) = _all_attached(taps, events, monkeypatch)

    def boom(*a, **k):
        raise RuntimeError("forced")

    real = TrackerTaps._number
    monkeypatch.setattr(TrackerTaps, "_number", boom)
    for _ in range(3):
        assert all(r is SENTINEL for r in _calls(wandb, tb, mlflow))
    assert sum(1 for e in events if isinstance(e, tuple)) == 12  # every call reached its tracker
    assert t.agent.series() == []
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"[trainmeter] {tap} tap stopped after an internal error: RuntimeError: forced "
        "(training continues; trainmeter stays quiet)"
        for tap in ("wandb", "tensorboard", "mlflow")
    ]
    monkeypatch.setattr(TrackerTaps, "_number", real)  # the taps stay off once failed
    assert all(r is SENTINEL for r in _calls(wandb, tb, mlflow))
    assert t.agent.series() == []


class _CudaTensor:
    """Looks like a CUDA tensor to the tap; reading it would fail the test."""

    __module__ = "torch"
    device = types.SimpleNamespace(type="cuda")

    def item(self):
        raise AssertionError("read an accelerator tensor (the no-device-sync invariant)")

    def dim(self):
        raise AssertionError("looked further than the device")


def test_only_host_numbers_are_read_and_accelerator_tensors_never(taps):
    t = taps()
    wandb = _fake_wandb([])
    t.attach(wandb)
    data = {
        "int": 3, "float": 0.25, "np_float": np.float32(0.5), "np_int": np.int64(9),
        "np_0d": np.array(1.25), "cuda": _CudaTensor(), "bool": True, "np_bool": np.bool_(True),
        "text": "x", "list": [1.0], "np_1d": np.ones(2), "big": 10**400, "none": None,
        "complex": 1j, "nan": math.nan, "inf": -math.inf,
    }  # fmt: skip
    for step in (1, 2):
        wandb.Run().log(data, step=step)
    got = {(e["name"], e["value"]) for e in t.agent.series()}
    assert got == {("int", 3.0), ("float", 0.25), ("np_float", 0.5), ("np_int", 9.0),
                   ("np_0d", 1.25)}  # fmt: skip
    notes = [e["text"] for e in t.agent.events if e["k"] == "note"]
    assert len(notes) == 3  # once each: the CUDA tensor, nan, -inf
    assert "cuda tensor" in notes[0] and "nan is nan at step 1" in notes[1]


def test_the_trackers_own_step_when_integral_else_the_agents(taps):
    t = taps()
    tb = _fake_tensorboard([])
    t.attach(tb)
    w = tb.SummaryWriter()
    for step in (5, np.int32(6), 8.0, np.float64(3.0), None, 2.5, "9", True, np.float32(4.0)):
        w.add_scalar("loss", 1.0, step)
    w.add_scalar(tag="loss", scalar_value=1.0, global_step=11)
    assert [e["step"] for e in t.agent.series()] == [5, 6, 8, 3, 7, 7, 7, 7, 4, 11]


def test_a_nested_tapped_call_is_recorded_once(taps):
    t = taps()
    tb = _fake_tensorboard([])
    t.attach(tb)
    assert tb.SummaryWriter().add_scalars("loss", {"train": 1.0, "val": 2.0}, 3) is SENTINEL
    got = [(e["name"], e["step"], e.get("role")) for e in t.agent.series()]
    assert got == [("loss/train", 3, "train_loss"), ("loss/val", 3, "val_loss")]


def test_wrapped_once_signature_kept_and_detach_puts_the_originals_back(taps, monkeypatch):
    events = []
    wandb, tb = _fake_wandb(events), _fake_tensorboard(events)
    mlflow, fluent = _fake_mlflow(events, monkeypatch)
    original_log, original_add = wandb.Run.__dict__["log"], tb.SummaryWriter.add_scalar
    original_metric = mlflow.log_metric
    t = taps()
    for _ in range(2):  # attaching again wraps nothing twice
        for mod in (wandb, tb, mlflow):
            t.attach(mod)
    second = taps()
    second.attach(tb)  # another TrackerTaps (a reinstalled agent) sees ours too
    assert tb.SummaryWriter.add_scalar.__wrapped__ is original_add
    assert mlflow.log_metric is fluent.log_metric
    assert mlflow.log_metric.__wrapped__ is original_metric
    assert wandb.Run.log.__name__ == "log" and wandb.Run.log.__doc__ == "Upload run data."
    assert inspect.signature(wandb.Run.log) == inspect.signature(original_log)
    wandb.Run().log({"loss": 1.0})
    assert len(t.agent.series()) == 1 and second.agent.series() == []
    t.detach()
    assert wandb.Run.__dict__["log"] is original_log
    assert tb.SummaryWriter.add_scalar is original_add
    assert mlflow.log_metric is original_metric and fluent.log_metric is original_metric


def test_detach_removes_a_wrapper_of_an_inherited_method_and_leaves_a_later_wrapper(taps):
    t = taps()
    tb = _fake_tensorboard([])

    class Writer(tb.SummaryWriter):
        pass

    sub = types.ModuleType("tensorboardX")
    sub.SummaryWriter = Writer
    t.attach(sub)
    assert "add_scalar" in Writer.__dict__  # wrapped on the class the user calls through
    ours = Writer.add_scalars
    Writer.add_scalars = lambda self, *a, **k: ours(self, *a, **k)  # someone wraps after us
    t.detach()
    assert "add_scalar" not in Writer.__dict__  # the inherited method shows through again
    assert Writer.add_scalars is not ours  # theirs stays; ours under it only passes through
    assert Writer().add_scalars("loss", {"train": 1.0}) is SENTINEL
    assert t.agent.series() == []


def test_a_wandb_run_begun_before_the_tap_attached_is_tapped_too(taps):
    """``wandb.init`` sets ``wandb.log = run.log``; a notebook may load trainmeter after it."""
    wandb = _fake_wandb([])
    run = wandb.Run()
    wandb.log = run.log  # what wandb.init does
    before = wandb.log
    t = taps()
    t.attach(wandb)
    assert wandb.log({"train_loss": 2.0}, step=4) is SENTINEL
    assert [(e["name"], e["step"]) for e in t.agent.series()] == [("train_loss", 4)]
    t.detach()
    assert wandb.log == before and wandb.log.__func__ is wandb.Run.__dict__["log"]


def test_a_disarmed_agent_records_nothing_and_names_past_the_cap_are_noted_once(taps, monkeypatch):
    t = taps()
    wandb = _fake_wandb([])
    t.attach(wandb)
    t.agent.armed = False  # between notebook cells
    assert wandb.Run().log({"loss": 1.0}) is SENTINEL
    assert t.agent.events == []
    t.agent.armed = True
    monkeypatch.setattr(trackers, "MAX_NAMES", 2)
    for _ in range(2):
        wandb.Run().log({"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0})
    assert [e["name"] for e in t.agent.series()] == ["a", "b", "a", "b"]
    notes = [e["text"] for e in t.agent.events if e["k"] == "note"]
    assert len(notes) == 1 and "first left out: c" in notes[0]


def test_tensorboardX_summary_writer_is_tapped(taps, tmp_path):
    import tensorboardX
    import torch

    t = taps()
    t.attach(tensorboardX)
    writer = tensorboardX.SummaryWriter(logdir=str(tmp_path))
    try:
        assert writer.add_scalar("train/loss", torch.tensor(0.75), 12) is None
        assert writer.add_scalars("loss", {"val": np.float32(0.5)}, global_step=13) is None
        writer.add_scalar("one", torch.ones(1), 14)  # TensorBoard takes it; not 0-d: skipped
    finally:
        writer.close()
    got = [(e["name"], e["value"], e["step"], e["source"], e.get("role")) for e in t.agent.series()]
    assert got == [("train/loss", 0.75, 12, "tensorboardX", "train_loss"),
                   ("loss/val", 0.5, 13, "tensorboardX", "val_loss")]  # fmt: skip
