"""Counted FLOPs: one real step under torch's FlopCounterMode (docs/spec.md "Counted FLOPs").

The tiny GPT's counted step against a hand count of its matmuls, under ``tm``; numerics
unchanged; an error inside counting ends it and leaves the loop alone (the never-raise invariant);
no hook stays behind once the count is done; and the engine's side (records in, snapshot out)."""

import copy
import importlib.util
import json
import math
import sys

import pytest
from conftest import EXAMPLE, FIXTURES, StandInAgent, losses, read_log, run_plain, run_tm

torch = pytest.importorskip("torch")

from torch.nn.modules import module as torch_module  # noqa: E402
from torch.optim import optimizer as torch_optimizer  # noqa: E402

from trainmeter.agent import flop_count, flop_formulas, guard  # noqa: E402
from trainmeter.agent.torch_taps import TorchTaps  # noqa: E402
from trainmeter.core import records  # noqa: E402
from trainmeter.core.engine import Engine  # noqa: E402

pytestmark = pytest.mark.slow
# a small step of the example: 2 sequences of 64 tokens, 2 micro-batches per optimizer step
B, T, ACCUM = 2, 64, 2
GPT_ARGS = ["--steps", "4", "--batch-size", B, "--seq-len", T, "--grad-accum", ACCUM,
            "--eval-every", "0"]  # fmt: skip


def _example_config():
    """examples/train_gpt.py's GPTConfig (an independent source for the model's shape)."""
    spec = importlib.util.spec_from_file_location("train_gpt_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up while being defined
    spec.loader.exec_module(module)
    return module.GPTConfig(block_size=T)


def hand_count_per_token(c, seq_len: int) -> int:
    """Executed FLOPs per token of one training step of examples/train_gpt.py's GPT, by hand.

    A matmul (m x k) @ (k x n) is 2 m n k FLOPs; per token (one row of m) that is 2 k n.
    Forward, per token:
      - per layer, the four Linear layers: qkv d -> 3d, attention output d -> d, MLP d -> 4d and
        4d -> d: 2 (3d^2 + d^2 + 4d^2 + 4d^2) = 24 d^2 (biases are additions, not counted);
      - per layer, attention: Q K^T is one row of scores against T keys over the head dims,
        summed over heads = 2 T d, and the scores times V another 2 T d: 4 T d (the full
        T x T square: torch counts causal attention unmasked);
      - the LM head d -> V: 2 d V (the tied input embedding is a lookup, not a matmul).
    Backward: twice the forward for every Linear (grad of the input and of the weight), and for
    attention the four products of its gradients (2x its forward, 8 T d) plus the flash kernel's
    recompute of Q K^T (2 T d): 10 T d. LayerNorm, GELU, softmax and the loss are not matmuls.
    Total: 3 (24 L d^2 + 2 d V) + 14 L T d.
    """
    d, L, V = c.n_embd, c.n_layer, c.vocab_size
    return 3 * (24 * L * d * d + 2 * d * V) + 14 * L * seq_len * d


def test_the_hand_count_formula_gives_the_figure_worked_out_by_hand():
    # d 128, L 4, V 256, T 64: 3 (24*4*16384 + 2*128*256) + 14*4*64*128
    # = 3 (1,572,864 + 65,536) + 458,752 = 4,915,200 + 458,752 = 5,373,952 (by hand)
    assert hand_count_per_token(_example_config(), T) == 5_373_952


def test_the_tiny_gpt_counted_step_equals_a_hand_count_of_its_matmuls(workdir):
    out = run_tm(["-q", "--no-web", EXAMPLE, *GPT_ARGS], workdir)
    assert out.returncode == 0, out.stderr
    snap = json.loads(run_tm(["replay", "--json"], workdir).stdout)
    counted = snap["flops_counted"]
    assert counted["step"] == flop_count.COUNT_STEP
    assert counted["tokens"] == B * T * ACCUM  # both micro-batches of the step
    assert counted["attention"] == "sdpa"
    hand = hand_count_per_token(_example_config(), T)
    assert snap["flops_per_token_counted"] == pytest.approx(hand, rel=0.01)
    # beside the conventions, never in their place (the named-convention invariant)
    assert set(snap["flops_per_token"]) == {"hf", "megatron", "titan", "embeddings"}
    rec = next(r for r in read_log(workdir) if r["k"] == "flops_counted")
    assert sorted(rec["mapped"]) == sorted([*(o for o, _ in flop_count._SAME_FORMULA),
                                            *flop_formulas.RECURRENT])  # fmt: skip
    assert rec["not_counted"] == []
    step3 = next(r for r in read_log(workdir) if r["k"] == "step" and r["step"] == 3)
    assert rec["tokens"] == step3["tokens"]
    # numerics unchanged (the same-numerics invariant): the counted step's loss and every other are
    # the same
    plain = run_plain([EXAMPLE, *GPT_ARGS], workdir)
    assert losses(out.stdout) == losses(plain.stdout) and len(losses(plain.stdout)) == 4


def test_an_error_in_a_flops_formula_ends_counting_and_the_loop_trains_unchanged(workdir):
    script = FIXTURES / "flop_error_train.py"
    out = run_tm(["-q", "--no-web", script, *GPT_ARGS], workdir)
    assert out.returncode == 0, out.stderr
    assert out.stderr.count("[trainmeter] counted FLOPs stopped after an internal error") == 1
    assert "forced error in a FLOPs formula" in out.stderr
    plain = run_plain([script, *GPT_ARGS], workdir)
    assert losses(out.stdout) == losses(plain.stdout) and len(losses(plain.stdout)) == 4
    snap = json.loads(run_tm(["replay", "--json"], workdir).stdout)
    assert snap["flops_per_token_counted"] is None and snap["flops_counted"] is None
    assert any(n.startswith("trainmeter: counted FLOPs: stopped") for n in snap["notes"])
    assert snap["step"] == 4  # the step clock went on


# -- in process, with a stand-in agent ---------------------------------------------------------
_Agent = StandInAgent


def _hooks() -> tuple[int, int, int]:
    """Global optimizer pre/post hooks and module forward pre-hooks now registered."""
    return (len(torch_optimizer._global_optimizer_pre_hooks),
            len(torch_optimizer._global_optimizer_post_hooks),
            len(torch_module._global_forward_pre_hooks))  # fmt: skip


def _train(steps: int, agent=None) -> list[float]:
    """A tiny model trained ``steps`` steps (2 micro-batches each), watched by taps on
    ``agent`` when given; returns the losses."""
    taps = None
    if agent is not None:
        taps = TorchTaps(agent, torch)
        taps.attach()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(11, 6), torch.nn.Linear(6, 11))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    out = []
    for s in range(steps):
        for m in range(2):
            x = (torch.arange(15).view(3, 5) * (s + m + 1)) % 11
            loss = torch.nn.functional.cross_entropy(model(x).view(-1, 11), x.view(-1))
            loss.backward()
        opt.step()
        opt.zero_grad()
        out.append(loss.item())
    model(x)  # one more module call: the counter removes its last hooks here
    if taps is not None:
        taps.detach()
    return out


