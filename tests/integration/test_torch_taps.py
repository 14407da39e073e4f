"""The root-model token counter leaves the model as it was: signature, pickling, copies, and
the class itself after detach (the wrapper lives on the class; see torch_taps' docstring)."""

import copy
import inspect
import io

import pytest
from conftest import StandInAgent

torch = pytest.importorskip("torch")

from trainmeter.agent.torch_taps import TorchTaps  # noqa: E402

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


def test_the_root_is_found_and_its_tokens_counted_per_step(taps):
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    _train_step(model, opt, torch.zeros(3, 5, dtype=torch.long))
    model(torch.zeros(2, 7, dtype=torch.long)).sum().backward()
    model(idx=torch.zeros(1, 4, dtype=torch.long)).sum().backward()  # by keyword
    # two micro-batches, by hand; counted later (by the sender thread) from the kept inputs
    assert taps._count_inputs(taps.inputs) == (2 * 7 + 1 * 4, 2 + 1)
    opt.step()
    *_, inputs = taps.agent.sender.queue[-1]
    assert taps._count_inputs(inputs) == (18, 3) and taps.inputs == []
    assert taps.agent.models[0]["params"] == 20 * 8 + 8 * 20 + 20


def test_copies_and_other_instances_of_the_class_are_not_counted(taps):
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    _train_step(model, opt, torch.zeros(3, 5, dtype=torch.long))
    ema = copy.deepcopy(model)
    ema(torch.zeros(9, 9, dtype=torch.long)).sum().backward()
    Net()(torch.zeros(9, 9, dtype=torch.long)).sum().backward()
    assert taps.inputs == []


def test_signature_pickle_and_outputs_are_unchanged(taps):
    model = Net()
    before = inspect.signature(Net.forward)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    _train_step(model, opt, torch.zeros(3, 5, dtype=torch.long))
    assert inspect.signature(model.forward) == inspect.signature(Net().forward)
    assert inspect.signature(Net.forward) == before  # what HF Trainer inspects
    buf = io.BytesIO()
    torch.save(model, buf)  # a whole-module pickle holds no trainmeter object
    assert b"trainmeter" not in buf.getvalue()
    x = torch.arange(6).reshape(2, 3)
    assert torch.equal(model(x), Net.__dict__["forward"].__wrapped__(model, x))


def test_detach_restores_the_class(taps):
    own = Net.__dict__["forward"]
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    _train_step(model, opt, torch.zeros(3, 5, dtype=torch.long))
    assert Net.__dict__["forward"] is not own
    taps.detach()
    assert Net.__dict__["forward"] is own
    seq = torch.nn.Sequential(torch.nn.Linear(2, 2))
    assert "forward" in torch.nn.Sequential.__dict__ and seq(torch.ones(1, 2)).shape == (1, 2)


def test_between_notebook_cells_nothing_is_hooked_held_or_counted(taps):
    import torch.nn.modules.module as mm

    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    own = Net.__dict__["forward"]
    _train_step(model, opt, torch.zeros(3, 5, dtype=torch.long))
    taps.pause()  # the cell ended
    assert Net.__dict__["forward"] is own and not mm._global_forward_pre_hooks
    model(torch.zeros(2, 2, dtype=torch.long)).sum().backward()  # a plain cell trains
    assert taps.inputs == [] and taps._roots == {}
    taps.new_segment()  # the next %%trainmeter cell: the known root is counted again
    model(torch.zeros(2, 3, dtype=torch.long)).sum().backward()
    assert taps._count_inputs(taps.inputs) == (6, 2)


def test_forwards_without_a_step_are_folded_into_counts_not_kept(taps):
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    _train_step(model, opt, torch.zeros(3, 5, dtype=torch.long))
    for _ in range(200):
        model(torch.zeros(1, 2, dtype=torch.long))
    assert len(taps.inputs) <= 65
    assert taps.tokens + taps._count_inputs(taps.inputs)[0] == 200 * 2
