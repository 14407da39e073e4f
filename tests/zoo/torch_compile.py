"""torch.compile(model) on a tiny model (the default inductor backend, on CPU), as the PyTorch
2 tutorials and nanoGPT's compile=True do; guards that the compiled model's steps, tokens and
losses are counted, and that the counted FLOPs are absent with the reason said (a dispatch
mode around compiled code would change what runs).
timeout: 300"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import zoo

V, D, B, T, STEPS = 32, 16, 4, 8, 8


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.fc = nn.Linear(D, D)
        self.head = nn.Linear(D, V)

    def forward(self, idx):
        return self.head(F.gelu(self.fc(self.emb(idx))))


torch.manual_seed(0)
gen = torch.Generator().manual_seed(22)
model = TinyLM()
compiled = torch.compile(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
tokens = samples = 0
losses = []
for step in range(1, STEPS + 1):
    x = torch.randint(0, V, (B, T), generator=gen)
    logits = compiled(x)
    loss = F.cross_entropy(logits.view(-1, V), x.roll(-1, dims=1).view(-1))
    tokens, samples = tokens + x.numel(), samples + x.size(0)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
    print(f"step {step} loss {losses[-1]:.5f}")

zoo(
    steps=STEPS,
    tokens=tokens,
    samples=samples,
    seq_len=T,
    params=sum(p.numel() for p in model.parameters()),
    losses=losses,
    loss_series="backward_loss",
)