def test_the_count_is_sent_once_and_leaves_no_hook_behind(fresh_guard):
    before = _hooks()
    agent = _Agent()
    assert _train(5, agent) == _train(5)  # numerics unchanged
    sent = [f for k, f in agent.records if k == "flops_counted"]
    # one Linear 6 -> 11 per token: 2*6*11 = 132 forward, x3 with the backward (the embedding
    # is a lookup); 2 micro-batches of 3 x 5 tokens
    assert len(sent) == 1 and sent[0]["step"] == 3 and sent[0]["tokens"] == 30
    assert sent[0]["flops"] == 3 * 2 * 6 * 11 * 30
    assert sent[0]["attention"] == "none counted" and sent[0]["not_counted"] == []
    assert _hooks() == before


def _distil(steps: int, agent=None, eval_after: int | None = None, inference: bool = False,
            ema_after: int | None = None) -> list[float]:  # fmt: skip
    """The distillation tutorial's order: a frozen teacher (eval(), no gradients) run under
    ``no_grad`` (``inference``: ``inference_mode``) before the student, the root; with
    ``eval_after`` an evaluation after that step, the student in ``eval()``, calling the
    teacher too; with ``ema_after`` an EMA copy of the student evaluated five times after that
    step, the student left in training mode (timm's ModelEmaV2). Returns the losses."""
    taps = None
    if agent is not None:
        taps = TorchTaps(agent, torch)
        taps.attach()
    torch.manual_seed(0)
    teacher = torch.nn.Sequential(torch.nn.Embedding(11, 8), torch.nn.Linear(8, 20),
                                  torch.nn.Linear(20, 11)).eval().requires_grad_(False)  # fmt: skip
    student = torch.nn.Sequential(torch.nn.Embedding(11, 6), torch.nn.Linear(6, 11))
    opt = torch.optim.SGD(student.parameters(), lr=0.1)
    ema = copy.deepcopy(student).eval().requires_grad_(False)
    out = []
    for s in range(steps):
        x = (torch.arange(15).view(3, 5) * (s + 1)) % 11
        with torch.inference_mode() if inference else torch.no_grad():
            soft = teacher(x).softmax(-1)
        soft = soft.clone()  # a normal tensor (an inference tensor cannot be saved for backward)
        logits = student(x)
        loss = torch.nn.functional.cross_entropy(logits.view(-1, 11), soft.view(-1, 11))
        loss.backward()
        opt.step()
        opt.zero_grad()
        out.append(loss.item())
        if s + 1 == eval_after:
            student.eval()
            with torch.no_grad():
                out.append(float(teacher(x).sum() + student(x).sum()))
            student.train()
        if s + 1 == ema_after:
            with torch.no_grad():
                out += [float(ema(x).sum()) for _ in range(5)]
    student(x)  # one more module call: the counter removes its last hooks here
    if taps is not None:
        taps.detach()
    return out


