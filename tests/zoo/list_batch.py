"""A model called with the DataLoader's batch as one list, model(batch), [input_ids, labels]
unpacked inside (the default collate of (x, y) pairs gives a list), as many small research
loops do; guards the tokens, samples and seq_len found inside the list."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import zoo
from torch.utils.data import DataLoader, TensorDataset

V, D, B, T, N = 50, 16, 4, 7, 40


class ListLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.head = nn.Linear(D, V)

    def forward(self, batch):
        input_ids, labels = batch
        logits = self.head(self.emb(input_ids))
        return F.cross_entropy(logits.view(-1, V), labels.view(-1))


torch.manual_seed(0)
gen = torch.Generator().manual_seed(14)
ids = torch.randint(0, V, (N, T), generator=gen)
loader = DataLoader(TensorDataset(ids, ids.roll(-1, dims=1)), batch_size=B, shuffle=True,
                    generator=torch.Generator().manual_seed(15))  # fmt: skip
model = ListLM()
optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
tokens = samples = steps = 0
losses = []
for batch in loader:
    loss = model(batch)
    tokens, samples = tokens + batch[0].numel(), samples + batch[0].size(0)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    steps += 1
    losses.append(loss.item())
    print(f"step {steps} loss {losses[-1]:.6f}")

# the 3rd step: the Linear D -> V 2*16*50 = 1,600 a token, x3 with the backward, 28 tokens
zoo(
    steps=steps,
    tokens=tokens,
    samples=samples,
    seq_len=T,
    params=sum(p.numel() for p in model.parameters()),
    losses=losses,
    loss_series="backward_loss",
    counted_flops=3 * 2 * D * V * B * T,
)
