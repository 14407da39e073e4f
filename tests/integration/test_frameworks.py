"""Framework taps: what the Hugging Face Trainer and Lightning log reaches the run log, with no
tracker configured.

End to end (the real packages, tiny randomly initialised models, CPU, under ``tm``): the
Trainer's logged values with its ``global_step`` and its tokens per optimizer step; Lightning's
``self.log`` values at the step Lightning gives its loggers, with and without a logger; each
pinned against what the framework itself reports (``trainer.state.log_history``,
``trainer.global_step`` inside ``training_step``, Lightning's own TensorBoard file). None under
``--no-tap``; the same losses without ``tm`` (the same-numerics invariant); a framework routing its
values to a TensorBoard writer that trainmeter taps records each value once. The eight runs (about a
minute of CPU; the transformers import dominates) go two at a time.

In process (a stand-in Trainer, the real Lightning logger connector with a stand-in trainer):
the wrapper's contract, the never-raise invariant, the no-device-sync invariant (an accelerator
tensor is read only by Lightning itself, never by trainmeter), steps, wrap-once and unwrap.
"""

import glob
import importlib.util
import inspect
import json
import types
from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURES, read_log, run_jobs, run_plain, run_tm

from trainmeter.agent.frameworks import FrameworkTaps

pytestmark = pytest.mark.slow

PACKAGES = ("transformers", "lightning", "tensorboard", "torch")


def test_the_framework_packages_are_installed():
    """The end-to-end tests need the real packages (``pip install -e ".[test]"``): missing
    ones fail here by name, and the runs below fail too, rather than being skipped."""
    missing = [name for name in PACKAGES if importlib.util.find_spec(name) is None]
    assert not missing, f"install the test extra: pip install -e '.[test]' (missing {missing})"


# -- end to end ---------------------------------------------------------------------------------
STEPS, BATCH, SEQ, ACCUM = 8, 4, 16, 2  # the HF run: tokens per optimizer step B x L x A = 128
HF = ("hf_trainer_train.py", "--steps", STEPS, "--batch", BATCH, "--seq", SEQ, "--accum", ACCUM)
LIT = ("lightning_train.py",)  # 10 steps of batch 4 x 8 tokens, validation every 5 steps
TM = ("-q", "--no-web")
JOBS = {  # name -> (tm flags, or None for a plain run; script and its args); longest first
    "hf": (TM, HF),
    "hf-tensorboard": (TM, (*HF, "--report-to", "tensorboard", "--probe")),
    "hf-no-tap": ((*TM, "--no-tap"), HF),
    "hf-plain": (None, HF),
    "lightning": (TM, LIT),
    "lightning-tensorboard": (TM, (*LIT, "--logger", "default", "--probe")),
    "lightning-no-tap": ((*TM, "--no-tap"), LIT),
    "lightning-plain": (None, LIT),
}


def _job(name: str, root: Path) -> dict:
    flags, (script, *args) = JOBS[name]
    workdir = root / name
    workdir.mkdir()
    cmd = [FIXTURES / script, *args]
    out = run_plain(cmd, workdir) if flags is None else run_tm([*flags, *cmd], workdir)
    job = {"out": out, "dir": workdir}
    reported = workdir / ("trainer.json" if script.startswith("hf") else "lightning.json")
    if reported.exists():  # what the framework itself reported, written by the script
        job["reported"] = json.loads(reported.read_text())
    if flags is not None:
        job["log"] = read_log(workdir)
        replayed = run_tm(["replay", "--json"], workdir)
        job["snap"] = json.loads(replayed.stdout) if replayed.returncode == 0 else None
    return job


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("frameworks")
    return run_jobs(_job, JOBS, root)


def _series(job, source=None) -> list[tuple]:
    """(name, step, value, role) of each series record, in log order."""
    return [(r["name"], r["step"], r["value"], r.get("role")) for r in job["log"]
            if r["k"] == "series" and (source is None or r.get("source") == source)]  # fmt: skip


