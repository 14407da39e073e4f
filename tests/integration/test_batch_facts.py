"""Batch facts: tokens per optimizer step stay right with gradient accumulation, variable batch
sizes and sequence lengths, and padding (docs/spec.md "Tokens and padding").

Under ``tm``, each step record's tokens equal a hand count of the batches the loop was given
(tests/fixtures/batch_facts_train.py); ``--pad-tokens skip`` counts only the attention mask's
ones, and the snapshot says which counting MFU uses. In process: the masks the agent refuses
(the no-device-sync invariant) and why."""

import json

import pytest
from conftest import FIXTURES, StandInAgent, losses, read_log, run_plain, run_tm

torch = pytest.importorskip("torch")

from trainmeter.agent.pad_tokens import ALL, NON_PAD, PadCounter  # noqa: E402
from trainmeter.agent.torch_taps import TorchTaps  # noqa: E402
from trainmeter.core import records  # noqa: E402
from trainmeter.core.engine import Engine  # noqa: E402

pytestmark = pytest.mark.slow
SCRIPT = FIXTURES / "batch_facts_train.py"
# Per optimizer step, its micro-batches [B, T, P]: gradient accumulation of 4 with batch sizes
# and sequence lengths that change within and across steps, a last step of 3 micro-batches (a
# short epoch end), and P pad positions at the end of each odd row.
SCHEDULE = [
    [[2, 7, 3], [3, 5, 1], [1, 9, 0], [4, 6, 2]],
    [[4, 8, 4], [2, 3, 1], [3, 7, 5], [1, 4, 0]],
    [[3, 6, 2], [3, 6, 2], [2, 10, 9], [4, 2, 1]],
    [[1, 5, 0], [2, 12, 6], [5, 3, 2]],
]


def every_position(step):
    """Hand count, pads included: B x T per micro-batch."""
    return sum(b * t for b, t, _ in step)


def non_pad(step):
    """Hand count without pads: the B // 2 odd rows each lose P positions."""
    return sum(b * t - (b // 2) * p for b, t, p in step)


def test_the_hand_counts_of_the_schedule():
    # worked out by hand from SCHEDULE, e.g. step 1 = 14 + 15 + 9 + 24 = 62 positions, of
    # which 3 + 1 + 0 + 2 x 2 = 8 are pads (rows 1 and 3 of the 4 x 6 batch): 54 tokens
    assert [every_position(s) for s in SCHEDULE] == [62, 63, 64, 44]
    assert [non_pad(s) for s in SCHEDULE] == [54, 49, 49, 34]


def _run(workdir, *flags):
    out = run_tm(["-q", "--no-web", *flags, SCRIPT, json.dumps(SCHEDULE)], workdir)
    assert out.returncode == 0, out.stderr
    steps = [r for r in read_log(workdir) if r["k"] == "step"]
    snap = json.loads(run_tm(["replay", "--json"], workdir).stdout)
    return out, steps, snap


def test_grad_accumulation_and_variable_shapes_give_the_hand_count_per_step(workdir):
    out, steps, snap = _run(workdir)
    assert [r["step"] for r in steps] == [1, 2, 3, 4]
    assert [r["tokens"] for r in steps] == [every_position(s) for s in SCHEDULE]
    assert [r["samples"] for r in steps] == [sum(b for b, _, _ in s) for s in SCHEDULE]
    assert snap["tokens"] == sum(map(every_position, SCHEDULE))
    assert snap["tokens_counting"] == ALL  # the default: pads are tokens
    # numerics unchanged (the same-numerics invariant)
    assert losses(out.stdout) == losses(run_plain([SCRIPT, json.dumps(SCHEDULE)], workdir).stdout)


def test_pad_tokens_skip_counts_the_attention_masks_ones(workdir):
    _, steps, snap = _run(workdir, "--pad-tokens", "skip")
    assert [r["tokens"] for r in steps] == [non_pad(s) for s in SCHEDULE]
    assert snap["tokens"] == sum(map(non_pad, SCHEDULE))
    assert snap["tokens_counting"] == NON_PAD
    run_start = read_log(workdir)[0]
    assert run_start["opts"]["pad_tokens"] == "skip"


def test_an_unknown_pad_tokens_value_is_a_usage_error(workdir):
    out = run_tm(["--pad-tokens", "sometimes", SCRIPT, "[]"], workdir)
    assert out.returncode == 2
    assert out.stderr.startswith("tm: argument --pad-tokens: invalid choice: 'sometimes'")
    assert not (workdir / ".trainmeter").exists()  # nothing ran


# -- in process: what the agent refuses to read -------------------------------------------------
class _Agent(StandInAgent):
    pad_skip = True  # tm --pad-tokens skip


ACCELERATOR = "the agent never reads an accelerator tensor's values"
IDS = torch.ones(2, 5, dtype=torch.long)
MASK = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])  # 8 real tokens of 10 positions


