"""Patterns a new user's trial found beyond the zoo, in process: a sequence-first LSTM fed a
PackedSequence, a model whose own call takes a PackedSequence, token ids under another keyword
(fairseq's ``src_tokens``), a model made of separate top-level modules (char-rnn), a validation
written without ``no_grad``, a classifier head that is no MLP, and ``torch.autograd.backward``
on a list of losses. Counts by hand in the comments."""

import time

import pytest
from conftest import StandInAgent

torch = pytest.importorskip("torch")

from trainmeter.agent.torch_taps import TorchTaps  # noqa: E402

pytestmark = pytest.mark.slow
nn = torch.nn


@pytest.fixture
def taps(fresh_guard):
    t = TorchTaps(StandInAgent(), torch)
    t.attach()
    yield t
    t.detach()


def _steps(taps):
    return taps.agent.sender.counts()[0]


def _fit(model, batches, loss_of, taps=None):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for batch in batches:
        loss_of(model, batch).backward()
        opt.step()
        opt.zero_grad()


def test_a_sequence_first_lstm_fed_a_packed_sequence_reads_its_batch_axis(taps):
    class Packed(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.lstm, self.out = nn.Embedding(10, 4), nn.LSTM(4, 8), nn.Linear(8, 10)

        def forward(self, ids):  # (T=4, B=6), every sequence 4 long
            lengths = torch.full((ids.shape[1],), ids.shape[0])
            packed = nn.utils.rnn.pack_padded_sequence(self.emb(ids), lengths)
            out, _ = self.lstm(packed)
            return self.out(nn.utils.rnn.pad_packed_sequence(out)[0])

    torch.manual_seed(0)
    batches = [torch.randint(0, 10, (4, 6)) for _ in range(3)]
    _fit(Packed(), batches, lambda m, x: m(x).logsumexp(-1).mean())
    assert [(t, s) for _, t, s in _steps(taps)] == [(24, 6)] * 3  # 4 x 6 tokens, 6 samples
    (model,) = taps.agent.models
    assert model["seq_len"] == 4 and model["batch_axis"] == 1


def test_a_packed_sequence_given_to_the_model_counts_its_sequences_as_samples(taps):
    """The model's own call takes a PackedSequence of token ids (pack_sequence outside it):
    its data is every position one after another, so its first axis is no batch (samples
    read as tokens and the length as 1). By hand, lengths 3, 2, 2, 1: batch_sizes 4, 3, 1;
    8 tokens, 4 samples, seq_sq 9 + 4 + 4 + 1 = 18 = 1 x 4 + 3 x 3 + 5 x 1."""

    class Packed(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.gru, self.out = nn.Embedding(10, 4), nn.GRU(4, 8), nn.Linear(8, 3)

        def forward(self, packed):
            e = nn.utils.rnn.PackedSequence(
                self.emb(packed.data),
                packed.batch_sizes,
                packed.sorted_indices,
                packed.unsorted_indices,
            )
            return self.out(self.gru(e)[1][-1])

    torch.manual_seed(0)
    seqs = [torch.randint(0, 10, (n,)) for n in (2, 3, 1, 2)]  # unsorted: enforce_sorted off
    batches = [nn.utils.rnn.pack_sequence(seqs, enforce_sorted=False) for _ in range(3)]
    _fit(Packed(), batches, lambda m, x: m(x).logsumexp(-1).mean())
    assert [(t, s) for _, t, s in _steps(taps)] == [(8, 4)] * 3
    reader = taps.agent.sender.reader
    assert taps.count_call((batches[0],), {}) == (8, 4, 18)  # the sender's count of a call
    assert reader.batch_axis == 0
    (model,) = taps.agent.models
    assert model["seq_len"] == 2  # the first batch's positions per sample: 8 // 4


def test_token_ids_under_another_keyword_are_counted(taps):
    class Fairseq(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.out = nn.Embedding(10, 4), nn.Linear(4, 10)

        def forward(self, src_tokens, src_lengths):
            return self.out(self.emb(src_tokens))

    batches = [torch.randint(0, 10, (3, 8)) for _ in range(3)]
    lengths = torch.full((3,), 8)
    _fit(Fairseq(), batches, lambda m, x: m(src_tokens=x, src_lengths=lengths).mean())
    assert [(t, s) for _, t, s in _steps(taps)] == [(24, 3)] * 3  # 3 x 8 tokens


def test_a_model_of_separate_top_level_modules_is_described_whole(taps):
    torch.manual_seed(0)
    emb, rnn, head = nn.Embedding(10, 4), nn.GRU(4, 8, batch_first=True), nn.Linear(8, 10)
    params = [*emb.parameters(), *rnn.parameters(), *head.parameters()]
    opt = torch.optim.SGD(params, lr=0.1)
    for _ in range(3):
        x = torch.randint(0, 10, (2, 5))
        out, _ = rnn(emb(x))
        head(out).logsumexp(-1).mean().backward()
        opt.step()
        opt.zero_grad()
    assert [(t, s) for _, t, s in _steps(taps)] == [(10, 2)] * 3  # fed to the embedding
    (model,) = taps.agent.models
    # 10 x 4 + GRU 3 x 8 x (4 + 8) + 2 x 3 x 8 + head 8 x 10 + 10 = 40 + 288 + 48 + 90 = 466
    assert model["params"] == 466 == sum(p.numel() for p in params)
    assert model["seq_len"] == 5


def test_a_validation_without_no_grad_is_eval_time_and_training_in_eval_mode_is_not(taps):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(4):
        model(torch.randint(0, 10, (2, 5))).mean().backward()
        opt.step()
        opt.zero_grad()
        if step == 1:  # a tutorial's validation: eval() but gradients on, no backward
            model.eval()
            model(torch.randint(0, 10, (2, 5))).mean().item()
            time.sleep(0.05)
            model.train()
    (span,) = taps.agent.spans("eval")
    assert span[2] >= 0.05
    model.eval()  # then trained in eval mode: a backward, not an evaluation
    for _ in range(2):
        model(torch.randint(0, 10, (2, 5))).mean().backward()
        opt.step()
    assert len(taps.agent.spans("eval")) == 1


def test_a_classifier_head_is_no_mlp_width(taps):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(10, 16), nn.Linear(16, 3))  # D -> 3 classes
    batches = [torch.randint(0, 10, (2, 5)) for _ in range(2)]
    _fit(model, batches, lambda m, x: m(x).mean())
    (model_record,) = taps.agent.models
    assert model_record["ffn"] is None


def test_backward_on_a_list_of_losses_records_their_sum(taps):
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sums = []
    for _ in range(3):
        a = model(torch.randn(2, 4)).square().mean()
        b = model(torch.randn(2, 4)).abs().mean()
        torch.autograd.backward([a, b])
        opt.step()
        opt.zero_grad()
        sums.append(a.item() + b.item())
    taps.finish()
    got = [r["value"] for k, r in taps.agent.records if k == "series"]
    assert got == pytest.approx(sums, rel=1e-12)
