"""pytorch/examples word_language_model style: an LSTM language model fed sequence-first
batches (batchify into B columns, get_batch slices bptt rows: inputs of shape (T, B),
nn.LSTM's default batch_first=False), hidden state carried and detached between batches,
gradient clipping, AdamW; guards samples (B per step, axis 1) and seq_len (T, axis 0) read
from the right axes, and the LSTM's FLOPs counted."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import text_tokens, zoo

ntokens, emsize, nhid, nlayers = 256, 16, 24, 2
batch_size, bptt, clip, max_batches = 4, 16, 0.25, 10


class RNNModel(nn.Module):
    def __init__(self, ntoken, ninp, nhid, nlayers, dropout=0.2):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        self.nhid, self.nlayers = nhid, nlayers

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        decoded = self.decoder(self.drop(output)).view(-1, self.decoder.out_features)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, bsz, self.nhid),
                weight.new_zeros(self.nlayers, bsz, self.nhid))  # fmt: skip


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    return data.narrow(0, 0, nbatch * bsz).view(bsz, -1).t().contiguous()


def get_batch(source, i):
    seq_len = min(bptt, len(source) - 1 - i)
    return source[i : i + seq_len], source[i + 1 : i + 1 + seq_len].view(-1)


def repackage_hidden(h):
    return h.detach() if isinstance(h, torch.Tensor) else tuple(repackage_hidden(v) for v in h)


torch.manual_seed(1111)
train_data = batchify(text_tokens(4096), batch_size)  # (1024, 4)
model = RNNModel(ntokens, emsize, nhid, nlayers)
criterion = nn.NLLLoss()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)

model.train()
hidden = model.init_hidden(batch_size)
tokens = samples = 0
losses = []
for batch, i in enumerate(range(0, bptt * max_batches, bptt)):
    data, targets = get_batch(train_data, i)
    optimizer.zero_grad()
    hidden = repackage_hidden(hidden)
    output, hidden = model(data, hidden)
    tokens, samples = tokens + data.numel(), samples + data.size(1)  # (T, B): B sequences
    loss = criterion(output, targets)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    losses.append(loss.item())
    print(f"| batch {batch:3d} | loss {losses[-1]:5.4f}")

# The 3rd step, by hand, per token (a matmul row of k -> n is 2 k n FLOPs; backward twice it):
# an LSTM layer computes its 4 gates from the input (k = in) and from h (k = nhid), so
# 2 * 4 nhid (in + nhid) a token: layer 1 2*96*(16 + 24) = 7,680, layer 2 2*96*48 = 9,216;
# the decoder 2*24*256 = 12,288. x3 with the backward (the embedding trains, so layer 1's
# input needs its gradient too): 3 * 29,184 = 87,552 per token, 16 x 4 = 64 tokens.
per_token = 2 * 4 * nhid * (emsize + nhid) + 2 * 4 * nhid * (2 * nhid) + 2 * nhid * ntokens
zoo(
    steps=max_batches,
    tokens=tokens,
    samples=samples,
    seq_len=bptt,
    params=sum(p.numel() for p in model.parameters()),
    losses=losses,
    loss_series="backward_loss",
    counted_flops=3 * per_token * bptt * batch_size,
    attention="none counted",
)