def _history_points(history: list[dict]) -> list[tuple]:
    """(name, step) -> value of every value the Trainer logged, from its own log_history."""
    return [(k, e["step"], v) for e in history for k, v in e.items() if k != "step"]


def test_the_hf_trainers_logged_values_reach_the_run_log_with_its_steps(runs):
    """Every value the Trainer logged, at its ``global_step``, exactly as in its own
    ``trainer.state.log_history`` (the script wrote it to JSON)."""
    job = runs["hf"]
    history = job["reported"]["log_history"]
    assert job["reported"]["global_step"] == STEPS
    got = _series(job)
    assert [(n, s, v) for n, s, v, _ in got] == _history_points(history)
    assert {r.get("source") for r in job["log"] if r["k"] == "series"} == {"transformers"}
    roles = {n: role for n, _, _, role in got}
    assert roles["loss"] == roles["train_loss"] == "train_loss" and roles["eval_loss"] == "val_loss"
    assert roles["grad_norm"] is None and roles["learning_rate"] is None
    loss = [(s, v) for n, s, v, _ in got if n == "loss"]
    assert [s for s, _ in loss] == list(range(1, STEPS + 1))  # logging_steps=1
    assert [(s, v) for n, s, v, _ in got if n == "eval_loss"] == [
        (e["step"], e["eval_loss"]) for e in history if "eval_loss" in e
    ]
    assert [s for n, s, _, _ in got if n == "eval_loss"] == [4, 8]  # eval_steps=4
    last = job["snap"]["series"]["loss"]
    assert (last["step"], last["value"], last["role"]) == (STEPS, loss[-1][1], "train_loss")
    assert job["snap"]["series"]["eval_loss"]["role"] == "val_loss"
    assert job["snap"]["step"] == STEPS  # the step clock (torch taps) agrees with the Trainer


def test_the_hf_trainers_tokens_per_step_equal_a_hand_count(runs):
    """Each optimizer step fed ACCUM micro-batches of BATCH samples of SEQ tokens (no padding):
    4 x 16 x 2 = 128 tokens; the evaluation forwards (under no_grad) are not training tokens."""
    job = runs["hf"]
    steps = [r for r in job["log"] if r["k"] == "step"]
    assert [r["tokens"] for r in steps] == [BATCH * SEQ * ACCUM] * STEPS == [128] * 8
    assert [r["samples"] for r in steps] == [BATCH * ACCUM] * STEPS
    snap = job["snap"]
    assert snap["tokens"] == STEPS * BATCH * SEQ * ACCUM == 1024
    assert snap["samples"] == STEPS * BATCH * ACCUM
    assert snap["model"]["name"] == "GPT2LMHeadModel" and snap["model"]["seq_len"] == SEQ


@pytest.mark.parametrize("name", ["lightning", "lightning-tensorboard"])
def test_lightnings_logged_values_reach_the_run_log_at_its_own_steps(runs, name):
    """``self.log("train_loss", loss)`` each step, with no logger (``logger=False``) and with
    Lightning's default (TensorBoard): the value at ``trainer.global_step`` as seen inside
    ``training_step`` (what the script printed), the step Lightning gives its loggers."""
    job = runs[name]
    reported = job["reported"]
    got = _series(job, "lightning")
    train = [(s, v) for n, s, v, _ in got if n == "train_loss"]
    assert train == [tuple(pair) for pair in reported["train"]]
    assert [s for s, _ in train] == list(range(10))
    assert reported["global_step"] == job["snap"]["step"] == 10
    assert {role for n, _, _, role in got if n == "train_loss"} == {"train_loss"}
    # val_loss: the mean of each validation run's two equal batches (computed here by hand)
    runs_at = sorted({s for s, _ in reported["val"]})
    means = [np.mean([v for s, v in reported["val"] if s == at]) for at in runs_at]
    val = [(s, v, role) for n, s, v, role in got if n == "val_loss"]
    assert [v for _, v, _ in val] == pytest.approx(means, rel=1e-6)  # float32 sum in Lightning
    assert {role for _, _, role in val} == {"val_loss"}
    assert {n for n, *_ in got} == {"train_loss", "val_loss"}  # not the "epoch" Lightning adds
    assert job["snap"]["series"]["train_loss"]["step"] == 9


