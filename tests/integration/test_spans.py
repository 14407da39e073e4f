"""Time spans inside a real training process and what the engine makes of them: data-loader
waits, checkpoints, evaluation phases and warm-up (in-process, then under ``tm`` against
injected costs), stragglers of a 4-rank ``torchrun`` job, and the never-raise and same-numerics
invariants for every span tap (docs/spec.md "Time spans", "Stragglers")."""

import io
import json
import os
import sys
import threading
import time

import pytest
from conftest import FIXTURES, StandInAgent, losses, run_plain, run_tm

torch = pytest.importorskip("torch")

from trainmeter.agent.spans import KINDS  # noqa: E402
from trainmeter.agent.torch_taps import TorchTaps  # noqa: E402

pytestmark = pytest.mark.slow
SCRIPT = FIXTURES / "spans_train.py"
DataLoaderIter = torch.utils.data.dataloader._BaseDataLoaderIter


_Agent = StandInAgent


@pytest.fixture
def taps(fresh_guard):
    t = TorchTaps(_Agent(), torch)
    t.attach()
    yield t
    t.detach()


class _Sleepy(torch.utils.data.Dataset):
    def __init__(self, n, sleep=0.0):
        self.n, self.sleep = n, sleep

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.sleep)
        return torch.tensor([i % 7, (i + 1) % 7, (i + 2) % 7])


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Embedding(7, 4), torch.nn.Dropout(0.1),
                               torch.nn.Linear(4, 7))  # fmt: skip


