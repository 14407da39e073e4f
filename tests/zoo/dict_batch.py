"""A model called with the whole batch dict, model(batch), that unpacks "input_ids" and
"labels" itself, as custom training loops over Hugging Face-style collators often do; guards
the tokens, samples and seq_len found inside the dict."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import zoo

V, D, B, T, STEPS = 50, 16, 3, 9, 10


class DictLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.head = nn.Linear(D, V)

    def forward(self, batch):
        logits = self.head(self.emb(batch["input_ids"]))
        return F.cross_entropy(logits.view(-1, V), batch["labels"].view(-1))


torch.manual_seed(0)
gen = torch.Generator().manual_seed(13)
model = DictLM()
optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
tokens = samples = 0
losses = []
for step in range(1, STEPS + 1):
    ids = torch.randint(0, V, (B, T), generator=gen)
    batch = {"input_ids": ids, "labels": ids.roll(-1, dims=1)}
    loss = model(batch)
    tokens, samples = tokens + ids.numel(), samples + ids.size(0)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    losses.append(loss.item())
    print(f"step {step} loss {losses[-1]:.6f}")

# the 3rd step: the Linear D -> V 2*16*50 = 1,600 a token, x3 with the backward, 27 tokens
zoo(
    steps=STEPS,
    tokens=tokens,
    samples=samples,
    seq_len=T,
    params=sum(p.numel() for p in model.parameters()),
    losses=losses,
    loss_series="backward_loss",
    counted_flops=3 * 2 * D * V * B * T,
)
