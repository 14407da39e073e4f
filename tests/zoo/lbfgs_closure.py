"""torch.optim.LBFGS with a closure, full-batch, as the PyTorch docs and classic style-transfer
or curve-fitting scripts use it: each optimizer.step(closure) evaluates the model several times
(forward and backward inside the closure); guards steps = optimizer.step() calls, and the
tokens of every evaluation."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import zoo

V, D, B, T, STEPS = 24, 8, 4, 6, 6

torch.manual_seed(0)
gen = torch.Generator().manual_seed(9)
model = nn.Sequential(nn.Embedding(V, D), nn.Tanh(), nn.Linear(D, V))
x = torch.randint(0, V, (B, T), generator=gen)
y = (x * 7 + 3) % V
optimizer = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=5, history_size=5)
evaluations = 0


def closure():
    global evaluations
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x).view(-1, V), y.view(-1))
    loss.backward()
    evaluations += 1
    return loss


for step in range(1, STEPS + 1):
    loss = optimizer.step(closure)
    print(f"step {step} loss {loss.item():.6f} evaluations {evaluations}")

# every evaluation is one forward of the full batch with gradients on: B x T tokens each
zoo(
    steps=STEPS,
    tokens=evaluations * B * T,
    samples=evaluations * B,
    seq_len=T,
    params=sum(p.numel() for p in model.parameters()),
)
