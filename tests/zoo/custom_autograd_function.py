"""A custom torch.autograd.Function in the model: a straight-through estimator that rounds
activations to a 4-level grid in the forward and passes the gradient unchanged in the backward
(BinaryConnect / quantization-aware training style); guards that a Function with its own
backward is trained and counted as torch runs it."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import zoo

V, D, H, B, T, STEPS = 40, 16, 32, 4, 8, 10


class RoundSTE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return torch.round(x.clamp(-1, 1) * 1.5) / 1.5

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output  # straight through


class QuantLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.fc = nn.Linear(D, H)
        self.out = nn.Linear(H, V)

    def forward(self, idx):
        return self.out(RoundSTE.apply(torch.tanh(self.fc(self.emb(idx)))))


torch.manual_seed(0)
gen = torch.Generator().manual_seed(18)
model = QuantLM()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
tokens = samples = 0
losses = []
for step in range(1, STEPS + 1):
    x = torch.randint(0, V, (B, T), generator=gen)
    loss = F.cross_entropy(model(x).view(-1, V), x.roll(-1, dims=1).view(-1))
    tokens, samples = tokens + x.numel(), samples + x.size(0)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
    print(f"step {step} loss {losses[-1]:.6f}")

# the 3rd step, per token: fc 2*16*32 = 1,024 and out 2*32*40 = 2,560, x3 with the backward
# (the STE passes the gradient through, so fc's input gradient is computed): 32 tokens
zoo(
    steps=STEPS,
    tokens=tokens,
    samples=samples,
    seq_len=T,
    params=sum(p.numel() for p in model.parameters()),
    losses=losses,
    loss_series="backward_loss",
    counted_flops=3 * (2 * D * H + 2 * H * V) * B * T,
    attention="none counted",
)
