"""The loss from backward() and the step clock of a loop with no optimizer (agent/backward.py):
the ledger's rules on hand-built queues, the device path against a scripted CUDA (no GPU
here: the real one is benchmarks/gpu_check.py's check 5), and real loops in-process."""

import collections

import pytest
from conftest import StandInAgent

torch = pytest.importorskip("torch")

from trainmeter.agent import backward  # noqa: E402
from trainmeter.agent.backward import (  # noqa: E402
    FALLBACK_CALLS,
    LOSS_OFF,
    LOSS_ON,
    SCALER_DONE,
    SCALER_STEP,
    STEP_BEGIN,
    SUPERSEDED,
    DeviceRing,
    Fallback,
)
from trainmeter.agent.sender import QueueReader  # noqa: E402
from trainmeter.agent.torch_taps import TorchTaps  # noqa: E402

pytestmark = pytest.mark.slow


def _read(items, rank=0):
    """The series records and steps batch a reader makes of ``items`` queued in order."""
    reader = QueueReader(rank)
    reader.tensor = reader.ledger.tensor = torch.Tensor
    steps, _, records = reader.read(collections.deque(items))
    records += reader.release_all()
    losses = [(r["step"], r["value"]) for r in records if r["k"] == "series"]
    return losses, steps, records


def _t(x):
    return torch.tensor(x)


# -- the ledger's rules ------------------------------------------------------------------------
def test_a_steps_micro_batch_losses_are_summed_once_the_second_step_says_one_model():
    items = [(1.0, _t(0.25)), (1.1, _t(0.5)), 2.0, LOSS_ON, (2.1, _t(1.0)), 3.0]
    losses, steps, _ = _read(items)
    assert losses == [(1, 0.75), (2, 1.0)]  # 0.25 + 0.5 (exact in binary)
    assert steps["step"] == [1, 2]


def test_two_optimizers_stepping_apart_record_no_loss():
    losses, _, _ = _read([(1.0, _t(0.25)), 2.0, LOSS_OFF, (2.1, _t(1.0)), 3.0])
    assert losses == []


def test_only_the_first_backward_inside_a_closure_step_is_its_loss():
    # Lightning's accumulation: one micro-batch outside the step, the last inside its closure;
    # LBFGS: several evaluations inside the step, the first is what step(closure) returns
    items = [(1.0, _t(0.25)), STEP_BEGIN, (1.1, _t(0.5)), (1.2, _t(8.0)), (1.3, _t(9.0)), 2.0,
             LOSS_ON]  # fmt: skip
    losses, _, _ = _read(items)
    assert losses == [(1, 0.75)]


def test_a_step_amp_skipped_gives_its_losses_to_no_step():
    items = [(1.0, _t(4.0)), SCALER_STEP, SCALER_DONE,  # inf gradients: no step stamp
             (1.1, _t(0.5)), SCALER_STEP, 2.0, SCALER_DONE, LOSS_ON]  # fmt: skip
    losses, steps, _ = _read(items)
    assert losses == [(1, 0.5)] and steps["step"] == [1]


def test_a_reported_train_loss_supersedes_the_held_ones_and_other_ranks_record_none():
    assert _read([(1.0, _t(0.25)), 2.0, SUPERSEDED, LOSS_ON, (2.1, _t(1.0)), 3.0])[0] == []
    assert _read([(1.0, _t(0.25)), 2.0, LOSS_ON, (2.1, _t(1.0)), 3.0], rank=1)[0] == []


def test_backward_calls_become_steps_with_discoverys_counts_when_the_clock_falls_back():
    items = [(1.0, _t(0.5)), (2.0, _t(0.25)), Fallback([(8, 2, 32), (12, 3, 48)]),
             [(torch.zeros(3, 4, dtype=torch.long),), {}], (3.0, _t(0.125))]  # fmt: skip
    reader = QueueReader(0)
    reader.tensor = reader.ledger.tensor = torch.Tensor

    def count_call(args, kwargs):  # (3, 4) token ids: 12 tokens, 3 samples, 12 x 4 = 48
        return 12, 3, 48

    reader.count_call = count_call
    steps, _, records = reader.read(collections.deque(items))
    assert steps["step"] == [1, 2, 3]
    assert steps["tokens"] == [8, 12, 12] and steps["samples"] == [2, 3, 3]
    assert steps["seq_sq"] == [32, 48, 48]
    assert [(r["step"], r["value"]) for r in records if r["k"] == "series"] == [
        (1, 0.5), (2, 0.25), (3, 0.125)]  # fmt: skip
    assert [r["source"] for r in records if r["k"] == "step_clock"] == ["backward"]