def _train(steps=6, ckpt=True, evaluate=True):
    """A loop with every span kind; returns its losses."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    out = []
    for i, x in enumerate(torch.utils.data.DataLoader(_Sleepy(2 * steps), batch_size=2)):
        loss = model(x).logsumexp(-1).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        out.append(loss.item())
        if ckpt and i == 2:
            torch.save(model.state_dict(), io.BytesIO())
        if evaluate and i == 3:
            model.eval()
            with torch.no_grad():
                for y in torch.utils.data.DataLoader(_Sleepy(4), batch_size=2):
                    model(y)
            model.train()
    return out


# -- in-process -----------------------------------------------------------------------------------


def test_every_kind_is_timed_and_nested_spans_count_once(taps):
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with torch.no_grad():
        model(torch.zeros(1, 3, dtype=torch.long))  # a no-grad forward does not start warm-up
    loader = torch.utils.data.DataLoader(_Sleepy(6, 0.01), batch_size=2)
    for i, x in enumerate(loader):
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()
        if i == 0:
            torch.save(model.state_dict(), io.BytesIO())
            t0, wall0 = time.perf_counter(), time.time()
            model.eval()
            with torch.no_grad():
                for y in torch.utils.data.DataLoader(_Sleepy(4, 0.02), batch_size=2):
                    model(y)
            time.sleep(0.03)
            model.train()
            phase = time.perf_counter() - t0
    agent = taps.agent
    kinds = [k for k, _, _ in agent.spans()]
    assert kinds.count("warmup") == 1 and kinds.count("checkpoint") == 1
    assert kinds.count("eval") == 1
    # 3 training batches and their end, 2 eval batches and their end
    assert kinds.count("data") == 3 + 1 + 2 + 1
    (_, _, ev), = agent.spans("eval")  # fmt: skip
    eval_data = sum(d for _, t, d in agent.spans("data") if wall0 <= t <= wall0 + phase)
    # the eval phase is its time less the data waits inside it: every second counted once
    assert ev + eval_data == pytest.approx(phase, abs=0.02)
    assert ev >= 0.03 and eval_data >= 0.08
    # a span's start is wall-clock time, comparable with the step records
    assert all(abs(t - time.time()) < 60 for _, t, _ in agent.spans())


def test_a_training_step_in_eval_mode_is_not_an_eval_phase(taps):
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.zeros(1, 3, dtype=torch.long)).sum().backward()
    opt.step()  # the root is known now
    model[1].eval()  # a submodule (freezing dropout or batch norm): not an eval phase
    model.eval()  # the root, but the loop trains on in eval mode
    for _ in range(2):
        model(torch.zeros(1, 3, dtype=torch.long)).sum().backward()
        opt.step()
    model.train()
    assert taps.agent.spans("eval") == []
    assert "train" not in vars(torch.nn.Sequential)  # the phase's train() wrapper is gone


def test_only_the_training_thread_is_timed(taps):
    loader = torch.utils.data.DataLoader(_Sleepy(4), batch_size=2)
    thread = threading.Thread(target=lambda: list(loader))  # a prefetching thread
    thread.start()
    thread.join()
    assert taps.agent.spans("data") == []
    list(loader)
    assert len(taps.agent.spans("data")) == 3


def test_pause_and_detach_restore_every_wrapped_function(taps):
    import torch.nn.modules.module as mm

    wrapped = (DataLoaderIter.__dict__["__next__"], torch.nn.Module.__dict__["train"])
    own = tuple(w.__wrapped__ for w in wrapped)  # functools.wraps: signature and docs kept
    save = torch.save.__wrapped__
    assert torch.serialization.save is torch.save  # one wrapper for the one function
    taps.pause()  # between notebook cells
    assert (DataLoaderIter.__dict__["__next__"], torch.nn.Module.__dict__["train"]) == own
    assert torch.save is save and not mm._global_forward_pre_hooks
    list(torch.utils.data.DataLoader(_Sleepy(2), batch_size=2))
    assert taps.agent.spans() == []
    taps.new_segment()
    assert DataLoaderIter.__next__ is not own[0]
    taps.detach()
    assert DataLoaderIter.__dict__["__next__"] is own[0] and torch.save is save


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_distributed_checkpoint_and_safetensors_are_wrapped_when_imported(taps, tmp_path,
                                                                          monkeypatch):  # fmt: skip
    # safetensors as if never imported (an earlier test may have loaded transformers, and with
    # it the real package), and the span taps started again without it
    for name in ("safetensors", "safetensors.torch"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    taps.pause()
    taps.new_segment()
    import torch.distributed.checkpoint as dcp  # imported after the taps attached

    real = dcp.save.__wrapped__
    dcp.save({"w": torch.zeros(4)}, checkpoint_id=str(tmp_path / "dcp"))
    assert len(taps.agent.spans("checkpoint")) == 1
    # safetensors is not a dependency: a stand-in module of the same name takes the same path
    pkg = tmp_path / "pkgs" / "safetensors"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "torch.py").write_text("def save_file(tensors, filename, metadata=None):\n"
                                  "    return 'saved'\n")  # fmt: skip
    for name in ("safetensors", "safetensors.torch"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.syspath_prepend(str(pkg.parent))
    from safetensors.torch import save_file

    assert save_file({}, "x") == "saved"
    assert len(taps.agent.spans("checkpoint")) == 2  # dcp.save's inner torch.save: one span
    taps.detach()
    assert not hasattr(sys.modules["safetensors.torch"].save_file, "__wrapped__")
    assert dcp.save is real


@pytest.mark.parametrize("kind", KINDS)
def test_a_failing_span_tap_warns_once_and_leaves_training_unchanged(fresh_guard, capsys, kind):
    plain = _train()
    agent = _Agent()
    taps = TorchTaps(agent, torch)
    real = taps.spans._push

    def push(item):
        if item[0] == kind:
            raise RuntimeError(f"forced failure in the {kind} span tap")
        real(item)

    taps.spans._push = push  # as the agent's queue refusing this kind: inside its guard
    taps.attach()
    try:
        watched = _train()
        watched_again = _train()  # the tap stays off: no second warning
    finally:
        taps.detach()
    assert watched == plain == watched_again  # the same-numerics invariant
    warnings = [ln for ln in capsys.readouterr().err.splitlines() if "[trainmeter]" in ln]
    assert len(warnings) == 1 and "internal error" in warnings[0], warnings
    assert agent.spans(kind) == []
    assert {k for k, _, _ in agent.spans()} == set(KINDS) - {kind}  # the other taps go on
    spans_notes = [n for n in agent.notes() if n["text"].startswith("time split")]
    assert len(spans_notes) == 1 and kind in spans_notes[0]["text"]


# -- under tm, against injected costs -------------------------------------------------------------


def _replay(workdir):
    out = run_tm(["replay", "--json"], workdir)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _printed(stdout, key):
    for line in stdout.splitlines():
        words = line.split()
        if key in words:
            return float(words[words.index(key) + 1])
    raise AssertionError(f"{key} not printed")


ARGS = [
    SCRIPT,
    "--steps",
    "30",
    "--batch",
    "4",
    "--data-sleep",
    "0.006",
    "--step-sleep",
    "0.02",
    "--ckpt-every",
    "6",
    "--ckpt-mb",
    "16",
    "--eval-every",
    "10",
    "--eval-sleep",
    "0.04",
]


@pytest.fixture(scope="module")
def plain_losses(tmp_path_factory):
    """The script's losses without trainmeter (run once for the tests below)."""
    out = run_plain(ARGS, tmp_path_factory.mktemp("plain"))
    assert out.returncode == 0, out.stderr
    assert len(losses(out.stdout)) == 30
    return losses(out.stdout)


