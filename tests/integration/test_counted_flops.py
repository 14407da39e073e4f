"""Counted FLOPs: one real step under torch's FlopCounterMode (docs/spec.md "Counted FLOPs").

The tiny GPT's counted step against a hand count of its matmuls, under ``tm``; numerics
unchanged; an error inside counting ends it and leaves the loop alone (invariant 1); no hook
stays behind once the count is done; and the engine's side (records in, snapshot out)."""

import importlib.util
import json
import sys

import pytest
from conftest import EXAMPLE, FIXTURES, StandInAgent, losses, read_log, run_plain, run_tm

torch = pytest.importorskip("torch")

from torch.nn.modules import module as torch_module  # noqa: E402
from torch.optim import optimizer as torch_optimizer  # noqa: E402

from trainmeter.agent import flop_count, guard  # noqa: E402
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
    assert counted["attention"] == "counted"
    hand = hand_count_per_token(_example_config(), T)
    assert snap["flops_per_token_counted"] == pytest.approx(hand, rel=0.01)
    # beside the conventions, never in their place (invariant 3)
    assert set(snap["flops_per_token"]) == {"hf", "megatron", "titan", "embeddings"}
    rec = next(r for r in read_log(workdir) if r["k"] == "flops_counted")
    assert sorted(rec["mapped"]) == sorted(o for o, _ in flop_count._SAME_FORMULA)
    step3 = next(r for r in read_log(workdir) if r["k"] == "step" and r["step"] == 3)
    assert rec["tokens"] == step3["tokens"]
    # numerics unchanged (invariant 7): the counted step's loss and every other are the same
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
    assert sent[0]["attention"] == "none counted"
    assert _hooks() == before


def test_after_the_count_the_loop_runs_with_no_counter_hook(fresh_guard):
    agent = _Agent()
    taps = TorchTaps(agent, torch)
    taps.attach()
    try:
        _train(4)  # the counter's hooks are gone after the count and one more module call
        assert taps.flop_count.state == "off" and taps.flop_count.done
        assert taps.flop_count._handles == {}
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


# -- engine: records in, snapshot out ----------------------------------------------------------
def _counted(**over):
    rec = {"v": 1, "k": "flops_counted", "t": 10.0, "rank": 0, "step": 3, "flops": 6000,
           "tokens": 40, "attention": "counted", "mapped": []}  # fmt: skip
    return records.validate({**rec, **over})


def test_the_snapshot_gives_counted_flops_per_token_beside_the_conventions():
    eng = Engine()
    assert eng.snapshot()["flops_per_token_counted"] is None
    eng.apply(_counted())
    snap = eng.snapshot()
    assert snap["flops_per_token_counted"] == 150.0  # 6000 FLOP / 40 tokens
    assert snap["flops_counted"] == {"step": 3, "flops": 6000.0, "tokens": 40,
                                     "attention": "counted"}  # fmt: skip
    eng.apply(_counted(rank=1, flops=1))  # another rank's count does not replace rank 0's
    assert eng.snapshot()["flops_per_token_counted"] == 150.0


def test_a_step_with_no_tokens_gives_flops_but_no_per_token_figure():
    eng = Engine()
    eng.apply(_counted(tokens=None))
    snap = eng.snapshot()
    assert snap["flops_per_token_counted"] is None and snap["flops_counted"]["flops"] == 6000.0


def test_no_attention_counted_in_a_model_with_heads_says_the_count_misses_it():
    eng = Engine()
    model = {"v": 1, "k": "model", "t": 9.0, "params": 10, "embedding_params": 0,
             "token_embedding_params": 0, "heads": 4}  # fmt: skip
    eng.apply(records.validate(model))
    eng.apply(_counted(attention="none counted"))
    assert any("misses attention" in n for n in eng.snapshot()["notes"])


@pytest.mark.parametrize(
    "bad", [{"attention": "maybe"}, {"flops": -1}, {"tokens": 0}, {"flops": float("inf")}]
)
def test_a_malformed_counted_record_is_refused(bad):
    with pytest.raises(records.RecordError):
        _counted(**bad)
