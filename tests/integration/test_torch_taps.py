"""The root-model token counter leaves the model as it was: signature, pickling, copies,
``forward``, and the class itself after detach (the counter is the class's ``__call__``; see
torch_taps' docstring). Counts are read as the sender thread reads them (conftest's
StandInSender)."""

import copy
import inspect
import io
import os

import pytest
from conftest import StandInAgent

torch = pytest.importorskip("torch")

import trainmeter  # noqa: E402
from trainmeter.agent.sender import MIN_INTERVAL, next_wait  # noqa: E402
from trainmeter.agent.step_clock import WATCH_STEPS as STEPS_WATCHED  # noqa: E402
from trainmeter.agent.torch_taps import DEFER_BYTES, MAX_QUEUED, TorchTaps  # noqa: E402

pytestmark = pytest.mark.slow


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(20, 8)
        self.out = torch.nn.Linear(8, 20)

    def forward(self, idx, labels=None):
        return self.out(self.emb(idx))


_Agent = StandInAgent


@pytest.fixture
def taps():
    t = TorchTaps(_Agent(), torch)  # an armed agent, as under tm
    t.attach()
    yield t
    t.detach()


def _train_step(model, opt, x):
    model(x).sum().backward()
    opt.step()
    opt.zero_grad()


def _counts(taps):
    """([(step, tokens, samples)], (tokens, samples) queued since the last step), as the
    sender thread counts them from the queue."""
    return taps.agent.sender.counts()


def test_the_root_is_found_and_its_tokens_counted_per_step(taps):
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    _train_step(model, opt, torch.zeros(3, 5, dtype=torch.long))  # counted by discovery
    model(torch.zeros(2, 7, dtype=torch.long)).sum().backward()
    model(idx=torch.zeros(1, 4, dtype=torch.long)).sum().backward()  # by keyword
    # two micro-batches, by hand; counted by the sender thread from the queued calls
    assert _counts(taps) == ([(1, 3 * 5, 3)], (2 * 7 + 1 * 4, 2 + 1))
    opt.step()
    assert _counts(taps) == ([(1, 15, 3), (2, 18, 3)], (0, 0))
    assert taps.agent.models[0]["params"] == 20 * 8 + 8 * 20 + 20


def test_copies_and_other_instances_of_the_class_are_not_counted(taps):
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    _train_step(model, opt, torch.zeros(3, 5, dtype=torch.long))
    ema = copy.deepcopy(model)
    ema(torch.zeros(9, 9, dtype=torch.long)).sum().backward()
    Net()(torch.zeros(9, 9, dtype=torch.long)).sum().backward()
    assert _counts(taps)[1] == (0, 0)
    model(torch.zeros(1, 2, dtype=torch.long)).sum().backward()  # the root still counts
    assert _counts(taps)[1] == (2, 1)