def _tensorboard_scalars(pattern: str) -> list[tuple]:
    """(tag, step, value) of every scalar in the event files matching ``pattern``, in order."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    files = sorted(glob.glob(pattern, recursive=True))
    assert files, pattern
    return [(v.tag, e.step, v.tensor.float_val[0]) for path in files
            for e in EventFileLoader(path).Load() for v in e.summary.value
            if v.tensor.float_val]  # fmt: skip


def test_lightnings_series_are_what_its_own_tensorboard_logger_wrote(runs):
    """The independent pin for names, steps and values: Lightning's TensorBoard file (float32)
    in the run with a logger, against the series of both Lightning runs."""
    job = runs["lightning-tensorboard"]
    written = _tensorboard_scalars(str(job["dir"] / "lightning_logs" / "*" / "events.out.*"))
    expected = [(n, s, v) for n, s, v in written if n not in ("epoch", "probe")]
    assert len(expected) == 12 and [s for n, s, _ in expected if n == "val_loss"] == [4, 9]
    for name in ("lightning", "lightning-tensorboard"):
        got = [(n, s, np.float32(v)) for n, s, v, _ in _series(runs[name], "lightning")]
        assert got == [(n, s, np.float32(v)) for n, s, v in expected], name


def test_a_framework_sending_to_a_tapped_tracker_records_each_value_once(runs):
    """HF ``report_to="tensorboard"`` and Lightning's TensorBoard logger: the tracker calls made
    inside the framework's logging are the framework's (names and source), recorded once; the
    TensorBoard tap was live (the script's own ``probe`` scalar is recorded, source tensorboard)
    and TensorBoard still got every value."""
    for name, source in (
        ("hf-tensorboard", "transformers"),
        ("lightning-tensorboard", "lightning"),
    ):
        job = runs[name]
        by_source = {}
        for r in job["log"]:
            if r["k"] == "series":
                by_source.setdefault(r.get("source"), []).append((r["name"], r["step"], r["value"]))
        assert set(by_source) == {source, "tensorboard"}, name
        assert by_source["tensorboard"] == [("probe", 0, 1.0)], name
    hf = runs["hf-tensorboard"]
    assert [(n, s, v) for n, s, v, _ in _series(hf, "transformers")] == _history_points(
        hf["reported"]["log_history"]
    )
    written = _tensorboard_scalars(str(hf["dir"] / "hf_out" / "runs" / "**" / "events.out.*"))
    train = [(s, v) for n, s, v in written if n == "train/loss"]  # HF's callback's name for it
    history = hf["reported"]["log_history"]
    assert train == [(e["step"], np.float32(e["loss"])) for e in history if "loss" in e]


def test_no_tap_shows_no_framework_series(runs):
    for name in ("hf-no-tap", "lightning-no-tap"):
        job = runs[name]
        assert _series(job) == [], name
        assert job["snap"]["series"] == {}, name
        assert not any(r["k"] == "step" for r in job["log"]), name  # torch taps are off as well


def test_the_losses_are_identical_with_and_without_tm(runs):
    """The same-numerics invariant, on the frameworks' own logged values (exact floats through
    JSON)."""

    def hf_losses(job):
        return [(e["step"], e.get("loss"), e.get("eval_loss"), e.get("train_loss"))
                for e in job["reported"]["log_history"]]  # fmt: skip

    plain = hf_losses(runs["hf-plain"])
    assert len(plain) == STEPS + 3  # 8 steps, 2 evaluations, the run's summary
    for name in ("hf", "hf-no-tap", "hf-tensorboard"):
        assert hf_losses(runs[name]) == plain, name
    plain = runs["lightning-plain"]["reported"]
    assert len(plain["train"]) == 10 and len(plain["val"]) == 4
    for name in ("lightning", "lightning-no-tap", "lightning-tensorboard"):
        reported = runs[name]["reported"]
        assert (reported["train"], reported["val"]) == (plain["train"], plain["val"]), name


# -- in process ---------------------------------------------------------------------------------
SENTINEL = object()


class Agent:
    """Stands in for runtime.Agent: what the taps use of it."""

    def __init__(self):
        self.step, self.armed, self.events, self.tracker_taps = 7, True, [], None

    def put(self, kind, **fields):
        self.events.append({"k": kind, **fields})

    def series(self):
        return [(e["name"], e["value"], e["step"], e["source"], e.get("role"))
                for e in self.events if e["k"] == "series"]  # fmt: skip


@pytest.fixture(autouse=True)
def _fresh_guard(fresh_guard):
    pass


@pytest.fixture
def taps():
    made = []

    def make(agent=None):
        t = FrameworkTaps(agent or Agent())
        made.append(t)
        return t

    yield make
    for t in made:
        t.detach()
        t.agent.tracker_taps.detach()


def _fake_tensorboard():
    """A tracker module with a writer that keeps what it was given."""
    mod = types.ModuleType("torch.utils.tensorboard")

    class SummaryWriter:
        def __init__(self):
            self.got = []

        def add_scalar(self, tag, scalar_value, global_step=None):
            self.got.append((tag, scalar_value, global_step))

    mod.SummaryWriter = SummaryWriter
    return mod


def _fake_trainer_module():
    """transformers.trainer's ``Trainer.log`` as far as the tap cares: history, then callbacks
    (a TensorBoard callback, and a progress callback popping total_flos, as HF's do)."""
    mod = types.ModuleType("transformers.trainer")

    class Trainer:
        def __init__(self, writer, zero=True):
            self.state = types.SimpleNamespace(global_step=3, log_history=[],
                                               is_world_process_zero=zero)  # fmt: skip
            self.writer = writer

        def log(self, logs, start_time=None):
            """Log ``logs`` on the various objects watching training."""
            logs["epoch"] = 0.5
            self.state.log_history.append({**logs, "step": self.state.global_step})
            for k, v in logs.items():
                self.writer.add_scalar(f"train/{k}", v, self.state.global_step)
            logs.pop("total_flos", None)
            return SENTINEL

    mod.Trainer = Trainer
    return mod


def test_the_trainer_tap_records_the_history_entry_once_and_returns_the_result(taps):
    t = taps()
    tb, hf = _fake_tensorboard(), _fake_trainer_module()
    t.agent.tracker_taps.attach(tb)  # the user's code imported TensorBoard too
    t.attach(hf)
    writer = tb.SummaryWriter()
    trainer = hf.Trainer(writer)
    assert trainer.log({"loss": 2.5, "total_flos": 1e9, "text": "x"}) is SENTINEL
    assert t.agent.series() == [
        ("loss", 2.5, 3, "transformers", "train_loss"),
        ("total_flos", 1e9, 3, "transformers", None),  # popped by a callback, kept in history
        ("epoch", 0.5, 3, "transformers", None),
    ]
    assert [tag for tag, _, _ in writer.got] == ["train/loss", "train/total_flos", "train/text",
                                                 "train/epoch"]  # fmt: skip
    writer.add_scalar("direct", 1.0, 4)  # outside a Trainer call the tracker tap records it
    assert t.agent.series()[-1] == ("direct", 1.0, 4, "tensorboard", None)
    hf.Trainer(writer, zero=False).log({"loss": 1.0})  # another process: its rank 0 records
    assert len(t.agent.series()) == 4


def _lightning():
    from lightning.pytorch.trainer.connectors.logger_connector import logger_connector

    return logger_connector


class _Logger:
    """A Lightning logger that writes through a (tapped) TensorBoard writer."""

    def __init__(self, writer):
        self.writer, self.got = writer, []

    def log_metrics(self, metrics, step):
        self.got.append((dict(metrics), step))
        for k, v in metrics.items():
            self.writer.add_scalar(k, v, step)

    def save(self):
        pass


def _device_scalar(value):
    """A real 0-d tensor that says it lives on a GPU and counts who reads it."""
    import torch

    class DeviceScalar(torch.Tensor):
        __module__ = "torch"
        reads = 0

        @property
        def device(self):
            return types.SimpleNamespace(type="cuda")

        def item(self):
            DeviceScalar.reads += 1
            return super().item()

    return torch.tensor(value).as_subclass(DeviceScalar)


def _connector(loggers):
    trainer = types.SimpleNamespace(
        loggers=loggers, current_epoch=0, is_global_zero=True,
        fit_loop=types.SimpleNamespace(epoch_loop=types.SimpleNamespace(_batches_that_stepped=6)),
    )  # fmt: skip
    return _lightning()._LoggerConnector(trainer)


def test_lightning_values_are_the_numbers_lightning_made_for_its_loggers(taps):
    """With a logger, Lightning reads each tensor once (its own ``.item()``); trainmeter records
    those numbers and reads nothing more; the logger's tracker calls are not recorded twice."""
    import torch

    t = taps()
    tb = _fake_tensorboard()
    t.agent.tracker_taps.attach(tb)
    t.attach(_lightning())
    logger = _Logger(tb.SummaryWriter())
    loss = _device_scalar(2.5)
    assert _connector([logger]).log_metrics({"train_loss_step": loss, "lr": 0.1}) is None
    assert type(loss).reads == 1  # Lightning's own read, and no other
    assert logger.got == [({"train_loss_step": 2.5, "lr": 0.1, "epoch": 0}, 6)]
    assert t.agent.series() == [("train_loss_step", 2.5, 6, "lightning", "train_loss"),
                                ("lr", 0.1, 6, "lightning", None)]  # fmt: skip
    _connector([logger]).log_metrics({"val_loss": torch.tensor(1.5), "step": torch.tensor(42.0)})
    assert logger.got[-1][1] == 42  # a logged "step" is the step, for Lightning and for us
    _connector([logger]).log_metrics({"val_loss": 1.25}, step=5)
    assert t.agent.series()[2:] == [("val_loss", 1.5, 42, "lightning", "val_loss"),
                                    ("val_loss", 1.25, 5, "lightning", "val_loss")]  # fmt: skip


def test_with_no_lightning_logger_an_accelerator_tensor_is_never_read(taps):
    import torch

    t = taps()
    t.attach(_lightning())
    loss = _device_scalar(2.5)
    for _ in range(2):
        _connector([]).log_metrics({"train_loss": loss, "lm_loss": torch.tensor(0.75), "n": 3})
    assert type(loss).reads == 0
    assert t.agent.series() == [("lm_loss", 0.75, 6, "lightning", "train_loss"),
                                ("n", 3.0, 6, "lightning", None)] * 2  # fmt: skip
    notes = [e["text"] for e in t.agent.events if e["k"] == "note"]
    assert len(notes) == 1 and "train_loss is a cuda tensor" in notes[0]
    assert "give the Trainer a logger" in notes[0]


def test_numbers_lightning_made_while_disarmed_are_never_used_later(taps):
    """A notebook between cells: Lightning converts, nothing is recorded; the next call (no
    logger) records its own values, not the earlier call's."""
    import torch

    t = taps()
    t.attach(_lightning())
    t.agent.armed = False
    _connector([_Logger(_fake_tensorboard().SummaryWriter())]).log_metrics({"loss": 9.0})
    t.agent.armed = True
    _connector([]).log_metrics({"loss": torch.tensor(1.0)})
    assert t.agent.series() == [("loss", 1.0, 6, "lightning", "train_loss")]


def test_an_internal_error_in_each_framework_tap_warns_once_and_the_calls_still_work(
    taps, monkeypatch, capsys
):
    t = taps()
    hf = _fake_trainer_module()
    t.attach(hf)
    t.attach(_lightning())
    writer = _fake_tensorboard().SummaryWriter()
    logger = _Logger(writer)

    def boom(*a, **k):
        raise RuntimeError("forced")

    monkeypatch.setattr(FrameworkTaps, "_put", boom)
    for _ in range(3):
        assert hf.Trainer(writer).log({"loss": 1.0}) is SENTINEL
        assert _connector([logger]).log_metrics({"loss": 2.0}) is None
    assert len(writer.got) == 3 * (2 + 2)  # each call: loss and the epoch each adds
    assert len(logger.got) == 3 and t.agent.series() == []
    assert capsys.readouterr().err.splitlines() == [
        f"[trainmeter] {tap} tap stopped after an internal error: RuntimeError: forced "
        "(training continues; trainmeter stays quiet)"
        for tap in ("transformers", "lightning")
    ]


def test_wrapped_once_signature_kept_and_detach_puts_the_originals_back(taps):
    lc, hf = _lightning(), _fake_trainer_module()
    original_log, original_convert = lc._LoggerConnector.log_metrics, lc.convert_tensors_to_scalars
    original_hf = hf.Trainer.log
    t = taps()
    for _ in range(2):
        t.attach(lc)
        t.attach(hf)
    second = taps()
    second.attach(lc)  # another agent's taps (a reinstalled agent) see ours: nothing wrapped
    assert lc._LoggerConnector.log_metrics.__wrapped__ is original_log
    assert lc.convert_tensors_to_scalars.__wrapped__ is original_convert
    assert hf.Trainer.log.__wrapped__ is original_hf
    assert inspect.signature(hf.Trainer.log) == inspect.signature(original_hf)
    assert hf.Trainer.log.__doc__ == "Log ``logs`` on the various objects watching training."
    t.detach()
    assert lc._LoggerConnector.log_metrics is original_log
    assert lc.convert_tensors_to_scalars is original_convert
    assert hf.Trainer.log is original_hf


@pytest.mark.parametrize(
    ("module", "method"),
    [("transformers.trainer", "train"), ("lightning.pytorch.trainer.trainer", "fit")],
)
def test_each_framework_training_tells_the_torch_taps_before_it_starts(taps, module, method):
    """A second HF train() or Lightning fit() keeps its first optimizer alive (in its objects):
    the torch taps hear of each start first, so the next optimizer to step clocks the steps
    (a second fit of 300 steps showed the first fit's 10)."""
    t = taps()
    mod = types.ModuleType(module)
    order = []

    class Trainer:
        def log(self, logs, start_time=None):
            return None

        def run(self, *args, **kwargs):
            order.append(("ran", args, kwargs))
            return SENTINEL

    setattr(Trainer, method, Trainer.run)
    mod.Trainer = Trainer
    t.agent.torch_taps = types.SimpleNamespace(new_training=lambda: order.append("told"))
    t.attach(mod)
    trainer = Trainer()
    assert getattr(trainer, method)(1, ckpt_path="x") is SENTINEL  # as it returns
    assert getattr(trainer, method)() is SENTINEL
    assert order == ["told", ("ran", (1,), {"ckpt_path": "x"}), "told", ("ran", (), {})]

    def broken():
        raise RuntimeError("a bug of ours")

    t.agent.torch_taps = types.SimpleNamespace(new_training=broken)
    assert getattr(trainer, method)() is SENTINEL  # the training starts all the same