@pytest.mark.parametrize("eval_after", [None, 2])
def test_a_frozen_teacher_run_before_the_student_is_counted_in_its_step(fresh_guard, eval_after):
    before = _hooks()
    agent = _Agent()
    assert _distil(5, agent, eval_after) == _distil(5, None, eval_after)  # numerics unchanged
    sent = [f for k, f in agent.records if k == "flops_counted"]
    # by hand, per token: the teacher's forward 2*8*20 + 2*20*11 = 760; the student's Linear
    # 6 -> 11 forward 2*6*11 = 132, x3 with its backward (the embeddings are lookups): 396;
    # 15 tokens. The evaluation after step 2 (the student in eval()) is not in the window.
    assert len(sent) == 1 and sent[0]["step"] == 3 and sent[0]["tokens"] == 15
    assert sent[0]["flops"] == (760 + 396) * 15
    assert _hooks() == before


@pytest.mark.parametrize("case", ["inference_mode teacher", "EMA evaluated after step 2"])
def test_a_count_that_cannot_hold_what_came_before_the_root_is_the_root_s_step(fresh_guard, case):
    # a teacher under inference_mode: a mode entered inside it no longer sees the ops after it
    # (torch), so the count opens at the student's forward; an EMA copy called again before
    # the root's forward is not the step's: the count it opened is dropped
    kw = {"inference": True} if case.startswith("inference") else {"ema_after": 2}
    before = _hooks()
    agent = _Agent()
    assert _distil(5, agent, **kw) == _distil(5, None, **kw)
    sent = [f for k, f in agent.records if k == "flops_counted"]
    # the student's Linear 6 -> 11, forward and backward, 15 tokens (the test above)
    assert len(sent) == 1 and sent[0]["flops"] == 396 * 15
    assert _hooks() == before


def test_after_the_count_the_loop_runs_with_no_counter_hook(fresh_guard):
    agent = _Agent()
    taps = TorchTaps(agent, torch)
    taps.attach()
    try:
        _train(4)  # the counter's hooks are gone after the count and one more module call
        assert taps.flop_count.state == "off" and taps.flop_count.done
        assert taps.flop_count._hooks == {}
        assert not [h for h in taps.door.hooks if h.name == flop_count.NAME]
    finally:
        taps.detach()


def test_an_error_entering_the_mode_ends_counting_and_training_goes_on(fresh_guard, capsys,
                                                                       monkeypatch):  # fmt: skip
    from torch.utils.flop_counter import FlopCounterMode

    def broken(self):
        raise RuntimeError("forced error entering the mode (test)")

    monkeypatch.setattr(FlopCounterMode, "__enter__", broken)
    before = _hooks()
    agent = _Agent()
    assert _train(5, agent) == _train(5)
    assert guard.is_off(flop_count.NAME)
    assert not [k for k, _ in agent.records if k == "flops_counted"]
    notes = [f["text"] for k, f in agent.records if k == "note"]
    assert notes == ["counted FLOPs: stopped after an internal error: RuntimeError: forced error "
                     "entering the mode (test)"]  # fmt: skip
    assert capsys.readouterr().err.count("counted FLOPs stopped after an internal error") == 1
    assert _hooks() == before