def test_an_optimizer_step_after_the_backward_clock_takes_it_back_and_says_so():
    items = [(1.0, _t(0.5)), Fallback([(0, 0, 0)]), (2.0, _t(0.25)),
             (3.0, 1, 4, 1, 16)]  # the optimizer's first step, with its own number  # fmt: skip
    _, steps, records = _read(items)
    assert steps["step"] == [1, 2, 1]
    assert [r["source"] for r in records if r["k"] == "step_clock"] == ["backward", "optimizer"]
    assert any("an optimizer stepped after backward() calls" in r.get("text", "")
               for r in records if r["k"] == "note")  # fmt: skip


# -- the device path, against a scripted CUDA --------------------------------------------------
class _Event:
    """A CUDA event whose copy completes when the test says so (``_Event.done``)."""

    done = False

    def record(self):
        pass

    def query(self):
        return _Event.done


class _Torch:
    """torch with a scripted ``cuda`` and no pinned memory (CPU buffers stand in)."""

    def __init__(self):
        capturing = staticmethod(lambda: False)
        self.cuda = type("cuda", (), {"Event": _Event, "is_current_stream_capturing": capturing})

    @staticmethod
    def empty(n, dtype, pin_memory):
        assert pin_memory  # the agent asks for page-locked host memory, never device memory
        return torch.empty(n, dtype=dtype)


def test_device_losses_come_out_in_step_order_once_their_copies_complete():
    ring = DeviceRing(_Torch(), slots=4)
    led = backward.Ledger(torch.Tensor)
    led.state = "on"
    out = []
    _Event.done = False
    for step, value in ((1, 0.5), (2, 0.25)):
        led.losses = [ring.copy(torch.tensor(value))]
        led.take_losses(step, float(step), out)
    led.poll(out)
    assert out == [] and len(ring.free) == 2  # both copies in flight: nothing read or waited on
    _Event.done = True
    led.poll(out)
    assert [(r["step"], r["value"]) for r in out] == [(1, 0.5), (2, 0.25)]
    assert len(ring.free) == 4  # every slot free again once read


def test_a_full_ring_copies_nothing_more_and_counts_it():
    ring = DeviceRing(_Torch(), slots=2)
    _Event.done = False
    slots = [ring.copy(torch.tensor(1.0)) for _ in range(3)]
    assert slots[2] is None and ring.dropped == 1
    assert all(ring.read(s) is backward.PENDING for s in slots[:2])


def test_a_device_loss_not_copied_is_counted_in_the_runs_dropped_record():
    """The tap counts each refusal with the sender (the run's ``dropped`` record), by reason:
    a full ring, and a CUDA graph capture."""
    agent = StandInAgent()
    tap = backward.BackwardTap(agent, _Torch())
    tap.ring = DeviceRing(tap.torch, slots=1)
    _Event.done = False
    cuda = torch.zeros((), device="meta")  # not on the CPU; its type says "meta", not "cuda"
    assert tap.device_slot(cuda) is None and agent.sender.drops == {}  # only CUDA is copied
    x = _FakeCuda(torch.tensor(2.0))
    assert tap.device_slot(x) is not None  # the one slot
    assert tap.device_slot(x) is None and tap.device_slot(x) is None
    assert agent.sender.drops == {backward.RING_FULL: 2}
    tap.torch.cuda.is_current_stream_capturing = staticmethod(lambda: True)
    assert tap.device_slot(x) is None
    assert agent.sender.drops == {backward.RING_FULL: 2, backward.IN_CAPTURE: 1}


class _FakeCuda:
    """A one-element tensor that says it lives on a CUDA device (copy_ sees the real one)."""

    def __init__(self, t):
        self.t, self.dtype, self.device = t, t.dtype, torch.device("cuda", 0)

    def numel(self):
        return 1

    def detach(self):
        return self.t


# -- real loops, in process --------------------------------------------------------------------
@pytest.fixture
def taps(fresh_guard):
    t = TorchTaps(StandInAgent(), torch)
    t.attach()
    yield t
    t.detach()


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Embedding(10, 8), torch.nn.Linear(8, 10))


