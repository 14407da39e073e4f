"""User code with hooks of its own, registered and removed while training, as debugging and
monitoring snippets do: a global optimizer post-hook
(torch.optim.optimizer.register_optimizer_step_post_hook) that counts steps and is removed
after step 2, per-module forward hooks for activation statistics added at step 3 and removed
at step 6, a forward pre-hook on the model, and a per-optimizer step pre-hook reading the
gradient norm; guards that trainmeter's own hooks and the user's neither collide nor change
what either sees."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import zoo
from torch.optim.optimizer import register_optimizer_step_post_hook

V, D, H, B, T, STEPS = 40, 16, 32, 4, 8, 10


class MLPLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.fc = nn.Linear(D, H)
        self.out = nn.Linear(H, V)

    def forward(self, idx):
        return self.out(F.relu(self.fc(self.emb(idx))))


torch.manual_seed(0)
gen = torch.Generator().manual_seed(17)
model = MLPLM()
optimizer = torch.optim.SGD(model.parameters(), lr=0.3, momentum=0.9)

seen = {"post": 0, "pre_forward": 0}
stats = []


def count_steps(opt, args, kwargs):
    seen["post"] += 1


def grad_norm(opt, args, kwargs):
    norm = torch.sqrt(sum((p.grad**2).sum() for p in model.parameters()))
    print(f"  grad norm {norm.item():.6f}")


def input_shape(module, args):
    seen["pre_forward"] += 1


def activation_stats(name):
    def hook(module, inputs, output):
        stats.append((name, output.mean().item(), output.std().item()))

    return hook


post_handle = register_optimizer_step_post_hook(count_steps)
pre_handle = optimizer.register_step_pre_hook(grad_norm)
model.register_forward_pre_hook(input_shape)
act_handles = []
tokens = samples = 0
losses = []
for step in range(1, STEPS + 1):
    if step == 3:
        act_handles = [m.register_forward_hook(activation_stats(n))
                       for n, m in model.named_children()]  # fmt: skip
    x = torch.randint(0, V, (B, T), generator=gen)
    loss = F.cross_entropy(model(x).view(-1, V), x.roll(-1, dims=1).view(-1))
    tokens, samples = tokens + x.numel(), samples + x.size(0)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step == 2:
        post_handle.remove()  # outside the hook: torch iterates its hooks while calling them
    if step == 6:
        for h in act_handles:
            h.remove()
    losses.append(loss.item())
    print(f"step {step} loss {losses[-1]:.6f} post-hook calls {seen['post']}")
print(f"forward pre-hook calls {seen['pre_forward']}")
for name, mean, std in stats:
    print(f"  {name} mean {mean:.6f} std {std:.6f}")
assert seen == {"post": 2, "pre_forward": STEPS} and len(stats) == 3 * 4

# the 3rd step, per token: fc 2*16*32 = 1,024 and out 2*32*40 = 2,560, x3 with the backward:
# 10,752 per token, 32 tokens (the statistics hooks add no matmul)
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
