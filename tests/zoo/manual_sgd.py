"""The PyTorch tutorial "Learning PyTorch with Examples" style: no torch.optim at all, the
parameters updated by hand under torch.no_grad() (p -= lr * p.grad; p.grad = None); guards the
step clock for a loop without an optimizer (its training backward() calls), the root model and
tokens found without an optimizer step, and the train loss taken from backward().

70 steps (tutorials run thousands): fewer than the backward calls (or seconds) after which
trainmeter takes backward() as the clock live (trainmeter/agent/backward.py FALLBACK_CALLS),
so these steps are clocked when the script ends, as a short loop's are.
Counted FLOPs are taken at the 3rd optimizer step, so this loop has none (EXPECT: absent,
with the note saying so)."""

import torch
import torch.nn as nn
from _common import zoo

V, D, H, B, T, STEPS, learning_rate = 32, 16, 24, 5, 8, 70, 0.5


class TwoLayerNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(V, D)
        self.linear1 = nn.Linear(D, H)
        self.linear2 = nn.Linear(H, V)

    def forward(self, x):
        return self.linear2(torch.tanh(self.linear1(self.embed(x))))


torch.manual_seed(0)
gen = torch.Generator().manual_seed(5)
model = TwoLayerNet()
loss_fn = nn.CrossEntropyLoss()
tokens = samples = 0
losses = []
for t in range(STEPS):
    x = torch.randint(0, V, (B, T), generator=gen)
    y_pred = model(x)
    loss = loss_fn(y_pred.view(-1, V), x.flip(1).reshape(-1))
    tokens, samples = tokens + x.numel(), samples + x.size(0)
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= learning_rate * p.grad
            p.grad = None
    losses.append(loss.item())
    print(t, f"{losses[-1]:.6f}")

zoo(
    steps=STEPS,
    tokens=tokens,
    samples=samples,
    seq_len=T,
    params=sum(p.numel() for p in model.parameters()),
    losses=losses,
    loss_series="backward_loss",
)