def _loss(model, x):
    return torch.nn.functional.cross_entropy(model(x).reshape(-1, 10), x.reshape(-1))


def test_a_loop_with_no_optimizer_is_clocked_by_its_backward_calls(taps):
    model, printed = _mlp(), []
    for _ in range(FALLBACK_CALLS + 6):  # the PyTorch tutorials' manual SGD
        x = torch.randint(0, 10, (2, 5))
        loss = _loss(model, x)
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.1 * p.grad
                p.grad = None
        printed.append(loss.item())
    steps, _ = taps.agent.sender.counts()
    assert [s for s, _, _ in steps] == list(range(1, FALLBACK_CALLS + 7))
    assert {tok for _, tok, _ in steps} == {10} and {smp for _, _, smp in steps} == {2}
    got = [r["value"] for k, r in taps.agent.records if k == "series"]
    assert got == printed  # the same float32 values, read off the CPU tensors
    assert taps.agent.models and taps.agent.models[0]["params"] == 10 * 8 + 8 * 10 + 10


def test_a_short_loop_with_no_optimizer_is_clocked_at_exit(taps):
    model = _mlp()
    for _ in range(3):
        _loss(model, torch.randint(0, 10, (2, 5))).backward()
    taps.finish()  # what the agent does at exit
    steps, _ = taps.agent.sender.counts()
    assert [s for s, _, _ in steps] == [1, 2, 3] and [t for _, t, _ in steps] == [10, 10, 10]


def test_lbfgs_records_the_loss_its_step_returns(taps):
    model = _mlp()
    opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=4)
    x = torch.randint(0, 10, (2, 5))
    returned = []
    for _ in range(4):

        def closure():
            opt.zero_grad()
            loss = _loss(model, x)
            loss.backward()
            return loss

        returned.append(opt.step(closure).item())
    taps.finish()  # a run shorter than the clock's watch: decided at its end, as at exit
    got = [(r["step"], r["value"]) for k, r in taps.agent.records if k == "series"]
    assert got == list(enumerate(returned, start=1))


def test_a_gradscaler_loop_records_the_unscaled_loss_of_the_steps_taken(taps):
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**127)  # the first steps overflow
    taken = []
    for _ in range(6):
        loss = _loss(model, torch.randint(0, 10, (2, 5))) * 1e4  # gradients x 2**127: inf
        scaler.scale(loss).backward()
        before = scaler.get_scale()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        if scaler.get_scale() >= before:  # not skipped (a skip halves the scale)
            taken.append(loss.item())
    taps.finish()
    got = [r["value"] for k, r in taps.agent.records if k == "series"]
    assert len(taken) < 6 and got == taken


def test_a_second_optimizer_stepping_once_per_several_clock_steps_withholds_the_loss(taps):
    """WGAN-style: the critic (the clock) steps 3 times per generator step; the generator's
    first step comes at the clock's 3rd, past the old 2-step watch."""
    critic, gen = _mlp(), _mlp()
    opt_c = torch.optim.SGD(critic.parameters(), lr=0.1)
    opt_g = torch.optim.SGD(gen.parameters(), lr=0.1)
    for i in range(12):
        _loss(critic, torch.randint(0, 10, (2, 5))).backward()
        opt_c.step()
        if i % 3 == 2:
            _loss(gen, torch.randint(0, 10, (2, 5))).backward()
            opt_g.step()
    taps.finish()
    assert [k for k, _ in taps.agent.records if k == "series"] == []
    assert any("2 optimizers step apart" in n["text"] for n in taps.agent.notes())


def test_two_optimizers_of_one_model_keep_its_loss(taps):
    """modded-nanoGPT's split: one model, one backward() a step, then two optimizers (one for
    the matrices, one for the embedding and head) both step: the loss is the model's (it was
    withheld as a GAN's)."""
    model = _mlp()
    emb, head = model[0], model[1]
    opts = [torch.optim.SGD(emb.parameters(), lr=0.1), torch.optim.SGD(head.parameters(), lr=0.1)]
    printed = []
    for _ in range(12):
        loss = _loss(model, torch.randint(0, 10, (2, 5)))
        loss.backward()
        for opt in opts:
            opt.step()
        model.zero_grad()
        printed.append(loss.item())
    taps.finish()
    series = [(f["step"], f["value"]) for k, f in taps.agent.records if k == "series"]
    assert series == list(enumerate(printed, 1))  # each step's loss, as the loop printed it
    assert not any("optimizers step apart" in n["text"] for n in taps.agent.notes())