def test_a_process_that_uses_torch_compile_is_not_counted(fresh_guard):
    from torch._dynamo.utils import counters

    double = torch.compile(lambda x: x * 2, backend="eager")  # Dynamo, no C++ compiler needed
    try:
        double(torch.ones(2))
        agent = _Agent()
        assert _train(4, agent) == _train(4)
    finally:
        torch._dynamo.reset()
        counters.clear()
    assert not [k for k, _ in agent.records if k == "flops_counted"]
    assert [f["text"] for k, f in agent.records if k == "note"] == [
        "counted FLOPs: not counted: torch.compile is in use: under a dispatch mode, compiled "
        "code would run eagerly (other numerics) or go uncounted"
    ]


def test_the_cpu_attention_kernel_gets_torchs_own_cuda_formula():
    from torch.utils.flop_counter import FlopCounterMode

    aten = torch.ops.aten
    registry = dict(FlopCounterMode(display=False).flop_registry)
    # torch 2.13 has no formula for the CPU kernel (the reason for the mapping) ...
    assert aten._scaled_dot_product_flash_attention_for_cpu not in registry
    mapped = flop_count._map_cpu_attention(aten, registry)
    assert mapped == [op for op, _ in flop_count._SAME_FORMULA]
    cuda = registry[aten._scaled_dot_product_flash_attention]
    assert registry[aten._scaled_dot_product_flash_attention_for_cpu] is cuda
    # ... and mapping twice changes nothing
    assert flop_count._map_cpu_attention(aten, registry) == []


# -- recurrent layers (flop_formulas.py), in process --------------------------------------------
V_SMALL = 11  # vocabulary of the in-process models


def _counted_step(forward, params, steps: int = 4) -> dict:
    """The one flops_counted record of ``steps`` SGD steps of ``forward()`` (a scalar loss)
    over ``params``, watched by the taps."""
    agent = _Agent()
    taps = TorchTaps(agent, torch)
    taps.attach()
    try:
        opt = torch.optim.SGD(params, lr=0.01)
        for _ in range(steps):
            forward().backward()
            opt.step()
            opt.zero_grad()
        forward()  # one more module call: the counter removes its last hooks here
    finally:
        taps.detach()
    sent = [f for k, f in agent.records if k == "flops_counted"]
    assert len(sent) == 1, agent.records
    return sent[0]


def _loss(out):
    return out.float().square().mean()  # elementwise: no FLOPs of its own


class _Recurrent(torch.nn.Module):
    """Embedding -> nn.LSTM / nn.GRU / nn.RNN -> Linear head. The embedding's output needs a
    gradient, so every layer's input gradient runs, as in a language model."""

    def __init__(self, kind, i, h, layers, bidirectional, batch_first, **kw):
        super().__init__()
        self.emb = torch.nn.Embedding(V_SMALL, i)
        self.rnn = getattr(torch.nn, kind)(i, h, num_layers=layers, bidirectional=bidirectional,
                                           batch_first=batch_first, **kw)  # fmt: skip
        self.head = torch.nn.Linear((2 if bidirectional else 1) * h, V_SMALL)

    def forward(self, ids):
        out, _ = self.rnn(self.emb(ids))
        return self.head(out)


def hand_count_recurrent(kind, i, h, layers, d, b, t, v) -> int:
    """Executed FLOPs of one training step of ``_Recurrent``, by hand (flop_formulas.py).

    One layer and direction over N = b t rows: 2 N G h (I_l + h) forward, with G = 4 gates
    (LSTM), 3 (GRU), 1 (RNN) and I_l = i for the first layer, d h after (nn.LSTM docs: each gate
    is W_i* x_t + W_h* h_{t-1}). Backward: twice that for the LSTM (oneDNN's kernel computes
    every gradient); GRU and RNN run torch's cell loop, where autograd skips the gradient of the
    zero initial state: the first step's hidden product on b rows, 2 b G h h, per layer and
    direction. Head d h -> v: 3 x 2 N d h v. The embedding is a lookup; the loss has no matmul.
    """
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[kind]
    n = b * t
    fwd = sum(d * 2 * n * gates * h * ((i if layer == 0 else d * h) + h) for layer in range(layers))
    bwd = 2 * fwd - (0 if kind == "LSTM" else layers * d * 2 * b * gates * h * h)
    return fwd + bwd + 3 * 2 * n * d * h * v