def test_slow_loader_checkpoints_and_eval_shares_match_what_was_injected(workdir, plain_losses):
    watched = run_tm(["-q", *ARGS], workdir)
    assert watched.returncode == 0, watched.stderr
    assert losses(watched.stdout) == plain_losses  # the same-numerics invariant, to the last digit
    snap = _replay(workdir)
    split, elapsed = snap["time_split"], snap["elapsed_s"]
    # the buckets, start-up its own, add up to the elapsed time
    total = sum(split[k] for k in ("compute", "data", "checkpoint", "eval", "startup", "other"))
    assert total == pytest.approx(elapsed, rel=1e-6) and split["startup"] > 0
    injected = _printed(watched.stdout, "data_s")
    loop = _printed(watched.stdout, "loop_s")
    ckpt, ev = _printed(watched.stdout, "checkpoint_s"), _printed(watched.stdout, "eval_s")
    print(f"split {split} elapsed {elapsed:.3f} | injected data {injected:.3f} loop {loop:.3f} "
          f"checkpoint {ckpt:.3f} eval {ev:.3f}")  # fmt: skip
    # the dashboard's data-wait share (of the run) and of the training loop, within 10 points
    assert abs(split["data"] / total - injected / elapsed) < 0.10, (split, injected, elapsed)
    assert abs(split["data"] / loop - injected / loop) < 0.10, (split, injected, loop)
    # checkpoints and eval phases as the script timed them (the eval phase holds no data wait)
    assert split["checkpoint"] > 0 and split["checkpoint"] == pytest.approx(ckpt, rel=0.1, abs=0.02)
    assert split["eval"] == pytest.approx(ev, rel=0.1, abs=0.02)
    # compute is the loop less its waits: the steps' 20 ms sleeps at least
    assert split["compute"] >= 30 * 0.02 * 0.9 and split["warmup"] > 0
    assert split["compute"] + split["data"] + ckpt + ev <= loop * 1.1 + 0.05


def test_a_failing_span_tap_under_tm_warns_once_and_trains_unchanged(workdir, plain_losses):
    watched = run_tm(["-q", *ARGS, "--fault", "data"], workdir)
    assert watched.returncode == 0, watched.stderr
    assert losses(watched.stdout) == plain_losses
    warnings = [ln for ln in watched.stderr.splitlines() if "internal error" in ln]
    assert len(warnings) == 1 and "data-loader span" in warnings[0], watched.stderr
    snap = _replay(workdir)
    assert snap["time_split"]["data"] == 0  # the first wait failed: none was counted
    assert snap["time_split"]["checkpoint"] > 0  # the other span taps go on
    assert any("data spans are no longer measured" in n for n in snap["notes"])


def test_a_rank_that_sleeps_30_percent_longer_is_the_one_straggler(workdir):
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    args = ["--nproc_per_node=4", SCRIPT, "--steps", "30", "--step-sleep", "0.05",
            "--slow-rank", "2", "--slow-factor", "1.3"]  # fmt: skip
    out = run_tm(["-q", "--", torchrun, *args], workdir)
    assert out.returncode == 0, out.stderr
    snap = _replay(workdir)
    assert snap["ranks"] == {"0": 30, "1": 30, "2": 30, "3": 30}
    assert snap["stragglers"] == [2], snap["rank_step_time_s"]
