"""The PyTorch tutorial "How to save memory by fusing the optimizer step into the backward
pass": one Adam per parameter, stepped (and its gradient dropped) in a
register_post_accumulate_grad_hook during backward(); the loop itself only calls backward().
Guards the step clock (the first of these optimizers to step: once per backward), the root
model (the whole model, although that optimizer holds one parameter) and the step's FLOPs."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import zoo

V, D, H, B, T, STEPS = 64, 16, 48, 4, 10, 10


class MLPLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(V, D)
        self.fc1 = nn.Linear(D, H)
        self.fc2 = nn.Linear(H, D)
        self.lm_head = nn.Linear(D, V)

    def forward(self, idx):
        x = self.wte(idx)
        return self.lm_head(x + self.fc2(F.gelu(self.fc1(x))))


torch.manual_seed(0)
gen = torch.Generator().manual_seed(4)
model = MLPLM()
optimizer_dict = {p: torch.optim.Adam([p], lr=1e-2, foreach=False) for p in model.parameters()}


def optimizer_hook(parameter) -> None:
    optimizer_dict[parameter].step()
    optimizer_dict[parameter].zero_grad()


for p in model.parameters():
    p.register_post_accumulate_grad_hook(optimizer_hook)

tokens = samples = 0
losses = []
for step in range(1, STEPS + 1):
    x = torch.randint(0, V, (B, T), generator=gen)
    logits = model(x)
    tokens, samples = tokens + x.numel(), samples + x.size(0)
    loss = F.cross_entropy(logits.view(-1, V), x.roll(1, dims=1).view(-1))
    loss.backward()  # every parameter's optimizer steps inside
    losses.append(loss.item())
    print(f"step {step} loss {losses[-1]:.6f}")

# the 3rd step, per token: fc1 2*16*48 = 1,536, fc2 2*48*16 = 1,536, lm_head 2*16*64 = 2,048,
# x3 with the backward (the embedding trains): 15,360 per token, 4 x 10 = 40 tokens
zoo(
    steps=STEPS,
    tokens=tokens,
    samples=samples,
    seq_len=T,
    params=sum(p.numel() for p in model.parameters()),
    losses=losses,
    loss_series="backward_loss",
    counted_flops=3 * (2 * D * H + 2 * H * D + 2 * D * V) * B * T,
    attention="none counted",
)