def test_the_recurrent_hand_count_gives_the_figure_worked_out_by_hand():
    # LSTM(I=8, H=16, 2 layers, bidirectional) on B=4, T=5 (N = 20 rows), head 32 -> 11:
    # layer 0, per direction: 2*20*(4*16)*(8 + 16) = 61,440; layer 1 (input 2H = 32):
    # 2*20*64*(32 + 16) = 122,880; forward 2 (61,440 + 122,880) = 368,640; backward 2x =
    # 737,280; head 3*2*20*32*11 = 42,240. Total 368,640 + 737,280 + 42,240 = 1,148,160.
    assert hand_count_recurrent("LSTM", 8, 16, 2, 2, 4, 5, 11) == 1_148_160
    # GRU, same shape: forward 3/4 of the LSTM's = 276,480; backward 552,960 less
    # 2 layers * 2 directions * 2*4*3*16*16 = 24,576; head 42,240: 847,104
    assert hand_count_recurrent("GRU", 8, 16, 2, 2, 4, 5, 11) == 847_104


RECURRENT_CASES = [  # kind, layers, bidirectional, batch_first, extra arguments
    ("LSTM", 2, True, False, {}), ("LSTM", 1, False, True, {}),
    ("GRU", 2, True, False, {}), ("GRU", 1, False, True, {}),
    ("RNN", 2, True, False, {}), ("RNN", 1, False, True, {"nonlinearity": "relu"}),
]  # fmt: skip


@pytest.mark.parametrize(("kind", "layers", "bidirectional", "batch_first", "kw"),
                         RECURRENT_CASES)  # fmt: skip
def test_a_recurrent_model_s_counted_step_equals_its_hand_count(
    fresh_guard, kind, layers, bidirectional, batch_first, kw
):
    b, t, i, h = 4, 5, 8, 16
    torch.manual_seed(0)
    model = _Recurrent(kind, i, h, layers, bidirectional, batch_first, **kw)
    ids = torch.arange(b * t).view((b, t) if batch_first else (t, b)) % V_SMALL
    rec = _counted_step(lambda: _loss(model(ids)), model.parameters())
    d = 2 if bidirectional else 1
    assert rec["flops"] == hand_count_recurrent(kind, i, h, layers, d, b, t, V_SMALL)
    assert rec["tokens"] == b * t and rec["not_counted"] == []
    assert rec["attention"] == "none counted"
    # the CPU LSTM runs oneDNN's kernel, counted by flop_formulas; GRU and RNN torch's own mm
    assert ("aten.mkldnn_rnn_layer" in rec["ops"]) == (kind == "LSTM")


class _Packed(torch.nn.Module):
    """Embedding -> pack_padded_sequence (lengths 5, 3, 2, 1) -> nn.LSTM -> Linear head on the
    packed rows."""

    lengths = torch.tensor([5, 3, 2, 1])

    def __init__(self, i, h):
        super().__init__()
        self.emb = torch.nn.Embedding(V_SMALL, i)
        self.rnn = torch.nn.LSTM(i, h)
        self.head = torch.nn.Linear(h, V_SMALL)

    def forward(self, ids):
        packed = torch.nn.utils.rnn.pack_padded_sequence(self.emb(ids), self.lengths)
        out, _ = self.rnn(packed)
        return self.head(out.data)