def test_signature_pickle_forward_and_outputs_are_unchanged(taps):
    model = Net()
    own_forward = Net.__dict__["forward"]
    before = inspect.signature(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    _train_step(model, opt, torch.zeros(3, 5, dtype=torch.long))
    assert "__call__" in Net.__dict__  # the counter is on the class, not the instance
    assert Net.__dict__["forward"] is own_forward  # what HF Trainer inspects, Accelerate wraps
    assert inspect.signature(model) == before and "__call__" not in vars(model)
    buf = io.BytesIO()
    torch.save(model, buf)  # a whole-module pickle holds no trainmeter object
    assert b"trainmeter" not in buf.getvalue()
    x = torch.arange(6).reshape(2, 3)
    assert torch.equal(model(x), own_forward(model, x))


def test_an_instance_forward_replaced_after_the_patch_is_still_counted(taps):
    """Accelerate's mixed precision sets ``model.forward`` on the instance; the count is in
    ``__call__``, so it still sees the calls (a ``forward`` wrapper on the class would not)."""
    import types

    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    _train_step(model, opt, torch.zeros(3, 5, dtype=torch.long))
    inner = model.forward
    model.forward = types.MethodType(lambda self, idx: inner(idx), model)
    _train_step(model, opt, torch.zeros(2, 5, dtype=torch.long))
    assert _counts(taps)[0][-1] == (2, 10, 2)


def test_a_class_with_its_own_call_is_wrapped_and_restored(taps):
    class OwnCall(Net):
        def __call__(self, *args, **kwargs):
            return super().__call__(*args, **kwargs) * 1

    own = OwnCall.__dict__["__call__"]
    model = OwnCall()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    _train_step(model, opt, torch.zeros(3, 5, dtype=torch.long))
    _train_step(model, opt, torch.zeros(1, 4, dtype=torch.long))
    assert _counts(taps)[0] == [(1, 15, 3), (2, 4, 1)]
    assert OwnCall.__dict__["__call__"] is not own
    taps.detach()
    assert OwnCall.__dict__["__call__"] is own


def test_detach_restores_the_class(taps):
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    _train_step(model, opt, torch.zeros(3, 5, dtype=torch.long))
    assert "__call__" in Net.__dict__
    taps.detach()
    assert "__call__" not in Net.__dict__ and Net.__call__ is torch.nn.Module.__call__
    seq = torch.nn.Sequential(torch.nn.Linear(2, 2))
    assert seq(torch.ones(1, 2)).shape == (1, 2)


def test_between_notebook_cells_nothing_is_hooked_held_or_counted(taps):
    import torch.nn.modules.module as mm

    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    _train_step(model, opt, torch.zeros(3, 5, dtype=torch.long))
    model(torch.zeros(4, 4, dtype=torch.long)).sum().backward()  # after the step: dropped
    taps.pause()  # the cell ended
    assert "__call__" not in Net.__dict__ and not mm._global_forward_pre_hooks
    queued = len(taps.agent.sender.queue)
    model(torch.zeros(2, 2, dtype=torch.long)).sum().backward()  # a plain cell trains
    assert len(taps.agent.sender.queue) == queued and taps._roots == {}
    assert _counts(taps)[1] == (0, 0)
    taps.new_segment()  # the next %%trainmeter cell: the known root is counted again
    model(torch.zeros(2, 3, dtype=torch.long)).sum().backward()
    assert _counts(taps)[1] == (6, 2)


def test_the_sender_is_told_how_many_queued_inputs_to_hold(taps):
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    _train_step(model, opt, torch.zeros(3, 5, dtype=torch.long))
    # discovery saw one 3 x 5 int64 call: 120 bytes, so DEFER_BYTES / 120 items per interval
    assert taps.agent.sender.max_items == min(MAX_QUEUED, DEFER_BYTES // 120)


@pytest.mark.parametrize(
    ("items", "wait"),
    [(0, 0.1), (40, 0.1), (80, 0.05), (400, 0.01), (10**6, MIN_INTERVAL)],
)
def test_the_sender_comes_back_sooner_when_more_than_max_items_arrive(items, wait):
    # by hand: 0.1 s x 40 / items, never under MIN_INTERVAL
    assert next_wait(0.1, items, 40) == pytest.approx(wait)


def test_a_stopped_sender_stops_the_count_and_the_clock(taps):
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    _train_step(model, opt, torch.zeros(3, 5, dtype=torch.long))
    taps.agent.sender.on_stop()  # what the sender calls when its socket fails
    queued = len(taps.agent.sender.queue)
    _train_step(model, opt, torch.zeros(3, 5, dtype=torch.long))
    assert len(taps.agent.sender.queue) == queued  # no tensor held, no step queued


# -- the step clock (step_clock.py) ---------------------------------------------------------------
def _post_hooks(taps):
    """How many of the clock's global post-step hooks torch holds now."""
    from torch.optim import optimizer

    hooks = optimizer._global_optimizer_post_hooks.values()
    ours = [getattr(h, "hook", None) for h in hooks]  # the door's Hook behind each callable
    return sum(getattr(getattr(h, "fn", None), "__self__", None) is taps.clock for h in ours)


def test_the_clock_moves_into_the_optimizers_own_method_and_leaves_no_hook(taps):
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    own = torch.optim.Optimizer._optimizer_step_code
    assert _post_hooks(taps) == 1  # the global hook waits for the first step
    for n in (3, 2, 1):
        _train_step(model, opt, torch.zeros(n, 4, dtype=torch.long))
    assert "_optimizer_step_code" in vars(opt)
    assert _post_hooks(taps) == 1  # it watches the first 8 steps for a second optimizer
    assert "_optimizer_step_code" not in torch.optim.SGD.__dict__  # the class is untouched
    assert _counts(taps)[0] == [(1, 12, 3), (2, 8, 2), (3, 4, 1)]
    assert taps.agent.step == 3
    for _ in range(STEPS_WATCHED - 3 + 1):  # the 8th step decides; the 9th removes it
        _train_step(model, opt, torch.zeros(1, 4, dtype=torch.long))
    assert _post_hooks(taps) == 0
    assert [s for s, _, _ in _counts(taps)[0]] == list(range(1, STEPS_WATCHED + 2))
    assert "_optimizer_step_code" not in vars(copy.deepcopy(opt))  # __getstate__: 3 keys
    taps.detach()
    assert "_optimizer_step_code" not in vars(opt)
    assert torch.optim.SGD._optimizer_step_code is own


def test_a_clocked_step_runs_no_python_code_of_trainmeters(taps):
    import sys

    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    # the clock is chosen at step 1, its method takes over at step 2, FLOPs are counted at 3,
    # and the global hook that watches for a second optimizer is gone after step 9
    for _ in range(STEPS_WATCHED + 2):
        _train_step(model, opt, torch.zeros(1, 2, dtype=torch.long))
    model(torch.zeros(1, 2, dtype=torch.long)).sum().backward()
    ours = []
    # our frames by the package's own folder, never by a name in the path: a checkout called
    # "trainmeter" holds its .venv (torch's frames) under a path with that name too
    package = os.path.dirname(trainmeter.__file__) + os.sep

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(package):
            ours.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        opt.step()
    finally:
        sys.setprofile(None)
    assert ours == []
    assert [s[0] for s in _counts(taps)[0]] == list(range(1, STEPS_WATCHED + 4))  # and clocked


@pytest.mark.parametrize("where", ["instance", "subclass"])
def test_an_optimizer_with_a_method_of_its_own_keeps_it_and_the_hook_clocks(taps, where):
    seen = []

    class SGD(torch.optim.SGD):
        if where == "subclass":

            def _optimizer_step_code(self):
                seen.append(1)

    model = Net()
    opt = SGD(model.parameters(), lr=0.1)
    if where == "instance":
        opt._optimizer_step_code = lambda: seen.append(1)  # someone else's patch
    for _ in range(3):
        _train_step(model, opt, torch.zeros(1, 2, dtype=torch.long))
    assert seen == [1, 1, 1] and _post_hooks(taps) == 1
    assert [s[0] for s in _counts(taps)[0]] == [1, 2, 3]


def test_a_second_optimizer_of_the_same_class_is_not_the_clock(taps):
    gen, disc = Net(), Net()
    opt_g = torch.optim.SGD(gen.parameters(), lr=0.1)
    opt_d = torch.optim.SGD(disc.parameters(), lr=0.1)
    for _ in range(3):  # a GAN's loop: the generator steps first, so its optimizer is the clock
        _train_step(gen, opt_g, torch.zeros(2, 3, dtype=torch.long))
        _train_step(disc, opt_d, torch.zeros(5, 5, dtype=torch.long))
    assert _counts(taps)[0] == [(1, 6, 2), (2, 6, 2), (3, 6, 2)]


def test_under_a_profiler_torchs_own_step_method_still_runs(taps, monkeypatch):
    seen = []
    monkeypatch.setattr(torch.optim.Optimizer, "_optimizer_step_code", lambda self: seen.append(1))
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        _train_step(model, opt, torch.zeros(1, 2, dtype=torch.long))
    before = len(seen)  # the first step only (the clock's method took over at the second)
    with torch.profiler.profile():
        _train_step(model, opt, torch.zeros(1, 2, dtype=torch.long))
    _train_step(model, opt, torch.zeros(1, 2, dtype=torch.long))
    assert before == 1 and len(seen) == 2  # once more inside the profiler, not after it
    assert [s[0] for s in _counts(taps)[0]] == [1, 2, 3, 4]


def test_if_torch_never_calls_the_method_the_hook_clocks_every_step(taps, monkeypatch):
    monkeypatch.setattr(taps.clock, "_install", lambda opt: None)  # a torch without the call
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        _train_step(model, opt, torch.zeros(1, 2, dtype=torch.long))
    assert _post_hooks(taps) == 1
    assert _counts(taps)[0] == [(1, 2, 1), (2, 2, 1), (3, 2, 1)]


# -- torch.compile ---------------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["torch.compile(model)", "model.compile()"])
def test_a_compiled_model_is_counted_and_trains_as_without_the_agent(taps, how):
    def train(model):
        torch.manual_seed(0)
        if how == "model.compile()":
            model.compile(backend="eager")  # Dynamo without a C++ compiler
        else:
            model = torch.compile(model, backend="eager")
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        losses = []
        for n in (3, 2, 2):
            x = torch.arange(n * 4).view(n, 4) % 20
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        return losses

    torch.manual_seed(1)
    plain_model = Net()
    watched_model = copy.deepcopy(plain_model)
    try:
        taps.pause()  # the plain run: no agent on the loop
        plain = train(plain_model)
        taps.new_segment()
        watched = train(watched_model)
    finally:  # no compiled frame left behind: later tests' counted-FLOPs step would refuse
        from torch._dynamo.utils import counters

        torch._dynamo.reset()
        counters.clear()
    assert watched == plain
    assert [s[1:] for s in _counts(taps)[0]] == [(12, 3), (8, 2), (8, 2)]  # n x 4 by hand


@pytest.mark.parametrize("reset_first", [False, True])
def test_a_compiled_training_step_traces_the_counting_call_without_recompiles(taps, reset_first):
    """Dynamo inlines the root's ``__call__`` into a compiled step. The compile watch must set
    the flag before the trace, else the queue's append is traced, with a guard on the queue,
    and every call recompiles: ``error_on_recompile`` makes that an error. A
    ``torch._dynamo.reset()`` before the first compile clears Dynamo's callbacks, ours too."""
    from torch._dynamo import config
    from torch._dynamo.utils import counters

    handler = torch._dynamo.callback_handler
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    _train_step(model, opt, torch.zeros(2, 4, dtype=torch.long))  # eager: Dynamo is imported
    assert taps._tracing is False  # but nothing compiled: the call does not ask
    if reset_first:
        torch._dynamo.reset()

    @torch.compile(backend="eager", fullgraph=True)
    def loss_of(x):
        return model(x).square().mean()

    try:
        with config.patch(error_on_recompile=True):
            for _ in range(3):
                loss_of(torch.zeros(2, 4, dtype=torch.long)).backward()
                opt.step()
                opt.zero_grad()
    finally:
        torch._dynamo.reset()
        counters.clear()
    assert taps._tracing is True
    # the eager step's 8 tokens; a compiled step's are not counted (docs/spec.md)
    assert _counts(taps)[0] == [(1, 8, 2), (2, 0, 0), (3, 0, 0), (4, 0, 0)]
    taps._compile_watch.stop()  # Dynamo's handler is left as it was
    assert "clear" not in vars(handler)
    assert taps._compile_watch.started not in handler.start_callbacks
