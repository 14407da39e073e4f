"""The tiny loop run as on a GPU node with the device and dtype declared by their everyday
names (tm --device "H100 SXM" --dtype bf16); guards that the alias resolves to a dense peak,
so MFU can be shown on a CPU run whose device is declared.
tm-args: --device "H100 SXM" --dtype bf16"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import zoo

V, D, B, T, STEPS = 50, 16, 4, 8, 10

torch.manual_seed(0)
gen = torch.Generator().manual_seed(20)
model = nn.Sequential(nn.Embedding(V, D), nn.Linear(D, D), nn.ReLU(), nn.Linear(D, V))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
tokens = samples = 0
losses = []
for step in range(1, STEPS + 1):
    x = torch.randint(0, V, (B, T), generator=gen)
    loss = F.cross_entropy(model(x).reshape(-1, V), x.reshape(-1))
    tokens, samples = tokens + x.numel(), samples + x.size(0)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    losses.append(loss.item())
    print(f"step {step} loss {losses[-1]:.8f}")

# the 3rd step, per token: D -> D 2*16*16 = 512 and D -> V 2*16*50 = 1,600, x3 with the
# backward: 6,336 per token, 32 tokens
zoo(
    steps=STEPS,
    tokens=tokens,
    samples=samples,
    seq_len=T,
    params=sum(p.numel() for p in model.parameters()),
    losses=losses,
    loss_series="backward_loss",
    counted_flops=3 * (2 * D * D + 2 * D * V) * B * T,
    attention="none counted",
)