def test_a_packed_lstm_runs_torchs_cell_loop_and_is_counted_row_by_row(fresh_guard):
    torch.manual_seed(0)
    model = _Packed(8, 16)
    ids = torch.arange(20).view(5, 4) % V_SMALL  # T = 5, B = 4
    rec = _counted_step(lambda: _loss(model(ids)), model.parameters())
    # a packed sequence leaves oneDNN: torch's cell loop, counted by torch's own formulas, on
    # N = 5 + 3 + 2 + 1 = 11 rows (batch sizes per step 4, 3, 2, 1, 1):
    # forward 2*11*(4*16)*(8 + 16) = 33,792; backward 2x = 67,584 less the zero initial state's
    # gradient on the first step's 4 rows, 2*4*64*16 = 8,192: 59,392; head 3*2*11*16*11 = 11,616
    assert rec["flops"] == 33_792 + 59_392 + 11_616
    assert "aten.mkldnn_rnn_layer" not in rec["ops"] and rec["not_counted"] == []


def _flat_args(op, **values) -> list:
    """Positional arguments of ``op`` (its schema's order), None where not given."""
    names = [a.name for a in op.default._schema.arguments]
    return [values.get(n) for n in names]


@pytest.mark.filterwarnings("ignore:TF32 acceleration")  # mkldnn.flags on a CPU-only torch
@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_the_cudnn_formula_equals_torchs_own_count_of_the_same_layers(kind):
    from torch.utils.flop_counter import FlopCounterMode

    aten = torch.ops.aten
    counter = FlopCounterMode(display=False)
    extras = flop_formulas.Extras(torch, counter.flop_registry)
    assert extras.register() == list(flop_formulas.RECURRENT)  # torch 2.13 has none of them
    rnn = getattr(torch.nn, kind)(8, 16, num_layers=2, bidirectional=True)
    x = torch.randn(5, 4, 8)
    # independent count: with oneDNN off, the CPU runs torch's cell loop, counted by torch's
    # own mm formulas (forward only: no grad)
    with (
        torch.no_grad(),
        torch.backends.mkldnn.flags(enabled=False),
        FlopCounterMode(display=False) as own,
    ):
        rnn(x)
    weights = list(rnn._flat_weights)  # what nn.LSTM hands cuDNN: w_ih, w_hh, b_ih, b_hh ...
    fwd = counter.flop_registry[aten._cudnn_rnn](*_flat_args(aten._cudnn_rnn, input=x,
                                                             weight=weights))  # fmt: skip
    assert fwd == own.get_total_flops() > 0
    bwd = counter.flop_registry[aten._cudnn_rnn_backward]
    grads = {"input": x, "weight": weights, "grad_output": x}
    # input and weight gradients: 2x; input gradient only: 1x; no gradient came in: nothing
    assert bwd(*_flat_args(aten._cudnn_rnn_backward, **grads, output_mask=[1, 1, 1, 1])) == 2 * fwd
    assert bwd(*_flat_args(aten._cudnn_rnn_backward, **grads, output_mask=[1, 1, 1, 0])) == fwd
    assert bwd(*_flat_args(aten._cudnn_rnn_backward, input=x, weight=weights,
                           output_mask=[1, 1, 1, 1])) == 0  # fmt: skip
    assert extras.not_counted == []


def test_a_recurrent_formula_that_cannot_read_its_arguments_counts_nothing_and_says_so():
    from torch.utils.flop_counter import FlopCounterMode

    extras = flop_formulas.Extras(torch, dict(FlopCounterMode(display=False).flop_registry))
    extras.register()
    formula = extras.registry[torch.ops.aten.mkldnn_rnn_layer]
    assert formula("not a tensor", None, None, out_val=None) == 0
    assert extras.not_counted == ["aten.mkldnn_rnn_layer (unexpected arguments)"]


