"""A model put in eval mode once (model.eval(), to switch dropout off for good) and then trained
in eval mode throughout, as some fine-tuning scripts do; guards that training in eval mode is
not taken for evaluation and that every figure of the loop is still counted."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from _common import zoo

V, D, H, B, T, STEPS = 48, 16, 32, 4, 12, 10


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.hidden = nn.Linear(D, H)
        self.drop = nn.Dropout(0.1)
        self.out = nn.Linear(H, V)

    def forward(self, idx):
        return self.out(self.drop(F.relu(self.hidden(self.emb(idx)))))


torch.manual_seed(0)
gen = torch.Generator().manual_seed(3)
model = TinyLM()
model.eval()  # dropout off: the whole run trains in eval mode
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
tokens = samples = 0
losses = []
for step in range(1, STEPS + 1):
    x = torch.randint(0, V, (B, T), generator=gen)
    logits = model(x)
    loss = F.cross_entropy(logits.view(-1, V), x.roll(-1, dims=1).view(-1))
    tokens, samples = tokens + x.numel(), samples + x.size(0)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
    print(f"step {step} loss {losses[-1]:.6f}")

# the 3rd step, per token: Linear D -> H 2*16*32 = 1,024 and H -> V 2*32*48 = 3,072, each x3
# with the backward (the embedding's output needs a gradient): 12,288 per token, 48 tokens
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