@pytest.mark.parametrize(
    ("mask", "tokens", "reason"),
    [
        (MASK, 8, None),
        (MASK.bool(), 8, None),
        (MASK * torch.tensor([[1], [2]]), 8, None),  # packed documents numbered 1, 2: nonzero
        (None, 10, "no attention_mask argument"),
        (MASK.to("meta"), 10, f"attention_mask on meta: {ACCELERATOR}"),
        (MASK.float(), 10, "attention_mask of dtype float32, not 0/1"),
        (MASK[:, :4], 10, "attention_mask not shaped like the token ids"),
    ],
)
def test_a_mask_is_counted_only_when_readable_on_the_cpu(fresh_guard, mask, tokens, reason):
    agent = _Agent()
    assert PadCounter(agent, torch).tokens(IDS, mask) == tokens
    expected = NON_PAD if reason is None else ALL
    assert agent.records == [("tokens_counting", {"rank": 0, "counting": expected,
                                                  "reason": reason})]  # fmt: skip


def test_what_is_counted_is_reported_only_when_it_changes(fresh_guard):
    agent = _Agent()
    pad = PadCounter(agent, torch)
    for mask in (MASK, MASK, None, None, MASK):
        pad.tokens(IDS, mask)
    assert [f["counting"] for _, f in agent.records] == [NON_PAD, ALL, NON_PAD]


def test_an_error_reading_a_mask_counts_all_positions_and_training_goes_on(fresh_guard, capsys):
    class Broken(torch.Tensor):
        def count_nonzero(self, *args, **kwargs):
            raise RuntimeError("forced error reading a mask (test)")

    agent = _Agent()
    pad = PadCounter(agent, torch)
    assert pad.tokens(IDS, MASK.as_subclass(Broken)) == 10
    assert pad.tokens(IDS, MASK) == 10  # off from then on: every position
    assert capsys.readouterr().err.count("pad-token count stopped after an internal error") == 1
    assert agent.records[-1][1]["reason"] == "the count stopped after an internal error"


def test_the_taps_count_non_pad_tokens_of_every_micro_batch(fresh_guard):
    agent = _Agent()
    taps = TorchTaps(agent, torch)
    taps.attach()
    try:
        model = _MaskedLM()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(2):  # the first step is counted by discovery, the second by the sender
            model(IDS, attention_mask=MASK).sum().backward()
            model(IDS[:1], attention_mask=MASK[:1]).sum().backward()  # 3 real tokens
            opt.step()
        steps, _ = agent.sender.counts()  # as the sender thread counts the queued calls
        assert steps == [(1, 11, 3), (2, 11, 3)]
    finally:
        taps.detach()


class _MaskedLM(torch.nn.Module):
    """Takes an ``attention_mask`` keyword, as Hugging Face models do (and ignores it)."""

    def __init__(self):
        super().__init__()
        self.emb, self.out = torch.nn.Embedding(3, 4), torch.nn.Linear(4, 3)

    def forward(self, input_ids, attention_mask=None):
        return self.out(self.emb(input_ids))


# -- engine: which counting the snapshot (and so MFU) states -------------------------------------
def _counting(counting, reason=None, rank=0):
    rec = {"v": 1, "k": "tokens_counting", "t": 5.0, "rank": rank, "counting": counting,
           "reason": reason}  # fmt: skip
    return records.validate(rec)


def test_the_snapshot_says_which_tokens_mfu_counts():
    eng = Engine()
    assert eng.snapshot()["tokens_counting"] == ALL  # the default
    eng.opts["pad_tokens"] = "skip"
    assert eng.snapshot()["tokens_counting"] == NON_PAD  # asked for, nothing refused yet
    eng.apply(_counting(ALL, "attention_mask on cuda: ..."))
    snap = eng.snapshot()
    assert snap["tokens_counting"] == ALL
    assert "--pad-tokens skip: attention_mask on cuda: ...; all positions counted" in snap["notes"]
    eng.apply(_counting(NON_PAD))
    assert eng.snapshot()["tokens_counting"] == "mixed"
    other = Engine()
    other.apply(_counting(ALL, "x", rank=1))  # only rank 0 says what the step clock counts
    snap = other.snapshot()
    assert snap["tokens_counting"] == ALL and not any("--pad-tokens" in n for n in snap["notes"])


def test_an_unknown_counting_is_refused():
    with pytest.raises(records.RecordError):
        _counting("some")