class _AddBmm(torch.nn.Module):
    """Embedding -> torch.addbmm of the embeddings with themselves (no formula in torch 2.13)
    added to a Linear head."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(V_SMALL, 6)
        self.head = torch.nn.Linear(6, V_SMALL)

    def forward(self, ids):
        x = self.emb(ids)
        gram = torch.addbmm(torch.zeros(6, 6), x.transpose(1, 2), x)
        return self.head(x) + gram.sum()


def test_an_op_that_does_products_with_no_formula_is_listed_as_not_counted(fresh_guard):
    model = _AddBmm()
    ids = torch.arange(15).view(3, 5) % V_SMALL
    rec = _counted_step(lambda: _loss(model(ids)), model.parameters())
    assert rec["not_counted"] == ["aten.addbmm (no FLOP formula)"]
    assert "aten.addbmm" not in rec["ops"]


# -- attention: sdpa, matmul or none counted -----------------------------------------------------
class _Attention(torch.nn.Module):
    """nanoGPT's CausalSelfAttention between an embedding and a head: its non-flash path
    (``q @ k^T``, causal mask, softmax, ``@ v``) or, with ``sdpa``,
    ``F.scaled_dot_product_attention``."""

    def __init__(self, c, n_head, t, sdpa):
        super().__init__()
        self.n_head, self.sdpa = n_head, sdpa
        self.emb = torch.nn.Embedding(V_SMALL, c)
        self.c_attn, self.c_proj = torch.nn.Linear(c, 3 * c), torch.nn.Linear(c, c)
        self.head = torch.nn.Linear(c, V_SMALL)
        self.register_buffer("bias", torch.tril(torch.ones(t, t)).view(1, 1, t, t))

    def forward(self, ids):
        x = self.emb(ids)
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        if self.sdpa:
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
            y = torch.nn.functional.softmax(att, dim=-1) @ v
        return self.head(self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c)))


def hand_count_attention(b, t, c, v, sdpa) -> int:
    """Executed FLOPs of one training step of ``_Attention``, by hand.

    Linear layers, 3x their forward 2 N in out (N = b t rows): c -> 3c, c -> c, c -> v:
    6 N c (4c + v). Attention forward: ``q @ k^T`` is, per sequence and head, (t x hs) @ (hs x t)
    = 2 t t hs, so 2 b t^2 c over the heads; ``att @ v`` the same: 4 b t^2 c. Backward by hand
    (bmm): each product's two gradients, 8 b t^2 c, so 12 b t^2 c; by torch's flash formula
    (SDPA, the CPU kernel mapped to it) 10 b t^2 c with the recompute of the scores, so
    14 b t^2 c. The full t x t square is counted even though causal. Mask, softmax: none.
    """
    return 6 * b * t * c * (4 * c + v) + (14 if sdpa else 12) * b * t * t * c


def test_the_attention_hand_count_gives_the_figure_worked_out_by_hand():
    # b 2, t 8, c 16, v 11: linear 6*16*16*(64 + 11) = 115,200; attention 12*2*64*16 = 24,576
    # by bmm (139,776 in all), 14*2*64*16 = 28,672 by SDPA (143,872 in all)
    assert hand_count_attention(2, 8, 16, 11, sdpa=False) == 139_776
    assert hand_count_attention(2, 8, 16, 11, sdpa=True) == 143_872


@pytest.mark.parametrize(("sdpa", "attention"), [(False, "matmul"), (True, "sdpa")])
def test_hand_written_attention_counts_as_matmul_and_sdpa_as_sdpa(fresh_guard, sdpa, attention):
    b, t, c = 2, 8, 16
    torch.manual_seed(0)
    model = _Attention(c, 2, t, sdpa)
    ids = torch.arange(b * t).view(b, t) % V_SMALL
    rec = _counted_step(lambda: _loss(model(ids)), model.parameters())
    assert rec["attention"] == attention and rec["not_counted"] == []
    assert rec["flops"] == hand_count_attention(b, t, c, V_SMALL, sdpa)


def test_hf_gpt2_eager_attention_with_padding_counts_as_matmul(fresh_guard):
    transformers = pytest.importorskip("transformers")
    b, t, c, layers, v = 2, 8, 16, 2, 32
    cfg = transformers.GPT2Config(n_layer=layers, n_embd=c, n_head=2, vocab_size=v,
                                  n_positions=16, bos_token_id=0, eos_token_id=0,
                                  attn_implementation="eager")  # fmt: skip
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg)
    ids = torch.arange(b * t).view(b, t) % v
    mask = torch.ones(b, t, dtype=torch.long)
    mask[1, 5:] = 0  # the second sequence padded after 5 tokens
    rec = _counted_step(lambda: model(input_ids=ids, attention_mask=mask, labels=ids).loss,
                        model.parameters())  # fmt: skip
    assert rec["attention"] == "matmul" and rec["not_counted"] == []
    # per layer, Conv1D (addmm) c -> 3c, c -> c, c -> 4c, 4c -> c: 12 c^2 per row; the tied
    # head c -> v; 3x forward. Eager attention: torch.matmul, as _Attention by hand: 12 b t^2 c.
    # 3*2*16*(12*16*16*2 + 16*32) + 12*2*2*64*16 = 3*2*16*6,656 + 49,152 = 688,128
    hand = 3 * 2 * b * t * (12 * c * c * layers + c * v) + 12 * layers * b * t * t * c
    assert rec["flops"] == hand == 688_128


class _Experts(torch.nn.Module):
    """Embedding -> a batched matmul with a weight (mixture-of-experts style, one expert per
    sequence) -> head; ``autocast`` runs it as an einsum under CPU bfloat16 autocast, whose
    operand is then a cast copy of the weight."""

    def __init__(self, autocast):
        super().__init__()
        self.autocast = autocast
        self.emb = torch.nn.Embedding(V_SMALL, 6)
        self.experts = torch.nn.Parameter(torch.randn(3, 6, 6) / 6)
        self.head = torch.nn.Linear(6, V_SMALL)

    def forward(self, ids):
        x = self.emb(ids)  # (3, 5, 6): sequence s goes to expert s
        if not self.autocast:
            return self.head(torch.bmm(x, self.experts))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = torch.einsum("btd,bde->bte", x, self.experts)
        return self.head(y.float())


@pytest.mark.parametrize("autocast", [False, True])
def test_a_batched_matmul_with_a_weight_is_not_attention(fresh_guard, autocast):
    model = _Experts(autocast)
    ids = torch.arange(15).view(3, 5) % V_SMALL
    rec = _counted_step(lambda: _loss(model(ids)), model.parameters())
    # bmm counted (forward and both gradients), yet a weight is one operand: no attention
    assert rec["ops"]["aten.bmm"] == 3 * 2 * 3 * 5 * 6 * 6  # 3x 2 * (3 experts * 5 rows) * 6*6
    assert rec["attention"] == "none counted"


# -- engine: records in, snapshot out ----------------------------------------------------------
def _counted(**over):
    rec = {"v": 1, "k": "flops_counted", "t": 10.0, "rank": 0, "step": 3, "flops": 6000,
           "tokens": 40, "samples": 2, "attention": "sdpa", "mapped": []}  # fmt: skip
    return records.validate({**rec, **over})


def test_the_snapshot_gives_counted_flops_per_token_beside_the_conventions():
    eng = Engine()
    assert eng.snapshot()["flops_per_token_counted"] is None
    eng.apply(_counted())
    snap = eng.snapshot()
    assert snap["flops_per_token_counted"] == 150.0  # 6000 FLOP / 40 tokens
    assert snap["flops_per_sample_counted"] == 3000.0  # 6000 FLOP / 2 sequences
    assert snap["flops_counted"] == {"step": 3, "flops": 6000.0, "tokens": 40, "samples": 2,
                                     "attention": "sdpa", "not_counted": []}  # fmt: skip
    eng.apply(_counted(rank=1, flops=1))  # another rank's count does not replace rank 0's
    assert eng.snapshot()["flops_per_token_counted"] == 150.0


def test_a_step_with_no_tokens_gives_flops_per_sample_but_no_per_token_figure():
    eng = Engine()
    eng.apply(_counted(tokens=None))
    snap = eng.snapshot()
    assert snap["flops_per_token_counted"] is None and snap["flops_counted"]["flops"] == 6000.0
    assert snap["flops_per_sample_counted"] == 3000.0  # 6000 FLOP / 2 samples (images, rows)
    eng.apply(_counted(tokens=None, samples=None))  # an older agent's record: neither count
    assert eng.snapshot()["flops_per_sample_counted"] is None


def test_no_attention_counted_in_a_model_with_heads_says_the_count_misses_it():
    eng = Engine()
    model = {"v": 1, "k": "model", "t": 9.0, "params": 10, "embedding_params": 0,
             "token_embedding_params": 0, "heads": 4}  # fmt: skip
    eng.apply(records.validate(model))
    eng.apply(_counted(attention="none counted"))
    assert any("misses attention" in n for n in eng.snapshot()["notes"])


@pytest.mark.parametrize(
    "bad", [{"attention": "maybe"}, {"flops": -1}, {"tokens": 0}, {"flops": float("inf")},
            {"not_counted": "aten.addbmm"}, {"not_counted": [1]}]
)  # fmt: skip
def test_a_malformed_counted_record_is_refused(bad):
    with pytest.raises(records.RecordError):
        _counted(**bad)
