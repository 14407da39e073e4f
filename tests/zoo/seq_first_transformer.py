"""pytorch/examples word_language_model's TransformerModel: nn.TransformerEncoder with the
default batch_first=False, fed (T, B) batches with a causal float mask; guards samples (B per
step) and seq_len (T) read from the right axes and the attention counted as "sdpa"
(nn.MultiheadAttention calls F.scaled_dot_product_attention)."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import text_tokens, zoo

ntokens, emsize, nhead, nhid, nlayers = 256, 32, 4, 64, 2
batch_size, bptt, max_batches = 4, 12, 10


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, dropout=0.1, max_len=64):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, 1, d_model)
        pe[:, 0, 0::2] = torch.sin(position * div_term)
        pe[:, 0, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe)

    def forward(self, x):
        return self.dropout(x + self.pe[: x.size(0)])


class TransformerModel(nn.Module):
    def __init__(self, ntoken, ninp, nhead, nhid, nlayers, dropout=0.0):
        super().__init__()
        self.pos_encoder = PositionalEncoding(ninp, dropout)
        layer = nn.TransformerEncoderLayer(ninp, nhead, nhid, dropout)
        self.transformer_encoder = nn.TransformerEncoder(layer, nlayers,
                                                         enable_nested_tensor=False)  # fmt: skip
        self.encoder = nn.Embedding(ntoken, ninp)
        self.decoder = nn.Linear(ninp, ntoken)
        self.ninp = ninp

    def forward(self, src):
        mask = nn.Transformer.generate_square_subsequent_mask(len(src))
        src = self.pos_encoder(self.encoder(src) * math.sqrt(self.ninp))
        output = self.transformer_encoder(src, mask)
        return F.log_softmax(self.decoder(output), dim=-1)


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    return data.narrow(0, 0, nbatch * bsz).view(bsz, -1).t().contiguous()


torch.manual_seed(1111)
train_data = batchify(text_tokens(4096), batch_size)
model = TransformerModel(ntokens, emsize, nhead, nhid, nlayers)
criterion = nn.NLLLoss()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
tokens = samples = 0
losses = []
model.train()
for batch, i in enumerate(range(0, bptt * max_batches, bptt)):
    data, targets = train_data[i : i + bptt], train_data[i + 1 : i + 1 + bptt].reshape(-1)
    model.zero_grad()
    output = model(data)
    tokens, samples = tokens + data.numel(), samples + data.size(1)  # (T, B)
    loss = criterion(output.view(-1, ntokens), targets)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
    optimizer.step()
    losses.append(loss.item())
    print(f"| batch {batch:3d} | loss {losses[-1]:5.4f}")

# The 3rd step, by hand, per token (a matmul row k -> n is 2 k n; backward twice it, every
# input needs a gradient as the embedding trains): per layer the in-projection d -> 3d
# 2*3*32*32 = 6,144, the out-projection 2*32*32 = 2,048, the feed-forward d -> f -> d
# 2*2*32*64 = 8,192: 16,384, x3 = 49,152; attention over T = 12 keys, heads summed, 4 T d
# forward and 10 T d backward (the SDPA kernel's five products): 14*12*32 = 5,376; the
# decoder 2*32*256 = 16,384, x3 = 49,152. 2 layers: 2*(49,152 + 5,376) + 49,152 = 158,208
# per token, 12 x 4 = 48 tokens.
d, f, T = emsize, nhid, bptt
per_token = nlayers * (3 * (2 * 3 * d * d + 2 * d * d + 2 * 2 * d * f) + 14 * T * d)
per_token += 3 * 2 * d * ntokens
zoo(
    steps=max_batches,
    tokens=tokens,
    samples=samples,
    seq_len=bptt,
    params=sum(p.numel() for p in model.parameters()),
    losses=losses,
    loss_series="backward_loss",
    counted_flops=per_token * bptt * batch_size,
    attention="sdpa",
)