def test_a_replaced_optimizer_hands_the_clock_to_the_next_one(taps):
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(6):
        if i == 3:  # unfreeze and rebuild, as fine-tunes do: the old optimizer is freed
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
        _loss(model, torch.randint(0, 10, (2, 5))).backward()
        opt.step()
        opt.zero_grad()
    steps, _ = taps.agent.sender.counts()
    assert [s for s, _, _ in steps] == [1, 2, 3, 4, 5, 6]
    # the same model: its calls are counted once (not again by the discovery that watched
    # for another model), 2 x 5 token ids a step
    assert [(t, n) for _, t, n in steps] == [(10, 2)] * 6
    assert len(taps.agent.models) == 1  # described once
    notes = [n["text"] for n in taps.agent.notes()]
    assert (
        "step clock: the optimizer that clocked steps 1-3 was freed; another clocks them "
        "from step 4 on" in notes
    )


def _train(model, opt, steps, shape):
    for _ in range(steps):
        _loss(model, torch.randint(0, 10, shape)).backward()
        opt.step()
        opt.zero_grad()


def test_a_new_model_with_a_new_optimizer_is_counted_and_described_from_its_first_step(taps):
    """Two trainings in one script (a sweep's next model, a second Trainer): model B's
    tokens count from its first step (they were 0: the root stayed model A), and B is
    described (its parameters, not A's)."""
    a = _mlp()
    opt = torch.optim.SGD(a.parameters(), lr=0.1)
    _train(a, opt, 3, (2, 5))
    del opt  # A's optimizer freed
    b = torch.nn.Sequential(torch.nn.Embedding(10, 16), torch.nn.Linear(16, 10))
    opt = torch.optim.SGD(b.parameters(), lr=0.1)
    _train(b, opt, 10, (4, 7))
    steps, _ = taps.agent.sender.counts()
    # by hand: A's steps 2 x 5 ids, B's 4 x 7
    assert steps == [(s, 10, 2) for s in (1, 2, 3)] + [(s, 28, 4) for s in range(4, 14)]
    params = [m["params"] for m in taps.agent.models]
    assert params == [10 * 8 + 8 * 10 + 10, 10 * 16 + 16 * 10 + 10]  # A's, then B's
    assert taps.clock._hook is None  # the new clock's watch is over: no Python per step


def test_a_new_training_started_by_a_framework_is_clocked_while_the_old_optimizer_lives(taps):
    """Lightning's second fit, a script's second HF Trainer: the first optimizer is still
    referenced (the framework's objects hold it), so nothing frees the clock; the framework
    tap calls new_training() first. Without it model B's 4 steps were not counted at all."""
    a = _mlp()
    opt_a = torch.optim.SGD(a.parameters(), lr=0.1)
    _train(a, opt_a, 3, (2, 5))
    taps.new_training()  # Trainer.fit / Trainer.train is called again
    b = torch.nn.Sequential(torch.nn.Embedding(10, 16), torch.nn.Linear(16, 10))
    opt_b = torch.optim.SGD(b.parameters(), lr=0.1)
    _train(b, opt_b, 4, (4, 7))
    taps.new_training()  # and a third time on model A, whose optimizer is still alive
    _train(a, opt_a, 2, (2, 5))
    steps, _ = taps.agent.sender.counts()
    assert steps == [(1, 10, 2), (2, 10, 2), (3, 10, 2), (4, 28, 4), (5, 28, 4), (6, 28, 4),
                     (7, 28, 4), (8, 10, 2), (9, 10, 2)]  # fmt: skip
    assert [m["params"] for m in taps.agent.models] == [170, 330, 170]  # A, B, A again
    assert opt_a is not None


def test_an_optimizer_freed_with_no_other_after_it_says_nothing(taps):
    """A script's main() returns and frees its optimizer before the agent's exit: no note
    (gpu_check's loss loop on an H200 showed one at every such exit)."""
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        _loss(model, torch.randint(0, 10, (2, 5))).backward()
        opt.step()
    del opt
    taps.finish()
    assert [s for s, _, _ in taps.agent.sender.counts()[0]] == [1, 2, 3]
    assert not any("freed" in n["text"] for n in taps.agent.notes())
